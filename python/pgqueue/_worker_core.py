"""The one worker core behind :class:`pgqueue.Worker` and :class:`pgqueue.AsyncWorker`.

procrastinate's shape: one asyncio loop leases messages in batches, runs at most ``concurrency``
handlers at once (one task each), renews their leases while they run (:mod:`pgqueue._lease`),
completes the messages whose handlers returned together, in the statement of the next fetch
when one is due (``message_complete_and_dequeue``), fails those whose handlers raised, wakes on
LISTEN or polls, reconnects after the doubling :class:`Backoff`, and on stop lets running
handlers finish within ``shutdown_grace`` before giving the rest back with a defer.

A coroutine handler is awaited in its task. A plain function runs on :class:`_HandlerThreads`,
a bounded pool of daemon threads, without a task: the loop hands it over and the threads hand
back its return, in one loop callback for all the handlers that returned meanwhile (a task and
a future a message cost 10-20 us of the loop's time a message, measured with
bench/experiments/worker_cpu/loop_only.py). That is the only difference between the two
workers, besides how :meth:`WorkerCore._main` is entered (awaited by ``AsyncWorker.run``, run on
an event loop of its own by ``Worker.run``).

Handler timeouts: ``asyncio.timeout`` around a coroutine, which is cancelled; a timer of the
loop for a thread, which cannot be: the loop stops waiting for it, the message is failed, the
thread runs on until the handler returns (its result ignored) and a new thread takes its place
in the pool. At the end of the shutdown grace, the same for each handler still running, and its
message is given back.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import logging
import queue as stdqueue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool

from pgqueue._core import error_text
from pgqueue._lease import AsyncHeartbeats, _first_line, interval
from pgqueue._sql import listen_statement
from pgqueue.async_client import AsyncQueue
from pgqueue.compat import check_server
from pgqueue.errors import ConnectionFailed, PgQueueError, translating
from pgqueue.message import Message
from pgqueue.tasks import Reject

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
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The longest a call waits for a connection from the worker's pool before it fails.
_POOL_WAIT = 2.0


def is_connection_error(exc: BaseException) -> bool:
    """Tell whether a database error means the connection is lost or refused (then wait and
    try again) rather than a refusal of the call (a dropped queue: stop with it)."""
    return isinstance(exc, _CONNECTION_ERRORS) or isinstance(exc.__cause__, psycopg.OperationalError)


class Backoff:
    """The wait before trying a lost database again: 0.1 s, doubling up to 30 s while it stays
    away, from 0.1 s again after :meth:`reset` (once a call works)."""

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


def _describe(exc: BaseException) -> str:
    """Return the one-line error text stored with a failed message (the client's own)."""
    return error_text(exc)


def check_options(*, concurrency: int, batch_size: int | None, lock_ms: int | None, poll_min: float,
                  poll_max: float, shutdown_grace: float, timeout: Timeout | None) -> None:
    """Raise ValueError for worker options out of range."""
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


@dataclass(eq=False)
class _Job:
    """A plain-function call handed to the handler threads; ``on_done`` gets, on the loop, what
    the handler raised (None if nothing), unless the job was dropped first."""

    handler: Handler
    message: Message
    on_done: Callable[[BaseException | None], None]
    state: str = "queued"  # queued, running, dropped (nobody waits for it) or done
    started: float = 0.0


class _HandlerThreads:
    """``size`` daemon threads running plain-function handlers for the event loop.

    :meth:`submit` hands a handler over; when it returns, its job's ``on_done`` runs on the loop
    with what it raised (None if nothing). :meth:`drop` stops waiting for a job (a timeout, or
    the end of the shutdown grace): the thread cannot be stopped, it runs on until the handler
    returns, drops the result and exits, and a new thread takes its place so that ``size``
    handlers can still run. Daemon threads, so that such a thread does not keep the process
    alive either.
    """

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()  # guards each job's state, _returned and _scheduled
        self._jobs: stdqueue.SimpleQueue[_Job | None] = stdqueue.SimpleQueue()
        self._returned: list[tuple[_Job, BaseException | None]] = []  # for the loop to pick up
        self._scheduled = False  # a _deliver call is on its way to the loop
        self._names = itertools.count()
        self._threads = 0
        self.abandoned = 0  # threads left running a handler nobody waits for
        for _ in range(size):
            self._start_thread()

    def _start_thread(self) -> None:
        self._threads += 1
        threading.Thread(target=self._run, name=f"pgqueue-handler-{next(self._names)}", daemon=True).start()

    def submit(self, handler: Handler, message: Message, on_done: Callable[[BaseException | None], None]) -> _Job:
        """Run ``handler(message)`` on a thread; then ``on_done`` on the loop (unless dropped)."""
        job = _Job(handler, message, on_done)
        self._jobs.put(job)
        return job

    def drop(self, job: _Job) -> bool:
        """Stop waiting for a job (on the loop); False if its handler has returned already (its
        ``on_done`` is then on its way and still runs)."""
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
                job.handler(job.message)
            except BaseException as exc:  # a handler must never take a thread down
                error = exc
            with self._lock:
                dropped, job.state = job.state == "dropped", "done"
                if not dropped:
                    self._returned.append((job, error))
                    wake, self._scheduled = not self._scheduled, True
            if dropped:
                log.info("message %d: the abandoned handler returned after %.1f s (result ignored)",
                         job.message.id, time.monotonic() - job.started)
                return  # a new thread has taken this one's place
            if wake:  # one wake-up of the loop for the handlers that return meanwhile
                try:
                    self._loop.call_soon_threadsafe(self._deliver)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    return

    def _deliver(self) -> None:
        """On the loop: pass the handlers' returns on (a job done is never dropped)."""
        with self._lock:
            returned, self._returned, self._scheduled = self._returned, [], False
        for job, error in returned:
            job.on_done(error)


@dataclass(eq=False)
class _Delivery:
    """A message in hand, from dequeue until it is acknowledged or given back."""

    message: Message
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    error: BaseException | None = None
    released: bool = False  # stopped at shutdown: give it back
    task: asyncio.Task[None] | None = None  # a coroutine handler's
    job: _Job | None = None  # a plain function's, on the handler threads
    timer: asyncio.TimerHandle | None = None  # a plain function's timeout


class WorkerCore:
    """Lease, run, heartbeat, acknowledge, shut down: the loop both workers run (see the module
    docstring). ``Worker`` and ``AsyncWorker`` check their arguments and enter :meth:`_main`."""

    def __init__(
        self,
        name: str,
        conninfo: str,
        handler: Handler,
        *,
        concurrency: int,
        batch_size: int | None,
        lock_ms: int | None,
        listen: bool,
        poll_min: float,
        poll_max: float,
        shutdown_grace: float,
        on_result: Callable[[Result], None] | None,
        timeout: Timeout | None,
        handle_signals: bool,
        threads: bool,
    ) -> None:
        check_options(concurrency=concurrency, batch_size=batch_size, lock_ms=lock_ms, poll_min=poll_min,
                      poll_max=poll_max, shutdown_grace=shutdown_grace, timeout=timeout)
        self._name = name
        self._dsn = _worker_conninfo(conninfo)
        self._handler = handler
        self._use_threads = threads  # plain functions, on _HandlerThreads
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

        self._started = False
        self._start_lock = threading.Lock()
        self._signalled = False
        self._stopping = False
        self._aborting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._notified = False
        self._in_hand: dict[int, _Delivery] = {}
        self._finished: list[_Delivery] = []
        self._threads: _HandlerThreads | None = None
        self._pool: AsyncConnectionPool[Any] | None = None
        self._queue: AsyncQueue | None = None
        self._max_attempts: int | None = None
        self._lease_ms = lock_ms or 30000
        self._reconnect = Backoff()

    @property
    def queue_name(self) -> str:
        """The name of the queue this worker consumes."""
        return self._name

    @property
    def in_flight(self) -> int:
        """How many messages the worker holds right now."""
        return len(self._in_hand)

    def stop(self, *, now: bool = False) -> None:
        """Ask the worker to stop: fetch no more, let in-flight handlers finish (up to
        ``shutdown_grace``), give back the rest; ``run()`` then returns. Callable from any
        thread, before or while the worker runs.

        Parameters:
            now: skip (what is left of) the grace period: give back at once what is in hand.
        """
        self._stopping = True
        self._aborting = self._aborting or now
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return  # not running yet: run() sees _stopping
        try:
            same_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            same_loop = False
        if same_loop:
            wake.set()
        else:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop is closed: run() has returned
                pass

    def _claim_run(self, what: str) -> None:
        with self._start_lock:
            if self._started:
                raise RuntimeError(f"{what} runs once; create a new one")
            self._started = True

    # -- signals ------------------------------------------------------------------------

    def _install_signal_handlers(self) -> Callable[[], None]:
        """Route SIGINT/SIGTERM to stop() on the main thread's loop; return what undoes it
        (the previous handlers come back)."""
        if not self._handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        saved = {sig: signal.getsignal(sig) for sig in _SIGNALS}
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)

        def restore() -> None:
            for sig, previous in saved.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, previous)

        return restore

    def _on_signal(self, sig: signal.Signals) -> None:
        again, self._signalled = self._signalled, True
        if again:
            log.warning("%s again: giving back the messages in hand now", sig.name)
        else:
            log.info("%s: stopping; in-flight handlers get %gs to finish (send it again to stop "
                     "at once)", sig.name, self._shutdown_grace)
        self.stop(now=again)

    # -- run ------------------------------------------------------------------------------

    async def _main(self) -> None:
        """Run until stopped, with the signal handlers in place; restore them on the way out."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        restore = self._install_signal_handlers()
        try:
            await self._run()
        finally:
            restore()

    async def _run(self) -> None:
        await asyncio.to_thread(self._check_server)
        # The pool replaces a connection that comes back broken with its own back-off; a call
        # waits at most _POOL_WAIT for one before failing (then Backoff). No check before
        # lending: that is a round trip per call, and a call on a lost connection fails alike.
        self._pool = AsyncConnectionPool(self._dsn, min_size=1, max_size=2, kwargs={"autocommit": True},
                                         open=False, name=f"pgqueue-worker-{self._name}", timeout=_POOL_WAIT)
        if self._use_threads:
            self._threads = _HandlerThreads(self._concurrency, asyncio.get_running_loop())
        try:
            with translating():
                await self._pool.open(wait=True, timeout=10)
            self._queue = AsyncQueue(self._pool, self._name)
            settings = await self._queue.settings()
            self._max_attempts = settings.max_attempts
            self._lease_ms = self._lock_ms or settings.lock_ms
            if self._listen and not settings.notify:
                # No NOTIFY would ever come: do not hold a LISTEN connection for nothing.
                self._listen = False
                log.info("queue %r has notify off: polling only, no LISTEN (turn it on with "
                         "`pgqueue queue alter %s --notify` for instant wake-ups)", self._name, self._name)
            where = conninfo_to_dict(self._dsn)
            log.info("worker started: queue %r in database %s on %s, concurrency %d (%s), lease %d ms",
                     self._name, where.get("dbname", "?"), where.get("host", "localhost"), self._concurrency,
                     "threads" if self._use_threads else "asyncio tasks", self._lease_ms)
            beats = AsyncHeartbeats(self._held, self._beat, interval(self._lease_ms), still_held=self._still_held)
            helpers: list[asyncio.Task[None]] = []
            if self._listen:
                helpers.append(asyncio.create_task(self._listen_loop(), name="pgqueue-listen"))
            try:
                try:
                    await self._loop_until_stopped()
                except BaseException:
                    self._stopping = self._aborting = True  # give back what is in hand, then propagate
                    raise
                finally:
                    await self._drain()
            finally:
                await beats.stop(timeout=2.0)
                for task in helpers:
                    task.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)
        finally:
            if self._threads is not None:
                self._threads.close()
            await self._pool.close()
            log.info("worker stopped")

    def _check_server(self) -> None:
        """Check the database's pgqueue version, once: reconnections reach the same database."""
        with translating(), psycopg.connect(self._dsn, autocommit=True) as conn:
            check_server(conn)

    async def _loop_until_stopped(self) -> None:
        delay = self._poll_min  # the next sleep if the queue is empty
        next_poll = 0.0  # monotonic time of the next dequeue, when there is a free slot
        retry_at = 0.0  # after a lost connection: no call before then (a notification included)
        self._notified = True
        while not self._stopping:
            if time.monotonic() < retry_at:
                await self._sleep(retry_at - time.monotonic())
                continue
            # Acknowledge and fetch in one statement when both are due (one transaction per
            # message in lease mode); failures and releases are settled alone.
            want, got = 0, None
            try:
                if self._notified or time.monotonic() >= next_poll:
                    want, got = await self._complete_and_fetch()
                if await self._settle():
                    next_poll = 0.0  # a retry may be due soon: look again
                free = self._concurrency - len(self._in_hand)
                if got is None and free > 0 and (self._notified or time.monotonic() >= next_poll):
                    self._notified = False
                    want = min(free, self._batch_size)
                    got = await self._fetch(want)
                if got is not None:
                    self._reconnect.reset()
                    if got == want:
                        # There may be more: fetch again as soon as a slot is free.
                        delay, sleep = self._poll_min, 0.0
                    else:
                        if got:
                            delay = self._poll_min
                        sleep, delay = delay, min(delay * 2, self._poll_max)
                        sleep = await self._until_due(sleep)
                    next_poll = time.monotonic() + sleep
            except _DATABASE_ERRORS as exc:
                if not is_connection_error(exc):
                    raise  # the queue was dropped, or a bug: stop with it
                wait = self._reconnect.next()
                log.warning("database connection lost: %s; reconnecting in %gs", _first_line(exc), wait)
                retry_at = next_poll = time.monotonic() + wait
            free = self._concurrency - len(self._in_hand)
            await self._sleep(max(0.0, next_poll - time.monotonic()) if free > 0 else 1.0)

    async def _sleep(self, timeout: float) -> None:
        """Wait until woken (a finished handler, a notification, stop) or ``timeout``."""
        assert self._wake is not None
        if not self._wake.is_set() and timeout > 0:
            try:
                async with asyncio.timeout(timeout):  # no task per wait, unlike wait_for
                    await self._wake.wait()
            except TimeoutError:
                pass
        self._wake.clear()

    async def _complete_and_fetch(self) -> tuple[int, int | None]:
        """Complete the finished deliveries whose handler returned and lease messages for the
        slots free after that, in one statement (``message_complete_and_dequeue``). Returns
        (wanted, got); got is None when there was nothing to complete or no slot to fill. A
        database error propagates, the deliveries kept to be acknowledged again."""
        done = [d for d in self._finished if d.error is None and not d.released]
        want = min(self._concurrency - len(self._in_hand) + len(done), self._batch_size)
        if not done or want <= 0:
            return 0, None
        self._notified = False
        self._finished = [d for d in self._finished if d.error is not None or d.released]
        try:
            assert self._queue is not None
            messages, lost = await self._queue.complete_and_dequeue([d.message for d in done], want,
                                                                    lock_ms=self._lock_ms)
        except _DATABASE_ERRORS:
            self._finished = done + self._finished
            raise
        for result in self._completed(done, {m.id for m in lost}):
            self._report(result)
        self._start(messages)
        return want, len(messages)

    async def _fetch(self, want: int) -> int:
        """Lease up to ``want`` messages and start their handlers."""
        assert self._queue is not None
        messages = await self._queue.dequeue(want, lock_ms=self._lock_ms)
        self._start(messages)
        return len(messages)

    def _start(self, messages: list[Message]) -> None:
        """Start the handler of each newly leased message: a task for a coroutine handler, a job
        on the handler threads for a plain function."""
        for msg in messages:
            d = _Delivery(msg)
            self._in_hand[msg.id] = d
            if self._threads is None:
                d.task = asyncio.create_task(self._handle(d), name=f"pgqueue-message-{msg.id}")
                continue
            d.job = self._threads.submit(self._handler, msg, functools.partial(self._job_done, d))
            limit = self._limit(msg)
            if limit is not None:
                assert self._loop is not None
                d.timer = self._loop.call_later(limit, self._job_timed_out, d, limit)

    def _limit(self, msg: Message) -> float | None:
        """The handler's time limit for a message (None: no limit)."""
        return self._timeout(msg) if callable(self._timeout) else self._timeout

    def _job_done(self, d: _Delivery, error: BaseException | None) -> None:
        """On the loop: a plain function's handler returned (or raised ``error``)."""
        if d.finished is None:  # not timed out or stopped meanwhile
            d.error = error
            self._finish(d)

    def _job_timed_out(self, d: _Delivery, limit: float) -> None:
        assert self._threads is not None and d.job is not None
        if d.finished is not None or not self._threads.drop(d.job):
            return  # it returned in time: _job_done has run or is on its way
        d.error = HandlerTimeout(f"the handler was still running after {limit:g} s (its result will be ignored)")
        log.warning("message %d: handler timed out after %g s; failing it (its result will be ignored; "
                    "%d abandoned handler thread(s) so far)", d.message.id, limit, self._threads.abandoned)
        self._finish(d)

    def _finish(self, d: _Delivery) -> None:
        """A handler is over (returned, raised, timed out or stopped): settle its message next."""
        if d.timer is not None:
            d.timer.cancel()
        d.finished = time.monotonic()
        self._finished.append(d)
        assert self._wake is not None
        self._wake.set()

    def _completed(self, done: list[_Delivery], lost: set[int]) -> list[Result]:
        """The results of deliveries acknowledged as completed (``lost``: the ids whose lease
        had been lost); they leave the worker's hands."""
        results = []
        for d in done:
            log.debug("message %d completed (attempt %d, %.3f s)", d.message.id, d.message.attempts, self._took(d))
            if d.message.id in lost:
                log.warning("message %d: finished after its lease ran out; it was delivered "
                            "again (raise lock_ms?)", d.message.id)
            results.append(Result(d.message, "completed", d.message.id not in lost, None, self._took(d)))
            if self._in_hand.get(d.message.id) is d:
                del self._in_hand[d.message.id]
        return results

    async def _until_due(self, sleep: float) -> float:
        """Shorten ``sleep`` to end when the queue's next scheduled message is due."""
        assert self._queue is not None
        due = await self._queue.next_due()
        if due is None:
            return sleep
        due_in = due.timestamp() - time.time()
        # Due but not delivered to us: another consumer holds it right now. Back off.
        return sleep if due_in <= 0 else min(sleep, due_in + 0.002)

    async def _call(self, msg: Message) -> BaseException | None:
        """Run a coroutine handler (or a Tasks registry's) on a message; return what it raised
        (None if nothing)."""
        try:
            result = self._handler(msg)
            if inspect.isawaitable(result):  # a coroutine function, or a Tasks registry's task
                await result
        except Exception as exc:
            return exc
        return None

    async def _handle(self, d: _Delivery) -> None:
        limit = self._limit(d.message)
        try:
            if limit is None:
                d.error = await self._call(d.message)
            else:
                async with asyncio.timeout(limit) as scope:
                    d.error = await self._call(d.message)
                if scope.expired():  # the handler swallowed the cancellation: its result is ignored
                    raise TimeoutError
        except TimeoutError:
            d.error = HandlerTimeout(f"the handler was still running after {limit:g} s (cancelled)")
            log.warning("message %d: handler timed out after %g s; failing it (cancelled)", d.message.id, limit)
        except asyncio.CancelledError:
            d.released = True  # stopped by the shutdown: give the message back
        self._finish(d)

    async def _settle(self) -> bool:
        """Acknowledge the finished deliveries; True if one went back on the queue. A database
        error propagates after what was settled is reported, the rest kept to settle again."""
        if not self._finished:
            return False
        batch, self._finished = self._finished, []
        requeued = False
        done = [d for d in batch if d.error is None and not d.released]
        results: list[Result] = []
        error: BaseException | None = None
        try:
            assert self._queue is not None
            if done:
                lost = {m.id for m in await self._queue.complete_many([d.message for d in done])}
                results += self._completed(done, lost)
            for d in batch:
                if d.released:
                    results.append(await self._release(d))
                    requeued = True
                elif d.error is not None:
                    results.append(await self._fail(d))
                    requeued = requeued or results[-1].outcome == "retried"
        except _DATABASE_ERRORS as exc:
            self._finished = [d for d in batch if d.message.id in self._in_hand] + self._finished
            error = exc
        for result in results:
            self._report(result)
        if error is not None:
            raise error
        return requeued

    async def _fail(self, d: _Delivery) -> Result:
        assert self._queue is not None and d.error is not None
        msg = d.message
        if isinstance(d.error, Reject):  # no retry can fix it: dead-letter it now
            ok = await self._queue.reject(msg, _describe(d.error))
            self._in_hand.pop(msg.id, None)
            log.warning("message %d rejected: %s; moved to the dead letters", msg.id, _describe(d.error))
            return Result(msg, "dead", ok, d.error, self._took(d))
        last = self._max_attempts is not None and msg.attempts >= self._max_attempts
        ok = await self._queue.fail(msg, _describe(d.error))
        self._in_hand.pop(msg.id, None)
        log.warning("message %d failed (attempt %d): %s; %s", msg.id, msg.attempts, _describe(d.error),
                    "moved to the dead letters" if last else "will be retried")
        log.debug("message %d: handler traceback", msg.id, exc_info=d.error)
        return Result(msg, "dead" if last else "retried", ok, d.error, self._took(d))

    async def _release(self, d: _Delivery) -> Result:
        """Give a message back unprocessed, due now (its attempts count stays)."""
        assert self._queue is not None
        ok = await self._queue.defer(d.message)
        self._in_hand.pop(d.message.id, None)
        log.info("message %d given back (its handler had not finished)", d.message.id)
        return Result(d.message, "released", ok, None, self._took(d))

    @staticmethod
    def _took(d: _Delivery) -> float:
        return (d.finished or time.monotonic()) - d.started

    def _report(self, result: Result) -> None:
        if self._on_result is None:
            return
        try:
            self._on_result(result)
        except Exception:
            log.exception("on_result hook failed")

    async def _drain(self) -> None:
        """Let running handlers finish within shutdown_grace, stop waiting for the rest (a
        coroutine is cancelled, a thread runs on unwatched) and give their messages back."""
        running = [d for d in self._in_hand.values() if d.finished is None]
        if running and not self._aborting:
            log.info("waiting up to %gs for %d in-flight message(s)", self._shutdown_grace, len(running))
            deadline = time.monotonic() + self._shutdown_grace
            while not self._aborting and time.monotonic() < deadline:
                if all(d.finished is not None for d in running):
                    break
                await self._settle_quietly()
                # every handler that ends sets _wake (_finish)
                await self._sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        tasks = [d.task for d in running if d.task is not None and not d.task.done()]
        for task in tasks:
            task.cancel()  # their messages are released
        for d in running:
            if d.job is not None and d.finished is None:
                assert self._threads is not None
                if self._threads.drop(d.job):  # the thread runs on unwatched; the message is released
                    d.released = True
                    self._finish(d)
        await asyncio.gather(*tasks, return_exceptions=True)
        # a handler that returned just before its drop: its return is on its way to _job_done
        while any(d.finished is None for d in running):
            await self._sleep(0.01)
        await self._settle_quietly()
        for d in list(self._in_hand.values()):
            log.warning("message %d: not acknowledged (no database); it returns when its lease runs out",
                        d.message.id)

    async def _settle_quietly(self) -> None:
        """Settle during shutdown: a database error is logged, never raised (what cannot be
        acknowledged returns when its lease runs out)."""
        try:
            await self._settle()
        except _DATABASE_ERRORS as exc:
            log.warning("could not acknowledge during shutdown: %s", _first_line(exc))

    # -- heartbeats and LISTEN --------------------------------------------------------------

    def _held(self) -> list[Message]:
        """The messages whose leases the heartbeats renew: those whose handler is running."""
        return [d.message for d in self._in_hand.values() if d.finished is None]

    def _still_held(self, msg: Message) -> bool:
        d = self._in_hand.get(msg.id)
        return d is not None and d.message.attempts == msg.attempts and d.finished is None

    async def _beat(self, msg: Message) -> bool:
        assert self._queue is not None
        return await self._queue.heartbeat(msg, self._lock_ms)

    async def _listen_loop(self) -> None:
        """Wake the main loop whenever a message is enqueued (LISTEN on the queue's channel)."""
        backoff = 0.5
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as conn:
                    await conn.execute(listen_statement(self._name))
                    self._notify()  # something may have arrived while we were connecting
                    backoff = 0.5
                    async for _ in conn.notifies():
                        self._notify()
            except (psycopg.Error, ConnectionFailed) as exc:
                log.warning("LISTEN connection failed: %s; polling until it is back (retry in %gs)",
                            _first_line(exc), backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RECONNECT_MAX)

    def _notify(self) -> None:
        self._notified = True
        if self._wake is not None:
            self._wake.set()
