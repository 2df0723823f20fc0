"""What message_complete's SET enable_seqscan = off costs a call.

Creates pgqueue.message_complete_noset, a copy of message_complete without the clause, and
times 200,000 calls of each that find nothing (an id no message has), six alternated rounds,
then drops the copy. The session runs with enable_seqscan off, so that the copy plans the same
primary-key probe as the original whatever the table's size (on a table recorded empty it would
plan a Seq Scan): the difference is the clause's GUC save and restore.

    python bench/experiments/emptied_table/set_cost.py "host=/tmp/x port=5493 dbname=postgres"
"""

from __future__ import annotations

import statistics
import sys
import time

import psycopg

CALLS = 200_000


def main(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_get_functiondef('pgqueue.message_complete(bigint, integer)'::regprocedure)"
                           ).fetchone()
        assert row is not None and "enable_seqscan" in row[0], "message_complete has no SET enable_seqscan"
        copy = (row[0].replace("pgqueue.message_complete(", "pgqueue.message_complete_noset(", 1)
                .replace(" SET enable_seqscan TO 'off'\n", "\n", 1))
        assert "enable_seqscan" not in copy.split("AS $function$")[0], copy[:400]
        conn.execute(copy)
        try:
            conn.execute("SET enable_seqscan = off")  # the copy's plan: the original's (see above)
            times: dict[str, list[float]] = {"message_complete": [], "message_complete_noset": []}
            for r in range(6):
                for fn in sorted(times, reverse=r % 2 == 1):
                    start = time.perf_counter()
                    conn.execute(f"SELECT count(*) FROM generate_series(1, {CALLS}) g "
                                 f"WHERE pgqueue.{fn}(-g, 1)")
                    times[fn].append((time.perf_counter() - start) / CALLS * 1e6)
            for fn, ts in times.items():
                print(f"{fn}: median {statistics.median(ts):.2f} us a call (rounds {', '.join(f'{t:.2f}' for t in ts)})")
        finally:
            conn.execute("DROP FUNCTION pgqueue.message_complete_noset(bigint, integer)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
