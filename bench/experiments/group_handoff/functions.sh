#!/usr/bin/env bash
# Server time per call of pgqueue's functions in a delete-mode dequeue, plain queue against grouped
# (group concurrency 1, 10,000 groups): pgbench at CLIENTS clients for SECONDS seconds on each
# queue with track_functions = pl (a superuser setting) and synchronous_commit off, then
# pg_stat_user_functions' total and self time per call. Runs in run.sh's database (run run.sh
# first): its queues are topped up to 300,000 messages and vacuumed before each run.
# Usage: bench/experiments/group_handoff/functions.sh [SECONDS] [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
secs=${1:-5} clients=${2:-4}
db=group_handoff
for q in plain grouped; do
  psql -q -X -d $db -v queue=$q -f "$here/topup.sql" >/dev/null
  psql -q -X -d $db -c "SELECT pg_stat_reset()" >/dev/null
  PGOPTIONS="-c synchronous_commit=off -c track_functions=pl" \
    pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -D queue=$q -f "$bench/pgbench/pgqueue_dequeue.sql" $db \
    | sed -n "s/^tps = \([0-9.]*\).*/$q: \1 transactions\/s/p"
  sleep 1  # the backends report their function statistics as they exit
  psql -q -X -d $db -c "SELECT funcname, calls, round((total_time * 1000 / calls)::numeric, 1) AS total_us_a_call,
                               round((self_time * 1000 / calls)::numeric, 1) AS self_us_a_call
                          FROM pg_stat_user_functions WHERE calls > 0 ORDER BY total_time DESC"
done
