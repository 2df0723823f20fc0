"""A real AsyncWorker with many short handlers (0-0.25 s each) and a short lease, so that its
heartbeat rounds (message_heartbeat_batch) and its acknowledgements (message_complete_and_dequeue)
overlap on the same messages; prints the messages done and the deadlocks the server counted in
the database (pg_stat_database.deadlocks).

    python bench/experiments/heartbeat_batch/worker_deadlocks.py ADMIN_DSN SECONDS CONCURRENCY LOCK_MS

ADMIN_DSN is a role that may create databases; the script makes (and leaves) database hb_deadlocks.
A review of session 53 (2 cores; its own copy of this script): with the batches locking rows in
input order, 9 and 15 deadlocks in 40 s (concurrency 500, lock_ms 600), 4 in 60 s (lock_ms
3000); with the rows in id order, 0 in 40 s (and 0 in 40 s, 153,642 messages done, in a run of
this script on b6161a4's build, the local server: `... 40 500 600`).
"""

from __future__ import annotations

import asyncio
import random
import sys

import psycopg
from psycopg.conninfo import make_conninfo

import pgqueue


async def run(dsn: str, seconds: float, concurrency: int, lock_ms: int) -> int:
    done = 0

    async def handler(msg: pgqueue.Message) -> None:
        nonlocal done
        await asyncio.sleep(random.random() * 0.25)
        done += 1

    worker = pgqueue.AsyncWorker(pgqueue.AsyncQueue(dsn, "hb"), handler, concurrency=concurrency,
                                 lock_ms=lock_ms, listen=False, handle_signals=False)
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(seconds)
    worker.stop()
    await task
    return done


def main(admin: str, seconds: float, concurrency: int, lock_ms: int) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS hb_deadlocks")
        conn.execute("CREATE DATABASE hb_deadlocks")
    dsn = make_conninfo(admin, dbname="hb_deadlocks")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgqueue")
        conn.execute("SELECT pgqueue.queue_create('hb', p_lock_ms => %s)", (lock_ms,))
        conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('hb', array_fill('x'::bytea, ARRAY[400000]))")
    done = asyncio.run(run(dsn, seconds, concurrency, lock_ms))
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    print(f"done {done}, deadlocks {row[0] if row else None}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
