#!/usr/bin/env bash
# How often the server runs some of its visibility, snapshot and lock routines for each message
# deleted, before a hold and inside it: uprobes on the postgres binary counted by `perf stat -a`
# (every process of the machine) while run.sh runs, divided by pgqueue.message's n_tup_del over
# the same seconds. Root, with perf (linux-perf) installed; the uprobes slow the run (each hit
# traps into the kernel), so compare counts, not rates. Session 35 used it on cases a and b.
#
# usage: probe_counts.sh CONNINFO MODE CASE   (run.sh's arguments; the run is 20 + 60 + 10 s)
#   counts in seconds 5-17 of the run (before the hold) and 35-55 (inside it)
# FUNCS="f1 f2 ..." (environment): other routines of the binary than the default list below
set -euo pipefail
CONN=${1:?conninfo}; MODE=${2:?mode}; CASE=${3:?case}
BIN=${PG_BIN:-$(pg_config --bindir)/postgres}
FUNCS=${FUNCS:-"GetSnapshotData XidInMVCCSnapshot HeapTupleSatisfiesVisibility HeapTupleSatisfiesUpdate
       heap_hot_search_buffer heap_page_prune_opt heap_page_prune GlobalVisTestIsRemovableXid
       TransactionIdIsInProgress TransactionIdDidCommit TransactionIdGetCommitLSN
       SimpleLruReadPage_ReadOnly LWLockAcquire PGSemaphoreLock"}
EV=()
for f in $FUNCS; do
  perf probe -q -x "$BIN" "$f" 2>/dev/null || true
  EV+=(-e "probe_postgres:$f")
done
trap 'perf probe -q -d "probe_postgres:*" >/dev/null 2>&1 || true' EXIT
W=$(mktemp -d /tmp/probe_counts.XXXXXX)
HERE=$(cd "$(dirname "$0")" && pwd)
"$HERE/run.sh" "$CONN" "$MODE" "$CASE" 20 60 10 > "$W/run" 2>&1 &
RP=$!
until grep -q "^mode " "$W/run" 2>/dev/null; do sleep 0.2; done
dels() { psql "$CONN dbname=held_pgbench" -qXAt -c "SELECT n_tup_del FROM pg_stat_user_tables WHERE relid = 'pgqueue.message'::regclass"; }
sleep 5
d0=$(dels); perf stat -a -x, "${EV[@]}" -o "$W/before" -- sleep 12; d1=$(dels)
sleep 18
d2=$(dels); perf stat -a -x, "${EV[@]}" -o "$W/hold" -- sleep 20; d3=$(dels)
wait $RP
python3 - "$W" "$d0" "$d1" "$d2" "$d3" <<'PY'
import sys
w, d0, d1, d2, d3 = sys.argv[1], *map(int, sys.argv[2:6])
def read(f):
    r = {}
    for line in open(f):
        p = line.strip().split(",")
        if len(p) > 3 and p[2].startswith("probe_postgres:"):
            r[p[2].split(":")[1]] = int(p[0]) if p[0].isdigit() else 0
    return r
b, h = read(w + "/before"), read(w + "/hold")
nb, nh = max(d1 - d0, 1), max(d3 - d2, 1)
print(f"messages deleted: {nb} in 12 s before the hold, {nh} in 20 s of it")
print(f"{'routine':32s} {'before':>9s} {'hold':>9s}   (calls a message)")
for k in b:
    print(f"{k:32s} {b[k] / nb:9.2f} {h.get(k, 0) / nh:9.2f}")
PY
grep "free-running" "$W/run"
rm -rf "$W"
