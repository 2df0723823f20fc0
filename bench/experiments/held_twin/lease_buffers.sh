#!/usr/bin/env bash
# Buffer accesses a call of each statement of the lease cycle (pg_stat_statements, track = all,
# so the statements inside pgqueue's functions are counted too), free-running and then 35 s into
# a REPEATABLE READ snapshot held by another session (docs/performance.md, "What the hold costs a
# message, against a twin"). Run from the repository's root against a database DB that has
# pg_stat_statements and pgqueue, a queue 'churn' with a backlog (100,000 messages: session 20),
# on a server with shared_preload_libraries = pg_stat_statements and
# pg_stat_statements.track = all:
#   bench/experiments/held_twin/lease_buffers.sh DB
# 3 pgbench clients create, 8 run the lease cycle (bench/pgbench/pgqueue_lease_cycle.sql).
set -uo pipefail
DB=${1:?usage: lease_buffers.sh DB}
P="psql -h /var/run/postgresql -d $DB -X"
run() {
  pgbench -h /var/run/postgresql -n -c 3 -j 1 -T $1 -D queue=\'churn\' -f bench/pgbench/pgqueue_create.sql "$DB" > /tmp/lease_buffers_p.log 2>&1 &
  pgbench -h /var/run/postgresql -n -c 8 -j 2 -T $1 -D queue=\'churn\' -f bench/pgbench/pgqueue_lease_cycle.sql "$DB" > /tmp/lease_buffers_c.log 2>&1
  wait
  grep "tps = " /tmp/lease_buffers_c.log | head -1
}
show() {
  $P -Atc "SELECT calls, round((shared_blks_hit+shared_blks_read)::numeric/calls,1) AS blk_per_call, round(mean_exec_time::numeric,3), left(regexp_replace(query, '\s+', ' ', 'g'), 110) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 1000 ORDER BY shared_blks_hit+shared_blks_read DESC LIMIT 14"
}
run 8 >/dev/null
$P -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
echo "== free"; run 20; show
$P -c "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class; SELECT pg_sleep(90); COMMIT" > /dev/null 2>&1 &
sleep 1
run 35 > /dev/null
$P -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
echo "== held"; run 20; show
wait
