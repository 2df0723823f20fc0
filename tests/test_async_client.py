"""The asyncio client against the real server: every public method of AsyncQueue over a DSN,
an AsyncConnection and an AsyncConnectionPool, transactions, and receive() with its heartbeat
task. Each test drives its own event loop with asyncio.run (no pytest plugin needed)."""

from __future__ import annotations

import asyncio
import time
from contextlib import nullcontext
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

import client_scenarios as scenarios
from conftest import MadeUpPid, Relay, Server, create_database, drop_database
from pgqueue import AsyncQueue, DeadLetter, Message, Queue, QueueSettings, QueueStats, _sql, errors
from pgqueue.async_client import all_stats, list_queues
from pgqueue.message import to_datetime
from psycopg.rows import dict_row
from test_client import (ENDED, LEFT_OPEN, SLOW_LEASE_MS, Unanswering, bounded, end_idle_sessions, leases_left,
                         heartbeat_many_renews_each_with_its_own_token, interrupt_after_sending, socket_port)

Conn = psycopg.Connection[Any]


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 120))


def test_every_method_over_a_dsn(dsn: str, conn: Conn) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn, "ajobs") as q:
            assert q.name == "ajobs" and repr(q) == "AsyncQueue('ajobs')"
            await q.create(lock_ms=2000, max_attempts=2, retry_base_ms=0, retry_cap_ms=0)
            await q.create(if_not_exists=True)
            with pytest.raises(errors.QueueExists):
                await q.create()
            s = await q.settings()
            assert isinstance(s, QueueSettings) and (s.lock_ms, s.max_attempts) == (2000, 2)
            await q.alter(lock_ms=60000, notify=True)  # (leases the test does not outlast, however slow)
            assert (await q.settings()).lock_ms == 60000

            payloads: list[object] = [b"raw", "text", {"a": [1, None]}, 5, None]
            ids = [await q.enqueue(p) for p in payloads]
            ids += await q.enqueue_many(["m1", "m2"])
            prio = await q.enqueue("first", priority=1)
            await q.enqueue("later", delay=timedelta(hours=1))
            await q.enqueue("at", at=datetime.now(timezone.utc) + timedelta(hours=1))

            got = await q.dequeue(20)
            assert [m.id for m in got] == [prio, *ids]
            assert [m.payload for m in got] == ["first", *payloads, "m1", "m2"]
            assert all(isinstance(m, Message) and m.leased and m.attempts == 1 for m in got)
            stats = await q.stats()
            assert isinstance(stats, QueueStats)
            assert (stats.ready, stats.scheduled, stats.leased) == (0, 2, 8)
            due = await q.next_due()
            assert due is not None

            first, raw, text, obj, five, none, m1, m2 = got
            assert await q.complete(first) and not await q.complete(first)
            assert await q.heartbeat(raw, 60000) and await q.heartbeat(raw)
            assert await q.defer(text, delay=0, state=b"cp")
            [again] = await q.dequeue(1)
            assert again.id == text.id and again.state == b"cp" and again.attempts == 2
            assert await q.complete(again)
            assert await q.fail(obj, ValueError("bad"))
            [retry] = await q.dequeue(1)  # retry_base_ms 0: due at once
            assert retry.id == obj.id and retry.attempts == 2
            assert await q.fail(retry, "bad again")  # attempts reached max_attempts: dead
            dead = await q.dead_letters()
            assert len(dead) == 1 and isinstance(dead[0], DeadLetter)
            assert dead[0].payload == {"a": [1, None]} and dead[0].last_error == "bad again"
            assert await q.requeue_dead([dead[0].id]) == 1
            [requeued] = await q.dequeue(1)
            assert requeued.payload == {"a": [1, None]} and requeued.attempts == 1
            await q.fail(requeued, "x", delay=0)
            await q.fail((await q.dequeue(1))[0], "x")
            assert await q.purge_dead(before=datetime.now(timezone.utc) + timedelta(minutes=1)) == 1
            assert await q.purge_dead() == 0 and await q.requeue_dead() == 0

            assert [x.queue for x in await list_queues(dsn)] == ["ajobs", "default"]
            assert [x.queue for x in await all_stats(dsn)] == ["ajobs", "default"]
            for m in (five, none, m1, m2, raw):
                assert await q.complete(m)
            assert await q.drop() is True
            assert await q.drop() is False
            async with AsyncQueue(dsn) as default:
                with pytest.raises(errors.ProtectedQueue):
                    await default.drop()

    run(main)


def test_async_connection_joins_the_callers_transaction(dsn: str, conn: Conn) -> None:
    observer = Queue(conn)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            q = AsyncQueue(aconn)
            await q.enqueue("rolled back")
            await q.enqueue_many(["also"])
            assert observer.stats().ready == 0
            await aconn.rollback()
            await q.enqueue("committed")
            assert observer.stats().ready == 0
            await aconn.commit()
            assert observer.stats().ready == 1
            await q.close()
            assert not aconn.closed

    run(main)
    assert [m.payload for m in observer.dequeue(5)] == ["committed"]


def test_pool_based_async_queue(dsn: str) -> None:
    async def main() -> None:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False) as pool:
            q = AsyncQueue(pool, "apool")
            await q.create()
            await asyncio.gather(*(q.enqueue(i) for i in range(10)))
            got = await q.dequeue(20)
            assert sorted(m.payload for m in got) == list(range(10))  # type: ignore[type-var]
            first, rest = got[:3], got[3:]
            assert all(await asyncio.gather(*(q.complete(m) for m in first)))
            assert await q.complete_many(first + rest) == first  # done already: stale
            assert (await q.stats()).total == 0
            assert [s.queue for s in await list_queues(pool)] == ["apool", "default"]
            assert len(await all_stats(pool)) == 2
            await q.close()
            assert not pool.closed

    run(main)


def test_async_receive_completes_fails_and_releases(dsn: str, conn: Conn) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            await q.alter(retry_base_ms=10000, retry_cap_ms=10000)
            await q.enqueue("ok")
            async with q.receive() as msg:
                assert msg is not None and msg.payload == "ok"
            assert (await q.stats()).total == 0
            async with q.receive() as empty:
                assert empty is None

            await q.enqueue("boom")
            with pytest.raises(RuntimeError, match="boom"):
                async with q.receive() as msg:
                    raise RuntimeError("boom")
            stats = await q.stats()
            assert (stats.ready, stats.scheduled) == (0, 1)  # backed off
            row = conn.execute("SELECT attempts, last_error FROM pgqueue.message").fetchone()
            assert row == (1, "RuntimeError: boom")
            await q.purge_dead()

            with pytest.raises(errors.InvalidArgument):
                async with q.receive(lock_ms=0):
                    pass

    run(main)


def test_async_receive_settles_on_a_new_connection_when_its_own_was_lost_meanwhile(dsn: str, conn: Conn) -> None:
    """As tests/test_client.py's test of the same name: the queue's own connection terminated
    while the block runs; the completion runs once more on a new connection."""
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            await q.enqueue("work")
            async with q.receive() as msg:
                assert msg is not None
                terminated = conn.execute(
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend' AND query <> '' "
                    "AND strpos(query, 'message_heartbeat') = 0 "
                    "AND query <> 'SELECT pg_catalog.pg_backend_pid()'").fetchall()  # (the pooler check)
                assert terminated == [(True,)], terminated
        assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)

    run(main)


def test_cancelled_receive_gives_the_message_back(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            await q.enqueue("work")
            started = asyncio.Event()

            async def consumer() -> None:
                async with q.receive(lock_ms=60000) as msg:
                    assert msg is not None
                    started.set()
                    await asyncio.sleep(60)

            task = asyncio.create_task(consumer())
            await started.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            [again] = await q.dequeue(1)  # due at once, no back-off
            assert again.payload == "work" and again.attempts == 2

    run(main)


async def _slow_receive(q: AsyncQueue, other: Queue, *, heartbeat: bool) -> tuple[Message | None, list[Message]]:
    """tests/test_client.py's _slow_receive on an AsyncQueue: a block on a SLOW_LEASE_MS lease that
    lasts a second past the lease's end (without heartbeats, until the other consumer got the
    message, 30 s at most); another consumer polls meanwhile."""
    stolen: list[Message] = []
    async with q.receive(lock_ms=SLOW_LEASE_MS, heartbeat=heartbeat) as msg:
        deadline = time.monotonic() + (SLOW_LEASE_MS / 1000 + 1 if heartbeat else 30)
        while not stolen and time.monotonic() < deadline:
            stolen += await asyncio.to_thread(other.dequeue, 1, lock_ms=60000)
            await asyncio.sleep(0.1)
    return msg, stolen


@pytest.mark.parametrize("source", ["dsn", "pool", "autocommit-connection"])
def test_async_heartbeats_keep_the_lease(source: str, dsn: str, conn: Conn) -> None:
    other = Queue(conn)
    other.enqueue("slow")

    async def main() -> None:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
                src: Any = {"dsn": dsn, "pool": pool, "autocommit-connection": aconn}[source]
                async with AsyncQueue(src) as q:
                    msg, stolen = await _slow_receive(q, other, heartbeat=True)
                    assert msg is not None and stolen == []

    run(main)
    assert other.stats().total == 0


def test_async_receive_heartbeats_renew_for_the_blocks_lease_not_the_queues(dsn: str, conn: Conn) -> None:
    """tests/test_client.py's test_receive_heartbeats_renew_for_the_blocks_lease_not_the_queues on
    an AsyncQueue: each beat of receive(lock_ms=1500) renews the lease for 1.5 s, not for the
    queue's lock_ms of 60 s (a mutation that survived: a longer lease loses nothing)."""
    async def main() -> None:
        async with AsyncQueue(dsn, "ajobs") as q:
            await q.create(lock_ms=60000)
            await q.enqueue("held")
            left: list[int] = []
            async with q.receive(lock_ms=1500) as msg:
                assert msg is not None
                deadline = time.monotonic() + 2.0
                while time.monotonic() < deadline:
                    left += leases_left(conn, [msg.id]).values()  # (a quick read: the beats' task waits for it)
                    await asyncio.sleep(0.05)
            assert len(left) >= 10 and max(left) <= 1600, left
            assert (await q.stats()).total == 0  # completed

    run(main)


@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_async_heartbeats_outlive_a_terminated_connection(source: str, dsn: str, conn: Conn) -> None:
    """The heartbeat connection is terminated in the block: the next beat fails and is made
    again at once on a new connection. Before, the beats kept the dead connection (each failed,
    the lease ran out and the message went to another consumer)."""
    other = Queue(conn)

    def backends() -> set[int]:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid()").fetchall()
        return {int(row[0]) for row in rows}

    async def main() -> tuple[Message | None, list[Message]]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            src: Any = {"dsn": dsn, "autocommit-connection": aconn}[source]
            async with AsyncQueue(src) as q:
                await q.enqueue("slow")
                before = await asyncio.to_thread(backends)
                stolen: list[Message] = []
                async with q.receive(lock_ms=SLOW_LEASE_MS) as msg:
                    [beats] = await asyncio.to_thread(lambda: backends() - before)  # the block's beats
                    await asyncio.to_thread(conn.execute, "SELECT pg_terminate_backend(%s)", (beats,))
                    deadline = time.monotonic() + SLOW_LEASE_MS / 1000 + 1  # past the lease's end
                    while time.monotonic() < deadline:
                        stolen += await asyncio.to_thread(other.dequeue, 1, lock_ms=60000)
                        await asyncio.sleep(0.05)
                return msg, stolen

    msg, stolen = asyncio.run(asyncio.wait_for(main(), 120))
    assert msg is not None
    assert stolen == []  # nobody else got it while the block ran
    assert other.stats().total == 0  # and it was completed


def test_async_without_heartbeats_the_message_is_redelivered(dsn: str, conn: Conn) -> None:
    other = Queue(conn)
    other.enqueue("slow")

    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            msg, stolen = await _slow_receive(q, other, heartbeat=False)
            assert msg is not None and [m.id for m in stolen] == [msg.id]
            assert stolen[0].attempts == 2
            assert (await q.stats()).leased == 1

    run(main)


def test_async_receive_in_the_callers_transaction(dsn: str, conn: Conn) -> None:
    other = Queue(conn)
    other.enqueue("in tx")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            msg, stolen = await _slow_receive(AsyncQueue(aconn), other, heartbeat=True)
            assert msg is not None and stolen == []
            await aconn.commit()

    run(main)
    assert other.stats().total == 0


def test_async_errors(dsn: str, pg_server: Server) -> None:
    name = create_database(pg_server, "template1", prefix="noext")

    async def main() -> None:
        async with AsyncQueue(dsn, "missing") as q:
            with pytest.raises(errors.QueueNotFound) as info:
                await q.enqueue(1)
            assert info.value.sqlstate == "PQ001" and isinstance(info.value.__cause__, psycopg.Error)
            with pytest.raises(errors.QueueNotFound):
                await q.settings()
            with pytest.raises(errors.QueueNotFound):
                await q.dead_letters()
        async with AsyncQueue(dsn, "-bad") as q:
            with pytest.raises(errors.InvalidQueueName):
                await q.create()
        async with AsyncQueue(dsn, "capped") as q:
            await q.create(max_size=1)
            await q.enqueue(1)
            with pytest.raises(errors.QueueFull):
                await q.enqueue_many([2])
        async with AsyncQueue(pg_server.dsn(name)) as q:
            with pytest.raises(errors.ExtensionNotInstalled, match="CREATE EXTENSION pgqueue"):
                await q.dequeue()
        async with AsyncQueue(pg_server.dsn("no_such_database")) as q:
            with pytest.raises(errors.ConnectionFailed):
                await q.stats()
        with psycopg.connect(dsn) as sync_conn, pytest.raises(TypeError, match="use Queue"):
            AsyncQueue(sync_conn)  # type: ignore[arg-type]

    try:
        run(main)
    finally:
        drop_database(pg_server, name)


# -- one test per behaviour of the sync client (tests/test_client.py), on asyncio -----------------


def server_now(conn: Conn) -> int:
    row = conn.execute("SELECT pgqueue.now_ms()").fetchone()
    assert row is not None
    return int(row[0])


def test_async_payloads_and_content_types_round_trip(dsn: str, conn: Conn) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            values: list[object] = [b"\x00\xff", "zürich", {"a": [1, None]}, [1, 2], 3, 2.5, True, None]
            ids = [await q.enqueue(v) for v in values]
            got = await q.dequeue(10, lock_ms=0)
            assert [m.payload for m in got] == values and [m.id for m in got] == ids
            assert [type(m.payload) for m in got] == [type(v) for v in values]
            assert [m.content_type for m in got[:3]] == [None, "text/plain; charset=utf-8", "application/json"]
            with pytest.raises(errors.UnsupportedPayload):
                await q.enqueue({1, 2})
            with pytest.raises(errors.UnsupportedPayload):
                await q.enqueue(float("nan"))

    run(main)
    assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)


def test_async_enqueue_many_is_all_or_nothing_and_ordered(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn, "few") as q:
            await q.create(max_size=2)
            with pytest.raises(errors.QueueFull):
                await q.enqueue_many([1, 2, 3])
            assert (await q.stats()).ready == 0
            ids = await q.enqueue_many(["a", "b"], priority=1)
            assert ids == sorted(ids)
            assert [(m.payload, m.priority) for m in await q.dequeue(2)] == [("a", 1), ("b", 1)]
            with pytest.raises(errors.InvalidArgument):
                await q.enqueue_many("ab")

    run(main)


def test_async_priority_delay_and_at(dsn: str, conn: Conn) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            normal = await q.enqueue("normal")
            high = await q.enqueue("high", priority=5)
            before = server_now(conn)  # (the clock around the call: a loaded machine may take seconds)
            later = await q.enqueue("later", delay=timedelta(seconds=60))
            after = server_now(conn)
            when = datetime.now(timezone.utc) + timedelta(hours=1)
            at = await q.enqueue("at", at=when)
            due = dict(conn.execute("SELECT id, dequeue_at FROM pgqueue.message").fetchall())
            assert due[high] == -6
            assert before + 60000 <= due[later] <= after + 60000
            assert abs(due[at] - int(when.timestamp() * 1000)) <= 1
            assert [m.id for m in await q.dequeue(10)] == [high, normal]
            with pytest.raises(errors.InvalidArgument):
                await q.enqueue("x", delay=1, priority=1)
            with pytest.raises(errors.InvalidArgument):
                await q.enqueue("x", delay=-1)

    run(main)


def test_async_lease_calls_return_false_on_a_stale_token(dsn: str, conn: Conn) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            await q.enqueue_many(["a", "b", "c"])
            a, b, c = await q.dequeue(3, lock_ms=60000)
            assert await q.heartbeat(a, 1000) and await q.complete(a)
            assert not await q.complete(a) and not await q.heartbeat(a) and not await q.fail(a, "x")
            assert await q.defer(b, delay=0, state=b"page=2")
            assert not await q.defer(b)  # the token moved on
            [again] = await q.dequeue(1)
            assert (again.id, again.attempts, again.state) == (b.id, 2, b"page=2")
            assert await q.fail(c, "boom", delay=3600)
            assert conn.execute("SELECT last_error FROM pgqueue.message WHERE id = %s", (c.id,)).fetchone() == ("boom",)
            assert await q.complete_many([again]) == []
            assert await q.complete_many([again]) == [again]  # lost: completed already

    run(main)


def test_async_fail_to_dead_letters_then_requeue_and_purge(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn, "dl") as q:
            await q.create(max_attempts=1)
            await q.enqueue_many([{"n": i} for i in range(3)])
            for m in await q.dequeue(3):
                assert await q.fail(m, KeyError(m.payload))
            dead = await q.dead_letters()
            assert [d.attempts for d in dead] == [1, 1, 1] and dead[0].last_error == "KeyError: {'n': 0}"
            assert isinstance(dead[0].dead_at, datetime)
            assert await q.dead_letters(2, after=dead[0]) == dead[1:]  # the next page
            assert await q.requeue_dead([dead[0].id], delay=60) == 1
            assert (await q.stats()).scheduled == 1
            assert await q.purge_dead(before=dead[0].dead_at) == 0  # none died before the first
            assert await q.purge_dead([dead[1].id]) == 1
            assert await q.purge_dead() == 1
            assert await q.dead_letters() == []

    run(main)


def test_async_next_due_is_a_datetime(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            assert await q.next_due() is None
            when = datetime(2100, 1, 1, tzinfo=timezone.utc)
            await q.enqueue("x", at=when)
            assert await q.next_due() == when

    run(main)


def test_async_receive_back_off_and_lock_ms_zero(dsn: str, conn: Conn) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn, "r") as q:
            await q.create(retry_base_ms=10000, retry_cap_ms=10000)
            await q.enqueue("x")
            before = server_now(conn)  # the failure's back-off counts from a time between these two
            with pytest.raises(RuntimeError):
                async with q.receive() as msg:
                    assert msg is not None
                    raise RuntimeError("later")
            after = server_now(conn)
            due = await q.next_due()
            # the first retry's back-off: 10 s with jitter in [base/2, base]
            assert due is not None and to_datetime(before + 5000) <= due <= to_datetime(after + 10000)
            with pytest.raises(errors.InvalidArgument):
                async with q.receive(lock_ms=0):
                    pass

    run(main)


def test_async_dsn_queue_opens_lazily_and_closes(dsn: str, conn: Conn) -> None:
    def backends() -> int:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])

    async def main() -> None:
        q = AsyncQueue(dsn)
        assert backends() == 0  # nothing opened yet
        await q.enqueue(1)
        assert backends() == 1
        await q.close()
        deadline = time.monotonic() + 30
        while backends() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert backends() == 0
        with pytest.raises(errors.PgQueueError, match="closed"):
            await q.enqueue(2)
        async with AsyncQueue(dsn) as q2:
            await q2.enqueue(2)
            async with q2.receive() as msg:  # the heartbeat connection is a second one
                assert msg is not None and backends() == 2
        deadline = time.monotonic() + 30
        while backends() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert backends() == 0

    run(main)


def test_async_wrong_sources_and_conninfo(dsn: str) -> None:
    with pytest.raises(TypeError):
        AsyncQueue(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        AsyncQueue(dsn, 7)  # type: ignore[arg-type]

    async def main() -> None:
        assert AsyncQueue(dsn).conninfo == dsn
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            dbname = aconn.info.dbname
            async with await psycopg.AsyncConnection.connect(AsyncQueue(aconn).conninfo) as again:
                assert again.info.dbname == dbname
        async with AsyncConnectionPool(dsn, min_size=1, open=False) as pool:
            async with await psycopg.AsyncConnection.connect(AsyncQueue(pool).conninfo) as again:
                assert again.info.dbname == dbname

    run(main)


def test_async_create_settings_alter_drop_and_module_functions(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn, "mgmt") as q:
            await q.create(lock_ms=5000, max_attempts=3, notify=True)
            with pytest.raises(errors.QueueExists):
                await q.create()
            await q.create(if_not_exists=True)
            settings = await q.settings()
            assert (settings.lock_ms, settings.max_attempts, settings.notify) == (5000, 3, True)
            assert isinstance(settings.created_at, datetime)
            await q.alter(max_attempts=0, notify=False)
            assert ((await q.settings()).max_attempts, (await q.settings()).notify) == (None, False)
            with pytest.raises(errors.InvalidArgument):
                await q.alter(lock_ms=0)
            assert [s.queue for s in await list_queues(dsn)] == ["default", "mgmt"]
            await q.enqueue(1)
            assert [(s.queue, s.ready) for s in await all_stats(dsn)] == [("default", 0), ("mgmt", 1)]
            assert await q.drop() and not await q.drop()
            with pytest.raises(errors.ProtectedQueue):
                await AsyncQueue(dsn).drop()

    run(main)


def test_async_tasks_and_reject(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn, "t") as q:
            await q.create(max_attempts=5)
            await q.enqueue({"to": "x"}, task="send_email")
            [m] = await q.dequeue(1)
            assert (m.task, m.payload) == ("send_email", {"to": "x"})
            assert await q.reject(m, "no such task") and not await q.reject(m, "again")
            [dead] = await q.dead_letters()
            assert (dead.attempts, dead.last_error) == (1, "no such task")
            with pytest.raises(errors.InvalidArgument):
                await q.enqueue(1, task="bad name")

    run(main)


def test_async_a_reject_inside_a_task_group_in_a_receive_block_dead_letters_at_once(dsn: str) -> None:
    """A Reject raised by a task of an asyncio.TaskGroup reaches the block's end as an
    ExceptionGroup: all its leaves are Rejects, so the message is rejected (last_error the
    Reject's text); a group that mixes a Reject with another error fails it (a retry)."""
    from pgqueue import Reject

    async def check(order: object) -> None:
        raise Reject(f"not an order: {order!r}")

    async def main() -> None:
        async with AsyncQueue(dsn, "jobs") as q:
            await q.create(max_attempts=5, retry_base_ms=3_600_000, retry_cap_ms=3_600_000)
            tasked, mixed = await q.enqueue_many(["a", "b"])
            with pytest.raises(ExceptionGroup):
                async with q.receive() as msg:
                    assert msg is not None and msg.id == tasked
                    async with asyncio.TaskGroup() as tg:
                        tg.create_task(check(msg.payload))
            with pytest.raises(ExceptionGroup):
                async with q.receive() as msg:
                    assert msg is not None and msg.id == mixed
                    raise ExceptionGroup("mixed", [Reject("one"), ValueError("two")])
            [dead] = await q.dead_letters()
            assert (dead.id, dead.attempts, dead.last_error) == (tasked, 1, "Reject: not an order: 'a'")
            stats = await q.stats()
            assert (stats.scheduled, stats.leased) == (1, 0)  # the mixed one: a retry

    run(main)


async def _async_every_kind_of_call(source: psycopg.AsyncConnection[Any] | AsyncConnectionPool[Any]) -> None:
    """The calls of test_client._every_kind_of_call, on an AsyncQueue."""
    q = AsyncQueue(source, "jobs")
    await q.create(max_attempts=3, retry_base_ms=3_600_000, retry_cap_ms=3_600_000)
    first, second, third = await q.enqueue_many(["a", {"b": [1, None]}, b"c"])
    async with q.receive() as msg:
        assert msg is not None and (msg.id, msg.payload) == (first, "a")
    with pytest.raises(ValueError):
        async with q.receive() as msg:
            assert msg is not None and msg.id == second
            raise ValueError("retry me")
    [got] = await q.dequeue()
    assert (got.id, got.payload) == (third, b"c")
    assert await q.complete(got) and not await q.complete(got)
    assert await q.dead_letters() == [] and [p.id for p in await q.peek()] == [second]  # (to be retried)
    with pytest.raises(errors.QueueNotFound):
        await AsyncQueue(source, "missing").dead_letters()  # (an empty answer, then the probe)
    stats = await q.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 1, 0)
    assert [s.queue for s in await list_queues(source)] == ["default", "jobs"]
    if isinstance(source, psycopg.AsyncConnection):
        async with source.transaction():
            tx = await q.enqueue("in a transaction")
            async with q.receive() as msg:
                assert msg is not None and msg.id == tx
        assert (await q.stats()).total == 1


@pytest.mark.parametrize("factory", [psycopg.AsyncRawCursor, psycopg.AsyncClientCursor], ids=lambda f: f.__name__)
def test_async_a_callers_connection_of_any_cursor_factory_runs_every_call(
        factory: type[psycopg.AsyncCursor[Any]], dsn: str) -> None:
    """As test_client's: on an AsyncConnection whose cursor_factory is an AsyncRawCursor every
    call failed with a psycopg TypeError; pgqueue runs them on plain cursors there, and the
    caller's own cursors stay the connection's. An AsyncClientCursor runs them as they are."""
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, cursor_factory=factory) as c:
            await _async_every_kind_of_call(c)
            assert type(c.cursor()) is factory
        async with AsyncConnectionPool(dsn, min_size=1, max_size=2, kwargs={"cursor_factory": factory}) as pool:
            await AsyncQueue(pool, "jobs").drop()
            await _async_every_kind_of_call(pool)

    run(main)


# -- the behaviours of tests/client_scenarios.py, written once for both clients ---------------


@pytest.mark.parametrize("scenario", [
    scenarios.enqueued_by_sql_is_read,
    scenarios.unserialisable_payload_is_refused_before_the_server,
    scenarios.dequeue_limit_lease_and_delete_on_dequeue,
    scenarios.complete_many_uses_each_messages_own_token,
    scenarios.complete_and_dequeue_in_one_statement,
    scenarios.an_older_delivery_beside_the_newest_is_lost,
    heartbeat_many_renews_each_with_its_own_token,
    scenarios.cancel_refuses_what_is_not_a_list_of_ids,
    scenarios.a_mapping_is_refused_where_values_are_taken,
    scenarios.batch_calls_refuse_what_is_not_an_iterable,
    scenarios.next_due_of_a_priority_message_is_the_epoch,
    scenarios.batches_of_more_than_10000_messages_are_refused,
    scenarios.a_bad_time_names_its_parameter,
], ids=lambda s: s.__name__)
def test_async_shared_scenario(scenario: scenarios.Scenario, dsn: str, conn: Conn) -> None:
    Queue(conn, "jobs").create()
    scenarios.run(scenario, AsyncQueue(dsn, "jobs"), conn)


def test_async_nul_in_a_name_group_or_key_is_refused_before_anything_is_sent(dsn: str, conn: Conn) -> None:
    scenarios.run_on_callers_connection(scenarios.nul_in_a_name_group_or_key_is_refused_before_anything_is_sent,
                                        AsyncQueue, dsn, conn, autocommit=False)


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "transaction-mode"])
def test_async_a_refused_receive_aborts_the_callers_transaction(autocommit: bool, dsn: str, conn: Conn) -> None:
    scenarios.run_on_callers_connection(scenarios.a_refused_receive_aborts_the_callers_transaction,
                                        AsyncQueue, dsn, conn, autocommit=autocommit)


def test_async_the_10000_message_limit_is_documented_where_the_server_enforces_it() -> None:
    """(the behaviour: scenarios.batches_of_more_than_10000_messages_are_refused, above)"""
    for method in (AsyncQueue.complete_many, AsyncQueue.complete_and_dequeue, AsyncQueue.heartbeat_many):
        assert "at most 10000" in " ".join((method.__doc__ or "").split()), method.__name__


def test_async_check_server_refuses_a_connection_string_or_a_pool_saying_what_to_pass(dsn: str) -> None:
    """async_check_server(dsn) or (pool) failed deep in psycopg (a str has no cursor); as
    check_server does, it raises a TypeError that says what to pass."""
    import pgqueue
    from pgqueue.compat import async_server_pgqueue

    async def main() -> None:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False) as pool:
            for check in (pgqueue.async_check_server, async_server_pgqueue):
                name = check.__name__
                with pytest.raises(TypeError, match=rf"^{name}\(\) takes a psycopg.AsyncConnection, got str: "
                                                    "connect first") as info:
                    await check(dsn)  # type: ignore[arg-type]
                assert dsn not in str(info.value)
                with pytest.raises(TypeError, match=rf"^{name}\(\) takes a psycopg.AsyncConnection, got "
                                                    r"AsyncConnectionPool: pass one of its connections"):
                    await check(pool)  # type: ignore[arg-type]
            async with pool.connection() as aconn:
                assert (await pgqueue.async_check_server(aconn)).kind == "extension"

    run(main)


def test_async_every_call_on_a_missing_queue_raises_queue_not_found(dsn: str, conn: Conn) -> None:
    scenarios.run(scenarios.missing_queue_errors_carry_the_psycopg_error, AsyncQueue(dsn, "missing"), conn)


def test_async_stats_and_module_functions_over_an_async_connection(dsn: str, conn: Conn) -> None:
    scenarios.run(scenarios.stats_count_each_state, AsyncQueue(dsn, "stats"), conn)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            assert [x.queue for x in await list_queues(aconn)] == ["default", "stats"]
            assert [(x.queue, x.dead) for x in await all_stats(aconn)] == [("default", 0), ("stats", 1)]
            assert not aconn.closed  # the caller's connection stays open
        async with AsyncQueue(dsn) as default:
            assert await default.stats() == QueueStats("default", 0, 0, 0, 0, None)

    run(main)


@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_an_async_call_an_interruption_left_unread_leaves_the_queue_usable(source: str, dsn: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The async twin of test_client's: _AsyncConnector.run reads what an interruption left
    unread before it propagates, so that the next call on the connection works."""
    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True) if source != "dsn" else None
        try:
            async with AsyncQueue(conn if conn is not None else dsn, "jobs") as q:
                await q.create()
                with interrupt_after_sending(monkeypatch, b"message_create"), pytest.raises(KeyboardInterrupt):
                    await q.enqueue("interrupted")
                await q.enqueue("after")
                # (the interrupted statement ran, or psycopg cancelled it: either is an answer)
                got = sorted(m.payload for m in await q.dequeue(10, lock_ms=0))
                assert got in (["after"], ["after", "interrupted"]), got
        finally:
            if conn is not None:
                await conn.close()

    run(main)


@pytest.mark.parametrize("outcome", ["returns", "raises", "cancelled"])
def test_an_async_block_whose_callers_connection_is_closed_settles_its_message_on_one_of_its_own(
        outcome: str, dsn: str) -> None:
    """The async twin of test_client's: the caller's autocommit AsyncConnection closed while the
    block ran (by the caller, or by psycopg 3.3 after a second cancellation during its cancel of
    the block's statement); the message is settled by the block's outcome on a connection of its
    own (a review: the give-back failed, "the connection is closed")."""
    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        async with AsyncQueue(dsn, "jobs") as other:
            q = AsyncQueue(caller, "jobs")
            await q.create(lock_ms=60_000)
            msg_id = await q.enqueue("the block's")
            raised = (asyncio.CancelledError if outcome == "cancelled" else ValueError if outcome == "raises"
                      else None)
            with pytest.raises(raised) if raised is not None else nullcontext():
                async with q.receive(heartbeat=False) as msg:
                    assert msg is not None and msg.id == msg_id
                    await caller.close()
                    if raised is not None:
                        raise raised("the block's own")
            stats = await other.stats()
            expect = {"returns": (0, 0, 0), "raises": (0, 1, 0), "cancelled": (1, 0, 0)}[outcome]
            assert (stats.ready, stats.scheduled, stats.leased) == expect  # settled, not left leased

    run(main)


def test_an_async_lease_taken_in_the_callers_transaction_is_not_settled_elsewhere_once_it_is_closed(
        dsn: str) -> None:
    """The async twin of test_client's: a lease taken inside the caller's transaction rolled back
    with it when the connection closed, and another consumer leased the message again with the
    same token; the block's settling fails instead of completing that consumer's message."""
    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        async with AsyncQueue(dsn, "jobs") as other:
            q = AsyncQueue(caller, "jobs")
            await q.create(lock_ms=60_000)
            await q.enqueue("first")
            msg_id = await q.enqueue("in the caller's transaction")
            async with q.receive(heartbeat=False) as first:  # outside a transaction: conninfo recorded
                assert first is not None
            taken: list[Message] = []
            with pytest.raises((errors.ConnectionFailed, psycopg.OperationalError)):
                async with caller.transaction():
                    async with q.receive(heartbeat=False) as msg:
                        assert msg is not None and (msg.id, msg.attempts) == (msg_id, 1)
                        await caller.close()  # the transaction and its lease roll back
                        deadline = time.monotonic() + 10
                        while not (taken := await other.dequeue(1)) and time.monotonic() < deadline:
                            await asyncio.sleep(0.05)  # until the server has ended the closed session
                        assert [(m.id, m.attempts) for m in taken] == [(msg_id, 1)]  # the same token
            stats = await other.stats()
            assert (stats.ready, stats.scheduled, stats.leased) == (0, 0, 1)  # the other lease stands
            assert await other.complete(taken[0])

    run(main)


def test_an_async_give_back_elsewhere_to_a_server_that_no_longer_answers_gives_up_in_seconds(
        pg_server: Server, dsn: str) -> None:
    """test_client's twin: the connection of the give-back elsewhere is opened with
    connect_timeout 3, not psycopg's default 130 s, against a server that no longer answers."""
    relay = Unanswering(pg_server)
    relayed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(relay.port))

    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(relayed, autocommit=True)
        async with AsyncQueue(dsn, "jobs") as other:
            q = AsyncQueue(caller, "jobs")
            await q.create(lock_ms=60_000)
            msg_id = await q.enqueue("given back to nobody")
            started = 0.0
            with pytest.raises(KeyboardInterrupt) as raised:
                async with q.receive(heartbeat=False) as msg:
                    assert msg is not None and msg.id == msg_id
                    relay.stalled.set()
                    await caller.close()
                    started = time.monotonic()
                    raise KeyboardInterrupt("Ctrl-C")
            assert time.monotonic() - started < 10
            assert any(f"could not release message {msg_id}" in n for n in getattr(raised.value, "__notes__", []))
            stats = await other.stats()
            assert (stats.ready, stats.leased) == (0, 1)  # its lease runs out

    try:
        run(main)
    finally:
        relay.resumed.set()
        relay.close()


@pytest.mark.parametrize(("between", "raised"), [(Relay, "not provably its own"), (MadeUpPid, "closed")],
                         ids=["proxy", "pooler-pid"])
def test_an_async_closed_callers_session_behind_a_proxy_is_left_alone_and_so_is_its_message(
        pg_server: Server, dsn: str, between: type[Relay], raised: str) -> None:
    """test_client's twin: a session with the closed connection's pid that the server sees at a
    proxy's address is not provably the caller's, and a connection whose backend pid is not its
    server process's (a pooler's made-up pid) records no session; either way the session is
    left alone, and the message leased."""
    relay = between(pg_server)
    relayed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(relay.port))

    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(relayed, autocommit=True)
        row = await (await caller.execute("SELECT pg_backend_pid()")).fetchone()
        assert row is not None
        pid = row[0]
        assert (caller.info.backend_pid == pid) is (between is Relay)  # (the pooler's made up)
        async with AsyncQueue(dsn, "jobs") as other:
            q = AsyncQueue(caller, "jobs")
            await q.create(lock_ms=60_000)
            await q.enqueue("completed by nobody")
            with pytest.raises(errors.ConnectionFailed, match=raised):
                async with q.receive(heartbeat=False) as msg:
                    assert msg is not None
                    caller.pgconn.send_query(b"SELECT pg_sleep(3)")  # runs on after the close
                    await caller.close()
            with psycopg.connect(dsn, autocommit=True) as watch:
                assert watch.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                     [pid]).fetchone() == (1,)
            stats = await other.stats()
            assert (stats.ready, stats.leased) == (0, 1)  # its lease runs out

    try:
        run(main)
    finally:
        relay.close()


def test_async_receive_reads_the_callers_pid_only_outside_a_transaction(dsn: str) -> None:
    """The pid check (pg_backend_pid) is a statement: inside the caller's transaction it would run
    in it (under REPEATABLE READ, the statement that takes its snapshot), where the sync client
    runs none (a review). It runs once, before the first lease taken outside a transaction."""
    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        async with caller:
            q = AsyncQueue(caller, "jobs")
            await q.create()
            await q.enqueue_many(["a", "b"])
            async with caller.transaction():
                async with q.receive(heartbeat=False) as msg:
                    assert msg is not None
            assert not q._connector._caller_read
            async with q.receive(heartbeat=False) as msg:
                assert msg is not None
            assert q._connector._caller_read and q._connector._caller_session is not None

    run(main)


def test_async_receive_on_a_closed_callers_connection_raises_connection_failed(dsn: str) -> None:
    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        q = AsyncQueue(caller, "jobs")
        await q.create()
        await q.enqueue("never taken")
        await caller.close()
        with pytest.raises(errors.ConnectionFailed):
            async with q.receive(heartbeat=False):
                pytest.fail("the block never runs")

    run(main)


def test_a_second_cancellation_during_psycopgs_cancel_still_gives_the_async_message_back(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timeout cancels the block's statement; a second cancellation during psycopg's cancel of
    it (anyio's move_on_after cancels at every await) makes psycopg 3.3 close the connection: the
    message is given back on a connection of its own (a review: 10 runs in 10 on 3.3.9 left it
    leased until its lease ran out), once the closed connection's session, which ran the block's
    statement on, has been ended: its write is rolled back (test_client's twin)."""
    async def cancel_interrupted(self: Any, *args: Any, **kwargs: Any) -> None:
        raise asyncio.CancelledError("the second cancellation, during the cancel")

    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            async with AsyncQueue(dsn, "jobs") as other:
                q = AsyncQueue(caller, "jobs")
                await q.create(lock_ms=60_000)
                msg_id = await q.enqueue("cancelled twice")
                await caller.execute("CREATE TABLE side_effects (n integer)")
                pid = caller.info.backend_pid
                monkeypatch.setattr(psycopg.AsyncConnection, "_try_cancel", cancel_interrupted)
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.5):
                        async with q.receive(heartbeat=False) as msg:
                            assert msg is not None
                            await caller.execute("INSERT INTO side_effects SELECT 1 FROM pg_sleep(2)")
                if tuple(int(p) for p in psycopg.__version__.split(".")[:2]) >= (3, 3):
                    assert caller.closed  # what psycopg 3.3 does: the case this test is about
                stats = await other.stats()
                assert (stats.ready, stats.leased) == (1, 0)
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as watch:
                    cur = await watch.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
                    assert await cur.fetchone() == (0,)  # ended before the give-back
                    [again] = await other.dequeue(1)
                    assert again.id == msg_id and again.attempts == 2
                    await asyncio.sleep(2.0)  # past the statement's own end
                    cur = await watch.execute("SELECT count(*) FROM side_effects")
                    assert await cur.fetchone() == (0,)  # rolled back
        finally:
            await caller.close()

    run(main)


def test_async_receive_gives_the_message_back_when_interrupted(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            await q.enqueue("work")
            with pytest.raises(KeyboardInterrupt):
                async with q.receive() as msg:
                    raise KeyboardInterrupt
            [again] = await q.dequeue()  # due at once, not backed off
            assert msg is not None and again.id == msg.id and again.attempts == 2

    run(main)


class AsyncCountingCursor(psycopg.AsyncCursor[Any]):
    statements: list[str] = []

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> AsyncCountingCursor:
        AsyncCountingCursor.statements.append(str(query))
        await super().execute(query, params, **kwargs)
        return self


def test_async_enqueue_many_is_one_statement(dsn: str) -> None:
    async def main() -> None:
        AsyncCountingCursor.statements = []
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True,
                                                         cursor_factory=AsyncCountingCursor) as aconn:
            ids = await AsyncQueue(aconn).enqueue_many(["a", b"b", {"c": 3}, None])
            assert len(AsyncCountingCursor.statements) == 1
            assert "message_create_batch" in AsyncCountingCursor.statements[0]
            assert [m.id for m in await AsyncQueue(aconn).dequeue(10)] == ids
            assert await AsyncQueue(aconn).enqueue_many([]) == []

    run(main)


def test_async_enqueue_with_business_data_in_one_transaction(dsn: str, conn: Conn) -> None:
    conn.execute("CREATE TABLE orders (id int)")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as tx:
            async with tx.transaction():
                await tx.execute("INSERT INTO orders VALUES (1)")
                await AsyncQueue(tx).enqueue({"order": 1})
            with pytest.raises(RuntimeError):
                async with tx.transaction():
                    await tx.execute("INSERT INTO orders VALUES (2)")
                    await AsyncQueue(tx).enqueue({"order": 2})
                    raise RuntimeError("business failure")

    run(main)
    assert conn.execute("SELECT array_agg(id) FROM orders").fetchone() == ([1],)
    assert [m.payload for m in Queue(conn).dequeue(5)] == [{"order": 1}]


def test_async_receive_with_a_callers_connection_and_rollback(dsn: str, conn: Conn) -> None:
    other = Queue(conn)
    other.enqueue("kept")

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as tx:
            async with AsyncQueue(tx).receive() as msg:
                assert msg is not None
            await tx.rollback()  # the completion is undone with the caller's transaction

    run(main)
    assert [m.payload for m in other.dequeue()] == ["kept"]


def test_async_callers_connection_with_any_row_factory(dsn: str) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row) as aconn:
            q = AsyncQueue(aconn)
            await q.enqueue({"a": 1})
            assert (await q.stats()).ready == 1
            assert [m.payload for m in await q.dequeue()] == [{"a": 1}]
            assert await (await aconn.execute("SELECT 1 AS one")).fetchone() == {"one": 1}

    run(main)


def test_async_listen_statement_receives_the_queues_notifications(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn, "Loud.Queue-1") as q:
            await q.create(notify=True)
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
                await listener.execute(_sql.listen_statement(q.name))
                await q.enqueue("wake up")
                got = [n async for n in listener.notifies(timeout=30, stop_after=1)]
        assert [(n.channel, n.payload) for n in got] == [(_sql.channel_name("Loud.Queue-1"), "Loud.Queue-1")]

    run(main)


def test_async_other_database_errors_are_pgqueue_errors(dsn: str) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as tx:
            q = AsyncQueue(tx)
            with pytest.raises(errors.PgQueueError):
                await q.dequeue(0)
            # the caller's transaction is aborted by the error; the caller decides what to do
            with pytest.raises(errors.PgQueueError) as info:
                await q.stats()
            assert info.value.sqlstate == "25P02" and type(info.value) is errors.PgQueueError
            await tx.rollback()
            assert (await q.stats()).ready == 0

    run(main)


def test_async_connection_refused(dsn: str) -> None:
    async def main() -> None:
        with socket_port() as port:
            async with AsyncQueue(f"host=127.0.0.1 port={port} dbname=x connect_timeout=2") as q:
                with pytest.raises(errors.ConnectionFailed) as info:
                    await q.enqueue(1)
                assert isinstance(info.value.__cause__, psycopg.OperationalError)
                assert "\n" not in str(info.value)

    run(main)


def test_async_next_due_counts_priorities_and_leases(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            await q.enqueue("x", at=4102444800000)
            await q.enqueue("y", priority=2)
            assert await q.next_due() == to_datetime(0)  # due since the epoch (stored: -1 - 2)
            await q.dequeue(1, lock_ms=60000)  # y, leased: due when its lease runs out
            due = await q.next_due()
            assert due is not None and due <= to_datetime(4102444800000)

    run(main)



def test_a_pool_whose_connection_is_a_function(dsn: str) -> None:
    """An AsyncQueue's conninfo (the AsyncWorker's own connections) calls a pool's plain conninfo
    or kwargs function, as Queue's does (before, it refused it: AsyncWorker(AsyncQueue(pool))
    failed with InvalidArgument); an async one it cannot call from a property: it says so rather
    than connect without, say, the password."""
    from pgqueue import AsyncWorker

    async def kwargs() -> dict[str, Any]:
        return {}

    async def conninfo() -> str:
        return dsn

    async def handler(msg: Message) -> None:
        pass

    async def main() -> None:
        async with AsyncConnectionPool(dsn, kwargs=kwargs, min_size=1, open=False) as pool:
            with pytest.raises(errors.InvalidArgument, match="kwargs is an async function"):
                _ = AsyncQueue(pool).conninfo
        async with AsyncConnectionPool(conninfo, min_size=1, open=False) as pool:
            with pytest.raises(errors.InvalidArgument, match="conninfo is an async function.*dsn="):
                _ = AsyncQueue(pool).conninfo
        async with AsyncConnectionPool(lambda: conninfo(), min_size=1, open=False) as pool:  # returns a coroutine
            with pytest.raises(errors.InvalidArgument, match="conninfo is an async function"):
                _ = AsyncQueue(pool).conninfo
        async with AsyncConnectionPool(lambda: dsn, kwargs=lambda: {"application_name": "x"}, min_size=1) as pool:
            queue = AsyncQueue(pool)
            assert queue.conninfo == psycopg.conninfo.make_conninfo(dsn, application_name="x")
            assert await queue.next_due() is None
            AsyncWorker(queue, handler)  # its connections come from queue.conninfo
        async with AsyncConnectionPool(dsn, kwargs={"application_name": "x"}, min_size=1, open=False) as pool:
            assert "application_name=x" in AsyncQueue(pool).conninfo

    run(main)


def test_async_close_while_the_first_call_connects(dsn: str, conn: Conn) -> None:
    """close() does not wait for a connection being opened; the call that opens it must not keep
    it (before, it ran on it and the connection stayed open after close, with nothing to close it)."""

    def backends() -> int:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])

    async def main() -> None:
        q = AsyncQueue(dsn)
        call = asyncio.create_task(q.enqueue(1))
        await asyncio.sleep(0)  # the call is connecting
        await q.close()
        with pytest.raises(errors.PgQueueError, match="the queue is closed"):
            await call
        deadline = time.monotonic() + 30
        while backends() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert backends() == 0
        row = conn.execute("SELECT count(*) FROM pgqueue.message").fetchone()
        assert row == (0,)

    run(main)


class SlowLink:
    """A TCP proxy to the test server that can hold back the server's answers: a link with
    latency, on which a statement's effect is done on the server before its result arrives."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.delay = 0.0
        self.server: asyncio.Server | None = None
        self.pumps: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self.target)
        for task in (self._pump(client_r, server_w, slow=False), self._pump(server_r, client_w, slow=True)):
            pump = asyncio.ensure_future(task)
            self.pumps.add(pump)
            pump.add_done_callback(self.pumps.discard)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, slow: bool) -> None:
        try:
            while data := await reader.read(65536):
                if slow and self.delay:
                    await asyncio.sleep(self.delay)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for pump in list(self.pumps):
            pump.cancel()


def test_async_receive_cancelled_while_its_dequeue_answers_gives_the_message_back(
        pg_server: Server, dsn: str, conn: Conn) -> None:
    """A timeout that fires after the server leased the message but before its answer arrived:
    psycopg's cancel request comes too late and it drops the answer, so before, the message
    stayed leased by no one until its lease ran out (an attempt spent without a handler; a dead
    letter at max_attempts=1)."""

    async def main() -> None:
        link = SlowLink(pg_server.host, pg_server.port)
        port = await link.start()
        q = AsyncQueue(psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=port))
        try:
            await q.alter(max_attempts=1)
            msg_id = await q.enqueue("work")
            link.delay = 0.5
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2):
                    async with q.receive(lock_ms=60_000, heartbeat=False):
                        pytest.fail("the block never runs: the call was cancelled")
            link.delay = 0
            stats = await q.stats()
            assert (stats.ready, stats.leased, stats.dead) == (1, 0, 0)
            [again] = await q.dequeue(1)  # due at once, and the connection still usable
            assert again.id == msg_id and again.payload == "work"
        finally:
            await q.close()
            await link.close()

    run(main)


def test_a_cancellation_while_receive_completes_waits_for_the_completion(dsn: str) -> None:
    """An asyncio.timeout around `async with q.receive()` that ran out while the message was
    being completed (the complete waiting on a row lock) cancelled the statement: the finished
    message stayed leased, to be delivered again (a dead letter at max_attempts 1, a review of
    the client, session 44). Now the settling ends first (up to CANCEL_WAIT), then the
    cancellation goes on."""
    Queue(dsn, "once").create(max_attempts=1)

    async def main() -> None:
        async with AsyncQueue(dsn, "once") as q:
            await q.enqueue("work")
            with psycopg.connect(dsn) as blocker:
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(None) as deadline:
                        async with q.receive(lock_ms=60000, heartbeat=False) as msg:
                            assert msg is not None
                            # another session holds the row: the complete waits for it
                            blocker.execute("SELECT 1 FROM pgqueue.message WHERE id = %s FOR UPDATE", (msg.id,))
                            # the timeout runs out half a second from here (from the block's start,
                            # a loaded machine could get there before the dequeue had answered), the
                            # row is freed half a second later
                            loop = asyncio.get_running_loop()
                            deadline.reschedule(loop.time() + 0.5)
                            loop.call_later(1.0, blocker.rollback)
                stats = await q.stats()
                assert (stats.ready, stats.leased, stats.dead) == (0, 0, 0)
                assert (await q.counters()).completed == 1

    run(main)


async def _every_text_read_async(queue: AsyncQueue, source: Any) -> None:
    """Every call of an AsyncQueue that reads texts back, on a SQL_ASCII database over a caller's
    async connection or pool: str each time, not bytes (see test_client's SQL_ASCII test)."""
    from pgqueue.async_client import all_counters

    await queue.create(group_concurrency=1, max_attempts=1)
    await queue.enqueue("café", key="clé", group="grüppe", task="send")
    [group] = await queue.group_stats()
    assert group.group == "grüppe"
    [msg] = await queue.dequeue(1)  # TypeError after the lease was committed
    assert (msg.queue, msg.payload, msg.content_type, msg.task) == (
        "sqlascii_q", "café", "text/plain; charset=utf-8; task=send", "send")
    assert await queue.fail(msg, "Zoë failed")
    [dead] = await queue.dead_letters()
    assert (dead.payload, dead.last_error) == ("café", "Zoë failed")
    assert await queue.requeue_dead() == 1
    [pending] = await queue.peek()
    assert (pending.payload, pending.last_error) == ("café", "Zoë failed")
    async with queue.receive() as got:
        assert got is not None and got.payload == "café"
    await queue.enqueue({"to": "a@example.com"})
    [msg] = await queue.dequeue(1)
    assert msg.payload == {"to": "a@example.com"}
    assert await queue.complete(msg)
    assert (await queue.stats()).queue == (await queue.counters()).queue == (await queue.settings()).queue == "sqlascii_q"
    assert "sqlascii_q" in [s.queue for s in await list_queues(source)]
    assert "sqlascii_q" in [s.queue for s in await all_stats(source)]
    assert "sqlascii_q" in [c.queue for c in await all_counters(source)]
    await queue.drop()


def test_a_callers_async_connection_and_pool_on_a_sql_ascii_database_give_texts_back_as_str(
        pg_server: Server, template_db: str) -> None:
    from helpers import database_in

    async def main(dsn: str) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert conn.info.encoding == "ascii"
            await _every_text_read_async(AsyncQueue(conn, "sqlascii_q"), conn)
            assert conn.info.encoding == "ascii"  # left as it was
        async with await psycopg.AsyncConnection.connect(dsn) as conn:  # in the caller's transaction
            await _every_text_read_async(AsyncQueue(conn, "sqlascii_q"), conn)
            await conn.commit()
        async with AsyncConnectionPool(dsn, min_size=1, open=False) as pool:
            await _every_text_read_async(AsyncQueue(pool, "sqlascii_q"), pool)

    with database_in(pg_server, "SQL_ASCII") as name:
        run(lambda: main(pg_server.dsn(name)))


def test_a_callers_dumper_for_lists_does_not_change_the_statements(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The async twin of test_client's: a dumper the caller registered for ``list`` (JSON) made
    the statements' arrays JSON (enqueue_many: a bare TypeError; cancel, purge_dead,
    requeue_dead: 42846; a review). Registered here on a copy of psycopg's global adapters,
    which the test's end puts back, and on a caller's connection."""
    from psycopg.adapt import AdaptersMap
    from psycopg.types.json import JsonbDumper

    adapters = AdaptersMap(psycopg.postgres.adapters)
    monkeypatch.setattr(psycopg.postgres, "adapters", adapters)
    monkeypatch.setattr(psycopg, "adapters", adapters)
    psycopg.adapters.register_dumper(list, JsonbDumper)

    async def every_call_with_a_list(q: AsyncQueue) -> None:
        ids = await q.enqueue_many([b"a", "b", {"c": 3}, None, 5], keys=["k1", None, None, None, None])
        assert len(ids) == 5
        assert [p.id for p in await q.cancel([ids[4]])] == [ids[4]]
        msgs = await q.dequeue(2, lock_ms=60000)
        assert await q.complete_many(msgs[:1]) == []
        got, lost = await q.complete_and_dequeue(msgs[1:], 1, lock_ms=60000)
        assert lost == [] and len(got) == 1
        assert await q.reject(got[0], "x")
        assert await q.requeue_dead([got[0].id]) == 1
        [m] = await q.dequeue(lock_ms=60000)
        assert await q.reject(m, "y")
        assert await q.purge_dead([m.id]) == 1
        assert await q.dequeue(5, lock_ms=0) != []

    async def main() -> None:
        async with AsyncQueue(dsn, "default") as q:
            await every_call_with_a_list(q)
        async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool:
            await every_call_with_a_list(AsyncQueue(pool, "default"))
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as caller:
            caller.adapters.register_dumper(list, JsonbDumper)
            await every_call_with_a_list(AsyncQueue(caller, "default"))

    run(main)


def test_an_error_text_a_latin1_database_cannot_hold_fails_the_message_in_a_transaction_too(
        pg_server: Server, template_db: str) -> None:
    """The async twin of test_client's: under client_encoding UTF8 on a LATIN1 database the
    server's refusal of an error text (22P05) aborted the transaction, and the ASCII retry of
    fail / reject failed with 25P02 (a pool's message stayed leased; a caller's transaction
    could never fail it: a review). The ASCII twin is sent in its place, decided before anything
    is sent: a savepoint around a first try, on a connection tasks share, rolled back another
    task's statement run between its statements (a review of that fix)."""
    from helpers import database_in

    async def main(name: str) -> None:
        utf8 = pg_server.dsn(name, client_encoding="UTF8")
        setup = AsyncQueue(pg_server.dsn(name), "default")
        await setup.enqueue_many(["a", "b", "c"])
        async with AsyncConnectionPool(utf8, min_size=1, max_size=2, open=False) as pool:
            q = AsyncQueue(pool, "default")
            [m] = await q.dequeue(lock_ms=60000)
            assert await q.fail(m, "ошибка")
            [m] = await q.dequeue(lock_ms=60000)
            assert await q.reject(m, ValueError("€"))
        async with await psycopg.AsyncConnection.connect(utf8, prepare_threshold=0) as tx:  # a caller's transaction
            q = AsyncQueue(tx, "default")
            [m] = await q.dequeue(lock_ms=60000)
            await tx.commit()
            kept = await q.enqueue("kept")
            assert await q.fail(m, "ошибка")
            assert tx.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # left to the caller
            await tx.commit()
        async with await psycopg.AsyncConnection.connect(utf8, autocommit=True) as shared:  # two tasks on it
            q = AsyncQueue(shared, "shared")
            await q.create()
            await q.enqueue("d")
            [m] = await q.dequeue(lock_ms=60000)
            async with shared.transaction():
                failing = asyncio.create_task(q.fail(m, "ошибка"))
                await asyncio.sleep(0)
                another = await q.enqueue("another task's")
                assert await failing
            cur = await shared.execute("SELECT count(*) FROM pgqueue.message WHERE id = %s", (another,))
            assert await cur.fetchone() == (1,)  # it was rolled back with the savepoint
        assert (await setup.stats()).leased == 0
        async with await psycopg.AsyncConnection.connect(pg_server.dsn(name)) as conn:
            cur = await conn.execute("SELECT last_error FROM pgqueue.message WHERE last_error IS NOT NULL "
                                     "UNION ALL SELECT last_error FROM pgqueue.dead_letter")
            stored = sorted(r[0] for r in await cur.fetchall())
            cur = await conn.execute("SELECT count(*) FROM pgqueue.message WHERE id = %s", (kept,))
            assert await cur.fetchone() == (1,)
        escaped = "\\u043e\\u0448\\u0438\\u0431\\u043a\\u0430"
        assert stored == sorted([escaped] * 3 + ["ValueError: \\u20ac"]), stored
        await setup.close()

    with database_in(pg_server, "LATIN1") as name:
        run(lambda: main(name))


@pytest.mark.parametrize("ending,interruption", [("return", "cancel"), ("raise", "cancel"), ("return", "timeout")])
def test_a_cancellation_while_receive_stops_its_heartbeats_still_settles_the_message(
        ending: str, interruption: str, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancellation (an asyncio.timeout, a TaskGroup) that landed while receive() stopped its
    heartbeat task went out of the block's exit before the settling: a block that had returned
    left its message leased (an attempt spent; a dead letter at max_attempts 1), one that had
    raised left it unfailed (about 3% of random short timeouts, a review of the client). Now
    the message is settled by the block's outcome, then the cancellation goes on."""
    from pgqueue._lease import AsyncHeartbeats

    original = AsyncHeartbeats.stop
    stopping: list[asyncio.Event] = []

    async def slow_stop(self: AsyncHeartbeats, timeout: float | None = None) -> None:
        stopping[0].set()
        await asyncio.sleep(0.2)  # the cancellation lands meanwhile
        await original(self, timeout)

    monkeypatch.setattr(AsyncHeartbeats, "stop", slow_stop)
    Queue(dsn, "once").create(max_attempts=1)

    async def main() -> None:
        stopping.append(asyncio.Event())
        async with AsyncQueue(dsn, "once") as q:
            await q.enqueue("work")
            deadline: list[asyncio.Timeout] = []

            async def consumer() -> None:
                async with asyncio.timeout(None) as cm:
                    deadline.append(cm)
                    async with q.receive(lock_ms=60000) as msg:
                        assert msg is not None
                        if ending == "raise":
                            raise ValueError("boom")

            task = asyncio.create_task(consumer())
            await stopping[0].wait()
            if interruption == "cancel":
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                deadline[0].reschedule(asyncio.get_running_loop().time())
                with pytest.raises(TimeoutError):
                    await task
            stats = await q.stats()
            if ending == "return":
                assert (stats.ready, stats.leased, stats.dead) == (0, 0, 0)
                assert (await q.counters()).completed == 1
            else:
                assert (stats.ready, stats.leased, stats.dead) == (0, 0, 1)
                [dead] = await q.dead_letters()
                assert dead.last_error is not None and "boom" in dead.last_error

    run(main)


def test_async_receive_bounds_the_wait_for_a_stuck_heartbeat(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A beat stuck on a dead connection held the end of the block for as long as it hung (the
    heartbeat task was awaited without a bound); now for CANCEL_WAIT seconds at most."""
    from pgqueue import async_client
    from pgqueue._lease import AsyncHeartbeats

    async def stuck(self: AsyncHeartbeats) -> list[Message]:
        await asyncio.sleep(3600)
        return []

    monkeypatch.setattr(async_client, "CANCEL_WAIT", 0.3)
    monkeypatch.setattr(AsyncHeartbeats, "renew", stuck)

    async def main() -> None:
        async with AsyncQueue(dsn) as q:
            await q.enqueue("work")
            started = time.monotonic()
            async with asyncio.timeout(10):
                async with q.receive(lock_ms=300) as msg:
                    assert msg is not None
                    await asyncio.sleep(0.3)  # a beat is stuck meanwhile
            assert time.monotonic() - started < 5
            assert (await q.counters()).completed == 1

    run(main)


def test_async_heartbeats_on_an_autocommit_connection_other_tasks_share(dsn: str, conn: Conn) -> None:
    """Another task's statement in flight on the caller's autocommit connection when receive()
    chose its heartbeats: the status was ACTIVE, taken for a transaction, and the block went
    without heartbeats: its lease ran out and another consumer got the message. Now the choice
    is made from the connection's mode and the status the dequeue's own statement left."""
    other = Queue(conn)

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            q = AsyncQueue(aconn)
            await q.enqueue("slow")
            stop = asyncio.Event()

            async def busy() -> None:  # e.g. a producer sharing the connection
                while not stop.is_set():
                    await aconn.execute("SELECT pg_sleep(0.05)")

            task = asyncio.create_task(busy())
            await asyncio.sleep(0.1)
            try:
                msg, stolen = await _slow_receive(q, other, heartbeat=True)
            finally:
                stop.set()
                await task
            assert msg is not None and stolen == []

    run(main)
    assert other.stats().total == 0


def test_async_check_server(dsn: str, bare_dsn: str) -> None:
    """pgqueue.check_server had no asyncio form: given an AsyncConnection it failed with a bare
    TypeError deep in psycopg. async_check_server does its checks; check_server names it."""
    import pgqueue
    from pgqueue.compat import ServerPgQueue, async_server_pgqueue, server_pgqueue

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            installed = await pgqueue.async_check_server(aconn)
            assert installed == ServerPgQueue(installed.version, "extension")
            assert installed.version.split(".")[:2] == pgqueue.__version__.split(".")[:2]
            assert await async_server_pgqueue(aconn) == installed
            with pytest.raises(TypeError, match=r"await pgqueue\.async_check_server\(conn\)"):
                pgqueue.check_server(aconn)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="async_server_pgqueue"):
                server_pgqueue(aconn)  # type: ignore[arg-type]
        async with await psycopg.AsyncConnection.connect(bare_dsn) as aconn:
            assert await async_server_pgqueue(aconn) is None
            with pytest.raises(errors.ExtensionNotInstalled):
                await pgqueue.async_check_server(aconn)

    run(main)


def _slow_heartbeat_stop(monkeypatch: pytest.MonkeyPatch, stopping: list[asyncio.Event], pause: float) -> None:
    """Make AsyncHeartbeats.stop set ``stopping[0]`` and take ``pause`` seconds (a cancellation lands)."""
    from pgqueue._lease import AsyncHeartbeats

    original = AsyncHeartbeats.stop

    async def slow_stop(self: AsyncHeartbeats, timeout: float | None = None) -> None:
        stopping[0].set()
        await asyncio.sleep(pause)
        await original(self, timeout)

    monkeypatch.setattr(AsyncHeartbeats, "stop", slow_stop)


def test_receive_renews_the_lease_it_was_given_when_the_queues_lock_ms_is_lowered(dsn: str) -> None:
    """As Queue.receive's (test_client.py): the heartbeats renewed for the queue's lock_ms of
    each beat, and a lock_ms lowered while the block ran let another consumer take the message
    (a review)."""
    admin = Queue(dsn, "shortened")
    admin.create(lock_ms=3000)
    admin.enqueue("long job")

    async def main() -> None:
        async with AsyncQueue(dsn, "shortened") as q, AsyncQueue(dsn, "shortened") as other:
            async with q.receive() as msg:
                assert msg is not None
                await asyncio.to_thread(admin.alter, lock_ms=200)
                stolen: list[object] = []
                deadline = time.monotonic() + 2.5  # two beats (one a second)
                while time.monotonic() < deadline:
                    stolen += await other.dequeue(1, lock_ms=60_000)
                    await asyncio.sleep(0.05)
                assert stolen == []
            assert (await q.counters()).completed == 1 and (await q.stats()).total == 0

    run(main)
    admin.close()


def test_a_callers_connection_closed_before_the_heartbeats_start_is_a_pgqueue_error(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As Queue.receive's (test_client.py): the caller's connection closed between the dequeue
    and the heartbeats' read of its settings let a bare psycopg.OperationalError out of
    receive() (a review). Now it is ConnectionFailed, and the message is given back."""
    from pgqueue import async_client

    original = async_client._AsyncConnector.heartbeat_runner

    def closed_first(self: Any, in_transaction: bool = False) -> Any:
        assert self._conn is not None
        self._conn.pgconn.finish()  # another task closes the caller's connection at this moment
        closing.append(self._conn)
        return original(self, in_transaction)

    closing: list[Any] = []
    monkeypatch.setattr(async_client._AsyncConnector, "heartbeat_runner", closed_first)
    Queue(dsn, "closed").create()

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            q = AsyncQueue(aconn, "closed")
            await q.enqueue("work")
            ran: list[object] = []
            with pytest.raises(errors.ConnectionFailed):
                async with q.receive() as msg:
                    ran.append(msg)
            assert ran == [] and closing
        async with AsyncQueue(dsn, "closed") as again:
            stats = await again.stats()
            assert (stats.ready, stats.leased) == (1, 0)

    run(main)


def test_a_cancellation_while_a_failed_heartbeat_setup_unwinds_goes_on(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeats' connection could not be opened (ConnectionFailed) and a cancellation
    landed as the setup unwound: the cancellation was swallowed (the result of the unwind
    discarded), the task went on as if never cancelled. Now the message is given back, then
    the cancellation goes on, the setup's error as its context."""
    import contextlib

    from pgqueue import async_client

    @contextlib.asynccontextmanager
    async def refused(self: Any, in_transaction: bool = False) -> Any:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # a cancellation arrives at this moment
        raise errors.ConnectionFailed("too many connections")
        yield  # pragma: no cover

    monkeypatch.setattr(async_client._AsyncConnector, "heartbeat_runner", refused)
    Queue(dsn, "setup").create()

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            q = AsyncQueue(aconn, "setup")
            await q.enqueue("work")
            ran: list[str] = []

            async def consumer() -> None:
                async with q.receive() as msg:
                    ran.append(f"block ran with {msg}")

            task = asyncio.create_task(consumer())
            with pytest.raises(asyncio.CancelledError) as caught:
                await task
            assert task.cancelled() and ran == []
            assert isinstance(caught.value.__context__, errors.ConnectionFailed)
            stats = await q.stats()
            assert (stats.ready, stats.leased) == (1, 0)

    run(main)


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit])
def test_an_interruption_raised_by_the_async_block_is_not_replaced_by_a_cancellation(
        raised: type[BaseException], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block that raised KeyboardInterrupt or SystemExit, a cancellation landing while its
    heartbeats stopped: the async with raised CancelledError instead (the held-back
    cancellation replaced any outcome that was not itself a cancellation). Now it replaces
    only an ordinary error; the interruption goes on, as in the sync client."""
    stopping: list[asyncio.Event] = []
    _slow_heartbeat_stop(monkeypatch, stopping, 0.2)
    Queue(dsn, "interrupted").create()

    async def main() -> None:
        stopping.append(asyncio.Event())
        async with AsyncQueue(dsn, "interrupted") as q:
            await q.enqueue("work")
            got: list[BaseException] = []

            async def consumer() -> None:
                try:
                    async with q.receive(lock_ms=60000) as msg:
                        assert msg is not None
                        raise raised()
                except BaseException as exc:  # noqa: BLE001 (an interruption must not leave the loop)
                    got.append(exc)

            task = asyncio.create_task(consumer())
            await stopping[0].wait()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert [type(e) for e in got] == [raised]
            stats = await q.stats()
            assert (stats.ready, stats.leased) == (1, 0)  # given back

    run(main)


def test_a_cancellation_while_receive_stops_its_heartbeats_goes_on_when_the_settling_fails(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The block returned, a cancellation landed while the heartbeats stopped, then the
    complete failed (a lost connection): its error went out of the async with and the
    cancellation was dropped. Now the cancellation goes on, the settling's error its context."""
    from pgqueue import async_client

    async def failing(self: AsyncQueue, call: Any, committed: bool = False) -> bool:
        raise errors.ConnectionFailed("server closed the connection unexpectedly")

    stopping: list[asyncio.Event] = []
    _slow_heartbeat_stop(monkeypatch, stopping, 0.2)
    monkeypatch.setattr(async_client.AsyncQueue, "_settle_call", failing)
    Queue(dsn, "settle").create()

    async def main() -> None:
        stopping.append(asyncio.Event())
        async with AsyncQueue(dsn, "settle") as q:
            await q.enqueue("work")

            async def consumer() -> None:
                async with q.receive(lock_ms=60000) as msg:
                    assert msg is not None

            task = asyncio.create_task(consumer())
            await stopping[0].wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError) as caught:
                await task
            assert task.cancelled()
            assert isinstance(caught.value.__context__, errors.ConnectionFailed)

    run(main)


@pytest.mark.parametrize("during", ["heartbeat stop", "settling"])
def test_two_cancellations_while_receive_ends_still_settle_the_message(
        during: str, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two cancellations 0.1 s apart while the heartbeats stopped (or while the message was
    settled): the second cancelled the wait_for that awaited the first's shielded task, which
    cancelled the task itself; the settling was skipped (or cancelled), the finished block's
    message left leased. Now every cancellation is held back until the message is settled,
    then one goes on."""
    from pgqueue import async_client

    stopping: list[asyncio.Event] = []
    if during == "heartbeat stop":
        _slow_heartbeat_stop(monkeypatch, stopping, 0.5)
    else:
        original = async_client.AsyncQueue._settle_call

        async def slow_settle(self: AsyncQueue, call: Any, committed: bool = False) -> bool:
            stopping[0].set()
            await asyncio.sleep(0.5)
            return await original(self, call, committed)

        monkeypatch.setattr(async_client.AsyncQueue, "_settle_call", slow_settle)
    Queue(dsn, "twice").create()

    async def main() -> None:
        stopping.append(asyncio.Event())
        async with AsyncQueue(dsn, "twice") as q:
            await q.enqueue("work")

            async def consumer() -> None:
                async with q.receive(lock_ms=60000) as msg:
                    assert msg is not None

            task = asyncio.create_task(consumer())
            await stopping[0].wait()
            task.cancel()
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stats = await q.stats()
            assert (stats.ready, stats.leased) == (0, 0)
            assert (await q.counters()).completed == 1

    run(main)


def test_async_receive_logs_a_heartbeat_stop_failure_after_the_blocks_error(
        dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The block raised and stopping its heartbeats failed too: that second error was dropped
    without a word. Now it is logged; the block's error goes on, and fails the message."""
    from pgqueue._lease import AsyncHeartbeats

    original = AsyncHeartbeats.stop

    async def broken_stop(self: AsyncHeartbeats, timeout: float | None = None) -> None:
        await original(self, timeout)
        raise RuntimeError("the heartbeats would not stop")

    monkeypatch.setattr(AsyncHeartbeats, "stop", broken_stop)
    Queue(dsn, "stopfail").create()

    async def main() -> None:
        async with AsyncQueue(dsn, "stopfail") as q:
            await q.enqueue("work")
            with caplog.at_level("WARNING", logger="pgqueue"), pytest.raises(ValueError, match="boom"):
                async with q.receive(lock_ms=60000) as msg:
                    assert msg is not None
                    raise ValueError("boom")
            assert "the heartbeats would not stop" in caplog.text
            stats = await q.stats()
            assert (stats.ready, stats.leased, stats.scheduled) == (0, 0, 1)  # failed: retried later

    run(main)


def test_async_check_server_names_check_server_for_a_sync_connection(dsn: str, conn: Conn) -> None:
    """async_check_server given a sync Connection failed with psycopg's TypeError (a Connection
    cannot be awaited in a cursor); now it names check_server."""
    import pgqueue
    from pgqueue.compat import async_server_pgqueue

    async def main() -> None:
        with pytest.raises(TypeError, match=r"pgqueue\.check_server\(conn\)"):
            await pgqueue.async_check_server(conn)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"server_pgqueue\(conn\)"):
            await async_server_pgqueue(conn)  # type: ignore[arg-type]

    run(main)


def test_a_cancellation_held_back_while_the_heartbeats_stop_bounds_the_settling(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancellation that landed while the heartbeats stopped was held back, and the settling
    after it was then awaited without a bound: a stuck settling (a dead connection, a lock) held
    an asyncio.timeout for as long as it took (a review). It gets CANCEL_WAIT at most."""
    from pgqueue import async_client

    monkeypatch.setattr(async_client, "CANCEL_WAIT", 0.3)
    stopping: list[asyncio.Event] = []
    _slow_heartbeat_stop(monkeypatch, stopping, 0.1)
    original = async_client.AsyncQueue._settle_call

    async def stuck(self: AsyncQueue, call: Any, committed: bool = False) -> bool:
        await asyncio.sleep(30)
        return await original(self, call, committed)

    monkeypatch.setattr(async_client.AsyncQueue, "_settle_call", stuck)
    Queue(dsn, "bounded").create()

    async def main() -> None:
        stopping.append(asyncio.Event())
        async with AsyncQueue(dsn, "bounded") as q:
            await q.enqueue("work")

            async def consumer() -> None:
                async with q.receive(lock_ms=60000) as msg:
                    assert msg is not None

            task = asyncio.create_task(consumer())
            await stopping[0].wait()
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # 0.1 s of stopping + CANCEL_WAIT (0.3 s), and time for a loaded machine; not the 5.1 s
            # of the default CANCEL_WAIT, nor the 30 s of the stuck settling
            assert time.monotonic() - started < 4.5

    run(main)


def test_two_cancellations_while_the_dequeue_answers_give_the_message_back(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server leased the message and its answer was on the way when receive() was cancelled
    twice: the second cancellation cancelled the wait for the dequeue, and the statement with it,
    and the message stayed leased until its lease ran out (a review). It is given back."""
    from pgqueue import async_client

    original = async_client._AsyncConnector.run_leasing
    answered: list[asyncio.Event] = []

    async def slow(self: Any, call: Any) -> Any:
        result = await original(self, call)  # the server has leased the message
        answered[0].set()
        await asyncio.sleep(0.5)  # its answer on the way
        return result

    monkeypatch.setattr(async_client._AsyncConnector, "run_leasing", slow)
    Queue(dsn, "take_twice").create()

    async def main() -> None:
        answered.append(asyncio.Event())
        async with AsyncQueue(dsn, "take_twice") as q:
            await q.enqueue("work")

            async def consumer() -> None:
                async with q.receive(lock_ms=60000):
                    pytest.fail("the block never runs: the receive was cancelled")

            task = asyncio.create_task(consumer())
            await answered[0].wait()
            task.cancel()
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stats = await q.stats()
            assert (stats.ready, stats.leased) == (1, 0)

    run(main)


def test_a_cancellation_while_a_generator_around_async_receive_closes_goes_on(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An async generator around receive() closed (aclose: GeneratorExit at its yield) while a
    cancellation landed as the heartbeats stopped: the cancellation was dropped, as it went on
    only in place of an ordinary error (a review)."""
    stopping: list[asyncio.Event] = []
    _slow_heartbeat_stop(monkeypatch, stopping, 0.2)
    Queue(dsn, "gen_close").create()

    async def main() -> None:
        stopping.append(asyncio.Event())
        async with AsyncQueue(dsn, "gen_close") as q:
            await q.enqueue("work")

            async def consumer() -> Any:
                async with q.receive(lock_ms=60000) as msg:
                    yield msg

            async def closer() -> None:
                gen = consumer()
                assert await gen.__anext__() is not None
                await gen.aclose()

            task = asyncio.create_task(closer())
            await stopping[0].wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stats = await q.stats()
            assert (stats.ready, stats.leased) == (1, 0)  # closed, not finished: given back

    run(main)


@pytest.mark.parametrize("source", ["caller", "own"])
def test_an_answer_an_interruption_left_unread_is_read_before_the_async_give_back(source: str, dsn: str) -> None:
    """The async client's reading of what an interruption left unread on its shared connection
    (a caller's AsyncConnection, or the queue's own), as the sync client's: under psycopg's
    lock, awaiting the socket (the event loop runs other tasks meanwhile)."""
    from pgqueue.async_client import _AsyncConnector

    async def main() -> None:
        if source == "caller":
            busy = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
            connector = _AsyncConnector(busy)
        else:
            connector = _AsyncConnector(dsn)
            busy = await connector._open("_own")  # our own connection, as a call opens it
        try:
            # sent, its answer not read (for 2 s: time for the ticks below on a loaded machine too)
            busy.pgconn.send_query(b"SELECT pg_sleep(2)")
            with pytest.raises(psycopg.Error, match="another command is already in progress"):
                await busy.execute("SELECT 1")
            ticks = 0

            async def ticker() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.02)
                    ticks += 1

            ticking = asyncio.create_task(ticker())
            await connector.read_what_is_left()
            ticking.cancel()
            assert ticks >= 5  # the event loop was not blocked while the answer came
            assert busy.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert await (await busy.execute("SELECT 1")).fetchone() == (1,)
        finally:
            await busy.close()
            await connector.close()

    run(main)


@pytest.mark.parametrize("left", ["statement", "copy-out", "copy-in"])
@pytest.mark.parametrize("interruption", [KeyboardInterrupt, asyncio.CancelledError],
                         ids=["KeyboardInterrupt", "CancelledError"])
@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_an_async_block_whose_own_statement_an_interruption_left_unread_gives_its_message_back(
        source: str, interruption: type[BaseException], left: str, dsn: str, conn: Conn) -> None:
    """A cancellation or a Ctrl-C inside psycopg's reading on after its cancel of a statement the
    block runs on the queue's shared connection (a caller's AsyncConnection, or the queue's own)
    leaves the answer unread and the connection busy (or a COPY open): the give-back failed
    ("another command is already in progress") and the message stayed leased until its lease
    ran out (a review). What is left is read (a COPY OUT drained, a COPY IN aborted) before the
    give-back, as in the sync client."""
    conn.execute("CREATE TABLE sink (g int)")
    Queue(dsn, "jobs").create()
    Queue(dsn, "jobs").enqueue("interrupted in its block")

    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(dsn, autocommit=True) if source != "dsn" else None
        try:
            async with AsyncQueue(caller if caller is not None else dsn, "jobs") as q:
                await q.settings()  # our own connection opened
                started = time.monotonic()
                with pytest.raises(interruption):
                    async with q.receive(lock_ms=60_000, heartbeat=False) as msg:
                        assert msg is not None
                        shared = caller if caller is not None else q._connector._own
                        assert shared is not None and not shared.closed
                        shared.pgconn.send_query(LEFT_OPEN[left])  # sent, its answer left unread
                        raise interruption
                assert time.monotonic() - started < 5
                stats = Queue(dsn, "jobs").stats()
                assert (stats.ready, stats.leased) == (1, 0)  # given back, not left leased
                [again] = await q.dequeue(1)  # and the shared connection usable again
                assert again.payload == "interrupted in its block"
                assert shared.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            if caller is not None:
                await caller.close()

    with bounded(20):
        run(main)
    assert conn.execute("SELECT count(*) FROM sink").fetchone() == (0,)  # a COPY IN aborted


def test_a_second_cancellation_while_the_async_block_reads_what_is_left_still_settles(dsn: str) -> None:
    """A cancellation that lands while what the block's interrupted statement left is read off
    the shared connection is held back, as one that lands while the message is settled: the
    message is given back, then the cancellation goes on."""
    Queue(dsn, "jobs").create()
    Queue(dsn, "jobs").enqueue("cancelled twice")

    async def main() -> None:
        caller = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        try:
            q = AsyncQueue(caller, "jobs")
            reading = asyncio.Event()

            async def consumer() -> None:
                async with q.receive(lock_ms=60_000, heartbeat=False) as msg:
                    assert msg is not None
                    caller.pgconn.send_query(b"SELECT pg_sleep(0.6)")  # its answer left unread
                    reading.set()
                    raise asyncio.CancelledError

            started = time.monotonic()
            task = asyncio.create_task(consumer())
            await reading.wait()
            await asyncio.sleep(0.2)  # the block ended: what is left is being read
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert time.monotonic() - started >= 0.5  # the answer was awaited
            stats = Queue(dsn, "jobs").stats()
            assert (stats.ready, stats.leased) == (1, 0)
            [again] = await q.dequeue(1)
            assert again.payload == "cancelled twice"
        finally:
            await caller.close()

    run(main)


def test_a_cancelled_call_and_receive_do_not_wait_for_another_tasks_statement(dsn: str) -> None:
    """Another task's enqueue holds the queue's shared connection, waiting on a producer's open
    transaction (its idempotency key) for 12 s. A call cancelled while it waits for that
    connection has sent nothing and returns at once (it waited, to read what was left, for the
    other task's statement: 4.7 s under a 0.5-s asyncio.timeout in a review); a receive() block
    cancelled meanwhile gives its message back within 5 s or leaves it leased, logged, rather
    than wait for that statement (12 s under a 1-s timeout)."""
    async def main() -> None:
        async with AsyncQueue(dsn, "shared") as q:
            await q.create(lock_ms=60_000)
            await q.enqueue("work")
            holder = await psycopg.AsyncConnection.connect(dsn)
            await AsyncQueue(holder, "shared").enqueue("held", key="k")  # uncommitted

            async def release() -> None:
                await asyncio.sleep(12)
                await holder.rollback()

            releasing = asyncio.create_task(release())
            blocked: asyncio.Task[int] | None = None
            stats_took = exited = None
            started = time.monotonic()
            try:
                async with asyncio.timeout(2.0):
                    async with q.receive() as msg:
                        assert msg is not None
                        blocked = asyncio.create_task(q.enqueue("b", key="k"))  # holds q's connection
                        await asyncio.sleep(0.3)
                        asked = time.monotonic()
                        with pytest.raises(TimeoutError):
                            async with asyncio.timeout(0.5):
                                await q.stats()
                        stats_took = time.monotonic() - asked
                        await asyncio.sleep(30)  # the block's work, cut at 2 s
            except TimeoutError:
                exited = time.monotonic() - started
            await releasing
            assert blocked is not None
            await blocked
            await holder.close()
            assert stats_took is not None and stats_took < 2.0, stats_took
            assert exited is not None and exited < 2.0 + 5 + 2.0, exited

    run(main)


def test_async_a_connection_the_server_ended_while_idle_is_opened_again_for_the_call(
        dsn: str, conn: Conn, caplog: pytest.LogCaptureFixture) -> None:
    """As the sync client's (test_client.py): a server restart, or a pg_terminate_backend of idle
    sessions (57P01), ends the AsyncQueue's own connections while they sit idle; the next call
    (receive()'s dequeue is one) failed with ConnectionFailed though it never reached the
    server, and the next heartbeat logged a warning (on the queue's own heartbeat connection and
    on the one beside a caller's autocommit connection). The connection is found ended before
    the call is sent, and opened again for it, quietly."""
    ended = make_conninfo(dsn, application_name=ENDED)

    async def end(count: int, but: int | None = None) -> None:
        await asyncio.to_thread(end_idle_sessions, conn, count, but=but)

    async def main() -> None:
        async with AsyncQueue(ended, "jobs") as queue:
            await queue.create()
            await queue.enqueue("a")
            await end(1)  # the queue's own connection
            await queue.enqueue_many(["b", "c"])
            await end(1)
            async with queue.receive(lock_ms=1500) as msg:  # (a beat every 0.5 s)
                assert msg is not None and msg.payload == "a"
                await end(2)  # its own and the beats', between two beats
                await asyncio.sleep(1.2)  # two beats
            stats = await queue.stats()
            assert (stats.ready, stats.leased) == (2, 0)
        async with await psycopg.AsyncConnection.connect(ended, autocommit=True) as callers:
            mine = AsyncQueue(callers, "jobs")
            async with mine.receive(lock_ms=1500) as msg:
                assert msg is not None and msg.payload == "b"
                await end(1, but=callers.info.backend_pid)  # the beats', beside it
                await asyncio.sleep(1.2)
            stats = await mine.stats()
            assert (stats.ready, stats.leased) == (1, 0)

    with caplog.at_level("INFO", logger="pgqueue"):
        run(main)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == []
