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
  ( sleep 2; perf record -a -o "$out/$q.data" -- sleep 6 >/dev/null 2>&1 ) &
  tps=$(pgbench -n -M prepared -c "$clients" -j 2 -T 10 -D queue=$q -f "$bench/pgbench/${SCRIPT:-pgqueue_dequeue}.sql" $db 2>/dev/null \
        | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  wait
  echo "$q: $tps transactions/s"
  echo "$tps" > "$out/$q.tps"
  perf report -i "$out/$q.data" --no-children --sort symbol --stdio -n 2>/dev/null \
    | grep -v '^#' | grep '%' | awk '{print $2, $4}' > "$out/$q.n"
done
python3 - "$out" <<'PY'
import sys
out = sys.argv[1]
per = {}
for q in ("plain", "grouped"):
    tx = float(open(f"{out}/{q}.tps").read()) * 6 / 1000
    total = 0
    for line in open(f"{out}/{q}.n"):
        n, sym = line.split(None, 1)
        per.setdefault(sym.strip(), {})[q] = per.get(sym.strip(), {}).get(q, 0) + int(n) / tx
        total += int(n)
    print(f"{q}: {total / tx:.0f} samples per 1,000 transactions")
print("plain  grouped  difference  function (samples per 1,000 transactions)")
for sym, v in sorted(per.items(), key=lambda kv: kv[1].get("plain", 0) - kv[1].get("grouped", 0))[:25]:
    print(f"{v.get('plain', 0):6.1f} {v.get('grouped', 0):8.1f} {v.get('grouped', 0) - v.get('plain', 0):11.1f}  {sym}")
PY
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db"
