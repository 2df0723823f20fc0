"""The synchronous client against the real server: every public method of Queue, the three
kinds of connection source, transactions, receive() and its heartbeats, and error mapping."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from conftest import MadeUpPid, Relay, Server, create_database, drop_database
from helpers import database_in
import client_scenarios as scenarios
from pgqueue import _sql
from pgqueue import DeadLetter, Message, Queue, QueueSettings, QueueStats, errors
from pgqueue.client import all_stats, list_queues
from pgqueue.message import to_datetime

Conn = psycopg.Connection[Any]


def server_now(conn: Conn) -> int:
    row = conn.execute("SELECT pgqueue.now_ms()").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def queue(dsn: str) -> Iterator[Queue]:
    """A queue "jobs" with a 30 s lease, reached through its own connection."""
    with Queue(dsn, "jobs") as q:
        q.create()
        yield q


@pytest.fixture
def pool(dsn: str) -> Iterator[ConnectionPool[Any]]:
    with ConnectionPool(dsn, min_size=1, max_size=4, open=True) as p:
        yield p


# -- payloads ---------------------------------------------------------------------------


PAYLOADS: list[object] = [
    b"\x00\x01raw bytes",
    "text ✓",
    {"order": 42, "items": [1, 2], "note": None},
    [1, "two", None, {"x": 1.5}],
    7,
    None,
    True,
    "",
    b"",
]


def test_payloads_round_trip_with_their_type(queue: Queue) -> None:
    ids = [queue.enqueue(p) for p in PAYLOADS]
    got = queue.dequeue(len(PAYLOADS))
    assert [m.id for m in got] == ids
    for msg, payload in zip(got, PAYLOADS):
        assert msg.payload == payload
        assert type(msg.payload) is type(payload)
        assert msg.queue == "jobs"
        assert msg.attempts == 1
        assert msg.state is None
        assert msg.leased


def test_content_type_is_recorded_for_other_languages(queue: Queue, conn: Conn) -> None:
    queue.enqueue(b"raw")
    queue.enqueue("text")
    queue.enqueue({"a": 1})
    rows = conn.execute("SELECT content, content_type FROM pgqueue.message ORDER BY id").fetchall()
    assert rows == [
        (b"raw", None),
        (b"text", "text/plain; charset=utf-8"),
        (b'{"a":1}', "application/json"),
    ]


def test_message_enqueued_by_sql_is_read_by_python(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.enqueued_by_sql_is_read, queue, conn)


def test_unserialisable_payload_is_refused_before_the_server(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.unserialisable_payload_is_refused_before_the_server, queue, conn)


# -- producing ---------------------------------------------------------------------------


class CountingCursor(psycopg.Cursor[Any]):
    statements: list[str] = []

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> CountingCursor:
        CountingCursor.statements.append(str(query))
        super().execute(query, params, **kwargs)
        return self


def test_enqueue_many_is_one_statement_and_keeps_order(dsn: str) -> None:
    CountingCursor.statements = []
    with psycopg.connect(dsn, autocommit=True, cursor_factory=CountingCursor) as c:
        q = Queue(c, "default")
        ids = q.enqueue_many(["a", b"b", {"c": 3}, None])
        assert len(CountingCursor.statements) == 1
        assert "message_create_batch" in CountingCursor.statements[0]
        assert ids == sorted(ids) and len(set(ids)) == 4
        got = q.dequeue(10)
        assert [m.id for m in got] == ids
        assert [m.payload for m in got] == ["a", b"b", {"c": 3}, None]
        assert q.enqueue_many([]) == []
        assert len(q.enqueue_many(iter([1, 2]), priority=3)) == 2
        assert [(m.payload, m.priority, m.dequeue_at) for m in q.dequeue(5)] == [(1, 3, None), (2, 3, None)]


def _every_kind_of_call(source: Conn | ConnectionPool[Any]) -> None:
    """create, enqueue, receive (completed, failed), dequeue, complete, a call with a queue
    probe, stats, and the module's functions, on a Queue over a caller's connection or pool;
    on a connection (in autocommit mode), a receive inside the caller's transaction too."""
    q = Queue(source, "jobs")
    q.create(max_attempts=3, retry_base_ms=3_600_000, retry_cap_ms=3_600_000)
    first, second, third = q.enqueue_many(["a", {"b": [1, None]}, b"c"])
    with q.receive() as msg:
        assert msg is not None and (msg.id, msg.payload) == (first, "a")
    with pytest.raises(ValueError):
        with q.receive() as msg:
            assert msg is not None and msg.id == second
            raise ValueError("retry me")
    [got] = q.dequeue()
    assert (got.id, got.payload) == (third, b"c")
    assert q.complete(got) and not q.complete(got)
    assert q.dead_letters() == [] and [p.id for p in q.peek()] == [second]  # (to be retried)
    with pytest.raises(errors.QueueNotFound):
        Queue(source, "missing").dead_letters()  # (an empty answer, then the probe)
    stats = q.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 1, 0)
    assert [s.queue for s in list_queues(source)] == ["default", "jobs"]
    if isinstance(source, psycopg.Connection):
        with source.transaction():
            tx = q.enqueue("in a transaction")
            with q.receive() as msg:
                assert msg is not None and msg.id == tx
        assert q.stats().total == 1


class CountingRawCursor(psycopg.RawCursor[Any]):
    statements = 0

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> CountingRawCursor:
        CountingRawCursor.statements += 1
        super().execute(query, params, **kwargs)
        return self


class CountingClientCursor(psycopg.ClientCursor[Any]):
    statements = 0

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> CountingClientCursor:
        CountingClientCursor.statements += 1
        super().execute(query, params, **kwargs)
        return self


@pytest.mark.parametrize("factory", [psycopg.RawCursor, CountingRawCursor, psycopg.ClientCursor, CountingClientCursor],
                         ids=lambda f: f.__name__)
def test_a_callers_connection_of_any_cursor_factory_runs_every_call(factory: type[psycopg.Cursor[Any]],
                                                                    dsn: str) -> None:
    """pgqueue's statements take %(name)s parameters: on a connection whose cursor_factory is a
    RawCursor ($1 placeholders) every call failed with a psycopg TypeError; pgqueue runs them on
    plain cursors there (a RawCursor subclass included), and the caller's own cursors stay the
    connection's. A ClientCursor (parameters bound on the client, the simple query protocol,
    never prepared: what the caller chose it for) runs them as it is."""
    CountingRawCursor.statements = CountingClientCursor.statements = 0
    with psycopg.connect(dsn, autocommit=True, cursor_factory=factory) as c:
        _every_kind_of_call(c)
        assert type(c.cursor()) is factory
    with ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"cursor_factory": factory}) as pool:
        Queue(pool, "jobs").drop()
        _every_kind_of_call(pool)
    assert CountingRawCursor.statements == 0
    assert (CountingClientCursor.statements > 20) == (factory is CountingClientCursor)


def test_enqueue_many_is_all_or_nothing(queue: Queue) -> None:
    queue.alter(max_size=2)
    with pytest.raises(errors.QueueFull) as info:
        queue.enqueue_many([1, 2, 3])
    assert info.value.sqlstate == "PQ003"
    assert queue.stats().ready == 0
    assert len(queue.enqueue_many([1, 2])) == 2
    with pytest.raises(errors.QueueFull):
        queue.enqueue(3)


def test_enqueue_many_of_nothing_checks_its_task_too() -> None:
    """An enqueue_many of no payloads refuses a bad task as it refuses a bad delay, before
    anything connects: it returned [] (the task was checked per payload only; a review)."""
    from pgqueue import AsyncQueue

    for bad in ("a b", 5, ""):
        with pytest.raises(errors.InvalidArgument, match="invalid task name"):
            Queue("dbname=nowhere", "jobs").enqueue_many([], task=bad)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidArgument, match="invalid task name"):
            asyncio.run(AsyncQueue("dbname=nowhere", "jobs").enqueue_many([], task=bad))  # type: ignore[arg-type]


def test_enqueue_joins_the_callers_transaction(dsn: str, conn: Conn) -> None:
    observer = Queue(conn, "default")
    with psycopg.connect(dsn) as tx:  # not autocommit: the caller's transaction
        q = Queue(tx, "default")
        q.enqueue("rolled back")
        q.enqueue_many(["also", "rolled back"])
        assert tx.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert observer.stats().ready == 0  # the queue did not commit
        tx.rollback()
        assert observer.stats().ready == 0

        q.enqueue("committed")
        assert observer.stats().ready == 0
        tx.commit()
        assert observer.stats().ready == 1
        q.close()  # closes nothing of the caller's
        assert not tx.closed
    assert [m.payload for m in observer.dequeue(5)] == ["committed"]


def test_enqueue_with_business_data_in_one_transaction(dsn: str, conn: Conn) -> None:
    conn.execute("CREATE TABLE orders (id int)")
    with psycopg.connect(dsn) as tx:
        with tx.transaction():
            tx.execute("INSERT INTO orders VALUES (1)")
            Queue(tx).enqueue({"order": 1})
        with pytest.raises(RuntimeError), tx.transaction():
            tx.execute("INSERT INTO orders VALUES (2)")
            Queue(tx).enqueue({"order": 2})
            raise RuntimeError("business failure")
    assert conn.execute("SELECT array_agg(id) FROM orders").fetchone() == ([1],)
    assert [m.payload for m in Queue(conn).dequeue(5)] == [{"order": 1}]


def test_priority_delay_and_at_map_onto_dequeue_at(queue: Queue, conn: Conn) -> None:
    normal = queue.enqueue("normal")
    low = queue.enqueue("low", priority=0)
    high = queue.enqueue("high", priority=5)
    # the delays count from each enqueue, some time between these two readings of the clock (a
    # loaded machine may take seconds between two calls)
    before = server_now(conn)
    later = queue.enqueue("later", delay=timedelta(seconds=60))
    soon = queue.enqueue("soon", delay=0.4)
    after = server_now(conn)
    when = datetime.now(timezone.utc) + timedelta(hours=1)
    at_id = queue.enqueue("at", at=when)
    at_naive = queue.enqueue("naive", at=when.replace(tzinfo=None))
    past = queue.enqueue("past", at=1000)
    due = dict(conn.execute("SELECT id, dequeue_at FROM pgqueue.message").fetchall())
    assert due[high] == -6 and due[low] == -1
    assert before + 60000 <= due[later] <= after + 60000
    assert before + 400 <= due[soon] <= after + 400
    expected_ms = int(when.timestamp() * 1000)
    assert abs(due[at_id] - expected_ms) <= 1 and due[at_naive] == due[at_id]
    assert due[past] == 1000

    got = queue.dequeue(4)  # (not "soon" too: a loaded machine may be past its time by now)
    assert [m.id for m in got] == [high, low, past, normal]
    assert [m.payload for m in got] == ["high", "low", "past", "normal"]
    # times are aware datetimes, exact to the ms; a priority is not a time
    assert [(m.priority, m.dequeue_at) for m in got[:3]] == [(5, None), (0, None), (None, to_datetime(1000))]
    created = dict(conn.execute("SELECT id, created_at FROM pgqueue.message").fetchall())
    for m in got:
        assert m.created_at == to_datetime(created[m.id]) and m.created_at.tzinfo is not None
    assert got[3].dequeue_at is not None and got[3].locked_until is not None
    assert got[3].dequeue_at <= got[3].locked_until
    time.sleep(0.5)
    assert [m.payload for m in queue.dequeue(10)] == ["soon"]
    assert queue.stats().scheduled == 3
    with pytest.raises(errors.InvalidArgument):
        queue.enqueue("x", delay=1, priority=1)
    with pytest.raises(ValueError):
        queue.enqueue("x", priority=-1)


def test_a_delay_or_time_beyond_a_bigint_is_an_invalid_argument(queue: Queue, conn: Conn) -> None:
    """They were a plain PgQueueError 22003 (bigint out of range) from the server."""
    for kwargs in ({"delay": 1e16}, {"at": 2**63}, {"delay": 10**17}):
        with pytest.raises(errors.InvalidArgument, match="bigint"):
            queue.enqueue("x", **kwargs)  # refused before anything is sent
    with pytest.raises(errors.InvalidArgument, match="bigint"):
        queue.purge_dead(before=-(2**63) - 1)
    # a bigint delay whose time (the server's now + it) is past the bigint range: the server's 22003
    with pytest.raises(errors.InvalidArgument) as raised:
        queue.enqueue("x", delay=(2**63 - 10**6) / 1000)
    assert raised.value.sqlstate == "22003"
    assert queue.enqueue("x", at=2**63 - 1) and queue.stats().scheduled == 1


# -- consuming ---------------------------------------------------------------------------


def test_dequeue_limit_lease_and_delete_on_dequeue(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.dequeue_limit_lease_and_delete_on_dequeue, queue, conn)


def test_complete_heartbeat_defer_fail(queue: Queue, conn: Conn) -> None:
    queue.alter(retry_base_ms=60000, retry_cap_ms=60000)
    _, b, c, d = (queue.enqueue(p) for p in "abcd")
    ma, mb, mc, md = queue.dequeue(4, lock_ms=300)

    assert queue.complete(ma)
    assert not queue.complete(ma)  # already done: a stale token changes nothing

    assert queue.heartbeat(mb, 10000)
    before = server_now(conn)  # (the clock around the call: a loaded machine may take seconds)
    assert queue.heartbeat(mb)  # the queue's lock_ms (30 s)
    after = server_now(conn)
    locked = conn.execute("SELECT locked_until FROM pgqueue.message WHERE id = %s", (b,)).fetchone()
    assert locked is not None and before + 30000 <= locked[0] <= after + 30000

    # d is failed before the dequeue below: its 300 ms lease may have run out by then on a loaded
    # machine, and an expired lease is handed out first
    before = server_now(conn)
    assert queue.fail(md, RuntimeError("boom"))
    after = server_now(conn)
    row = conn.execute("SELECT dequeue_at, last_error, locked_until FROM pgqueue.message WHERE id = %s",
                       (d,)).fetchone()
    assert row is not None
    assert before + 30000 <= row[0] <= after + 60000  # back-off with jitter in [base/2, base]
    assert row[1] == "RuntimeError: boom" and row[2] is None
    assert not queue.fail(md, "again")  # stale

    assert queue.defer(mc, delay=0, state=b"checkpoint-1")
    [again] = queue.dequeue(1)
    assert again.id == c and again.state == b"checkpoint-1" and again.attempts == 2
    assert queue.defer(again, delay=timedelta(hours=1))  # state None keeps the state
    assert conn.execute("SELECT state FROM pgqueue.message WHERE id = %s", (c,)).fetchone() == (b"checkpoint-1",)
    assert not queue.defer(again)  # no longer leased

    time.sleep(0.4)  # b's heartbeats keep it; nothing else is due
    assert queue.dequeue(5) == []
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 2, 1)


def test_fail_with_explicit_retry_time_and_dead_letters(queue: Queue) -> None:
    queue.alter(max_attempts=2)
    queue.enqueue({"job": 1})
    [m1] = queue.dequeue()
    assert queue.fail(m1, "first", delay=0)
    [m2] = queue.dequeue()
    assert m2.attempts == 2
    assert queue.fail(m2, ValueError("second"))
    assert queue.dequeue() == []
    [dead] = queue.dead_letters()
    assert isinstance(dead, DeadLetter)
    assert (dead.id, dead.queue, dead.payload, dead.attempts) == (m1.id, "jobs", {"job": 1}, 2)
    assert dead.last_error == "ValueError: second"
    assert dead.content == b'{"job":1}' and dead.content_type == "application/json"
    assert dead.dead_at >= dead.created_at
    assert queue.stats().dead == 1


def test_next_due(queue: Queue, conn: Conn) -> None:
    assert queue.next_due() is None
    queue.enqueue("x", at=4102444800000)
    assert queue.next_due() == to_datetime(4102444800000)
    queue.enqueue("y", priority=2)
    assert queue.next_due() == to_datetime(0)  # due since the epoch (stored: -1 - 2)
    queue.dequeue(1, lock_ms=60000)
    due = queue.next_due()
    assert due is not None and due <= to_datetime(4102444800000)


def test_times_past_the_year_9999_read_as_datetime_max(queue: Queue) -> None:
    """The server takes any bigint due time, as a delay of millions of days; next_due and peek
    read one past what datetime holds as datetime.max (UTC). Before, both raised OverflowError."""
    far = queue.enqueue("someday", delay=timedelta(days=3_000_000))
    farther = queue.enqueue("later still", at=2**60)
    latest = datetime.max.replace(tzinfo=timezone.utc)
    assert queue.next_due() == latest
    assert [(p.id, p.dequeue_at) for p in queue.peek()] == [(far, latest), (farther, latest)]
    assert to_datetime(-2**60) == datetime.min.replace(tzinfo=timezone.utc)


# -- receive -----------------------------------------------------------------------------


def test_receive_completes_on_success(queue: Queue) -> None:
    queue.enqueue({"n": 1})
    with queue.receive() as msg:
        assert isinstance(msg, Message)
        assert msg.payload == {"n": 1}
        assert queue.stats().leased == 1
    assert queue.stats().total == 0
    with queue.receive() as empty:
        assert empty is None


def test_receive_on_a_pool_settles_after_every_pooled_connection_was_lost(dsn: str, conn: Conn) -> None:
    """A restart ends every pooled connection while the block runs: the settling call's retry
    went to the pool's next connection, dead too (ConnectionFailed, the message left leased);
    the pool checks its connections first now (a review of the session's changes, session 43)."""
    with ConnectionPool(dsn, min_size=3, max_size=3, open=True) as pool:
        pool.wait()
        queue = Queue(pool, "pooled")
        queue.create()
        queue.enqueue("work")
        with queue.receive(heartbeat=False) as msg:
            assert msg is not None
            conn.execute("SELECT pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_stat_activity "
                         "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                         "AND backend_type = 'client backend'")
    assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)


@pytest.mark.parametrize("outcome", ["complete", "fail"])
def test_receive_settles_on_a_new_connection_when_its_own_was_lost_meanwhile(
        queue: Queue, conn: Conn, outcome: str) -> None:
    """The queue's own connection is terminated while the block runs (a server restart, an idle
    timeout): the block's end settles the message on a new connection. It raised
    ConnectionFailed (a completion) or left only a note (a failure), and the message stayed
    leased, to run again once its lease ran out (a review of the worker under failures,
    session 43)."""
    queue.enqueue("work")
    with pytest.raises(ZeroDivisionError) if outcome == "fail" else nullcontext():
        with queue.receive() as msg:
            assert msg is not None
            terminated = conn.execute(
                "SELECT pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' AND query <> '' "  # (the heartbeats': none yet, ...
                "AND strpos(query, 'message_heartbeat') = 0 "
                "AND query <> 'SELECT pg_catalog.pg_backend_pid()'").fetchall()  # (... but the pooler check)
            assert terminated == [(True,)], terminated
            if outcome == "fail":
                1 / 0  # noqa: B018
    row = conn.execute("SELECT count(*), max(last_error), bool_or(locked_until IS NOT NULL) FROM pgqueue.message").fetchone()
    assert row == ((0, None, None) if outcome == "complete" else (1, "ZeroDivisionError: division by zero", False)), row


def test_receive_fails_on_exception_and_reraises(queue: Queue, conn: Conn) -> None:
    queue.alter(retry_base_ms=0, retry_cap_ms=0, max_attempts=2)
    queue.enqueue("work")
    with pytest.raises(ZeroDivisionError):
        with queue.receive() as msg:
            assert msg is not None
            1 / 0  # noqa: B018
    row = conn.execute("SELECT attempts, last_error, locked_until FROM pgqueue.message").fetchone()
    assert row == (1, "ZeroDivisionError: division by zero", None)
    with pytest.raises(KeyError):
        with queue.receive() as msg:
            assert msg is not None and msg.attempts == 2
            raise KeyError("again")
    [dead] = queue.dead_letters()
    assert dead.attempts == 2 and dead.last_error == "KeyError: 'again'"


def test_receive_back_off_is_visible(queue: Queue, conn: Conn) -> None:
    queue.alter(retry_base_ms=10000, retry_cap_ms=20000)
    queue.enqueue("work")
    before = server_now(conn)  # the failure's back-off counts from a time between these two
    with pytest.raises(RuntimeError):
        with queue.receive():
            raise RuntimeError("later")
    after = server_now(conn)
    stats = queue.stats()
    assert (stats.ready, stats.scheduled) == (0, 1)
    due = queue.next_due()
    # the first retry's back-off: 10 s with jitter in [base/2, base]
    assert due is not None and to_datetime(before + 5000) <= due <= to_datetime(after + 10000)


def test_receive_gives_the_message_back_when_interrupted(queue: Queue) -> None:
    queue.enqueue("work")
    with pytest.raises(KeyboardInterrupt):
        with queue.receive() as msg:
            raise KeyboardInterrupt
    [again] = queue.dequeue()  # due at once, not backed off
    assert msg is not None and again.id == msg.id and again.attempts == 2


class InterruptingLink(Relay):
    """A TCP relay to the server that, once armed, sends this process a SIGINT (Ctrl-C) when an
    answer of the server holding ``trigger`` passes, and holds that answer back ``hold`` seconds:
    a Ctrl-C that lands while the answer is on its way."""

    def __init__(self, server: Server, trigger: bytes, hold: float = 0.3) -> None:
        self.armed = False
        self.fired = False
        self._trigger = trigger
        self._hold = hold
        super().__init__(server)

    def passing(self, data: bytes, answers: bool) -> None:
        if answers and self.armed and self._trigger in data:
            self.armed, self.fired = False, True
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(self._hold)


@pytest.mark.parametrize("source", ["dsn", "autocommit-connection", "autocommit-pool"])
@pytest.mark.parametrize("trigger", [b"was interrupted".hex().encode(), b"COMMIT\x00"], ids=["dequeue-answer", "commit-answer"])
def test_receive_interrupted_while_its_dequeue_answers_gives_the_message_back(
        source: str, trigger: bytes, pg_server: Server, dsn: str, conn: Conn) -> None:
    """A Ctrl-C that lands after the server leased the message but before its answer arrived:
    psycopg's cancel comes too late and it drops the answer, so before, the message stayed
    leased by no one until its lease ran out (an attempt spent without a handler; a dead letter
    at max_attempts=1). Landing in the dequeue's answer, its transaction is rolled back; landing
    in the answer of its COMMIT, the message read is given back."""
    watcher = Queue(conn, "jobs")
    watcher.create(max_attempts=1)
    msg_id = watcher.enqueue("was interrupted")
    link = InterruptingLink(pg_server, trigger)
    relayed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=link.port)
    with ExitStack() as stack:
        src: Any = {
            "dsn": lambda: relayed,
            "autocommit-connection": lambda: stack.enter_context(psycopg.connect(relayed, autocommit=True)),
            "autocommit-pool": lambda: stack.enter_context(ConnectionPool(
                relayed, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True)),
        }[source]()
        q = stack.enter_context(Queue(src, "jobs"))
        q.settings()  # connected through the link before it is armed
        link.armed = True
        with pytest.raises(KeyboardInterrupt):
            with q.receive(lock_ms=60_000, heartbeat=False):
                pytest.fail("the block never runs: the receive was interrupted")
        assert link.fired
        stats = watcher.stats()
        assert (stats.ready, stats.leased, stats.dead) == (1, 0, 0)
        [again] = q.dequeue(1)  # due at once, and the queue still usable
        assert again.id == msg_id and again.payload == "was interrupted"
    link.close()


def test_a_second_interruption_while_the_dequeue_commits_gives_the_message_back_elsewhere(
        pg_server: Server, dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C in the answer of the dequeue's COMMIT on the caller's autocommit connection, and a
    second one during psycopg's cancel: psycopg 3.3 closes the connection. The COMMIT was sent
    (the lease committed, as the give-back after one Ctrl-C assumes): the message read is given
    back on a connection of its own (Queue._take; it failed, "the connection is closed")."""
    def cancel_interrupted(self: Any, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt("the second Ctrl-C, during the cancel")

    watcher = Queue(conn, "jobs")
    watcher.create(max_attempts=1)
    msg_id = watcher.enqueue("interrupted twice")
    link = InterruptingLink(pg_server, b"COMMIT\x00")
    relayed = psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=link.port)
    with psycopg.connect(relayed, autocommit=True) as caller:
        q = Queue(caller, "jobs")
        q.settings()  # connected through the link before it is armed
        monkeypatch.setattr(psycopg.Connection, "_try_cancel", cancel_interrupted)
        link.armed = True
        with pytest.raises(KeyboardInterrupt):
            with q.receive(lock_ms=60_000, heartbeat=False):
                pytest.fail("the block never runs: the receive was interrupted")
        assert link.fired
        if tuple(int(p) for p in psycopg.__version__.split(".")[:2]) >= (3, 3):
            assert caller.closed  # what psycopg 3.3 does: the case this test is about
    stats = watcher.stats()
    assert (stats.ready, stats.leased, stats.dead) == (1, 0, 0)
    [again] = watcher.dequeue(1)
    assert again.id == msg_id
    link.close()


@pytest.mark.parametrize("source", ["caller", "own"])
def test_an_answer_an_interruption_left_unread_is_read_before_the_give_back(source: str, dsn: str) -> None:
    """psycopg reads on the answer of a statement a Ctrl-C cancelled; a Ctrl-C landing inside
    that reading leaves it unread, the connection busy, and the give-back of the message whose
    COMMIT answered then failed ("another command is already in progress": the flaky failure of
    the test above in CI). What is left is read before the give-back (client._read_what_is_left)."""
    from pgqueue.client import _Connector

    with ExitStack() as stack:
        if source == "caller":
            busy = stack.enter_context(psycopg.connect(dsn, autocommit=True))
            connector = _Connector(busy)
        else:
            connector = _Connector(dsn)
            stack.callback(connector.close)
            busy = connector._open("_own")  # our own connection, as a call opens it
        assert busy is not None
        busy.pgconn.send_query(b"SELECT pg_sleep(0.2)")  # sent, its answer not read
        with pytest.raises(psycopg.Error, match="another command is already in progress"):
            busy.execute("SELECT 1")
        connector.read_what_is_left()
        assert busy.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert busy.execute("SELECT 1").fetchone() == (1,)


@contextmanager
def interrupt_after_sending(monkeypatch: pytest.MonkeyPatch, match: bytes) -> Iterator[None]:
    """Raise KeyboardInterrupt once, right after psycopg has sent the first statement holding
    ``match``: the window where psycopg's reading of the answer has not begun, so that its own
    cancel-and-read-on reads nothing and the answer stays unread (a review's reproduction)."""
    from psycopg._cursor_base import BaseCursor

    real, armed = BaseCursor._execute_send, [True]

    def send(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(self, query, *args, **kwargs)
        text = query.query if isinstance(query.query, bytes) else bytes(query.query)
        if armed and match in text:
            armed.clear()
            raise KeyboardInterrupt("landed right after the send")
        return result

    monkeypatch.setattr(BaseCursor, "_execute_send", send)
    yield
    assert not armed, "the statement was never sent"


@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_a_call_an_interruption_left_unread_leaves_the_queue_usable(source: str, dsn: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Any call, not only receive's: an interrupted enqueue left its answer unread, and every
    later call of the Queue failed ("another command is already in progress"; our own connection
    is replaced only once closed: for good). _Connector.run reads what is left before the
    interruption propagates (a review: 62 of 200 interrupted enqueue loops broke the Queue)."""
    with ExitStack() as stack:
        conn = stack.enter_context(psycopg.connect(dsn, autocommit=True)) if source != "dsn" else None
        q = stack.enter_context(Queue(conn if conn is not None else dsn, "jobs"))
        q.create()
        q.enqueue("before")
        with interrupt_after_sending(monkeypatch, b"message_create"), pytest.raises(KeyboardInterrupt):
            q.enqueue("interrupted")
        q.enqueue("after")
        # (the interrupted statement ran, or psycopg cancelled it: either is an answer)
        got = sorted(m.payload for m in q.dequeue(10, lock_ms=0))
        assert got in (["after", "before"], ["after", "before", "interrupted"]), got


@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_a_block_whose_own_statement_an_interruption_left_unread_gives_its_message_back(
        source: str, dsn: str) -> None:
    """A Ctrl-C inside psycopg's reading on after its cancel of a statement the block runs on
    the queue's shared connection (a caller's, or the queue's own) leaves the answer unread and
    the connection busy: the give-back failed ("another command is already in progress") and
    the message stayed leased until its lease ran out (a review, session 48). What is left is
    read before the give-back."""
    with ExitStack() as stack:
        src: Any = dsn if source == "dsn" else stack.enter_context(psycopg.connect(dsn, autocommit=True))
        q = stack.enter_context(Queue(src, "jobs"))
        q.create()
        q.enqueue("interrupted in its block")
        with pytest.raises(KeyboardInterrupt):
            with q.receive(lock_ms=60_000, heartbeat=False) as msg:
                assert msg is not None
                shared = src if source != "dsn" else q._connector._own
                assert shared is not None and not shared.closed
                shared.pgconn.send_query(b"SELECT pg_sleep(0.2)")  # sent, its answer left unread
                raise KeyboardInterrupt
        stats = Queue(dsn, "jobs").stats()
        assert (stats.ready, stats.leased) == (1, 0)  # given back, not left leased
        [again] = q.dequeue(1)  # and the shared connection usable again
        assert again.payload == "interrupted in its block"


class BlockFailed(Exception):
    """What a test's ``receive`` block raises to have its message failed."""


@pytest.mark.parametrize("outcome", ["returns", "raises", "interrupted"])
def test_a_block_whose_callers_connection_is_closed_settles_its_message_on_one_of_its_own(
        outcome: str, dsn: str) -> None:
    """The caller's autocommit connection closed while the block ran (by the caller, or by
    psycopg 3.3 after a second Ctrl-C during its cancel of the block's statement): the lease was
    committed before the block, and settling it on the closed connection failed ("the
    connection is closed"), the message leased until its lease ran out (a review). It is settled
    by the block's outcome on a connection of its own, with the token (Queue._settle_once)."""
    with psycopg.connect(dsn, autocommit=True) as caller, Queue(dsn, "jobs") as other:
        q = Queue(caller, "jobs")
        q.create(lock_ms=60_000)
        msg_id = q.enqueue("the block's")
        raised = (KeyboardInterrupt if outcome == "interrupted" else BlockFailed if outcome == "raises"
                  else None)
        with pytest.raises(raised) if raised is not None else nullcontext():
            with q.receive(heartbeat=False) as msg:
                assert msg is not None and msg.id == msg_id
                caller.close()
                if raised is not None:
                    raise raised("the block's own")
        stats = other.stats()
        expect = {"returns": (0, 0, 0), "raises": (0, 1, 0), "interrupted": (1, 0, 0)}[outcome]
        assert (stats.ready, stats.scheduled, stats.leased) == expect  # settled, not left leased
        if outcome == "interrupted":
            [again] = other.dequeue(1)
            assert again.id == msg_id and again.attempts == 2  # given back: due at once, not backed off


def test_a_second_interruption_during_psycopgs_cancel_still_gives_the_message_back(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C right after the block's statement was sent makes psycopg cancel it; a second one
    during that cancel makes psycopg 3.3 close the connection (3.2 leaves it busy). Either way
    the message is given back at once: on a connection of its own when the caller's is closed
    (a review: 10 runs in 10 on psycopg 3.3.9 left the message leased until its lease ran out).

    And only once the block's statement has stopped: the cancel never reached the server, and
    the closed connection's session ran the statement on, to commit it at its end (autocommit)
    while the message was being handled by its next consumer (a review). The session is ended
    before the give-back: the statement's write is rolled back, and the session is gone by the
    time the message is ready again."""
    def cancel_interrupted(self: Any, *args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt("the second Ctrl-C, during the cancel")

    with (psycopg.connect(dsn, autocommit=True) as caller, psycopg.connect(dsn, autocommit=True) as watch,
          Queue(dsn, "jobs") as other):
        q = Queue(caller, "jobs")
        q.create(lock_ms=60_000)
        caller.execute("CREATE TABLE side_effects (n integer)")
        msg_id = q.enqueue("interrupted twice")
        pid = caller.info.backend_pid
        monkeypatch.setattr(psycopg.Connection, "_try_cancel", cancel_interrupted)
        with pytest.raises(KeyboardInterrupt):
            with q.receive(heartbeat=False) as msg:
                assert msg is not None
                with interrupt_after_sending(monkeypatch, b"pg_sleep"):
                    caller.execute("INSERT INTO side_effects SELECT 1 FROM pg_sleep(1.5)")
        if tuple(int(p) for p in psycopg.__version__.split(".")[:2]) >= (3, 3):
            assert caller.closed  # what psycopg 3.3 does: the case this test is about
        stats = other.stats()
        assert (stats.ready, stats.leased) == (1, 0)
        assert watch.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone() == (0,)
        [again] = other.dequeue(1)
        assert again.id == msg_id and again.attempts == 2
        time.sleep(2.0)  # past the statement's own end
        assert watch.execute("SELECT count(*) FROM side_effects").fetchone() == (0,)  # rolled back


def test_a_closed_callers_session_is_ended_only_if_its_pid_and_client_address_match(
        pg_server: Server, dsn: str) -> None:
    """What settle_elsewhere ends before it settles: the session recorded of the caller's
    connection (_core.caller_session), matched by its backend pid and the client address and
    port the server saw. A session with the pid at another address or port (behind a NAT, a
    proxy, or a pooler's server connection, which other clients share) or of unknown port is
    left alone, and so is the message (None: before, no match counted as gone and the message
    was settled while such a session's statement could still commit). No session with the pid:
    gone (True)."""
    from pgqueue import _core

    # a list of hosts whose first refuses: the session's conninfo is the one reached (psycopg
    # tries them one at a time), not the list, whose first might be another server
    listed = make_conninfo(dsn, host=f"127.0.0.1,{pg_server.host}", port=f"1,{pg_server.port}",
                           connect_timeout="1")
    with (psycopg.connect(listed, autocommit=True) as caller,
          psycopg.connect(dsn, autocommit=True) as other):
        session = _core.caller_session(caller.pgconn, caller.info.backend_pid)
        assert session is not None
        assert _core.caller_session(caller.pgconn, caller.info.backend_pid + 1) is None  # a pooler's pid
        seen = other.execute("SELECT host(client_addr), client_port FROM pg_stat_activity WHERE pid = %s",
                             [caller.info.backend_pid]).fetchone()
        assert session.port is not None and (session.pid, session.addr, session.port) == (
            caller.info.backend_pid, *seen)
        kept = conninfo_to_dict(session.conninfo)
        assert kept["connect_timeout"] == "1"  # a shorter one is kept
        assert (kept["host"], kept["port"]) == (pg_server.host, str(pg_server.port))
        other_session = _core.caller_session(other.pgconn, other.info.backend_pid)
        assert other_session is not None and conninfo_to_dict(other_session.conninfo)["connect_timeout"] == "3"

        def end(s: _core.CallerSession) -> bool | None:
            call = _core.end_session(s)
            return call.result(other.execute(call.query, call.params).fetchall())

        assert end(replace(session, port=session.port + 1)) is None  # not provably the caller's
        assert end(replace(session, port=None)) is None  # the port unknown
        assert caller.execute("SELECT 1").fetchone() == (1,)  # left alone
        assert end(session)  # ended, and gone when it answers
        assert other.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                             [session.pid]).fetchone() == (0,)
        with pytest.raises(psycopg.OperationalError):
            caller.execute("SELECT 1")
        assert end(replace(session, port=None)) is True  # no session has the pid: gone

        def gone(pid: int) -> bool:
            call = _core.session_gone(replace(session, pid=pid))
            return call.result(other.execute(call.query, call.params).fetchall())

        with psycopg.connect(dsn, autocommit=True) as third:
            assert (gone(session.pid), gone(third.info.backend_pid)) == (True, False)
            assert gone(other.info.backend_pid)  # the asking session's own pid is never the closed one's


class Unanswering(Relay):
    """A TCP relay to the server that, once ``stalled``, holds every byte back: a server (or a
    path to it) that no longer answers, new connections included."""

    def __init__(self, server: Server) -> None:
        self.stalled = threading.Event()
        self.resumed = threading.Event()
        super().__init__(server)

    def passing(self, data: bytes, answers: bool) -> None:
        if self.stalled.is_set():
            self.resumed.wait(60)


def test_a_give_back_elsewhere_to_a_server_that_no_longer_answers_gives_up_in_seconds(
        pg_server: Server, dsn: str) -> None:
    """Interrupted after its connection was closed, the block's message is given back on a
    connection of its own; against a server that no longer answers, that connection's opening
    gave up only after psycopg's default connect_timeout, 130 s, with Ctrl-C pressed twice (a
    review). It is opened with connect_timeout 3: the give-back fails in seconds, and says so."""
    relay = Unanswering(pg_server)
    relayed = make_conninfo(dsn, host="127.0.0.1", port=str(relay.port))
    try:
        with psycopg.connect(relayed, autocommit=True) as caller, Queue(dsn, "jobs") as other:
            q = Queue(caller, "jobs")
            q.create(lock_ms=60_000)
            msg_id = q.enqueue("given back to nobody")
            with pytest.raises(KeyboardInterrupt) as raised:
                with q.receive(heartbeat=False) as msg:
                    assert msg is not None and msg.id == msg_id
                    relay.stalled.set()
                    caller.close()
                    started = time.monotonic()
                    raise KeyboardInterrupt("Ctrl-C")
            assert time.monotonic() - started < 10
            assert any(f"could not release message {msg_id}" in n for n in getattr(raised.value, "__notes__", []))
            stats = other.stats()
            assert (stats.ready, stats.leased) == (0, 1)  # its lease runs out
    finally:
        relay.resumed.set()
        relay.close()


@pytest.mark.parametrize(("between", "raised"), [(Relay, "not provably its own"), (MadeUpPid, "closed")],
                         ids=["proxy", "pooler-pid"])
def test_a_closed_callers_session_behind_a_proxy_is_left_alone_and_so_is_its_message(
        pg_server: Server, dsn: str, between: type[Relay], raised: str) -> None:
    """Behind a proxy (a TCP relay here; a NAT, a pooler) the server sees the proxy's address and
    port, not those of the caller's socket: a session with the closed connection's pid is not
    provably the caller's. Before, no match counted as gone, and the message was completed on a
    connection of its own while the block's statement ran on in that session, to commit beside
    the message's next delivery. The session is left alone, and the message leased until its
    lease runs out: ConnectionFailed says why.

    A pooler such as PgBouncer gives its clients a made-up backend pid (a relay that rewrites
    BackendKeyData: ``pooler-pid``): no session of the server has it, and "no session has the
    pid" counted as gone, the message settled elsewhere (a review). The caller's pid is checked
    against its server process's (pg_backend_pid) before the first lease; not the same, no
    session is recorded, and the session and the message are left alone."""
    relay = between(pg_server)
    relayed = make_conninfo(dsn, host="127.0.0.1", port=str(relay.port))
    try:
        with (psycopg.connect(relayed, autocommit=True) as caller, Queue(dsn, "jobs") as other,
              psycopg.connect(dsn, autocommit=True) as watch):
            row = caller.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            pid = row[0]
            assert (caller.info.backend_pid == pid) is (between is Relay)  # (the pooler's made up)
            q = Queue(caller, "jobs")
            q.create(lock_ms=60_000)
            q.enqueue("completed by nobody")
            with pytest.raises(errors.ConnectionFailed, match=raised):
                with q.receive(heartbeat=False) as msg:
                    assert msg is not None
                    caller.pgconn.send_query(b"SELECT pg_sleep(3)")  # runs on after the close
                    caller.close()
            assert watch.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone() == (1,)
            stats = other.stats()
            assert (stats.ready, stats.leased) == (0, 1)  # its lease runs out
    finally:
        relay.close()


def test_receive_on_a_closed_callers_connection_raises_connection_failed(dsn: str) -> None:
    """Not psycopg's OperationalError: the conninfo of a closed connection cannot be read (a review)."""
    caller = psycopg.connect(dsn, autocommit=True)
    q = Queue(caller, "jobs")
    q.create()
    q.enqueue("never taken")
    caller.close()
    with pytest.raises(errors.ConnectionFailed):
        with q.receive(heartbeat=False):
            pytest.fail("the block never runs")


@pytest.mark.parametrize("mode", ["transaction-mode", "autocommit-in-a-transaction-block"])
def test_a_lease_taken_in_the_callers_transaction_is_not_settled_elsewhere_once_it_is_closed(mode: str, dsn: str) -> None:
    """Inside the caller's transaction the lease is the transaction's: closed, it rolled back,
    and another consumer may lease the message again with the same token (its attempts). A
    settling on a connection of its own would then complete that consumer's message: the block's
    settling fails instead, and the other lease stands. (On an autocommit connection a receive
    outside a transaction came first: the connection's conninfo is recorded.)"""
    with psycopg.connect(dsn, autocommit=mode != "transaction-mode") as caller, Queue(dsn, "jobs") as other:
        q = Queue(caller, "jobs")
        q.create(lock_ms=60_000)
        if mode == "transaction-mode":
            msg_id = q.enqueue("in the caller's transaction")
            caller.commit()
        else:
            q.enqueue("first")
            msg_id = q.enqueue("in the caller's transaction")
            with q.receive(heartbeat=False) as first:  # outside a transaction: settled elsewhere if closed
                assert first is not None
        with pytest.raises((errors.ConnectionFailed, psycopg.OperationalError)):
            with caller.transaction() if mode != "transaction-mode" else nullcontext():
                with q.receive(heartbeat=False) as msg:
                    assert msg is not None and (msg.id, msg.attempts) == (msg_id, 1)
                    caller.close()  # the transaction and its lease roll back
                    deadline = time.monotonic() + 10
                    while not (taken := other.dequeue(1)) and time.monotonic() < deadline:
                        time.sleep(0.05)  # until the server has ended the closed session
                    assert [(m.id, m.attempts) for m in taken] == [(msg_id, 1)]  # the same token
        stats = other.stats()
        assert (stats.ready, stats.scheduled, stats.leased) == (0, 0, 1)  # the other lease stands
        assert other.complete(taken[0])


class Stuck(BaseException):
    """Raised in the main thread by :func:`bounded` when what it bounds has not ended in time."""


@contextmanager
def bounded(seconds: float) -> Iterator[None]:
    """Interrupt the main thread with :class:`Stuck` (a simulated SIGUSR1: pytest-timeout has
    SIGALRM) if the block has not ended after ``seconds``: a loop that spins forever (holding
    the locks of a connection) then fails the test instead of hanging it."""
    import _thread

    def on_signal(signum: int, frame: object) -> None:
        raise Stuck(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGUSR1, on_signal)
    timer = threading.Timer(seconds, _thread.interrupt_main, (signal.SIGUSR1,))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)


#: Statements whose answer an interruption leaves unread on a shared connection: an answer still
#: on its way, a COPY TO STDOUT (the connection in COPY OUT), a COPY FROM STDIN (COPY IN).
LEFT_OPEN = {
    "statement": b"SELECT pg_sleep(0.2)",
    "copy-out": b"COPY (SELECT g FROM generate_series(1, 3) g) TO STDOUT",
    "copy-in": b"COPY sink FROM STDIN",
}


@pytest.mark.parametrize("left", ["copy-out", "copy-in"])
@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_a_block_whose_copy_an_interruption_left_open_gives_its_message_back(source: str, left: str, dsn: str,
                                                                             conn: Conn) -> None:
    """A COPY the block ran on the shared connection, left open by a Ctrl-C: the connection is not
    busy, and each read of a result gave a COPY result again, never the end: the reading before
    the give-back spun at 100% CPU forever, holding the connection's locks (a review). A COPY
    OUT is now drained and a COPY IN aborted (the server ends it with pgqueue's error): the
    message is given back within the reading's bound, and the connection usable again."""
    conn.execute("CREATE TABLE sink (g int)")
    with ExitStack() as stack:
        src: Any = dsn if source == "dsn" else stack.enter_context(psycopg.connect(dsn, autocommit=True))
        q = stack.enter_context(Queue(src, "jobs"))
        q.create()
        q.enqueue("interrupted in its COPY")
        started = time.monotonic()
        with bounded(10), pytest.raises(KeyboardInterrupt):
            with q.receive(lock_ms=60_000, heartbeat=False) as msg:
                assert msg is not None
                shared = src if source != "dsn" else q._connector._own
                assert shared is not None and not shared.closed
                shared.pgconn.send_query(LEFT_OPEN[left])  # the COPY begun, left open
                raise KeyboardInterrupt
        assert time.monotonic() - started < 5
        stats = Queue(dsn, "jobs").stats()
        assert (stats.ready, stats.leased) == (1, 0)  # given back, not left leased
        [again] = q.dequeue(1)  # and the shared connection usable again
        assert again.payload == "interrupted in its COPY"
        assert shared.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert shared.execute("SELECT count(*) FROM sink").fetchone() == (0,)  # a COPY IN aborted


def _endless_copy_out(conn: Conn) -> None:
    conn.pgconn.send_query(b"COPY (SELECT generate_series(1, 1000000000)) TO STDOUT")  # rows for minutes


def _copy_both(conn: Conn) -> None:
    pos = conn.pgconn.exec_(b"IDENTIFY_SYSTEM").get_value(0, 2)
    assert pos is not None
    conn.pgconn.send_query(b"START_REPLICATION " + pos)  # a walsender's COPY BOTH


@pytest.mark.parametrize("state", ["endless copy-out", "copy-both"])
def test_reading_what_is_left_returns_within_its_bound_on_what_it_cannot_read(state: str, dsn: str) -> None:
    """A COPY OUT that goes on longer than the bound, and a COPY BOTH (replication, not read
    here): spun on forever before (a review). The reading now gives up within its ``timeout``,
    the connection left as it is."""
    from pgqueue.client import _read_what_is_left

    replication = state == "copy-both"
    try:
        busy = psycopg.connect(psycopg.conninfo.make_conninfo(dsn, **({"replication": "true"} if replication else {})),
                               autocommit=True)
    except psycopg.OperationalError as exc:  # a server that takes no replication connection
        pytest.skip(f"no replication connection: {exc}")
    try:  # (closed, not left by a with: its end would commit, "another command is already in progress")
        (_copy_both if replication else _endless_copy_out)(busy)
        deadline = time.monotonic() + 30
        while busy.pgconn.is_busy():  # the COPY begun
            assert time.monotonic() < deadline
            busy.pgconn.consume_input()
            time.sleep(0.01)
        started = time.monotonic()
        with bounded(10):
            _read_what_is_left(busy, timeout=0.5)
        # within its bound and then some for a loaded machine; not the 5 s of its default bound
        assert time.monotonic() - started < 4
        assert busy.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE  # left as it is
    finally:
        busy.close()  # (a walsender left open would hold the server's shutdown)


def test_reading_what_is_left_leaves_a_pipeline_alone(conn: Conn) -> None:
    """A connection in pipeline mode (the caller's pipeline, in another thread) shows ACTIVE with
    its statements' answers on their way: they are the pipeline's to read (before, its wait for
    them ran out the reading's whole bound, the locks held), and are left to it at once."""
    from pgqueue.client import _read_what_is_left

    with bounded(30), conn.pipeline():
        cur = conn.execute("SELECT pg_sleep(0.1), 7")  # sent, its answer on its way
        time.sleep(0.3)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.ACTIVE
        started = time.monotonic()
        _read_what_is_left(conn, timeout=10)
        assert time.monotonic() - started < 5  # at once (a loaded machine's second or two), not the 10 s
        assert cur.fetchone() == ("", 7)
    assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_receive_interrupted_while_it_completes_still_completes_the_message(source: str, dsn: str) -> None:
    """A Ctrl-C that lands while the block's message is being completed (here: its DELETE waits
    for a row lock another session holds): psycopg cancels the statement, and the message whose
    block had finished stayed leased until its lease ran out, to be handled again (a review,
    session 44). The complete now runs once more, then the interruption goes on."""
    with ExitStack() as stack:
        src: Any = dsn if source == "dsn" else stack.enter_context(psycopg.connect(dsn, autocommit=True))
        q = stack.enter_context(Queue(src, "jobs"))
        q.create()
        q.enqueue("finished")
        errors_seen: list[BaseException] = []

        def block_then_interrupt(msg_id: int, locked: threading.Event) -> None:
            try:
                with psycopg.connect(dsn) as blocker, psycopg.connect(dsn, autocommit=True) as watch:
                    blocker.execute("SELECT 1 FROM pgqueue.message WHERE id = %s FOR UPDATE", (msg_id,))
                    locked.set()
                    for _ in range(500):  # until the complete waits for the row (each look a transaction
                        # of its own: pg_stat_activity is read once a transaction)
                        if watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                         "AND query LIKE '%%message_complete%%'").fetchone() == (1,):
                            break
                        time.sleep(0.02)
                    else:
                        raise AssertionError("the complete never waited")
                    os.kill(os.getpid(), signal.SIGINT)
                    time.sleep(0.3)
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors_seen.append(exc)
                locked.set()

        thread = None
        interrupted = False
        try:
            with q.receive(lock_ms=60_000, heartbeat=False) as msg:
                assert msg is not None
                locked = threading.Event()
                thread = threading.Thread(target=block_then_interrupt, args=(msg.id, locked))
                thread.start()
                locked.wait(10)
        except KeyboardInterrupt:
            interrupted = True
        assert thread is not None
        thread.join(10)
        assert not errors_seen, errors_seen
        assert interrupted
        stats = Queue(dsn, "jobs").stats()
        assert (stats.ready, stats.leased, stats.dead) == (0, 0, 0)


def test_receive_refuses_lock_ms_zero(queue: Queue) -> None:
    queue.enqueue("work")
    with pytest.raises(errors.InvalidArgument):
        with queue.receive(lock_ms=0):
            pass
    assert queue.stats().ready == 1


#: The lease of a slow receive block: its heartbeats, a third of it apart, keep it on a loaded
#: machine too, where a thread may wait a second or two for the CPU (a lease of 300 ms was lost
#: to a beat 200 ms late).
SLOW_LEASE_MS = 3000


def _slow_receive(q: Queue, other: Queue, *, heartbeat: bool) -> tuple[Message | None, list[Message]]:
    """Run a receive block on a SLOW_LEASE_MS lease that lasts a second past the lease's end (or,
    without heartbeats, until the other consumer got the message, 30 s at most); another consumer
    polls meanwhile."""
    stolen: list[Message] = []
    with q.receive(lock_ms=SLOW_LEASE_MS, heartbeat=heartbeat) as msg:
        deadline = time.monotonic() + (SLOW_LEASE_MS / 1000 + 1 if heartbeat else 30)
        while not stolen and time.monotonic() < deadline:
            stolen += other.dequeue(1, lock_ms=60000)
            time.sleep(0.1)
    return msg, stolen


@pytest.mark.parametrize("source", ["dsn", "pool", "autocommit-connection"])
def test_heartbeats_keep_the_lease_of_a_slow_block(source: str, dsn: str, conn: Conn,
                                                   pool: ConnectionPool[Any]) -> None:
    other = Queue(conn, "default")
    with psycopg.connect(dsn, autocommit=True) as own:
        src: Any = {"dsn": dsn, "pool": pool, "autocommit-connection": own}[source]
        with Queue(src, "default") as q:
            q.enqueue("slow")
            msg, stolen = _slow_receive(q, other, heartbeat=True)
    assert msg is not None
    assert stolen == []  # nobody else got it while the block ran
    assert other.stats().total == 0  # and it was completed


def test_receive_heartbeats_renew_for_the_blocks_lease_not_the_queues(dsn: str, conn: Conn) -> None:
    """receive(lock_ms=1500) on a queue whose lock_ms is 60 s: each beat renews the lease for
    1.5 s, the block's, as the dequeue took it. Renewing for the queue's lock_ms (a heartbeat of
    lock_ms None) went unnoticed (a mutation that survived: a longer lease loses nothing); a
    consumer that dies in its block then holds the message for a minute. The lease left is read
    every 50 ms for 2 s, across three beats or more."""
    with Queue(dsn, "jobs") as q:
        q.create(lock_ms=60000)
        q.enqueue("held")
        left: list[int] = []
        with q.receive(lock_ms=1500) as msg:
            assert msg is not None
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                left += leases_left(conn, [msg.id]).values()
                time.sleep(0.05)
        assert len(left) >= 10 and max(left) <= 1600, left
        assert q.stats().total == 0  # completed


def _backends(conn: Conn) -> set[int]:
    rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid()").fetchall()
    return {int(row[0]) for row in rows}


@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_heartbeats_outlive_a_terminated_connection(source: str, dsn: str, conn: Conn) -> None:
    """The heartbeat connection is terminated in the block: the next beat fails and is made
    again at once on a new connection. Before, the beats kept the dead connection (each failed,
    the lease ran out and the message went to another consumer)."""
    other = Queue(conn, "default")
    with psycopg.connect(dsn, autocommit=True) as own:
        src: Any = {"dsn": dsn, "autocommit-connection": own}[source]
        with Queue(src, "default") as q:
            q.enqueue("slow")
            before = _backends(conn)
            stolen: list[Message] = []
            with q.receive(lock_ms=SLOW_LEASE_MS) as msg:
                [beats] = _backends(conn) - before  # the connection opened for the block's beats
                conn.execute("SELECT pg_terminate_backend(%s)", (beats,))
                deadline = time.monotonic() + SLOW_LEASE_MS / 1000 + 1  # past the lease's end
                while time.monotonic() < deadline:
                    stolen += other.dequeue(1, lock_ms=60000)
                    time.sleep(0.05)
    assert msg is not None
    assert stolen == []  # nobody else got it while the block ran
    assert other.stats().total == 0  # and it was completed


def test_heartbeats_on_an_autocommit_connection_another_thread_is_using(dsn: str, conn: Conn,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another thread's statement in flight on the caller's autocommit connection when receive()
    chose its heartbeats: the status read then was ACTIVE, taken for a transaction, and the
    block went without heartbeats (its message went to another consumer). Now the choice is
    made from the connection's mode and its status at the dequeue."""
    from pgqueue import client

    other = Queue(conn, "default")
    with psycopg.connect(dsn, autocommit=True) as shared:
        q = Queue(shared, "default")
        q.enqueue("slow")
        stop = threading.Event()

        def busy() -> None:  # the application's own statements on the same connection
            while not stop.is_set():
                shared.execute("SELECT pg_sleep(0.05)")

        original = client._Connector.heartbeat_runner

        def runner_while_busy(self: Any, *args: Any) -> Any:
            deadline = time.monotonic() + 5
            while shared.info.transaction_status != psycopg.pq.TransactionStatus.ACTIVE:
                assert time.monotonic() < deadline
                time.sleep(0.001)
            return original(self, *args)

        monkeypatch.setattr(client._Connector, "heartbeat_runner", runner_while_busy)
        thread = threading.Thread(target=busy)
        thread.start()
        try:
            msg, stolen = _slow_receive(q, other, heartbeat=True)
        finally:
            stop.set()
            thread.join()
    assert msg is not None
    assert stolen == []  # nobody else got it while the block ran
    assert other.stats().total == 0  # and it was completed


@pytest.mark.parametrize("ending", ["return", "raise"])
def test_an_interruption_while_the_heartbeats_stop_still_settles_the_message(
        ending: str, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt that lands while receive() joins its heartbeat thread went out of the
    block's exit before the settling: a block that had returned left its message leased (an
    attempt spent; a dead letter at max_attempts 1), one that had raised left it unfailed. Now
    the message is settled by the block's outcome, then the interruption goes on."""
    from pgqueue import _lease

    original = _lease.Heartbeats.stop

    def interrupted_stop(self: Any, timeout: float | None = None) -> None:
        original(self, timeout)
        raise KeyboardInterrupt

    Queue(dsn, "once").create(max_attempts=1)
    with Queue(dsn, "once") as queue:
        queue.enqueue("work")
        monkeypatch.setattr(_lease.Heartbeats, "stop", interrupted_stop)
        with pytest.raises(KeyboardInterrupt):
            with queue.receive(lock_ms=60000) as msg:
                assert msg is not None
                if ending == "raise":
                    raise ValueError("boom")
        monkeypatch.undo()
        stats = queue.stats()
        if ending == "return":
            assert (stats.ready, stats.leased, stats.dead) == (0, 0, 0)
            assert queue.counters().completed == 1
        else:
            assert (stats.ready, stats.leased, stats.dead) == (0, 0, 1)
            [dead] = queue.dead_letters()
            assert dead.last_error is not None and "boom" in dead.last_error


def test_receive_bounds_the_wait_for_a_stuck_heartbeat(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A beat stuck on a dead connection held the end of the block for as long as it hung (the
    heartbeat thread was joined without a bound); now for STOP_WAIT seconds at most."""
    from pgqueue import _lease, client

    release = threading.Event()

    def stuck(self: Any) -> list[Message]:
        release.wait(10)
        return []

    monkeypatch.setattr(client, "STOP_WAIT", 0.3, raising=False)  # (raising: absent before)
    monkeypatch.setattr(_lease.Heartbeats, "renew", stuck)
    with Queue(dsn, "default") as queue:
        queue.enqueue("work")
        try:
            started = time.monotonic()
            with queue.receive(lock_ms=300) as msg:
                assert msg is not None
                time.sleep(0.3)  # a beat is stuck meanwhile
            assert time.monotonic() - started < 5
        finally:
            release.set()
        assert queue.counters().completed == 1


def test_without_heartbeats_a_slow_block_loses_its_message(queue: Queue, conn: Conn) -> None:
    other = Queue(conn, "jobs")
    queue.enqueue("slow")
    msg, stolen = _slow_receive(queue, other, heartbeat=False)
    assert msg is not None
    assert [m.id for m in stolen] == [msg.id]  # redelivered to the other consumer
    assert stolen[0].attempts == 2
    assert queue.stats().leased == 1  # the late complete changed nothing; the other holds it
    assert other.complete(stolen[0])


def test_receive_inside_the_callers_transaction_is_held_by_its_row_lock(dsn: str, conn: Conn) -> None:
    other = Queue(conn, "default")
    other.enqueue("in tx")
    with psycopg.connect(dsn) as tx:
        q = Queue(tx, "default")
        msg, stolen = _slow_receive(q, other, heartbeat=True)
        assert msg is not None and stolen == []
        tx.commit()
    assert other.stats().total == 0


def test_receive_with_a_callers_connection_and_rollback(dsn: str, conn: Conn) -> None:
    other = Queue(conn, "default")
    other.enqueue("kept")
    with psycopg.connect(dsn) as tx:
        with Queue(tx, "default").receive() as msg:
            assert msg is not None
        tx.rollback()  # the completion is undone with the caller's transaction
    assert [m.payload for m in other.dequeue()] == ["kept"]


# -- connection sources ------------------------------------------------------------------


def test_pool_based_queue(pool: ConnectionPool[Any]) -> None:
    q = Queue(pool, "pooled")
    q.create(lock_ms=1000)
    ids = q.enqueue_many(["a", "b"])
    threads = [threading.Thread(target=lambda: q.enqueue("t")) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = q.dequeue(20)
    assert [m.id for m in got[:2]] == ids and len(got) == 10
    assert all(q.complete(m) for m in got)
    assert q.stats().total == 0
    q.close()
    assert not pool.closed
    assert [s.queue for s in list_queues(pool)] == ["default", "pooled"]


@pytest.mark.parametrize("source", ["dsn", "autocommit-connection"])
def test_threads_sharing_a_queue_receive_and_complete_every_message(source: str, dsn: str, conn: Conn) -> None:
    """Threads that receive() from one Queue over one connection (its own, or a caller's that
    two Queues share) settle every message, and the connection is left committed: an enqueue
    afterwards is visible to another connection. Before, one thread's dequeue transaction
    interleaved with another's, which nested in it as a savepoint: "transaction commit at the
    wrong nesting level", and the connection stayed in a transaction nobody committed, so the
    completions and enqueues sent after it were never committed."""
    Queue(conn, "jobs").create()
    ids = Queue(conn, "jobs").enqueue_many(list(range(300)))
    with ExitStack() as stack:
        if source == "dsn":
            shared = stack.enter_context(Queue(dsn, "jobs"))
            queues = [shared] * 4
        else:
            caller = stack.enter_context(psycopg.connect(dsn, autocommit=True))
            queues = [Queue(caller, "jobs"), Queue(caller, "jobs")] * 2
        handled: list[int] = []
        errors_seen: list[BaseException] = []

        def consume(q: Queue) -> None:
            while True:
                try:
                    with q.receive(heartbeat=False) as msg:
                        if msg is None:
                            return
                        handled.append(msg.id)
                except BaseException as exc:  # surfaced below
                    errors_seen.append(exc)
                    return

        threads = [threading.Thread(target=consume, args=(q,)) for q in queues]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors_seen, errors_seen
        assert sorted(handled) == ids
        after = queues[0].enqueue("after")
        seen = conn.execute("SELECT id FROM pgqueue.message").fetchall()
        assert seen == [(after,)]  # every message completed, and the enqueue after them committed


def test_dsn_queue_opens_lazily_and_closes(dsn: str, conn: Conn) -> None:
    def backends() -> int:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()").fetchone()
        assert row is not None
        return int(row[0])

    def settles_at(count: int) -> bool:
        deadline = time.monotonic() + 30
        while backends() != count and time.monotonic() < deadline:
            time.sleep(0.02)
        return backends() == count

    q = Queue(dsn, "default")
    assert backends() == 0
    q.enqueue(1)
    assert backends() == 1
    q.close()
    assert settles_at(0)
    with pytest.raises(errors.PgQueueError, match="closed"):
        q.enqueue(2)
    with Queue(dsn) as q2:
        assert [m.payload for m in q2.dequeue()] == [1]
        q2.enqueue(2)
        with q2.receive() as msg:  # the heartbeat connection is a second one
            assert msg is not None
            assert settles_at(2)
    assert settles_at(0)


def test_callers_connection_with_any_row_factory(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as c:
        q = Queue(c)
        q.enqueue({"a": 1})
        assert q.stats().ready == 1
        assert [m.payload for m in q.dequeue()] == [{"a": 1}]
        assert c.execute("SELECT 1 AS one").fetchone() == {"one": 1}


def test_wrong_sources_are_refused(dsn: str) -> None:
    aconn = asyncio.run(psycopg.AsyncConnection.connect(dsn))
    try:
        with pytest.raises(TypeError, match="AsyncQueue"):
            Queue(aconn)  # type: ignore[arg-type]
    finally:
        asyncio.run(aconn.close())
    with pytest.raises(TypeError):
        Queue(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Queue(dsn, 3)  # type: ignore[arg-type]


def test_listen_statement_receives_the_queues_notifications(dsn: str, conn: Conn) -> None:
    with Queue(conn, "Loud.Queue-1") as q:
        q.create(notify=True)
        with psycopg.connect(dsn, autocommit=True) as listener:
            listener.execute(_sql.listen_statement(q.name))
            q.enqueue("wake up")
            got = list(listener.notifies(timeout=30, stop_after=1))
    assert [(n.channel, n.payload) for n in got] == [(_sql.channel_name("Loud.Queue-1"), "Loud.Queue-1")]
    assert _sql.channel_name("Loud.Queue-1") == "pgqueue.Loud.Queue-1"


# -- management --------------------------------------------------------------------------


def test_create_settings_alter_drop(dsn: str) -> None:
    with Queue(dsn, "mgmt") as q:
        assert q.name == "mgmt" and repr(q) == "Queue('mgmt')"
        q.create(lock_ms=5000, max_attempts=3, retry_base_ms=10, retry_cap_ms=100, max_size=50, notify=True)
        s = q.settings()
        assert isinstance(s, QueueSettings)
        assert (s.queue, s.lock_ms, s.max_attempts, s.retry_base_ms, s.retry_cap_ms, s.max_size, s.notify) == (
            "mgmt", 5000, 3, 10, 100, 50, True)
        assert isinstance(s.created_at, datetime) and s.created_at.tzinfo is not None
        assert (s.group_concurrency, s.key_window_ms, s.rate_limit) == (None, 0, None)
        with Queue(dsn, "mgmt_groups") as g:
            g.create(group_concurrency=2, key_window_ms=500, rate_limit=100)
            gs = g.settings()
            assert (gs.group_concurrency, gs.key_window_ms, gs.rate_limit) == (2, 500, 100)
            assert [x.group_concurrency for x in list_queues(dsn) if x.queue == "mgmt_groups"] == [2]
        with pytest.raises(errors.QueueExists) as exists:
            q.create()
        assert exists.value.sqlstate == "PQ002"
        q.create(if_not_exists=True)

        q.alter(lock_ms=7000, notify=False)
        s = q.settings()
        assert (s.lock_ms, s.max_attempts, s.notify, s.max_size) == (7000, 3, False, 50)
        q.alter(max_attempts=0, max_size=0)  # 0 = unlimited
        s = q.settings()
        assert (s.max_attempts, s.max_size) == (None, None)
        with pytest.raises(errors.InvalidArgument):
            q.alter(lock_ms=0)
        with pytest.raises(errors.InvalidArgument):
            q.alter(lock_ms="5")  # type: ignore[arg-type]

        q.enqueue("bye")
        assert q.drop() is True
        assert q.drop() is False
        with pytest.raises(errors.QueueNotFound):
            q.settings()
        with Queue(dsn, "default") as default, pytest.raises(errors.ProtectedQueue) as protected:
            default.drop()
        assert protected.value.sqlstate == "PQ004"


def test_stats_and_module_functions(dsn: str, conn: Conn, pool: ConnectionPool[Any]) -> None:
    scenarios.run(scenarios.stats_count_each_state, Queue(conn, "stats"), conn)
    for source in (dsn, conn, pool):
        assert [x.queue for x in list_queues(source)] == ["default", "stats"]
        everything = all_stats(source)
        assert [x.queue for x in everything] == ["default", "stats"]
        assert everything[1].dead == 1
    assert Queue(conn).stats() == QueueStats("default", 0, 0, 0, 0, None)


def test_dead_letters_requeue_and_purge(queue: Queue, conn: Conn) -> None:
    queue.alter(max_attempts=1)
    queue.enqueue_many(["a", "b", "c", "d"])
    for m in queue.dequeue(4):
        queue.fail(m, f"failed {m.payload}")
    dead = queue.dead_letters()
    assert [d.payload for d in dead] == ["a", "b", "c", "d"]
    assert [d.last_error for d in dead] == ["failed a", "failed b", "failed c", "failed d"]
    assert len(queue.dead_letters(limit=2)) == 2
    with pytest.raises(errors.InvalidArgument):
        queue.dead_letters(limit=-1)

    assert queue.requeue_dead([dead[0].id]) == 1
    [back] = queue.dequeue()
    assert back.payload == "a" and back.attempts == 1 and back.id != dead[0].id
    queue.complete(back)

    assert queue.requeue_dead([dead[1].id], delay=3600) == 1
    assert queue.stats().scheduled == 1
    assert queue.requeue_dead([]) == 0

    assert queue.purge_dead(before=dead[2].dead_at) == 0
    assert queue.purge_dead([dead[2].id]) == 1
    assert queue.purge_dead(before=datetime.now(timezone.utc) + timedelta(minutes=1)) == 1
    assert queue.dead_letters() == []
    assert queue.stats().dead == 0

    assert queue.requeue_dead() == 0
    assert queue.purge_dead() == 0


def test_dead_letters_page_by_keyset(queue: Queue, conn: Conn) -> None:
    """dead_letters(after=...) starts after the letter given, by (dead_at, id): pages cover every
    letter once, in order, also when letters die within the same millisecond, and a page does
    not shift when letters before it are requeued or purged."""
    queue.alter(max_attempts=1)
    queue.enqueue_many([f"m{i}" for i in range(7)])
    for m in queue.dequeue(7):
        queue.fail(m, "x")
    # the same dead_at for some (ties are broken by id)
    conn.execute("UPDATE pgqueue.dead_letter SET dead_at = 1000 WHERE id IN "
                 "(SELECT id FROM pgqueue.dead_letter ORDER BY id LIMIT 4)")
    everything = queue.dead_letters()
    assert [d.payload for d in everything] == [f"m{i}" for i in range(7)]
    pages, after = [], None
    while page := queue.dead_letters(3, after=after):
        pages.append([d.payload for d in page])
        after = page[-1]
    assert pages == [["m0", "m1", "m2"], ["m3", "m4", "m5"], ["m6"]]
    assert queue.purge_dead([everything[0].id, everything[3].id]) == 2  # before and at the cursor
    assert [d.payload for d in queue.dead_letters(3, after=everything[3])] == ["m4", "m5", "m6"]
    assert queue.dead_letters(3, after=everything[-1]) == []
    with pytest.raises(errors.InvalidArgument, match="after must be a DeadLetter"):
        queue.dead_letters(3, after=everything[0].id)  # type: ignore[arg-type]
    with pytest.raises(errors.QueueNotFound):
        Queue(conn, "no_such_queue").dead_letters(3, after=everything[1])


@pytest.mark.parametrize("stored", ["past_year_9999", "before_year_1"])
def test_dead_letters_page_by_the_stored_time_when_dead_at_is_clamped(queue: Queue, conn: Conn, stored: str) -> None:
    """A dead_at outside datetime's range (an administrator's UPDATE, a restore, a wrong clock)
    comes back clamped to datetime.max / min; a cursor made from the clamped value read the same
    page again forever (past the year 9999) or skipped letters (before the year 1), a review
    found. The cursor is the stored time (DeadLetter.dead_at_ms)."""
    queue.alter(max_attempts=1)
    queue.enqueue_many([f"m{i}" for i in range(5)])
    for m in queue.dequeue(5):
        queue.fail(m, "x")
    base = 253402300800000 if stored == "past_year_9999" else -62135596800001 - 1000
    conn.execute("UPDATE pgqueue.dead_letter SET dead_at = %s + id", (base,))
    pages, after = [], None
    while page := queue.dead_letters(2, after=after):
        assert len(pages) < 5, pages
        pages.append([d.payload for d in page])
        after = page[-1]
    assert pages == [["m0", "m1"], ["m2", "m3"], ["m4"]]
    assert {d.dead_at for d in queue.dead_letters()} == {datetime.max.replace(tzinfo=timezone.utc)
                                                        if stored == "past_year_9999"
                                                        else datetime.min.replace(tzinfo=timezone.utc)}


@pytest.fixture
def lists_as_jsonb(monkeypatch: pytest.MonkeyPatch) -> None:
    """A caller's global dumper for ``list`` (JSON), as ``psycopg.adapters.register_dumper(list,
    JsonbDumper)`` registers it: on a copy of psycopg's global adapters that the connections
    opened in the test take, which the test's end puts back."""
    from psycopg.adapt import AdaptersMap
    from psycopg.types.json import JsonbDumper

    adapters = AdaptersMap(psycopg.postgres.adapters)
    monkeypatch.setattr(psycopg.postgres, "adapters", adapters)
    monkeypatch.setattr(psycopg, "adapters", adapters)
    psycopg.adapters.register_dumper(list, JsonbDumper)


def _every_call_with_a_list(q: Queue) -> None:
    ids = q.enqueue_many([b"a", "b", {"c": 3}, None, 5], keys=["k1", None, None, None, None])
    assert len(ids) == 5
    assert [p.id for p in q.cancel([ids[4]])] == [ids[4]]
    msgs = q.dequeue(2, lock_ms=60000)
    assert q.complete_many(msgs[:1]) == []
    got, lost = q.complete_and_dequeue(msgs[1:], 1, lock_ms=60000)
    assert lost == [] and len(got) == 1
    assert q.reject(got[0], "x")
    assert q.requeue_dead([got[0].id]) == 1
    [m] = q.dequeue(lock_ms=60000)
    assert q.reject(m, "y")
    assert q.purge_dead([m.id]) == 1
    assert q.dequeue(5, lock_ms=0) != []


def test_a_callers_dumper_for_lists_does_not_change_the_statements(dsn: str, lists_as_jsonb: None) -> None:
    """A dumper the caller registered for ``list`` (JSON, globally or on the connection) made
    the arrays of the statements JSON: enqueue_many raised a bare TypeError (bytes are not
    JSON), cancel, purge_dead and requeue_dead 42846 (cannot cast jsonb to bigint[]; a review).
    The statements dump their lists with psycopg's own dumpers."""
    from psycopg.types.json import JsonbDumper

    with psycopg.connect(dsn, autocommit=True) as check:  # the registration is in force
        with pytest.raises(psycopg.errors.CannotCoerce):
            check.execute("SELECT %s::bigint[]", ([1],))
    with Queue(dsn, "default") as q:  # its own connection
        _every_call_with_a_list(q)
    with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:
        _every_call_with_a_list(Queue(pool, "default"))
    with psycopg.connect(dsn, autocommit=True) as caller:
        caller.adapters.register_dumper(list, JsonbDumper)  # on the connection only
        _every_call_with_a_list(Queue(caller, "default"))
        assert caller.execute("SELECT pg_typeof(%s)::text", ([1],)).fetchone() == ("jsonb",)  # the caller's, untouched


# -- errors ------------------------------------------------------------------------------


def test_errors_map_to_classes_with_the_psycopg_error_as_cause(dsn: str, conn: Conn) -> None:
    missing = Queue(dsn, "missing")
    scenarios.run(scenarios.missing_queue_errors_carry_the_psycopg_error, missing, conn)

    bad = Queue(dsn, "bad name!")
    for call in (lambda: bad.enqueue(1), bad.create, bad.settings, bad.dead_letters):
        with pytest.raises(errors.InvalidQueueName) as named:
            call()
        assert named.value.sqlstate == "42602"

    capped = Queue(dsn, "capped")
    capped.create(max_size=1)
    capped.enqueue(1)
    with pytest.raises(errors.QueueFull):
        capped.enqueue(2)
    for q in (missing, bad, capped):
        q.close()


def test_heartbeats_forget_a_lost_lease_once_its_delivery_is_no_longer_held() -> None:
    """A lease found lost is remembered, so that it is not renewed or reported again while its
    delivery is still held; once the delivery is settled it was remembered for ever, one more
    for every lease lost in the life of a worker (a review). It is forgotten at the next round
    that no longer holds it; a lost one still held is neither beaten again nor reported twice."""
    from pgqueue import _lease

    def message(i: int) -> Message:
        return Message(id=i, queue="q", payload=None, attempts=1, state=None, dequeue_at=None,
                       created_at=datetime.now(timezone.utc), locked_until=None, content=b"", content_type=None)

    held = [message(1), message(2)]
    sent: list[list[int]] = []

    def beat(chunk: list[Message]) -> list[Message]:
        sent.append([m.id for m in chunk])
        return [m for m in chunk if m.id == 1]  # 1's lease is gone

    beats = _lease.Heartbeats(lambda: list(held), beat, 3600.0)
    try:
        assert [m.id for m in beats.renew()] == [1]
        assert beats.lost == {(1, 1)}
        assert beats.renew() == [] and sent[-1] == [2]  # still held: not beaten or reported again
        held.remove(held[0])  # 1 settled
        assert beats.renew() == [] and beats.lost == set()
    finally:
        beats.stop()


def test_an_acknowledgement_of_something_other_than_a_message_is_refused_before_connecting() -> None:
    """Every call that acts on a leased message takes a pgqueue Message whose id and attempts are
    ints: a hand-made Message with the id "5" was completed, but complete_many never reported
    its lost lease (the server's stale ids are ints: a review). InvalidArgument, before anything
    connects ("dbname=unused" is never opened)."""
    good = Message(id=5, queue="q", payload=None, attempts=1, state=None, dequeue_at=None,
                   created_at=datetime.now(timezone.utc), locked_until=None, content=b"", content_type=None)
    q = Queue("dbname=unused", "q")
    calls = (q.complete, q.heartbeat, q.defer, lambda m: q.fail(m, "x"), lambda m: q.reject(m, "x"),
             lambda m: q.complete_many([m]), lambda m: q.heartbeat_many([m]),
             lambda m: q.complete_and_dequeue([m]))
    for bad, words in ((None, "expected a pgqueue Message, got NoneType"),
                       (replace(good, id="5"), "a Message's id and attempts must be ints, got '5' and 1"),
                       (replace(good, attempts=True), "a Message's id and attempts must be ints, got 5 and True")):
        for call in calls:
            with pytest.raises(errors.InvalidArgument, match=words):
                call(bad)  # type: ignore[no-untyped-call]
    q.close()


def test_a_server_errors_detail_is_kept_and_pickled(dsn: str, conn: Conn) -> None:
    """translate kept the message and the hint but dropped the server's DETAIL: a full queue
    refused inside its recount window says when it is counted again there, which was lost (a
    review). The window is opened by hand, as a count of 10,000 messages or more opens it."""
    import pickle

    capped = Queue(dsn, "capped")
    capped.create(max_size=1)
    capped.enqueue(1)
    for _ in range(20):  # (a window is 1 s at most: again if a loaded machine refused after it ended)
        window_end = server_now(conn) + 900
        conn.execute("SELECT setval(pgqueue._size_recount_seq(q.id), (%s::bigint << 20) | ((q.id >> 6) & 1048575)) "
                     "FROM pgqueue.queue q WHERE q.name = 'capped'", (window_end,))
        with pytest.raises(errors.QueueFull) as full:
            capped.enqueue(2)
        if server_now(conn) < window_end:  # refused inside the window
            break
    else:
        pytest.fail("no refusal came within its recount window")
    assert full.value.detail is not None and "counted again in" in full.value.detail, full.value.detail
    assert full.value.hint is not None and "Back off" in full.value.hint
    again = pickle.loads(pickle.dumps(full.value))
    assert type(again) is errors.QueueFull
    assert (again.message, again.sqlstate, again.hint, again.detail) == (
        full.value.message, "PQ003", full.value.hint, full.value.detail)
    with pytest.raises(errors.QueueNotFound) as missing:  # no DETAIL: None
        Queue(dsn, "missing").enqueue(1)
    assert missing.value.detail is None
    assert errors.PgQueueError("client-side").detail is None
    capped.close()


def test_extension_not_installed(pg_server: Server) -> None:
    name = create_database(pg_server, "template1", prefix="noext")
    try:
        with Queue(pg_server.dsn(name)) as q:
            for call in (lambda: q.enqueue(1), q.dequeue, q.stats, q.create, q.dead_letters):
                with pytest.raises(errors.ExtensionNotInstalled) as info:
                    call()
                assert "CREATE EXTENSION pgqueue" in str(info.value)
                assert "make install" in str(info.value)
                assert info.value.sqlstate in {"3F000", "42883", "42P01"}
                assert isinstance(info.value.__cause__, psycopg.Error)
    finally:
        drop_database(pg_server, name)


def test_a_database_with_an_older_pgqueue_is_told_apart_from_none(pg_server: Server) -> None:
    name = create_database(pg_server, "template1", prefix="old")
    try:
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as c:
            c.execute("CREATE EXTENSION pgqueue VERSION '0.3'")
        with Queue(pg_server.dsn(name)) as q:
            with pytest.raises(errors.ExtensionNotInstalled) as info:
                q.enqueue(1, group="g")  # 0.3 has no message_create with a group
        assert info.value.sqlstate == "42883"
        assert "no such function or table" in str(info.value) and "older than this client" in str(info.value)
        assert "pgqueue install --dsn" in str(info.value) and info.value.hint is not None
        # calls that read a column 0.3 lacks (queue_list()'s group_concurrency, dead letters'
        # queue_id) were a bare PgQueueError (42703) that said nothing of the version (a review)
        with Queue(pg_server.dsn(name)) as q:
            for call in (q.settings, q.dead_letters):
                with pytest.raises(errors.ExtensionNotInstalled) as info:
                    call()
                assert info.value.sqlstate == "42703" and "older than this client" in str(info.value)
    finally:
        drop_database(pg_server, name)


def test_read_uncommitted_runs_as_read_committed(dsn: str) -> None:
    """PostgreSQL runs READ UNCOMMITTED as READ COMMITTED: what READ COMMITTED may do, it may (a
    review found PQ009 for a new key into a queue with key_window_ms, for queue_create, queue_drop
    and max_size changes, and a 40001 at the first enqueue into a capped queue)."""
    with psycopg.connect(dsn) as tx:
        tx.isolation_level = psycopg.IsolationLevel.READ_UNCOMMITTED
        assert tx.execute("SHOW transaction_isolation").fetchone() == ("read uncommitted",)
        tx.execute("SELECT pgqueue.queue_create('ru_keyed', p_key_window_ms => 60000)")
        tx.execute("SELECT pgqueue.queue_create('ru_capped', p_max_size => 2)")
        tx.commit()
        first = tx.execute("SELECT pgqueue.message_create('ru_keyed', 'a'::bytea, p_key => 'k')").fetchone()
        again = tx.execute("SELECT pgqueue.message_create('ru_keyed', 'b'::bytea, p_key => 'k')").fetchone()
        assert first is not None and first == again
        tx.execute("SELECT pgqueue.message_create('ru_capped', 'a'::bytea)")
        tx.execute("SELECT pgqueue.message_create_batch('ru_capped', ARRAY['b']::bytea[])")
        tx.commit()
        with pytest.raises(psycopg.Error) as full:
            tx.execute("SELECT pgqueue.message_create('ru_capped', 'c'::bytea)")
        assert full.value.sqlstate == "PQ003"
        tx.rollback()
        tx.execute("SELECT pgqueue.queue_alter('ru_capped', p_max_size => 3)")
        tx.execute("SELECT pgqueue.message_create('ru_capped', 'c'::bytea)")
        tx.commit()
        stats = tx.execute("SELECT ready FROM pgqueue.queue_stats('ru_capped')").fetchone()
        assert stats == (3,)
        tx.execute("SELECT pgqueue.queue_drop('ru_capped')")
        tx.execute("SELECT pgqueue.queue_drop('ru_keyed')")
        tx.commit()


def test_read_committed_refusals_and_serialization_failures_have_classes(dsn: str) -> None:
    Queue(dsn, "rr").create()
    with psycopg.connect(dsn) as tx:
        tx.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with pytest.raises(errors.NeedsReadCommitted) as refused:
            Queue(tx, "rr").drop()
        assert refused.value.sqlstate == "PQ009"
        tx.rollback()
        tx.execute("SELECT 1")  # the snapshot is taken here
        with Queue(dsn, "rr") as other:  # a drop and a new queue of the same name commit after it
            other.drop()
            other.create()
        with pytest.raises(errors.SerializationFailure) as stale:
            Queue(tx, "rr").enqueue(1)
        assert stale.value.sqlstate == "40001"
        tx.rollback()
    # (40P01 was a bare PgQueueError: nothing marked it as a transaction to retry)
    with psycopg.connect(dsn) as c, pytest.raises(errors.DeadlockDetected) as deadlock, errors.translating():
        c.execute("DO $$ BEGIN RAISE EXCEPTION 'deadlock' USING ERRCODE = '40P01'; END $$")
    assert deadlock.value.sqlstate == "40P01"
    with psycopg.connect(dsn) as c, pytest.raises(errors.UnsafeSchema) as unsafe, errors.translating():
        c.execute("DO $$ BEGIN RAISE EXCEPTION 'unsafe' USING ERRCODE = 'PQ008'; END $$")
    assert unsafe.value.sqlstate == "PQ008"


def test_connection_failure(pg_server: Server) -> None:
    with socket_port() as port:
        q = Queue(f"host=127.0.0.1 port={port} dbname=x connect_timeout=2")
        with pytest.raises(errors.ConnectionFailed) as info:
            q.enqueue(1)
        assert isinstance(info.value.__cause__, psycopg.OperationalError)
        assert "\n" not in str(info.value)
    with Queue(pg_server.dsn("no_such_database")) as q:
        with pytest.raises(errors.ConnectionFailed):
            q.stats()


class socket_port:
    """A local TCP port that nothing listens on, for the life of the block."""

    def __enter__(self) -> int:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        return int(self._sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


def test_other_database_errors_are_pgqueue_errors(dsn: str) -> None:
    with psycopg.connect(dsn) as tx:
        q = Queue(tx)
        with pytest.raises(errors.PgQueueError):
            q.dequeue(0)
        # the caller's transaction is aborted by the error; the caller decides what to do
        with pytest.raises(errors.PgQueueError) as info:
            q.stats()
        assert info.value.sqlstate == "25P02"
        assert type(info.value) is errors.PgQueueError
        tx.rollback()
        assert q.stats().ready == 0


def test_complete_many_completes_only_with_each_messages_own_token(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.complete_many_uses_each_messages_own_token, queue, conn)


def test_complete_and_dequeue_acknowledges_and_fetches_in_one_statement(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.complete_and_dequeue_in_one_statement, queue, conn)


def test_an_older_delivery_beside_the_newest_is_lost(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.an_older_delivery_beside_the_newest_is_lost, queue, conn)


def leases_left(conn: Conn, ids: list[int]) -> dict[int, int]:
    """Milliseconds left on the leases of messages, by id."""
    rows = conn.execute("SELECT id, locked_until - pgqueue.now_ms() FROM pgqueue.message WHERE id = ANY(%s)",
                        (ids,)).fetchall()
    return {int(i): int(left) for i, left in rows}


async def heartbeat_many_renews_each_with_its_own_token(q: Any, conn: Conn) -> None:
    """heartbeat_many (both clients, one message_heartbeat_batch statement) extends each lease
    whose token is current, and returns the rest in the order given: a stale token (the lease
    ran out and the message went to another delivery), and the older of two deliveries of one
    message given together (never sent); a delivery listed twice is extended once."""
    ids = await q.enqueue_many(["a", "b", "c", "d"])
    a, b, c, d = await q.dequeue(4, lock_ms=1000)
    for m in (b, d):  # their leases run out and they go to other deliveries (attempts 2)
        conn.execute("UPDATE pgqueue.message SET locked_until = 0 WHERE id = %s", (m.id,))
    b2, d2 = await q.dequeue(2, lock_ms=1000)
    assert [(m.id, m.attempts) for m in (b2, d2)] == [(b.id, 2), (d.id, 2)]
    assert await q.heartbeat_many([a, b, c, d, d2, a], 60000) == [b, d]
    left = leases_left(conn, ids)
    assert all(left[m.id] > 50000 for m in (a, c, d2))
    assert left[b.id] <= 1000  # the other delivery's lease was not touched
    before = server_now(conn)  # (the clock around the call: a loaded machine may take seconds)
    assert await q.heartbeat_many([b2]) == []  # lock_ms None: the queue's (30 s)
    after = server_now(conn)
    row = conn.execute("SELECT locked_until FROM pgqueue.message WHERE id = %s", (b.id,)).fetchone()
    assert row is not None and before + 30000 <= row[0] <= after + 30000
    assert await q.heartbeat_many([]) == []
    with pytest.raises(errors.InvalidArgument):
        await q.heartbeat_many([a], 0)  # a lease of 0 ms is refused by the server
    with pytest.raises(errors.InvalidArgument):
        await q.heartbeat_many([a], "60000")  # refused before the server
    with pytest.raises(errors.InvalidArgument):
        await q.heartbeat_many([a, "not a message"])
    with pytest.raises(errors.InvalidArgument):  # more than one statement takes
        await q.heartbeat_many([replace(a, id=a.id + i) for i in range(10001)], 60000)
    assert all(left > 50000 for left in leases_left(conn, [a.id, c.id]).values())  # the refused calls changed nothing


def test_heartbeat_many_renews_each_lease_with_its_own_token(queue: Queue, conn: Conn) -> None:
    scenarios.run(heartbeat_many_renews_each_with_its_own_token, queue, conn)


def test_queue_and_schedule_creation_times_are_utc_whatever_the_sessions_time_zone(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as tokyo:
        tokyo.execute("SET TimeZone = 'Asia/Tokyo'")
        q = Queue(tokyo, "tz")
        q.create()
        created = q.settings().created_at
        assert created.utcoffset() == timedelta(0) and created.tzinfo == timezone.utc
        assert abs(datetime.now(timezone.utc) - created) < timedelta(minutes=5)
        from pgqueue.schedules import create_schedule, list_schedules

        create_schedule(tokyo, "tick", "tz", "x", every=timedelta(minutes=1))
        (entry,) = [e for e in list_schedules(tokyo) if e.name == "tick"]
        assert entry.created_at.tzinfo == timezone.utc


def test_the_readmes_python_example_passes_a_users_mypy_strict(tmp_path: Path) -> None:
    """The client examples of README.md's "## Python", as a user would paste them (one after
    the other, as tests/test_readme_examples.py runs them), type-check under ``mypy --strict``
    (their ``send_email`` supplied, taking what ``payload`` is: ``object``)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("\n## Python\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 2, "the section's Python examples: the client's, and receive() in your transaction"
    (tmp_path / "use.py").write_text("def send_email(payload: object) -> None: ...\n\n\n" + "\n".join(blocks))
    mypy = Path(sys.executable).parent / "mypy"
    proc = subprocess.run([str(mypy), "--strict", "--no-incremental", "use.py"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- a review of the client as users program against it (session 44) ----------------------


def test_error_texts_postgresql_cannot_hold_are_stored_escaped(dsn: str) -> None:
    """A lone surrogate (os.fsdecode of a file name that is not UTF-8) or a NUL in a handler's
    exception: psycopg could not send the text (UnicodeEncodeError, not a PgQueueError), so
    receive() raised that instead of the block's exception and left the message leased, and the
    worker died with its messages leased. Now they are stored as Python escapes."""
    queue = Queue(dsn, "default")
    queue.enqueue("a")
    [msg] = queue.dequeue(1)
    assert queue.fail(msg, ValueError("cannot import " + os.fsdecode(b"caf\xe9.csv") + " \x00 end"), delay=60)
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT last_error FROM pgqueue.message").fetchone()
    assert row == ("ValueError: cannot import caf\\udce9.csv \\x00 end",)
    from pgqueue._core import MAX_ERROR_CHARS, ascii_text, error_text

    assert len(error_text("\udce9" * 9000)) == len(error_text("\x00" * 9000)) == MAX_ERROR_CHARS  # cut after
    assert len(ascii_text("😀" * 9000)) == MAX_ERROR_CHARS
    queue.enqueue("b")
    with pytest.raises(ValueError, match="caf"):
        with queue.receive() as got:
            assert got is not None
            raise ValueError(os.fsdecode(b"caf\xe9"))
    stats = queue.stats()
    assert (stats.leased, stats.scheduled) == (0, 2)  # failed, to be retried: not left leased
    queue.close()


def test_reject_in_a_receive_block_dead_letters_at_once(dsn: str) -> None:
    from pgqueue import Reject

    queue = Queue(dsn, "default")
    queue.enqueue("malformed")
    with pytest.raises(Reject):
        with queue.receive() as msg:
            assert msg is not None
            raise Reject("not an order")
    [dead] = queue.dead_letters()
    assert (dead.attempts, dead.last_error) == (1, "Reject: not an order")
    assert queue.stats().scheduled == 0  # not a retry
    queue.close()


def test_a_group_of_rejects_in_a_receive_block_dead_letters_at_once_and_a_mixed_group_fails(dsn: str) -> None:
    """A Reject raised inside an asyncio.TaskGroup reaches the block's end as an ExceptionGroup: a
    group whose leaves are all Rejects rejects the message (last_error the Rejects' texts), one
    that mixes a Reject with another error fails it (a retry), and a BaseExceptionGroup holding
    a KeyboardInterrupt gives it back, as a KeyboardInterrupt does."""
    from pgqueue import Reject

    async def checks(order: object) -> None:
        async with asyncio.TaskGroup() as tg:
            async def check() -> None:
                raise Reject(f"not an order: {order!r}")

            tg.create_task(check())

    queue = Queue(dsn, "jobs")
    queue.create(max_attempts=5, retry_base_ms=3_600_000, retry_cap_ms=3_600_000)
    tasked, nested, mixed, interrupted = queue.enqueue_many(["a", "b", "c", "d"])
    with pytest.raises(ExceptionGroup):
        with queue.receive() as msg:
            assert msg is not None and msg.id == tasked
            asyncio.run(checks(msg.payload))
    with pytest.raises(ExceptionGroup):
        with queue.receive() as msg:
            assert msg is not None and msg.id == nested
            raise ExceptionGroup("outer", [ExceptionGroup("inner", [Reject("one")]), Reject("two")])
    with pytest.raises(ExceptionGroup):
        with queue.receive() as msg:
            assert msg is not None and msg.id == mixed
            raise ExceptionGroup("mixed", [Reject("three"), ValueError("four")])
    with pytest.raises(BaseExceptionGroup):
        with queue.receive() as msg:
            assert msg is not None and msg.id == interrupted
            raise BaseExceptionGroup("interrupted", [Reject("five"), KeyboardInterrupt()])
    dead = {d.id: d for d in queue.dead_letters()}
    assert {i: (d.attempts, d.last_error) for i, d in dead.items()} == {
        tasked: (1, "Reject: not an order: 'a'"), nested: (1, "Reject: one; Reject: two")}
    [again] = queue.dequeue()  # given back, due at once; the mixed one waits for its retry
    assert (again.id, again.attempts) == (interrupted, 2)
    stats = queue.stats()
    assert (stats.scheduled, stats.leased) == (1, 1)
    queue.close()


def test_a_heartbeat_connection_that_cannot_be_opened_gives_the_message_back(dsn: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The block never ran: the message was failed with the connection error (a dead letter at
    max_attempts 1); now it is given back as it was."""
    from contextlib import contextmanager

    from pgqueue import client

    @contextmanager
    def refused(self: Any, *args: Any) -> Iterator[None]:
        raise errors.ConnectionFailed("connection failed: too many connections for role")
        yield  # pragma: no cover

    Queue(dsn, "once").create(max_attempts=1)
    queue = Queue(dsn, "once")
    queue.enqueue("x")
    monkeypatch.setattr(client._Connector, "heartbeat_runner", refused)
    ran = False
    with pytest.raises(errors.ConnectionFailed):
        with queue.receive():
            ran = True
    assert not ran
    stats = queue.stats()
    assert (stats.ready, stats.leased, stats.dead) == (1, 0, 0)
    queue.close()


def test_a_callers_connection_closed_before_the_heartbeats_start_is_a_pgqueue_error(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeats of a block on the caller's autocommit connection read that connection's
    settings to open their own: when another thread closed it between the dequeue and that
    read, a bare psycopg.OperationalError went out of receive() (a review). Now it is
    ConnectionFailed, and the message is given back."""
    from pgqueue import client

    original = client._Connector.heartbeat_runner

    def closed_first(self: Any, in_transaction: bool = False) -> Any:
        assert self._conn is not None
        self._conn.close()  # another thread closes the caller's connection at this moment
        return original(self, in_transaction)

    monkeypatch.setattr(client._Connector, "heartbeat_runner", closed_first)
    Queue(dsn, "closed").create()
    with psycopg.connect(dsn, autocommit=True) as caller:
        q = Queue(caller, "closed")
        q.enqueue("work")
        ran = []
        with pytest.raises(errors.ConnectionFailed):
            with q.receive() as msg:
                ran.append(msg)
        assert ran == []
    with Queue(dsn, "closed") as again:
        stats = again.stats()
        assert (stats.ready, stats.leased) == (1, 0)


def test_receive_renews_the_lease_it_was_given_when_the_queues_lock_ms_is_lowered(dsn: str) -> None:
    """receive()'s heartbeats, every third of the lease the block was given, renewed for the
    queue's lock_ms as it was at each beat: lowered from 3 s to 0.2 s while the block ran, the
    lease ran out between two beats and another consumer took the message (a review). They
    renew the lease the block was given, as the worker renews the lock_ms it read at start."""
    admin = Queue(dsn, "shortened")
    admin.create(lock_ms=3000)
    admin.enqueue("long job")
    with Queue(dsn, "shortened") as q, Queue(dsn, "shortened") as other:
        with q.receive() as msg:
            assert msg is not None
            admin.alter(lock_ms=200)
            stolen = []
            deadline = time.monotonic() + 2.5  # two beats (one a second)
            while time.monotonic() < deadline:
                stolen += other.dequeue(1, lock_ms=60_000)
                time.sleep(0.05)
            assert stolen == []
        assert q.counters().completed == 1 and q.stats().total == 0
    admin.close()


def test_a_failure_inside_the_callers_transaction_counts_only_if_that_transaction_commits(dsn: str) -> None:
    """README: receive()'s fail runs in the caller's transaction, so an exception that rolls it
    back undoes the failure (attempts unchanged, ready at once, never dead-lettered: a poison
    message loops, a review); the savepoint recipe commits the failure, and max_attempts
    dead-letters the message."""
    Queue(dsn, "poison").create(max_attempts=2, retry_base_ms=1)
    with psycopg.connect(dsn) as conn:
        q = Queue(conn, "poison")
        q.enqueue("bad")
        conn.commit()
        for _ in range(3):  # rolled back with the caller's transaction: nothing counts
            with pytest.raises(ValueError):
                with conn.transaction(), q.receive() as msg:
                    assert msg is not None
                    raise ValueError("handler failed")
        assert conn.execute("SELECT attempts FROM pgqueue.message").fetchone() == (0,)
        for _ in range(2):  # README's recipe: the failure commits, the second one dead-letters it
            time.sleep(0.01)  # (the back-off: 1 ms, then 2)
            with conn.transaction():
                try:
                    with q.receive() as msg:
                        assert msg is not None
                        with conn.transaction():
                            conn.execute("CREATE TEMP TABLE IF NOT EXISTS work (n int)")
                            raise ValueError("handler failed")
                except ValueError:
                    pass
        conn.commit()
        assert [d.last_error for d in q.dead_letters()] == ["ValueError: handler failed"]
        assert q.stats().total == 0


def test_an_idle_session_timeout_is_a_lost_connection_the_settling_survives(pg_server: Server, dbname: str) -> None:
    """57P05 (idle_session_timeout) ends the session as pg_terminate_backend does: the block's
    message is completed on a new connection instead of the block raising and the message
    being delivered again."""
    queue = Queue(pg_server.dsn(dbname, options="-c idle_session_timeout=1000"), "default")
    queue.enqueue("x")
    with queue.receive() as msg:
        assert msg is not None
        time.sleep(1.5)  # the queue's own connection idles past the timeout meanwhile
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (0, 0)
    assert queue.counters().completed == 1
    queue.close()


def test_a_time_before_1970_is_refused_not_made_a_priority(dsn: str) -> None:
    queue = Queue(dsn, "default")
    for call in (lambda: queue.enqueue("x", at=datetime(1900, 1, 1, tzinfo=timezone.utc)),
                 lambda: queue.enqueue("x", at=-5)):
        with pytest.raises(errors.InvalidArgument, match="1970"):
            call()
    assert queue.stats().ready == 0
    queue.enqueue("x", at=0)  # the epoch itself is a time
    queue.close()


def test_a_text_the_client_encoding_cannot_hold_is_an_invalid_argument(pg_server: Server, template_db: str) -> None:
    with database_in(pg_server, "LATIN1") as name:
        queue = Queue(pg_server.dsn(name), "default")
        with pytest.raises(errors.InvalidArgument) as raised:
            queue.enqueue("x", key="clé-€")  # the server's refusal (pgqueue's connection is UTF8)
        assert raised.value.sqlstate == "22P05"
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as latin1:  # a caller's, in LATIN1
            assert latin1.info.encoding == "iso8859-1"
            with pytest.raises(errors.InvalidArgument) as raised:
                Queue(latin1, "default").enqueue("x", key="clé-€")  # psycopg cannot send it
            assert raised.value.sqlstate == "22P05"
        queue.enqueue("x", key="clé")
        assert queue.stats().ready == 1
        # a handler's error the encoding cannot hold fails its message, in ASCII escapes (the
        # worker died with the message leased; receive() left it leased)
        from pgqueue import Worker

        def handle(msg: Message) -> None:
            raise ValueError("Zoë 😀")

        worker = Worker(queue, handle)
        runner = threading.Thread(target=worker.run, daemon=True)
        runner.start()
        with pytest.raises(ValueError, match="€") as blocked:  # the block's own error, not a settling's
            with queue.receive():
                raise ValueError("€")
        assert type(blocked.value) is ValueError
        deadline = time.monotonic() + 10
        while queue.counters().failed < 2:
            assert time.monotonic() < deadline, queue.counters()
            time.sleep(0.05)
        worker.stop()
        runner.join(10)
        assert not runner.is_alive()
        with psycopg.connect(pg_server.dsn(name)) as conn:
            errors_stored = {r[0] for r in conn.execute("SELECT last_error FROM pgqueue.message")}
        assert errors_stored and errors_stored <= {"ValueError: Zo\\xeb \\U0001f600", "ValueError: \\u20ac"}, errors_stored
        assert queue.stats().leased == 0
        queue.close()


def test_an_error_text_a_latin1_database_cannot_hold_fails_the_message_in_a_transaction_too(
        pg_server: Server, template_db: str) -> None:
    """Under client_encoding UTF8 on a LATIN1 database the server refuses an error text Latin-1
    cannot hold (22P05), which aborts the transaction it runs in: the ASCII retry of fail and
    reject then failed with 25P02, on a pool's connection (the message stayed leased) and on a
    caller's in a transaction (never failed: redelivered for ever; a review). The ASCII twin is
    sent in its place there (decided before anything is sent); what the transaction did before
    it is kept."""
    with database_in(pg_server, "LATIN1") as name:
        utf8 = pg_server.dsn(name, client_encoding="UTF8")
        setup = Queue(pg_server.dsn(name), "default")
        setup.enqueue_many(["a", "b", "c", "d", "e"])
        # (prepare_threshold=0: every statement prepared, the rollback's too)
        with ConnectionPool(utf8, min_size=1, max_size=2, open=True, kwargs={"prepare_threshold": 0}) as pool:
            q = Queue(pool, "default")
            [m] = q.dequeue(lock_ms=60000)
            assert q.fail(m, "ошибка")
            [m] = q.dequeue(lock_ms=60000)
            assert q.reject(m, ValueError("€"))
        with psycopg.connect(utf8) as tx:  # a caller's, not autocommit: its transaction
            q = Queue(tx, "default")
            [m] = q.dequeue(lock_ms=60000)
            tx.commit()
            kept = q.enqueue("kept")  # opens the transaction the fail joins
            assert q.fail(m, "ошибка")
            assert tx.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # left to the caller
            tx.commit()
        with psycopg.connect(utf8, autocommit=True) as block:  # a caller's transaction block
            q = Queue(block, "default")
            [m] = q.dequeue(lock_ms=60000)
            with block.transaction():
                assert q.fail(m, "ошибка")
        assert setup.stats().leased == 0
        with psycopg.connect(pg_server.dsn(name)) as conn:
            stored = sorted(r[0] for r in conn.execute(
                "SELECT last_error FROM pgqueue.message WHERE last_error IS NOT NULL "
                "UNION ALL SELECT last_error FROM pgqueue.dead_letter"))
            assert conn.execute("SELECT count(*) FROM pgqueue.message WHERE id = %s", (kept,)).fetchone() == (1,)
        escaped = "\\u043e\\u0448\\u0438\\u0431\\u043a\\u0430"
        assert stored == sorted([escaped] * 3 + ["ValueError: \\u20ac"]), stored
        setup.close()


def test_a_sql_ascii_database_gives_texts_back_as_str(pg_server: Server, template_db: str) -> None:
    """initdb under the C locale makes SQL_ASCII databases, where psycopg returns text columns
    as bytes: a dequeue failed (TypeError) after its lease was committed, stranding the message,
    and stats named the queue "b'q'". pgqueue's own connections now ask for UTF8."""
    with database_in(pg_server, "SQL_ASCII") as name:
        queue = Queue(pg_server.dsn(name), "default")
        queue.enqueue("café", key="clé")
        [msg] = queue.dequeue(1)
        assert (msg.payload, msg.content_type) == ("café", "text/plain; charset=utf-8")
        assert queue.complete(msg)
        assert queue.stats().queue == "default"
        queue.close()


def test_a_text_that_is_not_utf8_on_a_sql_ascii_database_needs_client_encoding_sql_ascii(
        pg_server: Server, template_db: str) -> None:
    """A SQL_ASCII database takes any byte, and its server refuses a UTF8 client a text that is
    not UTF-8: pgqueue's own connections, which ask for UTF8, cannot read such a row (a content
    type written in Latin-1 by another client), and say so. A DSN that sets client_encoding
    SQL_ASCII reads it, the byte as an escape (README, "Python"). (Going back to SQL_ASCII by
    itself was tried and taken out: psycopg then decodes notifications, error texts and SQL it
    sends as ASCII, a review found.)"""
    from pgqueue import AsyncQueue

    with database_in(pg_server, "SQL_ASCII") as name:
        dsn = pg_server.dsn(name)
        with psycopg.connect(dsn, autocommit=True) as raw:  # the database's encoding: SQL_ASCII
            for _ in range(2):
                raw.execute(r"SELECT pgqueue.message_create('default', 'x'::bytea, NULL, E'application/x-caf\351')")
        with Queue(dsn, "default") as queue, pytest.raises(errors.PgQueueError, match="invalid byte sequence"):
            queue.dequeue(1)
        with Queue(dsn + " client_encoding=SQL_ASCII", "default") as queue:
            [msg] = queue.dequeue(1)
            assert msg.content_type == "application/x-caf\\xe9"
            assert queue.complete(msg)

        async def take() -> str | None:
            async with AsyncQueue(dsn + " client_encoding=SQL_ASCII", "default") as aqueue:
                [got] = await aqueue.dequeue(1)
                assert await aqueue.complete(got)
                return got.content_type

        assert asyncio.run(take()) == "application/x-caf\\xe9"


def _every_text_read(queue: Queue, source: Any) -> None:
    """Every call that reads texts back, over ``queue`` (a caller's connection or pool on a
    SQL_ASCII database): each must give str, not bytes (psycopg's default there)."""
    from pgqueue.client import all_counters
    from pgqueue.compat import check_server, server_pgqueue
    from pgqueue.schedules import create_schedule, drop_schedule, list_schedules, run_schedules

    if isinstance(source, psycopg.Connection):
        installed = check_server(source)  # it read b'0.4': VersionMismatch
        assert isinstance(installed.version, str) and server_pgqueue(source) == installed
    queue.create(group_concurrency=1, max_attempts=1)
    queue.enqueue("café", key="clé", group="grüppe", task="send")
    [group] = queue.group_stats()
    assert group.group == "grüppe"
    [msg] = queue.dequeue(1)
    assert (msg.queue, msg.payload, msg.content_type, msg.task) == (
        "sqlascii_q", "café", "text/plain; charset=utf-8; task=send", "send")
    assert queue.fail(msg, "Zoë failed")
    [dead] = queue.dead_letters()
    assert (dead.payload, dead.content_type, dead.last_error) == ("café", "text/plain; charset=utf-8; task=send",
                                                                 "Zoë failed")
    assert queue.requeue_dead() == 1
    [pending] = queue.peek()
    assert (pending.payload, pending.last_error) == ("café", "Zoë failed")
    with queue.receive() as got:
        assert got is not None and got.payload == "café"
    queue.enqueue({"to": "a@example.com"})
    [msg] = queue.dequeue(1)
    assert msg.payload == {"to": "a@example.com"}
    assert queue.complete(msg)
    assert queue.stats().queue == queue.counters().queue == queue.settings().queue == "sqlascii_q"
    assert "sqlascii_q" in [s.queue for s in list_queues(source)]
    assert "sqlascii_q" in [s.queue for s in all_stats(source)]
    assert "sqlascii_q" in [c.queue for c in all_counters(source)]
    create_schedule(source, "nächtlich", "sqlascii_q", {"n": "ü"}, cron="0 3 * * *")
    [entry] = [e for e in list_schedules(source) if e.queue == "sqlascii_q"]
    assert (entry.name, entry.cron, entry.missed, entry.payload, entry.content_type) == (
        "nächtlich", "0 3 * * *", "latest", {"n": "ü"}, "application/json")
    run_schedules(source)
    assert drop_schedule(source, "nächtlich")
    queue.drop()


def test_a_callers_connection_and_pool_on_a_sql_ascii_database_give_texts_back_as_str(
        pg_server: Server, template_db: str) -> None:
    """A caller's own connection or pool on a SQL_ASCII database keeps its client encoding
    (pgqueue does not SET it), where psycopg returns text columns as bytes: check_server read
    b'0.4' (a version mismatch), a dequeue raised TypeError after its lease was committed (the
    message stranded, an attempt spent), stats named the queue "b'default'". pgqueue's cursors
    now load texts as UTF-8 on such a connection."""
    with database_in(pg_server, "SQL_ASCII") as name:
        dsn = pg_server.dsn(name)
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.info.encoding == "ascii"
            _every_text_read(Queue(conn, "sqlascii_q"), conn)
            assert conn.info.encoding == "ascii"  # left as it was
            assert conn.execute("SELECT 'x'::text").fetchone() == (b"x",)  # the caller's own cursors too
        with psycopg.connect(dsn) as conn:  # in the caller's transaction
            _every_text_read(Queue(conn, "sqlascii_q"), conn)
            conn.commit()
        with ConnectionPool(dsn, min_size=1, open=True) as pool:
            _every_text_read(Queue(pool, "sqlascii_q"), pool)
            with pool.connection() as conn:
                assert conn.info.encoding == "ascii"


def test_a_ctrl_c_while_a_failed_heartbeat_setup_unwinds_goes_on(conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeat thread could not be started (RuntimeError) and a KeyboardInterrupt landed
    while the heartbeats' connection closed: the RuntimeError went out and the Ctrl-C was
    lost (the result of the unwind discarded). Now the message is given back, then the
    KeyboardInterrupt goes on, the setup's error as its context."""
    from pgqueue import _lease, client

    @contextmanager
    def runner(self: Any, in_transaction: bool = False) -> Iterator[Any]:
        try:
            yield lambda call: True
        finally:
            raise KeyboardInterrupt  # Ctrl-C while the side connection closes

    def no_thread(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(client._Connector, "heartbeat_runner", runner)
    monkeypatch.setattr(_lease.Heartbeats, "__init__", no_thread)
    q = Queue(conn, "setup")
    q.create()
    q.enqueue("work")
    ran = []
    with pytest.raises(KeyboardInterrupt) as caught:
        with q.receive() as msg:
            ran.append(msg)
    assert ran == []
    assert isinstance(caught.value.__context__, RuntimeError)
    stats = q.stats()
    assert (stats.ready, stats.leased) == (1, 0)


def test_a_ctrl_c_while_receive_stops_its_heartbeats_goes_on_when_the_settling_fails(
        conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    """The block returned, a KeyboardInterrupt landed while the heartbeat thread was joined,
    then the complete failed (a lost connection): its error went out of the with and the
    Ctrl-C was lost. Now the KeyboardInterrupt goes on, the settling's error its context."""
    from pgqueue import _lease, client

    original = _lease.Heartbeats.stop

    def interrupted_stop(self: _lease.Heartbeats, timeout: float | None = None) -> None:
        original(self, timeout)
        raise KeyboardInterrupt

    def failing(self: Queue, call: Any, committed: bool = False) -> bool:
        raise errors.ConnectionFailed("server closed the connection unexpectedly")

    monkeypatch.setattr(_lease.Heartbeats, "stop", interrupted_stop)
    monkeypatch.setattr(client.Queue, "_settle_call", failing)
    q = Queue(conn, "settle")
    q.create()
    q.enqueue("work")
    with pytest.raises(KeyboardInterrupt) as caught:
        with q.receive() as msg:
            assert msg is not None
    assert isinstance(caught.value.__context__, errors.ConnectionFailed)


def test_receive_logs_a_heartbeat_stop_failure_after_the_blocks_error(
        conn: Conn, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The block raised and stopping its heartbeats failed too: that second error was dropped
    without a word. Now it is logged; the block's error goes on, and fails the message."""
    from pgqueue import _lease

    original = _lease.Heartbeats.stop

    def broken_stop(self: _lease.Heartbeats, timeout: float | None = None) -> None:
        original(self, timeout)
        raise RuntimeError("the heartbeats would not stop")

    monkeypatch.setattr(_lease.Heartbeats, "stop", broken_stop)
    q = Queue(conn, "stopfail")
    q.create()
    q.enqueue("work")
    with caplog.at_level("WARNING", logger="pgqueue"), pytest.raises(ValueError, match="boom"):
        with q.receive(lock_ms=60000) as msg:
            assert msg is not None
            raise ValueError("boom")
    assert "the heartbeats would not stop" in caplog.text
    stats = q.stats()
    assert (stats.ready, stats.leased, stats.scheduled) == (0, 0, 1)  # failed: retried later


def test_a_ctrl_c_raised_by_the_block_goes_on_over_a_heartbeat_stop_failure(
        conn: Conn, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The block was interrupted (KeyboardInterrupt) and stopping its heartbeats failed: the
    interruption goes on (the error is logged), the message is given back."""
    from pgqueue import _lease

    original = _lease.Heartbeats.stop

    def broken_stop(self: _lease.Heartbeats, timeout: float | None = None) -> None:
        original(self, timeout)
        raise RuntimeError("the heartbeats would not stop")

    monkeypatch.setattr(_lease.Heartbeats, "stop", broken_stop)
    q = Queue(conn, "interrupted")
    q.create()
    q.enqueue("work")
    with caplog.at_level("WARNING", logger="pgqueue"), pytest.raises(KeyboardInterrupt):
        with q.receive(lock_ms=60000) as msg:
            assert msg is not None
            raise KeyboardInterrupt
    assert "the heartbeats would not stop" in caplog.text
    stats = q.stats()
    assert (stats.ready, stats.leased) == (1, 0)


def test_a_ctrl_c_while_a_generator_around_receive_closes_goes_on(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A generator around receive() closed (close(), or a for loop's break: GeneratorExit at its
    yield) while a Ctrl-C landed as the heartbeat thread was joined: the Ctrl-C was dropped, as
    it went on only in place of an ordinary error (a review)."""
    from pgqueue import _lease

    original = _lease.Heartbeats.stop

    def stop(self: Any, timeout: float | None = None) -> None:
        original(self, timeout)
        raise KeyboardInterrupt("Ctrl-C while the heartbeat thread is joined")

    monkeypatch.setattr(_lease.Heartbeats, "stop", stop)
    with Queue(dsn, "gen_close") as q:
        q.create()
        q.enqueue("work")

        def consumer() -> Iterator[Message | None]:
            with q.receive(lock_ms=60000) as msg:
                yield msg

        gen = consumer()
        assert next(gen) is not None
        with pytest.raises(KeyboardInterrupt):
            gen.close()
        stats = q.stats()
        assert (stats.ready, stats.leased) == (1, 0)  # closed, not finished: given back


def test_reading_what_an_interruption_left_waits_for_another_threads_statement(dsn: str) -> None:
    """What an interruption left unread is read off a caller's connection under psycopg's own
    lock too: a statement another thread runs on it without pgqueue (the caller's code) shows
    the connection busy, and reading its answer from under it corrupted libpq or hung that
    thread (a review)."""
    from pgqueue.client import _Connector

    for _ in range(4):  # (without the lock, about half the tries went wrong)
        with psycopg.connect(dsn, autocommit=True) as shared:
            connector = _Connector(shared)
            got: list[object] = []
            other = threading.Thread(target=lambda: got.append(shared.execute("SELECT pg_sleep(0.3), 7").fetchone()),
                                     daemon=True)
            other.start()
            deadline = time.monotonic() + 5
            while shared.info.transaction_status != psycopg.pq.TransactionStatus.ACTIVE:
                assert time.monotonic() < deadline, "the other thread's statement never started"
                time.sleep(0.01)
            connector.read_what_is_left()  # waits for it, reads nothing of it
            other.join(5)
            assert got == [("", 7)]
            assert shared.execute("SELECT 1").fetchone() == (1,)


# -- a review of the client's arguments and documentation (both clients) -----------------------


def test_cancel_refuses_what_is_not_a_list_of_ids(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.cancel_refuses_what_is_not_a_list_of_ids, queue, conn)


def test_a_mapping_is_refused_where_values_are_taken(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.a_mapping_is_refused_where_values_are_taken, queue, conn)


def test_batch_calls_refuse_what_is_not_an_iterable(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.batch_calls_refuse_what_is_not_an_iterable, queue, conn)


def test_nul_in_a_name_group_or_key_is_refused_before_anything_is_sent(dsn: str, conn: Conn) -> None:
    scenarios.run_on_callers_connection(scenarios.nul_in_a_name_group_or_key_is_refused_before_anything_is_sent,
                                        Queue, dsn, conn, autocommit=False)


@pytest.mark.parametrize("autocommit", [True, False], ids=["autocommit", "transaction-mode"])
def test_a_refused_receive_aborts_the_callers_transaction(autocommit: bool, dsn: str, conn: Conn) -> None:
    scenarios.run_on_callers_connection(scenarios.a_refused_receive_aborts_the_callers_transaction,
                                        Queue, dsn, conn, autocommit=autocommit)


def test_next_due_of_a_priority_message_is_the_epoch(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.next_due_of_a_priority_message_is_the_epoch, queue, conn)


def test_the_10000_message_limit_is_documented_where_the_server_enforces_it(queue: Queue, conn: Conn) -> None:
    """Only heartbeat_many's docstring named the limit of 10000 messages a call that
    complete_many and complete_and_dequeue have too."""
    scenarios.run(scenarios.batches_of_more_than_10000_messages_are_refused, queue, conn)
    for method in (Queue.complete_many, Queue.complete_and_dequeue, Queue.heartbeat_many):
        assert "at most 10000 distinct messages" in " ".join((method.__doc__ or "").split()), method.__name__


def test_a_bad_time_names_its_parameter(queue: Queue, conn: Conn) -> None:
    scenarios.run(scenarios.a_bad_time_names_its_parameter, queue, conn)


def test_check_server_refuses_a_connection_string_or_a_pool_saying_what_to_pass(
        dsn: str, pool: ConnectionPool[Any]) -> None:
    """check_server(dsn) and check_server(pool), which a Queue takes, failed with an
    AttributeError ('str' object has no attribute 'cursor'); only an AsyncConnection got a
    TypeError that says what to do. Each gets one, without the connection string in it."""
    import pgqueue
    from pgqueue.compat import server_pgqueue

    for check in (pgqueue.check_server, server_pgqueue):
        name = check.__name__
        with pytest.raises(TypeError, match=rf"^{name}\(\) takes a psycopg.Connection, got str: connect first") as info:
            check(dsn)  # type: ignore[arg-type]
        assert dsn not in str(info.value)
        with pytest.raises(TypeError, match=rf"^{name}\(\) takes a psycopg.Connection, got ConnectionPool: pass one "
                                            r"of its connections \(`with pool.connection\(\) as conn"):
            check(pool)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=rf"^{name}\(\) takes a psycopg.Connection, got int$"):
            check(5)  # type: ignore[arg-type]
    with pool.connection() as conn:
        assert pgqueue.check_server(conn).kind == "extension"  # one of its connections, as the error says


def test_a_text_that_is_not_utf8_on_a_sql_ascii_database_is_invalid_argument(pg_server: Server) -> None:
    """README's 22021 row: in a SQL_ASCII database (which takes any bytes) message_create_text of
    a text that is not UTF-8 is refused by PostgreSQL's conversion (22021, nothing enqueued), and
    the client's translation makes it InvalidArgument, not a bare PgQueueError."""
    with database_in(pg_server, "SQL_ASCII") as name, \
            psycopg.connect(pg_server.dsn(name), autocommit=True, client_encoding="UTF8") as conn:
        conn.execute("SELECT pgqueue.queue_create('g')")
        with pytest.raises(errors.InvalidArgument) as bad, errors.translating():
            conn.execute("SELECT pgqueue.message_create_text('g', E'caf\\xe9')")
        assert bad.value.sqlstate == "22021", bad.value
        assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)


def test_a_closed_connection_or_pool_is_connection_failed_in_conninfo_and_run_schedules(dsn: str) -> None:
    """`Queue.conninfo` (and so `Worker(queue, ...)`, which reads it) of a closed connection
    raised psycopg's OperationalError, and `run_schedules` of a closed pool with `on_held` its
    PoolClosed, where every other call raises ConnectionFailed (a review)."""
    from pgqueue import AsyncQueue, Worker
    from pgqueue.schedules import run_schedules

    conn = psycopg.connect(dsn)
    conn.close()
    with pytest.raises(errors.ConnectionFailed):
        Queue(conn, "q").conninfo
    with pytest.raises(errors.ConnectionFailed):
        Worker(Queue(conn, "q"), lambda msg: None)

    async def closed_async() -> None:
        aconn = await psycopg.AsyncConnection.connect(dsn)
        await aconn.close()
        with pytest.raises(errors.ConnectionFailed):
            AsyncQueue(aconn, "q").conninfo

    asyncio.run(closed_async())
    pool: ConnectionPool[Any] = ConnectionPool(dsn, min_size=1, open=True)
    pool.close()
    for on_held in (None, print):
        with pytest.raises(errors.ConnectionFailed):
            run_schedules(pool, on_held=on_held)


def test_receive_heartbeat_and_stats_exact_take_bools_only(dsn: str) -> None:
    """`receive(heartbeat="no")` sent heartbeats ("no" is true) and `stats(exact="yes")` was
    taken, where `create(notify=1)` is refused (a review): InvalidArgument, sync and async, and
    nothing taken."""
    from pgqueue import AsyncQueue

    queue = Queue(dsn, "bools")
    queue.create()
    queue.enqueue("x")
    for bad in ("no", "false", 0, None):
        with pytest.raises(errors.InvalidArgument, match="heartbeat must be a bool"):
            with queue.receive(heartbeat=bad):  # type: ignore[arg-type]
                pytest.fail("the block ran")
    with pytest.raises(errors.InvalidArgument, match="exact must be a bool"):
        queue.stats(exact="yes")  # type: ignore[arg-type]

    async def in_async() -> None:
        async with AsyncQueue(dsn, "bools") as aqueue:
            with pytest.raises(errors.InvalidArgument, match="heartbeat must be a bool"):
                async with aqueue.receive(heartbeat="no"):  # type: ignore[arg-type]
                    pytest.fail("the block ran")
            with pytest.raises(errors.InvalidArgument, match="exact must be a bool"):
                await aqueue.stats(exact="yes")  # type: ignore[arg-type]

    asyncio.run(in_async())
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (1, 0)
    queue.close()


def test_a_connection_the_server_closed_while_idle_is_opened_again_for_the_call(dsn: str) -> None:
    """A server whose idle_session_timeout (as some managed services set it) is shorter than the
    pause between two calls closes the Queue's own connection meanwhile: the next call failed
    with ConnectionFailed ("terminating connection due to idle-session timeout", 57P05), which
    a worker logged as an outage each time. That call never reached the server, so it is made
    at once on a new connection, by Queue and AsyncQueue alike (a worker's heartbeats too:
    tests/test_worker.py)."""
    from pgqueue import AsyncQueue

    closing = make_conninfo(dsn, options="-c idle_session_timeout=200")
    with Queue(closing, "jobs") as queue:
        queue.create()
        for _ in range(3):
            time.sleep(0.4)  # idle past the timeout
            queue.enqueue("x")
        time.sleep(0.4)
        [msg] = queue.dequeue(1, lock_ms=60_000)
        time.sleep(0.4)
        assert queue.heartbeat(msg, lock_ms=60_000)
        time.sleep(0.4)
        assert queue.complete(msg)
        assert queue.stats().ready == 2

    async def asynchronously() -> None:
        async with AsyncQueue(closing, "jobs") as queue:
            for _ in range(2):
                await asyncio.sleep(0.4)
                assert [m.payload for m in await queue.dequeue(1, lock_ms=0)] == ["x"]
            await asyncio.sleep(0.4)
            assert (await queue.stats()).ready == 0

    asyncio.run(asynchronously())


def test_receive_on_a_connection_the_server_closed_while_idle_opens_it_again(dsn: str) -> None:
    """receive() on the Queue's own connection: after a pause past the server's
    idle_session_timeout its dequeue's BEGIN found the connection closed (57P05) and the block
    failed with ConnectionFailed, where every single call is made again at once (its dequeue never
    ran). It is made again too, by Queue and AsyncQueue alike, and the message is settled once."""
    from pgqueue import AsyncQueue

    closing = make_conninfo(dsn, options="-c idle_session_timeout=200")
    with Queue(closing, "jobs") as queue:
        queue.create()
        queue.enqueue_many(["a", "b", "c"])
        for expected in ("a", "b"):
            time.sleep(0.4)  # idle past the timeout
            with queue.receive(lock_ms=60_000) as msg:
                assert msg is not None and msg.payload == expected
        time.sleep(0.4)
        assert (queue.stats().ready, queue.stats().leased) == (1, 0)

    async def asynchronously() -> None:
        async with AsyncQueue(closing, "jobs") as queue:
            await asyncio.sleep(0.4)
            async with queue.receive(lock_ms=60_000) as msg:
                assert msg is not None and msg.payload == "c"
            await asyncio.sleep(0.4)
            assert (await queue.stats()).ready == 0

    asyncio.run(asynchronously())


#: The application_name of the connections test_..._ended_while_idle_... ends (ours only).
ENDED = "pgqueue-ended-while-idle"


def end_idle_sessions(conn: Conn, count: int, *, but: int | None = None) -> None:
    """End ``count`` idle sessions of :data:`ENDED` (all of them, but the one of pid ``but``) as a
    server restart or a tidy-up of idle sessions does (pg_terminate_backend: 57P01, the
    session's goodbye sent before it exits), and wait until they exited. Waits for a session in
    use (a beat in flight) to be idle first: only connections that sit idle are ended."""
    deadline = time.monotonic() + 10
    while True:
        pids = [pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = %s AND state = 'idle' "
            "AND pid IS DISTINCT FROM %s", (ENDED, but)).fetchall()]
        if len(pids) == count:
            break
        assert time.monotonic() < deadline, pids
        time.sleep(0.01)
    for pid in pids:
        assert conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,)).fetchone() == (True,)


def test_a_connection_the_server_ended_while_idle_is_opened_again_for_the_call(
        dsn: str, conn: Conn, caplog: pytest.LogCaptureFixture) -> None:
    """A server restart, or a tool's pg_terminate_backend of idle sessions, ends the Queue's own
    connections while they sit idle (57P01, "terminating connection due to administrator
    command"): the next call failed with ConnectionFailed, receive()'s dequeue too, though none
    had reached the server; the block's completion said the connection was lost, and the next
    heartbeat logged a warning, on the queue's own heartbeat connection and on the one opened
    beside a caller's autocommit connection. The connection is found ended before the call is
    sent, and opened again for it, quietly (a caller's connection is never replaced: not ended
    here)."""
    ended = make_conninfo(dsn, application_name=ENDED)
    with caplog.at_level("INFO", logger="pgqueue"), Queue(ended, "jobs") as queue:
        queue.create()
        queue.enqueue("a")
        end_idle_sessions(conn, 1)  # the queue's own connection
        queue.enqueue_many(["b", "c"])
        end_idle_sessions(conn, 1)
        with queue.receive(lock_ms=1500) as msg:  # (a beat every 0.5 s)
            assert msg is not None and msg.payload == "a"
            end_idle_sessions(conn, 2)  # its own and the beats', between two beats
            time.sleep(1.2)  # two beats
        assert (queue.stats().ready, queue.stats().leased) == (2, 0)
    with caplog.at_level("INFO", logger="pgqueue"), psycopg.connect(ended, autocommit=True) as callers:
        mine = Queue(callers, "jobs")
        with mine.receive(lock_ms=1500) as msg:
            assert msg is not None and msg.payload == "b"
            end_idle_sessions(conn, 1, but=callers.info.backend_pid)  # the beats', beside it
            time.sleep(1.2)
        assert (mine.stats().ready, mine.stats().leased) == (1, 0)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == []


def test_a_payload_a_text_reader_could_not_dequeue_is_refused_before_it_is_sent(queue: Queue) -> None:
    """A payload over codec.MAX_CONTENT (500,000,000 bytes) is refused with UnsupportedPayload and
    nothing sent: one of 540 MB went in and then failed every dequeue and peek of its queue with
    XX000 (its hex text form passed PostgreSQL's 1 GB), and one over 1 GB closed the connection;
    an enqueue_many whose payloads pass 1,000,000,000 bytes in all is refused with
    InvalidArgument (its statement's parameters passed 1 GB: the connection closed). A review."""
    from pgqueue import codec
    from pgqueue._core import MAX_CALL_CONTENT

    assert codec.MAX_CONTENT == 500_000_000 and MAX_CALL_CONTENT == 1_000_000_000
    at_limit = b"\0" * codec.MAX_CONTENT
    assert codec.encode(at_limit) == (at_limit, None)
    for payload in (at_limit + b"\0", memoryview(at_limit + b"\0"), "\0" * (codec.MAX_CONTENT + 1)):
        with pytest.raises(errors.UnsupportedPayload, match="500,000,001 bytes is over the 500,000,000"):
            queue.enqueue(payload)
    del at_limit
    third = b"\0" * 333_333_334  # three of them: 1,000,000,002 bytes
    with pytest.raises(errors.InvalidArgument, match="1,000,000,002 bytes of payloads in one call"):
        queue.enqueue_many([third, third, third])
    assert queue.enqueue("still usable") > 0  # the connection was kept
    assert queue.stats(exact=True).total == 1


class _Counting(Relay):
    """A relay that counts the bytes the client sends."""

    sent = 0

    def passing(self, data: bytes, answers: bool) -> bytes | None:
        if not answers:
            self.sent += len(data)
        return None


def test_enqueue_many_sends_its_payloads_at_their_size(pg_server: Server, dsn: str) -> None:
    """enqueue_many's contents go as a binary bytea[]: sent as text, each went as hex, twice its
    size, so 600 MB of payloads (within MAX_CALL_CONTENT) passed PostgreSQL's 1 GB for a
    protocol message and closed the connection (a review). Counted on the wire here with 4 MB."""
    relay = _Counting(pg_server)
    try:
        with Queue(make_conninfo(dsn, host="127.0.0.1", port=str(relay.port)), "jobs") as q:
            q.create()
            before = relay.sent
            payload = os.urandom(1_000_000)
            ids = q.enqueue_many([payload] * 4)
            sent = relay.sent - before
            assert [m.payload for m in q.dequeue(4, lock_ms=0)] == [payload] * 4
        assert len(ids) == 4 and 4_000_000 < sent < 4_400_000, sent
    finally:
        relay.close()


def test_a_client_binding_cursor_sends_at_most_what_its_hex_form_allows(dsn: str) -> None:
    """On a connection whose cursors bind on the client (psycopg.ClientCursor), bytea goes into
    the statement's text as one hex string literal, twice its size, which PostgreSQL's parser
    reads under 2^29 characters: 600 MB of payloads (within MAX_CALL_CONTENT) closed the
    connection, and one payload of 270,000,000 bytes failed with XX000 once sent (two reviews).
    A call over 250,000,000 bytes in all is refused before anything is sent, sync and async."""
    from pgqueue import AsyncQueue
    from pgqueue._core import MAX_CLIENT_BOUND_CONTENT

    assert MAX_CLIENT_BOUND_CONTENT == 250_000_000
    half = b"\0" * 125_000_001
    with psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        q = Queue(conn, "default")
        with pytest.raises(errors.InvalidArgument, match="250,000,002 bytes of payloads in one call on a connection "
                                                         "whose cursors bind parameters on the client"):
            q.enqueue_many([half, half])
        with pytest.raises(errors.InvalidArgument, match="270,000,000 bytes of payloads in one call"):
            q.enqueue(b"\0" * 270_000_000)
        assert q.enqueue_many([b"a", b"b"]) == [1, 2] and q.stats(exact=True).total == 2

    async def on_asyncio() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True,
                                                         cursor_factory=psycopg.AsyncClientCursor) as conn:
            with pytest.raises(errors.InvalidArgument, match="bind parameters on the client"):
                await AsyncQueue(conn, "default").enqueue_many([half, half])

    asyncio.run(on_asyncio())


@pytest.mark.parametrize("datestyle", ["German", "SQL, DMY", "Postgres, MDY"])
def test_the_times_read_whatever_the_sessions_datestyle(dsn: str, datestyle: str) -> None:
    """psycopg parses a timestamptz's text in the ISO DateStyle only: with a role's or session's
    DateStyle 'German', Queue.settings(), list_queues, list_schedules (and so the workers'
    start, `pgqueue queue list`, the metrics and the dashboard) raised NotImplementedError (a
    review). The times are read as epoch microseconds now, the same instant as under ISO."""
    from pgqueue.schedules import create_schedule, list_schedules

    Queue(dsn, "ds").create()
    create_schedule(dsn, "ds_every", "ds", "x", every=60)
    iso = Queue(dsn, "ds").settings().created_at
    odd = make_conninfo(dsn, options=f"-c DateStyle={datestyle.replace(' ', '')}")
    with psycopg.connect(odd) as conn:
        assert str(conn.execute("SHOW DateStyle").fetchone()[0]).startswith(datestyle)  # type: ignore[index]
    with Queue(odd, "ds") as queue:
        assert queue.settings().created_at == iso and iso.tzinfo == timezone.utc
    assert [q.created_at for q in list_queues(odd) if q.queue == "ds"] == [iso]
    (entry,) = [s for s in list_schedules(odd) if s.name == "ds_every"]
    assert abs(entry.created_at - datetime.now(timezone.utc)) < timedelta(minutes=5)
    proc = subprocess.run([str(Path(sys.executable).with_name("pgqueue")), "queue", "list", "--dsn", odd],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "ds" in proc.stdout, proc.stderr


def test_a_text_enqueue_warns_nothing_without_standard_conforming_strings(
        conn: psycopg.Connection[Any]) -> None:
    """A plain literal with a backslash in message_create_text ('[^\\x01-\\x7f]') sent every
    client a WARNING "nonstandard use of escape in a string literal" when the session ran with
    standard_conforming_strings off (a review); the result was right all along."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(f"{d.severity}: {d.message_primary}"))
    conn.execute("SET standard_conforming_strings = off")
    for text, ok in (("abc", True), ("caf\u00e9", False)):
        try:
            conn.execute("SELECT pgqueue.message_create_text('default', %s, NULL, 'text/plain; charset=us-ascii')",
                         (text,))
            assert ok, text
        except psycopg.errors.InvalidParameterValue:
            assert not ok, text
    assert notices == [], notices
