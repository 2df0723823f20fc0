#!/usr/bin/env bash
# Print pgqueue._message_take as CREATE OR REPLACE FUNCTION with the hints' 20-ms wait cut short
# after a long walk: the entries the ready index (the turn index with p_turns) returned to this
# call's take, from pg_stat_get_xact_tuples_returned before and after it (killed entries are not
# returned, so a free-running queue's walk is short); above WALK entries a pending candidate
# counts as 20 ms old, so the next call settles it. Measured and not built (docs/performance.md,
# "At pgbench's rate the hold costs delete mode a fifth"):
#   bench/experiments/held_pgbench/walk_gate.sh 64 > /tmp/walk64.sql
#   psql -d B -f /tmp/walk64.sql     # B: one of ab_builds/ab_pgbench.sh's two databases
#   PGOPTIONS="-c synchronous_commit=off" bench/experiments/ab_builds/ab_pgbench.sh A B pgqueue_dequeue 8 6
#   HOLD=1 PGOPTIONS="-c synchronous_commit=off" bench/experiments/ab_builds/ab_pgbench.sh A B pgqueue_dequeue 6 10
set -euo pipefail
walk=${1:?usage: walk_gate.sh WALK}
[[ $walk =~ ^[0-9]+$ ]] || { echo "WALK must be a whole number of entries" >&2; exit 2; }
src="$(dirname "$0")/../../../extension/src/functions/messages/_message_take.sql"
python3 - "$src" "$walk" <<'PY'
import sys
s = open(sys.argv[1]).read()
edits = [
    ("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"),
    ("    v_src      integer;\n",
     "    v_src      integer;\n    v_idx      regclass;\n    v_walk     bigint;\n"),
    ("    LOOP\n        -- A take of one message looks",
     "    v_idx := CASE WHEN p_turns THEN 'pgqueue.message_turn_idx' ELSE 'pgqueue.message_ready_idx' END::regclass;\n"
     "    v_walk := pg_stat_get_xact_tuples_returned(v_idx);\n"
     "    LOOP\n        -- A take of one message looks"),
    ("    -- X: an xid the take assigned",
     "    v_walk := pg_stat_get_xact_tuples_returned(v_idx) - v_walk;\n"
     f"    IF v_walk > {int(sys.argv[2])} AND v_s[6] > p_now - 20 THEN\n"
     "        v_s[6] := p_now - 20;\n"
     "    END IF;\n"
     "    -- X: an xid the take assigned"),
]
for old, new in edits:
    if s.count(old) != 1:
        sys.exit(f"_message_take has changed: {old.splitlines()[0]!r} is not where this script expects it")
    s = s.replace(old, new)
print(s, end="")
PY
