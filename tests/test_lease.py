"""Lease renewal (pgqueue._lease), the one implementation behind receive() of both clients and
both workers. Each test runs once with the thread driver (Heartbeats, a blocking beat) and once
with the asyncio driver (AsyncHeartbeats, an awaited one), so the two stay in step: against the
real server (Queue.heartbeat_many / AsyncQueue.heartbeat_many, one statement a round), and
without one (a fake batch beat that records each call and answers what the test says) for the
round's rules: one call for every held message, a stale token lost once, a message settled
during the call not reported, a lost connection tried once more at once, a conflict (40001,
40P01) tried again at once a few times, and the newest token only of two deliveries of one
message."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqueue import AsyncQueue, Message, Queue
from pgqueue import _lease
from pgqueue._lease import AsyncHeartbeats, Heartbeats, interval
from pgqueue import errors
from pgqueue.errors import ConnectionFailed
from helpers import commit_once_blocking

Conn = psycopg.Connection[Any]
T = TypeVar("T")
Beat = Callable[[list[Message]], list[Message]]


class Driver(Protocol):
    calls: list[list[int]]  # the ids of each call's messages, a call a list

    def renew(self) -> list[Message]: ...

    def stop(self) -> None: ...


class LoopThread:
    """An event loop on a thread of its own, for a test that drives AsyncHeartbeats from outside."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class ThreadDriver:
    """Heartbeats with Queue.heartbeat_many; the first ``failures`` calls raise."""

    def __init__(self, dsn: str, held: Callable[[], Iterable[Message]], period: float, failures: int,
                 error: type[Exception] = ConnectionFailed) -> None:
        self.calls: list[list[int]] = []
        self.queue = Queue(dsn, "jobs")

        def beat(msgs: list[Message]) -> list[Message]:
            self.calls.append([m.id for m in msgs])
            if len(self.calls) <= failures:
                raise error("the database went away")
            return self.queue.heartbeat_many(msgs, 60000)

        self.hb = Heartbeats(held, beat, period)

    def renew(self) -> list[Message]:
        return self.hb.renew()

    def stop(self) -> None:
        self.hb.stop()
        self.queue.close()


class AsyncDriver:
    """AsyncHeartbeats with AsyncQueue.heartbeat_many, on an event loop of its own thread."""

    def __init__(self, dsn: str, held: Callable[[], Iterable[Message]], period: float, failures: int,
                 error: type[Exception] = ConnectionFailed) -> None:
        self.calls: list[list[int]] = []
        self.loop = LoopThread()
        self.queue = AsyncQueue(dsn, "jobs")

        async def beat(msgs: list[Message]) -> list[Message]:
            self.calls.append([m.id for m in msgs])
            if len(self.calls) <= failures:
                raise error("the database went away")
            return await self.queue.heartbeat_many(msgs, 60000)

        async def start() -> AsyncHeartbeats:
            return AsyncHeartbeats(held, beat, period)

        self.hb = self.loop.call(start())

    def renew(self) -> list[Message]:
        return self.loop.call(self.hb.renew())

    def stop(self) -> None:
        self.loop.call(self.hb.stop())
        self.loop.call(self.queue.close())
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
        assert driver.calls == [[a.id, b.id, c.id]]  # one statement for the round
        assert locked_for(conn, a) > 50000 and locked_for(conn, c) > 50000
        assert locked_for(conn, b2) <= 1000  # the other consumer's lease was not touched

        assert driver.renew() == []  # reported once, never beaten again
        assert driver.calls[1:] == [[a.id, c.id]]
        held.append(b2)  # a later delivery of the same message is a new token: beaten as usual
        assert driver.renew() == []
        assert driver.calls[2:] == [[a.id, c.id, b.id]] and locked_for(conn, b2) > 50000
    finally:
        driver.stop()


@pytest.mark.parametrize("kind", DRIVERS)
def test_beats_keep_leases_past_their_end_and_a_failing_beat_is_retried(kind: str, dsn: str, queue: Queue,
                                                                         conn: Conn,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    queue.enqueue_many(["a", "b"])
    # a lease that outlasts a loaded machine's start of the driver and its first beats (which renew
    # it for 60 s; one of 300 ms ran out if they came late), watched until a second past its end
    held = queue.dequeue(2, lock_ms=3000)
    other = Queue(conn, "jobs")
    with caplog.at_level(logging.WARNING, logger="pgqueue"):
        driver = DRIVERS[kind](dsn, lambda: held, 0.05, 1)  # the first beat raises
        stolen: list[Message] = []
        try:
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:
                stolen += other.dequeue(2, lock_ms=60000)
                time.sleep(0.05)
        finally:
            driver.stop()
    assert stolen == []
    assert any("heartbeat failed: the database went away" in r.getMessage() for r in caplog.records)
    assert all(call == [m.id for m in held] for call in driver.calls)  # a call a round, for both
    n = len(driver.calls)
    assert n >= 10
    time.sleep(0.2)
    assert len(driver.calls) == n  # stopped


@pytest.mark.parametrize("kind", DRIVERS)
def test_a_call_that_lost_its_connection_is_made_again_at_once(kind: str, dsn: str, queue: Queue, conn: Conn,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """Before, the round ended at the failure and the next round, a third of the lease later,
    reconnected: a lease that ran out meanwhile was lost under a running handler."""
    queue.enqueue_many(["a", "b"])
    a, b = queue.dequeue(2, lock_ms=1000)
    driver = DRIVERS[kind](dsn, lambda: [a, b], 3600, 1)  # rounds on demand; the first call raises
    try:
        with caplog.at_level(logging.WARNING, logger="pgqueue"):
            assert driver.renew() == []
        assert driver.calls == [[a.id, b.id], [a.id, b.id]]
        assert locked_for(conn, a) > 50000 and locked_for(conn, b) > 50000
        assert any("heartbeat failed: the database went away; trying again at once" in r.getMessage()
                   for r in caplog.records)
    finally:
        driver.stop()


@pytest.mark.parametrize("kind", DRIVERS)
def test_a_call_the_server_refused_waits_for_the_next_round(kind: str, dsn: str, queue: Queue) -> None:
    """A refusal (a lock timeout is a plain PgQueueError) is not a lost connection: trying it again at once would
    only meet the same lock."""
    queue.enqueue("a")
    [a] = queue.dequeue(1, lock_ms=1000)
    driver = DRIVERS[kind](dsn, lambda: [a], 3600, 1, errors.PgQueueError)
    try:
        with pytest.raises(errors.PgQueueError):
            driver.renew()
        assert driver.calls == [[a.id]]
    finally:
        driver.stop()


@pytest.mark.parametrize("kind", DRIVERS)
def test_a_call_that_conflicted_at_repeatable_read_is_made_again_at_once(
        kind: str, dsn: str, queue: Queue, conn: Conn, caplog: pytest.LogCaptureFixture) -> None:
    """Where transactions default to REPEATABLE READ, a beat that waited for the lock of a row
    another transaction then changed (a worker's acknowledgement of a message whose handler had
    just returned, on the loop's connection) fails with 40001. It rolled back whole: before, the
    round ended with a "heartbeat failed" warning and none of its leases was renewed until the
    next round, a third of the lease later. The call is made again at once, with a new
    snapshot, and renews them; logged at DEBUG only."""
    queue.enqueue("a")
    [a] = queue.dequeue(1, lock_ms=1000)
    rr = make_conninfo(dsn, options="-c default_transaction_isolation=repeatable\\ read")
    driver = DRIVERS[kind](rr, lambda: [a], 3600, 0)  # rounds on demand, no made-up failure
    changer = psycopg.connect(dsn)  # a transaction that changes the row and commits once the beat waits
    changer.execute("UPDATE pgqueue.message SET locked_until = locked_until WHERE id = %s", (a.id,))
    waited: list[bool] = []
    committer = threading.Thread(target=commit_once_blocking, args=(dsn, changer, waited))
    try:
        committer.start()
        with caplog.at_level(logging.DEBUG, logger="pgqueue"):
            assert driver.renew() == []
        committer.join(30)
        assert waited == [True], "the beat never waited for the changed row: the test did not exercise the path"
        assert driver.calls == [[a.id], [a.id]]  # the call, and the same call again at once
        assert locked_for(conn, a) > 50000
        messages = [(r.levelno, r.getMessage()) for r in caplog.records if r.name.startswith("pgqueue")]
        assert [m for level, m in messages if level >= logging.WARNING] == []
        assert any("heartbeat conflicted with another transaction (40001, 1 in a row)" in m for _, m in messages)
    finally:
        committer.join(30)
        changer.close()
        driver.stop()


# -- the round's rules, with a fake batch beat (no server) ---------------------------------------


def message(msg_id: int, attempts: int = 1) -> Message:
    return Message(id=msg_id, queue="jobs", payload=None, attempts=attempts, state=None, dequeue_at=None,
                   created_at=datetime.now(timezone.utc), locked_until=None, content=b"", content_type=None)


def tokens(msgs: Iterable[Message]) -> list[tuple[int, int]]:
    return [(m.id, m.attempts) for m in msgs]


class FakeBeat:
    """A batch beat without a server: records the tokens of each call, runs ``during`` (what
    happens while the call is in flight), and answers the messages ``refuse`` picks out of the
    call's (their tokens were stale); the first ``failures`` calls raise ``error`` instead."""

    def __init__(self, refuse: Callable[[list[Message]], list[Message]] = lambda msgs: [],
                 during: Callable[[list[Message]], None] = lambda msgs: None, failures: int = 0,
                 error: type[Exception] = ConnectionFailed) -> None:
        self.calls: list[list[tuple[int, int]]] = []
        self.refuse, self.during, self.failures, self.error = refuse, during, failures, error

    def __call__(self, msgs: list[Message]) -> list[Message]:
        self.calls.append(tokens(msgs))
        self.during(msgs)
        if len(self.calls) <= self.failures:
            raise self.error("the database went away")
        return self.refuse(msgs)


class Rounds:
    """Heartbeats ("thread") or AsyncHeartbeats ("asyncio", on a loop of its own thread) over a
    fake beat, with rounds on demand only (a period of an hour)."""

    def __init__(self, kind: str, held: Callable[[], Iterable[Message]], beat: Beat, *,
                 still_held: Callable[[Message], bool] = lambda m: True) -> None:
        self.loop: LoopThread | None = None
        self.hb: Heartbeats | AsyncHeartbeats
        if kind == "thread":
            self.hb = Heartbeats(held, beat, 3600, still_held=still_held)
            return
        self.loop = LoopThread()

        async def awaited(msgs: list[Message]) -> list[Message]:
            return beat(msgs)

        async def start() -> AsyncHeartbeats:
            return AsyncHeartbeats(held, awaited, 3600, still_held=still_held)

        self.hb = self.loop.call(start())

    def renew(self) -> list[Message]:
        if isinstance(self.hb, AsyncHeartbeats):
            assert self.loop is not None
            return self.loop.call(self.hb.renew())
        return self.hb.renew()

    @property
    def lost(self) -> set[tuple[int, int]]:
        return self.hb.lost

    @property
    def beaten(self) -> bool:
        return self.hb._beaten

    def stop(self) -> None:
        """Stop beating (a round after that sends nothing); the loop stays for further rounds."""
        if isinstance(self.hb, AsyncHeartbeats):
            assert self.loop is not None
            self.loop.call(self.hb.stop(5))
        else:
            self.hb.stop(5)

    def close(self) -> None:
        self.stop()
        if self.loop is not None:
            self.loop.close()


def lost_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "lease lost before it was settled" in r.getMessage()]


KINDS = ["thread", "asyncio"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_round_renews_every_held_message_with_one_call(kind: str) -> None:
    """Before, a round made a statement a message: hundreds of round trips a round for a worker
    holding hundreds of messages, which fell behind a short lease on a remote database."""
    held = [message(i) for i in range(1, 201)]
    beat = FakeBeat()
    rounds = Rounds(kind, lambda: list(held), beat)
    try:
        assert rounds.renew() == [] and rounds.beaten
        assert beat.calls == [tokens(held)]  # one call, every message once, in order
        assert rounds.renew() == []
        assert beat.calls[1:] == [tokens(held)]  # a call a round
        held.clear()  # nothing held: no call (and the round tells the outage log nothing)
        assert rounds.renew() == [] and not rounds.beaten and len(beat.calls) == 2
        held.append(message(7))
        rounds.stop()  # stopping: nothing is sent any more
        assert rounds.renew() == [] and len(beat.calls) == 2
    finally:
        rounds.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_round_of_more_messages_than_a_call_takes_makes_one_call_a_chunk(kind: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """message_heartbeat_batch takes 10000 ids at most: a round of more is cut in chunks (3
    here), each one call; a stale one in the second chunk is lost as in the first."""
    monkeypatch.setattr(_lease, "MAX_BATCH", 3)
    held = [message(i) for i in range(1, 8)]
    beat = FakeBeat(refuse=lambda msgs: [m for m in msgs if m.id == 5])
    rounds = Rounds(kind, lambda: held, beat)
    try:
        assert rounds.renew() == [held[4]]
        assert beat.calls == [tokens(held[0:3]), tokens(held[3:6]), tokens(held[6:7])]
    finally:
        rounds.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_stale_token_among_good_ones_is_lost_once_and_a_later_delivery_is_renewed(
        kind: str, caplog: pytest.LogCaptureFixture) -> None:
    a, b, c = message(1), message(2), message(3)
    held = [a, b, c]
    beat = FakeBeat(refuse=lambda msgs: [m for m in msgs if m == b])  # b's lease ran out: its token is stale
    rounds = Rounds(kind, lambda: list(held), beat)
    try:
        with caplog.at_level(logging.WARNING, logger="pgqueue"):
            assert rounds.renew() == [b]
            assert rounds.lost == {(2, 1)}
            assert rounds.renew() == []  # reported once, never sent again
            assert beat.calls == [tokens([a, b, c]), tokens([a, c])]
            b2 = message(2, 2)  # a later delivery of the same message: another token, renewed as usual
            held.append(b2)
            assert rounds.renew() == []
            assert beat.calls[2:] == [tokens([a, c, b2])]
        assert lost_warnings(caplog) == ["message 2 on queue jobs: lease lost before it was settled (it will be "
                                         "delivered again; raise lock_ms?)"]
    finally:
        rounds.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_message_settled_while_the_call_runs_is_not_lost(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """The handler of b returns and b is completed while the round's call is in flight: the
    call finds b's token stale (completed), which is no loss; b is not sent again."""
    a, b = message(1), message(2)
    held = {a, b}

    def settle_b(msgs: list[Message]) -> None:
        held.discard(b)

    beat = FakeBeat(refuse=lambda msgs: [m for m in msgs if m == b], during=settle_b)
    rounds = Rounds(kind, lambda: sorted(held, key=lambda m: m.id), beat, still_held=lambda m: m in held)
    try:
        with caplog.at_level(logging.WARNING, logger="pgqueue"):
            assert rounds.renew() == []
            assert rounds.lost == set()
            beat.during = lambda msgs: None
            assert rounds.renew() == []
        assert beat.calls == [tokens([a, b]), tokens([a])]
        assert lost_warnings(caplog) == []
    finally:
        rounds.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_that_lost_its_connection_is_made_once_more_at_once_then_ends_the_round(
        kind: str, caplog: pytest.LogCaptureFixture) -> None:
    a, b, c = message(1), message(2), message(3)
    beat = FakeBeat(refuse=lambda msgs: [m for m in msgs if m == b], failures=1)
    rounds = Rounds(kind, lambda: [a, b, c], beat)
    try:
        with caplog.at_level(logging.WARNING, logger="pgqueue"):
            assert rounds.renew() == [b]  # the call again, at once, with the same messages
        assert beat.calls == [tokens([a, b, c])] * 2
        assert any("heartbeat failed: the database went away; trying again at once" in r.getMessage()
                   for r in caplog.records)
        beat.calls.clear()
        beat.failures = 2  # the call fails again: the round ends with the error
        with pytest.raises(ConnectionFailed):
            rounds.renew()
        assert beat.calls == [tokens([a, c])] * 2
        assert rounds.renew() == [] and beat.calls[2:] == [tokens([a, c])]  # the next round tries again
        beat.calls.clear()
        beat.failures, beat.error = 1, errors.PgQueueError  # a refusal: not tried again at once
        with pytest.raises(errors.PgQueueError):
            rounds.renew()
        assert beat.calls == [tokens([a, c])]
    finally:
        rounds.close()


class Conflict(errors.SerializationFailure):
    """A beat's 40001 as the client raises it (the fake beat's errors take a message only)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, sqlstate="40001")


@pytest.mark.parametrize("kind", KINDS)
def test_a_call_that_conflicted_is_made_again_at_once_a_few_times_then_ends_the_round(
        kind: str, caplog: pytest.LogCaptureFixture) -> None:
    a, b = message(1), message(2)
    tries = 3  # as docs and CHANGELOG say
    assert _lease.BEAT_CONFLICTS_AGAIN == tries
    beat = FakeBeat(refuse=lambda msgs: [m for m in msgs if m == b], failures=tries, error=Conflict)
    rounds = Rounds(kind, lambda: [a, b], beat)
    try:
        with caplog.at_level(logging.DEBUG, logger="pgqueue"):
            assert rounds.renew() == [b]  # the last try answers
        assert beat.calls == [tokens([a, b])] * (tries + 1)
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            "message 2 on queue jobs: lease lost before it was settled (it will be delivered again; raise lock_ms?)"]
        assert sum("heartbeat conflicted with another transaction" in r.getMessage() for r in caplog.records) == tries
        beat.calls.clear()
        beat.failures = tries + 1  # one conflict more than it tries again: the round ends with it
        with pytest.raises(Conflict):
            rounds.renew()
        assert beat.calls == [tokens([a])] * (tries + 1)
        beat.calls.clear()
        beat.failures, beat.error = 1, errors.SerializationFailure  # no SQLSTATE 40001: a refusal, not tried again
        with pytest.raises(errors.SerializationFailure):
            rounds.renew()
        assert beat.calls == [tokens([a])]
    finally:
        rounds.close()


@pytest.mark.parametrize("order", ["older first", "newest first"])
@pytest.mark.parametrize("kind", KINDS)
def test_of_two_deliveries_of_one_message_only_the_newest_token_is_sent(
        kind: str, order: str, caplog: pytest.LogCaptureFixture) -> None:
    """A stale delivery still running after its lease ran out, and the delivery after it (the
    same id, the next attempts token): the call has the newest token only (the server would
    answer the older stale anyway, one statement with both is ambiguous by id), and the older
    is lost; the newest goes on being renewed."""
    old, new, other = message(7, 1), message(7, 2), message(8, 1)
    held = [old, new, other] if order == "older first" else [new, old, other]
    beat = FakeBeat()
    rounds = Rounds(kind, lambda: held, beat)
    try:
        with caplog.at_level(logging.WARNING, logger="pgqueue"):
            assert rounds.renew() == [old]
            assert rounds.lost == {(7, 1)}
            assert rounds.renew() == []
        assert beat.calls == [tokens([new, other])] * 2
        assert len(lost_warnings(caplog)) == 1
    finally:
        rounds.close()
