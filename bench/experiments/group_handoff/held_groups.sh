#!/usr/bin/env bash
# A grouped queue (group concurrency 1) under a held snapshot: delete-mode dequeues (SCRIPT, a
# script of bench/pgbench or a file: default pgqueue_dequeue; lease + complete with
# bench/experiments/group_handoff/lease_cycle.sql) at CLIENTS clients (synchronous_commit off) on MESSAGES messages (default 1,000,000: more than the run
# delivers) in G groups, for each G of GROUPS, and on a
# plain queue as the control; a REPEATABLE READ session that read another table (issue 12's case
# a) holds its snapshot from FREE seconds on, for HOLD seconds. Prints the messages delivered a
# second in 5-s windows (pgqueue.queue_counters), then, while the hold still stands, the buffers
# that the hand-off's probes of one group read: its next waiting message in
# message_group_wait_idx from the group's wait floor (the wait_floor of its message with the turn,
# pgqueue._wait_floor_next; the run places nothing below the clock, so the floor holds), as
# _message_left and message_dequeue run it, and the same probe from the group's first entry (as
# it ran before the floor); and the NOT EXISTS of a message with the turn in
# message_group_turn_idx, which the hand-off skips while the floor holds. The same after the
# hold ended and a VACUUM. LATE (seconds, default none): one more client, with a session of its
# own, starts that long into the hold and runs to its end; its transactions a second are printed
# (a session that starts during a hold probes from the bottom of the index at first).
# Usage (a server on the default socket where the role may create databases):
#   [MESSAGES=1000000] [SCRIPT=bench/experiments/group_handoff/lease_cycle.sql] [LATE=20] bench/experiments/group_handoff/held_groups.sh ["100 10000"] [FREE] [HOLD] [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
groups=${1:-100 10000} free=${2:-10} hold=${3:-50} clients=${4:-4} n=${MESSAGES:-1000000} script=${SCRIPT:-pgqueue_dequeue}
db=group_handoff_held
case $script in *.sql) script_file=$(cd "$(dirname "$script")" && pwd)/$(basename "$script") ;; *) script_file=$bench/pgbench/$script.sql ;; esac
probe() {  # the hand-off's probes of group g1, generic plans, as the functions run them
  psql -qX -d $db -P pager=off <<'SQL' | grep -E 'Buffers|actual time|^probe:' | grep -v Planning
SET plan_cache_mode = force_generic_plan;
SELECT id AS qid FROM pgqueue.queue WHERE name = 'q' \gset
SELECT coalesce(min(m.wait_floor[1]), -9223372036854775808) AS fat, coalesce(min(m.wait_floor[2]), -9223372036854775808) AS fid
  FROM pgqueue.message m WHERE m.queue_id = :qid AND m.group_key = 'g1' AND m.turn_at IS NOT NULL \gset
PREPARE w(integer, text, bigint, bigint) AS SELECT w.id FROM pgqueue.message w
 WHERE w.queue_id = $1 AND w.group_key = $2 AND w.turn_at IS NULL AND (w.dequeue_at, w.id) >= ($3, $4)
 ORDER BY w.dequeue_at, w.id LIMIT 1;
PREPARE t(integer, text) AS SELECT 1 FROM pgqueue.message t
 WHERE t.queue_id = $1 AND t.group_key = $2 AND t.turn_at IS NOT NULL LIMIT 1;
\echo probe: from the floor
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY OFF) EXECUTE w(:qid, 'g1', :fat, :fid);
\echo probe: from the first entry
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY OFF) EXECUTE w(:qid, 'g1', -9223372036854775808, -9223372036854775808);
\echo probe: the turns (skipped while the floor holds)
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY OFF) EXECUTE t(:qid, 'g1');
SQL
}
for g in $groups plain; do
  psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
  if [ "$g" = plain ]; then gc=NULL; else gc=1; fi
  psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('q', p_group_concurrency => $gc)" \
    -c "CREATE TABLE other (x integer); INSERT INTO other VALUES (1)" >/dev/null
  psql -q -X -d $db -c "SELECT count(*) FROM pgqueue.message_create_batch('q', array_fill('\x01'::bytea, ARRAY[$n]),
      p_groups => CASE WHEN '$g' <> 'plain' THEN ARRAY(SELECT 'g' || (i % ${g/plain/1}) FROM generate_series(1, $n) i) END)" >/dev/null
  psql -q -X -d $db -c "VACUUM ANALYZE pgqueue.message"
  ( sleep "$free"; psql -q -X -d $db -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM other" \
      -c "SELECT pg_sleep($hold + 3)" -c "COMMIT" >/dev/null ) &
  holder=$!
  PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c "$clients" -j 2 -T $((free + hold)) -D queue=q \
    -f "$script_file" $db >/tmp/held_groups_pgbench.log 2>&1 &
  load=$!
  if [ -n "${LATE:-}" ]; then
    ( sleep $((free + LATE)); PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c 1 -j 1 \
        -T $((hold - LATE)) -D queue=q -f "$script_file" $db >/tmp/held_groups_late.log 2>&1 ) &
    late=$!
  fi
  prev=$(psql -qAtX -d $db -c "SELECT delivered FROM pgqueue.queue_counters('q')")
  line="$g groups, delivered a second by 5-s window (hold from ${free} s):"
  for i in $(seq 1 $(( (free + hold) / 5 ))); do
    sleep 5
    cur=$(psql -qAtX -d $db -c "SELECT delivered FROM pgqueue.queue_counters('q')")
    line="$line $(( (cur - prev) / 5 ))"; prev=$cur
  done
  echo "$line"
  # (a client that finds no message, all groups' turns in flight, ends: pgbench exits 2)
  wait $load || echo "  pgbench exited $?: $(grep -m1 -iE 'error|abort' /tmp/held_groups_pgbench.log)"
  if [ -n "${LATE:-}" ]; then
    wait $late || echo "  the late client's pgbench exited $?"
    echo "  a client started ${LATE} s into the hold: $(grep -m1 -oE 'number of transactions actually processed: [0-9]+' /tmp/held_groups_late.log | grep -oE '[0-9]+$') transactions in $((hold - LATE)) s"
  fi
  if [ "$g" != plain ]; then
    echo "  probes of group g1 under the hold:"; probe | sed 's/^/    /'
  fi
  wait $holder
  if [ "$g" != plain ]; then
    psql -q -X -d $db -c "VACUUM pgqueue.message"
    echo "  after the hold and a VACUUM:"; probe | sed 's/^/    /'
  fi
done
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
