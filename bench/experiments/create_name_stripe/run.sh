#!/usr/bin/env bash
# message_create (this build: one statement, the lock stripe recorded in a session setting and
# taken before the INSERT) against message_create_before, the function as it was at REV (default
# 269da30, the last build with the two statements: the queue's look-up and lock, then the
# INSERT), renamed and added to the same database, at CLIENTS pgbench clients, alternated in
# ROUNDS rounds of SECONDS s, durable commits and then synchronous_commit off. Prints
# transactions/s of each pair and B/A (B: this build), then the medians.
# Usage (a server on the default socket with this build installed, a role that may create
# databases, in a clone of the repository):
#   bench/experiments/create_name_stripe/run.sh [ROUNDS SECONDS CLIENTS REV]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
rounds=${1:-5}; secs=${2:-6}; clients=${3:-15}; rev=${4:-269da30}
db=create_name_stripe
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
git -C "$bench/.." show "$rev:extension/src/functions/messages/message_create.sql" \
    | sed '/^COMMENT ON/,$d; s/^CREATE FUNCTION pgqueue\.message_create(/CREATE FUNCTION pgqueue.message_create_before(/' \
    > "$out/before_function.sql"
psql -q -X -d $db -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pgqueue" -f "$out/before_function.sql" \
    -c "SELECT pgqueue.queue_create('bench')" > /dev/null
sed 's/message_create(/message_create_before(/' "$bench/pgbench/pgqueue_create.sql" > "$out/before.sql"
tps() {  # options script
    PGOPTIONS="$1" pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -D queue=bench -f "$2" $db 2>/dev/null \
        | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
for opts in "" "-c synchronous_commit=off"; do
    echo "${opts:-durable}: message_create_before, message_create, B/A"
    ratios=()
    for _ in $(seq "$rounds"); do
        a=$(tps "$opts" "$out/before.sql"); b=$(tps "$opts" "$bench/pgbench/pgqueue_create.sql")
        ratios+=("$(echo "scale=3; $b / $a" | bc)")
        echo "  $a $b ${ratios[-1]}"
    done
    printf '%s\n' "${ratios[@]}" | sort -n | awk '{r[NR] = $1} END {print "  median B/A:", r[int((NR + 1) / 2)]}'
done
psql -q -X -d postgres -c "DROP DATABASE $db"
