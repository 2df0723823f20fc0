#!/usr/bin/env bash
# Does a delete-mode dequeue gain from running the take and the DELETE as one statement? Two
# databases PREFIX_a and PREFIX_b on the local server, each with pgqueue, a queue 'bench' of
# 300,000 messages and a function proto.deq(queue id): separate.sql (A: the take, then the
# DELETE) or merged.sql (B: DELETE ... WHERE id = (the take)). Then, one session per database
# pinned to one CPU, server CPU a call in ROUNDS paired rounds of N calls after a VACUUM
# (bench/experiments/placed_low/pairs.py), twice; then 15 pgbench clients, synchronous_commit
# off, ROUNDS alternated rounds of 6 s, each after a top-up to 200,000 messages and a VACUUM.
# Usage: bench/experiments/one_statement_take/run.sh [PREFIX] [N] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
prefix=${1:-ost} n=${2:-1500} rounds=${3:-8}
for v in a b; do
  psql -q -d postgres -c "DROP DATABASE IF EXISTS ${prefix}_$v" -c "CREATE DATABASE ${prefix}_$v"
  psql -q -d "${prefix}_$v" -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('bench')" \
    -c "SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill('\x0102'::bytea, ARRAY[300000]))" \
    -c "VACUUM ANALYZE pgqueue.message" -c "CREATE SCHEMA proto" >/dev/null
done
psql -q -d "${prefix}_a" -f "$here/separate.sql"
psql -q -d "${prefix}_b" -f "$here/merged.sql"
qid=$(psql -qAt -d "${prefix}_a" -c "SELECT id FROM pgqueue.queue WHERE name = 'bench'")
[ "$qid" = "$(psql -qAt -d "${prefix}_b" -c "SELECT id FROM pgqueue.queue WHERE name = 'bench'")" ]
cd "$repo/bench/experiments/placed_low"
for _ in 1 2; do
  for v in a b; do psql -q -d "${prefix}_$v" -c "VACUUM pgqueue.message"; done
  "$repo/.venv/bin/python" pairs.py "$n" "$rounds" "proto.deq($qid)" "${prefix}_a" "${prefix}_b" | tail -1
done
script=$(mktemp)
trap 'rm -f "$script"' EXIT
echo "SELECT * FROM proto.deq($qid);" > "$script"
run() {
  psql -qAt -d "$1" -c "SELECT count(*) FROM pgqueue.message_create_batch('bench',
      array_fill('\x01'::bytea, ARRAY[300000])) WHERE (SELECT count(*) < 200000 FROM pgqueue.message)" >/dev/null
  psql -q -d "$1" -c "VACUUM pgqueue.message"
  PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c 15 -j 2 -T 6 -f "$script" "$1" 2>/dev/null \
    | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
echo "15 clients, transactions/s: A B B/A"
for i in $(seq "$rounds"); do
  if [ $((i % 2)) = 1 ]; then ta=$(run "${prefix}_a"); tb=$(run "${prefix}_b"); else tb=$(run "${prefix}_b"); ta=$(run "${prefix}_a"); fi
  echo "$ta $tb $(echo "scale=3; $tb / $ta" | bc)"
done
