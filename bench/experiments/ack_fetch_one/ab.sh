#!/usr/bin/env bash
# A/B of message_complete_batch in one database: A is the function as at git revision REV, B as in
# the tree (extension/src/functions/messages/message_complete_batch.sql), installed in turn with
# CREATE OR REPLACE. FILES (names under extension/src/functions/messages, without .sql) swaps
# those functions instead, all of them in each build. Each run tops the plain queue 'bench' up to 200,000 ready messages or more and
# vacuums it, then runs pgbench SCRIPT (default pgqueue_lease_ack_fetch: message_complete_and_dequeue
# with one acknowledgement a call) at CLIENTS clients for SECONDS, synchronous_commit off, deadlocks
# retried (--max-tries 5); the order of A and B alternates by round. Prints transactions/s of A and B
# and B/A for each round.
# Usage (a server on the default socket where the role may create databases):
#   [SCRIPT=pgqueue_lease_ack_fetch_batch] [FILES="message_complete_and_dequeue _message_take"] \
#     bench/experiments/ack_fetch_one/ab.sh REV [ROUNDS] [SECONDS] [CLIENTS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
rev=$1 rounds=${2:-6} secs=${3:-5} clients=${4:-15} script=${SCRIPT:-pgqueue_lease_ack_fetch}
db=ack_fetch_one_ab
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
as_replace() { sed '/^COMMENT ON/,$d' | sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/'; echo ";"; }
for f in ${FILES:-message_complete_batch}; do
  file=extension/src/functions/messages/$f.sql
  git -C "$root" show "$rev:$file" | as_replace >> "$tmp/A.sql"
  as_replace < "$root/$file" >> "$tmp/B.sql"
done
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('bench')" >/dev/null
run() {  # build -> transactions/s
  psql -q -X -v ON_ERROR_STOP=1 -d $db -f "$tmp/$1.sql" >/dev/null
  psql -qAtX -d $db -c "SELECT count(*) FROM pgqueue.message_create_batch('bench',
      array_fill('\x01'::bytea, ARRAY[300000])) WHERE (SELECT count(*) < 200000 FROM pgqueue.message)" >/dev/null
  psql -qX -d $db -c "VACUUM pgqueue.message"
  PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" --max-tries 5 \
    -D queue=bench -D aid=0 -D atok=0 -D aids={} -D atoks={} -D batch=4 -f "$root/bench/pgbench/$script.sql" $db \
    2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) = 1 ]; then a=$(run A); b=$(run B); else b=$(run B); a=$(run A); fi
  echo "round $i: A $a B $b B/A $(python3 -c "print(round($b / $a, 3))")"
done
psql -q -X -d postgres -c "DROP DATABASE $db"
