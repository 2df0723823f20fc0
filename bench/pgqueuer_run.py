"""PgQueuer's throughput setup, driven through its public API (run in a process of its own).

    PGHOST=... PGPORT=... PGDATABASE=... python -m bench.pgqueuer_run [--seconds 10] [--dequeue 5] [--dequeue-batch 10]
                                 [--enqueue 1] [--enqueue-batch 10] [--driver apg|psy]
                                 [--drain N [--processes P]]

PgQueuer's documentation describes its benchmark's throughput mode: producers enqueue batches
of jobs continuously while consumers (each a ``PgQueuer`` on its own connection) run a handler
that does nothing but count, for a fixed time; the rate is jobs handled per second. Its
defaults: 5 consumers fetching batches of 10, one producer enqueuing batches of 10, the asyncpg
driver, the connection from the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE,
PGPASSWORD). This module sets that up with the package's public classes (``PgQueuer``, ``Queries``,
the drivers) and prints one JSON line: jobs handled, seconds, rate, the package's version. The
clock starts when the first job is handled (connections and start-up left out). The
schema must be installed first (``python -m pgqueuer install``, bench/peers.py does it).

The event loop is uvloop's when it is importable, as PgQueuer's own benchmark program
(tools/benchmark.py: ``uvloop.run``) and its CLI (``pgq run``) use it; PgQueuer pulls uvloop in.

``--drain N`` runs PgQueuer's other documented strategy instead (tools/benchmark.py
``--strategy drain``): N jobs are enqueued first, then the consumers run in its drain mode
(``QueueExecutionMode.drain``) until the queue is empty, with no producer beside them: the shape
of bench/worker_e2e.py's `pgqueue worker` run. Its rate is taken the way that run's is, from the
rows left in PgQueuer's queue table (``Queries.queue_size``), sampled every 0.25 s: the jobs gone
between 90% and 10% of the backlog left (bench/rates.py). ``--processes P`` runs the consumers
in P processes of ``--dequeue`` consumers each (the worker section passes its number of `pgqueue
worker` processes, so that both use as many interpreters), started once the jobs are enqueued.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable, Coroutine
from importlib.metadata import version
from typing import Any

#: The drain mode's payload: the 85-byte JSON document every design of the suite enqueues (bench/db.py).
PAYLOAD = b'{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'


def _run_loop(coro: Coroutine[Any, Any, dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """Run coro on uvloop when it is importable (as PgQueuer's tools/benchmark.py and CLI do), else
    on asyncio's default loop; return its result and the loop's name."""
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return asyncio.run(coro), "asyncio"
    return uvloop.run(coro), "uvloop"


async def _queries(driver: str) -> Any:
    from pgqueuer import AsyncpgDriver, PsycopgDriver, Queries

    if driver == "apg":
        import asyncpg  # type: ignore[import-untyped]

        return Queries(AsyncpgDriver(await asyncpg.connect()))
    import psycopg

    return Queries(PsycopgDriver(await psycopg.AsyncConnection.connect("", autocommit=True)))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    admin = await _queries(args.driver)
    await admin.clear_statistics_log()  # as tools/benchmark.py's set-up does
    await admin.clear_queue()
    stop = asyncio.Event()
    handled = 0

    def count() -> None:
        nonlocal handled
        handled += 1

    consumers = await _consumers(args, count)

    async def produce(q: Any) -> None:
        n = 0
        while not stop.is_set():
            payloads = [str(n + i).encode() for i in range(args.enqueue_batch)]
            n += args.enqueue_batch
            await q.enqueue(["bench"] * args.enqueue_batch, payloads, [0] * args.enqueue_batch)

    producers = [await _queries(args.driver) for _ in range(args.enqueue)]
    tasks = [asyncio.create_task(pgq.run(batch_size=args.dequeue_batch)) for pgq in consumers]
    tasks += [asyncio.create_task(produce(q)) for q in producers]
    # the clock starts at the first job handled: start-up is left out, as for pgqueue's worker
    deadline = time.perf_counter() + 60
    while handled == 0 and time.perf_counter() < deadline and not any(t.done() for t in tasks):
        await asyncio.sleep(0.005)
    first, t0 = handled, time.perf_counter()
    await asyncio.sleep(args.seconds if handled else 0)
    done_at = handled - first
    elapsed = time.perf_counter() - t0
    stop.set()
    for pgq in consumers:
        pgq.shutdown.set()
    _, pending = await asyncio.wait(tasks, timeout=max(5.0, args.seconds * 0.1))
    for t in pending:
        t.cancel()
    errors = [repr(t.exception()) for t in tasks if t.done() and not t.cancelled() and t.exception()]
    return {"jobs": done_at, "elapsed": elapsed, "rate": done_at / elapsed if elapsed > 0 else None,
            "version": version("pgqueuer"), "driver": args.driver, "dequeue": args.dequeue,
            "dequeue_batch": args.dequeue_batch, "enqueue": args.enqueue, "enqueue_batch": args.enqueue_batch,
            "errors": errors}


async def _consumers(args: argparse.Namespace, on_job: Callable[[], None] = lambda: None) -> list[Any]:
    """args.dequeue PgQueuer consumers (each a ``PgQueuer`` on its own connection) whose
    entrypoint only calls ``on_job`` (by default nothing)."""
    from pgqueuer import PgQueuer

    consumers = []
    for _ in range(args.dequeue):
        q = await _queries(args.driver)
        pgq = PgQueuer(q.driver, queries=q)

        @pgq.entrypoint("bench")
        async def bench(job: Any) -> None:
            on_job()

        consumers.append(pgq)
    return consumers


def _drain_tasks(consumers: list[Any], batch: int) -> list[asyncio.Task[Any]]:
    from pgqueuer.types import QueueExecutionMode

    return [asyncio.create_task(pgq.run(batch_size=batch, mode=QueueExecutionMode.drain)) for pgq in consumers]


def _errors(tasks: list[asyncio.Task[Any]]) -> list[str]:
    return [repr(t.exception()) for t in tasks if t.done() and not t.cancelled() and t.exception()]


async def consume(args: argparse.Namespace) -> dict[str, Any]:
    """One process of a drain run with --processes: its consumers in drain mode until the queue is empty."""
    tasks = _drain_tasks(await _consumers(args), args.dequeue_batch)
    await asyncio.wait(tasks)
    return {"errors": _errors(tasks)}


async def drain(args: argparse.Namespace) -> dict[str, Any]:
    """PgQueuer's drain strategy: args.drain jobs enqueued, then consumers in drain mode until empty
    (args.processes > 1: that many processes of args.dequeue consumers each, started after the
    enqueue, as the worker section starts its `pgqueue worker` processes)."""
    from bench.rates import drain_rate

    n = args.drain
    admin = await _queries(args.driver)
    await admin.clear_statistics_log()  # as tools/benchmark.py's set-up does
    await admin.clear_queue()
    done = 0
    while done < n:
        k = min(10_000, n - done)
        await admin.enqueue(["bench"] * k, [PAYLOAD] * k, [0] * k)
        done += k

    async def left() -> int:
        return sum(x.count for x in await admin.queue_size())

    consumers: list[Any] = []
    tasks: list[asyncio.Task[Any]] = []
    procs: list[asyncio.subprocess.Process] = []
    if args.processes > 1:
        t0 = time.perf_counter()
        argv = ["-m", "bench.pgqueuer_run", "--consume", "--dequeue", str(args.dequeue),
                "--dequeue-batch", str(args.dequeue_batch), "--driver", args.driver]
        procs = [await asyncio.create_subprocess_exec(sys.executable, *argv, stdout=asyncio.subprocess.PIPE)
                 for _ in range(args.processes)]
    else:
        consumers = await _consumers(args)
        t0 = time.perf_counter()
        tasks = _drain_tasks(consumers, args.dequeue_batch)
    samples: list[tuple[float, int]] = []
    problems: list[str] = []
    timeout = max(60.0, n / 200)
    while True:
        now_left = await left()
        t = time.perf_counter() - t0
        samples.append((t, now_left))
        if now_left == 0:
            break
        if t > timeout:
            problems.append(f"{now_left} of {n} jobs left after {timeout:.0f} s")
            break
        if (tasks and all(task.done() for task in tasks)) or (procs and all(p.returncode is not None
                                                                             for p in procs)):
            problems.append(f"the consumers stopped with {now_left} of {n} jobs left")
            break
        await asyncio.sleep(0.25)
    for pgq in consumers:
        pgq.shutdown.set()
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=30)
        for task in pending:
            task.cancel()
    errors = problems + _errors(tasks)
    for proc in procs:
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=30)
        except asyncio.TimeoutError:
            proc.kill()
            out, _ = await proc.communicate()
        lines = [line for line in out.decode().splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            errors.append(f"a consumer process exited with {proc.returncode}")
        else:
            errors += json.loads(lines[-1]).get("errors") or []
    rate, how = drain_rate(samples, n)
    return {"jobs": n - samples[-1][1], "elapsed": samples[-1][0], "rate": rate, "how": how,
            "version": version("pgqueuer"), "driver": args.driver, "dequeue": args.dequeue,
            "dequeue_batch": args.dequeue_batch, "drain": n, "processes": args.processes, "errors": errors}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.pgqueuer_run", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--dequeue", type=int, default=5)
    p.add_argument("--dequeue-batch", type=int, default=10)
    p.add_argument("--enqueue", type=int, default=1)
    p.add_argument("--enqueue-batch", type=int, default=10)
    p.add_argument("--driver", choices=["apg", "psy"], default="apg")
    p.add_argument("--drain", type=int, default=0,
                   help="PgQueuer's drain strategy: enqueue this many jobs, then drain them (no producer)")
    p.add_argument("--processes", type=int, default=1,
                   help="--drain: this many processes of --dequeue consumers each (default: one, this one)")
    p.add_argument("--consume", action="store_true", help=argparse.SUPPRESS)  # one process of --processes
    args = p.parse_args()
    out, loop = _run_loop(consume(args) if args.consume else drain(args) if args.drain else run(args))
    print(json.dumps({**out, "loop": loop}), flush=True)


if __name__ == "__main__":
    main()
