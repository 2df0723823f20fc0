#!/usr/bin/env bash
# Where a plain and a grouped call spend their server time, statement by statement: pgqueue's
# plain queue and its grouped queue (group concurrency 1, 10,000 groups), each topped up to
# 300,000 messages and vacuumed (topup.sql), then SECONDS of pgbench at CLIENTS clients
# (synchronous_commit off) with pg_stat_statements reset before; prints the statements by total
# execution time, as microseconds a transaction (total over the top-level call count) and a call.
# pg_stat_statements counts the executor's run of each statement, nested ones too: not its
# start-up or end, nor the PL/pgSQL around the statements (the top-level row has all of it).
# SCRIPT (default pgqueue_dequeue, delete mode; pgqueue_lease_cycle for lease + complete) names
# the script in bench/pgbench/.
# Needs pg_stat_statements loaded, and every statement tracked, which takes a restart:
#   ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'; (restart)
#   ALTER SYSTEM SET pg_stat_statements.track = 'all'; SELECT pg_reload_conf();
# (and ALTER SYSTEM RESET both, and restart, before measuring throughput again: the hooks cost).
# Usage (a server on the default socket where the role may create databases):
#   [SCRIPT=pgqueue_lease_cycle] bench/experiments/group_handoff/statements.sh [SECONDS] [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
secs=${1:-10} clients=${2:-4}
script=${SCRIPT:-pgqueue_dequeue}
db=group_handoff_statements
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "CREATE EXTENSION pg_stat_statements" \
  -c "SELECT pgqueue.queue_create('plain')" \
  -c "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)" >/dev/null
export PGOPTIONS="-c synchronous_commit=off"
for q in plain grouped; do
  psql -q -X -d $db -v queue=$q -f "$here/topup.sql" >/dev/null
  psql -q -X -d $db -c "SELECT pg_stat_statements_reset()" >/dev/null
  tps=$(pgbench -n -M prepared -c "$clients" -j "$(( clients < 2 ? 1 : 2 ))" -T "$secs" -D queue=$q \
          -f "$bench/pgbench/$script.sql" $db 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  echo "== $q: $tps transactions/s"
  psql -X -d $db -P pager=off -c "
    SELECT calls,
           round((total_exec_time * 1000 / (SELECT max(calls) FROM pg_stat_statements WHERE toplevel))::numeric, 1)
             AS us_a_transaction,
           round((mean_exec_time * 1000)::numeric, 1) AS us_a_call, toplevel,
           left(regexp_replace(query, '\s+', ' ', 'g'), 100) AS statement
      FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND calls > 100
     ORDER BY total_exec_time DESC LIMIT 12"
done
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
