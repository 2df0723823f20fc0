#!/usr/bin/env bash
# Where a grouped delete-mode dequeue's time goes, function by function (issue 14): on a queue
# without groups ("plain"), then for the shipped pgqueue._message_removed and for each
# measurement build of it in trigger_parts/ (the call alone,
# with the queue's row, with the probe for the group's next message: none hands the turn on, so
# each runs on a fresh database), pgbench at 1 client for SECONDS on a grouped queue (group
# concurrency 1, 10,000 groups, 300,000 messages, vacuumed), synchronous_commit off,
# track_functions = pl; prints the server time per call of each pgqueue function. A build that
# hands no turn on has only the 10,000 groups' first messages to deliver: compare its trigger's
# time per call, not its rate. SCRIPT (default pgqueue_dequeue; pgqueue_lease_cycle for lease +
# complete) names the script in bench/pgbench/.
# Usage (a server on the default socket where the role may create databases):
#   [SCRIPT=pgqueue_lease_cycle] bench/experiments/group_handoff/trigger_parts.sh [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
secs=${1:-8}
script=${SCRIPT:-pgqueue_dequeue}
db=group_handoff_parts
for build in plain shipped call queue_row next_probe; do
  queue=grouped; [ $build = plain ] && queue=plain
  psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
  psql -q -X -d $db -c "CREATE EXTENSION pgqueue" \
    -c "SELECT pgqueue.queue_create('plain')" \
    -c "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)" >/dev/null
  [ $build = shipped ] || [ $build = plain ] || psql -q -X -v ON_ERROR_STOP=1 -d $db -f "$here/trigger_parts/$build.sql"
  psql -q -X -d $db -v queue=$queue -f "$here/topup.sql" >/dev/null
  psql -q -X -d $db -c "SELECT pg_stat_reset()" >/dev/null
  echo "== $build"
  PGOPTIONS="-c track_functions=pl -c synchronous_commit=off" pgbench -n -M prepared -c 1 -T "$secs" \
    -D queue=$queue -f "$bench/pgbench/$script.sql" $db 2>/dev/null | grep '^tps'
  sleep 0.6  # the statistics reach the cumulative view at the backend's exit
  psql -X -At -d $db -c "SELECT funcname || ': ' || calls || ' calls, ' || round((total_time / calls)::numeric * 1000, 1)
                                || ' us total, ' || round((self_time / calls)::numeric * 1000, 1) || ' us self'
                           FROM pg_stat_user_functions WHERE calls > 0 ORDER BY total_time DESC"
done
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
