#!/usr/bin/env bash
# What a probe from the bottom of each index costs once a case-(b) hold has ended: the walk every
# session makes when a transaction it set aside ends (pgqueue._message_take's restart from R).
# A queue of N + 20000 messages; a session idle in transaction with an xid; N deliveries by 4
# pgbench clients (MODE lease: the lease cycle, dequeue with a lease then complete; delete:
# delete mode); the idle session commits; then the ready probe and the expired-lease probe from
# the bottom, three times each (EXPLAIN ANALYZE, BUFFERS): the first walk visits the heap for the
# entries of the hold's messages, the next ones skip the entries it marked dead.
# usage: end_walk.sh MODE N [CONNINFO]   e.g. end_walk.sh lease 40000 "host=/var/run/postgresql"
# (a database "walk" is made afresh; the extension must be installed on the server)
set -euo pipefail
MODE=${1:?lease or delete}; N=${2:?deliveries}; C=${3:-host=/var/run/postgresql}
HERE=$(cd "$(dirname "$0")/../.." && pwd)  # bench/
psql "$C dbname=postgres" -Xqc "DROP DATABASE IF EXISTS walk" -c "CREATE DATABASE walk"
psql "$C dbname=walk" -Xq >/dev/null <<SQL
CREATE EXTENSION pgqueue;
SELECT pgqueue.queue_create('q');
SELECT count(*) FROM pgqueue.message_create_batch('q', (SELECT array_agg('\x01'::bytea) FROM generate_series(1, $N + 20000)));
VACUUM ANALYZE pgqueue.message;
SQL
FLAG=$(mktemp)
( psql "$C dbname=walk" -Xq <<SQL
BEGIN; SELECT txid_current();
\! while [ -e $FLAG ]; do sleep 0.2; done
COMMIT;
SQL
) >/dev/null &
sleep 1
case "$MODE" in
  lease) S=$HERE/pgbench/pgqueue_lease_cycle.sql ;;
  delete) S=$HERE/pgbench/pgqueue_dequeue.sql ;;
  *) echo "MODE: lease or delete" >&2; exit 2 ;;
esac
pgbench "$C dbname=walk" -n -M prepared -c 4 -j 2 -t $((N / 4)) -D queue=q -f "$S" 2>&1 | grep -E 'tps'
rm "$FLAG"; wait
for i in 1 2 3; do
  echo "== walk $i: the ready probe, then the expired-lease probe, from the bottom"
  psql "$C dbname=walk" -XAt <<'SQL' | grep -E '^Limit|^  Buffers|Execution'
SET enable_seqscan = off; SET enable_bitmapscan = off;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT m.dequeue_at, m.id FROM pgqueue.message m
 WHERE m.queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'q') AND m.locked_until IS NULL
   AND m.dequeue_at <= pgqueue.now_ms() ORDER BY m.dequeue_at, m.id LIMIT 1;
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT m.locked_until, m.id FROM pgqueue.message m
 WHERE m.queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'q') AND m.locked_until IS NOT NULL
   AND m.locked_until <= pgqueue.now_ms() + 40000 ORDER BY m.locked_until, m.id LIMIT 1;
SQL
done
