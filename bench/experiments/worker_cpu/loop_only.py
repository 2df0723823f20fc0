"""The worker's own loop without a database: what handing messages to handlers costs the worker.

``drain.py`` measures the worker against a real server, where a round's rate moves by 15% on this
machine and a 15-us change a message is lost in it. Here a worker (concurrency 4, a batch of 4)
runs its real loop, the core's ``_loop_until_stopped`` step, driven as ``pgqueue worker`` drives it,
against a stand-in for the database that answers each call after ``LATENCY`` seconds of sleep (the
handler threads or tasks run meanwhile, as they do while the worker waits on its socket) and
leases fresh messages without end. It prints the rate and the process's CPU time per message,
for the no-op handler as a plain function (``Worker``: the handler threads, no event loop) or as
an ``async def`` (``AsyncWorker``: a task on the event loop).

Until commit 34e474c both ran on the asyncio core; check that commit out for the loop_only.py
that measured it (and the patches of ab.sh).

Usage (repository root): .venv/bin/python bench/experiments/worker_cpu/loop_only.py [N] [threads|async] [LATENCY]
"""
from __future__ import annotations

import asyncio
import itertools
import os
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Any, cast

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path[:0] = [os.path.join(REPO, "python"), REPO]

from bench import noop  # noqa: E402
from pgqueue import AsyncQueue, AsyncWorker, Queue, Worker, _sql  # noqa: E402
from pgqueue._core import Call  # noqa: E402
from pgqueue._worker_core import WorkerCore, drive  # noqa: E402
from pgqueue.message import Message  # noqa: E402
from pgqueue.worker import _HandlerThreads  # noqa: E402


def _tokens(call: Call[Any]) -> int:
    """How many messages a call acknowledges (its ids, an array literal such as '{1,2,3}')."""
    ids = str(call.params["ids"]).strip("{}")
    return len(ids.split(",")) if ids else 0


class StandIn:
    """Answers the loop's calls after a sleep; stops the worker after ``n`` completions."""

    def __init__(self, worker: WorkerCore, n: int, latency: float) -> None:
        self.worker, self.n, self.latency = worker, n, latency
        self.completed = 0
        self.ids = itertools.count(1)
        self.now = datetime.now(timezone.utc)

    def _leased(self, want: int) -> list[Message]:
        return [Message(id=next(self.ids), queue="bench", payload=b"", attempts=1, state=None, dequeue_at=self.now,
                        priority=None, created_at=self.now, locked_until=self.now, content=b"", content_type=None)
                for _ in range(want)]

    def answer(self, call: Call[Any]) -> Any:
        if call.query == _sql.COMPLETE_AND_DEQUEUE:
            self._count(_tokens(call))
            return self._leased(cast(int, call.params["limit"])), []
        if call.query == _sql.DEQUEUE:
            return self._leased(cast(int, call.params["limit"]))
        if call.query == _sql.NEXT_DUE:
            return None
        if call.query == _sql.COMPLETE_BATCH:
            self._count(_tokens(call))
            return []
        if call.query == _sql.DEFER:  # the stop gives back what it leased and did not start
            return True
        raise AssertionError(f"the stand-in does not answer {call.query[:60]!r}")

    def _count(self, done: int) -> None:
        self.completed += done
        if self.completed >= self.n:
            self.worker._stopping = True

    def run(self, call: Call[Any]) -> Any:
        time.sleep(self.latency)
        return self.answer(call)

    async def run_async(self, call: Call[Any]) -> Any:
        await asyncio.sleep(self.latency)
        return self.answer(call)


OPTIONS: dict[str, Any] = {"concurrency": 4, "lock_ms": 30000, "listen": False, "poll_min": 0.01, "poll_max": 1.0,
                           "shutdown_grace": 5.0, "handle_signals": False}


def run_threads(n: int, latency: float) -> tuple[float, int]:
    worker = Worker(Queue("dbname=unused", "bench"), noop.handle, **OPTIONS)
    stand_in = StandIn(worker, n, latency)
    worker._loop_thread = threading.get_ident()
    worker._threads = _HandlerThreads(4, noop.handle, worker._events)
    t0 = time.monotonic()
    drive(worker._loop_until_stopped(), stand_in.run, worker._wait)
    elapsed = time.monotonic() - t0
    worker._threads.close()
    return elapsed, stand_in.completed


async def run_async(n: int, latency: float) -> tuple[float, int]:
    worker = AsyncWorker(AsyncQueue("dbname=unused", "bench"), noop.handle_async, **OPTIONS)
    stand_in = StandIn(worker, n, latency)
    worker._loop = asyncio.get_running_loop()
    worker._loop_thread = threading.get_ident()
    worker._wake = asyncio.Event()
    # the loop's connection, open (the worker connects only when it has none)
    connection = type("Connection", (), {"closed": False})()
    worker._runner = type("Runner", (), {"run": staticmethod(stand_in.run_async), "_own": connection})()
    t0 = time.monotonic()
    await worker._do(worker._loop_until_stopped())
    return time.monotonic() - t0, stand_in.completed


def main(n: int, mode: str, latency: float) -> None:
    c0 = time.process_time()
    elapsed, completed = run_threads(n, latency) if mode == "threads" else asyncio.run(run_async(n, latency))
    cpu = time.process_time() - c0
    print(f"{mode}: {completed / elapsed:,.0f} msg/s, worker CPU {1e6 * cpu / completed:.1f} us/msg")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40000, sys.argv[2] if len(sys.argv) > 2 else "threads",
         float(sys.argv[3]) if len(sys.argv) > 3 else 0.0005)
