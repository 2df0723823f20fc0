"""A consumer session whose plans were made while pgqueue.message was recorded empty.

A queue drains, a VACUUM records pgqueue.message with 0 rows and truncates it; a consumer
session then leases and completes a few messages (its plans are made on that near-empty table,
and after five calls the plan cache keeps a generic plan); 60,000 messages arrive. This script
times 300 lease + complete cycles on that session (A) against a session opened after the
messages arrived (B), twice each in turn, then A again after an ANALYZE. Without index-only
plans whatever the statistics, A scans the table at every acknowledgement.

Usage (a throwaway database with autovacuum off, so that nothing re-plans meanwhile; the
script drops and re-creates the extension in it, and refuses a server with autovacuum on or a
database whose pgqueue holds queues other than "default" and its own "q"):

    python bench/experiments/emptied_table/run.py "host=/tmp/x port=5493 dbname=postgres" [plain|grouped]
"""

from __future__ import annotations

import sys
import time

import psycopg

CYCLES = 300


def cycle(conn: psycopg.Connection[tuple[int, int]], queue: str, n: int) -> None:
    for _ in range(n):
        row = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue(%s, 1, 60000)", (queue,)).fetchone()
        assert row is not None, "the queue ran dry"
        conn.execute("SELECT pgqueue.message_complete(%s, %s)", row)


def timed(conn: psycopg.Connection[tuple[int, int]], queue: str) -> float:
    start = time.perf_counter()
    cycle(conn, queue, CYCLES)
    return (time.perf_counter() - start) / CYCLES * 1e3


def recorded(conn: psycopg.Connection[tuple[int, int]]) -> tuple[int, float]:
    """pgqueue.message's relpages and reltuples, as the planner reads them."""
    row = conn.execute("SELECT relpages, reltuples FROM pg_class WHERE oid = 'pgqueue.message'::regclass").fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def main(dsn: str, kind: str) -> None:
    grouped = kind == "grouped"
    adm = psycopg.connect(dsn, autocommit=True)
    if adm.execute("SELECT current_setting('autovacuum')").fetchone() != ("off",):
        sys.exit("autovacuum is on: an ANALYZE meanwhile would re-plan session A (set autovacuum = off)")
    if adm.execute("SELECT to_regclass('pgqueue.queue') IS NOT NULL").fetchone() == (True,):
        others = adm.execute("SELECT array_agg(name) FROM pgqueue.queue WHERE name NOT IN ('default', 'q')").fetchone()
        if others is not None and others[0]:
            sys.exit(f"this database's pgqueue has queues of its own ({others[0]}): use a throwaway database")
    adm.execute("DROP EXTENSION IF EXISTS pgqueue CASCADE")
    adm.execute("CREATE EXTENSION pgqueue")
    adm.execute("SELECT pgqueue.queue_create('q', p_group_concurrency => %s)", (1 if grouped else None,))
    adm.execute("SELECT count(*) FROM pgqueue.message_create_batch('q', "
                "ARRAY(SELECT '\\x00'::bytea FROM generate_series(1, 200)))")
    adm.execute("DELETE FROM pgqueue.message")
    adm.execute("VACUUM pgqueue.message")  # 0 rows recorded, truncated
    assert recorded(adm) == (0, 0), recorded(adm)
    a = psycopg.connect(dsn, autocommit=True)
    for i in range(10):  # session A's plans, on the near-empty table
        for _ in range(2):
            adm.execute("SELECT pgqueue.message_create('q', '\\x00'::bytea, p_group => %s)",
                        (f"w{i}" if grouped else None,))
        cycle(a, "q", 2)
    adm.execute("SELECT count(*) FROM pgqueue.message_create_batch('q', "
                "ARRAY(SELECT '\\x00'::bytea FROM generate_series(1, 60000)), "
                "p_groups => CASE WHEN %s THEN ARRAY(SELECT 'b' || i %% 30000 FROM generate_series(1, 60000) i) END)",
                (grouped,))
    assert recorded(adm)[1] == 0, f"pgqueue.message was analyzed meanwhile: {recorded(adm)}"
    b = psycopg.connect(dsn, autocommit=True)
    for name, conn in (("A (planned on the emptied table)", a), ("B (new session)", b),
                       ("A again", a), ("B again", b)):
        print(f"{kind} {name}: {timed(conn, 'q'):.3f} ms a lease + complete")
    adm.execute("ANALYZE pgqueue.message")
    print(f"{kind} A after ANALYZE: {timed(a, 'q'):.3f} ms a lease + complete")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] not in ("plain", "grouped")):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "plain")
