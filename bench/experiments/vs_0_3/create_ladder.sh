#!/usr/bin/env bash
# Where message_create's server CPU beyond 0.3's goes (issue 12: "single-call throughput no
# worse than 0.3"). Measurement builds, not fixes: each variant takes one of 0.4's additions out
# of a copy of the current build, and placed_low/pairs.py times message_create in that copy (B)
# against an untouched copy (A) in paired rounds, one session pinned to CPU 1, a COMMIT a call.
# Variants:
#   aa         nothing changed (the A/A spread)
#   nocount    no enqueued counter (pgqueue._counted, a nextval)
#   noiso      no READ COMMITTED test on the fast path
#   notrig     no trigger message_placed_low on INSERT (its WHEN clause is set up per statement)
#   noidx      without the four partial indexes of groups and idempotency keys
#   all        the four above together
#   before     the same trigger BEFORE INSERT (not AFTER): the WHEN clause without the AFTER
#              trigger's event queue (its function would have to return NEW; measured only with
#              message_create's rows, for which the WHEN clause is false)
#   v0_3       message_create of 0.3 itself: a database with CREATE EXTENSION pgqueue VERSION '0.3'
# Usage (root or any role that may create databases, a server on the default socket, the
# current build installed with make install, run from the repository):
#   bench/experiments/vs_0_3/create_ladder.sh [ROUNDS] [VARIANT ...]
# e.g. bench/experiments/vs_0_3/create_ladder.sh 8 aa nocount noiso notrig noidx all v0_3
set -euo pipefail
here=$(cd "$(dirname "$0")/../../.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
rounds=${1:-8}; shift || true
variants=${*:-aa nocount noiso notrig noidx all v0_3}
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS ladder_t" -c "CREATE DATABASE ladder_t"
psql -q -X -d ladder_t -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('bench')" >/dev/null
fn() {  # message_create's definition in ladder_t with each OLD=>NEW replaced
  "$py" - "$@" <<'EOF'
import sys, psycopg
with psycopg.connect("dbname=ladder_t") as conn:
    row = conn.execute("SELECT pg_get_functiondef('pgqueue.message_create(text,bytea,bigint,text,text,text)'"
                       "::regprocedure)").fetchone()
src = row[0]
for pair in sys.argv[1:]:
    old, new = pair.split("=>")
    assert old in src, old
    src = src.replace(old, new)
print(src + ";")
EOF
}
nocount=$(fn "v_counted := pgqueue._counted(coalesce(v_queue.id, v_queue_id), 0);=>v_counted := true;")
noiso=$(fn "AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'=>")
notrig="DROP TRIGGER message_placed_low ON pgqueue.message;"
before="DROP TRIGGER message_placed_low ON pgqueue.message;
CREATE TRIGGER message_placed_low BEFORE INSERT ON pgqueue.message FOR EACH ROW
    WHEN (NEW.write_mark IS NULL) EXECUTE FUNCTION pgqueue._message_placed_low();"
noidx="DROP INDEX pgqueue.message_group_turn_idx, pgqueue.message_group_wait_idx,
       pgqueue.message_idem_key_idx, pgqueue.message_turn_idx;"
all="$(fn "v_counted := pgqueue._counted(coalesce(v_queue.id, v_queue_id), 0);=>v_counted := true;" \
          "AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'=>")
$notrig $noidx"
for v in $variants; do
  psql -q -X -d postgres -c "DROP DATABASE IF EXISTS ladder_a" -c "DROP DATABASE IF EXISTS ladder_b" \
    -c "CREATE DATABASE ladder_a TEMPLATE ladder_t" >/dev/null
  case $v in
    aa) psql -q -X -d postgres -c "CREATE DATABASE ladder_b TEMPLATE ladder_t" ;;
    v0_3) psql -q -X -d postgres -c "CREATE DATABASE ladder_b"
          psql -q -X -d ladder_b -c "CREATE EXTENSION pgqueue VERSION '0.3'" -c "SELECT pgqueue.queue_create('bench')" >/dev/null ;;
    nocount|noiso|notrig|before|noidx|all)
          psql -q -X -d postgres -c "CREATE DATABASE ladder_b TEMPLATE ladder_t"
          printf '%s\n' "${!v}" | psql -q -X -v ON_ERROR_STOP=1 -d ladder_b >/dev/null ;;
    *) echo "unknown variant $v" >&2; exit 2 ;;
  esac
  printf '%-8s ' "$v"
  (cd "$here/bench/experiments/placed_low" &&
     "$py" pairs.py 12000 "$rounds" "pgqueue.message_create('bench', '\\x01'::bytea)" ladder_a ladder_b | tail -1)
done
