#!/usr/bin/env bash
# Is a visit to a dead entry dearer under issue 12's case (b) than under (a)? One session's walk
# of the ready probe from the bottom over N dead entries, timed 20 times in one DO block (median),
# with the hold of CASE running: a (REPEATABLE READ that read another table) or b (idle in
# transaction with an xid). A database visit is made afresh: 100,000 messages, vacuumed; the
# hold starts; N delete-mode dequeues by 2 pgbench clients; then the walks (session 32).
# LOAD=1 (environment): the walks run while 5 pgbench producers and 10 delete-mode consumers work
# on another queue of the database (each walk's region stays the same).
# usage: [LOAD=1] visit_cost.sh CONNINFO CASE [N]   e.g. visit_cost.sh "host=/var/run/postgresql" b 20000
set -euo pipefail
CONN=${1:?conninfo}; CASE=${2:?case a or b}; N=${3:-20000}
P() { local db=$1; shift; psql "$CONN dbname=$db" -qX -v ON_ERROR_STOP=1 "$@"; }
P postgres -c "DROP DATABASE IF EXISTS visit WITH (FORCE)" -c "CREATE DATABASE visit" >/dev/null 2>&1
P visit >/dev/null <<'SQL'
CREATE EXTENSION pgqueue;
SELECT pgqueue.queue_create('q');
SELECT pgqueue.queue_create('load');
SELECT count(*) FROM pgqueue.message_create_batch('load', array_fill('\x00'::bytea, ARRAY[200000]));
CREATE TABLE other AS SELECT 1 AS x;
SELECT count(*) FROM pgqueue.message_create_batch('q', array_fill('\x00'::bytea, ARRAY[100000]));
VACUUM ANALYZE;
SQL
case "$CASE" in
  a) HOLD="BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM other;" ;;
  b) HOLD="BEGIN; SELECT txid_current();" ;;
  *) echo "unknown case $CASE" >&2; exit 2 ;;
esac
( echo "$HOLD"; sleep 40; echo "COMMIT;" ) | P visit >/dev/null &
sleep 1
w=$(mktemp); echo "SELECT * FROM pgqueue.message_dequeue('q', 1, 0);" > "$w"
pgbench -n -f "$w" -c 2 -j 2 -t $((N / 2)) "$CONN dbname=visit" >/dev/null 2>&1
rm -f "$w"
if [ "${LOAD:-0}" = 1 ]; then
  d=$(mktemp -d)
  echo "SELECT pgqueue.message_create('load', '\\x00'::bytea);" > "$d/p.sql"
  echo "SELECT * FROM pgqueue.message_dequeue('load', 1, 0);" > "$d/c.sql"
  PGOPTIONS="-c synchronous_commit=off" pgbench -n -f "$d/p.sql" -c 5 -j 1 -R 5000 -T 15 "$CONN dbname=visit" >/dev/null 2>&1 &
  PGOPTIONS="-c synchronous_commit=off" pgbench -n -f "$d/c.sql" -c 10 -j 2 -T 15 "$CONN dbname=visit" >/dev/null 2>&1 &
  sleep 5
fi
P visit -v case="$CASE" <<'SQL'
SET enable_seqscan = off; SET enable_bitmapscan = off; SET visit.hold_case = :'case';
EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, COSTS OFF)
SELECT m.id FROM pgqueue.message m WHERE m.queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'q')
   AND m.locked_until IS NULL ORDER BY m.dequeue_at, m.id LIMIT 1;
DO $$
DECLARE t0 timestamptz; v bigint; d float8[] := '{}'; q integer := (SELECT id FROM pgqueue.queue WHERE name = 'q');
BEGIN
  FOR i IN 1 .. 20 LOOP
    t0 := clock_timestamp();
    SELECT m.id INTO v FROM pgqueue.message m WHERE m.queue_id = q AND m.locked_until IS NULL
     ORDER BY m.dequeue_at, m.id LIMIT 1;
    d := d || extract(epoch FROM clock_timestamp() - t0) * 1000;
  END LOOP;
  RAISE NOTICE 'case %: a walk from the bottom, median of 20: % ms', current_setting('visit.hold_case'),
               round((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM unnest(d) x)::numeric, 3);
END $$;
SQL
wait
