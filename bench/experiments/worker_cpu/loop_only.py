"""The worker's own loop without a database: what handing messages to handlers costs the worker.

``drain.py`` measures the worker against a real server, where a round's rate moves by 15% on this
machine and a 15-us change a message is lost in it. Here one ``WorkerCore`` (concurrency 4, a
batch of 4) runs its real loop, ``_loop_until_stopped``, against a stand-in queue that answers
each call after ``LATENCY`` seconds of sleep (the loop waits in epoll, as it does on a socket, so
the handler threads run meanwhile) and leases fresh messages without end. It prints the rate and
the process's CPU time per message, for the no-op handler as a plain function (on the handler
threads) or as an ``async def`` (a task on the loop); the difference is the hand-over to a thread
and back.

Usage (repository root): .venv/bin/python bench/experiments/worker_cpu/loop_only.py [N] [threads|async] [LATENCY]
"""
from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time
from datetime import datetime, timezone

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path[:0] = [os.path.join(REPO, "python"), REPO]

from bench import noop  # noqa: E402
from pgqueue._worker_core import WorkerCore, _HandlerThreads  # noqa: E402
from pgqueue.message import Message  # noqa: E402


class StandInQueue:
    """The calls the loop makes, answered after a sleep; stops the worker after ``n`` completions."""

    def __init__(self, core: WorkerCore, n: int, latency: float) -> None:
        self.core, self.n, self.latency = core, n, latency
        self.completed = 0
        self.ids = itertools.count(1)
        self.now = datetime.now(timezone.utc)

    def _leased(self, want: int) -> list[Message]:
        return [Message(id=next(self.ids), queue="bench", payload=b"", attempts=1, state=None, dequeue_at=self.now,
                        priority=None, created_at=self.now, locked_until=self.now, content=b"", content_type=None)
                for _ in range(want)]

    def _count(self, done: int) -> None:
        self.completed += done
        if self.completed >= self.n:
            self.core._stopping = True

    async def complete_and_dequeue(self, msgs: list[Message], limit: int, *, lock_ms: int | None = None
                                   ) -> tuple[list[Message], list[Message]]:
        self._count(len(msgs))
        await asyncio.sleep(self.latency)
        return self._leased(limit), []

    async def dequeue(self, limit: int, *, lock_ms: int | None = None) -> list[Message]:
        await asyncio.sleep(self.latency)
        return self._leased(limit)

    async def complete_many(self, msgs: list[Message]) -> list[Message]:
        self._count(len(msgs))
        await asyncio.sleep(self.latency)
        return []

    async def next_due(self) -> None:
        return None


async def run(n: int, mode: str, latency: float) -> None:
    threads = mode == "threads"
    core = WorkerCore("bench", "dbname=unused", noop.handle if threads else noop.handle_async, concurrency=4,
                      batch_size=None, lock_ms=30000, listen=False, poll_min=0.01, poll_max=1.0,
                      shutdown_grace=5.0, on_result=None, timeout=None, handle_signals=False, threads=threads)
    core._loop = asyncio.get_running_loop()
    core._wake = asyncio.Event()
    queue = StandInQueue(core, n, latency)
    core._queue = queue  # type: ignore[assignment]
    if threads:
        core._threads = _HandlerThreads(4, core._loop)
    t0, c0 = time.monotonic(), time.process_time()
    await core._loop_until_stopped()
    t1, c1 = time.monotonic(), time.process_time()
    if core._threads is not None:
        core._threads.close()
    print(f"{mode}: {queue.completed / (t1 - t0):,.0f} msg/s, worker CPU {1e6 * (c1 - c0) / queue.completed:.1f} us/msg")


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 40000, sys.argv[2] if len(sys.argv) > 2 else "threads",
                    float(sys.argv[3]) if len(sys.argv) > 3 else 0.0005))
