"""Run a coroutine handler over the messages of a queue on asyncio: :class:`AsyncWorker`.

The same contract as :class:`pgqueue.Worker`, on one event loop instead of threads: messages are
leased in batches, at most ``concurrency`` handlers run at once (as tasks), their leases are
renewed every third of the lease while they run, the messages whose handlers returned are
completed together in one statement, a handler that raises fails its message (retry after the
queue's back-off, dead letter after ``max_attempts``). An idle worker wakes through LISTEN when
the queue's ``notify`` is on and otherwise polls, never sleeping past the next due message.

Shutdown: :meth:`AsyncWorker.stop`, or SIGINT/SIGTERM when :meth:`AsyncWorker.run` runs on the
main thread's loop (the previous handlers come back when it returns; a second signal stops at
once), stops fetching, lets running handlers finish within ``shutdown_grace``, then cancels the
rest and gives their messages back at once (a defer: due now, attempts kept).

Handler timeouts: unlike a thread, a coroutine can be stopped. Past ``timeout`` its task is
cancelled and the message failed with ``HandlerTimeout``; a handler that swallows the
cancellation still has its result ignored.

Connections: a psycopg_pool ``AsyncConnectionPool`` of at most two connections (fetch and
acknowledge, heartbeats), which reconnects with the pool's own back-off after a lost
connection, and one LISTEN connection when the queue's ``notify`` is on.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from pgqueue._lease import AsyncHeartbeats, interval
from pgqueue._sql import listen_statement
from pgqueue.async_client import AsyncQueue
from pgqueue.compat import check_server
from pgqueue.errors import ConnectionFailed, PgQueueError, translating
from pgqueue.message import Message
from pgqueue.tasks import Reject, Tasks
from pgqueue.worker import (
    Backoff,
    HandlerTimeout,
    Result,
    Timeout,
    _describe,
    _first_line,
    _worker_conninfo,
    check_options,
    is_connection_error,
)

__all__ = ["AsyncHandler", "AsyncWorker"]

log = logging.getLogger("pgqueue.worker")

#: A coroutine function taking a message; its result is ignored, an exception fails the message.
AsyncHandler = Callable[[Message], Awaitable[object]]

_DATABASE_ERRORS = (psycopg.Error, PgQueueError)
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The longest a call waits for a connection from the worker's pool before it fails.
_POOL_WAIT = 2.0


@dataclass(eq=False)
class _Delivery:
    message: Message
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    error: BaseException | None = None
    released: bool = False  # cancelled at shutdown: give it back
    task: asyncio.Task[None] | None = None


class AsyncWorker:
    """Process the messages of a queue with a coroutine handler, ``concurrency`` at a time.

    Parameters are those of :class:`pgqueue.Worker`, with ``queue`` an
    :class:`~pgqueue.AsyncQueue` (only its name and connection string are used) and
    ``handler`` a coroutine function. ``timeout`` cancels a handler that runs past it.
    """

    def __init__(
        self,
        queue: AsyncQueue,
        handler: AsyncHandler,
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
        if not (inspect.iscoroutinefunction(handler)
                or (isinstance(handler, Tasks) and (handler.is_async or not handler.names))):
            raise TypeError("the handler is not a coroutine function: AsyncWorker awaits "
                            "`async def` handlers; use pgqueue.Worker for plain functions")
        if not isinstance(queue, AsyncQueue):
            raise TypeError(f"expected an AsyncQueue, got {type(queue).__name__} (use Worker with a Queue)")
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

        self._started = False
        self._signalled = False
        self._stopping = False
        self._aborting = False
        self._wake: asyncio.Event | None = None
        self._notified = False
        self._in_hand: dict[int, _Delivery] = {}
        self._finished: list[_Delivery] = []
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
        """Ask the worker to stop (see the module docstring); call it on the worker's loop.

        Parameters:
            now: skip the grace period: cancel the running handlers and give back at once.
        """
        self._stopping = True
        self._aborting = self._aborting or now
        if self._wake is not None:
            self._wake.set()

    # -- run ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Process messages until :meth:`stop` (or SIGINT/SIGTERM), then shut down gracefully.

        Raises a :mod:`pgqueue.errors` class when the queue cannot be used at start-up; later
        connection losses are logged and retried.
        """
        if self._started:
            raise RuntimeError("an AsyncWorker runs once; create a new one")
        self._started = True
        self._wake = asyncio.Event()
        restore = self._install_signal_handlers()
        try:
            await self._run()
        finally:
            restore()

    def _install_signal_handlers(self) -> Callable[[], None]:
        """Route SIGINT/SIGTERM to stop() on the main thread's loop; return what undoes it."""
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

    async def _run(self) -> None:
        await asyncio.to_thread(self._check_server)
        # The pool checks a connection before lending it and replaces a lost one with its own
        # back-off; a call waits at most _POOL_WAIT for one before failing (then Backoff).
        self._pool = AsyncConnectionPool(self._dsn, min_size=1, max_size=2, kwargs={"autocommit": True},
                                         open=False, name=f"pgqueue-worker-{self._name}",
                                         check=AsyncConnectionPool.check_connection, timeout=_POOL_WAIT)
        try:
            with translating():
                await self._pool.open(wait=True, timeout=10)
            self._queue = AsyncQueue(self._pool, self._name)
            settings = await self._queue.settings()
            self._max_attempts = settings.max_attempts
            self._lease_ms = self._lock_ms or settings.lock_ms
            if self._listen and not settings.notify:
                self._listen = False
                log.info("queue %r has notify off: polling only, no LISTEN", self._name)
            where = conninfo_to_dict(self._dsn)
            log.info("async worker started: queue %r in database %s, concurrency %d, lease %d ms",
                     self._name, where.get("dbname", "?"), self._concurrency, self._lease_ms)
            beats = AsyncHeartbeats(self._held, self._beat, interval(self._lease_ms), still_held=self._still_held)
            helpers: list[asyncio.Task[None]] = []
            if self._listen:
                helpers.append(asyncio.create_task(self._listen_loop(), name="pgqueue-listen"))
            try:
                try:
                    await self._loop()
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
            await self._pool.close()
            log.info("async worker stopped")

    def _check_server(self) -> None:
        with translating(), psycopg.connect(self._dsn, autocommit=True) as conn:
            check_server(conn)

    async def _loop(self) -> None:
        assert self._wake is not None
        delay = self._poll_min
        next_poll = 0.0
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
                    next_poll = 0.0  # a retry may be due soon
                free = self._concurrency - len(self._in_hand)
                if got is None and free > 0 and (self._notified or time.monotonic() >= next_poll):
                    self._notified = False
                    want = min(free, self._batch_size)
                    got = await self._fetch(want)
                if got is not None:
                    self._reconnect.reset()
                    if got == want:
                        delay, sleep = self._poll_min, 0.0
                    else:
                        if got:
                            delay = self._poll_min
                        sleep, delay = delay, min(delay * 2, self._poll_max)
                        sleep = await self._until_due(sleep)
                    next_poll = time.monotonic() + sleep
            except _DATABASE_ERRORS as exc:
                if not is_connection_error(exc):
                    raise  # the queue was dropped, or a bug: stop with it, as the Worker does
                wait = self._reconnect.next()
                log.warning("database connection lost: %s; reconnecting in %gs", _first_line(exc), wait)
                retry_at = next_poll = time.monotonic() + wait
            free = self._concurrency - len(self._in_hand)
            await self._sleep(max(0.0, next_poll - time.monotonic()) if free > 0 else 1.0)

    async def _sleep(self, timeout: float) -> None:
        """Wait until woken (a finished handler, a notification, stop) or ``timeout``."""
        assert self._wake is not None
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
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
        assert self._queue is not None
        messages = await self._queue.dequeue(want, lock_ms=self._lock_ms)
        self._start(messages)
        return len(messages)

    def _start(self, messages: list[Message]) -> None:
        """Start a handler task for each newly leased message."""
        for msg in messages:
            d = _Delivery(msg)
            self._in_hand[msg.id] = d
            d.task = asyncio.create_task(self._handle(d), name=f"pgqueue-message-{msg.id}")

    def _completed(self, done: list[_Delivery], lost: set[int]) -> list[Result]:
        """The results of deliveries acknowledged as completed (``lost``: the ids whose lease
        had been lost); they leave the worker's hands."""
        results = []
        for d in done:
            if d.message.id in lost:
                log.warning("message %d: finished after its lease ran out; it was delivered "
                            "again (raise lock_ms?)", d.message.id)
            results.append(Result(d.message, "completed", d.message.id not in lost, None, self._took(d)))
            if self._in_hand.get(d.message.id) is d:
                del self._in_hand[d.message.id]
        return results

    async def _until_due(self, sleep: float) -> float:
        assert self._queue is not None
        due = await self._queue.next_due()
        if due is None:
            return sleep
        due_in = due.timestamp() - time.time()
        return sleep if due_in <= 0 else min(sleep, due_in + 0.002)

    async def _call(self, msg: Message) -> None:
        result = self._handler(msg)
        if inspect.isawaitable(result):  # a Tasks registry returns its task's coroutine
            await result

    async def _handle(self, d: _Delivery) -> None:
        limit = self._timeout(d.message) if callable(self._timeout) else self._timeout
        try:
            if limit is None:
                await self._call(d.message)
            else:
                async with asyncio.timeout(limit) as scope:
                    try:
                        await self._call(d.message)
                    finally:
                        timed_out = scope.expired()
                if timed_out:  # the handler swallowed the cancellation: its result is ignored
                    raise TimeoutError
        except TimeoutError as exc:
            if limit is not None and time.monotonic() - d.started >= limit:
                d.error = HandlerTimeout(f"the handler was still running after {limit:g} s (cancelled)")
                log.warning("message %d: handler timed out after %g s; cancelled, failing it",
                            d.message.id, limit)
            else:
                d.error = exc  # the handler's own TimeoutError
        except asyncio.CancelledError:
            d.released = True  # cancelled by the shutdown: give the message back
        except Exception as exc:
            d.error = exc
        d.finished = time.monotonic()
        self._finished.append(d)
        assert self._wake is not None
        self._wake.set()

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
        return Result(msg, "dead" if last else "retried", ok, d.error, self._took(d))

    async def _release(self, d: _Delivery) -> Result:
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
        """Let running handlers finish within shutdown_grace, cancel the rest, settle all."""
        running = [d.task for d in self._in_hand.values() if d.task is not None and not d.task.done()]
        if running and not self._aborting:
            log.info("waiting up to %gs for %d in-flight message(s)", self._shutdown_grace, len(running))
            deadline = time.monotonic() + self._shutdown_grace
            while not self._aborting and time.monotonic() < deadline:
                pending = [t for t in running if not t.done()]
                if not pending:
                    break
                await self._settle_quietly()
                assert self._wake is not None
                self._wake.clear()
                waiter = asyncio.create_task(self._wake.wait())
                await asyncio.wait([*pending, waiter], timeout=min(0.5, max(0.0, deadline - time.monotonic())),
                                   return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
        for task in running:
            task.cancel()  # their messages are released
        await asyncio.gather(*running, return_exceptions=True)
        await self._settle_quietly()
        for d in list(self._in_hand.values()):
            log.warning("message %d: not acknowledged (no database); it returns when its lease runs out",
                        d.message.id)

    async def _settle_quietly(self) -> None:
        try:
            await self._settle()
        except _DATABASE_ERRORS as exc:
            log.warning("could not acknowledge during shutdown: %s", _first_line(exc))

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
                backoff = min(backoff * 2, 30.0)

    def _notify(self) -> None:
        self._notified = True
        if self._wake is not None:
            self._wake.set()
