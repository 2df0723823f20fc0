#!/usr/bin/env bash
# The cost of the counters (issue 15, pgqueue.queue_counters) on the hot paths. Two databases on
# one server: "with" holds the plain install of revision REV, "without" the same source with the
# counting statements removed (strip_counters.py beside this file), so that the difference is the
# counters and nothing else. Each pgbench script of bench/pgbench runs against both AT THE SAME
# TIME (CLIENTS clients each, prepared statements, SECONDS seconds), ROUNDS times: on a shared,
# loaded machine both sides see the same load, and the side whose calls cost more CPU gets fewer
# of them. Prints transactions/s per round and side, and per script with/without per round and
# the median.
# Usage (as a role that may create databases, e.g. the postgres user; needs git, make, python3):
#   bench/experiments/counters/run.sh [conninfo] [seconds] [rounds] [clients] [rev]
# SCRIPTS="pgqueue_create_batch:1000:0" (script:batch:backlog ...) runs only those; AA=1 strips
# both sides (an A/A run: how far apart two identical sides come out on this machine).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
conn=${1:-}
secs=${2:-10}
rounds=${3:-5}
clients=${4:-4}
rev=${5:-HEAD}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pgc=$("$repo/scripts/find-pg-config")
declare -A plain
for v in with without; do
  mkdir -p "$work/$v"
  git -C "$repo" archive "$rev" | tar -xf - -C "$work/$v"
  if [ "$v" = without ] || [ -n "${AA:-}" ]; then python3 "$here/strip_counters.py" "$work/$v"; fi
  make -s -C "$work/$v" PG_CONFIG="$pgc" python/pgqueue/sql/pgqueue--0.4.sql >/dev/null
  plain[$v]="$work/$v/python/pgqueue/sql/pgqueue--0.4.sql"
  db="counters_$v"
  psql -q "$conn" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
  psql -q -v ON_ERROR_STOP=1 -1 "$conn dbname=$db" -f "${plain[$v]}" >/dev/null
  psql -q "$conn dbname=$db" -c "SELECT pgqueue.queue_create('bench')" >/dev/null
done
fill() {  # database count: a fresh backlog of ready messages, vacuumed
  psql -q "$conn dbname=$1" -c "TRUNCATE pgqueue.message, pgqueue.queue_size" \
    -c "SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill(convert_to(repeat('x', 100), 'UTF8'), ARRAY[$2]))" \
    -c "VACUUM ANALYZE pgqueue.message" >/dev/null
}
run() {  # script database batch -> transactions/s, written to $work/tps.<database>
  pgbench -n -M prepared -c "$clients" -j 1 -T "$secs" -D queue=bench -D batch="$3" -D aid=0 -D atok=0 \
    -f "$repo/bench/pgbench/$1.sql" "$conn dbname=$2" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p' > "$work/tps.$2"
}
scripts="${SCRIPTS:-pgqueue_create:1:0 pgqueue_dequeue:1:300000 pgqueue_lease_cycle:1:300000 pgqueue_lease_ack_fetch:1:300000 pgqueue_create_batch:1000:0 pgqueue_dequeue_batch:100:600000}"
declare -A tps
echo "revision $(git -C "$repo" rev-parse --short "$rev"), $clients clients a side, $secs s a run"
printf '%-24s %-5s %12s %12s\n' script round with without
for r in $(seq "$rounds"); do
  for spec in $scripts; do
    IFS=: read -r s batch backlog <<<"$spec"
    fill counters_with "$backlog"
    fill counters_without "$backlog"
    run "$s" counters_with "$batch" &
    run "$s" counters_without "$batch" &
    wait
    tps[$s,$r,with]=$(cat "$work/tps.counters_with")
    tps[$s,$r,without]=$(cat "$work/tps.counters_without")
    printf '%-24s %-5s %12s %12s\n' "$s" "$r" "${tps[$s,$r,with]}" "${tps[$s,$r,without]}"
  done
done
echo
printf '%-24s %s\n' script 'with/without per round -> median'
for spec in $scripts; do
  s=${spec%%:*}
  ratios=$(for r in $(seq "$rounds"); do echo "${tps[$s,$r,with]} ${tps[$s,$r,without]}" | awk '{printf "%.3f\n", $1/$2}'; done | sort -n)
  median=$(echo "$ratios" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
  printf '%-24s %s -> %s\n' "$s" "$(echo $ratios)" "$median"
done
