"""The server the benchmarks run on, their databases, and pgbench.

Without --dsn the suite starts a private server (``pgqueue.embedded.EmbeddedPostgres``) with
``config.BENCH_SETTINGS``; with --dsn it uses that server as it is configured (the report
shows its settings) and needs a role that may create databases. Either way it builds one
template database (the extension, the reference designs of bench/sql/, the benchmark queues)
and clones a fresh database from it for every section, dropped afterwards.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

BENCH_DIR = Path(__file__).resolve().parent
SQL_DIR = BENCH_DIR / "sql"
PGBENCH_DIR = BENCH_DIR / "pgbench"

#: The payload every design enqueues: seed 000's JSON document (85 bytes).
PAYLOAD = b'{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'

#: Queues of the template database, created with pgqueue.queue_create. "bench" has the
#: extension's extra features on (dead-lettering after 5 attempts); the variants measure what
#: NOTIFY and a size cap cost on enqueue.
BENCH_QUEUES: dict[str, dict[str, Any]] = {
    "bench": {"p_max_attempts": 5},
    "bench_notify": {"p_max_attempts": 5, "p_notify": True},
    "bench_capped": {"p_max_attempts": 5, "p_max_size": 1_000_000_000},
}


def find_pgbench() -> str:
    """Return the pgbench executable: $PGBENCH, then PATH, then the server's bindir (the
    pg_config that scripts/find-pg-config finds)."""
    env = os.environ.get("PGBENCH")
    if env:
        return env
    found = shutil.which("pgbench")
    if found:
        return found
    finder = Path(__file__).resolve().parents[1] / "scripts" / "find-pg-config"
    try:
        pg_config = subprocess.run([str(finder)], capture_output=True, text=True, check=True).stdout.strip()
        bindir = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        bindir = ""
    candidate = os.path.join(bindir, "pgbench")
    if bindir and os.path.exists(candidate):
        return candidate
    raise RuntimeError("pgbench not found: install postgresql-client or set PGBENCH")


@dataclass
class Server:
    """A reachable server: its admin connection string and, if we started it, the handle."""

    admin_dsn: str
    embedded: Any = None
    template: str = field(default_factory=lambda: f"pgqueue_bench_template_{os.getpid()}")
    _numbers: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def dsn(self, dbname: str, *, sync_off: bool = False) -> str:
        """Connection string for a database; with sync_off the session has synchronous_commit off."""
        extra: dict[str, str] = {"dbname": dbname}
        if sync_off:
            extra["options"] = "-c synchronous_commit=off"
        return make_conninfo(self.admin_dsn, **extra)

    def admin(self, *statements: str | sql.Composable) -> None:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            for stmt in statements:
                conn.execute(stmt)  # type: ignore[arg-type]

    # -- databases -------------------------------------------------------------------

    def build_template(self) -> None:
        """(Re)create the template database with the extension, the reference designs and queues."""
        ident = sql.Identifier(self.template)
        self.admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident),
                   sql.SQL("CREATE DATABASE {}").format(ident))
        with psycopg.connect(self.dsn(self.template), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgqueue")
            for path in sorted(SQL_DIR.glob("*.sql")):
                conn.execute(path.read_text())
            for name, opts in BENCH_QUEUES.items():
                args = sql.SQL(", ").join(
                    [sql.Literal(name)]
                    + [sql.SQL("{} => {}").format(sql.Identifier(k), sql.Literal(v)) for k, v in opts.items()])
                conn.execute(sql.SQL("SELECT pgqueue.queue_create({})").format(args))

    def create_db(self, prefix: str) -> str:
        name = f"bench_{prefix}_{os.getpid()}_{next(self._numbers)}"
        self.admin(sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(self.template)))
        return name

    def drop_db(self, name: str) -> None:
        self.admin(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    @contextmanager
    def database(self, prefix: str) -> Iterator[str]:
        """A fresh clone of the template, dropped on exit."""
        name = self.create_db(prefix)
        try:
            yield name
        finally:
            self.drop_db(name)

    def drop_template(self) -> None:
        self.drop_db(self.template)

    # -- facts for the report ----------------------------------------------------------

    def settings(self, names: Sequence[str]) -> dict[str, str]:
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT name, setting, unit FROM pg_settings WHERE name = ANY(%s)",
                                [list(names)]).fetchall()
            out = {}
            for name, setting, unit in rows:
                out[name] = f"{setting}{'' if unit in (None, '') else ' (' + unit + ')'}"
            out["server_version"] = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
            return out

    def message_reloptions(self) -> str:
        with psycopg.connect(self.dsn(self.template), autocommit=True) as conn:
            row = conn.execute("SELECT coalesce(array_to_string(reloptions, ', '), '(none)') FROM pg_class "
                               "WHERE oid = 'pgqueue.message'::regclass").fetchone()
            return str(row[0]) if row else "?"

    def extension_version(self) -> str:
        with psycopg.connect(self.dsn(self.template), autocommit=True) as conn:
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'").fetchone()
            return str(row[0]) if row else "?"


@contextmanager
def server(dsn: str | None, settings: dict[str, str]) -> Iterator[Server]:
    """The server to benchmark: the one at dsn, or a private one with the given settings."""
    if dsn:
        srv = Server(dsn)
        try:
            yield srv
        finally:
            srv.drop_template()
        return
    from pgqueue.embedded import EmbeddedPostgres

    with EmbeddedPostgres(settings=settings) as pg:
        yield Server(pg.dsn(), pg)


# ---------------------------------------------------------------------------------------
# pgbench
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PgbenchResult:
    transactions: int
    tps: float
    failed: int
    elapsed: float
    latency_ms: float | None
    ok: bool
    error: str = ""
    retried: int = 0  # transactions that failed (deadlock, serialization) and were run again (--max-tries)


_RE_TX = re.compile(r"number of transactions actually processed: (\d+)")
_RE_TPS = re.compile(r"tps = ([\d.]+) \(without initial connection time\)")
_RE_FAILED = re.compile(r"number of failed transactions: (\d+)")
_RE_LAT = re.compile(r"latency average = ([\d.]+) ms")
_RE_RETRIED = re.compile(r"number of transactions retried: (\d+)")


def _pgbench_argv(server: Server, dbname: str, script: str, clients: int, seconds: int,
                  transactions: int, defines: Mapping[str, object] | None,
                  sync_off: bool, max_tries: int = 1) -> tuple[list[str], dict[str, str]]:
    info = conninfo_to_dict(server.dsn(dbname))
    argv = [find_pgbench(), "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 2)),
            "-f", str(PGBENCH_DIR / script)]
    if max_tries > 1:  # a deadlock or serialization failure runs the transaction again, up to max_tries in all
        argv += ["--max-tries", str(max_tries)]
    argv += ["-T", str(seconds)] if seconds else ["-t", str(transactions)]
    for key, value in (defines or {}).items():
        argv += ["-D", f"{key}={value}"]
    argv += ["-h", str(info.get("host", "127.0.0.1")), "-p", str(info.get("port", 5432)),
             "-U", str(info.get("user", "postgres")), str(info["dbname"])]
    env = dict(os.environ)
    if info.get("password"):
        env["PGPASSWORD"] = str(info["password"])
    env.pop("PGOPTIONS", None)
    if sync_off:
        env["PGOPTIONS"] = "-c synchronous_commit=off"
    return argv, env


def pgbench_popen(server: Server, dbname: str, script: str, *, clients: int, seconds: int = 0,
                  transactions: int = 0, defines: Mapping[str, object] | None = None,
                  sync_off: bool = False, max_tries: int = 1) -> subprocess.Popen[str]:
    """Start pgbench (prepared protocol, no vacuum) in the background; collect with parse_pgbench.

    Exactly one of seconds (-T) and transactions (-t, per client) is given. With max_tries > 1 a
    transaction that ends in a deadlock or a serialization failure is run again (pgbench
    ``--max-tries``), as a client that retries 40P01 and 40001 would; the result counts them.
    """
    argv, env = _pgbench_argv(server, dbname, script, clients, seconds, transactions, defines, sync_off,
                              max_tries)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def parse_pgbench(proc: subprocess.Popen[str], timeout: float = 900) -> PgbenchResult:
    """Wait for a pgbench started by pgbench_popen and parse its summary."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return PgbenchResult(0, 0.0, 0, 0.0, None, False, error=f"pgbench timed out after {timeout} s")
    m_tx, m_tps = _RE_TX.search(out), _RE_TPS.search(out)
    if proc.returncode != 0 or not m_tx or not m_tps:
        tail = (err.strip().splitlines() or ["no output"])[-3:]
        return PgbenchResult(0, 0.0, 0, 0.0, None, False, error=" | ".join(tail))
    tx, tps = int(m_tx.group(1)), float(m_tps.group(1))
    m_failed, m_lat = _RE_FAILED.search(out), _RE_LAT.search(out)
    failed = int(m_failed.group(1)) if m_failed else 0
    m_retried = _RE_RETRIED.search(out)
    # pgbench 15 counts a transaction that ended in a deadlock or a serialization failure as
    # failed and still exits 0: such a run did not do the work it counts, so it is not ok
    return PgbenchResult(
        transactions=tx, tps=tps, failed=failed,
        elapsed=tx / tps if tps > 0 else 0.0, latency_ms=float(m_lat.group(1)) if m_lat else None, ok=not failed,
        error=f"{failed} failed transactions (deadlock or serialization failure)" if failed else "",
        retried=int(m_retried.group(1)) if m_retried else 0)


def pgbench(server: Server, dbname: str, script: str, *, clients: int, seconds: int = 0,
            transactions: int = 0, defines: Mapping[str, object] | None = None,
            sync_off: bool = False, max_tries: int = 1) -> PgbenchResult:
    """Run one pgbench script to the end and parse its summary (see pgbench_popen)."""
    proc = pgbench_popen(server, dbname, script, clients=clients, seconds=seconds,
                         transactions=transactions, defines=defines, sync_off=sync_off, max_tries=max_tries)
    return parse_pgbench(proc, timeout=seconds * 3 + 120 if seconds else 900)


def queue_messages(conn: psycopg.Connection[Any], queue: str) -> int:
    """How many messages pgqueue's queue ``queue`` holds, in any state."""
    row = conn.execute("SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
                       "WHERE q.name = %s", (queue,)).fetchone()
    return int(row[0]) if row else 0


def vacuum_analyze(conn: psycopg.Connection[Any], tables: Sequence[str]) -> None:
    for table in tables:
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.SQL(table)))  # table names are our constants


def loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return -1.0


def now() -> float:
    return time.perf_counter()
