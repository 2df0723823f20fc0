#!/usr/bin/env bash
# Statement by statement, what a run of run.sh reads before its hold and late in it: start this
# first, in the background, then run.sh against the same server. It waits for run.sh's pgbench
# clients (CLIENTS of them, 12 by default: run.sh's 5 + 10 less a margin), resets
# pg_stat_statements, prints the statements of database held_pgbench when the hold begins (the
# seconds before it), resets again, skips SKIP seconds of the hold and prints the next SPAN
# seconds: calls, mean ms and shared buffers a call, most buffers first.
# Needs pg_stat_statements preloaded and tracking nested statements (the statements of
# pgqueue's functions), then CREATE EXTENSION pg_stat_statements in database postgres:
#   ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements';  -- and restart
#   ALTER SYSTEM SET pg_stat_statements.track = 'all';  SELECT pg_reload_conf();
# usage: statements.sh CONNINFO [SKIP SPAN CLIENTS ORDER]   e.g. (session 30, issue 12's lease mode)
#   ORDER: buffers (default: the 14 statements that read most) or calls (every statement called
#   more than 200 times, most called first: session 35's comparison of cases a and b)
#   bench/experiments/held_pgbench/statements.sh "host=/var/run/postgresql" 40 40 > /tmp/st.txt &
#   bench/experiments/held_pgbench/run.sh "host=/var/run/postgresql" lease b 20 90 20
set -euo pipefail
CONN=${1:?conninfo}; SKIP=${2:-40}; SPAN=${3:-40}; CLIENTS=${4:-12}; ORDER=${5:-buffers}
if [ "$ORDER" = calls ]; then FILTER=200; SORT="s.calls DESC LIMIT 40"; else FILTER=1000; SORT="s.shared_blks_hit DESC LIMIT 14"; fi
q() { psql "$CONN dbname=postgres" -XAtq "$@"; }
snap() {
  q -F ' | ' -c "SELECT s.calls, round((s.total_exec_time / s.calls)::numeric, 3) AS ms,
                        round(s.shared_blks_hit::numeric / s.calls, 1) AS buffers,
                        left(regexp_replace(s.query, '\s+', ' ', 'g'), 110)
                   FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
                  WHERE d.datname = 'held_pgbench' AND s.calls > $FILTER
                  ORDER BY $SORT"
}
until [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'held_pgbench' AND application_name = 'pgbench'")" -ge "$CLIENTS" ]; do
  sleep 0.5
done
sleep 6  # past the clients' first calls
q -c "SELECT pg_stat_statements_reset()" >/dev/null
until [ "$(q -c "SELECT count(*) FROM pg_stat_activity WHERE datname = 'held_pgbench' AND application_name <> 'pgbench'
                   AND (query LIKE '%txid_current%' OR query LIKE '%held_other%' OR query LIKE '%FROM pgqueue.message;%')")" -ge 1 ]; do
  sleep 0.3
done
echo "== before the hold: calls | ms | shared buffers a call | statement"
snap
sleep "$SKIP"
q -c "SELECT pg_stat_statements_reset()" >/dev/null
sleep "$SPAN"
echo "== the hold's seconds $SKIP to $((SKIP + SPAN)): calls | ms | shared buffers a call | statement"
snap
