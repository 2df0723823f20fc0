"""The worker's shutdown and handler timeouts against a real server: the README's worker
example, run as a process and sent SIGTERM and SIGINT, leaves nothing leased and exits 0;
`pgqueue worker` sent SIGHUP (a closed terminal) stops as on SIGTERM, and one started with
SIGHUP or SIGINT ignored (nohup, `cmd &` from a script) keeps it ignored; run() stops on
SIGHUP too and restores the signal handlers it replaced; a hung handler's message is failed with a
clear last_error, its late result ignored, its slot given to a new thread; no LISTEN
connection on a queue whose notify is off; reconnection waits that double while the database
is away and start over once it is back, and a dropped queue that stops the worker with
QueueNotFound (both for Worker and AsyncWorker)."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
import pytest

from pgqueue import AsyncQueue, AsyncWorker, Message, Queue
from pgqueue import worker as worker_module
from pgqueue.errors import QueueNotFound
from pgqueue.worker import HandlerTimeout, Result, Worker
from helpers import SIGNALLED_INSIDE_THE_LOCK, command, stderr_or_fail
from test_metrics import PGQUEUE
from test_worker import Results, Started, make_queue, running, wait_for
from worker_handlers import marks

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"

# What the README's send_email stands for: note the start, sleep as the payload says.
SEND_EMAIL = '''
import time
def send_email(payload):
    with open(payload["mark"], "a") as f:
        f.write(f"0 {payload['n']}\\n")
    time.sleep(payload["sleep"])
'''


def readme_worker_example() -> str:
    """Return the Python block of the README's "### Workers" section."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n### Workers\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def start_readme_worker(dsn: str) -> subprocess.Popen[str]:
    code = readme_worker_example()
    assert 'Queue("dbname=app", "emails")' in code and ".run()" in code
    code = SEND_EMAIL + code.replace('"dbname=app"', repr(dsn))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop_once(worker: Worker, done: Callable[[], object], timeout: float = 30.0) -> None:
    """Stop ``worker`` from a thread of its own once ``done()`` is true, or after ``timeout`` s
    (the test's asserts then tell): not after a fixed time, which a loaded machine's start of the
    worker may outlast."""
    def stop() -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            time.sleep(0.01)
        worker.stop()

    threading.Thread(target=stop, daemon=True).start()


def finish(proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err


def test_readme_worker_finishes_its_handlers_on_sigterm_and_exits_0(dsn: str, tmp_path: Path) -> None:
    queue = make_queue(dsn, "emails", lock_ms=60000)
    mark = tmp_path / "marks"
    queue.enqueue_many([{"mark": str(mark), "n": i, "sleep": 1.0} for i in range(4)])
    proc = start_readme_worker(dsn)
    wait_for(lambda: len(marks(mark)) == 4, timeout=15, what="four handlers to start")
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    err = finish(proc, 15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    # once the handlers have ended (1 s), not at the end of the grace period (10 s): a loaded
    # machine's exit may take seconds
    assert time.monotonic() - t0 < 8
    stats = queue.stats()  # all four finished within the grace period and were completed
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 0)


def test_readme_worker_gives_back_at_once_on_a_second_sigint(dsn: str, tmp_path: Path) -> None:
    queue = make_queue(dsn, "emails", lock_ms=60000)
    mark = tmp_path / "marks"
    ids = queue.enqueue_many([{"mark": str(mark), "n": i, "sleep": 60} for i in range(3)])
    proc = start_readme_worker(dsn)
    wait_for(lambda: len(marks(mark)) == 3, timeout=15, what="three handlers to start")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)  # Ctrl-C: stop fetching, wait for the handlers...
    time.sleep(0.5)
    assert proc.poll() is None  # ...which are still running (the grace period is 10 s)
    proc.send_signal(signal.SIGINT)  # again: give back now
    err = finish(proc, 15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    # at once, not at the end of the grace period that the first began (a loaded machine's exit
    # may take seconds)
    assert time.monotonic() - t0 < 8
    stats = queue.stats()  # nothing left leased: all three are back, due now
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (3, 0, 0, 0)
    again = queue.dequeue(3)
    assert sorted((m.id, m.attempts) for m in again) == [(i, 2) for i in sorted(ids)]


@contextmanager
def worker_command(dsn: str, queue: str, handler: str, *ignored: signal.Signals) -> Iterator[subprocess.Popen[str]]:
    """Run `pgqueue worker DSN QUEUE worker_handlers:HANDLER` from the tests directory, in a
    session of its own with SIGINT, SIGTERM and SIGHUP at their defaults but the ``ignored``
    ones (as nohup, or `cmd &` from a script, leave them); kill it if the test leaves it running."""
    with command([str(PGQUEUE), "worker", dsn, queue, f"worker_handlers:{handler}"], cwd=TESTS,
                 ignored=ignored) as proc:
        yield proc


@pytest.mark.parametrize("handler", ["obey", "async_obey"])
def test_the_worker_command_stops_on_sighup_as_on_sigterm(dsn: str, tmp_path: Path, handler: str) -> None:
    """A closed terminal or ssh session (SIGHUP) stops `pgqueue worker` as SIGTERM does: the
    handler in flight finishes, its message is completed, exit 0 (SIGHUP ended it at once with
    129, the message left leased until its lease ran out). The terminal's second SIGHUP does
    not make it give the message back at once, as a second SIGTERM does (a review)."""
    queue = make_queue(dsn, "emails", lock_ms=60000)
    mark = tmp_path / "marks"
    queue.enqueue({"mark": str(mark), "sleep": 1.5})
    with worker_command(dsn, "emails", handler) as proc:
        wait_for(lambda: len(marks(mark)) == 1, timeout=15, what="the handler to start")
        assert queue.stats().leased == 1
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.001)
        proc.send_signal(signal.SIGHUP)  # a closed terminal often sends two (the shell's, the kernel's)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err and "SIGHUP: stopping" in err, err
    # (it said "send it again to stop at once", which a SIGHUP does not: a review)
    assert "(send SIGINT or SIGTERM to stop at once)" in err and "send it again" not in err, err
    assert "given back" not in err, err  # a second SIGHUP does not hurry the stop (it gave the message back)
    stats = queue.stats()  # completed, not left leased nor given back
    assert (stats.total, stats.dead) == (0, 0) and len(marks(mark)) == 1


@pytest.mark.parametrize("handler", ["obey", "async_obey"])
@pytest.mark.parametrize("ignored", [signal.SIGHUP, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_stop_signal_ignored_when_the_worker_started_stays_ignored(dsn: str, tmp_path: Path,
                                                                      ignored: signal.Signals, handler: str) -> None:
    """`pgqueue worker` started with SIGHUP ignored (nohup) or SIGINT ignored (`cmd &` from a
    script) goes on working when it comes and still stops on SIGTERM (SIGINT stopped it)."""
    queue = make_queue(dsn, "emails")
    mark = tmp_path / "marks"
    with worker_command(dsn, "emails", handler, ignored) as proc:
        first = queue.enqueue({"mark": str(mark)})
        wait_for(lambda: queue.stats().total == 0, timeout=15, what="the first message")
        proc.send_signal(ignored)
        second = queue.enqueue({"mark": str(mark), "sleep": 0.5})
        wait_for(lambda: queue.stats().total == 0, timeout=15, what="the second message")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err and "SIGTERM: stopping" in err and f"{ignored.name}:" not in err, err
    assert [i for i, _ in marks(mark)] == [first, second]


def test_run_on_the_main_thread_installs_and_restores_signal_handlers(dsn: str) -> None:
    assert threading.current_thread() is threading.main_thread()
    queue = make_queue(dsn)
    queue.enqueue("x")

    def previous(signum: int, frame: object) -> None:
        raise AssertionError("the worker's handler should be in place")

    before = signal.signal(signal.SIGTERM, previous)
    during: list[object] = []
    try:
        worker = Worker(queue, lambda msg: during.append(signal.getsignal(signal.SIGTERM)))
        stop_once(worker, lambda: during)
        worker.run()  # on this (main) thread, until stopped once it has handled the message
        assert signal.getsignal(signal.SIGTERM) is previous
        assert during and during[0] is not previous and callable(during[0])
    finally:
        signal.signal(signal.SIGTERM, before)
    # handle_signals=False leaves them alone
    worker = Worker(queue, print, handle_signals=False)
    threading.Timer(0.3, worker.stop).start()
    seen = signal.getsignal(signal.SIGINT)
    worker.run()
    assert signal.getsignal(signal.SIGINT) is seen


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_run_on_the_main_thread_stops_on_sighup_and_keeps_an_ignored_signal_ignored(kind: str, dsn: str) -> None:
    """run() on the main thread (a library user's worker): SIGHUP at its default action (it would
    end the process) stops it gracefully as SIGTERM does, the message in flight completed, and
    the default is back when it returns; a signal ignored when it started (SIGINT here, as in
    `cmd &` from a script) stays ignored. An application's own SIGHUP handler (a reload) stays
    its own: the SIGHUP reaches it and the worker goes on until stopped."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGHUP)}
    queue = make_queue(dsn)
    try:
        for own_sighup in (False, True):
            queue.enqueue("x")
            got: list[int] = []

            def reload(signum: int, frame: object) -> None:
                got.append(signum)

            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, reload if own_sighup else signal.SIG_DFL)
            during: list[object] = []
            signalled, ended, stopped_by_hand = threading.Event(), threading.Event(), threading.Event()

            def handler(msg: Message) -> None:
                during.append(signal.getsignal(signal.SIGINT))
                if signal.getsignal(signal.SIGHUP) is signal.SIG_DFL:  # not taken: it would end pytest
                    during.append("SIGHUP left at its default")
                    return
                os.kill(os.getpid(), signal.SIGHUP)
                signalled.set()
                time.sleep(0.3)  # in flight when the signal comes: it finishes, its message is completed

            worker = make_worker(kind, dsn, handler)

            def fallback_stop(w: Worker | AsyncWorker = worker, own: bool = own_sighup,
                              signalled: threading.Event = signalled, ended: threading.Event = ended,
                              stopped_by_hand: threading.Event = stopped_by_hand) -> None:
                # with the application's own SIGHUP handler, a second after the handler sent it
                # (the worker goes on meanwhile); else after 30 s, unless run() has returned (not
                # after a fixed time from the start: a loaded machine's start may take seconds)
                if own:
                    signalled.wait(30)
                if not ended.wait(1.0 if own else 30):
                    stopped_by_hand.set()
                    w.stop()

            threading.Thread(target=fallback_stop, daemon=True).start()
            started = time.monotonic()
            try:
                if isinstance(worker, Worker):
                    worker.run()
                else:
                    asyncio.run(worker.run())
            finally:
                ended.set()
            assert during == [signal.SIG_IGN]
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert queue.stats().total == 0
            if own_sighup:
                assert got == [signal.SIGHUP] and stopped_by_hand.is_set(), (got, stopped_by_hand.is_set())
                assert signal.getsignal(signal.SIGHUP) is reload
            else:
                # promptly, not at the end of the grace period (10 s): a loaded machine's start may take seconds
                assert not stopped_by_hand.is_set() and time.monotonic() - started < 8
                assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        queue.close()
        for sig, handling in saved.items():
            signal.signal(sig, handling)


def test_signal_handlers_installed_for_a_run_on_another_thread(dsn: str) -> None:
    """install_signal_handlers() on the main thread, run() on another (the documented use): a
    SIGTERM stops the worker, run() returns normally, and the handlers stay until the main
    thread calls restore_signal_handlers(); the first signal after run() returned, before that,
    puts them back itself and reaches the previous handler. Before, run() raised ValueError
    "signal only works in main thread" from restoring them on its own thread."""
    assert threading.current_thread() is threading.main_thread()
    queue = make_queue(dsn)
    previous_calls: list[int] = []

    def previous(signum: int, frame: object) -> None:
        previous_calls.append(signum)

    before = signal.signal(signal.SIGTERM, previous)
    try:
        for ending in ("restore_signal_handlers", "a signal after run"):
            worker = Worker(queue, print)
            worker.install_signal_handlers()
            started = Started(worker)
            time.sleep(0.3)
            signal.raise_signal(signal.SIGTERM)  # the worker's handler: stop
            started.thread.join(20)
            assert not started.thread.is_alive() and not started.errors, started.errors
            assert previous_calls == [] and signal.getsignal(signal.SIGTERM) is not previous
            if ending == "restore_signal_handlers":
                worker.restore_signal_handlers()
            else:
                signal.raise_signal(signal.SIGTERM)
                assert previous_calls == [signal.SIGTERM]
            assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_hung_handler_times_out_its_message_is_failed_and_its_result_ignored(dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=1)
    hung = queue.enqueue({"hang": True})
    release = threading.Event()
    returned = threading.Event()
    handled: list[int] = []

    def handler(msg: Message) -> None:
        if isinstance(msg.payload, dict):
            release.wait(30)
            returned.set()
            return  # a success, but too late: ignored
        handled.append(msg.id)

    results = Results()
    # the limit counts from the handler's start on the loop: long enough for the next one to end
    # in even on a loaded machine, that starts its thread late
    worker = Worker(queue, handler, concurrency=1, timeout=3.0, on_result=results)
    try:
        with running(worker):
            wait_for(lambda: results.items, timeout=15, what="the timeout")
            # concurrency 1, the hung thread still runs: a new thread handles the next one
            later = queue.enqueue("next")
            wait_for(lambda: handled == [later], timeout=15, what="the next message")
            release.set()
            assert returned.wait(5)
            wait_for(lambda: results.count("completed") == 1, what="the next one's result")
            time.sleep(0.3)  # time for a (wrong) settlement of the late return
    finally:
        release.set()
    first = results.items[0]
    assert (first.message.id, first.outcome, first.acknowledged) == (hung, "dead", True)
    assert isinstance(first.error, HandlerTimeout)
    assert 2.95 <= first.duration < 10.0  # the limit, not the hung handler's 30 s (a loaded machine: seconds more)
    assert [r.message.id for r in results.items] == [hung, later]  # the late return changed nothing
    [dead] = queue.dead_letters()
    assert dead.id == hung
    assert dead.last_error is not None
    assert dead.last_error.startswith("HandlerTimeout: the handler was still running after 3 s")


def test_a_timeout_per_message_retries_by_the_queue_rules(dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=3, retry_base_ms=0, retry_cap_ms=0)
    slow = queue.enqueue({"sleep": 6.0})
    quick = queue.enqueue({"sleep": 0.6})
    attempts: list[tuple[int, int]] = []
    lock = threading.Lock()

    def handler(msg: Message) -> None:
        with lock:
            attempts.append((msg.id, msg.attempts))
        assert isinstance(msg.payload, dict)
        time.sleep(msg.payload["sleep"] if msg.attempts == 1 else 0)

    def limit(msg: Message) -> float | None:
        # the quick one has no limit; the slow one has 2 s, which its retry (no sleep) ends in even
        # on a loaded machine, that starts its thread late
        assert isinstance(msg.payload, dict)
        return 2.0 if msg.payload["sleep"] > 1 else None

    results = Results()
    with running(Worker(queue, handler, concurrency=2, timeout=limit, on_result=results)):
        wait_for(lambda: results.count("completed") == 2, timeout=20, what="both completed")
    outcomes = [(r.message.id, r.outcome) for r in results.items]
    assert outcomes.count((slow, "retried")) == 1 and (slow, "completed") in outcomes
    assert (quick, "completed") in outcomes and (quick, "retried") not in outcomes
    assert sorted(attempts) == sorted([(slow, 1), (slow, 2), (quick, 1)])
    assert queue.stats().total == 0


#: What a timeout function does for the bad message, and the error its message is failed with.
BAD_LIMITS = [
    pytest.param("raise", "ZeroDivisionError: no limit for this one", id="raises"),
    # (the Worker's run() died of these, after the check of the start, with the rest of the
    # batch leased: a review of the worker under failures, session 43)
    pytest.param(timedelta(seconds=30), "TypeError: the timeout function returned a timedelta: expected "
                 "seconds (a number > 0) or None", id="a timedelta"),
    pytest.param("5", "TypeError: the timeout function returned a str: expected seconds (a number > 0) or None",
                 id="a string"),
    pytest.param(0, "ValueError: the timeout function returned 0: expected seconds > 0 or None", id="zero"),
    pytest.param(float("nan"), "ValueError: the timeout function returned nan: expected seconds > 0 or None",
                 id="nan"),
]


def test_a_timeout_function_may_answer_any_real_number() -> None:
    """Decimal, Fraction, numpy's scalars (numbers.Real) are seconds too: the check of the
    answer refused all but int and float (a review of the session's changes, session 43)."""
    from decimal import Decimal
    from fractions import Fraction

    from pgqueue._worker_core import WorkerCore

    for answer, seconds in ((Decimal("1.5"), 1.5), (Fraction(3, 2), 1.5), (2, 2.0), (None, None)):
        core = WorkerCore("jobs", "dbname=unused", print, concurrency=1, batch_size=None, lock_ms=None,
                          listen=False, poll_min=0.05, poll_max=1.0, shutdown_grace=1.0, on_result=None,
                          timeout=lambda msg, a=answer: a, handle_signals=False)  # type: ignore[misc]
        assert core._limit(None) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize(("bad", "error"), BAD_LIMITS)
@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_timeout_function_that_raises_fails_that_message_only(kind: str, dsn: str, bad: object, error: str) -> None:
    """A ``timeout`` function that raises (or answers something that is not seconds > 0) for
    one message of a batch: that message is failed with its error (its handler never runs),
    the others are handled, and the worker runs on, alike in both workers. Before, the
    Worker's run() died of the error, leaving the rest of the batch leased until their leases
    ran out."""
    queue = make_queue(dsn, max_attempts=1)
    ids = queue.enqueue_many(["ok1", "bad", "ok2", "ok3"])
    handled: list[object] = []

    def limit(msg: Message) -> Any:
        if msg.payload == "bad":
            if bad == "raise":
                raise ZeroDivisionError("no limit for this one")
            return bad
        return 5.0

    results = Results()
    with running(make_worker(kind, dsn, lambda msg: handled.append(msg.payload), concurrency=4,
                             timeout=limit, on_result=results)):
        wait_for(lambda: len(results.items) == 4, what="four results")
        later = queue.enqueue("after")
        wait_for(lambda: len(results.items) == 5, what="the worker to run on")
    assert sorted(map(str, handled)) == ["after", "ok1", "ok2", "ok3"]
    assert {(r.message.id, r.outcome) for r in results.items if r.outcome != "completed"} == {(ids[1], "dead")}
    [dead] = queue.dead_letters()
    assert (dead.id, dead.last_error) == (ids[1], error)
    stats = queue.stats(exact=True)  # nothing left leased, "after" completed
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 1)
    assert later in {r.message.id for r in results.items if r.outcome == "completed"}


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_worker_stopped_while_it_settles_fetches_nothing_more(kind: str, dsn: str) -> None:
    """stop() while the worker acknowledges (here from on_result, as a signal's thread may land
    then): it fetches nothing more and starts no other handler. It went on to the round's fetch
    and started the next message's handler, to give it back at the end of the grace (a review
    of the worker under failures, session 43)."""
    queue = make_queue(dsn, max_attempts=1)
    first, second = queue.enqueue_many(["fails", "work"])
    handled: list[object] = []
    worker: Worker | AsyncWorker | None = None
    results = Results()

    def on_result(result: Result) -> None:
        results(result)
        assert worker is not None
        worker.stop()  # during the failure's settling

    def handler(msg: Message) -> None:
        handled.append(msg.payload)
        if msg.payload == "fails":
            raise RuntimeError("fails")

    worker = make_worker(kind, dsn, handler, concurrency=1, on_result=on_result, shutdown_grace=2.0)
    started = Started(worker)
    started.thread.join(15)
    assert not started.thread.is_alive() and not started.errors, started.errors
    assert handled == ["fails"]
    assert [(r.message.id, r.outcome) for r in results.items] == [(first, "dead")]
    stats = queue.stats(exact=True)
    assert (stats.ready, stats.leased, stats.dead) == (1, 0, 1)  # "work" untouched
    assert [m.id for m in queue.peek(10)] == [second]


def _worker_backends(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'pgqueue-worker' ORDER BY query").fetchall()
    return [str(r[0]) for r in rows]


def test_listen_only_on_a_queue_with_notify_on(dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgqueue.worker")
    quiet = Queue(dsn, "quiet")
    quiet.create(notify=False)
    loud = make_queue(dsn, "loud")  # notify on
    for queue, listens in ((quiet, False), (loud, True)):
        worker = Worker(queue, print, poll_min=0.2, poll_max=0.2)
        with running(worker):
            # its connections (the LISTEN one, if any, may come a while after the loop's on a
            # loaded machine), and time for one that should not be there to come
            wait_for(lambda: len(_worker_backends(dsn)) == (2 if listens else 1), what="the worker's connections")
            time.sleep(0.5)
            backends = _worker_backends(dsn)
        assert any(q.startswith("LISTEN") for q in backends) == listens, backends
        assert len(backends) == (2 if listens else 1), backends
        wait_for(lambda: not _worker_backends(dsn), what="the worker's connections to close")
    [advice] = [r.getMessage() for r in caplog.records if "notify off" in r.getMessage()]
    # turning notify on does not make a running worker listen: say so
    assert "--notify" in advice and "restart" in advice, advice


def make_worker(kind: str, dsn: str, handler: Callable[[Message], object], **options: Any) -> Worker | AsyncWorker:
    """A Worker running ``handler``, or an AsyncWorker running it as a coroutine, on queue "jobs"."""
    if kind == "Worker":
        return Worker(Queue(dsn, "jobs"), handler, **options)

    async def coroutine(msg: Message) -> None:
        handler(msg)

    return AsyncWorker(AsyncQueue(dsn, "jobs"), coroutine, **options)


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_reconnects_with_a_doubling_wait_and_starts_over_once_back(kind: str, dsn: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    queue = make_queue(dsn)
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    results = Results()
    worker = make_worker(kind, dsn, lambda msg: None, poll_min=0.05, poll_max=0.05, listen=False,
                         on_result=results)
    admin = psycopg.connect(dsn.replace(f"dbname={dbname}", "dbname=postgres"), autocommit=True)
    tries = 5  # each worker opens a connection again at its first call after the wait

    def waits() -> list[str]:
        # the first retry of an outage is a warning, the others are at DEBUG (one warning per outage)
        return [m.group(1) for r in caplog.records if (m := re.search(r"reconnecting in (\S+s)", r.getMessage()))]

    def database_away() -> None:
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE datname = %s AND application_name = 'pgqueue-worker'", (dbname,))

    try:
        with caplog.at_level(logging.DEBUG, logger="pgqueue.worker"), running(worker):
            queue.enqueue("before")
            wait_for(lambda: results.count("completed") == 1, what="the first message")
            queue.close()
            database_away()
            wait_for(lambda: len(waits()) >= tries, timeout=20, what=f"{tries} attempts")
            assert waits()[:tries] == ["0.1s", "0.2s", "0.4s", "0.8s", "1.6s"][:tries]
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
            Queue(dsn, "jobs").enqueue("after")
            wait_for(lambda: results.count("completed") == 2, timeout=30, what="the message after")
            n = len(waits())
            database_away()
            wait_for(lambda: len(waits()) > n, timeout=20, what="the next loss")
            assert waits()[n] == "0.1s"  # back from the start
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
    finally:
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
        admin.close()


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_queue_dropped_under_a_running_worker_stops_it_with_queue_not_found(kind: str, dsn: str) -> None:
    queue = make_queue(dsn)
    results = Results()
    started = Started(make_worker(kind, dsn, lambda msg: None, poll_min=0.05, poll_max=0.1, on_result=results))
    try:
        queue.enqueue("one")
        wait_for(lambda: results.count("completed") == 1, what="the first message")
        assert queue.drop()
        started.thread.join(10)
        assert not started.thread.is_alive(), "the worker did not stop"
        [error] = started.errors
        assert isinstance(error, QueueNotFound) and 'queue "jobs" does not exist' in str(error)
    finally:
        started.stop()


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_lock_timeout_on_the_role_is_retried_and_logged_once_for_what_it_is(kind: str, dsn: str,
                                                                               caplog: pytest.LogCaptureFixture) -> None:
    """lock_timeout set on the worker's role, and a queue_alter of max_size holding the queue's
    lock stripe: each fetch fails with 55P03. The worker waits the doubling back-off and goes on
    once the lock is gone; it logs one warning, which says a call failed (it used to log one per
    retry, each saying the connection was lost, which it was not)."""
    queue = make_queue(dsn)
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'ALTER ROLE CURRENT_USER IN DATABASE "{dbname}" SET lock_timeout = \'200ms\'')
    results = Results()
    worker = make_worker(kind, dsn, lambda msg: None, poll_min=0.05, poll_max=0.05, listen=False,
                         on_result=results)
    with caplog.at_level(logging.INFO, logger="pgqueue.worker"), running(worker):
        queue.enqueue("before")
        wait_for(lambda: results.count("completed") == 1, what="the first message")
        with psycopg.connect(dsn) as blocker:  # one transaction, holding the stripe until it ends
            blocker.execute("SELECT pgqueue.queue_alter('jobs', p_max_size => 100)")
            wait_for(lambda: any("lock timeout" in r.getMessage() for r in caplog.records), what="a lock timeout")
            time.sleep(2)  # several retries
            blocker.rollback()
        queue.enqueue("after")
        wait_for(lambda: results.count("completed") == 2, timeout=20, what="the message after")
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and warned[0].startswith("database call failed: canceling statement due to lock timeout"), warned
    assert any("database connection works again" in r.getMessage() for r in caplog.records)


def _wait_for_a_lock_wait(dsn: str) -> None:
    """Wait until a worker's connection waits on a row lock (its acknowledgement, here)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        wait_for(lambda: conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'pgqueue-worker' AND wait_event_type = 'Lock'").fetchone() == (1,),
            what="the acknowledgement to wait on the row lock")


def test_a_keyboard_interrupt_during_the_acknowledgement_still_acknowledges(dsn: str) -> None:
    """A Ctrl-C (handle_signals=False: a KeyboardInterrupt) that lands while the acknowledgement
    of finished handlers is in flight: the call is cancelled, and the shutdown acknowledges the
    deliveries before run() raises. Before, they had been taken off the list to acknowledge and
    were put back only on database errors: the shutdown logged "not acknowledged (no database)"
    and the message stayed leased until its lease ran out."""
    assert threading.current_thread() is threading.main_thread()
    queue = make_queue(dsn, lock_ms=60000)
    msg_id = queue.enqueue("only")
    blocker = psycopg.connect(dsn)  # holds the message's row lock, so that the acknowledgement waits

    def handler(msg: Message) -> None:
        blocker.execute("SELECT id FROM pgqueue.message WHERE id = %s FOR UPDATE", (msg.id,))

    def interrupt_then_release() -> None:
        _wait_for_a_lock_wait(dsn)
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.3)
        blocker.rollback()

    results = Results()
    worker = Worker(queue, handler, concurrency=1, handle_signals=False, on_result=results)
    helper = threading.Thread(target=interrupt_then_release)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            worker.run()
    finally:
        helper.join(20)
        signal.signal(signal.SIGINT, previous)
        blocker.close()
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results.items] == [(msg_id, "completed", True)]
    assert queue.stats(exact=True).total == 0


def test_a_keyboard_interrupt_in_the_graces_acknowledgement_call_goes_on_with_the_shutdown(dsn: str) -> None:
    """A graceful stop() lets running handlers finish within the grace, acknowledging the ones
    that finish as it goes. A Ctrl-C (handle_signals=False) that landed in one of those
    acknowledgement calls went straight out of run() (only the grace's waits took it as a stop
    now): the finished handler's message stayed unacknowledged, to run again once its lease ran
    out, and the running one's stayed leased by no one (a review). It now ends the grace as a
    second stop does: the finished message is acknowledged, the running one given back, then
    run() raises the KeyboardInterrupt."""
    from pgqueue import _sql

    queue = make_queue(dsn, lock_ms=60000)
    short, long_ = queue.enqueue("short"), queue.enqueue("long")
    release = threading.Event()

    def handler(msg: Message) -> None:
        if msg.payload == "long":
            release.wait(20)
        else:
            time.sleep(0.3)

    results = Results()
    worker = Worker(queue, handler, concurrency=2, handle_signals=False, shutdown_grace=30, on_result=results)
    real_call, interrupted = worker._call, []

    def call(c: Any) -> Any:  # a Ctrl-C as the grace's first acknowledgement is sent
        if worker._stopping and c.query == _sql.COMPLETE_BATCH and not interrupted:
            interrupted.append(c)
            raise KeyboardInterrupt
        return real_call(c)

    worker._call = call  # type: ignore[method-assign]
    wait_until = threading.Timer(0.15, worker.stop)  # a graceful stop while both handlers run
    wait_until.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run()
    finally:
        release.set()
        wait_until.cancel()
    assert interrupted, "the grace made no acknowledgement call"
    outcomes = sorted((r.message.id, r.outcome, r.acknowledged) for r in results.items)
    assert outcomes == sorted([(short, "completed", True), (long_, "released", True)]), outcomes
    stats = queue.stats(exact=True)
    assert (stats.leased, stats.ready, stats.total) == (0, 1, 1), stats


def test_cancelling_an_async_worker_during_the_acknowledgement_still_acknowledges(dsn: str) -> None:
    """AsyncWorker.run() cancelled (by asyncio.timeout, say) while the acknowledgement of
    finished handlers is in flight: the shutdown acknowledges them before the cancellation
    propagates (before, as for the Worker's KeyboardInterrupt, they were left leased)."""
    import asyncio

    make_queue(dsn, lock_ms=60000)
    msg_id = Queue(dsn, "jobs").enqueue("only")
    results = Results()

    async def main() -> None:
        blocker = await psycopg.AsyncConnection.connect(dsn)

        async def handler(msg: Message) -> None:
            await blocker.execute("SELECT id FROM pgqueue.message WHERE id = %s FOR UPDATE", (msg.id,))

        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=1, handle_signals=False,
                             on_result=results)
        run = asyncio.create_task(worker.run())
        await asyncio.to_thread(_wait_for_a_lock_wait, dsn)
        run.cancel()
        await asyncio.sleep(0.3)
        await blocker.rollback()
        with pytest.raises(asyncio.CancelledError):
            await run
        await blocker.close()

    asyncio.run(asyncio.wait_for(main(), 60))
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results.items] == [(msg_id, "completed", True)]
    assert Queue(dsn, "jobs").stats(exact=True).total == 0


def _run_on_a_thread(worker: Worker, timeout: float = 15.0) -> list[BaseException]:
    """Run a Worker on a thread; return what its run() raised, failing if it has not returned
    within ``timeout`` seconds."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:  # checked by the caller
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"run() has not returned after {timeout} s"
    return errors


def test_a_keyboard_interrupt_that_takes_a_handlers_return_away_still_acknowledges_it(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C (handle_signals=False: a KeyboardInterrupt) that lands on the loop after it took
    a handler's return off its queue and before it recorded it (psycopg delivers a pending SIGINT
    at the first bytecode after a database call): the return is not lost, the message is
    acknowledged and run() raises. Before, run() waited forever for a handler that had returned
    (the event was lost, and the shutdown found the job done and did not give it back)."""
    queue = make_queue(dsn, lock_ms=60000)
    msg_id = queue.enqueue("only")
    results = Results()
    take = Worker._take
    interrupted: list[object] = []

    def interrupted_take(self: Worker, event: object) -> None:
        if event is not worker_module._WAKE and event is not worker_module._NOTIFIED and not interrupted:
            interrupted.append(event)
            raise KeyboardInterrupt  # as a SIGINT would, one bytecode after the queue's get() returned
        take(self, event)

    monkeypatch.setattr(Worker, "_take", interrupted_take)
    worker = Worker(queue, lambda msg: None, concurrency=1, handle_signals=False, listen=False,
                    poll_max=0.1, on_result=results)
    errors = _run_on_a_thread(worker)
    assert interrupted and [type(e) for e in errors] == [KeyboardInterrupt]
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results.items] == [(msg_id, "completed", True)]
    assert queue.stats(exact=True).total == 0


def test_a_keyboard_interrupt_while_handlers_start_gives_back_what_is_in_hand(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C (handle_signals=False) that lands in the middle of starting a batch's handlers,
    just after a job was queued for a thread: run() raises the KeyboardInterrupt after giving back
    every message of the batch (none left leased, none completed without its handler having
    returned). Before, the delivery had no handle yet and the shutdown died on it with
    AttributeError, giving nothing back."""
    queue = make_queue(dsn, lock_ms=60000)
    ids = queue.enqueue_many(["a", "b", "c"])
    returned: list[int] = []

    def handler(msg: Message) -> None:
        time.sleep(0.3)
        returned.append(msg.id)

    submit = worker_module._HandlerThreads.submit
    interrupted: list[bool] = []

    def interrupted_submit(self: Any, job: Any) -> Any:
        queued = submit(self, job)
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt  # as a SIGINT would, once the job is queued
        return queued

    monkeypatch.setattr(worker_module._HandlerThreads, "submit", interrupted_submit)
    results = Results()
    worker = Worker(queue, handler, concurrency=3, handle_signals=False, listen=False, poll_max=0.1,
                    on_result=results)
    errors = _run_on_a_thread(worker)
    assert interrupted and [type(e) for e in errors] == [KeyboardInterrupt]
    assert sorted(r.message.id for r in results.items) == sorted(ids)
    assert all(r.acknowledged and r.outcome in ("completed", "released") for r in results.items), results.items
    assert {r.message.id for r in results.items if r.outcome == "completed"} <= set(returned)
    stats = queue.stats(exact=True)
    assert stats.leased == 0 and stats.total == sum(r.outcome == "released" for r in results.items)


@pytest.mark.parametrize("hurried", [False, True])
def test_an_async_handler_that_swallows_its_cancellation_does_not_hold_the_shutdown(
        hurried: bool, dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An AsyncWorker's handler still running at the end of the shutdown grace is cancelled; one
    that swallows the cancellation (or cleans up at length) is given up _GIVE_UP (2) seconds later
    (at once on another stop(now=True)): its message is given back and run() returns; what the
    handler does later is ignored. Before, run() waited for it as long as it ran, and a second
    stop(now=True) did not hurry it."""
    if hurried:  # (at once, told apart from _GIVE_UP by far more than a loaded machine's delays)
        monkeypatch.setattr("pgqueue._worker_core._GIVE_UP", 30.0)
    queue = make_queue(dsn, lock_ms=60000)
    msg_id = queue.enqueue("stubborn")
    results = Results()
    timings: dict[str, float] = {}

    async def main() -> None:
        cancelled = asyncio.Event()

        async def handler(msg: Message) -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled.set()  # swallowed: it goes on "cleaning up"
            await asyncio.sleep(30)  # (until asyncio.run cancels it again at its end)

        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handler, concurrency=1, handle_signals=False,
                             listen=False, poll_max=0.1, shutdown_grace=0.3, on_result=results)
        run = asyncio.create_task(worker.run())
        await asyncio.to_thread(wait_for, lambda: worker.in_flight == 1, 10.0, "the handler to start")
        t0 = time.monotonic()
        worker.stop()
        await asyncio.wait_for(cancelled.wait(), 10)
        if hurried:
            await asyncio.sleep(0.2)
            t0 = time.monotonic()
            worker.stop(now=True)
        await asyncio.wait_for(run, 15)
        timings["run"] = time.monotonic() - t0

    asyncio.run(main())
    # the grace (0.3 s), then at most _GIVE_UP (2 s) more, not as long as the handler runs (30 s);
    # at once after the second stop, not _GIVE_UP (here 30 s) later (a loaded machine: seconds more)
    assert timings["run"] < (10.0 if hurried else 6.0), timings
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results.items] == [(msg_id, "released", True)]
    stats = queue.stats(exact=True)
    assert stats.leased == 0 and stats.total == 1


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_failures_outcome_follows_max_attempts_changed_under_a_running_worker(
        kind: str, dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    """A queue_alter of max_attempts after the worker started: each failure is reported (Result,
    log line, and so the metric pgqueue_worker_messages_total{outcome}) as what the server did
    with it, dead or retried. Before, the worker labelled it from the max_attempts it read at
    start: "retried" for a message the server had dead-lettered, and the reverse."""
    queue = make_queue(dsn, max_attempts=5, retry_base_ms=3600000, retry_cap_ms=3600000)
    results = Results()

    def handler(msg: Message) -> None:
        if msg.payload != "started":
            raise RuntimeError("boom")

    worker = make_worker(kind, dsn, handler, poll_min=0.05, poll_max=0.1, on_result=results)
    with caplog.at_level(logging.WARNING, logger="pgqueue.worker"), running(worker):
        queue.enqueue("started")
        wait_for(lambda: len(results.items) == 1, what="the worker to start (max_attempts 5 read)")
        queue.alter(max_attempts=1)
        doomed = queue.enqueue("dies at its first failure now")
        wait_for(lambda: len(results.items) == 2, what="the first failure")
        queue.alter(max_attempts=0)  # unlimited
        kept = queue.enqueue("retried now")
        wait_for(lambda: len(results.items) == 3, what="the second failure")
    assert [(r.message.id, r.outcome, r.acknowledged) for r in results.items[1:]] == [
        (doomed, "dead", True), (kept, "retried", True)]
    assert [d.id for d in queue.dead_letters()] == [doomed]
    logged = [r.getMessage() for r in caplog.records if "failed (attempt 1)" in r.getMessage()]
    assert [line.rsplit("; ", 1)[1] for line in logged] == ["moved to the dead letters", "will be retried"]


# `pgqueue worker` run with the signal sent at a moment of its start (run as `python -c`):
# from the run's own module, just before the run takes the signals over (its stop_signals()).
SIGNAL_BEFORE_THE_RUN = '''
import os, signal
import {module} as target
from pgqueue import cli
taken = target.stop_signals
sent = []
def stop_signals():
    if not sent:
        sent.append(os.kill(os.getpid(), signal.{sig}))
    return taken()
target.stop_signals = stop_signals
cli.console()
'''


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda sig: sig.name)
@pytest.mark.parametrize("handler", ["obey", "async_obey"])
def test_a_stop_signal_just_before_the_run_takes_the_signals_stops_the_worker(dsn: str, tmp_path: Path,
                                                                              handler: str, sig: signal.Signals) -> None:
    """A deploy's SIGTERM (or a closed terminal's SIGHUP) that reaches `pgqueue worker` after
    the command had set the default action aside and before the worker's run (Worker or
    AsyncWorker) put its own handler in place stops it, exit 0, nothing left leased. It was
    swallowed: the worker ran on until the process manager's SIGKILL."""
    queue = make_queue(dsn, "emails", lock_ms=60000)
    queue.enqueue({"mark": str(tmp_path / "marks")})
    module = "pgqueue.async_worker" if handler.startswith("async") else "pgqueue.worker"
    code = SIGNAL_BEFORE_THE_RUN.format(module=module, sig=sig.name)
    with command([sys.executable, "-c", code, "worker", dsn, "emails", f"worker_handlers:{handler}"],
                 cwd=TESTS) as proc:
        err = stderr_or_fail(proc, 30, f"the worker ran on after {sig.name}")
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err and f"{sig.name}: stopping" in err, err
    assert queue.stats().leased == 0


def test_a_stop_signal_while_the_handler_module_imports_ends_the_worker_at_once(dsn: str, tmp_path: Path) -> None:
    """A SIGTERM while `pgqueue worker` imports the handler's module (an application that takes
    its time to start) ends it at once, exit 0, one line: it was the default action's 143."""
    make_queue(dsn, "emails")
    (tmp_path / "slow_app.py").write_text(
        "import os, signal, time\nos.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(30)\n"
        "def handle(msg):\n    pass\n")
    with command([str(PGQUEUE), "worker", dsn, "emails", "slow_app:handle"], cwd=tmp_path) as proc:
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=40)
    assert (proc.returncode, err) == (0, "worker stopped on SIGTERM before it started\n")
    assert time.monotonic() - t0 < 20  # not after the module's 30 s (a loaded machine's start: seconds)


def test_a_process_the_handlers_module_forks_ends_on_sigterm_as_before(dsn: str, tmp_path: Path) -> None:
    """A process forked while `pgqueue worker` imports the handler's module (a multiprocessing
    pool made at import, say) is not the command: a SIGTERM ends it as it did before the command
    handled the signals from its start. It inherited that handler, which raised there: the child
    went on as the command (`worker stopped on SIGTERM before it started`, exit 0), or printed a
    NotStarted traceback in a pool's worker process, instead of ending."""
    make_queue(dsn, "emails")
    (tmp_path / "forking_app.py").write_text(
        "import os, signal, time\n"
        "r, w = os.pipe()\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    os.write(w, b'.')\n"  # (running: a signal before its after-fork steps would be lost)
        "    time.sleep(30)\n"
        "    os._exit(0)\n"
        "os.read(r, 1)\n"
        "os.kill(child, signal.SIGTERM)\n"
        "_, status = os.waitpid(child, 0)\n"
        "with open('child_status', 'w') as f:\n"
        "    f.write(str(os.waitstatus_to_exitcode(status)))\n"
        "def handle(msg):\n    pass\n")
    with command([str(PGQUEUE), "worker", dsn, "emails", "forking_app:handle"], cwd=tmp_path) as proc:
        assert proc.stderr is not None
        head = [proc.stderr.readline()]
        while head[-1] and "worker started" not in head[-1]:
            head.append(proc.stderr.readline())
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
        err = "".join(head) + rest
    assert proc.returncode == 0, (proc.returncode, err)
    assert (tmp_path / "child_status").read_text() == str(-signal.SIGTERM), err
    assert "Traceback" not in err and "before it started" not in err, err


def test_a_signal_while_run_puts_the_handlers_back_goes_to_the_previous_handler(dsn: str) -> None:
    """A second SIGTERM that lands while run()'s finally puts the handlers back: that restore has
    taken the saved handlers and not yet reached SIGTERM's, so the worker's handler, still
    installed, restored nothing and raised the signal again to itself, and again: a
    RecursionError out of `pgqueue worker` (a CI run of
    tests/test_worker.py::test_a_signal_repeated_as_the_worker_stops_still_exits_0, session 52).
    Here the interrupted restore is set up by hand: the handlers taken, the worker's still in
    place."""
    got: list[int] = []
    originals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        previous = signal.getsignal(signal.SIGTERM)
        worker = Worker(Queue(dsn, "jobs"), lambda msg: None, handle_signals=False)
        worker.install_signal_handlers()
        assert signal.getsignal(signal.SIGTERM) is not previous
        worker._ended.set()  # run() has returned ...
        worker._saved_signals = None  # ... and its restore has taken the saved handlers
        signal.raise_signal(signal.SIGTERM)
        assert got == [signal.SIGTERM]  # the previous handler had it, once
        # and every handler the worker took is back (those the interrupted restore had not reached)
        assert {sig: signal.getsignal(sig) for sig in originals} == {**originals, signal.SIGTERM: previous}
    finally:
        for sig, handler in originals.items():
            signal.signal(sig, handler)


def test_async_worker_puts_each_previous_handler_back_without_the_default_between(
        dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """AsyncWorker's restore called loop.remove_signal_handler, which sets SIG_DFL (SIGINT:
    default_int_handler), and only then the previous handler: a second SIGTERM in between ended
    `pgqueue worker` with 143 instead of going to the command's handler (a review of session 52,
    the window test_a_signal_repeated_as_the_worker_stops_still_exits_0[async_obey] races). Each
    signal's disposition now goes straight back to the previous handler."""
    originals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    real = signal.signal
    set_to: list[tuple[int, Any]] = []

    def recording(sig: int, handler: Any) -> Any:
        set_to.append((sig, handler))
        return real(sig, handler)

    async def handle(msg: Message) -> None:
        return None

    async def install_and_restore() -> None:
        before = {sig: signal.getsignal(sig) for sig in originals}  # (asyncio.run's own SIGINT handler)
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handle)
        restore = worker._install_signal_handlers()
        taken = [sig for sig in originals if signal.getsignal(sig) is not before[sig]]
        assert signal.SIGTERM in taken, taken  # (the loop's handlers were in place)
        monkeypatch.setattr(signal, "signal", recording)
        try:
            restore()
        finally:
            monkeypatch.setattr(signal, "signal", real)
        # the loop's entries are gone (loop.close() would reset the signals to SIG_DFL) and so is
        # its wakeup fd (left on the closed socket, a later signal would write into its number)
        assert not asyncio.get_running_loop()._signal_handlers  # type: ignore[attr-defined]
        assert signal.set_wakeup_fd(-1) == -1
        assert set_to == [(sig, before[sig]) for sig in taken], set_to
        assert {sig: signal.getsignal(sig) for sig in originals} == before

    try:
        asyncio.run(install_and_restore())
        assert {sig: signal.getsignal(sig) for sig in originals} == originals
    finally:
        for sig, handler in originals.items():
            real(sig, handler)


def test_async_worker_gives_an_applications_loop_handler_back(dsn: str) -> None:
    """An application that runs an AsyncWorker on its own loop, with its own SIGTERM handler
    there (loop.add_signal_handler): the worker's run replaced that entry with its own and its
    restore dropped it, so after the worker stopped a SIGTERM no longer reached the application
    (a note of session 52). The application's entry is back, and a SIGTERM reaches it."""
    originals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    got: list[str] = []

    async def handle(msg: Message) -> None:
        return None

    async def run_beside_the_application() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, got.append, "application")
        mine = loop._signal_handlers[signal.SIGTERM]  # type: ignore[attr-defined]
        worker = AsyncWorker(AsyncQueue(dsn, "jobs"), handle)
        restore = worker._install_signal_handlers()
        assert loop._signal_handlers[signal.SIGTERM] is not mine  # type: ignore[attr-defined]
        restore()
        assert loop._signal_handlers[signal.SIGTERM] is mine  # type: ignore[attr-defined]
        signal.raise_signal(signal.SIGTERM)
        for _ in range(100):  # the loop runs the handler at its next turn
            if got:
                break
            await asyncio.sleep(0.01)
        assert got == ["application"]
        loop.remove_signal_handler(signal.SIGTERM)

    try:
        asyncio.run(run_beside_the_application())
        assert {sig: signal.getsignal(sig) for sig in originals} == originals
    finally:
        for sig, handler in originals.items():
            signal.signal(sig, handler)


def test_two_async_workers_on_one_loop_give_the_signals_back_in_any_order(dsn: str) -> None:
    """Two AsyncWorkers on the application's loop, which has its own SIGTERM handler, stopped in
    the order they started: the first's restore set SIGTERM to its default while the second
    still ran (a SIGTERM then killed the process), and the second's put the first's stale entry
    back (the application never had SIGTERM again). A handler the application adds while a
    worker runs is left in place (a review)."""
    originals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    got: list[str] = []

    async def handle(msg: Message) -> None:
        return None

    async def reach(expected: list[str]) -> None:
        signal.raise_signal(signal.SIGTERM)
        for _ in range(100):  # the loop runs the handler at its next turn
            if got == expected:
                return
            await asyncio.sleep(0.01)
        assert got == expected

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        entries = loop._signal_handlers  # type: ignore[attr-defined]
        loop.add_signal_handler(signal.SIGTERM, got.append, "application")
        app = entries[signal.SIGTERM]
        first, second = (AsyncWorker(AsyncQueue(dsn, "jobs"), handle) for _ in range(2))
        restore_first = first._install_signal_handlers()
        restore_second = second._install_signal_handlers()
        theirs = entries[signal.SIGTERM]
        restore_first()  # the second still runs: SIGTERM is still its
        assert entries[signal.SIGTERM] is theirs and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        restore_second()
        assert entries[signal.SIGTERM] is app
        await reach(["application"])
        # an application's handler added while a worker runs stays
        third = AsyncWorker(AsyncQueue(dsn, "jobs"), handle)
        restore_third = third._install_signal_handlers()
        loop.add_signal_handler(signal.SIGTERM, got.append, "added during the run")
        restore_third()
        await reach(["application", "added during the run"])
        loop.remove_signal_handler(signal.SIGTERM)

    try:
        asyncio.run(scenario())
        assert {sig: signal.getsignal(sig) for sig in originals} == originals
    finally:
        for sig, handler in originals.items():
            signal.signal(sig, handler)


# A Worker on the main thread (handle_signals=False) whose start-up waits for a database that
# does not answer yet; its stop event delivers SIGTERM while the main thread holds the event's
# lock (Event.wait takes it before and after it sleeps: where a real signal may land), and the
# caller's own SIGTERM handler calls stop(). (signal.raise_signal runs the handler before it returns.)
STOP_FROM_OWN_HANDLER_IN_THE_WAITS_LOCK = "import signal, threading\n" + SIGNALLED_INSIDE_THE_LOCK + """
from pgqueue import Queue
from pgqueue.worker import Worker

worker = Worker(Queue("host=127.0.0.1 port=9 connect_timeout=1", "jobs"), lambda msg: None,
                handle_signals=False, startup_timeout=30)
worker._stop_event = SignalledInsideTheLock()
signal.signal(signal.SIGTERM, lambda signum, frame: worker.stop())
worker.run()
print("stopped")
"""


def test_stop_from_the_callers_own_handler_inside_the_start_up_waits_lock_stops_the_worker() -> None:
    """Worker.stop() called by a signal handler of the caller's (handle_signals=False) on the thread
    of run(), while the start-up's wait for the database held the stop event's lock, set that event
    inside its own lock: the worker hung for good. On run()'s thread stop() acts from a thread."""
    proc = subprocess.run([sys.executable, "-c", STOP_FROM_OWN_HANDLER_IN_THE_WAITS_LOCK], capture_output=True,
                          text=True, timeout=20, check=False)
    assert (proc.returncode, proc.stdout) == (0, "stopped\n"), proc.stderr


#: AsyncWorker's run() on the event loop's thread, its stop() called by the caller's own signal
#: handler while run() held the lock that stop() takes too (the start's claim; the stop's
#: watchdog): the first acquisition of that lock delivers SIGTERM inside it.
ASYNC_STOP_FROM_OWN_HANDLER_IN_THE_START_LOCK = """
import asyncio, signal
from pgqueue import AsyncQueue, AsyncWorker


class SignalledInsideTheLock:
    sent = False

    def __init__(self, inner):
        self.inner = inner

    def __enter__(self):
        self.inner.acquire()
        if not self.sent:
            self.sent = True
            signal.raise_signal(signal.SIGTERM)
        return self

    def __exit__(self, *exc):
        self.inner.release()


async def handle(msg):
    pass

worker = AsyncWorker(AsyncQueue("host=127.0.0.1 port=9 connect_timeout=1", "jobs"), handle,
                     handle_signals=False, startup_timeout=30)
worker._start_lock = SignalledInsideTheLock(worker._start_lock)
signal.signal(signal.SIGTERM, lambda signum, frame: worker.stop())
asyncio.run(worker.run())
print("stopped")
"""


def test_async_stop_from_the_callers_own_handler_inside_the_start_lock_stops_the_worker() -> None:
    """AsyncWorker.stop() called by a signal handler of the caller's (signal.signal,
    handle_signals=False) on the loop's thread, while run() held the lock of its start's claim,
    took that lock again: the worker hung for good (a lock the same thread held). The lock is
    re-entrant."""
    proc = subprocess.run([sys.executable, "-c", ASYNC_STOP_FROM_OWN_HANDLER_IN_THE_START_LOCK],
                          capture_output=True, text=True, timeout=20, check=False)
    assert (proc.returncode, proc.stdout) == (0, "stopped\n"), proc.stderr
