"""The no-op handler the worker section runs: ``pgqueue worker DSN bench bench.noop:handle``."""

from __future__ import annotations

from pgqueue import Message


def handle(msg: Message) -> None:
    """Do nothing: the benchmark measures the worker and the queue, not the work."""


async def handle_async(msg: Message) -> None:
    """Do nothing, as a coroutine: `pgqueue worker` runs an `async def` handler on its asyncio
    worker, as a task on the event loop instead of on a thread."""
