"""Shared fixtures: one throwaway PostgreSQL per test run, a template database with the
extension installed, and a fresh database cloned from it for every test that asks for one.

Set PGQUEUE_TEST_DSN (a superuser connection string) to run against an existing server
instead. A run in which the server cannot start fails; it never skips.
"""

from __future__ import annotations

import itertools
import os
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import LiteralString

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from helpers import server_pg_config
from pgqueue.embedded import EmbeddedPostgres

REPO = Path(__file__).resolve().parents[1]
TEMPLATE_DB = "pgqueue_template"
PLAIN_TEMPLATE_DB = "pgqueue_plain_template"


@dataclass(frozen=True)
class Server:
    """Where the test server is, and how to reach one of its databases."""

    admin_dsn: str
    embedded: EmbeddedPostgres | None

    def dsn(self, dbname: str, **params: str) -> str:
        return make_conninfo(self.admin_dsn, dbname=dbname, **params)

    @property
    def host(self) -> str:
        return str(conninfo_to_dict(self.admin_dsn).get("host", "127.0.0.1"))

    @property
    def port(self) -> int:
        return int(str(conninfo_to_dict(self.admin_dsn).get("port", 5432)))

    @property
    def user(self) -> str:
        return str(conninfo_to_dict(self.admin_dsn).get("user", "postgres"))

    def libpq_env(self) -> dict[str, str]:
        """Environment for command-line clients (psql, pg_regress, pg_prove, pg_dump)."""
        env = dict(os.environ)
        env.update(PGHOST=self.host, PGPORT=str(self.port), PGUSER=self.user)
        return env


class Relay:
    """A TCP relay to the test server on 127.0.0.1, ``port``: a test that needs to act on the
    bytes between a client and the server (hold them back, interrupt on one) overrides
    :meth:`passing`, which sees each chunk before it is passed on."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((self._server.host, self._server.port))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def passing(self, data: bytes, answers: bool) -> bytes | None:
        """Called with each chunk before it goes on (``answers``: it comes from the server); may
        return the bytes to pass on instead."""
        return None

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                instead = self.passing(data, answers)
                dst.sendall(data if instead is None else instead)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


class MadeUpPid(Relay):
    """A relay that, as PgBouncer and pgcat do, gives its clients a made-up backend process id
    (:data:`PID`) instead of the server's: it rewrites the BackendKeyData message that comes
    right before the first ReadyForQuery of a connection's start."""

    PID = 1234567891  # above any pid_max: no process of the server has it

    def passing(self, data: bytes, answers: bool) -> bytes | None:
        if not answers:
            return None
        return re.sub(rb"(K\x00\x00\x00\x0c).{4}(.{4}Z\x00\x00\x00\x05)",
                      lambda m: m.group(1) + self.PID.to_bytes(4, "big") + m.group(2), data, flags=re.S)


def installed_build_problems() -> list[str]:
    """What makes the local server's pgqueue files other than this tree's build: the full script
    older than extension/src (or the control file), the plain scripts likewise, or an installed
    file that differs from the tree's. Every suite (pytest, pg_regress, isolation, pgTAP) runs
    CREATE EXTENSION from the server's files: after an edit of extension/src without `make &&
    make install`, they tested the copy installed before and passed (a review)."""
    version = re.search(r"^default_version\s*=\s*'([^']+)'", (REPO / "pgqueue.control").read_text(), re.M)
    assert version is not None
    sources = [REPO / "pgqueue.control", *(REPO / "extension" / "src").rglob("*.sql")]
    built = REPO / "build" / f"pgqueue--{version[1]}.sql"
    plain = REPO / "python" / "pgqueue" / "sql" / f"pgqueue--{version[1]}.sql"
    problems = [f"{p.relative_to(REPO)} is missing or older than extension/src" for p, skip in
                ((built, None), (plain, "dump.sql"))  # (the Makefile's SRC and SRC_PLAIN)
                if not p.exists() or p.stat().st_mtime < max(s.stat().st_mtime for s in sources if s.name != skip)]
    share = subprocess.run([server_pg_config(), "--sharedir"], capture_output=True, text=True, check=True)
    installed_dir = Path(share.stdout.strip()) / "extension"
    ours = [REPO / "pgqueue.control", built, *sorted((REPO / "extension").glob("pgqueue--*.sql"))]
    problems += [f"{installed_dir / p.name} is not this tree's {p.relative_to(REPO)}" for p in ours
                 if p.exists() and (not (installed_dir / p.name).exists()
                                    or (installed_dir / p.name).read_bytes() != p.read_bytes())]
    return problems


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    external = os.environ.get("PGQUEUE_TEST_DSN")
    if external:  # (its extension files are the server's, wherever it runs: not checked)
        yield Server(external, None)
        return
    problems = installed_build_problems()
    if problems:
        pytest.fail("the server's pgqueue is not this tree's build: " + "; ".join(problems)
                    + ". Run `make && make install` (scripts/test.sh does)", pytrace=False)
    with EmbeddedPostgres() as pg:
        yield Server(pg.dsn(), pg)


def admin_execute(server: Server, *statements: LiteralString | sql.Composed) -> None:
    with psycopg.connect(server.admin_dsn, autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)


def _template(server: Server, name: str, plain: bool) -> str:
    """(Re)create the template database ``name`` with pgqueue: the extension, or the plain install."""
    from pgqueue.installer import install

    ident = sql.Identifier(name)
    admin_execute(
        server,
        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident),
        sql.SQL("CREATE DATABASE {}").format(ident),
    )
    with psycopg.connect(server.dsn(name), autocommit=True) as conn:
        if plain:
            install(conn, "plain", report=lambda line: None)
        else:
            conn.execute("CREATE EXTENSION pgqueue")
    return name


@pytest.fixture(scope="session")
def template_db(pg_server: Server) -> str:
    return _template(pg_server, TEMPLATE_DB, plain=False)


@pytest.fixture(scope="session")
def plain_template_db(pg_server: Server) -> str:
    """A template database with pgqueue's plain install (``pgqueue install --plain``)."""
    return _template(pg_server, PLAIN_TEMPLATE_DB, plain=True)


_db_numbers = itertools.count(1)


def create_database(server: Server, template: str, prefix: str = "t") -> str:
    """Clone the template into a new database and return its name."""
    name = f"{prefix}_{os.getpid()}_{next(_db_numbers)}"
    admin_execute(
        server,
        sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template)),
    )
    return name


def drop_database(server: Server, name: str) -> None:
    admin_execute(server, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def dbname(pg_server: Server, template_db: str) -> Iterator[str]:
    """A fresh database with the extension installed, dropped after the test."""
    name = create_database(pg_server, template_db)
    try:
        yield name
    finally:
        drop_database(pg_server, name)


@pytest.fixture
def bare_dsn(pg_server: Server) -> Iterator[str]:
    """The DSN of a fresh database without pgqueue, dropped after the test."""
    name = create_database(pg_server, "template0", prefix="bare")
    try:
        yield pg_server.dsn(name)
    finally:
        drop_database(pg_server, name)


@pytest.fixture
def dsn(pg_server: Server, dbname: str) -> str:
    """Connection string of a fresh database with the extension installed."""
    return pg_server.dsn(dbname)


@pytest.fixture
def plain_dsn(pg_server: Server, plain_template_db: str) -> Iterator[str]:
    """Connection string of a fresh database with pgqueue's plain install, dropped after the test."""
    name = create_database(pg_server, plain_template_db, prefix="plain")
    try:
        yield pg_server.dsn(name)
    finally:
        drop_database(pg_server, name)


def hold_version_check(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    """Make pgqueue's version check (:func:`pgqueue.check_server`) wait in every other session of
    ``conn``'s database, a plain install's, until ``conn``'s transaction ends: lock its version
    record, ``pgqueue.install``, which the check reads after ``pg_catalog.pg_extension``.

    Not a lock on ``pg_extension`` itself: while one is held, a login to that database that
    rebuilds the relation cache's init file waits on it too, and the file is rebuilt after
    every vacuum of ``pg_database`` (which the suite's CREATE and DROP DATABASE per test keep
    busy). The new connection of a test then timed out instead of its version check (CI)."""
    conn.execute("LOCK TABLE pgqueue.install IN ACCESS EXCLUSIVE MODE")


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection to a fresh database with the extension installed."""
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c
