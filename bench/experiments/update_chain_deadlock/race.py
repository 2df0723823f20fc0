"""Four workers' calls (message_complete_and_dequeue, 3 at a time) on a queue of 8 message
groups, as tests/test_client_groups.py races them, for a while; prints the calls made and the
deadlocks, by kind: PostgreSQL's update-chain wait ("while locking updated version": SKIP
LOCKED does not cover it, docs/locking.md) or another (a lock order of pgqueue's own).

    python bench/experiments/update_chain_deadlock/race.py DSN GROUP_CONCURRENCY SECONDS

Session 53 (2 cores, two busy-loop processes beside it, 15-30 s runs of concurrency 2 and 0):
1 deadlock, of the update-chain kind, in 48,777 calls; none of the other kind.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter

import psycopg


def main(dsn: str, concurrency: int, seconds: float) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        if admin.execute("SELECT 1 FROM pgqueue.queue WHERE name = 'chain_race'").fetchone():
            admin.execute("SELECT pgqueue.queue_drop('chain_race')")
        admin.execute("SELECT pgqueue.queue_create('chain_race', p_group_concurrency => %s, p_lock_ms => 60000)",
                      (concurrency,))
        admin.execute("SELECT count(*) FROM pgqueue.message_create_batch('chain_race', array_fill('x'::bytea, "
                      "ARRAY[40000]), p_groups => (SELECT array_agg('grp' || (i % 8)) FROM generate_series(1, 40000) i))")
    stop = time.monotonic() + seconds
    seen: Counter[str] = Counter()
    lock = threading.Lock()

    def consumer() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            held: list[tuple[int, int]] = []
            while time.monotonic() < stop:
                try:
                    rows = conn.execute("SELECT id, attempts, stale FROM pgqueue.message_complete_and_dequeue("
                                        "%s::bigint[], %s::integer[], 'chain_race', 3)",
                                        ([i for i, _ in held], [a for _, a in held])).fetchall()
                    held = [(r[0], r[1]) for r in rows if not r[2]]
                    with lock:
                        seen["calls"] += 1
                except psycopg.errors.DeadlockDetected as exc:
                    kind = "update chain" if "while locking updated version" in (exc.diag.context or "") else "lock order"
                    with lock:
                        seen[kind] += 1
                    held = []

    threads = [threading.Thread(target=consumer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_drop('chain_race')")
    print(f"group_concurrency {concurrency}: {dict(seen)}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
