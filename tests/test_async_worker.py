"""AsyncWorker against a real server: coroutine handlers under load (each message completed
once, concurrency bounded and used), heartbeats over a long handler, a hung coroutine cancelled
by its timeout and its message failed, graceful shutdown (finish or give back), retries and
dead letters, and a worker process sent SIGTERM / SIGINT twice."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from pgqueue import AsyncQueue, AsyncWorker, Message, Queue, Tasks, Worker
from pgqueue.worker import HandlerTimeout, Result
from conftest import Relay, Server
from test_worker import PGQUEUE, Results, Started, wait_for
from worker_handlers import marks

TESTS = Path(__file__).resolve().parent


def make_queue(dsn: str, name: str = "jobs", **options: object) -> Queue:
    queue = Queue(dsn, name)
    queue.create(**{"notify": True, **options})  # type: ignore[arg-type]
    return queue


async def until(predicate: object, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


def test_under_load_every_message_once_and_concurrency_bounded(dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=2, retry_base_ms=0, retry_cap_ms=0)
    ids = queue.enqueue_many([{"n": i} for i in range(2000)])
    bad = queue.enqueue({"fail": True})
    seen: Counter[int] = Counter()
    running = peak = 0
    results: list[Result] = []

    async def handler(msg: Message) -> None:
        nonlocal running, peak
        seen[msg.id] += 1
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.002 * (msg.id % 5))
            if isinstance(msg.payload, dict) and msg.payload.get("fail"):
                raise ValueError("boom")
        finally:
            running -= 1

    async def go() -> float:
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=40, on_result=results.append)
        task = asyncio.create_task(worker.run())
        t0 = time.monotonic()
        await until(lambda: sum(r.outcome == "completed" for r in results) == 2000
                    and any(r.outcome == "dead" for r in results), 60, "all settled")
        took = time.monotonic() - t0
        worker.stop()
        await task
        return took

    took = asyncio.run(go())
    assert seen == Counter({**{i: 1 for i in ids}, bad: 2})
    assert Counter(r.outcome for r in results) == Counter(completed=2000, retried=1, dead=1)
    assert all(r.acknowledged for r in results)
    assert 30 <= peak <= 40, peak  # bounded, and used
    assert took < 30
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 1)
    [dead] = queue.dead_letters()
    assert (dead.id, dead.last_error) == (bad, "ValueError: boom")


def _function_calls(dsn: str) -> Counter[str]:
    """Calls of each pgqueue function (track_functions must be on for the callers)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return Counter({name: int(calls) for name, calls in conn.execute(
            "SELECT funcname, sum(calls) FROM pg_stat_user_functions WHERE schemaname = 'pgqueue' "
            "GROUP BY funcname")})


def test_acknowledgements_ride_on_the_next_fetch(dsn: str) -> None:
    queue = make_queue(dsn)
    queue.enqueue_many([f"m-{i}" for i in range(300)])
    seen: Counter[int] = Counter()
    results: list[Result] = []

    async def handler(msg: Message) -> None:
        seen[msg.id] += 1

    async def go() -> None:
        counted = AsyncQueue(make_conninfo(dsn, options="-c track_functions=all"), "jobs")
        worker = AsyncWorker(counted, handler, concurrency=4, on_result=results.append)
        task = asyncio.create_task(worker.run())
        await until(lambda: sum(r.outcome == "completed" for r in results) == 300, 60, "300 completed")
        worker.stop()
        await task

    before = _function_calls(dsn)
    asyncio.run(go())
    assert set(seen.values()) == {1} and len(seen) == 300
    assert all(r.acknowledged for r in results) and len({r.message.id for r in results}) == 300
    calls: Counter[str] = Counter()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # a backend flushes its function statistics when it exits
        calls = _function_calls(dsn) - before
        if calls["message_complete_and_dequeue"]:
            break
        time.sleep(0.1)
    # message_complete_and_dequeue calls message_complete_batch itself: the rest ran alone
    alone = calls["message_complete_batch"] - calls["message_complete_and_dequeue"] + calls["message_complete"]
    assert calls["message_complete_and_dequeue"] >= 10 * max(alone, 1), calls


def test_more_than_10000_handlers_finished_at_once_are_acknowledged_in_calls_of_10000(dsn: str) -> None:
    """A worker of more than 10,000 handlers whose handlers all return in one round acknowledges
    them in calls of at most 10,000 (the server's limit a call): the acknowledge-and-fetch of a
    round, and the shutdown's settling of what finished after stop(). It sent them all in one
    call, which the server refused (22023): run() raised and every finished message was
    delivered again (a review)."""
    n = 10005
    queue = make_queue(dsn, lock_ms=120000, notify=False)

    async def run(stop_first: bool) -> list[Result]:
        queue.enqueue_many([f"m-{i}" for i in range(n)])
        go = asyncio.Event()
        started = 0
        results: list[Result] = []

        async def handler(msg: Message) -> None:
            nonlocal started
            started += 1
            if started == n and not stop_first:
                go.set()
            await go.wait()  # every handler returns in the same turn of the loop

        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=n + 5, handle_signals=False,
                             on_result=results.append, shutdown_grace=60)
        task = asyncio.create_task(worker.run())
        await until(lambda: started == n, 60, f"{n} handlers started")
        if stop_first:
            worker.stop()  # the shutdown settles them (Worker._settle)
            go.set()
        else:  # (the last handler to start let them all return: the next round acknowledges them)
            await until(lambda: len(results) == n, 60, f"{n} results")
            worker.stop()
        await task
        return results

    for stop_first in (False, True):
        results = asyncio.run(run(stop_first))
        assert len(results) == n and all(r.outcome == "completed" and r.acknowledged for r in results), (
            stop_first, Counter((r.outcome, r.acknowledged) for r in results))
        assert queue.stats().ready + queue.stats().leased == 0, stop_first
    queue.close()


def test_heartbeats_keep_a_long_handler_lease(dsn: str) -> None:
    # a lease of 3 s (beats a second apart), which a loaded machine's stalls of a second or two
    # do not run out (one of 600 ms is lost to a beat 400 ms late)
    queue = make_queue(dsn, lock_ms=3000)
    msg_id = queue.enqueue("long")
    results: list[Result] = []

    async def handler(msg: Message) -> None:
        await asyncio.sleep(4.5)  # a lease and a half long

    async def go() -> None:
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, on_result=results.append)
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.in_flight == 1, what="the handler to start")
        async with AsyncQueue(dsn, "jobs") as other:
            deadline = time.monotonic() + 30
            while not results:  # the lease never runs out meanwhile
                assert await other.dequeue(1) == []
                assert time.monotonic() < deadline, "the handler never finished"
                await asyncio.sleep(0.1)
        worker.stop()
        await task

    asyncio.run(go())
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results] == [(msg_id, "completed", True)]


def test_a_hung_coroutine_is_cancelled_at_its_timeout_and_its_message_failed(dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=1)
    hung = queue.enqueue("hang")
    quick = queue.enqueue("quick")
    cancelled: list[int] = []
    results: list[Result] = []

    async def handler(msg: Message) -> None:
        if msg.payload == "hang":
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.append(msg.id)
                raise

    async def go() -> None:
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=2,
                             timeout=lambda m: 0.4 if m.payload == "hang" else None, on_result=results.append)
        task = asyncio.create_task(worker.run())
        await until(lambda: len(results) == 2, what="both settled")
        worker.stop()
        await task

    asyncio.run(go())
    by_id = {r.message.id: r for r in results}
    assert by_id[quick].outcome == "completed"
    assert by_id[hung].outcome == "dead" and isinstance(by_id[hung].error, HandlerTimeout)
    assert 0.35 <= by_id[hung].duration < 5.0  # its 0.4 s and a loaded machine's delays, not its 30 s
    assert cancelled == [hung]  # a coroutine, unlike a thread, is stopped
    [dead] = queue.dead_letters()
    assert dead.id == hung and dead.last_error is not None
    assert dead.last_error.startswith("HandlerTimeout: the handler was still running after 0.4 s")


def test_stop_finishes_in_flight_handlers_then_gives_back_the_rest(dsn: str) -> None:
    queue = make_queue(dsn, lock_ms=60000)
    quick = queue.enqueue({"sleep": 0.3})
    stuck = queue.enqueue({"sleep": 30})
    results: list[Result] = []

    async def handler(msg: Message) -> None:
        assert isinstance(msg.payload, dict)
        await asyncio.sleep(msg.payload["sleep"])

    async def go() -> float:
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=2, shutdown_grace=1.0,
                             on_result=results.append)
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.in_flight == 2, what="both handlers to start")
        t0 = time.monotonic()
        worker.stop()
        await task
        return time.monotonic() - t0

    took = asyncio.run(go())
    assert took < 8.0  # the grace (1 s) and a loaded machine's delays; not the default 10 s, nor the 30 s
    by_id = {r.message.id: r for r in results}
    assert (by_id[quick].outcome, by_id[quick].acknowledged) == ("completed", True)
    assert (by_id[stuck].outcome, by_id[stuck].acknowledged) == ("released", True)
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (1, 0)
    [again] = queue.dequeue(1)
    assert (again.id, again.attempts) == (stuck, 2)


def test_listen_wakes_it_and_no_listen_without_notify(dsn: str) -> None:
    make_queue(dsn, "loud")
    Queue(dsn, "quiet").create()
    handled: list[float] = []

    async def handler(msg: Message) -> None:
        handled.append(time.monotonic())

    def sessions() -> tuple[bool, int]:
        """Whether the worker sleeps after a poll (its loop's session idle after the look at the
        next due time that follows an empty poll), and how many of its sessions LISTEN."""
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FILTER (WHERE state = 'idle' AND query LIKE '%queue_next_due%'), "
                               "count(*) FILTER (WHERE query LIKE 'LISTEN%') FROM pg_stat_activity "
                               "WHERE datname = current_database() AND application_name = 'pgqueue-worker'").fetchone()
        assert row is not None
        return bool(row[0]), int(row[1])

    async def go(name: str, listens: int, wait: float) -> tuple[float | None, int]:
        worker = AsyncWorker(AsyncQueue(dsn, name), handler, poll_min=30, poll_max=30)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.7)  # polled once, sleeps 30 s (and LISTENs, if it does)
        deadline = time.monotonic() + 30  # (a loaded machine may take longer to get there)
        while True:
            polled, listeners = await asyncio.to_thread(sessions)
            if polled and listeners >= listens:
                break
            assert time.monotonic() < deadline, f"the worker on {name} never slept after a poll ({listeners} LISTEN)"
            await asyncio.sleep(0.05)
        t0 = time.monotonic()
        await asyncio.to_thread(Queue(dsn, name).enqueue, "wake up")
        try:
            await until(lambda: handled, wait)
            latency: float | None = handled[0] - t0
        except AssertionError:
            latency = None
        worker.stop()
        await task
        return latency, listeners

    latency, listeners = asyncio.run(go("loud", 1, 15))
    # woken by the notification: at once (a loaded machine's second or two), not at the poll 30 s on
    assert listeners == 1 and latency is not None and latency < 10.0
    handled.clear()
    latency, listeners = asyncio.run(go("quiet", 0, 1.5))
    assert listeners == 0 and latency is None  # no LISTEN: it waits for its next poll


def test_refuses_plain_functions_and_bad_options(dsn: str) -> None:
    with pytest.raises(TypeError, match="coroutine"):
        AsyncWorker(AsyncQueue(dsn), print)  # type: ignore[arg-type]
    # a registry whose default is a plain function would block the event loop: refused too
    with pytest.raises(TypeError, match="coroutine"):
        AsyncWorker(AsyncQueue(dsn), Tasks(default=print))
    AsyncWorker(AsyncQueue(dsn), Tasks())  # nothing registered: dead-letters every message
    Worker(Queue(dsn), Tasks())
    with pytest.raises(TypeError, match="AsyncWorker"):  # and the other way round
        Worker(Queue(dsn), Tasks(default=AsyncCall()))

    async def handler(msg: Message) -> None:
        pass

    with pytest.raises(ValueError):
        AsyncWorker(AsyncQueue(dsn), handler, concurrency=0)
    with pytest.raises(TypeError, match="AsyncQueue"):
        AsyncWorker(Queue(dsn), handler)  # type: ignore[arg-type]
    from pgqueue.errors import QueueNotFound

    with pytest.raises(QueueNotFound):
        asyncio.run(AsyncWorker(AsyncQueue(dsn, "nope"), handler).run())


ASYNC_MAIN = """
import asyncio, sys
from pgqueue import AsyncQueue, AsyncWorker

async def handle(msg):
    with open(msg.payload["mark"], "a") as f:
        f.write(f"{msg.id} {msg.attempts}\\n")
    await asyncio.sleep(msg.payload["sleep"])

asyncio.run(AsyncWorker(AsyncQueue(sys.argv[1], "jobs"), handle, concurrency=8).run())
"""


@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGINT, signal.SIGINT]], ids=["sigterm", "sigint_twice"])
def test_a_worker_process_stops_on_signals_and_leaves_nothing_leased(dsn: str, tmp_path: Path,
                                                                     signals: list[signal.Signals]) -> None:
    queue = make_queue(dsn, lock_ms=60000)
    mark = tmp_path / "marks"
    sleep = 0.8 if len(signals) == 1 else 60  # SIGTERM: they finish; SIGINT twice: given back
    ids = queue.enqueue_many([{"mark": str(mark), "sleep": sleep} for _ in range(4)])
    proc = subprocess.Popen([sys.executable, "-c", ASYNC_MAIN, dsn], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        while len(marks(mark)) < 4:
            assert time.monotonic() < deadline, "the handlers did not start"
            time.sleep(0.02)
        for sig in signals:
            proc.send_signal(sig)
            time.sleep(0.3)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    stats = queue.stats()
    if len(signals) == 1:
        assert (stats.ready, stats.leased, stats.total) == (0, 0, 0)
    else:
        assert (stats.ready, stats.leased) == (4, 0)
        assert sorted((m.id, m.attempts) for m in queue.dequeue(4)) == [(i, 2) for i in sorted(ids)]


HELD_HANDLERS = """
import asyncio, time

async def in_a_thread(msg):
    await asyncio.to_thread(time.sleep, 60)

async def deaf(msg):
    while True:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            pass
"""


@pytest.mark.parametrize("handler", ["in_a_thread", "deaf"])
def test_pgqueue_worker_exits_after_giving_up_a_handler_that_still_runs(dsn: str, tmp_path: Path,
                                                                         handler: str) -> None:
    """`pgqueue worker` with an async handler that runs on past the shutdown (in a thread of
    asyncio.to_thread, or ignoring its cancellation) logged "worker stopped" and stayed, deaf to
    further signals, until the handler ended: asyncio.run and the interpreter's exit waited for
    it (a review). It now exits a few seconds after the grace, its message given back."""
    queue = make_queue(dsn, lock_ms=60000)
    msg_id = queue.enqueue("x")
    (tmp_path / "held_handlers.py").write_text(HELD_HANDLERS)
    proc = subprocess.Popen([str(PGQUEUE), "worker", "--dsn", dsn, "jobs", f"held_handlers:{handler}",
                             "--shutdown-grace", "0.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    try:
        deadline = time.monotonic() + 20
        while queue.stats().leased == 0:
            assert time.monotonic() < deadline and proc.poll() is None, "the handler did not start"
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=20)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "worker stopped" in err and "exiting without waiting for 1 handler(s) the worker gave up" in err, err
    assert took < 8, (took, err)  # the grace 0.5 s, the give-up 2 s, the last waits 2 + 1 s
    stats = queue.stats()
    assert (stats.leased, stats.total) == (0, 1)
    assert [m.id for m in queue.dequeue(1)] == [msg_id]


class AsyncCall:
    """A handler object whose __call__ is a coroutine function."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def __call__(self, msg: Message) -> None:
        self.seen.append(msg.id)


def test_an_object_with_an_async_call_is_a_coroutine_handler(dsn: str) -> None:
    queue = make_queue(dsn)
    msg_id = queue.enqueue("x")
    handler = AsyncCall()
    results = Results()
    started = Started(AsyncWorker(AsyncQueue(dsn, "jobs"), handler, on_result=results))
    try:
        wait_for(lambda: results.items, what="the result")
    finally:
        started.stop()
    assert handler.seen == [msg_id] and results.outcomes() == Counter(completed=1)


def test_a_coroutine_handler_that_returns_an_awaitable_or_a_generator_fails_its_message(dsn: str) -> None:
    """``return send(msg)`` for ``return await send(msg)`` (or a generator returned by a coroutine
    handler): the work never ran, and the message was completed (a review). Its message fails
    with TypeError, the coroutine closed (no "never awaited" warning), and nothing it was to do
    runs; the Worker's contract for plain handlers, which returned such values already."""
    queue = make_queue(dsn, max_attempts=1)
    ran: list[str] = []

    async def send(msg: Message) -> None:
        ran.append(str(msg.payload))

    async def handler(msg: Message) -> object:
        if msg.payload == "forgot await":
            return send(msg)
        return (x for x in [msg])

    ids = {queue.enqueue("forgot await"): "coroutine", queue.enqueue("generator"): "generator"}
    results = Results()
    started = Started(AsyncWorker(AsyncQueue(dsn, "jobs"), handler, on_result=results))
    try:
        wait_for(lambda: len(results.items) == 2, what="both results")
    finally:
        started.stop()
    assert {r.message.id: r.outcome for r in results.items} == dict.fromkeys(ids, "dead")
    assert ran == []
    errors = {d.id: d.last_error or "" for d in queue.dead_letters()}
    assert errors[next(i for i, k in ids.items() if k == "coroutine")].startswith(
        "TypeError: the handler returned a coroutine, an awaitable that nothing awaits"), errors
    assert errors[next(i for i, k in ids.items() if k == "generator")].startswith(
        "TypeError: the handler returned a generator"), errors


class Stop(BaseException):
    """A BaseException that is neither KeyboardInterrupt nor SystemExit."""


def test_a_base_exception_from_a_handler_fails_its_message_and_the_worker_goes_on(dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=1)
    bad = queue.enqueue("bad")
    results = Results()

    async def handler(msg: Message) -> None:
        if msg.payload == "bad":
            raise Stop("out of here")

    worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=1, on_result=results)
    started = Started(worker)
    try:
        wait_for(lambda: results.items, timeout=30, what="the failure to be settled")
        good = queue.enqueue("good")  # its slot is free again
        wait_for(lambda: results.count("completed") == 1, timeout=30, what="the next message")
        assert worker.in_flight == 0
    finally:
        started.loop.call_soon_threadsafe(worker.stop)  # type: ignore[union-attr]
        started.thread.join(30)
    assert not started.thread.is_alive(), "the shutdown waited for a delivery that never finished"
    assert not started.errors
    by_id = {r.message.id: r for r in results.items}
    assert by_id[bad].outcome == "dead" and isinstance(by_id[bad].error, Stop)
    assert by_id[good].outcome == "completed"
    [dead] = queue.dead_letters()
    assert (dead.id, dead.last_error) == (bad, "Stop: out of here")


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_sys_exit_in_a_handler_fails_its_message_stops_the_worker_and_propagates(kind: str, dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=1, lock_ms=60000)
    ids = queue.enqueue_many(["exit", "busy"])
    release = threading.Event()
    results = Results()

    def handler(msg: Message) -> None:
        if msg.payload == "exit":
            time.sleep(0.2)  # "busy" is running by then
            sys.exit(3)
        release.wait(60)

    async def async_handler(msg: Message) -> None:
        if msg.payload == "exit":
            await asyncio.sleep(0.2)
            sys.exit(3)
        await asyncio.sleep(60)

    # "busy" runs for a minute, and so long a grace would let it: a stop that waited for it (or
    # for the grace) is told apart from a loaded machine's start of a few seconds
    worker: Worker | AsyncWorker = (
        Worker(queue, handler, concurrency=2, shutdown_grace=60, on_result=results) if kind == "Worker"
        else AsyncWorker(AsyncQueue(dsn, "jobs"), async_handler, concurrency=2, shutdown_grace=60,
                         on_result=results))
    started = Started(worker)
    try:
        started.thread.join(20)
        assert not started.thread.is_alive(), "the worker did not stop"
    finally:
        release.set()
    assert [type(e) for e in started.errors] == [SystemExit] and started.errors[0].args == (3,)
    by_id = {r.message.id: r.outcome for r in results.items}
    assert by_id == {ids[0]: "dead", ids[1]: "released"}
    [dead] = queue.dead_letters()
    assert (dead.id, dead.last_error) == (ids[0], "SystemExit: 3")
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (1, 0)


def test_a_cancelled_error_not_from_the_shutdown_fails_the_message(dsn: str) -> None:
    # Someone else cancelled what the handler awaited: a failure (retried, then dead-lettered),
    # not a release that redelivers it forever with its attempts unchanged.
    queue = make_queue(dsn, max_attempts=1)
    msg_id = queue.enqueue("x")
    results = Results()

    async def handler(msg: Message) -> None:
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.05, fut.cancel)
        await fut

    started = Started(AsyncWorker(AsyncQueue(dsn, "jobs"), handler, on_result=results))
    try:
        wait_for(lambda: results.items, what="the result")
    finally:
        started.stop()
    first = results.items[0]
    assert (first.message.id, first.outcome) == (msg_id, "dead"), first
    assert isinstance(first.error, asyncio.CancelledError)
    [dead] = queue.dead_letters()
    assert dead.last_error == "CancelledError"
    assert queue.stats().total == 0


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_handler_whose_own_task_is_cancelled_from_outside_is_given_back_with_or_without_a_timeout(
        dsn: str, timeout: float | None) -> None:
    """The module's docstring: a handler whose own task is cancelled from outside the worker is
    given back. With a timeout the handler runs in a task of its own, and such a cancellation
    failed its message with the CancelledError instead (a review)."""
    queue = make_queue(dsn, max_attempts=1)
    msg_id = queue.enqueue("x")
    results = Results()
    cancelled: list[int] = []

    async def handler(msg: Message) -> None:
        if not cancelled:  # the first delivery only: the message then comes back and completes
            me = asyncio.current_task()
            assert me is not None
            cancelled.append(msg.id)
            asyncio.get_running_loop().call_later(0.05, me.cancel)  # a library that holds the task
            await asyncio.sleep(5)

    started = Started(AsyncWorker(AsyncQueue(dsn, "jobs"), handler, on_result=results, timeout=timeout))
    try:
        wait_for(lambda: results.count("completed") == 1, what="the message completed")
    finally:
        started.stop()
    assert [(r.message.id, r.outcome) for r in results.items] == [(msg_id, "released"), (msg_id, "completed")]
    assert queue.dead_letters() == [] and queue.stats().total == 0


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_handler_that_ended_as_the_shutdown_came_keeps_its_outcome(dsn: str, timeout: float | None) -> None:
    """stop(now=True) that lands between a handler's end and its delivery's next turn (a second
    signal as a handler returns) finds the delivery unfinished; the handler ran to its end, so
    its message is acknowledged, with a timeout as without (with one, the handler runs in a task
    of its own, and the message was given back to run again, its attempt spent: a review)."""
    queue = make_queue(dsn, lock_ms=60000)
    msg_id = queue.enqueue("x")
    results: list[Result] = []
    worker: AsyncWorker | None = None

    async def handler(msg: Message) -> None:
        await asyncio.sleep(0.05)
        assert worker is not None
        worker.stop(now=True)  # the handler returns right after: the stop finds it unfinished

    async def main() -> None:
        nonlocal worker
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=1, handle_signals=False,
                             timeout=timeout, on_result=results.append)
        await asyncio.wait_for(worker.run(), 30)

    asyncio.run(main())
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results] == [(msg_id, "completed", True)]
    assert queue.stats().total == 0


async def swallowing_cancellations(seconds: float, cancelled: asyncio.Event | None = None) -> float:
    """A handler's body that runs on through every cancellation for ``seconds`` (setting
    ``cancelled`` at each); returns how long it ran."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            if cancelled is not None:
                cancelled.set()
    return time.monotonic() - started


def test_a_shutdown_within_the_grace_after_a_timeout_still_fails_the_message(dsn: str) -> None:
    """A handler past its timeout that swallows the cancellation is let go 2 s later, its
    message failed with HandlerTimeout. A shutdown within those 2 s gave the message back
    instead, so a message that kept timing out escaped its dead letter whenever a deploy came
    then (a review); the Worker fails it at its deadline whatever comes after. Now it is failed,
    and the shutdown does not wait out the 2 s for it."""
    queue = make_queue(dsn, max_attempts=1, lock_ms=60_000)
    hung = queue.enqueue("swallows")
    results: list[Result] = []
    cancelled = asyncio.Event()

    async def handler(msg: Message) -> None:
        await swallowing_cancellations(8, cancelled)

    async def go() -> float:
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, timeout=0.3, on_result=results.append,
                             handle_signals=False, listen=False, shutdown_grace=0.2)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(cancelled.wait(), 10)  # the timeout cancelled it; it runs on
        stopping = time.monotonic()
        worker.stop()
        await task
        return time.monotonic() - stopping

    took = asyncio.run(go())
    [result] = results
    assert result.message.id == hung and result.outcome == "dead" and isinstance(result.error, HandlerTimeout)
    [dead] = queue.dead_letters()
    assert dead.last_error is not None and dead.last_error.startswith("HandlerTimeout")
    assert took < 1.8, took  # (not the 2 s the handler would have been waited for)


class _HoldLeases(Relay):
    """A relay that holds back, for ``hold`` seconds, each answer of the server that carries a
    message whose payload holds MARKER (a lease the server has committed), after setting
    ``holding``."""

    MARKER = b"held-back-lease"

    def __init__(self, server: Server, hold: float) -> None:
        super().__init__(server)
        self.hold = hold
        self.holding = threading.Event()

    def passing(self, data: bytes, answers: bool) -> bytes | None:
        if answers and (self.MARKER in data or self.MARKER.hex().encode() in data):  # (bytea as text: hex)
            self.holding.set()
            time.sleep(self.hold)
        return None


def test_a_run_cancelled_while_its_dequeue_is_answered_gives_the_messages_back(pg_server: Server,
                                                                               dsn: str) -> None:
    """The run cancelled (task.cancel(), as a TaskGroup, a timeout or asyncio.run on Ctrl-C do)
    after the server committed a dequeue and before its answer arrived: the worker waits for the
    answer, gives the messages it leased back unstarted and stops; the cancellation goes on. (Its
    call was cancelled with it and psycopg dropped the answer: the messages stayed leased by no
    one until their lease ran out, an attempt spent: a review.)"""
    queue = make_queue(dsn, lock_ms=600_000, notify=False)
    relay = _HoldLeases(pg_server, hold=1.0)
    relayed = make_conninfo(dsn, host="127.0.0.1", port=str(relay.port))
    started: list[int] = []

    async def handler(msg: Message) -> None:
        started.append(msg.id)

    async def go() -> None:
        worker = AsyncWorker(AsyncQueue(relayed, "jobs"), handler, concurrency=4, handle_signals=False,
                             listen=False, poll_max=0.1)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0.5)  # started, polling an empty queue
        queue.enqueue_many([_HoldLeases.MARKER.decode()] * 4)
        assert await asyncio.to_thread(relay.holding.wait, 15), "no lease answered"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(go())
    finally:
        relay.close()
    stats = queue.stats()
    assert (stats.ready, stats.leased) == (4, 0), stats
    assert not started


def test_a_run_cancelled_during_the_graceful_stop_gives_the_running_messages_back(dsn: str) -> None:
    """stop(), then the caller's own shutdown timeout cancels run() while the handlers still have
    their grace: the worker stops at once as stop(now=True) does (the handlers cancelled, their
    messages given back) and then the cancellation goes on. (Raised into the grace's wait, it
    skipped the shutdown: the messages stayed leased by no one, and the handlers ran on after
    run() had returned: a review.)"""
    queue = make_queue(dsn, lock_ms=600_000)
    queue.enqueue_many([1, 2, 3, 4])
    finished: list[int] = []

    async def handler(msg: Message) -> None:
        await asyncio.sleep(3)
        finished.append(msg.id)

    async def go() -> None:
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=4, shutdown_grace=30,
                             handle_signals=False)
        task = asyncio.create_task(worker.run())
        await until(lambda: worker.in_flight == 4, what="four messages in flight")
        worker.stop()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(task, 0.5)
        stats = await asyncio.to_thread(queue.stats)
        assert (stats.ready, stats.leased) == (4, 0), stats
        assert worker.in_flight == 0
        await asyncio.sleep(3.5)  # past the handlers' end, had they run on
        assert not finished

    asyncio.run(go())


def test_a_run_cancelled_during_its_start_up_check_leaves_no_thread(dsn: str) -> None:
    """run() cancelled while its start-up check waits on a lock: the check, on its thread, ends
    when the lock goes, and the stop's watchdog thread ends with it. (A check that succeeded
    after the cancellation left the watchdog polling for the rest of the process: a review.)"""
    make_queue(dsn)

    async def handler(msg: Message) -> None:
        pass

    async def go() -> None:
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, handle_signals=False)
        with psycopg.connect(dsn) as locker:
            locker.execute("LOCK TABLE pgqueue.queue")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(worker.run(), 0.5)
            assert any(t.name == "pgqueue-stop-watch" for t in threading.enumerate())
        await until(lambda: not any(t.name == "pgqueue-stop-watch" for t in threading.enumerate()),
                    timeout=10, what="the stop's watchdog to end")

    asyncio.run(go())


def test_a_handler_that_swallows_its_timeouts_cancellation_is_let_go(dsn: str) -> None:
    """Past its timeout a handler's task is cancelled; one that swallows the cancellation and
    runs on is let go 2 s later (the shutdown's grace for the same): its message is failed with
    HandlerTimeout and its slot freed, as the Worker gives up a thread. (Awaited inline, it held
    the message, its heartbeats and its slot until it returned: a review.)"""
    queue = make_queue(dsn, max_attempts=1, lock_ms=60_000)
    hung = queue.enqueue("swallows")
    results: list[Result] = []
    ran_on: list[float] = []

    async def handler(msg: Message) -> None:
        ran_on.append(await swallowing_cancellations(8))

    async def go() -> None:
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, timeout=0.3, on_result=results.append,
                             handle_signals=False, listen=False)
        task = asyncio.create_task(worker.run())
        await until(lambda: results, timeout=7.5, what="the message failed before its handler ended")
        assert not ran_on and worker.in_flight == 0
        worker.stop()
        await task

    asyncio.run(go())
    [result] = results
    assert result.message.id == hung and result.outcome == "dead" and isinstance(result.error, HandlerTimeout)
    assert 2.2 <= result.duration < 6.0, result.duration  # its 0.3 s, then 2 s of grace
