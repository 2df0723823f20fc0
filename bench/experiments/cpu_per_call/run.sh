#!/usr/bin/env bash
# CPU per transaction at N pgbench clients, and where it goes (session 10, issue 13's "delete mode
# loses more at 15 clients than in one session"): for each pgbench script, a fresh backlog of
# 300,000 ready messages (pgqueue's queue 'bench', pgmq's queue 'bench', seed 001's table, all
# vacuumed), pgbench -c N for SECS seconds, and `perf record -a` over the middle of the run. Prints
# transactions/s, the CPU of all processes per transaction (perf's event count over the
# transactions in the sampled seconds), and the share of a few functions, converted to µs per
# transaction (children included: plpgsql_exec_function is the time inside PL/pgSQL functions).
# Usage (root, perf installed, a server on the default socket where the role may create databases,
# pgmq installed in the server's extension directory):
#   bench/experiments/cpu_per_call/run.sh [clients] [seconds] [script ...]
# e.g. bench/experiments/cpu_per_call/run.sh 15 12 pgqueue_dequeue seed001_dequeue pgmq_pop
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
clients=${1:-15}; secs=${2:-12}; shift $(( $# < 2 ? $# : 2 ))
if [ $# -gt 0 ]; then scripts=("$@"); else scripts=(pgqueue_dequeue seed001_dequeue pgmq_pop); fi
db=cpu_per_call
out=$(mktemp -d)
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "CREATE EXTENSION pgmq" \
  -c "SELECT pgqueue.queue_create('bench', p_max_attempts => 5)" -c "SELECT pgmq.create('bench')" \
  -f "$here/sql/20_seed001.sql" -f "$here/sql/00_ceiling.sql" >/dev/null
payload='{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'
fill() {
  psql -q -X -d $db >/dev/null <<SQL
TRUNCATE pgqueue.message, pgqueue.queue_size; TRUNCATE pgmq.q_bench; TRUNCATE seed001.message; TRUNCATE bench_raw.message;
SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill(convert_to('$payload', 'UTF8'), ARRAY[300000]));
SELECT count(*) FROM pgmq.send_batch('bench', array_fill('$payload'::jsonb, ARRAY[300000]));
INSERT INTO seed001.message (content, dequeue_after)
SELECT convert_to('$payload', 'UTF8'), seed001.to_epoch(now()) - 300000 + g FROM generate_series(1, 300000) g;
VACUUM ANALYZE pgqueue.message; VACUUM ANALYZE pgmq.q_bench; VACUUM ANALYZE seed001.message;
CHECKPOINT;
SQL
}
rec=$((secs / 2))
printf '%-20s %8s %10s  %s\n' script 'tx/s' 'CPU us/tx' 'µs per transaction in: plpgsql | ExecutorStart | ExecInitExprWithParams | _bt_first | CommitTransactionCommand'
for s in "${scripts[@]}"; do
  fill
  pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -D queue=bench -P 1 \
    -f "$here/pgbench/$s.sql" $db > "$out/$s.pgbench" 2>&1 &
  sleep $(( (secs - rec) / 2 ))
  perf record -a -F 999 -g -o "$out/$s.perf" -- sleep $rec >/dev/null 2>&1
  wait
  # the transactions of the sampled seconds: pgbench's per-second progress lines over the window
  first=$(( (secs - rec) / 2 + 1 ))
  tps=$(awk -v a=$first -v b=$((first + rec - 1)) '/^progress:/ {t=$2+0; if (t>=a && t<=b) {s+=$4; n++}} END {print (n ? s/n : 0)}' "$out/$s.pgbench")
  ns=$(perf report -i "$out/$s.perf" --stdio --sort comm 2>/dev/null | sed -n 's/^# Event count (approx.): //p')
  share() {  # "  61.90%  0.17%  [.] plpgsql_exec_function  -  -": the first column, children included
    perf report -i "$out/$s.perf" --children --sort symbol -g none --stdio 2>/dev/null \
      | awk -v f="$1" '$3 == "[.]" && $4 == f && !done {print $1 + 0; done = 1}'
  }
  per_tx=$(awk -v ns="$ns" -v tps="$tps" -v r=$rec 'BEGIN {printf "%.0f", ns / 1000 / (tps * r)}')
  parts=""
  for f in plpgsql_exec_function standard_ExecutorStart ExecInitExprWithParams _bt_first CommitTransactionCommand; do
    p=$(share $f); parts="$parts $(awk -v p="${p:-0}" -v t="$per_tx" 'BEGIN {printf "%.0f", p / 100 * t}')"
  done
  printf '%-20s %8.0f %10s  %s\n' "$s" "$tps" "$per_tx" "$parts"
done
rm -rf "$out"
