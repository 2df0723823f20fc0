#!/usr/bin/env bash
# Single calls of pgqueue 0.3 and of the current version side by side (issue 12: "single-call
# throughput no worse than 0.3 in the same run"): two databases on one server, one with
# CREATE EXTENSION pgqueue VERSION '0.3', one with the default version; each pgbench script of
# bench/pgbench runs against both in turn, ROUNDS times, 15 clients, durable commits.
# Usage (as a role that may create databases, e.g. the postgres user):
#   bench/experiments/vs_0_3/run.sh [conninfo] [seconds] [rounds]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
conn=${1:-}
secs=${2:-8}
rounds=${3:-3}
for v in 0.3 current; do
  db="vs03_${v/./_}"
  psql -q "$conn" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
  if [ "$v" = 0.3 ]; then ext="CREATE EXTENSION pgqueue VERSION '0.3'"; else ext="CREATE EXTENSION pgqueue"; fi
  psql -q "$conn dbname=$db" -c "$ext" -c "SELECT pgqueue.queue_create('bench')" >/dev/null
done
fill() {  # a fresh backlog of 200,000 ready messages, vacuumed
  psql -q "$conn dbname=$1" -c "TRUNCATE pgqueue.message, pgqueue.queue_size" \
    -c "SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill(convert_to(repeat('x', 100), 'UTF8'), ARRAY[200000]))" \
    -c "VACUUM ANALYZE pgqueue.message" >/dev/null
}
run() {  # script database -> messages/s (transactions/s)
  pgbench -n -M prepared -c 15 -j 2 -T "$secs" -D queue=bench -D aid=0 -D atok=0 \
    -f "$here/pgbench/$1.sql" "$conn dbname=$2" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
printf '%-22s %-8s %s\n' script version 'transactions/s'
for r in $(seq "$rounds"); do
  for s in pgqueue_create pgqueue_dequeue pgqueue_lease_cycle; do
    for v in 0.3 current; do
      db="vs03_${v/./_}"
      fill "$db"
      printf '%-22s %-8s %s\n' "$s" "$v" "$(run "$s" "$db")"
    done
  done
done
