"""Server CPU per message_complete in two databases, in paired rounds (as pairs.py).

Usage: python complete_pairs.py DB_A DB_B [ROUNDS] [N]

Each database's queue 'bench' is emptied, refilled with ROUNDS * N + 1,000 messages and all of
them leased (attempts 1); then each round completes the next N of them by id, a COMMIT after
each call, in both databases, the order swapped every round. Prints both medians, the median
difference B - A and how many rounds B used less.
"""
from __future__ import annotations

import sys

import psycopg

from cpu_loop import paired_rounds, pinned_session  # type: ignore[import-not-found]  # run as a script beside cpu_loop.py


def main(argv: list[str]) -> None:
    dbs = argv[0:2]
    rounds = int(argv[2]) if len(argv) > 2 else 20
    n = int(argv[3]) if len(argv) > 3 else 2000
    total = rounds * n + 1000
    sessions = [pinned_session(db) for db in dbs]
    first: list[int] = []
    for conn, _ in sessions:
        conn.execute("TRUNCATE pgqueue.message")
        conn.execute(f"SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill('\\x01'::bytea, ARRAY[{total}]))")
        conn.execute("VACUUM ANALYZE pgqueue.message")
        for _ in range(-(-total // 10000)):
            conn.execute("SELECT count(*) FROM pgqueue.message_dequeue('bench', 10000, 3600000)")
        row = conn.execute("SELECT min(id) FROM pgqueue.message").fetchone()
        assert row is not None
        first.append(int(row[0]))
        warm = first[-1] + rounds * n  # the last 1,000 warm the plan cache
        conn.execute(f"DO $$ BEGIN FOR i IN {warm}..{warm + 299} LOOP "
                     "PERFORM pgqueue.message_complete(i, 1); COMMIT; END LOOP; END $$")
    def run(i: int, r: int, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        lo = first[i] + r * n
        conn.execute(f"DO $$ BEGIN FOR i IN {lo}..{lo + n - 1} LOOP "
                     "IF NOT pgqueue.message_complete(i, 1) THEN RAISE 'not completed: %', i; END IF; "
                     "COMMIT; END LOOP; END $$")

    paired_rounds(sessions, rounds, n, run)

if __name__ == "__main__":
    main(sys.argv[1:])
