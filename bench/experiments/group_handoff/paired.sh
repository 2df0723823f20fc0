#!/usr/bin/env bash
# Issue 14's "10,000 groups >= 0.8x the same queue without groups" in paired rounds: pgqueue's
# plain queue and its grouped queue (group concurrency 1, 10,000 groups), each topped up to
# 300,000 messages and vacuumed before each run (topup.sql), pgbench at CLIENTS clients,
# synchronous_commit off (as in the bench's groups section), the order alternating every round.
# SCRIPT (default pgqueue_dequeue, delete mode; pgqueue_lease_cycle for lease + complete) names the
# script in bench/pgbench/ (PGBENCH_VARS: more -D options it needs, as in ab_patch.sh). Prints
# each round's rates and ratio, then the median ratio of the rounds and the ratio of the medians
# (the bench's statistic, over its 3 rounds).
# Usage (a server on the default socket where the role may create databases):
#   [SCRIPT=pgqueue_lease_cycle] bench/experiments/group_handoff/paired.sh [ROUNDS] [SECONDS] [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
rounds=${1:-8} secs=${2:-5} clients=${3:-4}
script=${SCRIPT:-pgqueue_dequeue}
db=group_handoff_paired
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('plain')" \
  -c "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)" >/dev/null
export PGOPTIONS="-c synchronous_commit=off"
run() {  # queue -> transactions/s of a run on that queue, topped up
  psql -q -X -d $db -v queue="$1" -f "$here/topup.sql" >/dev/null
  # shellcheck disable=SC2086  # PGBENCH_VARS: more -D options, split on spaces
  pgbench -n -M prepared -c "$clients" -j "$(( clients < 2 ? 1 : 2 ))" -T "$secs" -D queue="$1" ${PGBENCH_VARS:-} \
    -f "$bench/pgbench/$script.sql" $db 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
run plain 3 >/dev/null  # a warm-up run, not counted
plain="" grouped="" ratios=""
for r in $(seq "$rounds"); do
  order="plain grouped"; [ $((r % 2)) = 0 ] && order="grouped plain"
  declare -A t
  for q in $order; do t[$q]=$(run $q); done
  ratio=$(awk -v g="${t[grouped]}" -v p="${t[plain]}" 'BEGIN { printf "%.3f", g / p }')
  echo "round $r ($order): plain ${t[plain]}, grouped ${t[grouped]}, ratio $ratio"
  plain="$plain ${t[plain]}" grouped="$grouped ${t[grouped]}" ratios="$ratios $ratio"
done
. "$here/median.sh"
mp=$(echo "$plain" | median) mg=$(echo "$grouped" | median)
echo "$script: median ratio of the rounds $(echo "$ratios" | median);" \
     "medians plain $mp, grouped $mg ($(awk -v g="$mg" -v p="$mp" 'BEGIN { printf "%.3f", g / p }'))"
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
