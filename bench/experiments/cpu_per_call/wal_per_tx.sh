#!/usr/bin/env bash
# WAL bytes a transaction of one pgbench script: the server's WAL position before and after
# `pgbench -n -c CLIENTS -j 2 -T 8 -D queue='bench' -f SCRIPT DB`, divided by the transactions
# it ran. Other writers on the server count too: run it on a quiet one.
# Usage: bench/experiments/cpu_per_call/wal_per_tx.sh DB SCRIPT [CLIENTS]
set -euo pipefail
db=$1 script=$2 clients=${3:-15}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
pgbench=$(command -v pgbench || echo "$("$("$repo/scripts/find-pg-config")" --bindir)/pgbench")
l0=$(psql -d "$db" -qAtc "SELECT pg_current_wal_lsn()")
out=$("$pgbench" -n -c "$clients" -j 2 -T 8 -D queue="'bench'" -f "$script" "$db" 2>&1)
l1=$(psql -d "$db" -qAtc "SELECT pg_current_wal_lsn()")
n=$(echo "$out" | sed -n 's/number of transactions actually processed: \([0-9]*\).*/\1/p')
tps=$(echo "$out" | sed -n 's/tps = \([0-9.]*\).*/\1/p')
bytes=$(psql -d "$db" -qAtc "SELECT pg_wal_lsn_diff('$l1', '$l0')::bigint")
echo "$(basename "$script") clients=$clients tps=$tps transactions=$n wal_bytes_per_transaction=$((bytes / n))"
