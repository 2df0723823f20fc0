"""The connections pgqueue opens itself run READ COMMITTED, whatever the database defaults to.

On a database (or role) whose ``default_transaction_isolation`` is REPEATABLE READ,
``pgqueue queue create`` and ``Queue(dsn, ...).create()`` were refused with PQ009 ("queue_create
needs READ COMMITTED"), and workers side by side failed dequeues with 40001 and reconnected,
several times a second. python/pgqueue/_connect.py sets the session's default on every
connection pgqueue opens from a connection string; a connection the caller hands over keeps its
own (tests/test_client.py covers those).
"""

from __future__ import annotations

import ast
import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from conftest import REPO, Server, admin_execute
from pgqueue import AsyncQueue, Queue, _connect
from pgqueue._worker_core import connect_unless_stopped
from pgqueue.cli import main
from pgqueue.errors import NeedsReadCommitted
from pgqueue.metrics import QueueMetrics

PACKAGE = REPO / "python" / "pgqueue"


@pytest.fixture
def rr_dsn(pg_server: Server, dbname: str, dsn: str) -> Iterator[str]:
    """A fresh database with pgqueue whose transactions default to REPEATABLE READ."""
    admin_execute(pg_server, sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'")
                  .format(sql.Identifier(dbname)))
    with psycopg.connect(dsn) as conn:  # (the setting is the database's: a plain connection has it)
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    yield dsn


def isolation(conn: psycopg.Connection[Any]) -> str:
    """The isolation level of a new transaction on ``conn`` (its session's default)."""
    row = psycopg.Cursor(conn).execute("SHOW default_transaction_isolation").fetchone()
    assert row is not None
    return str(row[0])


def test_the_cli_creates_and_alters_queues_on_a_database_that_defaults_to_repeatable_read(
        rr_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    """queue create and queue alter --max-size need READ COMMITTED (PQ009 otherwise)."""
    assert main(["queue", "create", "rr_cli", "--dsn", rr_dsn]) == 0, capsys.readouterr().err
    assert main(["queue", "alter", "rr_cli", "--max-size", "10", "--dsn", rr_dsn]) == 0, capsys.readouterr().err
    assert main(["enqueue", "rr_cli", "x", "--dsn", rr_dsn]) == 0, capsys.readouterr().err
    assert main(["dequeue", "rr_cli", "--complete", "--dsn", rr_dsn]) == 0, capsys.readouterr().err
    assert main(["queue", "drop", "rr_cli", "--dsn", rr_dsn]) == 0, capsys.readouterr().err
    with psycopg.connect(rr_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.queue WHERE name = 'rr_cli'").fetchone() == (0,)


def test_the_clients_own_connections_create_queues_there(rr_dsn: str) -> None:
    with Queue(rr_dsn, "rr_sync") as queue:
        queue.create(max_size=5)
        queue.alter(max_size=6)
        with queue._connector.connection() as conn:
            assert isolation(conn) == "read committed"
        assert queue.settings().max_size == 6

    async def run() -> None:
        async with AsyncQueue(rr_dsn, "rr_async") as queue:
            await queue.create(max_size=5)
            await queue.alter(max_size=6)
            assert (await queue.settings()).max_size == 6

    asyncio.run(run())


def test_a_callers_connection_keeps_its_own_isolation_level(rr_dsn: str) -> None:
    """Only the connections pgqueue opens are set: given the caller's, PQ009 is the caller's to
    see (README, "Isolation levels")."""
    with psycopg.connect(rr_dsn, autocommit=True) as conn:
        with pytest.raises(NeedsReadCommitted):
            Queue(conn, "rr_theirs").create()
        assert isolation(conn) == "repeatable read"


def test_every_kind_of_own_connection_runs_read_committed(rr_dsn: str) -> None:
    with _connect.connect(rr_dsn, autocommit=True) as conn:
        assert isolation(conn) == "read committed"
    with _connect.connect(rr_dsn) as conn:  # not autocommit: the SET is committed, not undone
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT 1/0")
        conn.rollback()
        assert isolation(conn) == "read committed"
    with _connect.connect(rr_dsn, cursor_factory=psycopg.RawCursor) as conn:
        assert isolation(conn) == "read committed"

    async def run() -> str:
        conn = await _connect.connect_async(rr_dsn, autocommit=True)
        async with conn:
            row = await (await conn.execute("SHOW default_transaction_isolation")).fetchone()
            assert row is not None
            return str(row[0])

    assert asyncio.run(run()) == "read committed"
    # the workers' own connection
    conn = connect_unless_stopped(rr_dsn, threading.Event(), time.monotonic() + 30)
    with conn:
        assert isolation(conn) == "read committed"
    # the metrics exporter's
    metrics = QueueMetrics(rr_dsn)
    try:
        assert isolation(metrics._connection(time.monotonic() + 30)) == "read committed"
    finally:
        metrics.close()
    # the Spark source's
    source = pytest.importorskip("pgqueue.spark.source")
    with source._connect(rr_dsn, autocommit=True) as conn:
        assert isolation(conn) == "read committed"


def _calls(*names: str) -> list[tuple[str, int, ast.Call]]:
    """Every call in the package's modules of a function whose dotted name ends with one of
    ``names`` (``psycopg.connect``, ``ConnectionPool``...), from their syntax trees: comments and
    docstrings are not calls."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                dotted = ast.unparse(node.func)
                if any(dotted == n or dotted.endswith("." + n) for n in names):
                    found.append((str(path.relative_to(PACKAGE)), node.lineno, node))
    return found


def test_no_module_opens_a_connection_without_setting_it_up() -> None:
    """Every connection the package opens from a connection string goes through _connect (the
    embedded server's own start-up check aside), and every pool it makes sets its connections
    up in its ``configure``: a new module cannot forget it."""
    opened = _calls("psycopg.connect", "AsyncConnection.connect")
    assert {p for p, _, _ in opened} >= {"_connect.py"}, "the search finds _connect's own calls"
    assert [(p, line) for p, line, _ in opened if p not in ("_connect.py", "embedded.py")] == []
    pools = _calls("ConnectionPool", "AsyncConnectionPool")
    assert {p for p, _, _ in pools} >= {"demo.py", "dashboard/app.py"}, "the search finds the package's pools"
    assert [(p, line) for p, line, call in pools if "configure" not in {k.arg for k in call.keywords}] == []
