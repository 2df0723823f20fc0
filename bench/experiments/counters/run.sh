#!/usr/bin/env bash
# The cost of the counters (issue 15, pgqueue.queue_counters) on the hot paths: the plain
# install scripts of two revisions, each in its own database on one server, and each pgbench
# script of bench/pgbench run against both in turn (the order swapped every round), ROUNDS
# times, CLIENTS clients, prepared statements. "with" is the revision WITH (default: the commit
# that added the counters; "tree" for the working tree), "without" is WITHOUT (default: its
# parent). Prints transactions/s per run and, per script, with/without per round and the median.
# Usage (as a role that may create databases, e.g. the postgres user; needs make and git):
#   bench/experiments/counters/run.sh [conninfo] [seconds] [rounds] [clients] [with] [without]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../../.." && pwd)
conn=${1:-}
secs=${2:-8}
rounds=${3:-3}
clients=${4:-8}
with=${5:-$(git -C "$repo" log --format=%H -1 --grep='^Counters per queue')}
without=${6:-$with^}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pgc=$("$repo/scripts/find-pg-config")
build() {  # revision|tree dir -> plain install script of that source
  mkdir -p "$2"
  if [ "$1" = tree ]; then
    (cd "$repo" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$2"
  else
    git -C "$repo" archive "$1" | tar -xf - -C "$2"
  fi
  make -s -C "$2" PG_CONFIG="$pgc" python/pgqueue/sql/pgqueue--0.4.sql >/dev/null
  echo "$2/python/pgqueue/sql/pgqueue--0.4.sql"
}
declare -A plain
plain[without]=$(build "$without" "$work/without")
plain[with]=$(build "$with" "$work/with")
for v in without with; do
  db="counters_$v"
  psql -q "$conn" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  psql -q -v ON_ERROR_STOP=1 -1 "$conn dbname=$db" -f "${plain[$v]}" >/dev/null
  psql -q "$conn dbname=$db" -c "SELECT pgqueue.queue_create('bench')" >/dev/null
done
fill() {  # database count: a fresh backlog of ready messages, vacuumed
  psql -q "$conn dbname=$1" -c "TRUNCATE pgqueue.message, pgqueue.queue_size" \
    -c "SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill(convert_to(repeat('x', 100), 'UTF8'), ARRAY[$2]))" \
    -c "VACUUM ANALYZE pgqueue.message" >/dev/null
}
run() {  # script database -> transactions/s
  pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -D queue=bench -D batch="$3" \
    -f "$repo/bench/pgbench/$1.sql" "$conn dbname=$2" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
scripts="pgqueue_create:1:0 pgqueue_dequeue:1:300000 pgqueue_lease_cycle:1:300000 pgqueue_create_batch:1000:0 pgqueue_dequeue_batch:100:600000"
declare -A tps
printf '%-22s %-5s %-8s %s\n' script round version 'transactions/s'
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then order="without with"; else order="with without"; fi
  for spec in $scripts; do
    IFS=: read -r s batch backlog <<<"$spec"
    for v in $order; do
      db="counters_$v"
      fill "$db" "$backlog"
      tps[$s,$r,$v]=$(run "$s" "$db" "$batch")
      printf '%-22s %-5s %-8s %s\n' "$s" "$r" "$v" "${tps[$s,$r,$v]}"
    done
  done
done
echo
printf '%-22s %s\n' script 'with/without per round -> median'
for spec in $scripts; do
  s=${spec%%:*}
  ratios=$(for r in $(seq "$rounds"); do echo "${tps[$s,$r,with]} ${tps[$s,$r,without]}" | awk '{printf "%.3f\n", $1/$2}'; done | sort -n)
  median=$(echo "$ratios" | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
  printf '%-22s %s -> %s\n' "$s" "$(echo $ratios)" "$median"
done
