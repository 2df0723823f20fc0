#!/usr/bin/env bash
# Print pgqueue._message_take as CREATE OR REPLACE FUNCTION with its candidates confirmed once
# MS milliseconds old instead of 20 (docs/benchmarks.md, "Session 20: the held runs beside a
# twin"). For the held section's twin, which runs another build beside the shipped one:
#   bench/experiments/held_twin/take_wait.sh 5 > /tmp/take5.sql
#   .venv/bin/python -m bench --only held --held-designs pgqueue_delete pgqueue --held-cases 0 \
#       --held-twin-sql /tmp/take5.sql --out /tmp/ab5/benchmarks.md
# then compare deq_per_s (the shipped build) with twin_deq_per_s in /tmp/ab5/benchmarks.json.
set -euo pipefail
ms=${1:?usage: take_wait.sh MS}
[[ $ms =~ ^[0-9]+$ ]] || { echo "MS must be a whole number of milliseconds" >&2; exit 2; }
src="$(dirname "$0")/../../../extension/src/functions/messages/_message_take.sql"
grep -q 'v_s\[6\] <= p_now - 20;' "$src" || { echo "the 20-ms wait is not where this script expects it" >&2; exit 1; }
sed -e 's/^CREATE FUNCTION/CREATE OR REPLACE FUNCTION/' -e "s/v_s\[6\] <= p_now - 20;/v_s[6] <= p_now - $ms;/" "$src"
