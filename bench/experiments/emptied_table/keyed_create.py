"""Keyed creates in a producer session planned while the key tables were recorded empty.

Two queues with a key window of an hour, one of them capped (max_size): their kept keys are
emptied and both tables VACUUMed (0 rows recorded), a session (A) makes its plans with ten keyed
creates on each queue, then 60,000 keys within their windows arrive on each queue; a new
session (B) warms up the same way. Both then make 200 keyed creates on each queue, three rounds,
and the script prints ms a create. Before session 51 A's key look-up walked
message_key_until_idx (every kept key of the queue) and, on the capped queue, the key check
before asking for room scanned both tables.

Usage (a throwaway database with autovacuum off; the script drops and re-creates the extension
in it, and refuses a server with autovacuum on or a database whose pgqueue has queues of its
own):

    python bench/experiments/emptied_table/keyed_create.py "host=/tmp/x port=5493 dbname=postgres"
"""

from __future__ import annotations

import sys
import time

import psycopg

CREATES = 200
QUEUES = {"kq": "uncapped", "cq": "capped"}


def creates(conn: psycopg.Connection[tuple[object, ...]], queue: str, prefix: str, n: int) -> None:
    for i in range(n):
        conn.execute("SELECT pgqueue.message_create(%s, '\\x00'::bytea, p_key => %s)", (queue, f"{prefix}{i}"))


def main(dsn: str) -> None:
    adm = psycopg.connect(dsn, autocommit=True)
    if adm.execute("SELECT current_setting('autovacuum')").fetchone() != ("off",):
        sys.exit("autovacuum is on: an ANALYZE meanwhile would re-plan session A (set autovacuum = off)")
    if adm.execute("SELECT 1 FROM pg_extension WHERE extname = 'pgqueue'").fetchone():
        others = adm.execute("SELECT name FROM pgqueue.queue WHERE name <> ALL (%s)",
                             (["default", *QUEUES],)).fetchall()
        if others:
            sys.exit(f"this database's pgqueue has queues of its own ({others[0][0]}): use a throwaway database")
    adm.execute("DROP EXTENSION IF EXISTS pgqueue CASCADE")
    adm.execute("CREATE EXTENSION pgqueue")
    adm.execute("SELECT pgqueue.queue_create('kq', p_key_window_ms => 3600000)")
    adm.execute("SELECT pgqueue.queue_create('cq', p_key_window_ms => 3600000, p_max_size => 10000000)")
    # a queue that drained: its keys had been kept, their windows ended; VACUUM records both tables empty
    adm.execute("INSERT INTO pgqueue.message_key SELECT q.id, 'old' || g, g, 0 FROM pgqueue.queue q, "
                "generate_series(1, 60000) g WHERE q.name IN ('kq', 'cq')")
    adm.execute("DELETE FROM pgqueue.message_key")
    adm.execute("VACUUM pgqueue.message_key, pgqueue.message")
    a = psycopg.connect(dsn, autocommit=True)  # plans its look-ups now, on the emptied tables
    for q in QUEUES:
        creates(a, q, "warm-a", 10)
    # the queues refill: 60,000 keys within their windows each (completed keyed messages)
    adm.execute("INSERT INTO pgqueue.message_key SELECT q.id, 'k' || g, g, pgqueue.now_ms() + 3600000 "
                "FROM pgqueue.queue q, generate_series(1, 60000) g WHERE q.name IN ('kq', 'cq')")
    b = psycopg.connect(dsn, autocommit=True)
    for q in QUEUES:
        creates(b, q, "warm-b", 10)
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(3):
        for name, conn in (("A (planned on the emptied tables)", a), ("B (new session)", b)):
            for q in QUEUES:
                start = time.perf_counter()
                creates(conn, q, f"r{r}{name[0]}", CREATES)
                times.setdefault((name, q), []).append((time.perf_counter() - start) * 1e3 / CREATES)
    for (name, q), ts in times.items():
        print(f"{QUEUES[q]} keyed create, {name}: " + " / ".join(f"{t:.2f}" for t in ts) + " ms a create")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
