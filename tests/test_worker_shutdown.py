"""The worker's shutdown and handler timeouts against a real server: the README's worker
example, run as a process and sent SIGTERM and SIGINT, leaves nothing leased and exits 0;
run() restores the signal handlers it replaced; a hung handler's message is failed with a
clear last_error, its late result ignored, its slot given to a new thread; no LISTEN
connection on a queue whose notify is off; reconnection waits that double while the database
is away and start over once it is back, and a dropped queue that stops the worker with
QueueNotFound (both for Worker and AsyncWorker)."""

from __future__ import annotations

import logging
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
import pytest

from pgqueue import AsyncQueue, AsyncWorker, Message, Queue
from pgqueue.errors import QueueNotFound
from pgqueue.worker import HandlerTimeout, Worker
from test_worker import Results, Started, make_queue, running, wait_for
from worker_handlers import marks

REPO = Path(__file__).resolve().parents[1]

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
    assert time.monotonic() - t0 < 5
    stats = queue.stats()  # all four finished within the grace period and were completed
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (0, 0, 0, 0)


def test_readme_worker_gives_back_at_once_on_a_second_sigint(dsn: str, tmp_path: Path) -> None:
    queue = make_queue(dsn, "emails", lock_ms=60000)
    mark = tmp_path / "marks"
    ids = queue.enqueue_many([{"mark": str(mark), "n": i, "sleep": 60} for i in range(3)])
    proc = start_readme_worker(dsn)
    wait_for(lambda: len(marks(mark)) == 3, timeout=15, what="three handlers to start")
    proc.send_signal(signal.SIGINT)  # Ctrl-C: stop fetching, wait for the handlers...
    time.sleep(0.5)
    assert proc.poll() is None  # ...which are still running (the grace period is 10 s)
    proc.send_signal(signal.SIGINT)  # again: give back now
    t0 = time.monotonic()
    err = finish(proc, 15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert time.monotonic() - t0 < 5
    stats = queue.stats()  # nothing left leased: all three are back, due now
    assert (stats.ready, stats.scheduled, stats.leased, stats.dead) == (3, 0, 0, 0)
    again = queue.dequeue(3)
    assert sorted((m.id, m.attempts) for m in again) == [(i, 2) for i in sorted(ids)]


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
        threading.Timer(1.0, worker.stop).start()
        worker.run()  # on this (main) thread, until the timer stops it
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
    worker = Worker(queue, handler, concurrency=1, timeout=0.5, on_result=results)
    try:
        with running(worker):
            wait_for(lambda: results.items, timeout=5, what="the timeout")
            # concurrency 1, the hung thread still runs: a new thread handles the next one
            later = queue.enqueue("next")
            wait_for(lambda: handled == [later], timeout=5, what="the next message")
            release.set()
            assert returned.wait(5)
            wait_for(lambda: results.count("completed") == 1, what="the next one's result")
            time.sleep(0.3)  # time for a (wrong) settlement of the late return
    finally:
        release.set()
    first = results.items[0]
    assert (first.message.id, first.outcome, first.acknowledged) == (hung, "dead", True)
    assert isinstance(first.error, HandlerTimeout)
    assert 0.45 <= first.duration < 2.0
    assert [r.message.id for r in results.items] == [hung, later]  # the late return changed nothing
    [dead] = queue.dead_letters()
    assert dead.id == hung
    assert dead.last_error is not None
    assert dead.last_error.startswith("HandlerTimeout: the handler was still running after 0.5 s")


def test_a_timeout_per_message_retries_by_the_queue_rules(dsn: str) -> None:
    queue = make_queue(dsn, max_attempts=3, retry_base_ms=0, retry_cap_ms=0)
    slow = queue.enqueue({"sleep": 2.0})
    quick = queue.enqueue({"sleep": 0.6})
    attempts: list[tuple[int, int]] = []
    lock = threading.Lock()

    def handler(msg: Message) -> None:
        with lock:
            attempts.append((msg.id, msg.attempts))
        assert isinstance(msg.payload, dict)
        time.sleep(msg.payload["sleep"] if msg.attempts == 1 else 0)

    def limit(msg: Message) -> float | None:
        # the quick one has no limit; the slow one has 0.3 s
        assert isinstance(msg.payload, dict)
        return 0.3 if msg.payload["sleep"] > 1 else None

    results = Results()
    with running(Worker(queue, handler, concurrency=2, timeout=limit, on_result=results)):
        wait_for(lambda: results.count("completed") == 2, timeout=10, what="both completed")
    outcomes = [(r.message.id, r.outcome) for r in results.items]
    assert outcomes.count((slow, "retried")) == 1 and (slow, "completed") in outcomes
    assert (quick, "completed") in outcomes and (quick, "retried") not in outcomes
    assert sorted(attempts) == sorted([(slow, 1), (slow, 2), (quick, 1)])
    assert queue.stats().total == 0


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
            wait_for(lambda: _worker_backends(dsn), what="the worker's connection")
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
