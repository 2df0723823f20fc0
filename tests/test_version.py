"""One version for the SQL and the Python package: `pgqueue.check_server` refuses a database whose
pgqueue is older or newer (in major.minor) than the client, where the worker and the command line
start; `pgqueue --version` shows both versions and never a traceback."""

from __future__ import annotations

import asyncio
import re

import psycopg
import pytest
from psycopg import sql

from conftest import REPO, Server
from pgqueue import Queue, Worker, __version__, check_server
from pgqueue.cli import main
from pgqueue.compat import ServerPgQueue, async_server_pgqueue, major_minor, server_pgqueue, version_mismatch
from pgqueue.errors import ExtensionNotInstalled, VersionMismatch

CLIENT = "{}.{}".format(*(major_minor(__version__) or (0, 0)))



def plain_install(dsn: str, version: str) -> str:
    """Make the database look like a plain (non-extension) install of ``version``: its record."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA pgqueue")
        conn.execute("CREATE TABLE pgqueue.install (version text)")
        conn.execute("INSERT INTO pgqueue.install (version) VALUES (%s)", [version])
    return dsn


def test_the_package_version_is_the_extension_version() -> None:
    control = (REPO / "pgqueue.control").read_text()
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.M)
    assert match, control
    assert major_minor(match.group(1)) == major_minor(__version__), (match.group(1), __version__)


def test_the_extension_of_this_release_passes(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        installed = check_server(conn)
    assert (installed.kind, installed.version) == ("extension", CLIENT)


def test_plain_installs_are_read_from_their_version_record(bare_dsn: str) -> None:
    with psycopg.connect(plain_install(bare_dsn, CLIENT), autocommit=True) as conn:
        installed = check_server(conn)
    assert (installed.kind, installed.version) == ("plain", CLIENT)


def test_older_and_newer_databases_are_refused_with_what_to_upgrade(pg_server: Server, bare_dsn: str) -> None:
    major, minor = major_minor(__version__) or (0, 0)
    older, newer = f"{major}.{minor - 1}" if minor else f"{major - 1}.99", f"{major}.{minor + 1}"
    with psycopg.connect(plain_install(bare_dsn, older), autocommit=True) as conn:
        with pytest.raises(VersionMismatch, match=f"has pgqueue {older} \\(plain\\), older than this client") as exc:
            check_server(conn)
        assert "pgqueue install" in str(exc.value)
        conn.execute("UPDATE pgqueue.install SET version = %s", [newer])
        with pytest.raises(VersionMismatch, match=f"has pgqueue {newer} \\(plain\\), newer than this client") as exc:
            check_server(conn)
        assert f"to {newer}: pip install ./python in a clone of pgqueue at release {newer}" in str(exc.value)
        assert "pgqueue-sql is not on PyPI" in str(exc.value)


def test_an_older_extension_is_told_to_update(bare_dsn: str) -> None:
    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        versions = [str(r[0]) for r in conn.execute(
            "SELECT version FROM pg_catalog.pg_available_extension_versions WHERE name = 'pgqueue'")]
        older = [v for v in versions if (major_minor(v) or (0, 0)) < (major_minor(__version__) or (0, 0))]
        if not older:
            pytest.fail(f"no release older than {__version__} is installed on the server: {versions}")
        conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(max(older))))
        with pytest.raises(VersionMismatch, match="ALTER EXTENSION pgqueue UPDATE"):
            check_server(conn)


def test_a_database_without_pgqueue_is_not_installed(bare_dsn: str) -> None:
    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        with pytest.raises(ExtensionNotInstalled):
            check_server(conn)


def test_major_minor_reads_a_release_and_nothing_else() -> None:
    """A version of fewer than two numbers, or not of numbers, is None (the callers' "unknown"):
    "1" raised IndexError, which check_server and `pgqueue install` would have passed on."""
    assert [major_minor(v) for v in ("0.4", "0.4.1", "12.30", "1", "", "x.4", "0.x", "0.4beta")] == [
        (0, 4), (0, 4), (12, 30), None, None, None, None, None]


def test_a_version_record_that_is_no_release_is_refused(bare_dsn: str) -> None:
    """A hand-edited plain version record that is no major.minor ("dev") is a VersionMismatch (a
    TypeError comparing None with the client's numbers otherwise) with the installer's advice: it
    said older, to run `pgqueue install`, which refuses such a record (no upgrade path starts
    there), so the advice looped (a review). Of several rows the highest release is what is
    installed; an extension's unreadable version is told to update."""
    with psycopg.connect(plain_install(bare_dsn, "dev"), autocommit=True) as conn:
        with pytest.raises(VersionMismatch, match="has pgqueue 'dev' \\(plain\\), no version this client") as exc:
            check_server(conn)
        assert "pgqueue uninstall --yes" in str(exc.value) and "with `pgqueue install`" not in str(exc.value)
        conn.execute("INSERT INTO pgqueue.install (version) VALUES (%s), ('0.1'), (NULL)", [CLIENT])
        assert check_server(conn) == ServerPgQueue(CLIENT, "plain")
    mismatch = version_mismatch(ServerPgQueue("", "extension"))
    assert mismatch is not None and "ALTER EXTENSION pgqueue UPDATE" in str(mismatch)


def test_server_pgqueue_of_a_database_without_pgqueue_is_none_and_keeps_the_callers_transaction(
        bare_dsn: str) -> None:
    """No pgqueue: None, from the catalog alone. Asking pgqueue.install, which is not there,
    failed the query (ExtensionNotInstalled), and with it the transaction of the caller's who
    asked inside one; a schema pgqueue without that table is no install either."""
    with psycopg.connect(bare_dsn) as conn:
        assert server_pgqueue(conn) is None
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the caller's transaction goes on
        conn.execute("CREATE SCHEMA pgqueue")
        assert server_pgqueue(conn) is None
        conn.rollback()

    async def ask() -> ServerPgQueue | None:
        async with await psycopg.AsyncConnection.connect(bare_dsn) as aconn:
            found = await async_server_pgqueue(aconn)
            await aconn.execute("SELECT 1")
            return found

    assert asyncio.run(ask()) is None
    with psycopg.connect(plain_install(bare_dsn, CLIENT), autocommit=True) as conn:
        assert server_pgqueue(conn) == ServerPgQueue(CLIENT, "plain")

    async def ask_plain() -> ServerPgQueue | None:
        async with await psycopg.AsyncConnection.connect(bare_dsn) as aconn:
            return await async_server_pgqueue(aconn)

    assert asyncio.run(ask_plain()) == ServerPgQueue(CLIENT, "plain")


def test_the_worker_checks_once_at_start(bare_dsn: str) -> None:
    dsn = plain_install(bare_dsn, "0.1")
    worker = Worker(Queue(dsn, "default"), lambda msg: None, listen=False)
    with pytest.raises(VersionMismatch, match="older than this client"):
        worker.run()


def test_the_command_line_refuses_a_mismatch_in_one_line(capsys: pytest.CaptureFixture[str], bare_dsn: str) -> None:
    dsn = plain_install(bare_dsn, "99.0")
    status = main(["stats", "--dsn", dsn])
    out, err = capsys.readouterr()
    assert status == 1, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "newer than this client" in err and "pgqueue-sql" in err


def test_version_shows_the_client_and_the_database(capsys: pytest.CaptureFixture[str], dsn: str,
                                                   bare_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    assert main(["--version", "--dsn", dsn]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"pgqueue {__version__} (pgqueue-sql)"
    assert out[1].startswith(f"database: pgqueue {CLIENT} (extension) in database ") and len(out) == 2

    monkeypatch.setenv("PGQUEUE_DSN", plain_install(bare_dsn, "0.1"))
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("database: pgqueue 0.1 (plain)")
    assert "older than this client" in out[2]


def test_version_reads_the_libpq_environment(capsys: pytest.CaptureFixture[str], pg_server: Server,
                                             dbname: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    for name, value in (("PGHOST", pg_server.host), ("PGPORT", str(pg_server.port)),
                        ("PGUSER", pg_server.user), ("PGDATABASE", dbname)):
        monkeypatch.setenv(name, value)
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert f"(extension) in database {dbname} " in out


def test_version_without_a_database_says_not_connected(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGQUEUE_DSN", "host=127.0.0.1 port=1 connect_timeout=2")
    assert main(["--version"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0] == f"pgqueue {__version__} (pgqueue-sql)"
    assert lines[1].startswith("database: not connected") and len(lines) == 2
    assert err == ""
