#!/usr/bin/env bash
# A/B of the group functions on a grouped queue its consumers keep up with, without a hold: one
# unpaced producer client enqueuing into GROUPS random groups (group concurrency 1) and two
# delete-mode consumer clients, SECONDS a round, synchronous_commit off. A is the functions as at
# git revision REV, B as in the tree (message_dequeue, message_complete, pgqueue._message_left,
# pgqueue._message_group_next, pgqueue._message_group_room; FUNCS: others of
# extension/src/functions/messages), installed in turn with CREATE OR REPLACE over the tree's
# extension (so both run on the tree's tables and indexes); the order of A and B alternates by
# round. Prints the producer's transactions a second and the messages delivered a second
# (pgqueue.queue_counters) of A and B, and B/A of the producer's, for each round.
# (Session 83 measured the groups' floors with it: docs/performance.md, "A session's floor of a
# group's turn keys".)
# Usage (a server on the default socket where the role may create databases):
#   [FUNCS=...] bench/experiments/group_handoff/ab_keepup.sh REV [ROUNDS] [SECONDS] [GROUPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
rev=$1 rounds=${2:-8} secs=${3:-8} groups=${4:-10}
db=group_keepup_ab
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/bench/experiments/group_handoff/ab_sql.sh"
# shellcheck disable=SC2086  # (FUNCS: names split on spaces)
ab_sql "$root" "$rev" "$tmp" ${FUNCS:-message_dequeue message_complete _message_left _message_group_next _message_group_room}
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('q', p_group_concurrency => 1)" >/dev/null
printf '%s\n' "\set g random(1, $groups)" "SELECT pgqueue.message_create('q', '\x01'::bytea, p_group => 'g' || :g);" > "$tmp/produce.sql"
echo "SELECT id FROM pgqueue.message_dequeue('q', 1, 0);" > "$tmp/consume.sql"
echo "$groups groups, one unpaced producer, two delete-mode consumers, $secs-s rounds; A = $rev, B = the tree"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for v in $order; do
    psql -q -X -d $db -f "$tmp/$v.sql" >/dev/null
    d0=$(psql -qAtX -d $db -c "SELECT delivered FROM pgqueue.queue_counters('q')")
    PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c 2 -j 2 -T "$secs" -f "$tmp/consume.sql" $db > "$tmp/consume.log" 2>&1 &
    cons=$!
    tps=$(PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c 1 -j 1 -T "$secs" -f "$tmp/produce.sql" $db 2>&1 \
          | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    wait "$cons" || echo "round $r $v: the consumers' pgbench failed: $(tail -1 "$tmp/consume.log")" >&2
    [ -n "$tps" ] || { echo "round $r $v: the producer's pgbench failed" >&2; tps=0; }
    d1=$(psql -qAtX -d $db -c "SELECT delivered FROM pgqueue.queue_counters('q')")
    printf -v "P$v" '%s' "$tps"; printf -v "D$v" '%s' "$(( (d1 - d0) / secs ))"
  done
  echo "round $r: producer A $PA B $PB B/A $(awk -v a="$PA" -v b="$PB" 'BEGIN { printf "%.3f", (a > 0 ? b / a : 0) }'); delivered/s A $DA B $DB"
done
