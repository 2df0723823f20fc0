"""Why does case (b) cost more than (a) only with the clients running (session 32, visit_cost.sh)?

A guess (session 63): under (b) every snapshot's xmin is the held xid, so each dead row version a
walk visits has its xmax checked against the snapshot's list of running xids
(XidInMVCCSnapshot), where under (a) the xmax is below the snapshot's xmin and the check returns
at once; the list is as long as the transactions running when the snapshot is taken. So: one
session's walk of the ready probe from the bottom over N dead entries (median of 20 walks in one
DO block) under the hold of CASE, alternately with nothing else running and with K more idle
sessions holding an xid, opened after the N dequeues (under (a) the dead versions' xids then stay
below every snapshot's xmin), ROUNDS times, in one fresh database.

usage: .venv/bin/python bench/experiments/held_pgbench/xip_cost.py CONNINFO CASE K [N [ROUNDS]]
e.g.   .venv/bin/python bench/experiments/held_pgbench/xip_cost.py "host=/var/run/postgresql" b 80 20000 4
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

import psycopg
from psycopg.conninfo import make_conninfo

WALK = """
DO $$
DECLARE t0 timestamptz; v bigint; d float8[] := '{}'; q integer := (SELECT id FROM pgqueue.queue WHERE name = 'q');
BEGIN
  SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off;
  FOR i IN 1 .. 20 LOOP
    t0 := clock_timestamp();
    SELECT m.id INTO v FROM pgqueue.message m WHERE m.queue_id = q AND m.locked_until IS NULL
     ORDER BY m.dequeue_at, m.id LIMIT 1;
    d := d || extract(epoch FROM clock_timestamp() - t0) * 1000;
  END LOOP;
  PERFORM set_config('xip.ms', (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(d) x)::text, false);
END $$"""


def main() -> None:
    conninfo, case, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 20000
    rounds = int(sys.argv[5]) if len(sys.argv) > 5 else 4
    with psycopg.connect(make_conninfo(conninfo, dbname="postgres"), autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS xipcost WITH (FORCE)")
        admin.execute("CREATE DATABASE xipcost")
    db = make_conninfo(conninfo, dbname="xipcost")
    with psycopg.connect(db, autocommit=True) as c:
        c.execute("CREATE EXTENSION pgqueue")
        c.execute("SELECT pgqueue.queue_create('q')")
        c.execute("CREATE TABLE other AS SELECT 1 AS x")
        c.execute("SELECT count(*) FROM pgqueue.message_create_batch('q', array_fill('\\x00'::bytea, ARRAY[100000]))")
        c.execute("VACUUM ANALYZE")
    holder = psycopg.connect(db)
    if case == "a":
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM other")
    else:
        holder.execute("SELECT txid_current()")
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as script:
        script.write("SELECT * FROM pgqueue.message_dequeue('q', 1, 0);\n")
        script.flush()
        subprocess.run(["pgbench", "-n", "-f", script.name, "-c", "2", "-j", "2", "-t", str(n // 2), db],
                       check=True, capture_output=True)
    walker = psycopg.connect(db, autocommit=True)

    def walk() -> float:
        walker.execute(WALK)
        row = walker.execute("SELECT current_setting('xip.ms')::float8").fetchone()
        assert row is not None
        return float(row[0])

    def running() -> int:
        row = walker.execute("SELECT count(backend_xid) FROM pg_stat_activity WHERE datname = 'xipcost'").fetchone()
        assert row is not None
        return int(row[0])

    walk()  # sets the hint bits of the walk's versions
    for r in range(rounds):
        base = walk()
        others = [psycopg.connect(db) for _ in range(k)]
        for o in others:
            o.execute("SELECT txid_current()")
        xids = running()
        more = walk()
        for o in others:
            o.close()
        print(f"case {case}, round {r + 1}: {base:.3f} ms with {1 if case == 'b' else 0} xid running, "
              f"{more:.3f} ms with {xids} ({more / base:.2f}x)", flush=True)
    walker.close()
    holder.close()


if __name__ == "__main__":
    main()
