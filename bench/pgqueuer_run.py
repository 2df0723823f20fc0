"""PgQueuer's throughput setup, driven through its public API (run in a process of its own).

    PGHOST=... PGPORT=... PGDATABASE=... python -m bench.pgqueuer_run [--seconds 10] [--dequeue 5] [--dequeue-batch 10]
                                 [--enqueue 1] [--enqueue-batch 10] [--driver apg|psy]

PgQueuer's documentation describes its benchmark's throughput mode: producers enqueue batches
of jobs continuously while consumers (each a ``PgQueuer`` on its own connection) run a handler
that does nothing but count, for a fixed time; the rate is jobs handled per second. Its
defaults: 5 consumers fetching batches of 10, one producer enqueuing batches of 10, the asyncpg
driver, the connection from the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE,
PGPASSWORD). This module sets that up with the package's public classes (``PgQueuer``, ``Queries``,
the drivers) and prints one JSON line: jobs handled, seconds, rate, the package's version. The
clock starts when the first job is handled (connections and start-up left out). The
schema must be installed first (``python -m pgqueuer install``, bench/peers.py does it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from importlib.metadata import version
from typing import Any


async def _queries(driver: str) -> Any:
    from pgqueuer import AsyncpgDriver, PsycopgDriver, Queries

    if driver == "apg":
        import asyncpg  # type: ignore[import-untyped]

        return Queries(AsyncpgDriver(await asyncpg.connect()))
    import psycopg

    return Queries(PsycopgDriver(await psycopg.AsyncConnection.connect("", autocommit=True)))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from pgqueuer import PgQueuer

    admin = await _queries(args.driver)
    await admin.clear_queue()
    stop = asyncio.Event()
    handled = 0
    consumers = []
    for _ in range(args.dequeue):
        q = await _queries(args.driver)
        pgq = PgQueuer(q.driver, queries=q)

        @pgq.entrypoint("bench")
        async def bench(job: Any) -> None:
            nonlocal handled
            handled += 1

        consumers.append(pgq)

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


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.pgqueuer_run", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--dequeue", type=int, default=5)
    p.add_argument("--dequeue-batch", type=int, default=10)
    p.add_argument("--enqueue", type=int, default=1)
    p.add_argument("--enqueue-batch", type=int, default=10)
    p.add_argument("--driver", choices=["apg", "psy"], default="apg")
    args = p.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
