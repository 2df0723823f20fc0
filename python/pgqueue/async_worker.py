"""Run a coroutine handler over the messages of a queue on asyncio: :class:`AsyncWorker`.

The same logic as :class:`pgqueue.Worker` (:mod:`pgqueue._worker_core`), driven by an event
loop: :meth:`AsyncWorker.run` is awaited on the caller's loop and the handlers are awaited as
tasks instead of run on threads. Messages are leased in batches, at most ``concurrency``
handlers run at once, their leases are renewed every third of the lease while they run (one
statement for all of them, ``message_heartbeat_batch``), the messages whose handlers returned
are completed together in one statement, a handler that raises fails its message (retry after
the queue's back-off, dead letter after ``max_attempts``). An idle worker wakes through LISTEN
when the queue's ``notify`` is on and otherwise polls, never sleeping past the next due message.

Shutdown: :meth:`AsyncWorker.stop`, or SIGINT/SIGTERM/SIGHUP when :meth:`AsyncWorker.run` runs
on the main thread's loop (one ignored when it starts stays ignored; the previous handlers come
back when it returns; a second SIGINT or SIGTERM stops at once), stops fetching, lets running handlers
finish within ``shutdown_grace``, then cancels the rest and gives their messages back at once
(a defer: due now, attempts kept). A cancelled handler that has not ended 2 s later (it swallows
the cancellation, or cleans up at length; at once on another ``stop(now=True)``) is given up: its
message is given back all the same, and whatever its task does later is ignored.

Handler timeouts: unlike a thread, a coroutine can be stopped. Past ``timeout`` its task is
cancelled and the message failed with ``HandlerTimeout``; a handler that swallows the
cancellation still has its result ignored, and is let go 2 s later if it has not ended, or at
once when the worker stops meanwhile (the message failed, its slot freed). The timeout and the
heartbeats run on the handlers' loop: a handler that blocks it (``time.sleep``, a blocking
client) holds both up, so its timeout is not kept and a lease it outlasts runs out (blocking
work goes to ``asyncio.to_thread``). A handler that has ended when a stop finds its delivery
unfinished (the moment before its task runs on) keeps its outcome.

Cancelling :meth:`AsyncWorker.run` stops the worker as ``stop(now=True)`` does, then the
cancellation goes on; a database call in flight is awaited first (see ``_do``).

Whatever a handler raises finishes its delivery: an Exception, or any other BaseException,
fails the message; a :class:`pgqueue.Reject` dead-letters it at once, and so does an exception
group (an ``asyncio.TaskGroup``'s) whose leaves are all Rejects, with their texts as
``last_error`` (a group that mixes a Reject with other errors fails the message). A
CancelledError is a failure too unless the handler's own task was cancelled: by the shutdown
(the message is given back) or from outside the worker, as ``asyncio.run`` does to the tasks
left at its end (given back as well). A KeyboardInterrupt or SystemExit (``sys.exit()`` in a
handler) also stops the worker at once, the other messages given back, and
:meth:`AsyncWorker.run` raises it when the worker has shut down.

Connections: one to fetch and acknowledge and one to renew leases, each opened again at its
first call after a loss or a write refused by a read-only server (the loop's after the core's
doubling ``Backoff``, 0.1 s to 30 s), and one LISTEN connection when the queue's ``notify`` is
on. At start, a database that cannot be reached yet (or is read-only) is waited for as
:class:`pgqueue.Worker` does.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from pgqueue import _connect
from pgqueue._core import Call
from pgqueue._lease import AsyncHeartbeats, Outage, _first_line, interval
from pgqueue._sql import listen_statement
from pgqueue._worker_core import (
    _GIVE_UP,
    _RECONNECT_MAX,
    Delivery,
    HandlerTimeout,
    Result,
    Step,
    StoppedConnecting,
    Timeout,
    Wait,
    WorkerCore,
    is_async_handler,
    is_read_only,
    stop_signals,
    warn_if_listening_through_a_pooler,
)
from pgqueue.async_client import AsyncQueue, _AsyncConnector, _answered, _ended_while_idle
from pgqueue.errors import ConnectionFailed, PgQueueError
from pgqueue.message import Message
from pgqueue.tasks import refuse_awaitable, refuse_generator, returned_generator

__all__ = ["AsyncHandler", "AsyncWorker"]

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")

#: A coroutine function taking a message; its result is ignored, an exception fails the message.
AsyncHandler = Callable[[Message], Awaitable[object]]



async def _drop_if_read_only(runner: _AsyncConnector, call: Call[T]) -> T:
    """Run a call on the runner's connection; if the server refused it as read-only (a standby
    after a failover), close that connection first: the next call opens a new one (see
    pgqueue.worker)."""
    try:
        return await runner.run(call)
    except (psycopg.Error, PgQueueError) as exc:
        if is_read_only(exc):
            own = runner._own
            if own is not None:
                await own.close()
        raise


def _ended_run(handle: Any) -> AsyncWorker | None:
    """The AsyncWorker whose run installed the loop's signal entry ``handle`` (an asyncio
    Handle) and has given its signals back since, or None (an application's entry, none, or a
    run still going)."""
    callback = getattr(handle, "_callback", None)
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, AsyncWorker) and getattr(owner, "_signals_back", False):
        return owner
    return None


class _Check:
    """The start-up check on its thread. A run() cancelled while the check runs stops the worker,
    whose watchdog then waits for ``ended``: set here when the check ends, whatever it answered
    (it set ``ended`` itself only when it failed or saw the stop: one that succeeded a moment
    after the cancellation left the watchdog polling for the rest of the process, a review)."""

    def __init__(self, check: Callable[[], bool], ended: threading.Event) -> None:
        self._check, self._ended = check, ended
        self._lock = threading.Lock()
        self._done = self._abandoned = False

    def __call__(self) -> bool:
        try:
            return self._check()
        finally:
            with self._lock:
                self._done = True
                if self._abandoned:
                    self._ended.set()

    def abandon(self) -> None:
        """run() was cancelled: nothing will set ``ended`` after the check but this."""
        with self._lock:
            self._abandoned = True
            if self._done:
                self._ended.set()


def _not_awaitable_value(value: object) -> None:
    """Raise TypeError if a coroutine handler returned a generator or an awaitable (a coroutine it
    did not await: ``return send(msg)`` for ``return await send(msg)``): none of that work has run,
    so its message must fail, never be completed (it was completed, and the work never ran: a
    review). A coroutine is closed first (no "never awaited" warning), as the Worker does."""
    returned_generator(value)
    refuse_awaitable(value, f"the handler returned a {type(value).__name__}, an awaitable that nothing awaits: what "
                            "it was to do has not run (await it in the handler)")


class AsyncWorker(WorkerCore):
    """Process the messages of a queue with a coroutine handler, ``concurrency`` at a time.

    Parameters are those of :class:`pgqueue.Worker`, with ``queue`` an
    :class:`~pgqueue.AsyncQueue` (only its name and connection string are used) and
    ``handler`` a coroutine function, an object whose ``__call__`` is one, or a
    :class:`pgqueue.Tasks` registry of them (a plain function, or a registry with a plain
    default, is refused with TypeError: it would block the event loop). ``timeout`` cancels a
    handler that runs past it. As there, the lease is the queue's ``lock_ms`` read at start
    (unless ``lock_ms`` is given): a changed queue ``lock_ms`` takes effect when the worker
    restarts. A handler's exceptions: see the module docstring.
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
        startup_timeout: float | None = None,
    ) -> None:
        refuse_generator(handler, "the handler")
        if is_async_handler(handler) is False:
            raise TypeError("the handler is not a coroutine function: AsyncWorker awaits "
                            "`async def` handlers; use pgqueue.Worker for plain functions")
        if not isinstance(queue, AsyncQueue):
            raise TypeError(f"expected an AsyncQueue, got {type(queue).__name__} (use Worker with a Queue)")
        super().__init__(queue.name, queue.conninfo if dsn is None else dsn, handler, concurrency=concurrency,
                         batch_size=batch_size, lock_ms=lock_ms, listen=listen, poll_min=poll_min,
                         poll_max=poll_max, shutdown_grace=shutdown_grace, on_result=on_result,
                         timeout=timeout, handle_signals=handle_signals, startup_timeout=startup_timeout)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._wake: asyncio.Event | None = None
        self._runner: _AsyncConnector | None = None
        # handlers' tasks cancelled by the shutdown or at their timeout, till they end
        self._cancelled: set[asyncio.Future[Any]] = set()

    async def run(self) -> None:
        """Process messages until :meth:`stop` (or SIGINT/SIGTERM/SIGHUP), then shut down gracefully.

        A database that cannot be reached yet, or is read-only, is waited for as
        :meth:`pgqueue.Worker.run` does (``startup_timeout``; :meth:`stop` ends the wait at once).
        Raises a :mod:`pgqueue.errors` class when the queue cannot be used at start-up; later
        connection losses are logged and retried. Raises a handler's KeyboardInterrupt or
        SystemExit once the worker has shut down.
        """
        self._claim_run("an AsyncWorker")
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wake = asyncio.Event()
        restore = self._install_signal_handlers()
        try:
            await self._run()
        finally:
            restore()
        self._raise_fatal()

    def _wake_up(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is None or wake is None:
            return  # not running yet: run() sees _stopping
        if threading.get_ident() == self._loop_thread:
            wake.set()
            return
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the loop is closed: run() has returned
            pass

    def _install_signal_handlers(self) -> Callable[[], None]:
        """Route SIGINT/SIGTERM/SIGHUP to stop() on the main thread's loop, but one ignored
        now (:func:`stop_signals`); return what undoes it (the previous handlers come back)."""
        if not self._handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        saved = {sig: signal.getsignal(sig) for sig in stop_signals()}
        # asyncio's own loop keeps its entries in _signal_handlers: an application's handler
        # there (loop.add_signal_handler before this run) is put back as it was at the end
        entries = getattr(loop, "_signal_handlers", None)
        own = isinstance(loop, asyncio.SelectorEventLoop) and isinstance(entries, dict)
        prior = {sig: entries.get(sig) for sig in saved} if own else {}  # type: ignore[union-attr]
        for sig in saved:
            loop.add_signal_handler(sig, self._on_signal, sig)
        mine = {sig: entries.get(sig) for sig in saved} if own else {}  # type: ignore[union-attr]
        # what this run found, for the restore of a run started after it that ends after it
        self._signals_found = {sig: (prior.get(sig), saved[sig]) for sig in saved}
        self._signals_back = False

        def restore() -> None:
            # The previous handler first, then the loop's entry: loop.remove_signal_handler sets
            # SIG_DFL (SIGINT: default_int_handler) before the previous handler could be put
            # back, and a signal between the two ended `pgqueue worker` with 143 (SIGINT: a
            # KeyboardInterrupt in here) instead of going to the command's handler (a review).
            # On asyncio's own loop the entry is dropped from _signal_handlers (a signal that
            # still comes through the loop's wakeup fd finds no entry and is ignored), or the
            # application's entry of before the run put back (its previous handler is then
            # asyncio's, which wakes the loop); another loop (uvloop) is left to its own removal,
            # and an application's handler on it is not given back.
            # An entry that is no longer this run's (another AsyncWorker started after it and
            # still runs, or the application added its own) is left to its owner; an entry found
            # at the start that belongs to another AsyncWorker's run that has ended since gives
            # back what that run found (two workers on one loop stopped in the order they
            # started: the first reset SIGTERM to its default while the second ran, and the
            # second put the first's stale entry back: a review).
            self._signals_back = True
            for sig, previous in saved.items():
                if own:
                    if entries.get(sig) is not mine[sig]:  # type: ignore[union-attr]
                        continue
                    handle, found = prior.get(sig), previous
                    seen: set[int] = set()
                    while (ended := _ended_run(handle)) is not None and id(ended) not in seen:
                        seen.add(id(ended))
                        handle, found = ended._signals_found[sig]
                    signal.signal(sig, found)
                    if handle is not None:
                        entries[sig] = handle  # type: ignore[index]
                    else:
                        entries.pop(sig, None)  # type: ignore[union-attr]
                else:
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, previous)
            if own and not entries:
                try:  # as loop.remove_signal_handler does when none is left
                    signal.set_wakeup_fd(-1)
                except (ValueError, OSError):
                    pass

        return restore

    async def _do(self, step: Step[T]) -> T:
        """Run a step to its end: each call it yields over the worker's connection, each wait on the
        event loop (``drive`` with ``await``).

        A cancellation of the run while a call is in flight (``task.cancel()``, a TaskGroup, an
        ``asyncio.timeout``, ``asyncio.run`` on Ctrl-C) waits for the call's answer (for at most
        :data:`~pgqueue.async_client.CANCEL_WAIT` seconds, see :func:`~pgqueue.async_client._answered`). When it came, the
        worker stops at once, as ``stop(now=True)`` does: the step takes the answer in (what the
        call leased is given back unstarted, what it completed is reported), the shutdown runs,
        and then the cancellation goes on. Cancelled with the call, psycopg dropped the answer of
        a call the server had committed: the messages it leased stayed leased by no one until
        their lease ran out, an attempt spent (a review)."""
        assert self._runner is not None
        held: asyncio.CancelledError | None = None
        try:
            todo = next(step)
            while True:
                try:  # what a call or a wait raises is the step's to handle (a cancellation too)
                    if isinstance(todo, Wait):
                        await self._sleep(todo.timeout)
                        result = None
                    else:
                        self._call_since = time.monotonic()  # for the stop's watchdog
                        try:
                            await self._connect_loop()
                            result, cancelled = await _answered(_drop_if_read_only(self._runner, todo))
                        finally:
                            self._call_since = None
                        if cancelled is not None:
                            held = held or cancelled
                            self.stop(now=True)
                except BaseException as exc:
                    todo = step.throw(exc)
                else:
                    todo = step.send(result)
        except StopIteration as done:
            if held is not None:
                raise held from None
            return done.value  # type: ignore[no-any-return]

    async def _connect_loop(self) -> None:
        """Open the loop's connection if it has none (after a loss), giving the attempt up at once
        on stop() (StoppedConnecting), as pgqueue.Worker does, and one the server ended while it
        sat idle too (found so here); once stopping, the shutdown's calls connect as before
        (bounded by connect_timeout)."""
        runner = self._runner
        assert runner is not None
        own = runner._own
        if self._stopping or (own is not None and not await _ended_while_idle(own)):
            return
        opening = asyncio.ensure_future(runner._open("_own"))
        while not opening.done():
            if self._stopping:
                opening.cancel()
                await asyncio.wait({opening})
                if not opening.cancelled() and opening.exception() is None:
                    return  # connected meanwhile: it is the loop's now
                raise StoppedConnecting()
            await asyncio.wait({opening}, timeout=0.02)
        opening.result()  # (its error: a refused connection)

    async def _run(self) -> None:
        # (a thread: the start-up check's connection is a blocking one, as in Worker)
        check = _Check(self._check_server, self._ended)
        try:
            if not await asyncio.to_thread(check):
                return  # stopped before the database could be used
        except asyncio.CancelledError:
            self.stop(now=True)  # the start-up wait on its thread ends too
            check.abandon()
            raise
        # One connection for the loop's calls and one for the heartbeats, each opened again at
        # its first call after a loss (the loop's after the Backoff's wait).
        self._runner = _AsyncConnector(self._dsn)
        beats_runner = _AsyncConnector(self._dsn)

        async def beat(msgs: list[Message]) -> list[Message]:
            return await _drop_if_read_only(beats_runner, self._beat(msgs))

        try:
            self._started_log(await self._do(self._configure()), "asyncio tasks")
            beats = AsyncHeartbeats(self._held, beat, interval(self._lease_ms), still_held=self._still_held)
            helpers: list[asyncio.Task[None]] = []
            if self._listen:
                helpers.append(asyncio.create_task(self._listen_loop(), name="pgqueue-listen"))
            try:
                await self._do(self._run_steps())
            finally:
                try:
                    await beats.stop(timeout=2.0)
                finally:  # (also when that wait is cancelled)
                    for task in helpers:
                        task.cancel()
                    await asyncio.gather(*helpers, return_exceptions=True)
        finally:
            self._ended.set()
            await beats_runner.close()
            await self._runner.close()
            log.info("worker stopped")

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

    def _loop_connection(self) -> Any:
        return None if self._runner is None else self._runner._own

    def _start(self, messages: list[Message]) -> None:
        """Start a task for the handler of each newly leased message."""
        for msg in self._adopt(messages):
            d = Delivery(msg)
            self._hold(d)
            task = asyncio.create_task(self._handle(d), name=f"pgqueue-message-{msg.id}")
            task.add_done_callback(functools.partial(self._task_ended, d))
            d.handle = task

    def _task_ended(self, d: Delivery, task: object = None) -> None:
        """A handler's task is over: its _handle has finished the delivery, unless the task was
        cancelled before it started (its body never ran): the message is then given back."""
        if d.finished is None:
            d.released = True
            self._finish(d)

    def _abandon(self, d: Delivery) -> None:
        task: asyncio.Task[None] | None = d.handle
        if task is None or task.done():
            self._task_ended(d)
            return
        d.released = True  # stopped by the shutdown: its _handle gives the message back
        task.cancel()
        # (kept referenced until it ends: a handler that swallows the cancellation runs on after
        # the shutdown has given its message back, see _drain)
        self._cancelled.add(task)
        task.add_done_callback(self._cancelled.discard)

    async def _call(self, msg: Message) -> BaseException | None:
        """Run a coroutine handler (or a Tasks registry's) on a message; return what it raised
        (None if nothing), but a CancelledError, which :meth:`_handle` tells apart."""
        try:
            result = self._handler(msg)
            returned_generator(result)  # (TypeError: the message fails)
            if inspect.isawaitable(result):  # a coroutine function, or a Tasks registry's task
                _not_awaitable_value(await result)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit, KeyboardInterrupt too: the message is failed
            return exc
        return None

    async def _call_within(self, d: Delivery, limit: float) -> tuple[BaseException | None, bool, bool]:
        """:meth:`_call` with a time limit: (what it raised, whether it ran out of time, whether
        the handler's task was cancelled from outside the worker). The handler runs in a task of
        its own, cancelled at ``limit``; one that has not ended
        :data:`~pgqueue._worker_core._GIVE_UP` seconds later (it swallows the cancellation, or
        cleans up at length) is let go, its end ignored, so that its message is failed and its
        slot freed (awaited inline, it held both until it returned: a review; the ``Worker``
        gives up a thread the same way). A cancellation of this delivery's task (the shutdown)
        before the limit is passed on to the handler's, which is awaited as before; one within
        those seconds after it lets the handler go at once, its message failed all the same. A
        cancellation that finds the handler already ended (it came between the handler's end and
        this task's next turn) leaves its outcome standing, as it stands inline."""
        msg = d.message
        handler = asyncio.ensure_future(self._call(msg))
        try:
            await asyncio.wait({handler}, timeout=limit)
        except asyncio.CancelledError:
            if handler.done() and not handler.cancelled():
                # The shutdown (stop(now=True), or its grace running out) found this delivery
                # unfinished in the moment between its handler's end and this task's turn: the
                # handler ran to its end, so its outcome stands and the message is settled by it,
                # not given back to run again (it was, its log saying the handler had not
                # finished, where a handler awaited inline had its outcome: a review)
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                if d.finished is None:  # (not given up meanwhile: a delivery is finished once)
                    d.released = False
                return handler.result(), False, False
            handler.cancel()
            await asyncio.wait({handler})  # (a cancellation again: given up, as inline)
            raise
        if handler.done():
            if handler.cancelled() and handler.cancelling() > 0:
                # its task was cancelled, and not by this worker (which cancels it past the
                # limit, below, or with this delivery's task, above): from outside, as the
                # delivery's own task may be when the handler runs in it without a limit, and
                # given back as that one is (it was failed with the CancelledError: a review)
                return None, False, True
            return handler.result(), False, False  # (the handler's own CancelledError: a failure)
        handler.cancel()
        stopped = False
        try:
            await asyncio.wait({handler}, timeout=_GIVE_UP)
        except asyncio.CancelledError:
            # The shutdown (or a cancellation of run()) while the handler, cancelled at its time
            # limit, has not ended: it ran out of time all the same, and its message is failed
            # with HandlerTimeout, as the Worker's is at its deadline, without waiting further
            # (it was given back instead: a message that kept timing out escaped its dead letter
            # whenever a shutdown came within these seconds, a review)
            stopped = True
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            if not handler.done():
                log.warning("message %d: its handler has not ended %s after it was cancelled at its timeout; "
                            "failing the message all the same", msg.id,
                            "when the worker stopped" if stopped else f"{_GIVE_UP:g} s")
                self._cancelled.add(handler)  # (kept referenced until it ends; its end is ignored)
                handler.add_done_callback(self._cancelled.discard)
            elif not handler.cancelled():
                handler.exception()  # (retrieved, so that asyncio does not log it: its end is ignored)
        return None, True, False

    async def _handle(self, d: Delivery) -> None:
        """Run the handler of a delivery and finish the delivery, whatever happens (else its
        lease would be renewed forever, its slot lost, and the shutdown wait for it)."""
        limit: float | None = None
        timed_out = False
        # (the outcome goes to the delivery only at the end, if it is not finished by then: the
        # shutdown gives up a cancelled handler that does not end soon, see _drain)
        error: BaseException | None = None
        released = False
        try:
            limit = self._limit(d.message)
            if limit is None:
                error = await self._call(d.message)
            else:
                error, timed_out, released = await self._call_within(d, limit)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if d.released or (task is not None and task.cancelling() > 0):
                released = True  # this task was cancelled: by the shutdown, or from outside the worker
            else:
                error = exc  # the handler's own (it awaited what someone else cancelled): a failure
        except BaseException as exc:  # the timeout's TimeoutError, or what the timeout function raised
            error = exc
        finally:
            if d.finished is not None:
                log.info("message %d: its handler ended %.1f s after the shutdown gave the message back "
                         "(ignored)", d.message.id, time.monotonic() - d.finished)
            else:
                # (a time limit that ran out wins over a shutdown that came after it)
                released = (released or d.released) and not timed_out
                if timed_out:
                    # cancelled at its timeout (if it swallowed the cancellation, its result is ignored)
                    error = HandlerTimeout(f"the handler was still running after {limit:g} s (cancelled)")
                    log.warning("message %d: handler timed out after %g s; failing it (cancelled)", d.message.id,
                                limit)
                d.error, d.released = error, released
                self._finish(d)

    async def _listen_loop(self) -> None:
        """Wake the main loop whenever a message is enqueued (LISTEN on the queue's channel)."""
        backoff = 0.5
        outage = Outage(log, "LISTEN connection")
        listened = False  # the last connection listened: one that fails is replaced at once, quietly
        pooled = False  # warned that it goes through a pooler
        while True:
            try:
                async with await _connect.connect_async(self._dsn, autocommit=True) as conn:
                    await conn.execute(listen_statement(self._name))
                    pooled = pooled or warn_if_listening_through_a_pooler(conn, self._name, self._poll_max)
                    self._notify()  # something may have arrived while we were connecting
                    backoff, listened = 0.5, True
                    outage.worked()
                    async for _ in conn.notifies():
                        self._notify()
            except (psycopg.Error, ConnectionFailed) as exc:
                if listened:  # (as the Worker's: an idle_session_timeout closed it, say)
                    log.debug("LISTEN connection lost (%s): connecting again", _first_line(exc))
                    listened = False
                    continue
                outage.failed(f"LISTEN connection failed: {_first_line(exc)}",
                              f"polling until it is back (retry in {backoff:g}s)")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _RECONNECT_MAX)

    def _notify(self) -> None:
        self._notified = True
        if self._wake is not None:
            self._wake.set()
