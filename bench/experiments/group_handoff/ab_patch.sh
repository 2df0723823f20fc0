#!/usr/bin/env bash
# A/B of a patch to a grouped queue's dequeue or hand-off: the functions of extension/src/functions
# that the patch touches, as they are in extension/src (A) and with PATCH applied to a copy (B),
# installed in turn in one database (CREATE OR REPLACE); ROUNDS rounds of pgbench at CLIENTS
# clients on a queue of group concurrency 1 (10,000 groups, topped up to 300,000 messages and
# vacuumed before each run), synchronous_commit off, the order alternating. SCRIPT (default
# pgqueue_dequeue, delete mode; pgqueue_lease_cycle for lease + complete) names the script in
# bench/pgbench/; PGBENCH_VARS, more pgbench -D options the script needs (e.g. for
# pgqueue_lease_ack_fetch_batch, the worker's acknowledge-and-fetch: "-D aids={} -D atoks={} -D
# batch=4"). Prints transactions/s for each build and round, and the medians.
# Usage (a server on the default socket where the role may create databases):
#   [SCRIPT=pgqueue_lease_cycle] bench/experiments/group_handoff/ab_patch.sh PATCH [ROUNDS] [SECONDS] [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
patch=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
rounds=${2:-4} secs=${3:-5} clients=${4:-1}
db=group_handoff_ab
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/B/extension"
cp -r "$root/extension/src" "$tmp/B/extension/src"
(cd "$tmp/B" && patch -s -p1 < "$patch")
script=${SCRIPT:-pgqueue_dequeue}
# the function files the patch touches
touched=$(sed -n 's#^+++ [ab]/extension/src/\(functions/.*\)\.sql.*#\1#p' "$patch" | sort -u)
functions() {  # source tree -> the SQL that installs its versions of those objects
  for f in $touched; do
    sed '/^COMMENT ON/,$d' "$1/extension/src/$f.sql" | sed 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/'
    echo ";"
  done
}
functions "$root" > "$tmp/A.sql"
functions "$tmp/B" > "$tmp/B.sql"
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" \
  -c "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)" >/dev/null
export PGOPTIONS="-c synchronous_commit=off"
run() {  # build, seconds -> transactions/s of a run of that build on a topped-up queue
  psql -q -X -v ON_ERROR_STOP=1 -d $db -f "$tmp/$1.sql"
  psql -q -X -d $db -v queue=grouped -f "$here/topup.sql" >/dev/null
  # shellcheck disable=SC2086  # PGBENCH_VARS: more -D options, split on spaces
  pgbench -n -M prepared -c "$clients" -j "$(( clients < 2 ? 1 : 2 ))" -T "$2" -D queue=grouped ${PGBENCH_VARS:-} \
    -f "$root/bench/pgbench/$script.sql" $db 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
# a warm-up run, not counted: the first run after the set-up was up to a third slower
run A 3 >/dev/null
ra="" rb=""
for r in $(seq "$rounds"); do
  builds="A B"; [ $((r % 2)) = 0 ] && builds="B A"
  for build in $builds; do
    tps=$(run $build "$secs")
    echo "round $r, build $build: grouped $tps transactions/s"
    if [ $build = A ]; then ra="$ra $tps"; else rb="$rb $tps"; fi
  done
done
. "$here/median.sh"
echo "median: A $(echo "$ra" | median), B ($(basename "$patch")) $(echo "$rb" | median)"
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
