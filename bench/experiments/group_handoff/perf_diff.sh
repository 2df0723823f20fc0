#!/usr/bin/env bash
# Where a grouped delete-mode dequeue spends the CPU its plain twin does not (session 28): pgqueue's
# plain queue and its grouped queue (group concurrency 1, 10,000 groups), each topped up to
# 300,000 messages and vacuumed (topup.sql), pgbench at CLIENTS clients for 10 s, synchronous_commit
# off, `perf record -a` over seconds 2-8 of each run. Prints each run's transactions/s, then perf's
# samples (all processes) per 1,000 transactions of each queue, and the functions whose samples
# per 1,000 transactions grow most from plain to grouped. SCRIPT (default pgqueue_dequeue, delete
# mode; pgqueue_lease_cycle for lease + complete) names the script in bench/pgbench/.
# Usage (root, perf installed, a server on the default socket where the role may create databases):
#   [SCRIPT=pgqueue_lease_cycle] bench/experiments/group_handoff/perf_diff.sh [CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
# shellcheck source=../perf_lib.sh
. "$here/../perf_lib.sh"
clients=${1:-4}
db=group_handoff_perf
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('plain')" \
  -c "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)" >/dev/null
export PGOPTIONS="-c synchronous_commit=off"
for q in plain grouped; do
  psql -q -X -d $db -v queue=$q -f "$here/topup.sql" >/dev/null
  perf_run "$out" $q $db "$bench/pgbench/${SCRIPT:-pgqueue_dequeue}.sql" -c "$clients" -j 2 -D queue=$q
done
perf_table "$out" plain grouped
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
