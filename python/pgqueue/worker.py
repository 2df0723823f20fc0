"""Run a handler over the messages of a queue: the pgqueue worker.

A :class:`Worker` runs plain-function handlers. It is a thin front of the one worker core
(:mod:`pgqueue._worker_core`, which :class:`pgqueue.AsyncWorker` shares): :meth:`Worker.run`
runs that core on an asyncio event loop of its own, in the calling thread, and the handlers on
a bounded pool of ``concurrency`` threads.

The core leases messages in batches, completes each message whose handler returns and fails
each message whose handler raises (the extension then retries it after the queue's back-off,
or moves it to the dead letters after ``max_attempts``). While a handler runs, its lease is
extended with heartbeats. The messages whose handlers have returned by the time the worker
acknowledges are completed together, each with its own token: in the same statement and
transaction as the next fetch (``message_complete_and_dequeue``) when a fetch is due, so that a
busy worker pays one transaction per message, else on their own (``message_complete_batch``).
A message is never acknowledged before its handler has returned, nor twice.

Wake-ups: a LISTEN connection on the queue's channel wakes an idle worker as soon as a
message is enqueued (the queue needs ``notify`` on). Without notifications the worker polls,
backing off from ``poll_min`` to ``poll_max`` while the queue is empty; when messages are
scheduled it sleeps until the next one is due, never longer.

Shutdown: :meth:`Worker.run` called on the main thread makes SIGINT and SIGTERM stop it
gracefully (fetch no more, let in-flight handlers finish within ``shutdown_grace``, give the
rest back at once with a defer, return normally) and puts the previous signal handlers back
when it returns. A second signal gives back what is still in hand at once. :meth:`Worker.stop`
does the same from any thread.

Handler timeouts: a handler still running after ``timeout`` seconds has its message failed
with ``last_error`` ``"HandlerTimeout: ..."`` (the queue's retry and dead-letter rules apply)
and whatever it returns or raises later is ignored. Python cannot kill a thread: the handler
runs on until it returns, on a daemon thread the worker no longer counts; a new thread takes
its place so that ``concurrency`` handlers can still run. The same holds for a handler still
running when the shutdown grace ends: its message is given back, its thread left behind (a
daemon: it does not keep the process alive).

Delivery is at least once: a worker that dies (even by SIGKILL) loses nothing, because the
messages it held come back when their leases run out. The attempts counter fences every
acknowledgement, so a message is completed at most once.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from pgqueue._worker_core import Handler, HandlerTimeout, Outcome, Result, Timeout, WorkerCore
from pgqueue.client import Queue
from pgqueue.tasks import Tasks

__all__ = ["Handler", "HandlerTimeout", "Outcome", "Result", "Timeout", "Worker"]


class Worker(WorkerCore):
    """Process the messages of a queue with a handler, ``concurrency`` at a time.

    Parameters:
        queue: the queue to consume (only its name and connection string are used); the worker
            opens its own connections to its database (a pool of up to two to fetch,
            acknowledge and renew leases, one to LISTEN).
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
        on_result: called on the thread running :meth:`run` with a :class:`Result` after each
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
        if inspect.iscoroutinefunction(handler) or (isinstance(handler, Tasks) and handler.is_async):
            raise TypeError("the handler is a coroutine function: the Worker runs plain functions "
                            "on threads; use pgqueue.AsyncWorker for coroutines")
        super().__init__(queue.name, queue.conninfo if dsn is None else dsn, handler, concurrency=concurrency,
                         batch_size=batch_size, lock_ms=lock_ms, listen=listen, poll_min=poll_min,
                         poll_max=poll_max, shutdown_grace=shutdown_grace, on_result=on_result,
                         timeout=timeout, handle_signals=handle_signals, threads=True)
        self._saved_signals: dict[signal.Signals, Any] | None = None

    def run(self) -> None:
        """Process messages until :meth:`stop` is called, then shut down gracefully.

        Runs the worker's event loop in the calling thread. On the main thread (and unless
        ``handle_signals=False``) SIGINT and SIGTERM stop it gracefully while it runs: it then
        returns normally, and the previous signal handlers are back. If the loop is interrupted
        by an exception (a KeyboardInterrupt with ``handle_signals=False``, a bug), the messages
        in hand are given back at once before it propagates.

        Raises a :mod:`pgqueue.errors` class when the queue cannot be used at start-up
        (``ConnectionFailed``, ``QueueNotFound``, ...); later connection losses are logged
        and retried. Raises RuntimeError when called where an event loop runs already.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("Worker.run() runs an event loop of its own and cannot be called from "
                               "a running one: use pgqueue.AsyncWorker there, or run it on a thread "
                               "(await asyncio.to_thread(worker.run))")
        self._claim_run("a Worker")
        if self._saved_signals is not None:
            self._handle_signals = False  # install_signal_handlers() did it already
        try:
            with asyncio.Runner() as runner:
                runner.run(self._main())
        finally:
            self._restore_signal_handlers()

    def install_signal_handlers(self) -> None:
        """Make SIGINT and SIGTERM stop the worker gracefully; a second signal stops it now.

        Call from the main thread (Python delivers signals there) when :meth:`run` runs on
        another one; on the main thread :meth:`run` does it itself (unless
        ``handle_signals=False``). Either way the previous handlers are put back when
        :meth:`run` returns.
        """

        def on_signal(signum: int, frame: FrameType | None) -> None:
            # Between two bytecodes of the main thread, maybe inside a lock: act from a thread.
            threading.Thread(target=self._on_signal, args=(signal.Signals(signum),), daemon=True).start()

        saved = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        if self._saved_signals is None:
            self._saved_signals = saved

    def _restore_signal_handlers(self) -> None:
        saved, self._saved_signals = self._saved_signals, None
        for sig, previous in (saved or {}).items():
            signal.signal(sig, previous)
