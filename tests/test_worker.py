"""The worker against a real server: completion and failure, bounded concurrency, heartbeats,
wake-ups (LISTEN, scheduled messages, retries) without busy polling, graceful shutdown, and
a worker process killed with SIGKILL losing nothing."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from conftest import Relay, Server
from helpers import scheduler_running
from pgqueue import AsyncQueue, AsyncWorker, Message, Queue, _sql
from pgqueue._core import Call
from pgqueue._worker_core import Step
from pgqueue.worker import Result, Worker
from worker_handlers import marks

Conn = psycopg.Connection[Any]
TESTS = Path(__file__).resolve().parent
PGQUEUE = Path(sys.executable).with_name("pgqueue")


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def wait_until_idle(dsn: str, listen: bool = True) -> None:
    """Until the worker running on the database has polled (its loop's connection asked for the
    queue's next due time, after an empty dequeue) and, if it listens, its LISTEN connection is
    in place: it sleeps now (a fixed sleep of the test, on a loaded machine, could end before the
    worker had even started)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        def idle() -> bool:
            rows = conn.execute("SELECT query, state FROM pg_stat_activity WHERE datname = current_database() "
                                "AND application_name = 'pgqueue-worker'").fetchall()
            polled = any("queue_next_due" in str(query) and state == "idle" for query, state in rows)
            return polled and (not listen or any(str(query).startswith("LISTEN") for query, _ in rows))

        wait_for(idle, timeout=30, what="the worker to poll and sleep")


class Started:
    """A Worker, or an AsyncWorker on an event loop of its own, run on a thread."""

    def __init__(self, worker: Worker | AsyncWorker) -> None:
        self.worker = worker
        self.errors: list[BaseException] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._target, daemon=True)
        self.thread.start()
        if isinstance(worker, AsyncWorker):
            wait_for(lambda: self.loop is not None or not self.thread.is_alive(), what="the event loop")

    def _target(self) -> None:
        try:
            if isinstance(self.worker, AsyncWorker):
                asyncio.run(self._run_async(self.worker))
            else:
                self.worker.run()
        except BaseException as exc:  # surfaced by the caller
            self.errors.append(exc)

    async def _run_async(self, worker: AsyncWorker) -> None:
        self.loop = asyncio.get_running_loop()
        await worker.run()

    def stop(self) -> None:
        if self.loop is None:
            self.worker.stop()
        elif self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.stop)
        self.thread.join(20)
        assert not self.thread.is_alive(), "the worker did not stop"


@contextmanager
def running(worker: Worker | AsyncWorker) -> Iterator[threading.Thread]:
    """Run a worker on a thread for the block; stop it and check that it stopped."""
    started = Started(worker)
    try:
        yield started.thread
    finally:
        started.stop()
        assert not started.errors, started.errors


class Results:
    """An on_result hook that keeps every Result."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[Result] = []

    def __call__(self, result: Result) -> None:
        with self.lock:
            self.items.append(result)

    def outcomes(self) -> Counter[str]:
        with self.lock:
            return Counter(r.outcome for r in self.items)

    def count(self, outcome: str) -> int:
        return self.outcomes()[outcome]


def stop_and_time(started: Started) -> float:
    """Stop a started worker from its own side (the event loop's thread for an AsyncWorker) and
    return how long its run() took to return (at most 15 s: check that it did)."""
    t0 = time.monotonic()
    if started.loop is None:
        started.worker.stop()
    else:
        started.loop.call_soon_threadsafe(started.worker.stop)
    started.thread.join(15)
    return time.monotonic() - t0


def make_queue(dsn: str, name: str = "jobs", **options: Any) -> Queue:
    queue = Queue(dsn, name)
    queue.create(**{"notify": True, **options})
    return queue


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
@pytest.mark.parametrize("concurrency", [1, 0])
def test_a_worker_drains_one_group_without_a_poll_per_message(dsn: str, kind: str, concurrency: int) -> None:
    """On a queue with groups, a message becomes deliverable when its group's previous one is
    acknowledged. The worker acknowledged at its next poll, or alone, and fetched at the poll
    after: one message a poll on a queue of fewer busy groups than its slots (18 a second on
    one group of limit 1, a review). A finished delivery is now acknowledged at once with a
    fetch, and that call takes the message its acknowledgement handed the turn to: 60 messages
    of one group with a poll of 1 s take about a second, in order, never two in flight."""
    queue = make_queue(dsn, group_concurrency=concurrency, notify=False)
    ids = queue.enqueue_many(list(range(60)), groups=["g"] * 60)
    seen: list[int] = []
    in_flight = [0, 0]  # now, most at once
    lock = threading.Lock()

    def handle(msg: Message) -> None:
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        time.sleep(0.002)
        with lock:
            seen.append(msg.id)
            in_flight[0] -= 1

    async def handle_async(msg: Message) -> None:
        handle(msg)

    options: dict[str, Any] = {"concurrency": 4, "poll_min": 1.0, "poll_max": 1.0, "handle_signals": False}
    worker = (Worker(queue, handle, **options) if kind == "Worker"
              else AsyncWorker(AsyncQueue(dsn, "jobs"), handle_async, **options))
    started = time.monotonic()
    with running(worker):
        wait_for(lambda: len(seen) == 60, timeout=30, what="the group drained")
    took = time.monotonic() - started
    assert took < 15, took  # one poll of 1 s a message: 60 s
    if concurrency == 1:
        assert seen == ids and in_flight[1] == 1, (seen, in_flight)
    else:
        assert sorted(seen) == ids


def test_completes_successes_and_fails_failures(dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=2, retry_base_ms=0, retry_cap_ms=0)
    good = queue.enqueue_many([{"n": i} for i in range(20)])
    bad = queue.enqueue({"fail": "boom"})
    seen: Counter[int] = Counter()
    lock = threading.Lock()

    def handler(msg: Message) -> None:
        with lock:
            seen[msg.id] += 1
        if isinstance(msg.payload, dict) and "fail" in msg.payload:
            raise ValueError(msg.payload["fail"])

    results = Results()
    with running(Worker(queue, handler, concurrency=4, on_result=results)):
        wait_for(lambda: results.count("completed") == 20 and results.count("dead") == 1, what="all settled")

    assert all(r.acknowledged for r in results.items)
    assert {r.message.id for r in results.items if r.outcome == "completed"} == set(good)
    assert seen == Counter({**{i: 1 for i in good}, bad: 2})  # one retry, then dead
    assert results.outcomes() == Counter(completed=20, retried=1, dead=1)
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 1)
    [dead] = queue.dead_letters()
    assert dead.id == bad and dead.attempts == 2
    assert dead.last_error == "ValueError: boom"


class _Unprintable(Exception):
    """An exception whose message cannot be made: its __str__ raises (bad format arguments)."""

    def __str__(self) -> str:
        return str(self.args[0] % self.args[1:])


def test_a_handler_error_whose_str_raises_fails_its_message(dsn: str) -> None:
    """Any exception a handler raises fails its message, even one whose ``__str__`` raises: the
    worker stores its type's name and runs on (the sync Worker died of the TypeError, and the
    message stayed leased)."""
    queue = make_queue(dsn, retry_base_ms=3600000, retry_cap_ms=3600000)

    def handler(msg: Message) -> None:
        if msg.payload == "bad":
            raise _Unprintable("%d of %d", "not a number")

    bad = queue.enqueue("bad")
    good = queue.enqueue("good")
    results = Results()
    with running(Worker(queue, handler, on_result=results)):
        wait_for(lambda: results.count("retried") == 1 and results.count("completed") == 1, what="both settled")
    [retried] = [r for r in results.items if r.outcome == "retried"]
    assert retried.message.id == bad and retried.acknowledged
    assert [r.message.id for r in results.items if r.outcome == "completed"] == [good]
    [pending] = queue.peek()
    assert pending.id == bad and pending.last_error == (
        "_Unprintable: (its message could not be made: __str__ raised)")


def test_a_long_error_is_cut_alike_by_both_workers_and_both_clients(dsn: str) -> None:
    """One error text for last_error on every path: Worker, AsyncWorker, Queue.fail, AsyncQueue.fail."""
    from pgqueue import AsyncQueue
    from pgqueue._core import MAX_ERROR_CHARS, error_text

    queue = make_queue(dsn, retry_base_ms=3600000, retry_cap_ms=3600000)
    error = RuntimeError("first line\n\tsecond " + "x" * (2 * MAX_ERROR_CHARS))
    expected = error_text(error)
    assert len(expected) == MAX_ERROR_CHARS and expected.startswith("RuntimeError: first line second xx")

    def handler(msg: Message) -> None:
        raise error

    async def async_handler(msg: Message) -> None:
        raise error

    results = Results()
    ids = {"Worker": queue.enqueue("Worker")}
    with running(Worker(queue, handler, on_result=results)):
        wait_for(lambda: results.count("retried") == 1, what="the Worker's failure")

    async def async_paths() -> None:
        ids["AsyncWorker"] = queue.enqueue("AsyncWorker")
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), async_handler, on_result=results)
        task = asyncio.create_task(worker.run())
        while results.count("retried") < 2:
            await asyncio.sleep(0.01)
        worker.stop()
        await task
        ids["AsyncQueue.fail"] = queue.enqueue("AsyncQueue.fail")
        async with AsyncQueue(dsn, "jobs") as aqueue:
            [msg] = await aqueue.dequeue()
            assert await aqueue.fail(msg, error)

    asyncio.run(asyncio.wait_for(async_paths(), 60))
    ids["Queue.fail"] = queue.enqueue("Queue.fail")
    [msg] = queue.dequeue()
    assert queue.fail(msg, error)
    with psycopg.connect(dsn) as conn:
        stored = dict(conn.execute("SELECT id, last_error FROM pgqueue.message").fetchall())
    assert {path: stored[i] for path, i in ids.items()} == dict.fromkeys(ids, expected)


def test_concurrency_is_bounded(dsn: str) -> None:
    queue = make_queue(dsn)
    queue.enqueue_many(list(range(30)))
    lock = threading.Lock()
    running_now = 0
    peak = 0
    full = threading.Event()  # three have run at once

    def handler(msg: Message) -> None:
        nonlocal running_now, peak
        with lock:
            running_now += 1
            peak = max(peak, running_now)
            if running_now == 3:
                full.set()
        # the first ones wait for the third (a loaded machine may start it after they would end)
        if not full.wait(5):
            full.set()  # (never three at once: the assert below tells)
        time.sleep(0.05)
        with lock:
            running_now -= 1

    results = Results()
    worker = Worker(queue, handler, concurrency=3, batch_size=2, on_result=results)
    with running(worker):
        for _ in range(50):
            assert worker.in_flight <= 3
            time.sleep(0.01)
        wait_for(lambda: results.count("completed") == 30, what="30 completions")
    assert peak == 3


def test_batch_size_bounds_every_fetch_not_only_the_slots(dsn: str) -> None:
    """batch_size is the most messages one dequeue asks for, however many slots are free: 8
    free slots are filled by fetches of at most 2. Taking the free slots (concurrency) for the
    batch went unnoticed (a mutation that survived: test_concurrency_is_bounded's batch of 2 is
    near its 3 slots). Each call's limit is read where the worker's loop makes its calls."""
    queue = make_queue(dsn)
    queue.enqueue_many(list(range(40)))
    release = threading.Event()
    results = Results()
    worker = Worker(queue, lambda msg: release.wait(30), concurrency=8, batch_size=2, poll_min=0.02,
                    poll_max=0.05, on_result=results)
    lock = threading.Lock()
    limits: list[int] = []
    run_call = worker._call

    def recorded(call: Call[Any]) -> Any:
        if call.query in (_sql.DEQUEUE, _sql.COMPLETE_AND_DEQUEUE):
            with lock:
                limits.append(int(call.params["limit"]))  # type: ignore[call-overload]
        return run_call(call)

    worker._call = recorded  # type: ignore[method-assign]
    try:
        with running(worker):
            wait_for(lambda: worker.in_flight == 8, what="the 8 slots filled")
            with lock:
                while_full = list(limits)
            release.set()
            wait_for(lambda: results.count("completed") == 40, what="40 completions")
    finally:
        release.set()
    assert len(while_full) >= 4 and all(n <= 2 for n in while_full), while_full  # 8 slots: 4 fetches or more
    assert all(n <= 2 for n in limits), limits


def test_heartbeats_keep_the_lease_of_a_long_handler(dsn: str) -> None:
    # heartbeats every second: a loaded machine may hold one up, for less than the two seconds
    # left of the lease then
    queue = make_queue(dsn, lock_ms=3000)
    msg_id = queue.enqueue("long")
    started = threading.Event()
    calls: list[int] = []

    def handler(msg: Message) -> None:
        calls.append(msg.attempts)
        started.set()
        time.sleep(7.0)  # over two leases long

    results = Results()
    with running(Worker(queue, handler, concurrency=1, on_result=results)):
        assert started.wait(15)
        other = Queue(dsn, "jobs")
        deadline = time.monotonic() + 6.5
        while time.monotonic() < deadline:  # the lease never runs out meanwhile
            assert other.dequeue(1) == []
            time.sleep(0.05)
        other.close()
        wait_for(lambda: results.items, what="the result")
    [result] = results.items
    assert (result.message.id, result.outcome, result.acknowledged) == (msg_id, "completed", True)
    assert calls == [1]


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_running_handlers_lease_is_renewed_every_third_of_it(kind: str, dsn: str, conn: Conn) -> None:
    """The heartbeats renew a lease every third of it (of 3 s: each second), so a running
    handler's lease never has less than about two thirds left, and a beat a loaded machine holds
    up for a second does not lose it. Beating every lease length (three times the interval)
    went unnoticed (a mutation that survived: test_heartbeats_keep_the_lease_of_a_long_handler's
    other consumer polls, and a beat that comes just as the lease ends keeps it). The lease left
    is read from the server every 50 ms for 6.5 s (over two leases); it must stay above 0.3 of
    the lease (900 ms)."""
    queue = make_queue(dsn)  # the queue's lease is 30 s: the worker's 3 s is what the beats renew
    msg_id = queue.enqueue("long")
    release = threading.Event()
    entered = threading.Event()

    def handler(msg: Message) -> None:
        entered.set()
        release.wait(30)

    async def async_handler(msg: Message) -> None:
        entered.set()
        deadline = time.monotonic() + 30
        while not release.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    results = Results()
    worker: Worker | AsyncWorker = (
        Worker(queue, handler, concurrency=1, lock_ms=3000, on_result=results) if kind == "Worker"
        else AsyncWorker(AsyncQueue(dsn, "jobs"), async_handler, concurrency=1, lock_ms=3000, on_result=results))
    left: list[int] = []
    try:
        with running(worker):
            assert entered.wait(15), "the handler did not start"
            deadline = time.monotonic() + 6.5
            while time.monotonic() < deadline:
                row = conn.execute("SELECT locked_until - pgqueue.now_ms() FROM pgqueue.message WHERE id = %s",
                                   (msg_id,)).fetchone()
                assert row is not None
                left.append(int(row[0]))
                time.sleep(0.05)
            release.set()
            wait_for(lambda: results.items, what="the result")
    finally:
        release.set()
    assert len(left) >= 20 and max(left) <= 3000, left
    assert min(left) > 900, left
    [result] = results.items
    assert (result.message.id, result.outcome, result.acknowledged) == (msg_id, "completed", True)


def test_listen_wakes_an_idle_worker_at_once(dsn: str) -> None:
    queue = make_queue(dsn)
    handled = threading.Event()
    worker = Worker(queue, lambda msg: handled.set(), poll_min=30, poll_max=30)
    with running(worker):
        wait_until_idle(dsn)  # the worker has polled once and sleeps for 30 s
        start = time.monotonic()
        queue.enqueue("wake up")
        assert handled.wait(15)
        latency = time.monotonic() - start
    # at once: well before the poll; 5 s for a loaded machine (the control below waits as long)
    assert latency < 5.0, f"an idle worker took {latency:.3f}s to pick up a message"


def test_without_listen_an_idle_worker_waits_for_its_poll(dsn: str) -> None:
    # The control for the test above: the quick pick-up is LISTEN's doing.
    queue = make_queue(dsn)
    handled = threading.Event()
    worker = Worker(queue, lambda msg: handled.set(), listen=False, poll_min=30, poll_max=30)
    with running(worker):
        wait_until_idle(dsn, listen=False)
        queue.enqueue("nobody hears this")
        assert not handled.wait(5.0)


@pytest.mark.parametrize("listen", [True, False])
def test_scheduled_message_is_picked_up_when_due(dsn: str, listen: bool) -> None:
    queue = make_queue(dsn)
    handled_at: list[float] = []
    worker = Worker(queue, lambda msg: handled_at.append(time.monotonic()), listen=listen,
                    poll_min=30, poll_max=30)
    start = time.monotonic()
    queue.enqueue("later", delay=1.0)
    with running(worker):
        wait_for(lambda: handled_at, timeout=15, what="the scheduled message")
    waited = handled_at[0] - start
    # when due, not at the poll 30 s later (10 s for a loaded machine's start and wake-up)
    assert 0.95 <= waited < 10.0, f"picked up after {waited:.3f}s"


def test_a_failed_message_is_retried_after_its_back_off(dsn: str) -> None:
    queue = make_queue(dsn, retry_base_ms=400, retry_cap_ms=400)  # retry after 200-400 ms
    queue.enqueue("flaky")
    attempts: list[tuple[int, float]] = []

    def handler(msg: Message) -> None:
        attempts.append((msg.attempts, time.monotonic()))
        if msg.attempts == 1:
            raise RuntimeError("try again")

    results = Results()
    with running(Worker(queue, handler, poll_min=30, poll_max=30, on_result=results)):
        wait_for(lambda: results.count("completed") == 1, timeout=15, what="the retry")
    [(first, t1), (second, t2)] = attempts
    assert (first, second) == (1, 2)
    assert 0.19 <= t2 - t1 < 10.0  # after the back-off, not at the poll 30 s later (a loaded machine: seconds)


def _dequeue_calls(dsn: str) -> int:
    """How many times pgqueue.message_dequeue ran (track_functions must be on for the caller)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
            "WHERE schemaname = 'pgqueue' AND funcname = 'message_dequeue'").fetchone()
    assert row is not None
    return int(row[0])


def test_an_idle_worker_does_not_busy_poll(dsn: str) -> None:
    queue = make_queue(dsn)
    queue.enqueue("far away", delay=3600)
    handled = threading.Event()
    counted = make_conninfo(dsn, options="-c track_functions=all")
    before = _dequeue_calls(dsn)
    # next_due says an hour, LISTEN is on: the worker backs off from 50 ms to poll_max
    worker = Worker(queue, lambda msg: handled.set(), poll_min=0.05, poll_max=1.0, dsn=counted)
    with running(worker):
        wait_until_idle(dsn)  # its first poll (a loaded machine's start may take seconds)
        time.sleep(3.0)
    # a backend flushes its function statistics when it exits
    calls = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        calls = _dequeue_calls(dsn) - before
        if calls:
            break
        time.sleep(0.1)
    # the first poll, then others 50+100+200+400+800 ms apart and then once a second: about 7 in
    # all (the first and those in the 3 s after it); busy polling would be hundreds
    assert 3 <= calls <= 12, calls
    assert not handled.is_set()


@pytest.mark.parametrize("skew", [3.0, -3.0])
def test_a_scheduled_message_starts_on_time_whatever_the_workers_host_clock(dsn: str, skew: float,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker sleeps until the queue's next message is due, no longer. It took the due time
    from the server and subtracted its own host's clock: a host 3 s ahead found a message due
    in 1.5 s already due and slept its whole poll delay, starting it late (a review); one behind
    slept the skew longer. It asks the server how long until then (its clock). The worker's
    host clock is skewed here for pgqueue's worker core only."""
    import types

    import pgqueue._worker_core as core

    shifted = types.SimpleNamespace(**{k: getattr(time, k) for k in dir(time) if not k.startswith("__")})
    shifted.time = lambda: time.time() + skew
    monkeypatch.setattr(core, "time", shifted)
    queue = make_queue(dsn)
    started: dict[int, float] = {}
    # a poll delay of 3 s from the first empty poll: the NOTIFY of the enqueue wakes the worker,
    # it finds nothing deliverable and sleeps until the message is due, or its poll delay
    worker = Worker(queue, lambda msg: started.setdefault(msg.id, time.monotonic()), poll_min=3.0, poll_max=3.0)
    with running(worker):
        wait_until_idle(dsn)
        due = time.monotonic() + 1.5
        msg_id = queue.enqueue("later", delay=1.5)
        wait_for(lambda: msg_id in started, timeout=10, what="the scheduled message to start")
    late = started[msg_id] - due
    assert late < 0.6, f"started {late:.2f} s after it was due (host clock {skew:+} s)"


def test_stop_finishes_in_flight_handlers_then_gives_back_the_rest(dsn: str) -> None:
    queue = make_queue(dsn, lock_ms=60000)
    quick = queue.enqueue({"sleep": 0.3})
    stuck = queue.enqueue({"sleep": 60})
    release = threading.Event()
    started: list[int] = []

    def handler(msg: Message) -> None:
        started.append(msg.id)
        if msg.id == stuck:
            release.wait(60)
        else:
            time.sleep(0.3)

    results = Results()
    # a grace the quick one ends in even on a loaded machine, far shorter than the stuck one
    worker = Worker(queue, handler, concurrency=2, shutdown_grace=3.0, on_result=results)
    try:
        with running(worker):
            wait_for(lambda: len(started) == 2, what="both handlers to start")
            t0 = time.monotonic()
            worker.stop()
        took = time.monotonic() - t0
    finally:
        release.set()
    # the grace (3 s) and a loaded machine's delays; not the default grace (10 s), nor the stuck
    # handler's minute
    assert took < 9.0
    by_id = {r.message.id: r for r in results.items}
    assert by_id[quick].outcome == "completed" and by_id[quick].acknowledged
    assert by_id[stuck].outcome == "released" and by_id[stuck].acknowledged
    # the stuck message is back, due now, and its next delivery is attempt 2
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (1, 0)
    [again] = queue.dequeue(1)
    assert (again.id, again.attempts) == (stuck, 2)


def test_ctrl_c_during_the_graceful_stop_gives_the_running_messages_back(dsn: str) -> None:
    """handle_signals=False, the worker's run() on the main thread: stop(), then Ctrl-C (Python's
    KeyboardInterrupt) while the handlers have their grace. The shutdown goes on at once as
    stop(now=True)'s does, giving their messages back, and run() then raises the interrupt.
    (Raised into the grace's wait, it skipped the shutdown: the messages stayed leased by no
    one until their leases ran out: a review.)"""
    import _thread

    queue = make_queue(dsn, lock_ms=600_000)
    queue.enqueue_many([1, 2])
    release = threading.Event()
    worker = Worker(queue, lambda msg: release.wait(60), concurrency=2, shutdown_grace=60,
                    handle_signals=False)

    def interrupt() -> None:
        wait_for(lambda: worker.in_flight == 2, what="both handlers to start")
        worker.stop()
        time.sleep(0.5)  # in the grace's wait
        _thread.interrupt_main()

    helper = threading.Thread(target=interrupt, daemon=True)
    helper.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run()
        took = time.monotonic() - t0
        stats = queue.stats()
    finally:
        release.set()
        helper.join(10)
    assert took < 20, took  # not the grace's minute
    assert (stats.ready, stats.leased) == (2, 0), stats


def test_worker_survives_losing_its_connections(dsn: str) -> None:
    queue = make_queue(dsn)
    results = Results()
    worker = Worker(queue, lambda msg: None, poll_max=0.5, on_result=results)
    with running(worker) as thread:
        queue.enqueue_many(list(range(5)))
        wait_for(lambda: results.count("completed") == 5, what="the first five")
        with psycopg.connect(dsn, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'pgqueue-worker'").fetchone()
        assert killed is not None and killed[0] >= 2  # the main and LISTEN connections
        queue.enqueue_many(list(range(5)))
        wait_for(lambda: results.count("completed") == 10, timeout=15, what="the next five")
        assert thread.is_alive()
    assert all(r.acknowledged for r in results.items)


def test_conninfo_of_each_kind_of_queue(dsn: str) -> None:
    from psycopg_pool import ConnectionPool

    assert Queue(dsn).conninfo == dsn
    with psycopg.connect(dsn) as conn:
        dbname = conn.info.dbname
        with psycopg.connect(Queue(conn).conninfo) as again:
            assert again.info.dbname == dbname
    with ConnectionPool(dsn, min_size=1, open=True) as pool:
        with psycopg.connect(Queue(pool).conninfo) as again:
            assert again.info.dbname == dbname


def test_a_pool_with_psycopg_connection_kwargs_gives_workers_a_conninfo(dsn: str) -> None:
    """The usual pool recipe passes psycopg's own connection arguments in ``kwargs``
    (``autocommit=True``, ``prepare_threshold``, a ``row_factory``): they are not libpq options
    and stay out of the conninfo, while libpq options such as ``application_name`` are kept.
    Before, ``Queue.conninfo``, ``Worker(...)`` and ``AsyncWorker(...)`` raised psycopg's
    ProgrammingError ``invalid connection option "autocommit"``."""
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    from pgqueue import AsyncQueue

    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                              "application_name": "from-the-pool"}
    queue = make_queue(dsn)
    queue.enqueue("via the pool's conninfo")
    results = Results()
    with ConnectionPool(dsn, kwargs=kwargs, min_size=1, open=True) as pool:
        pooled = Queue(pool, "jobs")
        with psycopg.connect(pooled.conninfo) as again:
            assert again.info.parameter_status("application_name") == "from-the-pool"
        with running(Worker(pooled, lambda msg: None, on_result=results)):
            wait_for(lambda: results.count("completed") == 1, what="the message")

    async def build_async_worker() -> None:
        async with AsyncConnectionPool(dsn, kwargs=kwargs, min_size=1, open=False) as pool:
            aqueue = AsyncQueue(pool, "jobs")
            assert "application_name=from-the-pool" in aqueue.conninfo
            assert "autocommit" not in aqueue.conninfo
            AsyncWorker(aqueue, _noop)

    asyncio.run(build_async_worker())


async def _noop(msg: Message) -> None:
    pass


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_message_due_after_the_year_9999_does_not_stop_a_worker(kind: str, dsn: str) -> None:
    """A message due past what datetime holds sits in the queue while the worker idles (each
    idle round asks the queue's next due time) and handles the others. Before, reading that
    time raised OverflowError and killed run()."""
    from datetime import timedelta

    from pgqueue import AsyncQueue

    queue = make_queue(dsn)
    queue.enqueue("someday", delay=timedelta(days=3_000_000))
    results = Results()

    async def handler(msg: Message) -> None:
        pass

    worker: Worker | AsyncWorker = (
        Worker(queue, lambda msg: None, poll_min=0.05, poll_max=0.1, on_result=results) if kind == "Worker"
        else AsyncWorker(AsyncQueue(dsn, "jobs"), handler, poll_min=0.05, poll_max=0.1, on_result=results))
    with running(worker) as thread:
        time.sleep(0.5)  # idle rounds, each reading the far message's due time
        now = queue.enqueue("now")
        wait_for(lambda: results.count("completed") == 1, what="the message due now")
        assert thread.is_alive()
    assert [r.message.id for r in results.items] == [now]
    assert queue.stats().scheduled == 1


def test_worker_refuses_bad_options(dsn: str) -> None:
    queue = Queue(dsn)
    with pytest.raises(ValueError):
        Worker(queue, print, concurrency=0)
    with pytest.raises(ValueError):
        Worker(queue, print, poll_min=2, poll_max=1)

    async def coro(msg: Message) -> None:
        pass

    with pytest.raises(TypeError):
        Worker(queue, coro)


def test_run_on_a_missing_queue_raises(dsn: str) -> None:
    from pgqueue.errors import QueueNotFound

    with pytest.raises(QueueNotFound):
        Worker(Queue(dsn, "nope"), print).run()


# -- worker processes ---------------------------------------------------------------------


def start_worker_process(dsn: str, queue: str, *options: str) -> subprocess.Popen[str]:
    """Run `pgqueue worker DSN QUEUE worker_handlers:obey` from the tests directory."""
    return subprocess.Popen(
        [str(PGQUEUE), "worker", dsn, queue, "worker_handlers:obey", *options],
        cwd=TESTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_sigterm_finishes_or_gives_back_and_exits_0(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")  # the worker's local time 5:30 h off UTC: its log stays in UTC
    queue = make_queue(dsn, lock_ms=60000)
    mark = str(tmp_path / "marks")
    quick = queue.enqueue({"mark": mark, "sleep": 1.0})
    stuck = queue.enqueue({"mark": mark, "sleep": 60})
    # a grace the quick one ends in even on a loaded machine, far shorter than the stuck one
    proc = start_worker_process(dsn, "jobs", "--concurrency", "2", "--shutdown-grace", "5")
    try:
        wait_for(lambda: len(marks(mark)) == 2, timeout=15, what="both handlers to start")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "SIGTERM" in err
    # every log line stamped in UTC with the zone written out (local time without a zone before)
    lines = [line for line in err.splitlines() if " pgqueue[" in line]
    assert lines and all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pgqueue\[\d+\] [A-Z]+ ", line)
                         for line in lines), err
    stamp = datetime.strptime(lines[-1][:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    assert abs((datetime.now(timezone.utc) - stamp).total_seconds()) < 120, lines[-1]
    # the quick one finished within the grace period and was completed; the stuck one is back
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (1, 0, 0, 0)
    [again] = queue.dequeue(1)
    assert (again.id, again.attempts) == (stuck, 2)
    assert quick != stuck


@pytest.mark.parametrize("handler", ["obey", "async_obey"])
def test_a_signal_repeated_as_the_worker_stops_still_exits_0(dsn: str, tmp_path: Path, handler: str) -> None:
    """A supervisor repeating its SIGTERM (or Ctrl-C pressed again) once the worker had stopped
    ended `pgqueue worker` with the signal's status (143, 130) instead of 0: the default
    handlers were back while the process exited (a chaos review, session 44)."""
    queue = make_queue(dsn, lock_ms=5000)
    for attempt in range(3):
        queue.enqueue_many([{"mark": str(tmp_path / "marks"), "sleep": 0.15} for _ in range(20)])
        proc = subprocess.Popen([str(PGQUEUE), "worker", dsn, "jobs", f"worker_handlers:{handler}", "-c", "2",
                                 "--no-listen"], cwd=TESTS, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            assert proc.stdout is not None
            seen = []
            for line in proc.stdout:
                seen.append(line)
                if "worker started" in line:
                    time.sleep(0.3)  # handlers running
                    proc.send_signal(signal.SIGTERM)
                elif "worker stopped" in line:
                    proc.send_signal(signal.SIGTERM if attempt != 1 else signal.SIGINT)  # again
            proc.wait(20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out = "".join(seen)
        assert "worker stopped" in out and "Traceback" not in out, out
        assert proc.returncode == 0, (attempt, proc.returncode, out[-500:])


def test_sigkill_loses_nothing_the_message_is_redelivered_and_completed_once(dsn: str, tmp_path: Path) -> None:
    queue = make_queue(dsn, lock_ms=1000)
    mark = str(tmp_path / "marks")
    msg_id = queue.enqueue({"mark": mark, "sleep": 60})
    proc = start_worker_process(dsn, "jobs")
    try:
        wait_for(lambda: marks(mark), timeout=15, what="the handler to start")
        proc.kill()  # SIGKILL: no clean-up at all
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed_at = time.monotonic()
    # still the dead worker's lease, not given back (its 1 s may have run out by now on a loaded machine)
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT attempts, locked_until IS NOT NULL FROM pgqueue.message WHERE id = %s",
                            (msg_id,)).fetchone() == (1, True)

    results = Results()
    redelivered: list[Message] = []
    with running(Worker(queue, redelivered.append, on_result=results)):
        wait_for(lambda: results.items, timeout=15, what="the redelivery")
        time.sleep(0.5)  # nothing else arrives
    took = time.monotonic() - killed_at
    assert [(m.id, m.attempts) for m in redelivered] == [(msg_id, 2)]
    assert [(r.outcome, r.acknowledged) for r in results.items] == [("completed", True)]
    assert took < 15  # once the lease has run out (1 s), not much later
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 0)
    assert marks(mark) == [(msg_id, 1)]  # the killed worker's attempt


def _function_calls(dsn: str) -> Counter[str]:
    """Calls of each pgqueue function (track_functions must be on for the callers)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return Counter({name: int(calls) for name, calls in conn.execute(
            "SELECT funcname, sum(calls) FROM pg_stat_user_functions WHERE schemaname = 'pgqueue' "
            "GROUP BY funcname")})


def test_a_busy_worker_acknowledges_in_the_transaction_of_its_next_fetch(dsn: str) -> None:
    queue = make_queue(dsn)
    queue.enqueue_many([f"m-{i}" for i in range(300)])
    handled: Counter[int] = Counter()
    lock = threading.Lock()

    def handler(msg: Message) -> None:
        with lock:
            handled[msg.id] += 1

    before = _function_calls(dsn)
    results = Results()
    worker = Worker(queue, handler, concurrency=4, on_result=results,
                    dsn=make_conninfo(dsn, options="-c track_functions=all"))
    with running(worker):
        wait_for(lambda: results.count("completed") == 300, what="300 completed")
    assert set(handled.values()) == {1} and len(handled) == 300  # each handled once
    assert all(r.acknowledged for r in results.items)
    assert len({r.message.id for r in results.items}) == 300  # each acknowledged once
    assert queue.stats().total == 0
    calls: Counter[str] = Counter()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # a backend flushes its function statistics when it exits
        calls = _function_calls(dsn) - before
        if calls["message_complete_and_dequeue"]:
            break
        time.sleep(0.1)
    # message_complete_and_dequeue calls message_complete_batch itself: the rest ran alone
    alone = calls["message_complete_batch"] - calls["message_complete_and_dequeue"] + calls["message_complete"]
    # the acknowledgements ride on the fetches: one transaction per message, not two. Some go
    # alone (while a partial fetch backs off, and at the end): 11 to 15 against 82 to 84 in
    # twelve runs on the 2-core machine, so the bound is 4 to 1 (it was 10 to 1, and failed 5 of
    # those 12 runs, with this build and the one before it alike)
    assert calls["message_complete_and_dequeue"] >= 4 * max(alone, 1), calls


def test_a_connection_lost_while_looking_for_the_next_due_message_is_survived(dsn: str) -> None:
    queue = make_queue(dsn)
    raised, handled = threading.Event(), threading.Event()

    class Flaky(Worker):
        def _until_due(self, sleep: float) -> Step[float]:
            if not raised.is_set():  # the first empty poll: the connection goes away right then
                raised.set()
                raise psycopg.OperationalError("connection lost (injected)")
            return (yield from super()._until_due(sleep))

    with running(Flaky(queue, lambda msg: handled.set(), poll_min=0.05, poll_max=0.2, listen=False)):
        wait_for(raised.is_set, what="the injected failure")
        queue.enqueue("after the failure")
        wait_for(handled.is_set, what="a message handled after reconnecting")


def test_finished_messages_are_completed_together_and_never_before_their_handler_returns(dsn: str) -> None:
    queue = make_queue(dsn)
    slow = queue.enqueue("slow")
    queue.enqueue_many([f"burst-{i}" for i in range(40)])
    release_slow, go = threading.Event(), threading.Event()
    sizes: list[int] = []

    class CountingWorker(Worker):
        def _completed(self, deliveries: Any, lost: Any) -> Any:
            sizes.append(len(deliveries))
            return super()._completed(deliveries, lost)

    def handler(msg: Message) -> None:
        if msg.payload == "slow":
            release_slow.wait(20)
        else:
            go.wait(20)  # the others finish in bursts, all at once

    results = Results()
    with running(CountingWorker(queue, handler, concurrency=8, batch_size=8, on_result=results)):
        deadline = time.monotonic() + 30
        while results.count("completed") < 40:  # bursts until all are done (a loaded machine needs more)
            assert time.monotonic() < deadline, "timed out waiting for the bursts completed"
            go.set()
            time.sleep(0.05)
            go.clear()
        # the slow handler has not returned: its message is still leased, not completed
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT attempts, locked_until IS NOT NULL FROM pgqueue.message WHERE id = %s",
                                (slow,)).fetchone() == (1, True)
        release_slow.set()
        wait_for(lambda: results.count("completed") == 41, what="the slow one completed")
    assert all(r.acknowledged for r in results.items)
    assert sorted(r.message.id for r in results.items) == sorted({r.message.id for r in results.items})  # once each
    assert sum(sizes) >= 2 and max(sizes) > 1, sizes  # some completions went together
    assert queue.stats().total == 0


async def _never_run(msg: Message) -> None:
    raise AssertionError("a coroutine the Worker was handed ran")


class _AsyncCall:
    async def __call__(self, msg: Message) -> None:
        raise AssertionError("never awaited")


def test_a_handler_returning_a_coroutine_fails_its_message_and_says_to_use_the_async_worker(dsn: str) -> None:
    # The Worker refuses coroutine functions, but a plain wrapper returning a coroutine got past
    # that: its message was completed although nothing ran.
    import warnings

    queue = make_queue(dsn, max_attempts=1)
    msg_id = queue.enqueue("x")
    results = Results()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with running(Worker(queue, lambda msg: _never_run(msg), on_result=results)):
            wait_for(lambda: results.items, what="the result")
        import gc

        gc.collect()
    [result] = results.items
    assert (result.message.id, result.outcome) == (msg_id, "dead")
    assert isinstance(result.error, TypeError) and "AsyncWorker" in str(result.error)
    [dead] = queue.dead_letters()
    assert dead.last_error is not None and dead.last_error.startswith("TypeError: the handler returned")
    assert not [w for w in caught if "never awaited" in str(w.message)]  # the coroutine was closed
    # an object whose __call__ is a coroutine function is refused up front, like a coroutine function
    with pytest.raises(TypeError, match="AsyncWorker"):
        Worker(queue, _AsyncCall())


def _generator(msg: Message) -> Iterator[None]:
    raise AssertionError("never run")
    yield


async def _async_generator(msg: Message) -> AsyncIterator[None]:
    raise AssertionError("never run")
    yield


class _GeneratorCall:
    def __call__(self, msg: Message) -> Iterator[None]:
        raise AssertionError("never run")
        yield


def test_generator_handlers_are_refused_and_a_returned_generator_fails_its_message(dsn: str,
                                                                                  tmp_path: Path) -> None:
    """A handler with `yield` runs none of its body when called: every message was completed
    unhandled, silently (`pgqueue worker` sent an `async def` with `yield` to the threaded
    Worker). Both workers, a Tasks registry and the CLI refuse one; a plain handler that returns a
    generator has its message failed, not completed (a review of the worker under failures,
    session 43)."""
    from pgqueue import AsyncQueue, Tasks

    queue = make_queue(dsn, max_attempts=1)
    for handler in (_generator, _async_generator, _GeneratorCall()):
        with pytest.raises(TypeError, match="generator function"):
            Worker(queue, handler)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="generator function"):
            AsyncWorker(AsyncQueue(dsn, "jobs"), handler)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="generator function"):
            Tasks().register("t", handler)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="generator function"):
            Tasks(default=handler)  # type: ignore[arg-type]
    module = tmp_path / "gen_handlers.py"
    module.write_text("async def handle(msg):\n    yield\n")
    proc = subprocess.run([str(PGQUEUE), "worker", "--dsn", dsn, "jobs", "gen_handlers:handle"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1 and "is a generator function" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr

    msg_id = queue.enqueue("x")
    results = Results()
    with running(Worker(queue, lambda msg: (x for x in [msg]), on_result=results)):
        wait_for(lambda: results.items, what="the result")
    [result] = results.items
    assert (result.message.id, result.outcome) == (msg_id, "dead")
    [dead] = queue.dead_letters()
    assert dead.last_error is not None and dead.last_error.startswith("TypeError: the handler returned a generator")


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_the_lease_read_at_start_holds_when_the_queue_lock_ms_is_lowered_meanwhile(kind: str, dsn: str) -> None:
    # The heartbeats' interval comes from the lease read at start (3000 ms: a beat every second,
    # which a loaded machine may hold up for less than the two seconds left of the lease then);
    # dequeue and heartbeat must lease for that long, not for the queue's lock_ms of the moment.
    from pgqueue import AsyncQueue

    queue = make_queue(dsn, lock_ms=3000)
    results = Results()
    release = threading.Event()

    def handler(msg: Message) -> None:
        if msg.payload == "hold":
            release.wait(10)

    async def async_handler(msg: Message) -> None:
        if msg.payload == "hold":
            await asyncio.to_thread(release.wait, 10)

    # concurrency=1: a lease run out goes to the other consumer below, not to this worker again
    worker: Worker | AsyncWorker = (
        Worker(queue, handler, concurrency=1, on_result=results) if kind == "Worker"
        else AsyncWorker(AsyncQueue(dsn, "jobs"), async_handler, concurrency=1, on_result=results))
    other = Queue(dsn, "jobs")
    try:
        with running(worker):
            queue.enqueue("warm-up")
            wait_for(lambda: results.count("completed") == 1, what="the worker to start")
            queue.alter(lock_ms=50)  # an admin lowers it under the running worker
            held = queue.enqueue("hold")
            wait_for(lambda: worker.in_flight == 1, what="the handler to start")
            for _ in range(35):  # 3.5 s: past the first lease, across several heartbeats
                time.sleep(0.1)
                assert other.dequeue(1) == [], "the lease ran out under a running handler"
            release.set()
            wait_for(lambda: results.count("completed") == 2, what="the completion")
    finally:
        release.set()
    [result] = [r for r in results.items if r.message.id == held]
    assert result.acknowledged


def heartbeat_statements(conn: Conn) -> dict[str, int]:
    """How many times each heartbeat function has run in this database, as the statistics of
    the sessions that track functions say (a session's counts come in within a second, or when it ends)."""
    rows = conn.execute("SELECT funcname, calls FROM pg_stat_user_functions "
                        "WHERE schemaname = 'pgqueue' AND funcname IN ('message_heartbeat', 'message_heartbeat_batch')"
                        ).fetchall()
    return {"message_heartbeat": 0, "message_heartbeat_batch": 0, **{str(f): int(n) for f, n in rows}}


def locked_until(conn: Conn, ids: list[int]) -> dict[int, int]:
    rows = conn.execute("SELECT id, locked_until FROM pgqueue.message WHERE id = ANY(%s)", (ids,)).fetchall()
    return {int(i): int(t) for i, t in rows}


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_heartbeat_round_renews_every_running_handlers_lease_with_one_statement(kind: str, dsn: str,
                                                                                  conn: Conn) -> None:
    """20 handlers run past their lease (600 ms: a round every 200 ms): each round of heartbeats
    is ONE statement (message_heartbeat_batch) for the 20 messages, counted by the server
    (track_functions in the worker's sessions) and matched against the rounds the worker made;
    and the 20 leases really move. Before, a round made 20 statements (message_heartbeat)."""
    from pgqueue import AsyncQueue

    n = 20
    tracked = make_conninfo(dsn, options="-c track_functions=pl")
    queue = make_queue(dsn, lock_ms=600)
    ids = queue.enqueue_many([f"m{i}" for i in range(n)])
    release = threading.Event()
    results = Results()

    def handler(msg: Message) -> None:
        release.wait(20)

    async def async_handler(msg: Message) -> None:
        deadline = time.monotonic() + 20
        while not release.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    worker: Worker | AsyncWorker = (
        Worker(Queue(tracked, "jobs"), handler, concurrency=n, on_result=results) if kind == "Worker"
        else AsyncWorker(AsyncQueue(tracked, "jobs"), async_handler, concurrency=n, on_result=results))
    # the rounds: each a list of the sizes of the calls it made (the worker's _held is called once a round)
    lock = threading.Lock()
    rounds: list[list[int]] = []
    held, beat = worker._held, worker._beat

    def counted_held() -> list[Message]:
        with lock:
            rounds.append([])
        return held()

    def counted_beat(msgs: Any) -> Any:
        with lock:
            rounds[-1].append(len(msgs) if isinstance(msgs, list) else 1)
        return beat(msgs)

    worker._held = counted_held  # type: ignore[method-assign]
    worker._beat = counted_beat  # type: ignore[method-assign]

    def rounds_of_all() -> int:
        """The rounds that beat for the 20 (each 200 ms; a loaded machine's may come later)."""
        with lock:
            return sum(1 for r in rounds if sum(r) == n)

    try:
        with running(worker):
            wait_for(lambda: worker.in_flight == n, what="the 20 handlers")
            wait_for(lambda: rounds_of_all() >= 1, what="a round with the 20 in hand")
            before = locked_until(conn, ids)
            since = rounds_of_all()
            wait_for(lambda: rounds_of_all() >= since + 4, what="four rounds more")
            after = locked_until(conn, ids)
            release.set()
            wait_for(lambda: results.count("completed") == n, what="the completions")
    finally:
        release.set()
    assert sorted(after) == sorted(ids) and all(after[i] > before[i] for i in ids), (before, after)
    with lock:
        made = [r for r in rounds if r]
    assert all(len(r) == 1 for r in made), made  # ONE call a round
    assert made.count([n]) >= 4, made  # of the 20 messages, while the 20 handlers ran
    # the worker's sessions have ended: their counts come in
    wait_for(lambda: heartbeat_statements(conn)["message_heartbeat_batch"] >= len(made), what="the statistics")
    assert heartbeat_statements(conn) == {"message_heartbeat": 0, "message_heartbeat_batch": len(made)}


# -- the embedded server the workers' tests and the demo run on ----------------------------


_EMBEDDED_SCRIPT = """
import sys, psycopg
from pgqueue.embedded import EmbeddedPostgres
with EmbeddedPostgres() as pg:
    try:
        print(pg.base_dir, flush=True)
        sys.stdin.read()  # until Ctrl-C
    except KeyboardInterrupt:
        # the caller's clean-up in order: its last calls, then the server's stop
        with psycopg.connect(pg.dsn(), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        print("alive after Ctrl-C", flush=True)
"""


def test_ctrl_c_on_the_terminal_reaches_the_caller_not_the_embedded_server() -> None:
    """Ctrl-C on a terminal is SIGINT to the foreground process group: before, initdb and the
    server ran in the caller's and the server shut down at once, under the caller's clean-up."""
    proc = subprocess.Popen([sys.executable, "-c", _EMBEDDED_SCRIPT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        base_dir = proc.stdout.readline().strip()
        assert base_dir, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.2)  # into its read
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "alive after Ctrl-C" in out, err
    assert proc.returncode == 0, err
    assert not os.path.exists(base_dir)  # stopped and deleted all the same


def test_the_readmes_workers_examples_pass_a_users_mypy_strict(tmp_path: Path) -> None:
    """Each Python example of README.md's "### Workers", as a user would paste it, type-checks
    under ``mypy --strict``, with the user's ``send_email``, ``send_email_async`` and
    ``smtp_send`` typed as a user would (a payload is ``object``). Before, ``def handle(msg)``
    was untyped and ``smtp_send(**msg.payload)`` unpacked an ``object``."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("\n### Workers\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert len(blocks) == 3, "the section has three Python examples"
    stubs = ("def send_email(payload: object) -> None: ...\n"
             "async def send_email_async(payload: object) -> None: ...\n"
             "def smtp_send(*, to: str) -> None: ...\n\n\n")
    mypy = Path(sys.executable).parent / "mypy"
    for n, block in enumerate(blocks):
        (tmp_path / f"use{n}.py").write_text(stubs + block)
        proc = subprocess.run([str(mypy), "--strict", "--no-incremental", f"use{n}.py"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, block + proc.stdout + proc.stderr


def test_the_start_log_names_what_the_connection_reached(dsn: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A worker reached through a service file (or PGHOSTADDR, or one host of several) logged
    "database ? on the default socket": the start log now names the database, host and port the
    start-up check's connection reached (review of session 41)."""
    import logging

    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(dsn)
    service = tmp_path / "pg_service.conf"
    service.write_text("[pgq_worker_test]\n" + "".join(f"{k}={v}\n" for k, v in given.items()))
    monkeypatch.setenv("PGSERVICEFILE", str(service))
    for name in ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE"):
        monkeypatch.delenv(name, raising=False)
    Queue(dsn, "jobs").create()
    worker = Worker(Queue("service=pgq_worker_test", "jobs"), lambda message: None)
    with psycopg.connect(dsn) as conn:
        host, port, dbname = conn.info.host, conn.info.port, conn.info.dbname
    caplog.set_level(logging.INFO, logger="pgqueue")
    assert worker._check_server()
    worker._started_log(True, "threads")
    assert f"in database {dbname} on {host}:{port}," in caplog.text, caplog.text


def _tcp_options_of_sockets_to(port: int) -> list[tuple[int, int, int, int, int]]:
    """(SO_KEEPALIVE, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT) of each TCP socket
    of this process connected to 127.0.0.1:``port`` (read through a duplicate of its descriptor)."""
    import socket

    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            copy = os.dup(int(name))
        except OSError:  # (closed meanwhile)
            continue
        try:
            sock = socket.socket(fileno=copy)
        except OSError:  # (not a socket)
            os.close(copy)
            continue
        with sock:
            try:
                if sock.family != socket.AF_INET or sock.getpeername() != ("127.0.0.1", port):
                    continue
            except OSError:
                continue
            found.append((sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                          sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                          sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                          sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                          sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd and Linux TCP options")
def test_the_workers_connections_notice_a_dead_network_path_within_a_minute(pg_server: Server, dsn: str) -> None:
    """A network path that dies without closing the connection (a failover whose old host is gone,
    a NAT entry dropped) left a worker waiting for the kernel: about 15 minutes with data in
    flight, over 2 hours on an idle LISTEN or heartbeat connection (libpq's keepalives start
    after the system's 2 hours), the worker stuck meanwhile (a review). Every connection of the
    worker (its loop's, LISTEN's, the heartbeats') sets keepalives after 30 s, 3 probes 10 s
    apart, and a 60-s tcp_user_timeout, unless the DSN sets its own; the scheduler's too."""
    relay = Relay(pg_server)
    relayed = make_conninfo(dsn, host="127.0.0.1", port=str(relay.port))
    queue = Queue(relayed, "jobs")
    queue.create(notify=True, lock_ms=1000)
    queue.close()
    inside = threading.Event()
    release = threading.Event()

    def handler(msg: Message) -> None:
        inside.set()
        release.wait(10)  # (past half the lease: a heartbeat on its own connection)

    expected = (1, 30, 10, 3, 60_000)
    try:
        with running(Worker(Queue(relayed, "jobs"), handler)):
            Queue(dsn, "jobs").enqueue("x")
            assert inside.wait(10)
            wait_for(lambda: len(_tcp_options_of_sockets_to(relay.port)) >= 3, what="loop, LISTEN and heartbeats")
            options = _tcp_options_of_sockets_to(relay.port)
            release.set()
        assert options and all(o == expected for o in options), options
        # a DSN's own settings stand
        own = make_conninfo(relayed, keepalives_idle="5", tcp_user_timeout="1000")
        with scheduler_running(own, interval=0.1):
            wait_for(lambda: _tcp_options_of_sockets_to(relay.port), what="the scheduler's connection")
            assert _tcp_options_of_sockets_to(relay.port) == [(1, 5, 10, 3, 1000)]
    finally:
        release.set()
        relay.close()


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_server_that_closes_idle_sessions_costs_the_worker_no_outage(dsn: str, caplog: pytest.LogCaptureFixture,
                                                                      kind: str) -> None:
    """With the server's idle_session_timeout shorter than the worker's pauses between calls
    (its polls, its heartbeats, its LISTEN connection's wait: as some managed services set it),
    every call after a pause failed ("database connection lost: terminating connection due to
    idle-session timeout", "heartbeat failed: ...", "LISTEN connection failed: ..."), a warning
    and a back-off each time. Such a call never reached the server: it is made again at once on
    a new connection, and LISTEN connects again at once, with nothing logged."""
    import logging

    closing = make_conninfo(dsn, options="-c idle_session_timeout=200")
    queue = Queue(dsn, "jobs")
    queue.create(lock_ms=600, notify=True)  # heartbeats every 300 ms, each after a pause; LISTEN idle
    caplog.set_level(logging.INFO, logger="pgqueue")
    results = Results()

    def handler(msg: Message) -> None:
        time.sleep(1.5)

    async def async_handler(msg: Message) -> None:
        await asyncio.sleep(1.5)

    from pgqueue import AsyncQueue

    worker = (Worker(Queue(closing, "jobs"), handler, poll_min=0.5, poll_max=0.5, on_result=results)
              if kind == "Worker" else
              AsyncWorker(AsyncQueue(closing, "jobs"), async_handler, poll_min=0.5, poll_max=0.5, on_result=results))
    with running(worker):
        for _ in range(2):
            time.sleep(0.7)  # polls past the timeout
            queue.enqueue("slow")
        wait_for(lambda: results.count("completed") == 2, what="both completed")
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [], warnings
    assert all(r.acknowledged for r in results.items)
