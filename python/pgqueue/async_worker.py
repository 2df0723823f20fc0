"""Run a coroutine handler over the messages of a queue on asyncio: :class:`AsyncWorker`.

The same core as :class:`pgqueue.Worker` (:mod:`pgqueue._worker_core`), entered with ``await``
on the caller's event loop, and handlers awaited as tasks instead of run on threads: messages
are leased in batches, at most ``concurrency`` handlers run at once, their leases are renewed
every third of the lease while they run, the messages whose handlers returned are completed
together in one statement, a handler that raises fails its message (retry after the queue's
back-off, dead letter after ``max_attempts``). An idle worker wakes through LISTEN when the
queue's ``notify`` is on and otherwise polls, never sleeping past the next due message.

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

import inspect
from collections.abc import Awaitable, Callable

from pgqueue._worker_core import Result, Timeout, WorkerCore
from pgqueue.async_client import AsyncQueue
from pgqueue.message import Message
from pgqueue.tasks import Tasks

__all__ = ["AsyncHandler", "AsyncWorker"]

#: A coroutine function taking a message; its result is ignored, an exception fails the message.
AsyncHandler = Callable[[Message], Awaitable[object]]


class AsyncWorker(WorkerCore):
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
        if not (inspect.iscoroutinefunction(handler)
                or (isinstance(handler, Tasks) and (handler.is_async or not handler.names))):
            raise TypeError("the handler is not a coroutine function: AsyncWorker awaits "
                            "`async def` handlers; use pgqueue.Worker for plain functions")
        if not isinstance(queue, AsyncQueue):
            raise TypeError(f"expected an AsyncQueue, got {type(queue).__name__} (use Worker with a Queue)")
        super().__init__(queue.name, queue.conninfo if dsn is None else dsn, handler, concurrency=concurrency,
                         batch_size=batch_size, lock_ms=lock_ms, listen=listen, poll_min=poll_min,
                         poll_max=poll_max, shutdown_grace=shutdown_grace, on_result=on_result,
                         timeout=timeout, handle_signals=handle_signals, threads=False)

    async def run(self) -> None:
        """Process messages until :meth:`stop` (or SIGINT/SIGTERM), then shut down gracefully.

        Raises a :mod:`pgqueue.errors` class when the queue cannot be used at start-up; later
        connection losses are logged and retried.
        """
        self._claim_run("an AsyncWorker")
        await self._main()
