"""Run a handler over the messages of a queue: the pgqueue worker.

A :class:`Worker` runs plain-function handlers. Its logic is the one worker core
(:mod:`pgqueue._worker_core`, which :class:`pgqueue.AsyncWorker` shares); it drives it with
threads and no event loop: :meth:`Worker.run` runs the worker's loop in the calling thread,
over a sync connection of its own, and the handlers on a bounded pool of ``concurrency``
threads, which hand their returns back through a queue the loop waits on. Heartbeats and
LISTEN have a thread and a connection each.

The core leases messages in batches, completes each message whose handler returns and fails
each message whose handler raises (the extension then retries it after the queue's back-off,
or moves it to the dead letters after ``max_attempts``). While a handler runs, its lease is
extended with heartbeats: every third of the lease, one statement renews the leases of all the
running handlers (``message_heartbeat_batch``, :mod:`pgqueue._lease`). The messages whose handlers have returned by the time the worker
acknowledges are completed together, each with its own token: in the same statement and
transaction as the next fetch (``message_complete_and_dequeue``) when a fetch is due, so that a
busy worker pays one transaction per message, else on their own (``message_complete_batch``).
A message is never acknowledged before its handler has returned, nor twice.

Wake-ups: a LISTEN connection on the queue's channel wakes an idle worker as soon as a
message is enqueued (the queue needs ``notify`` on). Without notifications the worker polls,
backing off from ``poll_min`` to ``poll_max`` while the queue is empty; when messages are
scheduled it sleeps until the next one is due, never longer.

Shutdown: :meth:`Worker.run` called on the main thread makes SIGINT, SIGTERM and SIGHUP stop
it gracefully (fetch no more, let in-flight handlers finish within ``shutdown_grace``, give the
rest back at once with a defer, return normally) and puts the previous signal handlers back
when it returns; a signal ignored when it starts (SIGHUP under nohup, SIGINT in `cmd &` from a
script) stays ignored, and so does an application's own SIGHUP handler (SIGHUP is taken only
while it has the default action). A second SIGINT or SIGTERM gives back what is still in hand at once
(a second SIGHUP does not: a closed terminal often sends two).
:meth:`Worker.stop` does the same from any thread. A database that does not answer does not keep it: a call still
waiting 2 s after the grace is given up (the core's stop watchdog shuts its socket down).

Handler timeouts: a handler still running after ``timeout`` seconds has its message failed
with ``last_error`` ``"HandlerTimeout: ..."`` (the queue's retry and dead-letter rules apply)
and whatever it returns or raises later is ignored. Python cannot kill a thread: the handler
runs on until it returns, on a daemon thread the worker no longer counts; a new thread takes
its place so that ``concurrency`` handlers can still run. The same holds for a handler still
running when the shutdown grace ends: its message is given back, its thread left behind (a
daemon: it does not keep the process alive).

Connections: a lost connection is tried again after 0.1 s, doubling up to 30 s while the
database stays away (the core's ``Backoff``); the loop's next call then opens a new one. A
write refused by a read-only server (25006: a hot standby after a failover) is an outage too:
the connection is closed and the next call, after the same waits, opens a new one. At start,
a database that cannot be reached yet (or is read-only) is waited for the same way (see
:meth:`Worker.run`); what no retry mends ends the start at once.

Delivery is at least once: a worker that dies (even by SIGKILL) loses nothing, because the
messages it held come back when their leases run out. The attempts counter fences every
acknowledgement, so a message is completed at most once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import queue as stdqueue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, cast

import psycopg

from pgqueue import _core
from pgqueue._lease import Heartbeats, Outage, _first_line, interval
from pgqueue._sql import listen_statement
from pgqueue._worker_core import (
    _RECONNECT_MAX,
    Delivery,
    Handler,
    HandlerTimeout,
    Outcome,
    Result,
    Stopped,
    StoppedConnecting,
    Timeout,
    WorkerCore,
    connect_unless_stopped,
    drive,
    is_async_handler,
    is_read_only,
    log,
    stop_signals,
    warn_if_listening_through_a_pooler,
)
from pgqueue.client import Queue, _Connector, _ended_while_idle
from pgqueue.errors import PgQueueError
from pgqueue.message import Message
from pgqueue.tasks import refuse_awaitable, refuse_generator, returned_generator

__all__ = ["Handler", "HandlerTimeout", "Outcome", "Result", "Timeout", "Worker"]

#: An event that only wakes the worker's loop (a stop, say); a notification of new messages.
_WAKE = object()
_NOTIFIED = object()


@dataclass(eq=False)
class _Job:
    """A plain-function call handed to the handler threads, for a delivery."""

    delivery: Delivery
    state: str = "queued"  # queued, running, dropped (nobody waits for it) or done
    started: float = 0.0
    #: What the handler raised (None: it returned), set with ``state`` "done": the loop reads a
    #: handler's outcome here, so that a return whose event was lost (a KeyboardInterrupt landing
    #: after the loop took it off the queue, before it recorded it) is not lost with it.
    error: BaseException | None = None


class _HandlerThreads:
    """``size`` daemon threads running plain-function handlers for the worker's loop.

    :meth:`submit` hands a handler over; when it returns, what it raised (or None) is recorded
    on the job (``job.error``, with its state "done") and the job put on ``returned``, the queue
    the loop waits on. :meth:`drop` stops waiting for a job (a
    timeout, or the end of the shutdown grace): the thread cannot be stopped, it runs on until
    the handler returns, drops the result and exits, and a new thread takes its place so that
    ``size`` handlers can still run. Daemon threads, so that such a thread does not keep the
    process alive either.
    """

    def __init__(self, size: int, handler: Handler, returned: stdqueue.SimpleQueue[object]) -> None:
        self._handler = handler
        self._returned = returned
        self._lock = threading.Lock()  # guards each job's state
        self._jobs: stdqueue.SimpleQueue[_Job | None] = stdqueue.SimpleQueue()
        self._names = itertools.count()
        self._threads = 0
        self.abandoned = 0  # threads left running a handler nobody waits for
        for _ in range(size):
            self._start_thread()

    def _start_thread(self) -> None:
        self._threads += 1
        threading.Thread(target=self._run, name=f"pgqueue-handler-{next(self._names)}", daemon=True).start()

    def submit(self, job: _Job) -> None:
        """Run the handler on ``job.delivery.message`` on a thread; the job then goes to ``returned``.
        (The caller makes the job and records it as the delivery's handle first: an interruption
        between the two then leaves a job :meth:`drop` can still find.)"""
        self._jobs.put(job)

    def drop(self, job: _Job) -> bool:
        """Stop waiting for a job (on the loop); False if its handler has returned already (its
        outcome is then on the job, and the job on ``returned`` or on its way)."""
        with self._lock:
            if job.state == "done":
                return False
            running, job.state = job.state == "running", "dropped"
        if running:
            self._threads -= 1  # that thread ends when its handler returns
            self.abandoned += 1
            self._start_thread()
        return True

    def close(self) -> None:
        """Let every idle thread exit (busy ones exit when their handler returns)."""
        for _ in range(self._threads):
            self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._lock:
                if job.state == "dropped":
                    continue
                job.state, job.started = "running", time.monotonic()
            error: BaseException | None = None
            try:
                _not_awaitable(self._handler(job.delivery.message))
            except BaseException as exc:  # a handler must never take a thread down
                error = exc
            with self._lock:
                dropped, job.state = job.state == "dropped", "done"
                job.error = error
            if dropped:
                log.info("message %d: the abandoned handler returned after %.1f s (result ignored)",
                         job.delivery.message.id, time.monotonic() - job.started)
                return  # a new thread has taken this one's place
            self._returned.put(job)


def _drop_if_read_only(runner: _Connector, call: _core.Call[Any]) -> Any:
    """Run a call on the runner's connection; if the server refused it as read-only (a standby
    after a failover), close that connection first: the next call opens a new one, which may
    reach the new primary (a DNS name or address moved over to it, ``target_session_attrs``)."""
    try:
        return runner.run(call)
    except (psycopg.Error, PgQueueError) as exc:
        if is_read_only(exc):
            own = runner._own
            if own is not None:
                own.close()
        raise


def _not_awaitable(result: object) -> None:
    """Raise TypeError if a handler returned an awaitable (a plain function wrapping a coroutine
    function, say): nothing awaits it here, so what it was to do has not been done. A coroutine
    is closed first (no "never awaited" warning). So does a generator (none of its body ran)."""
    returned_generator(result)
    refuse_awaitable(result, f"the handler returned a {type(result).__name__}, an awaitable the Worker does not "
                             "await (it runs plain functions on threads): use pgqueue.AsyncWorker for coroutine "
                             "handlers")


class Worker(WorkerCore):
    """Process the messages of a queue with a handler, ``concurrency`` at a time.

    Parameters:
        queue: the queue to consume (only its name and connection string are used); the worker
            opens its own connections to its database (one to fetch and acknowledge, one to
            renew leases, one to LISTEN).
        handler: a plain function called with each :class:`~pgqueue.message.Message` on a
            worker thread (or a :class:`pgqueue.Tasks` registry, which dispatches by task name).
            Returning completes the message; raising fails it (retry after the queue's back-off,
            dead letter after ``max_attempts``); raising :class:`pgqueue.Reject` dead-letters it
            now, and so does an exception group whose leaves are all Rejects (a TaskGroup's;
            one mixed with other errors fails the message). A coroutine function (or an object
            whose ``__call__`` is one) is refused with TypeError; a handler that returns an
            awaitable anyway has its message failed with a TypeError (nothing awaited it). A
            KeyboardInterrupt or SystemExit from a handler fails its message, then stops the
            worker at once (the other messages given back) and :meth:`run` raises it.
        concurrency: the most handlers running at once, and messages held at once.
        batch_size: the most messages fetched by one dequeue (default: the free slots).
        lock_ms: the lease of each delivery (default: the queue's ``lock_ms``, read when the
            worker starts: a change of the queue's ``lock_ms`` takes effect when the worker
            restarts); heartbeats renew it every ``lock_ms / 3`` while the handler runs.
        listen: LISTEN for new-message notifications (the queue must have ``notify`` on).
        poll_min, poll_max: the polling back-off on an empty queue, in seconds.
        shutdown_grace: seconds that in-flight handlers get to finish after :meth:`stop`;
            messages still in hand after that are given back for immediate redelivery.
        timeout: the longest a handler may run, in seconds, for every message, or a function
            of the message returning its limit (None: no limit; if the function raises, the
            message is failed with its error and the handler not run). Past it the message is failed
            with a :class:`HandlerTimeout` error and the handler's result is ignored; the
            thread runs on (Python cannot stop it) and a new one takes its place.
        handle_signals: when :meth:`run` is called on the main thread, make SIGINT, SIGTERM
            and SIGHUP stop the worker gracefully (a second SIGINT or SIGTERM stops it at once) while it
            runs, unless ignored when it starts, and restore the previous handlers when it
            returns (with :meth:`run` on another thread, see :meth:`install_signal_handlers`).
        dsn: the connection string to use; by default it is taken from ``queue``.
        on_result: called on the thread running :meth:`run` with a :class:`Result` after each
            delivery is settled (for metrics and tests); exceptions from it are logged.
        startup_timeout: how long :meth:`run` waits at start for a database that cannot be
            reached yet or is read-only (a server starting up, a failover), in seconds: None
            (the default) waits until it can be used or the worker is stopped, 0 does not wait
            (the first failure is raised). A bound: each connection attempt's connect_timeout is
            cut to the time left, and a start-up check the database does not answer is given up
            at the deadline. What no retry mends (authentication refused, in any language, no such
            database, an option value libpq refuses, pgqueue missing or of another version) is
            raised at once either way.
    """

    _stop_from_a_thread_on_run = True  # (see WorkerCore.stop)

    def __init__(
        self,
        queue: Queue,
        handler: Handler,
        *,
        concurrency: int = 4,
        batch_size: int | None = None,
        lock_ms: int | None = None,
        listen: bool = True,
        poll_min: float = 0.05,
        poll_max: float = 5.0,
        shutdown_grace: float = 10.0,
        dsn: str | None = None,
        on_result: Callable[[Result], None] | None = None,
        timeout: Timeout | None = None,
        handle_signals: bool = True,
        startup_timeout: float | None = None,
    ) -> None:
        refuse_generator(handler, "the handler")
        if is_async_handler(handler):
            raise TypeError("the handler is a coroutine function: the Worker runs plain functions "
                            "on threads; use pgqueue.AsyncWorker for coroutines")
        if not isinstance(queue, Queue):  # (None was an AttributeError; an AsyncQueue was taken)
            raise TypeError(f"expected a Queue, got {type(queue).__name__} (use AsyncWorker with an AsyncQueue)")
        super().__init__(queue.name, queue.conninfo if dsn is None else dsn, handler, concurrency=concurrency,
                         batch_size=batch_size, lock_ms=lock_ms, listen=listen, poll_min=poll_min,
                         poll_max=poll_max, shutdown_grace=shutdown_grace, on_result=on_result,
                         timeout=timeout, handle_signals=handle_signals, startup_timeout=startup_timeout)
        self._saved_signals: dict[signal.Signals, Any] | None = None
        self._events: stdqueue.SimpleQueue[object] = stdqueue.SimpleQueue()  # handlers' returns, wake-ups
        self._loop_thread: int | None = None
        self._woken = False  # woken from the loop's own thread: do not block in the next wait
        self._threads: _HandlerThreads | None = None
        self._runner: _Connector | None = None
        self._deadlines: list[tuple[float, int, Delivery]] = []  # handler timeouts, a heap
        self._seq = itertools.count()
        self._listen_stop = threading.Event()

    def run(self) -> None:
        """Process messages until :meth:`stop` is called, then shut down gracefully.

        Runs the worker's loop in the calling thread. On the main thread (and unless
        ``handle_signals=False``) SIGINT, SIGTERM and SIGHUP stop it gracefully while it runs
        (one ignored when it starts stays ignored): it then returns normally, and the previous
        signal handlers are back. If the loop is interrupted by an exception (a KeyboardInterrupt
        with ``handle_signals=False``, a bug), the messages in hand are given back at once before
        it propagates. A KeyboardInterrupt or SystemExit
        raised by a handler stops the worker the same way (its own message failed) and is raised
        here once the worker has shut down.

        A database that cannot be reached yet, or is read-only (a hot standby), is waited for:
        tried again after 0.1 s, doubling up to 30 s, with one warning when it starts (repeated
        every 60 s with the time waited) and one line when it connects, until it works, :meth:`stop` (or SIGINT/SIGTERM/SIGHUP) ends the wait
        at once (run() then returns without starting), or ``startup_timeout`` passes.

        Raises a :mod:`pgqueue.errors` class when the queue cannot be used at start-up
        (``ConnectionFailed`` for an authentication refused or a database that does not exist,
        ``ExtensionNotInstalled``, ``VersionMismatch``, ``QueueNotFound``, ...); later
        connection losses (and a server turned read-only) are logged and retried. Raises
        RuntimeError when called where an event loop runs already.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("Worker.run() blocks its thread until the worker stops and cannot be "
                               "called from a running event loop: use pgqueue.AsyncWorker there, or "
                               "run it on a thread (await asyncio.to_thread(worker.run))")
        self._claim_run("a Worker")
        self._loop_thread = threading.get_ident()
        if (self._handle_signals and self._saved_signals is None
                and threading.current_thread() is threading.main_thread()):
            self.install_signal_handlers()
        try:
            self._run()
        finally:
            if threading.current_thread() is threading.main_thread():  # only it may set them
                self.restore_signal_handlers()
        self._raise_fatal()

    def install_signal_handlers(self) -> None:
        """Make SIGINT, SIGTERM and SIGHUP stop the worker gracefully; a second SIGINT or SIGTERM stops
        it now. One ignored now (SIGHUP under nohup, SIGINT in `cmd &` from a script) stays
        ignored.

        Call from the main thread (Python delivers signals there, and only it may set their
        handlers) when :meth:`run` runs on another one; on the main thread :meth:`run` does it
        itself (unless ``handle_signals=False``) and puts the previous handlers back when it
        returns. :meth:`run` on another thread cannot put them back: call
        :meth:`restore_signal_handlers` from the main thread once it has returned. Until then,
        the first of these signals after :meth:`run` has returned puts them back itself and
        goes to the previous handler (a KeyboardInterrupt, say), as if the worker's had never
        been installed.
        """

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self._ended.is_set():  # run() has returned: the signal is no longer the worker's
                self.restore_signal_handlers()
                # It may have come while the main thread was putting the handlers back (run()'s
                # finally, which this handler interrupts): that restore took them before this one
                # could, and has not reached this signal yet. Raised again to this handler it would
                # come back, again and again, to a RecursionError (a CI run of tests/test_worker.py,
                # a second SIGTERM as the worker stopped). So every one still this handler's is put
                # back here (also those after it: the previous handler may raise, a
                # KeyboardInterrupt, and end the interrupted restore's loop).
                for sig, previous in saved.items():
                    if signal.getsignal(sig) is on_signal:
                        signal.signal(sig, previous)
                signal.raise_signal(signum)
                return
            # Between two bytecodes of the main thread, maybe inside a lock: act from a thread.
            threading.Thread(target=self._on_signal, args=(signal.Signals(signum),), daemon=True).start()

        saved = {sig: signal.signal(sig, on_signal) for sig in stop_signals()}
        if self._saved_signals is None:
            self._saved_signals = saved

    def restore_signal_handlers(self) -> None:
        """Put back the signal handlers that :meth:`install_signal_handlers` replaced
        (nothing if it did not run, or they are back already). Call it from the main
        thread: :meth:`run` on the main thread calls it when it returns; on another thread it
        cannot (see :meth:`install_signal_handlers`)."""
        saved, self._saved_signals = self._saved_signals, None
        for sig, previous in (saved or {}).items():
            signal.signal(sig, previous)

    # -- the loop -------------------------------------------------------------------------

    def _wake_up(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self._woken = True  # the loop is awake: it looks again before it waits
        else:
            self._events.put(_WAKE)

    def _call(self, call: _core.Call[Any]) -> Any:
        assert self._runner is not None
        self._call_since = time.monotonic()  # for the stop's watchdog
        try:
            self._connect_loop()
            return _drop_if_read_only(self._runner, call)
        finally:
            self._call_since = None

    def _connect_loop(self) -> None:
        """Open the loop's connection if it has none (after a loss), giving the attempt up at once
        on stop() (StoppedConnecting): libpq's attempt takes up to connect_timeout against a
        server that does not answer. A connection the server ended while it sat idle (a
        restart, a pg_terminate_backend) is found so here and replaced the same way: the
        connector would open it again with a plain attempt, deaf to stop(). Once stopping, the
        shutdown's calls connect as before (bounded by connect_timeout): what finished is
        acknowledged over a new connection."""
        runner = self._runner
        assert runner is not None
        own = runner._own
        if self._stopping or (own is not None and not _ended_while_idle(own)):
            return
        try:
            conn = connect_unless_stopped(self._dsn, self._stop_event)
        except Stopped:
            raise StoppedConnecting() from None
        with runner._lock:
            runner._own = conn

    def _loop_connection(self) -> Any:
        return None if self._runner is None else self._runner._own

    def _run(self) -> None:
        if not self._check_server():
            return  # stopped before the server answered the check
        # One connection for the loop's calls, opened again at the first call after a loss (after
        # the Backoff's wait); a connection attempt gives up after connect_timeout.
        self._runner = _Connector(self._dsn)
        self._threads = _HandlerThreads(self._concurrency, self._handler, self._events)
        beats_runner = _Connector(self._dsn)  # the heartbeats' own connection
        try:
            self._started_log(drive(self._configure(), self._call, self._wait), "threads")

            def beat(msgs: list[Message]) -> list[Message]:
                lost: list[Message] = _drop_if_read_only(beats_runner, self._beat(msgs))
                return lost

            beats = Heartbeats(self._held, beat, interval(self._lease_ms), still_held=self._still_held)
            listener = None
            if self._listen:
                listener = threading.Thread(target=self._listen_loop, name="pgqueue-listen", daemon=True)
                listener.start()
            try:
                drive(self._run_steps(), self._call, self._wait)
            finally:
                beats.stop(timeout=2.0)
                self._listen_stop.set()
                if listener is not None:
                    listener.join(2.0)
        finally:
            self._ended.set()
            self._threads.close()
            beats_runner.close()
            self._runner.close()
            log.info("worker stopped")

    def _wait(self, timeout: float) -> None:
        """Wait until woken (a handler's return, a notification, stop), a handler's timeout or
        ``timeout``; then take in every event that has come."""
        if self._woken:
            timeout = 0.0
        if self._deadlines:
            timeout = min(timeout, self._deadlines[0][0] - time.monotonic())
        try:
            event = self._events.get(timeout=timeout) if timeout > 0 else self._events.get_nowait()
            while True:
                self._take(event)
                event = self._events.get_nowait()
        except stdqueue.Empty:
            pass
        self._expire()
        self._woken = False  # what this wait took in (handlers' ends among it), the loop sees next

    def _take(self, event: object) -> None:
        if event is _NOTIFIED:
            self._notified = True
        elif isinstance(event, _Job):  # a handler's return
            self._returned(event)

    def _returned(self, job: _Job) -> None:
        """Finish the delivery of a job whose handler has returned (``job.state`` "done"), with the
        outcome recorded on the job; nothing if it is finished already (timed out or given back
        meanwhile, or its return taken once already: see :meth:`_abandon`)."""
        d = job.delivery
        if d.finished is None and d.handle is job:
            d.error = job.error
            self._finish(d)

    def _start(self, messages: list[Message]) -> None:
        """Hand the handler of each newly leased message to the handler threads.

        Every new delivery is taken in hand before any handler starts, and each delivery's job
        is recorded as its handle before it is queued: a KeyboardInterrupt (Ctrl-C with
        handle_signals=False) landing anywhere in here leaves each message either in hand with no
        handle (never started: the shutdown gives it back) or with a job the shutdown can drop or
        take the outcome of."""
        assert self._threads is not None
        fresh = [Delivery(msg) for msg in self._adopt(messages)]
        for d in fresh:
            self._hold(d)
        for d in fresh:
            msg = d.message
            try:
                limit = self._limit(msg)
            except Exception as exc:  # the timeout function's: the message fails with it (a KeyboardInterrupt there: given back)
                d.error = exc
                self._finish(d)
                continue
            d.handle = job = _Job(d)
            self._threads.submit(job)
            if limit is not None:
                heapq.heappush(self._deadlines, (d.started + limit, next(self._seq), d))
        if len(self._deadlines) > 2 * self._concurrency + 64:
            # Deliveries settled before their deadline: drop them now rather than when it
            # passes, or a busy worker with a long timeout would keep every message of that
            # timeout's span alive.
            self._deadlines = [e for e in self._deadlines if e[2].finished is None]
            heapq.heapify(self._deadlines)

    def _abandon(self, d: Delivery) -> None:
        assert self._threads is not None
        job = cast("_Job | None", d.handle)
        if job is None or self._threads.drop(job):
            # never handed over (an interruption in _start), or the thread runs on unwatched:
            # the message is given back
            d.released = True
            self._finish(d)
        else:
            # its handler has returned: its outcome is on the job (settled now, even if the
            # event of its return was lost to an interruption; the event, if it comes, is ignored)
            self._returned(job)

    def _expire(self) -> None:
        """Fail the deliveries whose handler has run past its timeout (the thread runs on)."""
        now = time.monotonic()
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, _, d = heapq.heappop(self._deadlines)
            assert self._threads is not None
            if d.finished is not None:
                continue
            if not self._threads.drop(d.handle):
                self._returned(d.handle)  # it returned in time (its event, on its way, is then ignored)
                continue
            limit = deadline - d.started
            d.error = HandlerTimeout(f"the handler was still running after {limit:g} s (its result will be ignored)")
            log.warning("message %d: handler timed out after %g s; failing it (its result will be ignored; "
                        "%d abandoned handler thread(s) so far)", d.message.id, limit, self._threads.abandoned)
            self._finish(d)

    def _listen_loop(self) -> None:
        """Wake the loop whenever a message is enqueued (LISTEN on the queue's channel)."""
        backoff = 0.5
        outage = Outage(log, "LISTEN connection")
        listened = False  # the last connection listened: one that fails is replaced at once, quietly
        pooled = False  # warned that it goes through a pooler
        while not self._listen_stop.is_set():
            try:
                # (given up at once when the worker stops: run() does not wait for connect_timeout)
                with connect_unless_stopped(self._dsn, self._listen_stop) as conn:
                    conn.execute(listen_statement(self._name))
                    pooled = pooled or warn_if_listening_through_a_pooler(conn, self._name, self._poll_max)
                    self._events.put(_NOTIFIED)  # something may have arrived while we were connecting
                    backoff, listened = 0.5, True
                    outage.worked()
                    while not self._listen_stop.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self._events.put(_NOTIFIED)
            except Stopped:
                return
            except (psycopg.Error, PgQueueError) as exc:
                if listened:
                    # (its connection sat idle, waiting: a server's idle_session_timeout closed it,
                    # a warning and a 0.5-s wait each time, a review; an outage fails again below)
                    log.debug("LISTEN connection lost (%s): connecting again", _first_line(exc))
                    listened = False
                    continue
                outage.failed(f"LISTEN connection failed: {_first_line(exc)}",
                              f"polling until it is back (retry in {backoff:g}s)")
                self._listen_stop.wait(backoff)
                backoff = min(backoff * 2, _RECONNECT_MAX)
