"""One worker core (issue 16): Worker (threads) and AsyncWorker (asyncio) drive the one logic of
pgqueue._worker_core, against a real server. Neither carries logic of its own; a plain-function handler and a
coroutine handler given the same messages end alike; a hung thread past its timeout has its
message failed and holds up neither the other handlers nor the shutdown (in a process sent
SIGTERM, too); the signal handlers run() replaced are back however it ends; stop() works from
another thread, even before run(); a KeyboardInterrupt with handle_signals=False gives the
messages back before it propagates; a Queue over a caller's connection still feeds a Worker."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import AsyncQueue, AsyncWorker, Message, Queue, _sql
from pgqueue._core import Call
from pgqueue._worker_core import Delivery, WorkerCore
from pgqueue.errors import QueueNotFound
from pgqueue.worker import HandlerTimeout, Worker
from test_worker import Results, Started, make_queue, running, start_worker_process, wait_for
from test_worker_shutdown import finish, make_worker, stop_once
from worker_handlers import marks


def test_both_workers_drive_the_one_core_and_carry_no_logic_of_their_own() -> None:
    # The logic is the core's steps (generators yielding calls and waits); a worker provides the
    # hooks and drives the steps (threads or asyncio). A step copied into a worker fails this.
    assert issubclass(Worker, WorkerCore) and issubclass(AsyncWorker, WorkerCore)
    steps = {name for name, fn in vars(WorkerCore).items() if inspect.isgeneratorfunction(fn)}
    assert {"_run_steps", "_loop_until_stopped", "_drain", "_complete_and_fetch", "_fetch", "_settle",
            "_fail", "_release", "_until_due", "_after_round", "_configure"} <= steps
    for cls in (Worker, AsyncWorker):
        own = {name for name in vars(cls) if not (name.startswith("__") and name.endswith("__"))}
        assert not own & steps, (cls.__name__, own & steps)
        assert {"run", "_start", "_abandon", "_wake_up"} <= own, cls.__name__
        assert not {"_completed", "_finish", "_report", "_held", "_still_held", "stop"} & own, cls.__name__


def _scenario(queue: Queue) -> dict[str, int]:
    return {name: queue.enqueue({"do": name}) for name in ("ok", "raise", "reject", "hang", "ok2")}


def _behave(msg: Message, release: threading.Event) -> None:
    from pgqueue import Reject

    assert isinstance(msg.payload, dict)
    do = msg.payload["do"]
    if do == "raise":
        raise ValueError("boom")
    if do == "reject":
        raise Reject("not for us")
    if do == "hang":
        release.wait(30)


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_plain_and_a_coroutine_handler_end_alike(kind: str, dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=1)
    ids = _scenario(queue)
    release = threading.Event()
    results = Results()
    # the limit counts from the handler's start on the loop: long enough for the quick ones to end
    # in even on a loaded machine, that starts their threads late
    if kind == "Worker":
        worker: Worker | AsyncWorker = Worker(queue, lambda msg: _behave(msg, release), concurrency=2,
                                              timeout=3.0, on_result=results)
    else:
        async def handler(msg: Message) -> None:
            if isinstance(msg.payload, dict) and msg.payload["do"] == "hang":
                await asyncio.sleep(30)
            _behave(msg, release)

        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=2, timeout=3.0, on_result=results)
    try:
        with running(worker):
            wait_for(lambda: len(results.items) == 5, what="five results")
    finally:
        release.set()
    by_id = {r.message.id: r for r in results.items}
    assert {name: (by_id[i].outcome, by_id[i].acknowledged) for name, i in ids.items()} == {
        "ok": ("completed", True), "raise": ("dead", True), "reject": ("dead", True),
        "hang": ("dead", True), "ok2": ("completed", True)}
    assert isinstance(by_id[ids["hang"]].error, HandlerTimeout)
    errors = {d.id: d.last_error for d in queue.dead_letters()}
    assert errors[ids["raise"]] == "ValueError: boom"
    assert errors[ids["reject"]] == "Reject: not for us"
    assert str(errors[ids["hang"]]).startswith("HandlerTimeout: the handler was still running after 3 s")


async def _grouped(do: str) -> None:
    """Raise a group of exceptions, as an asyncio.TaskGroup does with its tasks' errors."""
    from pgqueue import Reject

    async def reject() -> None:
        raise Reject("not for us")

    if do == "tasked":
        async with asyncio.TaskGroup() as tg:
            tg.create_task(reject())
    if do == "nested":
        raise ExceptionGroup("outer", [ExceptionGroup("inner", [Reject("one")]), Reject("two")])
    if do == "mixed":
        raise ExceptionGroup("mixed", [Reject("three"), ValueError("four")])


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_group_of_rejects_dead_letters_at_once_and_a_mixed_group_fails(kind: str, dsn: str) -> None:
    """A Reject raised inside an asyncio.TaskGroup reaches the worker as an ExceptionGroup: a group
    whose leaves are all Rejects dead-letters the message at once, with the Rejects' texts; one that
    mixes a Reject with another error fails it (a retry)."""
    queue = make_queue(dsn, max_attempts=5, retry_base_ms=3_600_000, retry_cap_ms=3_600_000)
    ids = {name: queue.enqueue({"do": name}) for name in ("tasked", "nested", "mixed")}
    results = Results()

    def do(msg: Message) -> str:
        assert isinstance(msg.payload, dict)
        return str(msg.payload["do"])

    if kind == "Worker":
        worker: Worker | AsyncWorker = Worker(queue, lambda msg: asyncio.run(_grouped(do(msg))), on_result=results)
    else:
        async def handler(msg: Message) -> None:
            await _grouped(do(msg))

        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, on_result=results)
    with running(worker):
        wait_for(lambda: len(results.items) == 3, what="three results")
    by_id = {r.message.id: r for r in results.items}
    assert {name: (by_id[i].outcome, by_id[i].acknowledged) for name, i in ids.items()} == {
        "tasked": ("dead", True), "nested": ("dead", True), "mixed": ("retried", True)}
    assert isinstance(by_id[ids["tasked"]].error, ExceptionGroup)  # the hook sees what was raised
    dead = {d.id: (d.attempts, d.last_error) for d in queue.dead_letters()}
    assert dead == {ids["tasked"]: (1, "Reject: not for us"), ids["nested"]: (1, "Reject: one; Reject: two")}
    assert queue.stats().scheduled == 1
    # the failed group's last_error says what it held, not only how many
    assert [(p.id, p.last_error) for p in queue.peek()] == [
        (ids["mixed"], "ExceptionGroup: mixed (2 sub-exceptions): Reject: three; ValueError: four")]


def test_a_hung_thread_past_its_timeout_does_not_hold_up_the_shutdown(dsn: str) -> None:
    queue = make_queue(dsn, lock_ms=60000, retry_base_ms=3600000, retry_cap_ms=3600000)
    hung = queue.enqueue({"limit": 0.3})  # hangs, times out: failed, its thread left behind
    stuck = queue.enqueue({"limit": None})  # hangs, no limit: still running at the stop
    release = threading.Event()
    started: list[int] = []

    def handler(msg: Message) -> None:
        started.append(msg.id)
        release.wait(60)

    def limit(msg: Message) -> float | None:
        assert isinstance(msg.payload, dict)
        return msg.payload["limit"]  # type: ignore[no-any-return]

    results = Results()
    worker = Worker(queue, handler, concurrency=2, timeout=limit, shutdown_grace=1.0, on_result=results)
    try:
        with running(worker):
            wait_for(lambda: results.count("retried") == 1 and len(started) == 2, what="the timeout")
            t0 = time.monotonic()
            worker.stop()
        took = time.monotonic() - t0
        assert not release.is_set()  # both handler threads are still blocked
    finally:
        release.set()
    # the grace (for the stuck one), not the hung thread's minute nor the default grace of 10 s
    # (a loaded machine: seconds more)
    assert 0.9 <= took < 8, took
    by_id = {r.message.id: r for r in results.items}
    assert (by_id[hung].outcome, type(by_id[hung].error)) == ("retried", HandlerTimeout)
    assert (by_id[stuck].outcome, by_id[stuck].acknowledged) == ("released", True)
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (1, 1, 0)  # stuck back now, hung in an hour
    assert sorted(started) == sorted([hung, stuck])


def test_a_worker_process_with_a_timed_out_thread_exits_at_once_on_sigterm(dsn: str, tmp_path: Path) -> None:
    queue = make_queue(dsn, lock_ms=60000, retry_base_ms=3600000, retry_cap_ms=3600000)
    mark = str(tmp_path / "marks")
    msg_id = queue.enqueue({"mark": mark, "sleep": 120})
    proc = start_worker_process(dsn, "jobs", "--timeout", "0.5", "--shutdown-grace", "60")
    try:
        wait_for(lambda: marks(mark), timeout=15, what="the handler to start")
        with psycopg.connect(dsn) as conn:
            wait_for(lambda: conn.execute("SELECT last_error FROM pgqueue.message WHERE id = %s",
                                          (msg_id,)).fetchone() != (None,), what="the timeout's failure")
        time.sleep(0.2)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        err = finish(proc, 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # the handler's thread sleeps on for two minutes: neither the grace (a minute) nor the exit
    # waits for it (a loaded machine's exit may take seconds)
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 1, 0)


@contextmanager
def sentinel_signal_handlers() -> Iterator[Callable[[int, object], None]]:
    """Put a handler of our own on SIGINT and SIGTERM for the block; restore the real ones after."""
    assert threading.current_thread() is threading.main_thread()

    def ours(signum: int, frame: object) -> None:
        raise AssertionError("the worker's handler should be in place")

    saved = {sig: signal.signal(sig, ours) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield ours
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous)


def _run_on_main_thread(worker: Worker | AsyncWorker) -> None:
    if isinstance(worker, AsyncWorker):
        asyncio.run(worker.run())
    else:
        worker.run()


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_signal_handlers_are_restored_however_run_ends(kind: str, dsn: str) -> None:
    with sentinel_signal_handlers() as ours:
        # a queue that does not exist: run() raises at start-up
        with pytest.raises(QueueNotFound):
            _run_on_main_thread(make_worker(kind, dsn, print))
        assert signal.getsignal(signal.SIGINT) is ours and signal.getsignal(signal.SIGTERM) is ours
        # a queue dropped under the running worker: run() raises from the loop
        queue = make_queue(dsn)
        worker = make_worker(kind, dsn, lambda msg: queue.drop(), poll_min=0.05, poll_max=0.1)
        during: list[object] = []

        def later() -> None:  # while run() runs on this (main) thread
            # (once it has put its handler in place: a loaded machine may hold the main thread up
            # past the timer; 30 s at most, then the assert below tells)
            deadline = time.monotonic() + 30
            while signal.getsignal(signal.SIGTERM) is ours and time.monotonic() < deadline:
                time.sleep(0.01)
            during.append(signal.getsignal(signal.SIGTERM))
            queue.enqueue("drop it")

        threading.Timer(0.5, later).start()
        with pytest.raises(QueueNotFound):
            _run_on_main_thread(worker)
        assert during and during[0] is not ours  # the worker's was in place while it ran
        assert signal.getsignal(signal.SIGINT) is ours and signal.getsignal(signal.SIGTERM) is ours


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_stop_from_another_thread_even_before_run(kind: str, dsn: str) -> None:
    queue = make_queue(dsn)
    queue.enqueue("never fetched")
    handled: list[int] = []
    worker = make_worker(kind, dsn, lambda msg: handled.append(msg.id))
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    stopper.join()
    started = Started(worker)
    started.thread.join(10)
    assert not started.thread.is_alive() and not started.errors
    assert handled == [] and queue.stats().ready == 1
    # and while it runs, from yet another thread than the one that started it
    worker = make_worker(kind, dsn, lambda msg: handled.append(msg.id))
    started = Started(worker)
    wait_for(lambda: handled, what="the message")
    threading.Thread(target=worker.stop).start()
    started.thread.join(10)
    assert not started.thread.is_alive() and not started.errors


def test_keyboard_interrupt_without_signal_handlers_gives_back_then_propagates(dsn: str) -> None:
    assert threading.current_thread() is threading.main_thread()
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default handler in this run")
    queue = make_queue(dsn, lock_ms=60000)
    msg_id = queue.enqueue("held")
    holding, release, cancelled = threading.Event(), threading.Event(), threading.Event()

    def handler(msg: Message) -> None:
        holding.set()
        release.wait(30)

    def interrupt() -> None:
        # once the handler holds the message (a loaded machine's start may take seconds; 30 s
        # at most, then the asserts tell), unless run() has returned meanwhile
        holding.wait(30)
        if not cancelled.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    worker = Worker(queue, handler, handle_signals=False)
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run()
    finally:
        cancelled.set()
        holding.set()
        release.set()
    stats = queue.stats()  # given back at once (a defer), not left leased for a minute
    assert (stats.ready, stats.leased) == (1, 0)
    [again] = queue.dequeue(1)
    assert (again.id, again.attempts) == (msg_id, 2)


def test_a_worker_fed_a_queue_on_a_callers_connection(dsn: str) -> None:
    make_queue(dsn)
    results = Results()
    with psycopg.connect(dsn, autocommit=True) as conn:
        queue = Queue(conn, "jobs")
        ids = queue.enqueue_many(["a", "b", "c"])
        with running(Worker(queue, lambda msg: None, on_result=results)):
            wait_for(lambda: results.count("completed") == 3, what="three completions")
        # the worker used connections of its own, from the connection's conninfo
        assert not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert sorted(r.message.id for r in results.items) == sorted(ids)


def test_run_inside_a_running_event_loop_says_what_to_do_instead(dsn: str) -> None:
    queue = make_queue(dsn)
    queue.enqueue("x")
    handled: list[int] = []
    worker = Worker(queue, lambda msg: handled.append(msg.id))

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="AsyncWorker.*asyncio.to_thread"):
            worker.run()
        # as the message says: on a thread, the same worker runs (it was not claimed), stopped
        # once it has handled the message (a loaded machine's start may take seconds)
        stop_once(worker, lambda: handled)
        await asyncio.to_thread(worker.run)

    asyncio.run(inside())
    assert len(handled) == 1


def test_a_long_timeout_does_not_keep_settled_messages_alive(dsn: str) -> None:
    # The Worker keeps handler deadlines in a heap; deliveries settled long before their
    # deadline must leave it, or a busy worker with timeout=3600 holds an hour of messages.
    queue = make_queue(dsn)
    queue.enqueue_many([f"m{i}" for i in range(400)])
    results = Results()
    worker = Worker(queue, lambda msg: None, concurrency=4, timeout=3600, on_result=results)
    with running(worker):
        wait_for(lambda: results.count("completed") == 400, timeout=30, what="400 completions")
        held = len(worker._deadlines)
    assert held <= 2 * 4 + 64 + 4, held  # the bound of the pruning, plus one batch


def worker_of(kind: str, dsn: str, queue: Queue, handler: Callable[[Message], None],
              coroutine: Callable[[Message], Any], options: dict[str, Any]) -> Worker | AsyncWorker:
    """A Worker running ``handler`` on ``queue``, or an AsyncWorker running ``coroutine`` on an
    AsyncQueue of the same queue."""
    if kind == "Worker":
        return Worker(queue, handler, **options)
    return AsyncWorker(AsyncQueue(dsn, queue.name), coroutine, **options)


@pytest.mark.parametrize("first_ends", ["raises", "returns"])
@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_message_delivered_again_to_the_worker_holding_it_is_taken_over_not_run_twice(
        kind: str, first_ends: str, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    # The delivery's heartbeats come late (held back here): its 1.5 s lease runs out while its
    # handler still runs and the same worker dequeues the message again (attempts 2, a new
    # token). The delivery in hand takes the new lease over (WorkerCore._adopt): the handler is
    # not run a second time beside the first (session 43: it was, as a second delivery held
    # apart), its heartbeats renew the new lease, its outcome is settled with the new token and
    # accepted, and the slot of the second run stays free for other messages.
    queue = make_queue(dsn, retry_base_ms=3600000, retry_cap_ms=3600000)
    msg_id = queue.enqueue("twice")
    release = threading.Event()
    lock = threading.Lock()
    started: list[tuple[int, int]] = []

    def enter(msg: Message) -> None:
        with lock:
            started.append((msg.id, msg.attempts))

    def leave(msg: Message) -> None:
        if msg.id == msg_id and first_ends == "raises":
            raise RuntimeError("the delivery failed")

    def handler(msg: Message) -> None:
        enter(msg)
        if msg.id == msg_id:
            release.wait(20)
        leave(msg)

    async def coroutine(msg: Message) -> None:
        enter(msg)
        deadline = time.monotonic() + 20
        while msg.id == msg_id and not release.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        leave(msg)

    results = Results()
    # (a lease of 1.5 s, renewed every 0.5 s: a beat a loaded machine holds up for less than a
    # second does not let the new lease run out too)
    options: dict[str, object] = dict(concurrency=2, lock_ms=1500, poll_min=0.02, poll_max=0.05,
                                      shutdown_grace=1.0, on_result=results)
    worker = worker_of(kind, dsn, queue, handler, coroutine, options)
    held = worker._held
    worker._held = lambda: [m for m in held() if m.attempts > 1]  # type: ignore[method-assign]

    def taken_over() -> list[str]:
        return [r.getMessage() for r in caplog.records if "leased again" in r.getMessage()]

    try:
        with running(worker):
            wait_for(taken_over, what="the second lease taken over")
            assert worker.in_flight == 1  # one delivery, its handler running once
            other = queue.enqueue("the free slot takes it")
            wait_for(lambda: results.count("completed") >= 1, what="the other message")
            assert (other, 1) in started
            time.sleep(2.5)  # over a lease and a half: the delivery's new lease is renewed
            assert len(taken_over()) == 1 and queue.stats().leased == 1
            release.set()
            wait_for(lambda: len(results.items) == 2, what="the delivery's outcome")
    finally:
        release.set()
    [outcome] = [(r.outcome, r.acknowledged, r.message.attempts) for r in results.items if r.message.id == msg_id]
    assert outcome == ("retried" if first_ends == "raises" else "completed", True, 2)
    assert [s for s in started if s[0] == msg_id] == [(msg_id, 1)]
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 1 if first_ends == "raises" else 0, 0)
    assert not queue.dead_letters()


@pytest.mark.parametrize("end", ["raises", "stopped now"])
@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_stale_failure_or_give_back_is_reported_not_acknowledged(kind: str, end: str, dsn: str) -> None:
    """A handler outlives its lease (its heartbeats held back here) and another consumer takes
    the message (attempts 2). The worker's failure (the handler raises) or give-back (stopped at
    once) with the old token changes nothing, and its Result must say so: acknowledged False.
    Reporting True there went unnoticed (mutations of _fail and _release that survived); the
    other consumer's completion of its delivery is accepted."""
    queue = make_queue(dsn, lock_ms=1000, retry_base_ms=3600000, retry_cap_ms=3600000)
    msg_id = queue.enqueue("taken over")
    entered, taken = threading.Event(), threading.Event()

    def handler(msg: Message) -> None:
        entered.set()
        taken.wait(30)
        if end == "raises":
            raise RuntimeError("too late")

    async def coroutine(msg: Message) -> None:
        entered.set()
        deadline = time.monotonic() + 30
        while not taken.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if end == "raises":
            raise RuntimeError("too late")

    results = Results()
    # concurrency=1: the worker, its slot taken, does not lease the message again itself
    options: dict[str, object] = dict(concurrency=1, lock_ms=1000, poll_min=0.02, poll_max=0.05,
                                      shutdown_grace=1.0, on_result=results)
    worker = worker_of(kind, dsn, queue, handler, coroutine, options)
    worker._held = lambda: []  # type: ignore[method-assign]  # no heartbeats: the lease runs out
    other = Queue(dsn, "jobs")
    got: list[Message] = []

    def taken_over() -> bool:
        got.extend(other.dequeue(1, lock_ms=60000))
        return bool(got)

    started = Started(worker)
    try:
        assert entered.wait(15), "the handler did not start"
        wait_for(taken_over, timeout=15, what="the lease to run out and the other consumer to take the message")
        if end == "raises":
            taken.set()
            wait_for(lambda: results.items, what="the stale failure's result")
        else:
            worker.stop(now=True)
            started.thread.join(20)
            assert not started.thread.is_alive(), "the worker did not stop"
    finally:
        taken.set()
        started.stop()
    assert not started.errors, started.errors
    [again] = got
    assert (again.id, again.attempts) == (msg_id, 2)
    [result] = results.items
    assert (result.message.id, result.message.attempts, result.outcome, result.acknowledged) == (
        msg_id, 1, "retried" if end == "raises" else "released", False)
    assert other.complete(again)  # the other delivery's outcome is the one that counts
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 0, 0)
    other.close()


def test_two_finished_deliveries_of_one_message_are_acknowledged_in_turn_each_with_its_token() -> None:
    # The batch acknowledgements answer stale messages by id: both deliveries of one message in
    # one batch would read the live one as lost too. Driven without a server: the steps yield calls.
    def message(msg_id: int, attempts: int) -> Message:
        return Message(id=msg_id, queue="jobs", payload=None, attempts=attempts, state=None, dequeue_at=None,
                       created_at=datetime.now(timezone.utc), locked_until=None, content=b"", content_type=None)

    results = Results()
    core = WorkerCore("jobs", "dbname=unused", print, concurrency=3, batch_size=None, lock_ms=None, listen=False,
                      poll_min=0.05, poll_max=1.0, shutdown_grace=1.0, on_result=results, timeout=None,
                      handle_signals=False)
    stale, live, other = Delivery(message(7, 1)), Delivery(message(7, 2)), Delivery(message(8, 1))
    for d in (stale, live, other):
        core._hold(d)
    assert core.in_flight == 3
    core._finished = [stale, live, other]
    for d in core._finished:
        d.finished = time.monotonic()
    step = core._settle()
    calls: list[tuple[object, object]] = []
    call = next(step)
    try:
        while True:
            assert isinstance(call, Call)
            ids, attempts = call.params["ids"], call.params["attempts"]
            calls.append((ids, attempts))
            tokens = list(zip(str(ids).strip("{}").split(","), str(attempts).strip("{}").split(",")))
            # the server's answer: the stale messages by id, (7, 1) the stale token
            call = step.send(call.result([([7] if ("7", "1") in tokens else [],)]))
    except StopIteration:
        pass
    assert calls == [("{7,8}", "{1,1}"), ("{7}", "{2}")]
    assert [(r.message.attempts, r.message.id, r.acknowledged) for r in results.items] == [
        (1, 7, False), (1, 8, True), (2, 7, True)]
    assert core.in_flight == 0


def _core_with_a_finished_delivery() -> tuple[WorkerCore, Delivery]:
    """A worker core (no server: its steps are driven by hand) holding one delivery, finished."""
    core = WorkerCore("jobs", "dbname=unused", print, concurrency=1, batch_size=None, lock_ms=None, listen=False,
                      poll_min=0.05, poll_max=1.0, shutdown_grace=1.0, on_result=Results(), timeout=None,
                      handle_signals=False)
    d = Delivery(Message(id=7, queue="jobs", payload=None, attempts=1, state=None, dequeue_at=None,
                         created_at=datetime.now(timezone.utc), locked_until=None, content=b"", content_type=None))
    core._hold(d)
    d.finished = time.monotonic()
    core._finished = [d]
    return core, d


@pytest.mark.parametrize("end", ["50 in a row", "stopped now", "5 s"])
def test_the_shutdowns_acknowledgement_gives_up_on_conflicts_without_reconnecting(
        end: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # The shutdown makes an acknowledgement that conflicted again (tests/test_own_connections.py),
    # but not for ever: each call is timed on its own by the stop's watchdog (a review). After
    # 50 in a row, a further stop(now=True), or 5 s in all, it warns and leaves the message to
    # its lease, without taking the conflict for a lost connection (psycopg's error for it is an
    # OperationalError): no reconnect, no "on a new connection".
    import logging

    from pgqueue import _worker_core

    if end == "5 s":
        monkeypatch.setattr(_worker_core, "_SHUTDOWN_CONFLICTS_FOR", 0.0)
    core, d = _core_with_a_finished_delivery()
    monkeypatch.setattr(core, "_wake_up", lambda: None)  # (a worker's hook: no loop to wake here)
    step = core._settle_quietly()
    calls = 0
    with caplog.at_level(logging.DEBUG, logger="pgqueue.worker"), pytest.raises(StopIteration):
        what = next(step)
        while True:
            if isinstance(what, Call):
                calls += 1
                if end == "stopped now" and calls == 4:
                    core.stop(now=True)
                what = step.throw(psycopg.errors.SerializationFailure("could not serialize access"))
            else:
                what = step.send(None)  # a Wait: no time passes here
    assert calls == {"50 in a row": 51, "stopped now": 4, "5 s": 1}[end]
    assert core._finished == [d]  # not acknowledged: its lease runs out
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "pgqueue.worker"]
    assert [m for level, m in records if level >= logging.INFO] == [
        f"could not acknowledge during shutdown: could not serialize access ({calls} conflicts in a row)"]


@pytest.mark.parametrize(("error", "in_doubt"), [
    (psycopg.errors.SerializationFailure("could not serialize access due to concurrent update"), False),
    (psycopg.errors.DeadlockDetected("deadlock detected"), False),
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),
    (KeyboardInterrupt(), True),
])
def test_an_acknowledgement_that_conflicted_is_not_in_doubt(error: BaseException, in_doubt: bool,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    # A conflict (40001, 40P01) rolled the call back whole: an acknowledgement sent again and
    # refused as stale says the lease ran out, not "the interrupted call was committed" (a
    # review). A lost connection or an interruption leaves the call's outcome unknown. Driven
    # without a server, as above.
    import logging

    core, d = _core_with_a_finished_delivery()
    step = core._settle()
    assert isinstance(next(step), Call)
    with pytest.raises(type(error)):
        step.throw(error)
    assert core._finished == [d] and d.in_doubt is in_doubt  # kept, to be acknowledged again
    step = core._settle()
    call = next(step)
    assert isinstance(call, Call)
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"), pytest.raises(StopIteration):
        step.send(call.result([([7],)]))  # sent again: refused as stale
    [warning] = [r.getMessage() for r in caplog.records if r.name == "pgqueue.worker"]
    assert ("the interrupted call was committed" in warning) is in_doubt, warning
    assert ("after its lease ran out" in warning) is not in_doubt, warning


def _msg(msg_id: int, attempts: int = 1) -> Message:
    """A leased message as the server hands it out (no server: the steps are driven by hand)."""
    return Message(id=msg_id, queue="jobs", payload=None, attempts=attempts, state=None, dequeue_at=None,
                   created_at=datetime.now(timezone.utc), locked_until=None, content=b"", content_type=None)


class _HandCore(WorkerCore):
    """A worker core without a server nor handlers: the messages it would start are taken in
    hand and recorded, and there is no loop to wake."""

    def __init__(self, concurrency: int, on_result: Results) -> None:
        super().__init__("jobs", "dbname=unused", print, concurrency=concurrency, batch_size=None, lock_ms=None,
                         listen=False, poll_min=0.05, poll_max=1.0, shutdown_grace=1.0, on_result=on_result,
                         timeout=None, handle_signals=False)
        self.started_messages: list[Message] = []

    def _start(self, messages: list[Message]) -> None:
        for msg in self._adopt(messages):
            self._hold(Delivery(msg))
            self.started_messages.append(msg)

    def _wake_up(self) -> None:
        pass


def _finished_in_hand(core: WorkerCore, msgs: list[Message], *, queued: bool = True) -> list[Delivery]:
    """Hold a delivery of each message, its handler returned (queued for settling unless not ``queued``)."""
    deliveries = [Delivery(m) for m in msgs]
    for d in deliveries:
        core._hold(d)
        d.finished = time.monotonic()
    if queued:
        core._finished += deliveries
    return deliveries


def _answer(call: Call[Any]) -> object:
    """What an empty queue's server answers a call of the worker's loop: nothing stale, nothing new."""
    rows: dict[str, list[tuple[object, ...]]] = {
        _sql.HEARTBEAT_BATCH: [(None,)], _sql.COMPLETE_BATCH: [(None,)], _sql.DEQUEUE: [],
        _sql.COMPLETE_AND_DEQUEUE: [], _sql.NEXT_DUE_IN: [(None,)]}
    return call.result(rows[call.query])


def test_a_stale_completion_in_the_acknowledge_and_fetch_call_is_reported_not_acknowledged(
        caplog: pytest.LogCaptureFixture) -> None:
    """The acknowledgement made in the statement of the next fetch (message_complete_and_dequeue)
    answers the stale tokens as rows of their own (stale true): such a delivery's Result must say
    acknowledged False, with the warning that its lease ran out, while the others of the call are
    acknowledged and the new messages it leased are started. Reading the call's lost messages as
    none (``_completed(done, [])``) reported the stale completion acknowledged (a mutation that
    survived: the server tests' completions are all current). Driven without a server."""
    import logging

    results = Results()
    core = _HandCore(3, results)
    _finished_in_hand(core, [_msg(7), _msg(8)])
    step = core._complete_and_fetch()
    call = next(step)
    assert isinstance(call, Call) and call.query == _sql.COMPLETE_AND_DEQUEUE
    assert (call.params["ids"], call.params["attempts"], call.params["limit"]) == ("{7,8}", "{1,1}", 3)
    now = int(time.time() * 1000)
    rows = [(9, b"new", 1, now, None, None, now, now + 30000, now, False),  # a new message, leased
            (7, None, 1, None, None, None, None, None, None, True)]  # (7, 1): stale
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"), pytest.raises(StopIteration) as done:
        step.send(call.result(rows))
    assert done.value.value == (3, 1)
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results.items] == [
        (7, "completed", False), (8, "completed", True)]
    [warning] = [r.getMessage() for r in caplog.records if r.name == "pgqueue.worker"]
    assert warning.startswith("message 7: finished after its lease ran out (attempt 1)"), warning
    assert [m.id for m in core.started_messages] == [9]
    assert list(core._in_hand) == [(9, 1)] and core._finished == []


def test_the_acknowledge_and_fetch_call_takes_at_most_10000_deliveries() -> None:
    """message_complete_and_dequeue takes at most MAX_BATCH (10,000) tokens a call: a worker of
    more than 10,000 handlers that has more finished sends 10,000 and keeps the rest for the next
    round. 10,001 went unnoticed by the tests (their worker of 10,005 handlers settles through
    message_complete_batch, with notify off); the server refuses it. Driven without a server."""
    from pgqueue import _core

    n = _core.MAX_BATCH + 5
    results = Results()
    core = _HandCore(n, results)
    deliveries = _finished_in_hand(core, [_msg(i) for i in range(1, n + 1)])
    step = core._complete_and_fetch()
    call = next(step)
    assert isinstance(call, Call) and call.query == _sql.COMPLETE_AND_DEQUEUE
    assert len(str(call.params["ids"]).strip("{}").split(",")) == _core.MAX_BATCH
    assert call.params["limit"] == _core.MAX_BATCH  # the slots the call frees, at most batch_size
    with pytest.raises(StopIteration):
        step.send(call.result([]))
    assert len(results.items) == _core.MAX_BATCH and all(r.acknowledged for r in results.items)
    assert core._finished == deliveries[_core.MAX_BATCH:]  # the rest: the next round's
    assert core.in_flight == 5


def test_the_first_round_after_an_outage_renews_the_running_handlers_leases_before_it_fetches() -> None:
    """After a failed call (an outage, a conflict) the running handlers' leases may have run out
    meanwhile: the next round renews them (one heartbeat_batch) before anything leases messages,
    or the fetch takes those messages again and their handlers run twice (_recover). Skipping
    the renewal went unnoticed (a mutation that survived). Driven without a server: the calls of
    one round, up to its wait."""
    core = _HandCore(2, Results())
    running = Delivery(_msg(7))
    core._hold(running)
    core._recovering = True
    step = core._loop_until_stopped()
    calls: list[Call[Any]] = []
    what = next(step)
    while isinstance(what, Call):
        calls.append(what)
        what = step.send(_answer(what))
    step.close()
    queries = [c.query for c in calls]
    assert queries[0] == _sql.HEARTBEAT_BATCH, queries
    assert (calls[0].params["ids"], calls[0].params["attempts"], calls[0].params["lock_ms"]) == ("{7}", "{1}", 30000)
    assert _sql.DEQUEUE in queries[1:]  # then the free slot is filled
    assert not core._recovering


def test_the_shutdown_settles_a_finished_delivery_its_bookkeeping_did_not_queue(
        caplog: pytest.LogCaptureFixture) -> None:
    """A delivery whose handler has finished but that was never queued for settling (a
    KeyboardInterrupt between the two steps of its bookkeeping) is settled by the shutdown all
    the same (_drain's backstop), not left leased until its lease runs out. Removing the backstop
    went unnoticed (a mutation that survived). Driven without a server."""
    import logging

    results = Results()
    core = _HandCore(2, results)
    _finished_in_hand(core, [_msg(7)], queued=False)
    core.stop()
    step = core._drain()
    calls: list[Call[Any]] = []
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"), pytest.raises(StopIteration):
        what = next(step)
        while True:
            if isinstance(what, Call):
                calls.append(what)
                what = step.send(_answer(what))
            else:
                what = step.send(None)
    assert [(c.query, c.params["ids"], c.params["attempts"]) for c in calls] == [(_sql.COMPLETE_BATCH, "{7}", "{1}")]
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results.items] == [(7, "completed", True)]
    assert core.in_flight == 0
    assert not [r for r in caplog.records if "not acknowledged" in r.getMessage()]


def test_the_start_log_names_the_server_libpq_reaches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's start log read the host from the conninfo alone and said "localhost" for a
    worker that PGHOST and PGPORT sent to another socket (a new user's first hour, session 41)."""
    from pgqueue._worker_core import _where

    for name in ("PGHOST", "PGPORT", "PGDATABASE", "PGUSER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PGHOST", "/tmp/sock")
    monkeypatch.setenv("PGPORT", "55432")
    assert _where("dbname=app") == ("app", "/tmp/sock:55432")
    assert _where("host=db.example.com port=6432 dbname=x") == ("x", "db.example.com:6432")
    assert _where("postgresql://u@h2/d3") == ("d3", "h2:55432")
    monkeypatch.delenv("PGHOST")
    monkeypatch.delenv("PGPORT")
    assert _where("dbname=app") == ("app", "the default socket")
    monkeypatch.setenv("PGDATABASE", "fromenv")
    assert _where("") == ("fromenv", "the default socket")


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_options_of_the_wrong_kind_are_refused_when_the_worker_is_made(kind: str) -> None:
    """A handler of None and a timeout of "x" were taken, and every message failed and went to
    the dead letters; a str concurrency or batch size was a raw "'<' not supported" TypeError, a
    float concurrency or lease failed only in run(), a lease of 2**63 in the heartbeats' thread,
    a NaN shutdown_grace was taken (a review). Each is refused when the worker is made, the
    same by both workers. (No server: nothing connects before run().)"""
    def plain(msg: Message) -> None:
        return None

    async def coroutine(msg: Message) -> None:
        return None

    def make(handler: object = None, **options: object) -> object:
        if kind == "Worker":
            return Worker(Queue("dbname=nowhere", "jobs"), plain if handler is None else handler,  # type: ignore[arg-type]
                          **options)  # type: ignore[arg-type]
        return AsyncWorker(AsyncQueue("dbname=nowhere", "jobs"), coroutine if handler is None else handler,  # type: ignore[arg-type]
                           **options)  # type: ignore[arg-type]

    with pytest.raises(TypeError, match="callable|not a coroutine function"):
        make(handler=42)
    cases: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"timeout": "x"}, TypeError, "timeout must be seconds or a function of the message, got str"),
        ({"concurrency": "8"}, TypeError, "concurrency must be an int, got str"),
        ({"concurrency": 1.5}, TypeError, "concurrency must be an int, got float"),
        ({"batch_size": "x"}, TypeError, "batch_size must be an int, got str"),
        ({"lock_ms": 1.5}, TypeError, "lock_ms must be an int, got float"),
        ({"lock_ms": 2**63}, ValueError, "lock_ms must be from 1 to 31536000000"),
        ({"shutdown_grace": float("nan")}, ValueError, "shutdown_grace must be a finite number of seconds"),
        ({"poll_min": "1"}, TypeError, "poll_min must be a number of seconds, got str"),
        ({"dsn": 5}, TypeError, "dsn must be a conninfo string or None, got int"),
        # (listen="no" was taken as true, an on_result of 5 failed after every message, a
        # startup_timeout of "5" was a raw TypeError, an infinite timeout was taken: a review)
        ({"listen": "no"}, TypeError, "listen must be True or False, got str"),
        ({"handle_signals": 1}, TypeError, "handle_signals must be True or False, got int"),
        ({"on_result": 5}, TypeError, "on_result must be callable or None, got int"),
        ({"startup_timeout": "5"}, TypeError, "startup_timeout must be None or a number of seconds, got str"),
        ({"startup_timeout": True}, TypeError, "startup_timeout must be None or a number of seconds, got bool"),
        ({"timeout": float("inf")}, ValueError, "timeout must be a finite number of seconds > 0"),
        ({"timeout": 0}, ValueError, "timeout must be a finite number of seconds > 0"),
    ]
    for options, error, words in cases:
        with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
            make(**options)
    # the bounds and the kinds that are right are taken
    make(lock_ms=31_536_000_000, timeout=lambda msg: 1.0, concurrency=1, batch_size=None, shutdown_grace=0,
         dsn="dbname=elsewhere")
    make(listen=False, handle_signals=False, on_result=print, startup_timeout=0.5, timeout=1e9)


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_worker_of_something_other_than_its_queue_is_refused(kind: str) -> None:
    """Worker(None, handler) was an AttributeError and Worker(AsyncQueue(...), handler) was taken
    and failed in run() (a review): each worker takes its own kind of queue, as AsyncWorker
    already said. (No server: nothing connects before run().)"""
    def plain(msg: Message) -> None:
        return None

    async def coroutine(msg: Message) -> None:
        return None

    wrong: list[object] = [None, "jobs", AsyncQueue("dbname=nowhere", "jobs") if kind == "Worker"
                           else Queue("dbname=nowhere", "jobs")]
    for queue in wrong:
        with pytest.raises(TypeError, match="expected an? (Async)?Queue, got " + type(queue).__name__):
            if kind == "Worker":
                Worker(queue, plain)  # type: ignore[arg-type]
            else:
                AsyncWorker(queue, coroutine)  # type: ignore[arg-type]
