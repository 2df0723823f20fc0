"""Client behaviours written once and run on both clients: tests/test_client.py runs each on a
Queue (wrapped by :class:`Awaited`, whose methods are coroutines calling the sync ones) and
tests/test_async_client.py on an AsyncQueue. Each scenario takes the client under test and an
autocommit observer connection to the same database; a :data:`CallerScenario` runs over a
connection of the caller's instead (:func:`run_on_callers_connection`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from pgqueue import AsyncQueue, Queue, QueueStats, errors

Conn = psycopg.Connection[Any]
Scenario = Callable[[Any, Conn], Coroutine[Any, Any, None]]


class Awaited:
    """A sync Queue with the AsyncQueue's calling convention (every method awaited, ``receive()``
    an ``async with``)."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._queue, name)
        if not callable(attr):
            return attr  # name, conninfo

        async def call(*args: Any, **kwargs: Any) -> Any:
            return attr(*args, **kwargs)

        return call

    @asynccontextmanager
    async def receive(self, **kwargs: Any) -> AsyncIterator[Any]:
        with self._queue.receive(**kwargs) as msg:
            yield msg


class Caller:
    """The caller's own connection, sync or async, with the async calling convention: what a
    :data:`CallerScenario` does on it besides the client's calls."""

    def __init__(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    @property
    def status(self) -> TransactionStatus:
        return self._conn.info.transaction_status

    async def fetch(self, query: str) -> list[tuple[Any, ...]]:
        if isinstance(self._conn, psycopg.AsyncConnection):
            return await (await self._conn.execute(query)).fetchall()  # type: ignore[arg-type]
        return self._conn.execute(query).fetchall()  # type: ignore[arg-type]

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        if isinstance(self._conn, psycopg.AsyncConnection):
            async with self._conn.transaction():
                yield
        else:
            with self._conn.transaction():
                yield


#: A scenario over a caller's connection: it takes a function that makes a client (of the kind
#: under test) of a queue over that connection, the connection (:class:`Caller`) and an
#: autocommit observer connection.
CallerScenario = Callable[[Callable[[str], Any], Caller, Conn], Coroutine[Any, Any, None]]


def run(scenario: Scenario, queue: Queue | AsyncQueue, conn: Conn) -> None:
    """Run a scenario on either client, on an event loop of its own (an AsyncQueue is closed
    at the end; a Queue is the caller's)."""

    async def main() -> None:
        if not isinstance(queue, AsyncQueue):
            return await scenario(Awaited(queue), conn)
        async with queue:
            await scenario(queue, conn)

    asyncio.run(asyncio.wait_for(main(), 120))


def run_on_callers_connection(scenario: CallerScenario, client: type[Queue] | type[AsyncQueue], dsn: str,
                              conn: Conn, *, autocommit: bool) -> None:
    """Run a scenario over a connection of the caller's, opened here (a psycopg Connection for
    a Queue, an AsyncConnection for an AsyncQueue; in autocommit mode or not), on an event loop
    of its own."""

    async def main() -> None:
        if client is Queue:
            with psycopg.connect(dsn, autocommit=autocommit) as sync_conn:
                await scenario(lambda name: Awaited(Queue(sync_conn, name)), Caller(sync_conn), conn)
        else:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit) as async_conn:
                await scenario(lambda name: AsyncQueue(async_conn, name), Caller(async_conn), conn)

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
    # b's lease runs out before its acknowledgement and nobody takes it: it is still ours, and
    # the call's take (which runs first) leaves it out: completed with a, not handed out again
    conn.execute("UPDATE pgqueue.message SET locked_until = 0 WHERE id = %s", (mb.id,))
    got, lost = await q.complete_and_dequeue([ma, mb], 3, lock_ms=60000)
    assert lost == []
    assert [(m.id, m.attempts) for m in got] == [(ids[2], 1), (ids[3], 1)]
    assert [m.payload for m in got] == ["c", "d"]
    left = conn.execute("SELECT id, attempts FROM pgqueue.message WHERE id = ANY(%s) ORDER BY id", (ids,)).fetchall()
    assert left == [(ids[2], 1), (ids[3], 1)]  # a and b are done, the others are leased
    # one that another consumer took meanwhile is lost
    conn.execute("UPDATE pgqueue.message SET locked_until = 0 WHERE id = %s", (ids[2],))
    [mc2] = await q.dequeue(1)
    got, lost = await q.complete_and_dequeue(got, 5)
    assert got == [] and [(m.id, m.attempts) for m in lost] == [(ids[2], 1)]
    assert await q.complete_and_dequeue([mc2], 5) == ([], [])
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


async def cancel_refuses_what_is_not_a_list_of_ids(q: Any, conn: Conn) -> None:
    """cancel(42) raised a plain TypeError ('int' object is not iterable) and cancel(None) a bare
    AssertionError (under python -O None was sent); a mapping's keys were taken for the ids.
    Each is InvalidArgument, as the docstring says, before anything is sent; so are the ids of
    requeue_dead and purge_dead."""
    [kept] = await q.enqueue_many(["kept"])
    for ids in (42, None, "42", {kept: "x"}):
        with pytest.raises(errors.InvalidArgument, match="ids must be an iterable of ints"):
            await q.cancel(ids)
    for call in (q.requeue_dead, q.purge_dead):
        for ids in (42, "42", {kept: "x"}):
            with pytest.raises(errors.InvalidArgument, match="ids must be an iterable of ints"):
                await call(ids)
    assert [p.id for p in await q.cancel([kept])] == [kept]  # it was there all along


async def a_mapping_is_refused_where_values_are_taken(q: Any, conn: Conn) -> None:
    """enqueue_many({"n": 1}) enqueued the dict's keys, and keys= or groups= given a dict took
    its keys: a mapping is refused (InvalidArgument), as a single str or bytes is, before
    anything is sent; so it is for the messages of the batch calls."""
    await q.enqueue_many(["a"])
    [a] = await q.dequeue(1, lock_ms=60000)
    calls = (lambda: q.enqueue_many({"n": 1}), lambda: q.enqueue_many([1], keys={"k": None}),
             lambda: q.enqueue_many([1], groups={"g": None}), lambda: q.complete_many({a: 1}),
             lambda: q.heartbeat_many({a: 1}), lambda: q.complete_and_dequeue({a: 1}, 1))
    for call in calls:
        with pytest.raises(errors.InvalidArgument, match="not a mapping"):
            await call()
    assert conn.execute("SELECT count(*), count(locked_until) FROM pgqueue.message").fetchone() == (1, 1)
    assert await q.complete_many([a]) == []


async def batch_calls_refuse_what_is_not_an_iterable(q: Any, conn: Conn) -> None:
    """The batch calls given one item or None in place of a list (heartbeat_many(msg),
    complete_many(None), complete_and_dequeue(msg, 1), enqueue_many(None)) raised a plain
    TypeError from inside: they are InvalidArgument, saying what was given, as a str is (the
    message's lease is untouched)."""
    await q.enqueue_many(["a"])
    [a] = await q.dequeue(1, lock_ms=60000)
    calls = (lambda: q.heartbeat_many(a), lambda: q.complete_many(None), lambda: q.complete_many(a),
             lambda: q.complete_and_dequeue(a, 1), lambda: q.complete_and_dequeue(None, 1),
             lambda: q.enqueue_many(None), lambda: q.enqueue_many(5), lambda: q.enqueue_many([1], keys=5),
             lambda: q.enqueue_many([1], groups=5))
    for call in calls:
        with pytest.raises(errors.InvalidArgument, match=r"must be an iterable of .* \(a list\), got (Message|NoneType|int)"):
            await call()
    for call in (lambda: q.complete_many("abc"), lambda: q.heartbeat_many(b"ab"), lambda: q.enqueue_many("ab")):
        with pytest.raises(errors.InvalidArgument):
            await call()
    assert conn.execute("SELECT count(*), count(locked_until) FROM pgqueue.message").fetchone() == (1, 1)
    assert await q.complete_many([a]) == []


async def nul_in_a_name_group_or_key_is_refused_before_anything_is_sent(
        make: Callable[[str], Any], caller: Caller, conn: Conn) -> None:
    """A NUL in a group, a key or a queue name (which a PostgreSQL text cannot hold) raised the
    base PgQueueError without SQLSTATE (psycopg's client-side DataError). It is InvalidArgument,
    and InvalidQueueName for a name (as every other name that breaks the rule), refused before
    anything is sent. Run on a caller's connection outside autocommit, whose status tells it:
    psycopg would have sent BEGIN first; inside the caller's transaction, which stays usable."""
    conn.execute("SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)")
    q = make("grouped")

    async def receive() -> None:
        async with make("a\x00").receive():
            raise AssertionError("the block ran")

    refused = (
        (lambda: q.enqueue(1, group="a\x00b"), errors.InvalidArgument, "group must not contain NUL"),
        (lambda: q.enqueue(1, key="a\x00"), errors.InvalidArgument, "key must not contain NUL"),
        (lambda: q.enqueue_many([1], keys=["a\x00"]), errors.InvalidArgument, "keys must not contain NUL"),
        (lambda: q.enqueue_many([1, 2], groups=["g", "\x00"]), errors.InvalidArgument, "groups must not contain NUL"),
        (lambda: make("a\x00").stats(), errors.InvalidQueueName, "invalid queue name 'a\\\\x00'"),
        (lambda: make("a\x00").enqueue(1), errors.InvalidQueueName, "invalid queue name"),
        (lambda: make("\x00").cancel([1]), errors.InvalidQueueName, "invalid queue name"),
        # a lone surrogate has no UTF-8 form: it was InvalidArgument (22P05) of the client encoding
        (lambda: make("a\ud800").enqueue(1), errors.InvalidQueueName, "invalid queue name 'a\\\\ud800'"),
        (receive, errors.InvalidQueueName, "invalid queue name"),
    )
    for call, kind, text in refused:
        with pytest.raises(errors.PgQueueError, match=text) as info:
            await call()
        assert type(info.value) is kind
        assert caller.status == TransactionStatus.IDLE  # nothing was sent, not even BEGIN
    assert info.value.hint is not None and "queue name" in info.value.hint
    async with caller.transaction():
        await q.enqueue("in the transaction", group="g")
        for call, kind, _ in refused:
            with pytest.raises(kind):
                await call()
            assert caller.status == TransactionStatus.INTRANS  # still usable
        assert await caller.fetch("SELECT 1") == [(1,)]
    assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (1,)  # committed


async def a_refused_receive_aborts_the_callers_transaction(
        make: Callable[[str], Any], caller: Caller, conn: Conn) -> None:
    """On a caller's connection inside a transaction (one that ``transaction()`` opened on an
    autocommit connection too), a receive() the server refuses aborts that transaction, as
    every refused call does (docs/guarantees.md), dequeue() here: the next statement fails with
    25P02, and the rollback undoes the caller's earlier work. Before, the sync Queue ran the
    dequeue of receive() on an autocommit connection in a transaction block of its own, which
    nested in the caller's as a savepoint: rolled back, it left the caller's transaction usable,
    while the AsyncQueue's dequeue (one plain statement) aborted it."""
    missing = make("missing")

    async def receive() -> None:
        async with missing.receive() as msg:
            raise AssertionError(f"the block ran with {msg!r}")

    for call in (receive, missing.dequeue):
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            async with caller.transaction():
                await caller.fetch("SELECT pgqueue.message_create('default', 'undone')")
                with pytest.raises(errors.QueueNotFound):
                    await call()
                assert caller.status == TransactionStatus.INERROR
                await caller.fetch("SELECT 1")  # refused: the transaction is aborted
        assert caller.status == TransactionStatus.IDLE
        assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)  # rolled back


async def next_due_of_a_priority_message_is_the_epoch(q: Any, conn: Conn) -> None:
    """next_due() gave 1969-12-31 23:59:59.994 UTC for a message of priority 5 (its stored
    dequeue_at, -1 - priority); the client hides that encoding (Message.dequeue_at is None):
    a priority message is due since the epoch, 1970-01-01 UTC."""
    assert await q.next_due() is None
    await q.enqueue("later", delay=3600)
    due = await q.next_due()
    assert due is not None and due > datetime.now(timezone.utc)
    for priority in (5, 0, 2**31 - 1):
        await q.enqueue("urgent", priority=priority)
        assert await q.next_due() == datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert [p.dequeue_at for p in await q.peek(3)] == [None, None, None]


async def batches_of_more_than_10000_messages_are_refused(q: Any, conn: Conn) -> None:
    """complete_many, complete_and_dequeue and heartbeat_many take at most 10000 messages a call
    (the server's InvalidArgument, which their docstrings now name); nothing changes."""
    await q.enqueue_many(["a"])
    [a] = await q.dequeue(1, lock_ms=60000)
    many = [replace(a, id=a.id + i) for i in range(10001)]
    for call in (lambda: q.complete_many(many), lambda: q.complete_and_dequeue(many, 1),
                 lambda: q.heartbeat_many(many)):
        with pytest.raises(errors.InvalidArgument, match="at most 10000 messages"):
            await call()
    assert await q.complete_many(many[:10000]) == many[1:10000]  # the others are not there


async def a_bad_time_names_its_parameter(q: Any, conn: Conn) -> None:
    """purge_dead(before=1.0) said "at must be a datetime or epoch milliseconds": the error names
    the parameter given."""
    with pytest.raises(errors.InvalidArgument, match=r"^before must be a datetime or epoch milliseconds"):
        await q.purge_dead(before=1.0)
    with pytest.raises(errors.InvalidArgument, match=r"^before must be epoch milliseconds in the bigint range"):
        await q.purge_dead(before=2**63)
    with pytest.raises(errors.InvalidArgument, match=r"^at must be a datetime or epoch milliseconds"):
        await q.enqueue(1, at=1.0)
    with pytest.raises(errors.InvalidArgument, match=r"^at must be a datetime or epoch milliseconds"):
        await q.requeue_dead(at=1.0)
