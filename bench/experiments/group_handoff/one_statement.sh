#!/usr/bin/env bash
# What a one-statement grouped hand-off could save (one_statement.py): pgqueue's plain and
# grouped queues (group concurrency 1, 10,000 groups) in delete mode, pgbench at CLIENTS clients,
# synchronous_commit off, with 0.4's functions (A) and the variant (B) installed in turn in one
# database, ROUNDS rounds; each run starts from 300,000 messages a queue, vacuumed. Prints
# transactions/s and grouped/plain for each build and round (and that every group left still
# has its turn), then the medians.
# Usage (a server on the default socket where the role may create databases):
#   bench/experiments/group_handoff/one_statement.sh [ROUNDS] [SECONDS] [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../../extension/src/functions/messages" && pwd)
bench=$(cd "$here/../.." && pwd)
rounds=${1:-3} secs=${2:-6} clients=${3:-4}
db=group_handoff_one
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in message_dequeue _message_removed; do
  sed '/^COMMENT ON/,$d' "$src/$f.sql" | sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/'
  echo ";"
done > "$tmp/A.sql"
python3 "$here/one_statement.py" > "$tmp/B.sql"
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('plain')" \
  -c "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)" >/dev/null
export PGOPTIONS="-c synchronous_commit=off"
run() {  # queue -> transactions/s
  psql -q -X -d $db -v queue="$1" -f "$here/topup.sql" >/dev/null
  pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -D queue="$1" -f "$bench/pgbench/pgqueue_dequeue.sql" $db \
    2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
ra="" rb=""
for r in $(seq "$rounds"); do
  builds="A B"; [ $((r % 2)) = 0 ] && builds="B A"  # the order alternates
  for build in $builds; do
    psql -q -X -d $db -f "$tmp/$build.sql"
    p=$(run plain); g=$(run grouped)
    ratio=$(awk -v g="$g" -v p="$p" 'BEGIN {printf "%.2f", g / p}')
    # every group with a message left still has one with its turn: the hand-off did its work
    turns=$(psql -q -X -At -d $db -c "SELECT count(DISTINCT m.group_key) || ' groups, ' ||
      count(DISTINCT m.group_key) FILTER (WHERE m.turn_at IS NOT NULL) || ' with a turn'
      FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = 'grouped'")
    echo "round $r, build $build: plain $p, grouped $g, grouped/plain $ratio ($turns)"
    if [ $build = A ]; then ra="$ra $ratio"; else rb="$rb $ratio"; fi
  done
done
. "$here/median.sh"
echo "median grouped/plain: A (0.4) $(echo "$ra" | median), B (one statement) $(echo "$rb" | median)"
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
