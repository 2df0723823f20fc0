"""Run a handler over the messages of a queue: the pgqueue worker.

A :class:`Worker` leases messages in batches, runs the handler on a bounded pool of threads,
completes each message whose handler returns and fails each message whose handler raises
(the extension then retries it after the queue's back-off, or moves it to the dead letters
after ``max_attempts``). While a handler runs, its lease is extended with heartbeats. The
messages whose handlers have returned by the time the worker acknowledges are completed
together, each with its own token: in the same statement and transaction as the next fetch
(``message_complete_and_dequeue``) when a fetch is due, so that a busy worker pays one
transaction per message, else on their own (``message_complete_batch``). A message is never
acknowledged before its handler has returned, nor twice.

Wake-ups: a LISTEN connection on the queue's channel wakes an idle worker as soon as a
message is enqueued (the queue needs ``notify`` on). Without notifications the worker polls,
backing off from ``poll_min`` to ``poll_max`` while the queue is empty; when messages are
scheduled it sleeps until the next one is due, never longer.

Shutdown: :meth:`Worker.run` called on the main thread makes SIGINT and SIGTERM stop it
gracefully (fetch no more, let in-flight handlers finish within ``shutdown_grace``, give the
rest back at once with a defer, return normally) and puts the previous signal handlers back
when it returns. A second signal gives back what is still in hand at once.

Handler timeouts: a handler still running after ``timeout`` seconds has its message failed
with ``last_error`` ``"HandlerTimeout: ..."`` (the queue's retry and dead-letter rules apply)
and whatever it returns or raises later is ignored. Python cannot kill a thread: the handler
runs on until it returns, on a thread the worker no longer counts; a new thread takes its
place so that ``concurrency`` handlers can still run.

Delivery is at least once: a worker that dies (even by SIGKILL) loses nothing, because the
messages it held come back when their leases run out. The attempts counter fences every
acknowledgement, so a message is completed at most once.
"""

from __future__ import annotations

import inspect
import logging
import queue as stdqueue
import signal
import threading
import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue._core import error_text
from pgqueue._lease import Heartbeats, interval
from pgqueue._sql import listen_statement
from pgqueue.client import Queue
from pgqueue.compat import check_server
from pgqueue.errors import ConnectionFailed, PgQueueError, translating
from pgqueue.message import Message
from pgqueue.tasks import Reject, Tasks

__all__ = ["Handler", "HandlerTimeout", "Outcome", "Result", "Timeout", "Worker"]

log = logging.getLogger("pgqueue.worker")

#: A handler takes a message; its return value is ignored, an exception fails the message.
Handler = Callable[[Message], object]

#: A handler timeout: seconds for every message, or a function of the message (None: no limit).
Timeout = float | Callable[[Message], float | None]


class HandlerTimeout(Exception):
    """The error a timed-out delivery is failed with (the handler was still running)."""


#: What became of a delivery: completed; failed and to be retried; failed for the last time
#: (dead-lettered); or released (given back unprocessed at shutdown).
Outcome = Literal["completed", "retried", "dead", "released"]

_RECONNECT_MIN = 0.1
_RECONNECT_MAX = 30.0
#: What a lost or refused connection raises: psycopg itself, or the client's translation.
_CONNECTION_ERRORS = (psycopg.OperationalError, ConnectionFailed)
#: Any database error.
_DATABASE_ERRORS = (psycopg.Error, PgQueueError)


def is_connection_error(exc: BaseException) -> bool:
    """Tell whether a database error means the connection is lost or refused (then wait and
    try again) rather than a refusal of the call (a dropped queue: stop with it)."""
    return isinstance(exc, _CONNECTION_ERRORS) or isinstance(exc.__cause__, psycopg.OperationalError)


class Backoff:
    """The wait before trying a lost database again: 0.1 s, doubling up to 30 s while it stays
    away, from 0.1 s again after :meth:`reset` (once a call works). Worker and AsyncWorker
    share it."""

    def __init__(self) -> None:
        self._next = _RECONNECT_MIN

    def next(self) -> float:
        """Return the wait before the next attempt, and double the one after it."""
        wait, self._next = self._next, min(self._next * 2, _RECONNECT_MAX)
        return wait

    def reset(self) -> None:
        self._next = _RECONNECT_MIN


@dataclass(frozen=True)
class Result:
    """What became of one delivery of a message, passed to the ``on_result`` hook.

    ``acknowledged`` is what the database answered: False means the worker no longer held
    the message (its lease ran out and it was delivered again), so the outcome was not
    recorded and the message will be (or was) handled by another delivery.
    """

    message: Message
    outcome: Outcome
    acknowledged: bool
    error: BaseException | None = None
    duration: float = 0.0


@dataclass(eq=False)
class _Delivery:
    """A message in hand, from dequeue until it is acknowledged or released."""

    message: Message
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    error: BaseException | None = None
    released: bool = False
    settled: bool = False
    deadline: float | None = None  # monotonic time past which the handler has timed out
    timed_out: bool = False


def _describe(exc: BaseException) -> str:
    """Return the one-line error text stored with a failed message (the client's own)."""
    return error_text(exc)


def check_options(*, concurrency: int, batch_size: int | None, lock_ms: int | None, poll_min: float,
                  poll_max: float, shutdown_grace: float, timeout: Timeout | None) -> None:
    """Raise ValueError for worker options out of range (Worker and AsyncWorker share them)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    if lock_ms is not None and lock_ms < 1:
        raise ValueError(f"lock_ms must be at least 1, got {lock_ms}")
    if not 0 < poll_min <= poll_max:
        raise ValueError(f"need 0 < poll_min <= poll_max, got {poll_min} and {poll_max}")
    if shutdown_grace < 0:
        raise ValueError(f"shutdown_grace must be >= 0, got {shutdown_grace}")
    if isinstance(timeout, (int, float)) and not timeout > 0:
        raise ValueError(f"timeout must be > 0 seconds, got {timeout}")


def _worker_conninfo(dsn: str) -> str:
    """Add application_name=pgqueue-worker to a conninfo that does not name one."""
    if "application_name" in conninfo_to_dict(dsn):
        return dsn
    return make_conninfo(dsn, application_name="pgqueue-worker")


class _HandlerPool:
    """A fixed number of daemon threads running the handler on deliveries.

    Daemon threads, so that a handler still running after the shutdown grace period does
    not keep the process alive: its message has been given back by then.
    """

    def __init__(self, size: int, handler: Handler, done: Callable[[_Delivery], None],
                 lock: threading.Lock) -> None:
        self._handler = handler
        self._done = done
        self._lock = lock  # the worker's: guards a delivery's finished, error and timed_out
        self._jobs: stdqueue.SimpleQueue[_Delivery | None] = stdqueue.SimpleQueue()
        self._names = itertools.count()
        self._threads = 0
        self.abandoned = 0  # threads left running a timed-out handler
        for _ in range(size):
            self._start_thread()

    def _start_thread(self) -> None:
        self._threads += 1
        threading.Thread(target=self._run, name=f"pgqueue-handler-{next(self._names)}", daemon=True).start()

    def submit(self, delivery: _Delivery) -> None:
        self._jobs.put(delivery)

    def abandon(self) -> None:
        """Replace a thread stuck in a timed-out handler: it exits when that handler returns."""
        self.abandoned += 1
        self._start_thread()

    def close(self) -> None:
        """Let every idle thread exit (busy ones exit when their handler returns)."""
        for _ in range(self._threads):
            self._jobs.put(None)

    def _run(self) -> None:
        while True:
            delivery = self._jobs.get()
            if delivery is None:
                return
            error: BaseException | None = None
            try:
                self._handler(delivery.message)
            except BaseException as exc:  # a handler must never take a thread down
                error = exc
            with self._lock:
                timed_out = delivery.timed_out
                if not timed_out:
                    delivery.error, delivery.finished = error, time.monotonic()
            if timed_out:
                # Its message was failed when it timed out, and a new thread has taken this
                # one's place: the result is ignored and this thread ends.
                log.info("message %d: the timed-out handler returned after %.1f s (result ignored)",
                         delivery.message.id, time.monotonic() - delivery.started)
                return
            self._done(delivery)


class Worker:
    """Process the messages of a queue with a handler, ``concurrency`` at a time.

    Parameters:
        queue: the queue to consume; the worker opens its own connections to its database
            (one to fetch and acknowledge, one for heartbeats, one to LISTEN).
        handler: called with each :class:`~pgqueue.message.Message` on a worker thread (or a
            :class:`pgqueue.Tasks` registry, which dispatches by task name). Returning
            completes the message; raising fails it (retry after the queue's back-off, dead
            letter after ``max_attempts``); raising :class:`pgqueue.Reject` dead-letters it now.
        concurrency: the most handlers running at once, and messages held at once.
        batch_size: the most messages fetched by one dequeue (default: the free slots).
        lock_ms: the lease of each delivery (default: the queue's ``lock_ms``); heartbeats
            renew it every ``lock_ms / 3`` while the handler runs.
        listen: LISTEN for new-message notifications (the queue must have ``notify`` on).
        poll_min, poll_max: the polling back-off on an empty queue, in seconds.
        shutdown_grace: seconds that in-flight handlers get to finish after :meth:`stop`;
            messages still in hand after that are given back for immediate redelivery.
        timeout: the longest a handler may run, in seconds, for every message, or a function
            of the message returning its limit (None: no limit). Past it the message is failed
            with a :class:`HandlerTimeout` error and the handler's result is ignored; the
            thread runs on (Python cannot stop it) and a new one takes its place.
        handle_signals: when :meth:`run` is called on the main thread, make SIGINT and SIGTERM
            stop the worker gracefully (a second one stops it at once) while it runs, and
            restore the previous handlers when it returns.
        dsn: the connection string to use; by default it is taken from ``queue``.
        on_result: called on the worker's thread with a :class:`Result` after each
            delivery is settled (for metrics and tests); exceptions from it are logged.
    """

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
    ) -> None:
        check_options(concurrency=concurrency, batch_size=batch_size, lock_ms=lock_ms, poll_min=poll_min,
                      poll_max=poll_max, shutdown_grace=shutdown_grace, timeout=timeout)
        if inspect.iscoroutinefunction(handler) or (isinstance(handler, Tasks) and handler.is_async):
            raise TypeError("the handler is a coroutine function: the Worker runs plain functions "
                            "on threads; use pgqueue.AsyncWorker for coroutines")
        self._name = queue.name
        self._dsn = _worker_conninfo(dsn if dsn is not None else queue.conninfo)
        self._handler = handler
        self._concurrency = concurrency
        self._batch_size = min(batch_size or concurrency, concurrency, 10000)
        self._lock_ms = lock_ms
        self._listen = listen
        self._poll_min = poll_min
        self._poll_max = poll_max
        self._shutdown_grace = shutdown_grace
        self._on_result = on_result
        self._timeout = timeout
        self._handle_signals = handle_signals
        self._saved_signals: dict[signal.Signals, Any] | None = None

        self._wake = threading.Event()  # something happened: a result, a notification, stop
        self._notified = threading.Event()  # a message was enqueued
        self._stopping = threading.Event()  # stop fetching, drain
        self._aborting = threading.Event()  # skip the rest of the grace period
        self._closing = threading.Event()  # helper threads exit
        self._started = False
        self._signalled = False
        self._lock = threading.Lock()
        self._in_hand: dict[int, _Delivery] = {}
        self._finished: deque[_Delivery] = deque()
        self._conn: psycopg.Connection[Any] | None = None
        self._queue: Queue | None = None
        self._max_attempts: int | None = None
        self._lease_ms = lock_ms or 30000
        self._pool: _HandlerPool | None = None
        self._reconnect = Backoff()
        self._beats_queue = Queue(self._dsn, self._name)  # the heartbeats' own connection

    @property
    def queue_name(self) -> str:
        """The name of the queue this worker consumes."""
        return self._name

    @property
    def in_flight(self) -> int:
        """How many messages the worker holds right now."""
        with self._lock:
            return len(self._in_hand)

    # -- control ------------------------------------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        """Ask the worker to stop: fetch no more, let in-flight handlers finish (up to
        ``shutdown_grace``), give back the rest. Thread-safe; :meth:`run` then returns.

        Parameters:
            now: skip (what is left of) the grace period: give back at once what is in hand.
        """
        if now:
            self._aborting.set()
        self._stopping.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        """Make SIGINT and SIGTERM stop the worker gracefully; a second signal stops it now.

        Call from the main thread (Python delivers signals there). :meth:`run` does it itself
        on the main thread (unless ``handle_signals=False``); either way the previous handlers
        are put back when :meth:`run` returns.
        """

        def on_signal(signum: int, frame: FrameType | None) -> None:
            # A signal handler runs on the main thread between two bytecodes, maybe while
            # that thread holds a lock that stop() needs: act from another thread.
            again, self._signalled = self._signalled, True
            threading.Thread(target=self._stop_on_signal, args=(signum, again), daemon=True).start()

        saved = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        if self._saved_signals is None:
            self._saved_signals = saved

    def _restore_signal_handlers(self) -> None:
        saved, self._saved_signals = self._saved_signals, None
        for sig, previous in (saved or {}).items():
            signal.signal(sig, previous)

    def _stop_on_signal(self, signum: int, again: bool) -> None:
        name = signal.Signals(signum).name
        if again:
            log.warning("%s again: giving back the messages in hand now", name)
        else:
            log.info("%s: stopping; in-flight handlers get %gs to finish (send it again "
                     "to stop at once)", name, self._shutdown_grace)
        self.stop(now=again)

    # -- the main loop ------------------------------------------------------------------

    def run(self) -> None:
        """Process messages until :meth:`stop` is called, then shut down gracefully.

        On the main thread (and unless ``handle_signals=False``) SIGINT and SIGTERM stop it
        gracefully while it runs: it then returns normally, and the previous signal handlers
        are back. If the loop is interrupted by an exception (a KeyboardInterrupt on another
        set-up, a bug), the messages in hand are given back at once before it propagates.

        Raises a :mod:`pgqueue.errors` class when the queue cannot be used at start-up
        (``ConnectionFailed``, ``QueueNotFound``, ...); later connection losses are logged
        and retried.
        """
        with self._lock:
            if self._started:
                raise RuntimeError("a Worker runs once; create a new one")
            self._started = True
        if (self._handle_signals and self._saved_signals is None
                and threading.current_thread() is threading.main_thread()):
            self.install_signal_handlers()
        try:
            self._run()
        finally:
            self._restore_signal_handlers()

    def _run(self) -> None:
        try:
            self._start()
        except BaseException:
            self._disconnect()
            raise
        assert self._pool is not None
        beats = Heartbeats(self._held, self._beat, interval(self._lease_ms), still_held=self._still_held)
        helpers: list[threading.Thread] = []
        if self._listen:
            helpers.append(threading.Thread(target=self._listen_loop, name="pgqueue-listen", daemon=True))
        for thread in helpers:
            thread.start()
        try:
            try:
                self._loop()
            except BaseException:
                self._stopping.set()
                self._aborting.set()  # give back at once what is in hand, then propagate
                raise
            finally:
                self._drain()
        finally:
            self._closing.set()
            self._pool.close()
            beats.stop(timeout=2.0)
            for thread in helpers:
                thread.join(timeout=2.0)
            self._beats_queue.close()
            self._disconnect()
            log.info("worker stopped")

    def _start(self) -> None:
        """Connect, check the database's pgqueue version, read the queue's settings and start
        the handler threads."""
        self._connect()
        assert self._conn is not None and self._queue is not None
        check_server(self._conn)  # once: reconnections later reach the same database
        settings = self._queue.settings()
        self._max_attempts = settings.max_attempts
        self._lease_ms = self._lock_ms or settings.lock_ms
        if self._listen and not settings.notify:
            # No NOTIFY would ever come: do not hold a LISTEN connection for nothing.
            self._listen = False
            log.info("queue %r has notify off: polling only, no LISTEN (turn it on with "
                     "`pgqueue queue alter %s --notify` for instant wake-ups)", self._name, self._name)
        where = conninfo_to_dict(self._dsn)
        log.info("worker started: queue %r in database %s on %s, concurrency %d, lease %d ms",
                 self._name, where.get("dbname", "?"), where.get("host", "localhost"),
                 self._concurrency, self._lease_ms)
        self._pool = _HandlerPool(self._concurrency, self._handler, self._handler_done, self._lock)

    def _loop(self) -> None:
        delay = self._poll_min  # the next sleep if the queue is empty
        next_poll = 0.0  # monotonic time of the next dequeue, when there is a free slot
        self._notified.set()
        while not self._stopping.is_set():
            # Acknowledge and fetch in one statement when both are due (one transaction per
            # message in lease mode); what is left (failures, releases) is settled alone.
            want, got = 0, None
            if self._notified.is_set() or time.monotonic() >= next_poll:
                want, got = self._complete_and_fetch()
            if self._settle() | self._expire():
                next_poll = 0.0  # a retry or release may be due soon: look again
            free = self._concurrency - self.in_flight
            if got is None and free > 0 and (self._notified.is_set() or time.monotonic() >= next_poll):
                self._notified.clear()
                want = min(free, self._batch_size)
                try:
                    got = self._fetch(want)
                except _DATABASE_ERRORS as exc:
                    if not self._is_connection_error(exc):
                        raise
                    next_poll = time.monotonic() + self._connection_lost(exc)
            if got is not None:
                self._reconnect.reset()
                if got == want:
                    # There may be more: fetch again as soon as a slot is free.
                    delay, sleep = self._poll_min, 0.0
                else:
                    if got:
                        delay = self._poll_min
                    sleep, delay = delay, min(delay * 2, self._poll_max)
                    try:
                        sleep = self._until_due(sleep)
                    except _DATABASE_ERRORS as exc:
                        if not self._is_connection_error(exc):
                            raise
                        sleep = self._connection_lost(exc)
                next_poll = time.monotonic() + sleep
            free = self._concurrency - self.in_flight
            timeout = max(0.0, next_poll - time.monotonic()) if free > 0 else 1.0
            self._wake.wait(self._until_deadline(timeout))
            self._wake.clear()

    def _complete_and_fetch(self) -> tuple[int, int | None]:
        """Complete the leading run of finished deliveries whose handler returned and lease
        messages for the slots free after that, in one statement
        (``message_complete_and_dequeue``). Returns (wanted, got); got is None when there was
        nothing to complete, no slot to fill, or the connection was lost (the deliveries are
        then kept, to be acknowledged after reconnecting)."""
        with self._lock:
            run = list(itertools.takewhile(lambda d: d.error is None and not d.released, self._finished))
            want = min(self._concurrency - len(self._in_hand) + len(run), self._batch_size)
        if not run or want <= 0:
            return 0, None
        self._notified.clear()
        try:
            if self._queue is None:
                self._connect()
            assert self._queue is not None
            messages, lost = self._queue.complete_and_dequeue([d.message for d in run], want,
                                                              lock_ms=self._lock_ms)
        except _DATABASE_ERRORS as exc:
            if not self._is_connection_error(exc):
                raise
            self._connection_lost(exc)
            return 0, None
        results = self._completed(run, {m.id for m in lost})
        for d, result in zip(run, results):
            self._forget(d)
            self._report(result)
        self._hand_out(messages)
        return want, len(messages)

    def _fetch(self, want: int) -> int:
        """Lease up to ``want`` messages and hand them to the handler threads."""
        if self._queue is None:
            self._connect()
        assert self._queue is not None
        messages = self._queue.dequeue(want, lock_ms=self._lock_ms)
        self._hand_out(messages)
        return len(messages)

    def _hand_out(self, messages: list[Message]) -> None:
        """Start the handlers of newly leased messages."""
        assert self._pool is not None
        deliveries = [_Delivery(m) for m in messages]
        for d in deliveries:
            limit = self._timeout(d.message) if callable(self._timeout) else self._timeout
            if limit is not None:
                d.deadline = d.started + limit
        with self._lock:
            for d in deliveries:
                self._in_hand[d.message.id] = d
        for d in deliveries:
            self._pool.submit(d)

    def _until_due(self, sleep: float) -> float:
        """Shorten ``sleep`` to end when the queue's next scheduled message is due."""
        assert self._queue is not None
        due = self._queue.next_due()
        if due is None:
            return sleep
        due_in = due.timestamp() - time.time()
        if due_in <= 0:
            # Due but not delivered to us: another consumer holds it right now. Back off.
            return sleep
        return min(sleep, due_in + 0.002)

    def _until_deadline(self, wait: float) -> float:
        """Shorten a wait so that it ends when the next handler's time is up."""
        with self._lock:
            deadlines = [d.deadline for d in self._in_hand.values()
                         if d.deadline is not None and d.finished is None and not d.settled]
        if not deadlines:
            return wait
        return max(0.0, min(wait, min(deadlines) - time.monotonic()))

    def _expire(self) -> bool:
        """Fail the messages whose handlers have run past their timeout; True if any was."""
        now = time.monotonic()
        with self._lock:
            late = [d for d in self._in_hand.values()
                    if d.deadline is not None and d.deadline <= now and d.finished is None
                    and not d.settled and not d.released]
            for d in late:
                assert d.deadline is not None
                d.timed_out = True  # from now on the handler thread ignores its result
                d.error = HandlerTimeout(f"the handler was still running after {d.deadline - d.started:g} s "
                                         "(its result will be ignored)")
                d.finished = now
        for d in late:
            assert self._pool is not None and d.deadline is not None
            self._pool.abandon()
            log.warning("message %d: handler timed out after %g s; failing it (%d abandoned handler "
                        "thread(s) so far)", d.message.id, d.deadline - d.started, self._pool.abandoned)
            try:
                result = self._acknowledge(d)
            except _DATABASE_ERRORS as exc:
                if not self._is_connection_error(exc):
                    raise
                self._connection_lost(exc)
                log.warning("message %d: could not fail it; it returns when its lease runs out", d.message.id)
                result = Result(d.message, "retried", False, d.error, now - d.started)
            self._forget(d)
            self._report(result)
        return bool(late)

    def _handler_done(self, delivery: _Delivery) -> None:
        with self._lock:
            self._finished.append(delivery)
        self._wake.set()

    def _settle(self) -> bool:
        """Acknowledge finished deliveries; return True if one went back on the queue.

        The leading run of deliveries whose handler returned is completed in one statement;
        failures and releases are settled one by one, in the order the handlers finished.
        """
        requeued = False
        while True:
            with self._lock:
                if not self._finished:
                    return requeued
                run = list(itertools.takewhile(lambda d: d.error is None and not d.released, self._finished))
                delivery = self._finished[0]
            if delivery.released:
                self._forget(delivery)
                continue
            batch = run if len(run) > 1 else [delivery]
            try:
                results = self._complete_many(batch) if len(batch) > 1 else [self._acknowledge(delivery)]
            except _DATABASE_ERRORS as exc:
                if not self._is_connection_error(exc):
                    raise
                self._connection_lost(exc)
                return requeued  # keep them; acknowledge after reconnecting
            for d, result in zip(batch, results):
                self._forget(d)
                requeued = requeued or result.outcome == "retried"
                self._report(result)

    def _acknowledge(self, delivery: _Delivery) -> Result:
        if self._queue is None:
            self._connect()
        assert self._queue is not None
        msg = delivery.message
        duration = (delivery.finished or time.monotonic()) - delivery.started
        if delivery.error is None:
            ok = self._queue.complete(msg)
            log.debug("message %d completed (attempt %d, %.3f s)", msg.id, msg.attempts, duration)
            if not ok:
                log.warning("message %d: finished after its lease ran out; it was delivered "
                            "again (raise lock_ms?)", msg.id)
            return Result(msg, "completed", ok, None, duration)
        error = delivery.error
        if isinstance(error, Reject):  # no retry can fix it: dead-letter it now
            ok = self._queue.reject(msg, _describe(error))
            log.warning("message %d rejected: %s; moved to the dead letters", msg.id, _describe(error))
            return Result(msg, "dead", ok, error, duration)
        last = self._max_attempts is not None and msg.attempts >= self._max_attempts
        ok = self._queue.fail(msg, _describe(error))
        if last:
            log.warning("message %d failed for the last time (attempt %d): %s; moved to the dead "
                        "letters", msg.id, msg.attempts, _describe(error))
        else:
            log.warning("message %d failed (attempt %d): %s; will be retried",
                        msg.id, msg.attempts, _describe(error))
        log.debug("message %d: handler traceback", msg.id, exc_info=error)
        return Result(msg, "dead" if last else "retried", ok, error, duration)

    def _complete_many(self, deliveries: list[_Delivery]) -> list[Result]:
        """Complete deliveries whose handlers returned, in one statement."""
        if self._queue is None:
            self._connect()
        assert self._queue is not None
        lost = {m.id for m in self._queue.complete_many([d.message for d in deliveries])}
        return self._completed(deliveries, lost)

    def _completed(self, deliveries: list[_Delivery], lost: set[int]) -> list[Result]:
        """The results of deliveries acknowledged as completed; ``lost``: the ids whose lease
        had been lost (their acknowledgement changed nothing)."""
        results = []
        for d in deliveries:
            msg = d.message
            duration = (d.finished or time.monotonic()) - d.started
            log.debug("message %d completed (attempt %d, %.3f s)", msg.id, msg.attempts, duration)
            if msg.id in lost:
                log.warning("message %d: finished after its lease ran out; it was delivered "
                            "again (raise lock_ms?)", msg.id)
            results.append(Result(msg, "completed", msg.id not in lost, None, duration))
        return results

    def _forget(self, delivery: _Delivery) -> None:
        with self._lock:
            if self._finished and self._finished[0] is delivery:
                self._finished.popleft()
            delivery.settled = True
            if self._in_hand.get(delivery.message.id) is delivery:
                del self._in_hand[delivery.message.id]

    def _report(self, result: Result) -> None:
        if self._on_result is None:
            return
        try:
            self._on_result(result)
        except Exception:
            log.exception("on_result hook failed")

    def _drain(self) -> None:
        """Wait up to shutdown_grace for in-flight handlers, then give back the rest."""
        deadline = time.monotonic() + self._shutdown_grace
        if self.in_flight:
            log.info("waiting up to %gs for %d in-flight message(s)", self._shutdown_grace, self.in_flight)
        while self.in_flight and not self._aborting.is_set():
            self._settle_quietly()
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.in_flight:
                break
            self._wake.wait(self._until_deadline(min(remaining, 0.5)))
            self._wake.clear()
        self._settle_quietly()
        with self._lock:
            left = [d for d in self._in_hand.values() if not d.settled]
        for delivery in left:
            if delivery.finished is None:
                self._release(delivery)
            else:
                log.warning("message %d: handled but not acknowledged (no database); it will be "
                            "delivered again when its lease runs out", delivery.message.id)

    def _settle_quietly(self) -> None:
        """Settle and expire during shutdown: a database error is logged, never raised (what
        cannot be acknowledged returns when its lease runs out)."""
        try:
            self._settle()
            self._expire()
        except _DATABASE_ERRORS as exc:
            log.warning("could not acknowledge during shutdown: %s", _first_line(exc))

    def _release(self, delivery: _Delivery) -> None:
        """Give a message back unprocessed, due now (its attempts count stays)."""
        delivery.released = True
        msg = delivery.message
        ok = False
        try:
            if self._queue is None:
                self._connect()
            assert self._queue is not None
            ok = self._queue.defer(msg)
            log.info("message %d given back (its handler had not finished)", msg.id)
        except _DATABASE_ERRORS as exc:
            log.warning("message %d: could not give it back (%s); it returns when its lease "
                        "runs out", msg.id, _first_line(exc))
        with self._lock:
            delivery.settled = True
            self._in_hand.pop(msg.id, None)
        self._report(Result(msg, "released", ok, None, time.monotonic() - delivery.started))

    # -- connections --------------------------------------------------------------------

    def _connect(self) -> None:
        with translating():
            self._conn = psycopg.connect(self._dsn, autocommit=True)
        self._queue = Queue(self._conn, self._name)

    def _disconnect(self) -> None:
        conn, self._conn, self._queue = self._conn, None, None
        if conn is not None:
            conn.close()

    def _is_connection_error(self, exc: Exception) -> bool:
        """Tell whether an error means the connection is gone (then reconnect and go on)."""
        if is_connection_error(exc):
            return True
        return self._conn is None or self._conn.closed or self._conn.broken

    def _connection_lost(self, exc: Exception) -> float:
        """Drop the broken connection and wait before trying again: 0.1 s, doubling up to 30 s
        while the database stays away (a fetch that works starts again from 0.1 s)."""
        self._disconnect()
        wait = self._reconnect.next()
        log.warning("database connection lost: %s; reconnecting in %gs", _first_line(exc), wait)
        if not self._stopping.is_set():
            self._stopping.wait(wait)
        return 0.0

    def _held(self) -> list[Message]:
        """The messages whose leases the heartbeats renew: in hand, not settled nor given back."""
        with self._lock:
            return [d.message for d in self._in_hand.values() if not d.settled and not d.released]

    def _still_held(self, msg: Message) -> bool:
        with self._lock:
            d = self._in_hand.get(msg.id)
            return d is not None and d.message.attempts == msg.attempts and not d.settled and not d.released

    def _beat(self, msg: Message) -> bool:
        """Renew one lease, on the heartbeats' own connection (opened again after a loss)."""
        return self._beats_queue.heartbeat(msg, self._lock_ms)

    def _listen_loop(self) -> None:
        """Wake the main loop whenever a message is enqueued (LISTEN on the queue's channel)."""
        backoff = 0.5
        while not self._closing.is_set():
            try:
                with psycopg.connect(self._dsn, autocommit=True) as conn:
                    conn.execute(listen_statement(self._name))
                    self._notify()  # something may have arrived while we were connecting
                    backoff = 0.5
                    while not self._closing.is_set():
                        for _ in conn.notifies(timeout=0.2):
                            self._notify()
            except _DATABASE_ERRORS as exc:
                if self._closing.is_set():
                    return
                log.warning("LISTEN connection failed: %s; polling until it is back (retry in %gs)",
                            _first_line(exc), backoff)
                self._closing.wait(backoff)
                backoff = min(backoff * 2, _RECONNECT_MAX)

    def _notify(self) -> None:
        self._notified.set()
        self._wake.set()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
