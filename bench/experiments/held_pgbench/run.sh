#!/usr/bin/env bash
# Issue 12's held-snapshot case with pgbench clients (C, no client-side GIL) instead of the bench
# section's Python threads: producers and consumers at pgbench speed on one queue, a session
# holding the xmin horizon back for HOLD seconds after BEFORE seconds, then AFTER seconds free.
#
# usage: run.sh CONNINFO MODE CASE [BEFORE HOLD AFTER PRODUCERS CONSUMERS BACKLOG RATE]
#   CONNINFO  libpq connection options of a server where CREATE DATABASE works, e.g.
#             "host=/tmp/hp port=5499 user=postgres" (a database held_pgbench is made afresh)
#   MODE      delete (message_dequeue with p_lock_ms 0) | lease (dequeue with a lease + complete) |
#             bare (a DELETE ... SKIP LOCKED from each client's last key, without pgqueue's functions)
#   CASE      a: REPEATABLE READ that read another table; b: idle in transaction with an xid;
#             c: REPEATABLE READ that read pgqueue.message (keeps its ACCESS SHARE lock);
#             0: nothing held (the control); o: (b) in another database (the database postgres):
#             its xid is in every snapshot taken here, so the consumers' own xmins stay at it and
#             hold this database's horizon back as (b) does (docs/performance.md)
#   BEFORE HOLD AFTER   seconds (default 30 120 30)
#   PRODUCERS CONSUMERS pgbench clients (default 5 10: 15 in all, the issue's count)
#   BACKLOG   messages enqueued before the run (default 200000)
#   RATE      producers' total rate a second (pgbench -R; default: 0.9x the consumers' rate
#             measured alone for 10 s first, so the backlog stays about level)
# EXTRA_SQL=FILE (environment): a file run in the database after CREATE EXTENSION, e.g. another
# build of a function as CREATE OR REPLACE (bench/experiments/held_twin/take_wait.sh).
# Sessions run with synchronous_commit off, as the bench's held section does.
# Prints the per-second consumer rate and the statistics of bench/churn.py's _held_analysis:
# the free-running rate (median per second before the hold, first 5 s left out), the slowest
# 5-s window inside the hold against it, the mean over the hold, seconds until a 5-s window is
# back at 0.9x after it, and the growth of pgqueue.message (table + indexes) during the hold
# against the messages produced meanwhile; then the buffer accesses a call (producers' and
# consumers') before the hold and during it, in all and by relation of the schema pgqueue.
set -euo pipefail
CONN=${1:?conninfo}; MODE=${2:?mode}; CASE=${3:?case}
BEFORE=${4:-30}; HOLD=${5:-120}; AFTER=${6:-30}; NP=${7:-5}; NC=${8:-10}; BACKLOG=${9:-200000}; RATE=${10:-}
DB=held_pgbench
W=$(mktemp -d /tmp/held_pgbench.XXXXXX); chmod 777 "$W"
export PGOPTIONS="-c synchronous_commit=off"
psql "$CONN dbname=postgres" -qX -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
D="$CONN dbname=$DB"
psql "$D" -qX -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE EXTENSION pgqueue;
SELECT pgqueue.queue_create('q');
CREATE TABLE held_other AS SELECT 1 AS x;
SELECT count(*) FROM pgqueue.message_create_batch('q', array_fill('\x00'::bytea, ARRAY[$BACKLOG]));
VACUUM ANALYZE;
SQL
if [ -n "${EXTRA_SQL:-}" ]; then psql "$D" -qX -v ON_ERROR_STOP=1 -f "$EXTRA_SQL" >/dev/null; fi

echo "SELECT pgqueue.message_create('q', '{\"type\": \"performance test\", \"topic\": \"fifo queue read and write\"}'::bytea);" > "$W/produce.sql"
if [ "$MODE" = delete ]; then
  echo "SELECT * FROM pgqueue.message_dequeue('q', 1, 0);" > "$W/consume.sql"
elif [ "$MODE" = bare ]; then
  # no pgqueue function: one DELETE of the first ready message from where this client's last
  # take was (pgbench variables k and i), a client-side cursor without the session hints'
  # safety (it never looks below itself): a control for what a hold costs the server's side; a
  # client that finds nothing stops (\gset wants a row), so keep the backlog above the run's needs
  cat > "$W/consume.sql" <<'BARE'
WITH t AS (SELECT m.id FROM pgqueue.message m
            WHERE m.queue_id = (SELECT q.id FROM pgqueue.queue q WHERE q.name = 'q') AND m.locked_until IS NULL
              AND (m.dequeue_at, m.id) >= (:k, :i) AND m.dequeue_at <= pgqueue.now_ms()
            ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED)
DELETE FROM pgqueue.message m USING t WHERE m.id = t.id RETURNING m.dequeue_at AS k, m.id AS i \gset
BARE
  PGBENCH_VARS="-D k=0 -D i=0"
else
  printf '%s\n%s\n' "SELECT id, attempts FROM pgqueue.message_dequeue('q', 1, 30000) \gset" \
    "SELECT pgqueue.message_complete(:id, :attempts);" > "$W/consume.sql"
fi
if [ -z "$RATE" ]; then
  r=$(pgbench -n -f "$W/consume.sql" ${PGBENCH_VARS:-} -c "$NC" -j 2 -T 10 "$D" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  RATE=$(python3 -c "print(int(0.9 * $r))")
  psql "$D" -qX -c "SELECT count(*) FROM pgqueue.message_create_batch('q', array_fill('\x00'::bytea, ARRAY[${r%.*} * 10]))" >/dev/null
  psql "$D" -qX -c "VACUUM pgqueue.message" >/dev/null
fi
T=$((BEFORE + HOLD + AFTER))
echo "mode $MODE case $CASE: $NP producers at $RATE/s, $NC consumers, ${BEFORE}+${HOLD}+${AFTER} s, backlog $BACKLOG"
size() { psql "$D" -qXAt -c "SELECT pg_total_relation_size('pgqueue.message')"; }
(cd "$W" && pgbench -n -f produce.sql -c "$NP" -j 1 -R "$RATE" -T "$T" --aggregate-interval=1 -l --log-prefix=prod "$D" >prod.out 2>&1) &
PP=$!
(cd "$W" && pgbench -n -f consume.sql ${PGBENCH_VARS:-} -c "$NC" -j 2 -T "$T" --aggregate-interval=1 -l --log-prefix=cons "$D" >cons.out 2>&1) &
PC=$!
T0=$(date +%s.%N)
blocks() { psql "$D" -qXAt -c "SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()"; }
# buffer accesses by relation of the schema pgqueue (heap, toast, each index), as name=count,...
rels() { psql "$D" -qXAt -c "SELECT string_agg(n || '=' || b, ',') FROM (
  SELECT relname AS n, heap_blks_hit + heap_blks_read AS b FROM pg_statio_all_tables WHERE schemaname = 'pgqueue'
  UNION ALL SELECT indexrelname, idx_blks_hit + idx_blks_read FROM pg_statio_all_indexes WHERE schemaname = 'pgqueue'
  UNION ALL SELECT relname, blks_hit + blks_read FROM pg_statio_all_sequences WHERE schemaname = 'pgqueue') s WHERE b > 0"; }
sleep 5; B0=$(blocks); R0=$(rels); sleep $((BEFORE - 5))
S0=$(size); B1=$(blocks); R1=$(rels); H0=$(date +%s.%N)
case "$CASE" in
  a) (echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM held_other;"; sleep "$HOLD"; echo "COMMIT;") | psql "$D" -qX >/dev/null ;;
  b) (echo "BEGIN; SELECT txid_current();"; sleep "$HOLD"; echo "COMMIT;") | psql "$D" -qX >/dev/null ;;
  o) (echo "BEGIN; SELECT txid_current();"; sleep "$HOLD"; echo "COMMIT;") | psql "$CONN dbname=postgres" -qX >/dev/null ;;
  c) (echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pgqueue.message;"; sleep "$HOLD"; echo "COMMIT;") | psql "$D" -qX >/dev/null ;;
  0) sleep "$HOLD" ;;
  *) echo "unknown case $CASE" >&2; exit 2 ;;
esac
H1=$(date +%s.%N); S1=$(size); B2=$(blocks); R2=$(rels)
wait $PP $PC
python3 - "$W" "$T0" "$H0" "$H1" "$S0" "$S1" "$B0" "$B1" "$B2" "$R0" "$R1" "$R2" <<'PY'
import collections, glob, statistics, sys
w, t0, h0, h1, s0, s1, b0, b1, b2 = sys.argv[1], *map(float, sys.argv[2:10])
r0, r1, r2 = ({k: int(v) for k, v in (x.split("=") for x in a.split(",") if x)} for a in sys.argv[10:13])
def per_second(prefix):
    c = collections.Counter()
    for f in glob.glob(f"{w}/{prefix}.[0-9]*"):
        for line in open(f):
            p = line.split()
            c[int(p[0])] += int(p[1])
    if not c:
        return 0, []
    first = min(c)
    return first, [c.get(first + i, 0) for i in range(max(c) - first + 1)]
cf, cons = per_second("cons")
pf, prod = per_second("prod")
start, end = int(h0) - cf, int(h1) - cf + 1
before = cons[:start]
base = statistics.median(before[5:] or before)
roll = [sum(cons[i:i + 5]) / 5 for i in range(len(cons) - 4)]
during = roll[start:end - 4]
rec = next((i - end for i in range(end, len(roll)) if roll[i] >= 0.9 * base), None)
produced = sum(prod[int(h0) - pf:int(h1) - pf + 1])
print("consumed per second:", " ".join(map(str, cons)))
print(f"free-running {base:,.0f}/s; slowest 5 s of the hold {min(during):,.0f}/s = {min(during) / base:.2f}x; "
      f"mean over the hold {statistics.mean(cons[start:end]) / base:.2f}x; back to 0.9x after {rec} s; "
      f"growth {(s1 - s0) / 2**20:.1f} MiB for {produced:,} messages produced "
      f"({(s1 - s0) / max(produced, 1):.0f} bytes a message)")
n_before = sum(cons[int(t0) + 5 - cf:start]) + sum(prod[int(t0) + 5 - pf:int(h0) - pf])
n_during = sum(cons[start:end]) + sum(prod[int(h0) - pf:int(h1) - pf + 1])
print(f"buffer accesses a call (producers' and consumers'): before the hold {(b1 - b0) / max(n_before, 1):.1f}, "
      f"during it {(b2 - b1) / max(n_during, 1):.1f}")
for k in sorted((k for k in r2 if r2[k] - r0.get(k, 0) > 0.01 * max(n_before + n_during, 1)), key=lambda k: -(r2[k] - r1.get(k, 0))):
    print(f"  {k}: {(r1.get(k, 0) - r0.get(k, 0)) / max(n_before, 1):.2f} -> {(r2[k] - r1.get(k, 0)) / max(n_during, 1):.2f}")
PY
grep -h "^tps\|number of transactions actually" "$W"/*.out || true
rm -rf "$W"
