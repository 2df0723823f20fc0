#!/usr/bin/env bash
# Held-snapshot experiment: the extension's message_dequeue (with its session hint since 0.4) against
# the prototype it grew from (proto.sql),
# delete mode, 15 pgbench clients, 400k backlog, one REPEATABLE READ session holding a snapshot.
# Usage: bench/experiments/session_hint/run.sh "host=... user=..."   (a role that may CREATE DATABASE;
# the extension must be installed on the server: make install). Prints tps per 8-s window.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
conn=${1:?usage: run.sh CONNINFO}
pgc=$("$here/../../../scripts/find-pg-config")
bindir=$("$pgc" --bindir)
db=pgqueue_hint_experiment
psql() { "$bindir/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }
psql "$conn dbname=postgres" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql "$conn dbname=$db" -c "CREATE EXTENSION pgqueue" -f "$here/proto.sql"
echo "SELECT * FROM pgqueue.message_dequeue('default', 1, 0);" > /tmp/hint_extension.sql
echo "SELECT * FROM pgqueue.proto_dequeue('default');" > /tmp/hint_prototype.sql
for variant in extension prototype; do
    psql "$conn dbname=$db" -c "TRUNCATE pgqueue.message" \
         -c "SELECT count(*) FROM pgqueue.message_create_batch('default', array(SELECT 'x'::bytea FROM generate_series(1, 400000)))" \
         -c "VACUUM ANALYZE pgqueue.message" >/dev/null
    pgb=("$bindir/pgbench" -n -M prepared -c 15 -j 2 -T 8 -f "/tmp/hint_$variant.sql" "$conn dbname=$db")
    echo -n "$variant free:    "; "${pgb[@]}" 2>&1 | grep -o 'tps = [0-9.]*'
    psql "$conn dbname=$db" -c 'BEGIN ISOLATION LEVEL REPEATABLE READ' -c 'SELECT count(*) FROM pg_class' \
         -c 'SELECT pg_sleep(30)' >/dev/null 2>&1 &
    sleep 1
    for w in 1 2 3; do echo -n "$variant held w$w: "; "${pgb[@]}" 2>&1 | grep -o 'tps = [0-9.]*'; done
    wait
done
psql "$conn dbname=postgres" -c "DROP DATABASE $db"
