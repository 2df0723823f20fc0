#!/usr/bin/env bash
# Where pgqueue's delete-mode dequeue spends the CPU that seed 001's dequeue does not (session 41):
# one database with both, 400,000 messages each (85 bytes, vacuumed), pgbench at CLIENTS clients
# for 10 s of each script, `perf record -a` over seconds 2-8 (../perf_lib.sh). Prints each run's
# transactions/s, perf's samples (all processes, idle included) per 1,000 transactions, and the
# functions whose samples per 1,000 transactions grow most from seed 001 to pgqueue. SC=on
# (environment) runs with durable commits; the default is synchronous_commit off, where the CPU
# is the limit.
# Usage (root, perf installed, a server on the default socket where the role may create databases):
#   [SC=on] bench/experiments/cpu_per_call/symbols_vs_seed001.sh [CLIENTS]
set -euo pipefail
bench=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../perf_lib.sh
. "$bench/experiments/perf_lib.sh"
clients=${1:-15}
db=symbols_vs_seed001
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('plain')" \
  -f "$bench/sql/20_seed001.sql" >/dev/null
psql -q -X -d $db \
  -c "SELECT count(*) FROM (SELECT pgqueue.message_create('plain', convert_to(repeat('x', 85), 'UTF8')) FROM generate_series(1, 400000)) s" \
  -c "SELECT count(*) FROM (SELECT seed001.message_create(convert_to(repeat('x', 85), 'UTF8')) FROM generate_series(1, 400000)) s" \
  -c "VACUUM ANALYZE" >/dev/null
export PGOPTIONS="-c synchronous_commit=${SC:-off}"
for s in seed001_dequeue pgqueue_dequeue; do
  perf_run "$out" $s $db "$bench/pgbench/$s.sql" -c "$clients" -j 2 -D queue=plain
done
perf_table "$out" seed001_dequeue pgqueue_dequeue 30
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
