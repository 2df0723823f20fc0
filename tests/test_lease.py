"""Lease renewal (pgqueue._lease), the one implementation behind receive() of both clients and
both workers, against the real server: each test runs once with the thread driver
(Heartbeats, a blocking Queue beat) and once with the asyncio driver (AsyncHeartbeats, an
awaited AsyncQueue beat), so the two stay in step."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol, TypeVar

import psycopg
import pytest

from pgqueue import AsyncQueue, Message, Queue
from pgqueue._lease import AsyncHeartbeats, Heartbeats, interval
from pgqueue import errors
from pgqueue.errors import ConnectionFailed

Conn = psycopg.Connection[Any]
T = TypeVar("T")


class Driver(Protocol):
    beats: list[int]  # the id of each message beaten, in order

    def renew(self) -> list[Message]: ...

    def stop(self) -> None: ...


class ThreadDriver:
    """Heartbeats with Queue.heartbeat; the first ``failures`` beats raise."""

    def __init__(self, dsn: str, held: Callable[[], Iterable[Message]], period: float, failures: int,
                 error: type[Exception] = ConnectionFailed) -> None:
        self.beats: list[int] = []
        self.queue = Queue(dsn, "jobs")

        def beat(msg: Message) -> bool:
            self.beats.append(msg.id)
            if len(self.beats) <= failures:
                raise error("the database went away")
            return self.queue.heartbeat(msg, 60000)

        self.hb = Heartbeats(held, beat, period)

    def renew(self) -> list[Message]:
        return self.hb.renew()

    def stop(self) -> None:
        self.hb.stop()
        self.queue.close()


class AsyncDriver:
    """AsyncHeartbeats with AsyncQueue.heartbeat, on an event loop of its own thread."""

    def __init__(self, dsn: str, held: Callable[[], Iterable[Message]], period: float, failures: int,
                 error: type[Exception] = ConnectionFailed) -> None:
        self.beats: list[int] = []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.queue = AsyncQueue(dsn, "jobs")

        async def beat(msg: Message) -> bool:
            self.beats.append(msg.id)
            if len(self.beats) <= failures:
                raise error("the database went away")
            return await self.queue.heartbeat(msg, 60000)

        async def start() -> AsyncHeartbeats:
            return AsyncHeartbeats(held, beat, period)

        self.hb = self._call(start())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def renew(self) -> list[Message]:
        return self._call(self.hb.renew())

    def stop(self) -> None:
        self._call(self.hb.stop())
        self._call(self.queue.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


DRIVERS = {"thread": ThreadDriver, "asyncio": AsyncDriver}


def locked_for(conn: Conn, msg: Message) -> int:
    """Milliseconds left on a message's lease."""
    row = conn.execute("SELECT locked_until - pgqueue.now_ms() FROM pgqueue.message WHERE id = %s",
                       (msg.id,)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def queue(dsn: str) -> Queue:
    q = Queue(dsn, "jobs")
    q.create()
    return q


def test_the_interval_is_a_third_of_the_lease_and_never_below_5_ms() -> None:
    assert interval(30000) == 10.0
    assert interval(300) == 0.1
    assert interval(1) == 0.005


@pytest.mark.parametrize("kind", DRIVERS)
def test_a_round_renews_every_held_message_and_reports_a_lost_lease_once(kind: str, dsn: str, queue: Queue,
                                                                         conn: Conn) -> None:
    queue.enqueue_many(["a", "b", "c"])
    a, b, c = queue.dequeue(3, lock_ms=1000)
    # b's lease runs out and it goes to another consumer: its token (attempts 1) is stale
    conn.execute("UPDATE pgqueue.message SET locked_until = 0 WHERE id = %s", (b.id,))
    [b2] = Queue(conn, "jobs").dequeue(1, lock_ms=1000)
    held = [a, b, c]
    driver = DRIVERS[kind](dsn, lambda: list(held), 3600, 0)  # rounds on demand only
    try:
        assert driver.renew() == [b]
        assert driver.beats == [a.id, b.id, c.id]
        assert locked_for(conn, a) > 50000 and locked_for(conn, c) > 50000
        assert locked_for(conn, b2) <= 1000  # the other consumer's lease was not touched

        assert driver.renew() == []  # reported once, never beaten again
        assert driver.beats[3:] == [a.id, c.id]
        held.append(b2)  # a later delivery of the same message is a new token: beaten as usual
        assert driver.renew() == []
        assert driver.beats[5:] == [a.id, c.id, b.id] and locked_for(conn, b2) > 50000
    finally:
        driver.stop()


@pytest.mark.parametrize("kind", DRIVERS)
def test_beats_keep_leases_past_their_end_and_a_failing_beat_is_retried(kind: str, dsn: str, queue: Queue,
                                                                         conn: Conn,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    queue.enqueue_many(["a", "b"])
    held = queue.dequeue(2, lock_ms=300)
    other = Queue(conn, "jobs")
    with caplog.at_level(logging.WARNING, logger="pgqueue"):
        driver = DRIVERS[kind](dsn, lambda: held, 0.05, 1)  # the first beat raises
        stolen: list[Message] = []
        try:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                stolen += other.dequeue(2, lock_ms=60000)
                time.sleep(0.05)
        finally:
            driver.stop()
    assert stolen == []
    assert any("heartbeat failed: the database went away" in r.getMessage() for r in caplog.records)
    n = len(driver.beats)
    assert n >= 10
    time.sleep(0.2)
    assert len(driver.beats) == n  # stopped


@pytest.mark.parametrize("kind", DRIVERS)
def test_a_beat_that_lost_its_connection_is_made_again_at_once(kind: str, dsn: str, queue: Queue, conn: Conn,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Before, the round ended at the failure and the next round, a third of the lease later,
    reconnected: a lease that ran out meanwhile was lost under a running handler."""
    queue.enqueue_many(["a", "b"])
    a, b = queue.dequeue(2, lock_ms=1000)
    driver = DRIVERS[kind](dsn, lambda: [a, b], 3600, 1)  # rounds on demand; the first beat raises
    try:
        with caplog.at_level(logging.WARNING, logger="pgqueue"):
            assert driver.renew() == []
        assert driver.beats == [a.id, a.id, b.id]
        assert locked_for(conn, a) > 50000 and locked_for(conn, b) > 50000
        assert any("heartbeat failed: the database went away; trying again at once" in r.getMessage()
                   for r in caplog.records)
    finally:
        driver.stop()


@pytest.mark.parametrize("kind", DRIVERS)
def test_a_beat_the_server_refused_waits_for_the_next_round(kind: str, dsn: str, queue: Queue) -> None:
    """A refusal (a lock timeout is a plain PgQueueError) is not a lost connection: trying it again at once would
    only meet the same lock."""
    queue.enqueue("a")
    [a] = queue.dequeue(1, lock_ms=1000)
    driver = DRIVERS[kind](dsn, lambda: [a], 3600, 1, errors.PgQueueError)
    try:
        with pytest.raises(errors.PgQueueError):
            driver.renew()
        assert driver.beats == [a.id]
    finally:
        driver.stop()
