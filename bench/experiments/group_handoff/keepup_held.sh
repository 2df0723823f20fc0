#!/usr/bin/env bash
# A grouped queue (group concurrency 1, G groups; 0: a queue without groups) that its consumers keep up with, under a held
# snapshot: one producer client enqueues RATE messages a second into random groups (pgbench -R),
# CLIENTS consumers take one message a call in delete mode, so that most groups hold one message
# or none and a group's hand-off usually finds nothing waiting. A REPEATABLE READ session that
# read another table (issue 12's case a) holds its snapshot from FREE seconds on, for HOLD seconds.
# Prints messages created and delivered a second in 5-s windows (pgqueue.queue_counters: enqueued, delivered), and the
# producer's and consumers' pgbench progress every 5 s.
# Usage (a server on the default socket where the role may create databases):
#   bench/experiments/group_handoff/keepup_held.sh [GROUPS] [RATE] [FREE] [HOLD] [CLIENTS]
set -euo pipefail
groups=${1:-10} rate=${2:-1000} free=${3:-10} hold=${4:-40} clients=${5:-2}
db=group_keepup_held
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$groups" = 0 ]; then  # GROUPS 0: a queue without groups, as the control
  gc=NULL
  printf '%s\n' "SELECT pgqueue.message_create(:queue, '\x01'::bytea);" > "$tmp/produce.sql"
else
  gc=1
  printf '%s\n' "\set g random(1, $groups)" \
    "SELECT pgqueue.message_create(:queue, '\x01'::bytea, p_group => 'g' || :g);" > "$tmp/produce.sql"
fi
cat > "$tmp/consume.sql" <<'SQL'
SELECT id FROM pgqueue.message_dequeue(:queue, 1, 0);
SQL
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('q', p_group_concurrency => $gc)" \
  -c "CREATE TABLE other (x integer); INSERT INTO other VALUES (1)" >/dev/null
( sleep "$free"; psql -q -X -d $db -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM other" \
    -c "SELECT pg_sleep($hold)" -c "COMMIT" >/dev/null ) &
holder=$!
total=$((free + hold + 10))
PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c 1 -j 1 -R "$rate" -P 5 -T $total -D queue=q \
  -f "$tmp/produce.sql" $db > "$tmp/produce.log" 2>&1 &
prod=$!
PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c "$clients" -j "$clients" -P 5 -T $total -D queue=q \
  -f "$tmp/consume.sql" $db > "$tmp/consume.log" 2>&1 &
cons=$!
read -r c0 d0 < <(psql -qAtX -F ' ' -d $db -c "SELECT enqueued, delivered FROM pgqueue.queue_counters('q')")
cl="created a second by 5-s window (hold from $free s to $((free + hold)) s):"
dl="delivered a second:"
for i in $(seq 1 $((total / 5))); do
  sleep 5
  read -r c1 d1 < <(psql -qAtX -F ' ' -d $db -c "SELECT enqueued, delivered FROM pgqueue.queue_counters('q')")
  cl="$cl $(( (c1 - c0) / 5 ))"; dl="$dl $(( (d1 - d0) / 5 ))"; c0=$c1; d0=$d1
done
wait $prod || true; wait $cons || true; wait $holder
echo "$groups groups, $rate a second offered, $clients consumers"
echo "  $cl"; echo "  $dl"
echo "  producer, pgbench's progress (latency counts the wait behind its schedule):"
grep -E '^progress' "$tmp/produce.log" | sed 's/^/    /'
echo "  consumers, pgbench's progress (calls, most of them finding nothing):"
grep -E '^progress' "$tmp/consume.log" | sed 's/^/    /'
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
