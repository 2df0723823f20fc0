"""Client behaviours written once and run on both clients: tests/test_client.py runs each on a
Queue (wrapped by :class:`Awaited`, whose methods are coroutines calling the sync ones) and
tests/test_async_client.py on an AsyncQueue. Each scenario takes the client under test and an
autocommit observer connection to the same database."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import psycopg
import pytest

from pgqueue import AsyncQueue, Queue, QueueStats, errors

Conn = psycopg.Connection[Any]
Scenario = Callable[[Any, Conn], Coroutine[Any, Any, None]]


class Awaited:
    """A sync Queue with the AsyncQueue's calling convention (every method awaited)."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._queue, name)
        if not callable(attr):
            return attr  # name, conninfo

        async def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*args, **kwargs)

        return call


def run(scenario: Scenario, queue: Queue | AsyncQueue, conn: Conn) -> None:
    """Run a scenario on either client, on an event loop of its own (an AsyncQueue is closed
    at the end; a Queue is the caller's)."""

    async def main() -> None:
        if not isinstance(queue, AsyncQueue):
            return await scenario(Awaited(queue), conn)
        async with queue:
            await scenario(queue, conn)

    asyncio.run(asyncio.wait_for(main(), 120))


def server_now(conn: Conn) -> int:
    row = conn.execute("SELECT pgqueue.now_ms()").fetchone()
    assert row is not None
    return int(row[0])


async def enqueued_by_sql_is_read(q: Any, conn: Conn) -> None:
    conn.execute(f"""SELECT pgqueue.message_create('{q.name}', convert_to('{{"from": "sql"}}', 'UTF8'), NULL,
                                                   'application/json')""")
    conn.execute(f"SELECT pgqueue.message_create('{q.name}', '\\xdead'::bytea)")
    assert [m.payload for m in await q.dequeue(2)] == [{"from": "sql"}, b"\xde\xad"]


async def unserialisable_payload_is_refused_before_the_server(q: Any, conn: Conn) -> None:
    with pytest.raises(errors.UnsupportedPayload):
        await q.enqueue({1, 2})
    with pytest.raises(TypeError):
        await q.enqueue_many([1, object()])
    assert (await q.stats()).ready == 0


async def dequeue_limit_lease_and_delete_on_dequeue(q: Any, conn: Conn) -> None:
    from pgqueue.message import to_datetime

    await q.enqueue_many(range(5))
    # a lease that the rest of the scenario does not outlast, bounded by the clock read before and
    # after the dequeue (a loaded machine may take seconds between two calls)
    before = server_now(conn)
    got = await q.dequeue(2, lock_ms=60000)
    after = server_now(conn)
    assert [m.payload for m in got] == [0, 1]
    assert all(m.locked_until is not None
               and to_datetime(before + 60000) <= m.locked_until <= to_datetime(after + 60000) for m in got)
    gone = await q.dequeue(2, lock_ms=0)
    assert [m.payload for m in gone] == [2, 3]
    assert [m.leased for m in gone] == [False, False]
    assert not await q.complete(gone[0])  # nothing to complete: it was deleted on delivery
    stats = await q.stats()
    assert (stats.ready, stats.leased) == (1, 2)
    assert await q.dequeue() and await q.dequeue() == []
    with pytest.raises(errors.InvalidArgument) as info:
        await q.dequeue(0)
    assert info.value.sqlstate == "22023"
    with pytest.raises(errors.InvalidArgument):
        await q.dequeue(1, lock_ms=-5)


async def complete_many_uses_each_messages_own_token(q: Any, conn: Conn) -> None:
    ids = [await q.enqueue(p) for p in "abc"]
    ma, mb, mc = await q.dequeue(3, lock_ms=60000)
    # b's lease is lost: it ran out and the message went to another worker (attempts 2)
    conn.execute("UPDATE pgqueue.message SET locked_until = 0 WHERE id = %s", (mb.id,))
    [mb2] = await q.dequeue(1)
    assert mb2.id == mb.id and mb2.attempts == 2
    assert await q.complete_many([ma, mb, mc]) == [mb]  # the stale one comes back, the others are done
    left = conn.execute("SELECT id, attempts FROM pgqueue.message WHERE id = ANY(%s)", (ids,)).fetchall()
    assert left == [(mb.id, 2)]
    assert await q.complete_many([]) == []
    assert await q.complete_many([mb2]) == []
    assert conn.execute("SELECT count(*) FROM pgqueue.message WHERE id = ANY(%s)", (ids,)).fetchone() == (0,)
    with pytest.raises(errors.InvalidArgument):
        await q.complete_many([ma, "not a message"])


async def complete_and_dequeue_in_one_statement(q: Any, conn: Conn) -> None:
    ids = [await q.enqueue(p) for p in "abcd"]
    ma, mb = await q.dequeue(2, lock_ms=60000)
    # b's lease runs out before its acknowledgement: the same call hands it out again, first
    # (expired leases first), and its acknowledgement comes back as lost
    conn.execute("UPDATE pgqueue.message SET locked_until = 0 WHERE id = %s", (mb.id,))
    got, lost = await q.complete_and_dequeue([ma, mb], 3, lock_ms=60000)
    assert lost == [mb]
    assert [(m.id, m.attempts) for m in got] == [(mb.id, 2), (ids[2], 1), (ids[3], 1)]
    assert [m.payload for m in got] == ["b", "c", "d"]
    left = conn.execute("SELECT id, attempts FROM pgqueue.message WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
    assert left == [(mb.id, 2), (ids[2], 1), (ids[3], 1)]  # a is done, the others are leased
    assert await q.complete_and_dequeue(got, 5) == ([], [])
    assert conn.execute("SELECT count(*) FROM pgqueue.message WHERE id = ANY(%s)", (ids,)).fetchone() == (0,)
    # delete mode: what is handed out is gone at once
    await q.enqueue("e")
    [me] = (await q.complete_and_dequeue([], 1, lock_ms=0))[0]
    assert me.payload == "e" and conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)
    with pytest.raises(errors.InvalidArgument):
        await q.complete_and_dequeue([ma], 0)


async def an_older_delivery_beside_the_newest_is_lost(q: Any, conn: Conn) -> None:
    """Given two deliveries of one message (one whose lease ran out, and the one handed out
    after it, with the next attempts token), complete_many and complete_and_dequeue complete the
    newest and report the older one lost, wherever each stands in the list. Before, lost
    deliveries were matched by id only: the newest was completed and the older not reported.
    The same delivery listed twice is completed once and not reported lost."""
    for acknowledge in ("complete_many", "complete_and_dequeue", "newest first"):
        msg_id = await q.enqueue(acknowledge)
        [old] = await q.dequeue(1, lock_ms=100)
        await asyncio.sleep(0.2)  # its lease runs out
        [new] = await q.dequeue(1, lock_ms=60000)
        assert (new.id, new.attempts) == (msg_id, old.attempts + 1)
        if acknowledge == "complete_many":
            lost = await q.complete_many([old, new])
        elif acknowledge == "complete_and_dequeue":
            got, lost = await q.complete_and_dequeue([old, new], 1, lock_ms=60000)
            assert got == []
        else:
            lost = await q.complete_many([new, old])
        assert lost == [old], acknowledge
        assert conn.execute("SELECT count(*) FROM pgqueue.message WHERE id = %s", (msg_id,)).fetchone() == (0,)
    await q.enqueue_many(["twice", "next"])
    [twice] = await q.dequeue(1, lock_ms=60000)
    got, lost = await q.complete_and_dequeue([twice, twice], 1, lock_ms=60000)
    assert lost == [] and [m.payload for m in got] == ["next"]
    assert await q.complete_many([got[0], got[0]]) == []
    assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)


async def missing_queue_errors_carry_the_psycopg_error(q: Any, conn: Conn) -> None:
    """``q`` is a client of a queue that does not exist."""
    calls = (lambda: q.enqueue(1), q.dequeue, q.stats, q.settings, q.dead_letters, q.next_due, q.requeue_dead,
             q.purge_dead, lambda: q.alter(lock_ms=5), lambda: q.enqueue_many([1]))
    for call in calls:
        with pytest.raises(errors.QueueNotFound) as info:
            await call()
        assert info.value.sqlstate == "PQ001"
        assert isinstance(info.value.__cause__, psycopg.Error)
        assert f'queue "{q.name}" does not exist' in str(info.value)
        assert info.value.hint is not None and "queue_create" in info.value.hint


async def stats_count_each_state(q: Any, conn: Conn) -> None:
    """``q`` is a client of a queue that does not exist yet."""
    await q.create(max_attempts=1)
    await q.enqueue_many([1, 2, 3])
    await q.enqueue(4, delay=3600)
    [leased] = await q.dequeue(1)
    [failing] = await q.dequeue(1)
    await q.fail(failing, "dead")
    s = await q.stats()
    assert isinstance(s, QueueStats)
    assert (s.queue, s.ready, s.scheduled, s.leased, s.dead) == (q.name, 1, 1, 1, 1)
    assert s.oldest_ready_age_ms is not None and s.oldest_ready_age_ms >= 0
    assert s.total == 3
    assert leased.payload == 1
