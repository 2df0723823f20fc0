# Shared by the perf comparisons of two pgbench runs (group_handoff/perf_diff.sh,
# cpu_per_call/symbols_vs_seed001.sh); source it.
#   perf_run OUT NAME DB SCRIPT [pgbench options ...]: pgbench -n -M prepared -T 10 with the
#     options, `perf record -a` over seconds 2-8 of it; prints the rate and writes OUT/NAME.tps and
#     OUT/NAME.n (perf's samples by symbol).
#   perf_table OUT A B [ROWS]: perf's samples (all processes) per 1,000 transactions of each run,
#     and the ROWS (default 25) symbols whose samples per 1,000 transactions grow most from A to B.
perf_run() {
  local out=$1 name=$2 db=$3 script=$4 tps
  shift 4
  ( sleep 2; perf record -a -o "$out/$name.data" -- sleep 6 >/dev/null 2>&1 ) &
  tps=$(pgbench -n -M prepared -T 10 "$@" -f "$script" "$db" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  wait
  echo "$name: $tps transactions/s"
  echo "$tps" > "$out/$name.tps"
  perf report -i "$out/$name.data" --no-children --sort symbol --stdio -n 2>/dev/null \
    | grep -v '^#' | grep '%' | awk '{print $2, $4}' > "$out/$name.n"
}

perf_table() {
  python3 - "$@" <<'PY'
import sys
out, a, b = sys.argv[1:4]
rows = int(sys.argv[4]) if len(sys.argv) > 4 else 25
per = {}
for q in (a, b):
    tx = float(open(f"{out}/{q}.tps").read()) * 6 / 1000  # transactions in perf's 6 s
    total = 0
    for line in open(f"{out}/{q}.n"):
        n, sym = line.split(None, 1)
        per.setdefault(sym.strip(), {})[q] = per.get(sym.strip(), {}).get(q, 0) + int(n) / tx
        total += int(n)
    print(f"{q}: {total / tx:.0f} samples per 1,000 transactions")
print(f"{a}  {b}  difference  function (samples per 1,000 transactions)")
for sym, v in sorted(per.items(), key=lambda kv: kv[1].get(a, 0) - kv[1].get(b, 0))[:rows]:
    print(f"{v.get(a, 0):6.1f} {v.get(b, 0):8.1f} {v.get(b, 0) - v.get(a, 0):11.1f}  {sym}")
PY
}
