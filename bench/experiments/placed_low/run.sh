#!/usr/bin/env bash
# The placement check (triggers message_placed_low) before and after a change, side by side:
# database pl_a runs REF's trigger and REF's versions of the functions that changed since REF
# (extension/src/functions, installed over the current build with CREATE OR REPLACE), database
# pl_b the current build as installed. Then, alternated ROUNDS times:
#   - pgbench, 15 clients, synchronous_commit off, SECS seconds: message_create (an empty queue
#     each round) and the lease cycle (message_dequeue with a lease + message_complete, both
#     topped up to 300,000 messages and vacuumed before each round);
#   - one session pinned to CPU 1, a COMMIT after each call: server CPU per message_create and
#     per lease-mode message_dequeue (cpu_loop.py: utime + stime of the backend).
# Usage (root, a server on the default socket, the role may create databases, the current build
# installed, run from the repository): bench/experiments/placed_low/run.sh REF [ROUNDS] [SECS]
# e.g. bench/experiments/placed_low/run.sh dd8d20e 6 5
set -euo pipefail
here=$(cd "$(dirname "$0")/../../.." && pwd)
ref=$1 rounds=${2:-6} secs=${3:-5}
py=${PYTHON:-$here/.venv/bin/python}
cd "$here"
for d in pl_a pl_b; do
  psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $d" -c "CREATE DATABASE $d"
  psql -q -X -d $d -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('bench', p_max_attempts => 5)" >/dev/null
done
{
  echo "BEGIN;"
  for f in $(git diff --name-only "$ref" -- extension/src/functions); do
    git cat-file -e "$ref:$f" 2>/dev/null || continue
    git show "$ref:$f" | sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/' \
      | awk '/^COMMENT ON/ {skip = 1} skip && /;$/ {skip = 0; next} !skip'
    echo ";"
  done
  echo "DROP TRIGGER IF EXISTS message_placed_low ON pgqueue.message;"
  echo "DROP TRIGGER IF EXISTS message_placed_low_update ON pgqueue.message;"
  git show "$ref:extension/src/triggers/message_placed_low.sql"
  echo "COMMIT;"
} | psql -q -X -v ON_ERROR_STOP=1 -d pl_a
run() {  # database script -> transactions/s
  PGOPTIONS=-csynchronous_commit=off pgbench -n -M prepared -c 15 -j 2 -T "$secs" -D queue=bench \
    -f "bench/pgbench/$2.sql" "$1" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
fill() {
  psql -qAtX -d "$1" -c "TRUNCATE pgqueue.message" \
    -c "SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill('\x01'::bytea, ARRAY[300000]))" \
    -c "VACUUM ANALYZE pgqueue.message" >/dev/null
}
echo "15 clients, synchronous_commit off, transactions/s (A = $ref, B = current):"
for s in pgqueue_create pgqueue_lease_cycle; do
  for _ in $(seq "$rounds"); do
    for d in pl_a pl_b; do
      if [ $s = pgqueue_create ]; then psql -qX -d $d -c "TRUNCATE pgqueue.message" >/dev/null; else fill $d; fi
      printf '%-20s %s %8.0f   ' $s $d "$(run $d $s)"
    done
    echo
  done
done
echo "one session, server CPU a call (A = pl_a, B = pl_b):"
for d in pl_a pl_b; do fill $d; done
"$py" bench/experiments/placed_low/cpu_loop.py 5000 9 "pgqueue.message_create('bench', '\x0102'::bytea)" pl_a pl_b
"$py" bench/experiments/placed_low/cpu_loop.py 4000 9 "pgqueue.message_dequeue('bench', 1, 30000)" pl_a pl_b
