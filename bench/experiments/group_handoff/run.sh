#!/usr/bin/env bash
# What a grouped delete-mode dequeue's hand-off costs by itself (issue 14's "10,000 groups >= 0.8x
# the same queue without groups"): three bare designs (setup.sql: flat, a group table, pgqueue
# 0.4's message turn; no pgqueue code) and pgqueue's own plain and grouped queues (group
# concurrency 1, 10,000 groups), pgbench at CLIENTS clients, synchronous_commit off (as in the
# bench's groups section), each round from a fresh setup (300,000 messages a queue, vacuumed).
# The order of the five rotates every round. Prints transactions/s per round and the medians' ratios against the flat queue of each kind.
# Usage (a server on the default socket where the role may create databases):
#   bench/experiments/group_handoff/run.sh [ROUNDS] [SECONDS] [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
rounds=${1:-3} secs=${2:-8} clients=${3:-4}
db=group_handoff
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('plain')" \
  -c "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)" >/dev/null
export PGOPTIONS="-c synchronous_commit=off"
tps() {  # pgbench script [defines...] -> transactions/s
  local script=$1; shift
  pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" "$@" -f "$script" $db 2>/dev/null \
    | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
declare -A all
for r in $(seq "$rounds"); do
  psql -q -X -d $db -f "$here/setup.sql" >/dev/null 2>&1
  psql -q -X -d $db -c "TRUNCATE pgqueue.message, pgqueue.queue_size, pgqueue.message_group_lock"
  for q in plain grouped; do psql -q -X -d $db -v queue=$q -f "$here/topup.sql" >/dev/null; done
  line="round $r:"
  keys=(flat group_table message_turn pgqueue_plain pgqueue_grouped)
  keys=("${keys[@]:$(( (r - 1) % 5 ))}" "${keys[@]:0:$(( (r - 1) % 5 ))}")  # the order rotates
  for k in "${keys[@]}"; do
    psql -q -X -d $db -c "VACUUM gh.message" -c "VACUUM gh.grp" -c "VACUUM pgqueue.message"
    case $k in
      pgqueue_plain) t=$(tps "$bench/pgbench/pgqueue_dequeue.sql" -D queue=plain) ;;
      pgqueue_grouped) t=$(tps "$bench/pgbench/pgqueue_dequeue.sql" -D queue=grouped) ;;
      *) t=$(tps "$here/$k.sql") ;;
    esac
    all[$k]="${all[$k]:-} $t"
    line="$line $k $t"
  done
  echo "$line"
done
. "$here/median.sh"
declare -A med
for k in flat group_table message_turn pgqueue_plain pgqueue_grouped; do med[$k]=$(echo "${all[$k]}" | median); done
awk -v f="${med[flat]}" -v gt="${med[group_table]}" -v mt="${med[message_turn]}" \
    -v pp="${med[pgqueue_plain]}" -v pg="${med[pgqueue_grouped]}" 'BEGIN {
  printf "medians: flat %.0f, group table %.0f (%.2fx flat), message turn %.0f (%.2fx flat); ", f, gt, gt / f, mt, mt / f
  printf "pgqueue plain %.0f, grouped %.0f (%.2fx plain)\n", pp, pg, pg / pp }'
