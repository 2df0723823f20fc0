#!/usr/bin/env bash
# message_create of 0.3 against the current build at 15 clients, durable, in PAIRS fresh pairs of
# databases (created in alternating order, 0.3's first in odd pairs), ROUNDS alternated rounds of
# SECONDS each (bench/experiments/ab_builds/ab_pgbench.sh). Two databases of one server can differ
# by several percent whatever they hold (docs/performance.md, session 29), so one pair made once
# cannot tell that from the builds. Prints each pair's rounds and median ratio current/0.3.
# Usage (a server on the default socket where the role may create databases, the current build
# installed with make install, run from the repository):
#   bench/experiments/vs_0_3/fresh_pairs.sh [PAIRS] [ROUNDS] [SECONDS] [SCRIPT]
set -euo pipefail
cd "$(dirname "$0")/../../.."
pairs=${1:-3} rounds=${2:-4} secs=${3:-8} script=${4:-pgqueue_create}
for p in $(seq "$pairs"); do
  if [ $((p % 2)) = 1 ]; then order="0_3 cur"; else order="cur 0_3"; fi
  for v in $order; do
    db="v${p}_$v"; psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
    if [ $v = 0_3 ]; then ext="CREATE EXTENSION pgqueue VERSION '0.3'"; else ext="CREATE EXTENSION pgqueue"; fi
    psql -X -q -d $db -c "$ext" -c "SELECT pgqueue.queue_create('bench')" >/dev/null
  done
  echo "== pair $p (created $order): A=0.3 B=current"
  bash bench/experiments/ab_builds/ab_pgbench.sh "v${p}_0_3" "v${p}_cur" "$script" "$rounds" "$secs" | tail -$((rounds + 1))
done
