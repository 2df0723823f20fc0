"""The queue's administration on a database that defaults to REPEATABLE READ, and the
connections pgqueue opens itself.

``queue_create``, ``queue_alter`` and ``queue_drop`` need READ COMMITTED (PQ009 otherwise). On
a database (or role) whose ``default_transaction_isolation`` is REPEATABLE READ, ``pgqueue queue
create`` and ``Queue(dsn, ...).create()`` were refused. The command line and the client now run
those calls again, once refused, in a READ COMMITTED transaction of their own (the client's on a connection opened
for the call alone, or a pool's lent one), and never set a session default: a transaction-mode
pooler would lend that server connection, with the setting, to other clients.
"""

from __future__ import annotations

import ast
import asyncio
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from conftest import REPO, Server, admin_execute
from helpers import commit_once_blocking
from pgqueue import AsyncQueue, Queue
from pgqueue.cli import main
from pgqueue.errors import InvalidArgument, NeedsReadCommitted, QueueExists

PACKAGE = REPO / "python" / "pgqueue"


@pytest.fixture
def rr_dsn(pg_server: Server, dbname: str, dsn: str) -> Iterator[str]:
    """A fresh database with pgqueue whose transactions default to REPEATABLE READ."""
    admin_execute(pg_server, sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'")
                  .format(sql.Identifier(dbname)))
    with psycopg.connect(dsn) as conn:  # (the setting is the database's: a plain connection has it)
        assert conn.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    yield dsn


def queues(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {str(r[0]): r[1] for r in conn.execute("SELECT name, max_size FROM pgqueue.queue")}


def test_the_cli_creates_alters_and_drops_queues_on_a_database_that_defaults_to_repeatable_read(
        rr_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", "create", "rr_cli", "--dsn", rr_dsn]) == 0, capsys.readouterr().err
    assert main(["queue", "alter", "rr_cli", "--max-size", "10", "--dsn", rr_dsn]) == 0, capsys.readouterr().err
    assert queues(rr_dsn)["rr_cli"] == 10
    assert main(["queue", "drop", "rr_cli", "--dsn", rr_dsn]) == 0, capsys.readouterr().err
    assert "rr_cli" not in queues(rr_dsn)


def test_the_client_administers_queues_there_on_its_own_connection_and_on_pools(rr_dsn: str) -> None:
    with Queue(rr_dsn, "rr_sync") as queue:
        queue.create(max_size=5)
        queue.alter(max_size=6)
        with queue._connector.connection() as conn:  # no session setting is left behind
            assert conn.execute("SHOW default_transaction_isolation").fetchone() == ("repeatable read",)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert queues(rr_dsn)["rr_sync"] == 6
    with ConnectionPool(rr_dsn, min_size=1, max_size=1) as pool:  # lent connections, not autocommit
        Queue(pool, "rr_pool").create(max_size=1)
        Queue(pool, "rr_pool").alter(max_size=2)
        with pool.connection() as conn:
            assert conn.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    assert queues(rr_dsn)["rr_pool"] == 2

    async def run() -> None:
        async with AsyncQueue(rr_dsn, "rr_async") as queue:
            await queue.create(max_size=5)
            await queue.alter(max_size=6)
        async with AsyncConnectionPool(rr_dsn, min_size=1, max_size=1) as pool:
            await AsyncQueue(pool, "rr_apool").create()
            assert await AsyncQueue(pool, "rr_apool").drop() is True
        assert await AsyncQueue(rr_dsn, "rr_async").drop() is True

    asyncio.run(run())
    assert "rr_async" not in queues(rr_dsn) and "rr_apool" not in queues(rr_dsn)
    assert Queue(rr_dsn, "rr_sync").drop() is True


def test_the_administration_is_one_statement_where_the_default_is_read_committed(
        pg_server: Server, dbname: str, dsn: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Where the database defaults to READ COMMITTED (PostgreSQL's default), create, alter and
    drop run as one statement, without a transaction block (which a statement-mode pooler
    refuses) or a SET TRANSACTION; only a refusal with PQ009 runs them again in a READ
    COMMITTED transaction."""
    from pgqueue import async_client, client

    sets: list[str] = []
    def recorded(where: str, f: Any) -> Any:
        return lambda conn: (sets.append(where), f(conn))[1]

    monkeypatch.setattr(client, "_set_read_committed", recorded("sync", client._set_read_committed))

    async def set_async(conn: psycopg.AsyncConnection[Any], f: Any = async_client._set_read_committed) -> None:
        sets.append("async")
        await f(conn)

    monkeypatch.setattr(async_client, "_set_read_committed", set_async)

    def administer(where: str) -> None:
        with Queue(where, "one_stmt") as queue:
            queue.create(max_size=5)
            queue.alter(max_size=6)
            assert queue.drop() is True
        for argv in (["queue", "create", "one_stmt"], ["queue", "alter", "one_stmt", "--max-size", "3"],
                     ["queue", "drop", "one_stmt"]):
            assert main([*argv, "--dsn", where]) == 0, capsys.readouterr().err

        async def run() -> None:
            async with AsyncQueue(where, "one_stmt") as queue:
                await queue.create()
                assert await queue.drop() is True

        asyncio.run(run())

    administer(dsn)
    assert sets == []
    admin_execute(pg_server, sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = 'repeatable read'")
                  .format(sql.Identifier(dbname)))
    administer(dsn)  # refused once each, then run in a READ COMMITTED transaction
    assert sets == ["sync"] * 3 + ["sync"] * 3 + ["async"] * 2  # (the command line's through the client's)


def test_an_alter_behind_another_sessions_change_runs_after_it(rr_dsn: str) -> None:
    """An alter that does not need READ COMMITTED (lock_ms) ran as one statement at the database's
    REPEATABLE READ: behind another session's uncommitted change of the queue it failed with 40001
    once that committed (a review). It runs again in a READ COMMITTED transaction then, as before
    the one-statement try, and its change is applied after the other's."""
    import threading

    with Queue(rr_dsn, "rr_race") as queue:
        queue.create()
        with psycopg.connect(rr_dsn) as other:
            other.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            other.execute("SELECT pgqueue.queue_alter('rr_race', p_lock_ms => 5000)")
            failed: list[BaseException] = []

            def alter() -> None:
                try:
                    Queue(rr_dsn, "rr_race").alter(lock_ms=6000)
                except BaseException as exc:  # (the test's thread reports it)
                    failed.append(exc)

            thread = threading.Thread(target=alter)
            thread.start()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not other.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:  # type: ignore[index]
                time.sleep(0.02)
            other.commit()
            thread.join(30)
        assert failed == []
        assert queue.settings().lock_ms == 6000


def test_a_failed_call_leaves_the_queues_own_connection_as_it_was(rr_dsn: str) -> None:
    """The READ COMMITTED transaction is on a connection of its own, closed after it: a refused
    create leaves nothing open on the queue's shared connection, and what other tasks do on it
    at the same time is not part of that transaction (it was, with BEGIN and COMMIT on the
    shared connection: a review)."""
    with Queue(rr_dsn, "rr_fail") as queue:
        queue.create()
        with pytest.raises(QueueExists):
            queue.create()
        msg_id = queue.enqueue("after")
        with queue._connector.connection() as conn:
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with psycopg.connect(rr_dsn, autocommit=True) as conn:  # committed: another session sees it
        assert conn.execute("SELECT count(*) FROM pgqueue.message WHERE id = %s", (msg_id,)).fetchone() == (1,)

    async def run() -> list[object]:
        async with AsyncQueue(rr_dsn, "rr_fail") as queue:
            return await asyncio.gather(queue.alter(max_size=-1), *(queue.enqueue(i) for i in range(20)),
                                        return_exceptions=True)

    results = asyncio.run(run())
    assert isinstance(results[0], InvalidArgument), results[0]
    assert all(isinstance(r, int) for r in results[1:]), results
    with psycopg.connect(rr_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (21,)


def test_a_callers_connection_keeps_its_own_level(rr_dsn: str) -> None:
    """A caller's connection runs the call at its level, PQ009 in REPEATABLE READ (README,
    "Isolation levels"); in a READ COMMITTED transaction of the caller's, the call runs."""
    with psycopg.connect(rr_dsn, autocommit=True) as conn:
        with pytest.raises(NeedsReadCommitted):
            Queue(conn, "rr_theirs").create()
        conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
        with conn.transaction():
            Queue(conn, "rr_theirs").create()
        assert conn.execute("SHOW default_transaction_isolation").fetchone() == ("repeatable read",)
    with psycopg.connect(rr_dsn) as conn:  # not autocommit: the call begins the caller's transaction
        with pytest.raises(NeedsReadCommitted):
            Queue(conn, "rr_theirs").drop()
    assert queues(rr_dsn)["rr_theirs"] is None


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
    """Every connection the package opens from a connection string goes through _connect, which
    opens it in UTF8 (the embedded server's own start-up check aside): a new module cannot
    forget it."""
    opened = _calls("psycopg.connect", "AsyncConnection.connect")
    assert {p for p, _, _ in opened} >= {"_connect.py"}, "the search finds _connect's own calls"
    assert [(p, line) for p, line, _ in opened if p not in ("_connect.py", "embedded.py")] == []


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_workers_on_a_database_that_defaults_to_repeatable_read_run_a_conflict_again_quietly(
        kind: str, rr_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """At REPEATABLE READ the take of one worker's statement fails with 40001 when a row of its
    snapshot was leased by another worker since (FOR UPDATE sees a concurrent update). psycopg's
    SerializationFailure is an OperationalError, and the loop took it for a lost connection:
    "database call failed ...; reconnecting in 0.1s", a warning and a wait each time (18-20 in a
    run of 20,000 messages over three workers, a review). The statement rolled back whole: the
    round runs again at once, logged at DEBUG, and every message is handled once."""
    import logging
    import threading

    from pgqueue import AsyncWorker, Message, Worker

    total = 5000
    with Queue(rr_dsn, "rr") as q:
        q.create()
        q.enqueue_many([f"m{i}" for i in range(total)])
    seen: list[int] = []
    lock = threading.Lock()

    def record(msg: Message) -> None:
        with lock:
            seen.append(msg.id)

    def all_seen() -> bool:
        with lock:
            return len(seen) >= total

    with caplog.at_level(logging.DEBUG, logger="pgqueue.worker"):
        if kind == "Worker":
            workers = [Worker(Queue(rr_dsn, "rr"), record, concurrency=8, listen=False, handle_signals=False)
                       for _ in range(3)]
            threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 60
            while not all_seen() and time.monotonic() < deadline:
                time.sleep(0.05)
            for w in workers:
                w.stop()
            for t in threads:
                t.join(30)
        else:
            async def handle(msg: Message) -> None:
                record(msg)

            async def main() -> None:
                workers = [AsyncWorker(AsyncQueue(rr_dsn, "rr"), handle, concurrency=8, listen=False,
                                       handle_signals=False) for _ in range(3)]
                runs = [asyncio.create_task(w.run()) for w in workers]
                deadline = time.monotonic() + 60
                while not all_seen() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                for w in workers:
                    w.stop()
                await asyncio.wait_for(asyncio.gather(*runs), 30)

            asyncio.run(main())
    assert len(seen) == len(set(seen)) == total
    worker_records = [r for r in caplog.records if r.name == "pgqueue.worker"]
    assert [r.getMessage() for r in worker_records if r.levelno >= logging.WARNING] == []
    assert any("conflicted with another transaction (40001" in r.getMessage() for r in worker_records), \
        "no conflict happened: the test did not exercise the path"
    with Queue(rr_dsn, "rr") as q:
        stats = q.stats()
        assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 0)


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_worker_stopping_on_repeatable_read_acknowledges_again_after_a_conflict(
        kind: str, rr_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """The shutdown's last acknowledgement conflicted (40001: another transaction changed the
    message's row while the DELETE waited for its lock): it rolled back whole, and before, the
    worker warned "could not acknowledge during shutdown" and left a message whose handler had
    returned leased, to run again when its lease ran out. It is made again on the same
    connection after a short random wait, as the loop's rounds are, logged at DEBUG."""
    import logging
    import threading

    from pgqueue import AsyncWorker, Message, Worker

    with Queue(rr_dsn, "rr") as q:
        q.create()
        [msg_id] = q.enqueue_many(["only"])
    changer = psycopg.connect(rr_dsn)  # changes the row, commits once the acknowledgement waits for it
    waited: list[bool] = []
    handled: list[int] = []
    committer = threading.Thread(target=commit_once_blocking, args=(rr_dsn, changer, waited))
    stop: list[Any] = []

    def handle(msg: Message) -> None:
        # the row changed, not committed yet; then the stop, so that the message is acknowledged
        # by the shutdown (the loop's rounds sleep for poll_min, 30 s, with nothing to fetch)
        changer.execute("UPDATE pgqueue.message SET locked_until = locked_until WHERE id = %s", (msg.id,))
        committer.start()
        handled.append(msg.id)
        stop[0]()

    try:
        with caplog.at_level(logging.DEBUG, logger="pgqueue.worker"):
            if kind == "Worker":
                worker = Worker(Queue(rr_dsn, "rr"), handle, concurrency=1, listen=False, poll_min=30,
                                poll_max=30, handle_signals=False)
                stop.append(worker.stop)
                runner = threading.Thread(target=worker.run, daemon=True)
                runner.start()
                runner.join(60)
                assert not runner.is_alive()
            else:
                async def handle_async(msg: Message) -> None:
                    handle(msg)

                async def main() -> None:
                    worker = AsyncWorker(AsyncQueue(rr_dsn, "rr"), handle_async, concurrency=1, listen=False,
                                         poll_min=30, poll_max=30, handle_signals=False)
                    stop.append(worker.stop)
                    await asyncio.wait_for(worker.run(), 60)

                asyncio.run(main())
        committer.join(30)
        assert handled == [msg_id]
        assert waited == [True], "the acknowledgement never waited for the changed row: the test did not exercise it"
        records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "pgqueue.worker"]
        assert [m for level, m in records if level >= logging.WARNING] == []
        assert any("acknowledging during shutdown conflicted with another transaction (40001, 1 in a row)" in m
                   for _, m in records)
        assert not any("on a new connection" in m for _, m in records)  # the same connection, not a reconnect
        with Queue(rr_dsn, "rr") as q:
            stats = q.stats()
            assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 0)
    finally:
        if committer.is_alive():
            committer.join(30)
        changer.close()
