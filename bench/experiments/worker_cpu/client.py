"""Client-side CPU of the worker's one statement, layer by layer (issue 13).

On a queue 'bench' with a backlog, runs CALLS acknowledge-and-fetch calls of 4 messages three
ways, one after the other, and prints the client process's CPU time per call (time.process_time):
pgqueue.AsyncQueue.complete_and_dequeue over an AsyncConnectionPool (what the worker calls);
the same statement through psycopg's AsyncConnection (prepared, positional parameters); and
through a sync psycopg Connection. The server's time is not in these numbers: the difference
between the rows is what each layer costs the client.

Usage: .venv/bin/python bench/experiments/worker_cpu/client.py DSN [CALLS]
"""
from __future__ import annotations

import asyncio
import sys
import time

import psycopg
from psycopg_pool import AsyncConnectionPool

from pgqueue.async_client import AsyncQueue

STATEMENT = ("SELECT d.id, d.content, d.attempts, d.dequeue_at, d.state, d.content_type, d.created_at, "
             "d.locked_until, pgqueue.now_ms(), d.stale FROM pgqueue.message_complete_and_dequeue("
             "%s::bigint[], %s::integer[], 'bench', 4, NULL) AS d")


async def layers(dsn: str, calls: int) -> None:
    pool = AsyncConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=False)
    await pool.open(wait=True)
    try:
        queue = AsyncQueue(pool, "bench")
        msgs = await queue.dequeue(4)
        t0 = time.process_time()
        for _ in range(calls):
            msgs, _lost = await queue.complete_and_dequeue(msgs, 4)
        print(f"AsyncQueue.complete_and_dequeue (pool):  {(time.process_time() - t0) / calls * 1e6:6.0f} us/call")
        ids, tokens = [m.id for m in msgs], [m.attempts for m in msgs]
        async with pool.connection() as conn:
            t0 = time.process_time()
            for _ in range(calls):
                cur = await conn.execute(STATEMENT, (ids, tokens), prepare=True)
                rows = await cur.fetchall()
                ids, tokens = [r[0] for r in rows], [r[2] for r in rows]
            print(f"psycopg AsyncConnection, same statement: {(time.process_time() - t0) / calls * 1e6:6.0f} us/call")
    finally:
        await pool.close()
    with psycopg.connect(dsn, autocommit=True) as sconn:
        t0 = time.process_time()
        for _ in range(calls):
            rows = sconn.execute(STATEMENT, (ids, tokens), prepare=True).fetchall()
            ids, tokens = [r[0] for r in rows], [r[2] for r in rows]
        print(f"psycopg Connection (sync), same statement: {(time.process_time() - t0) / calls * 1e6:5.0f} us/call")
    with psycopg.connect(dsn, autocommit=True) as sconn:  # give the last leases back
        sconn.execute("SELECT pgqueue.message_complete_batch(%s::bigint[], %s::integer[])", (ids, tokens))


if __name__ == "__main__":
    asyncio.run(layers(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3000))
