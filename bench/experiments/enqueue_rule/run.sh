#!/usr/bin/env bash
# Enqueue by an INSERT through an INSTEAD rule (setup.sql) against message_create, a ladder of
# plain INSERTs into pgqueue.message (below), a raw single-row INSERT and pgmq's send, at
# CLIENTS pgbench clients with durable commits, all alternated in ROUNDS rounds of SECONDS s; the tables are emptied and vacuumed after each round.
# Prints each run's transactions/s, then each median against message_create, raw INSERT and pgmq.
# Usage (a server on the default socket with pgqueue and pgmq installed, a role that may create
# databases): bench/experiments/enqueue_rule/run.sh [ROUNDS SECONDS CLIENTS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=$(cd "$here/../.." && pwd)
rounds=${1:-6}; secs=${2:-6}; clients=${3:-15}
db=enqueue_rule
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -q -X -d $db -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pgqueue" -c "CREATE EXTENSION pgmq" \
    -c "SELECT pgqueue.queue_create('q')" -c "SELECT pgmq.create('bench')" \
    -f "$bench/sql/00_ceiling.sql" -f "$here/setup.sql" > /dev/null
payload='{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'
for v in b c; do
    echo "INSERT INTO rx.enqueue_$v (queue, content) VALUES (:queue, '$payload'::bytea) RETURNING id;" > "$out/rule_$v.sql"
done
# the floor of the table itself and a ladder up to rule_b's statement, as plain statements (what
# the rule rewrites an INSERT into): pgqueue.message's INSERT with the queue's id given (its
# trigger's WHEN clause and its indexes' predicates still run), + the queue found by name, + its
# lock stripe, + the enqueued counter
qid=$(psql -X -At -d $db -c "SELECT id FROM pgqueue.queue WHERE name = 'q'")
cols="INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, write_mark)"
vals="pgqueue.now_ms(), pgqueue.now_ms(), '$payload'::bytea, false"
echo "$cols VALUES ($qid, $vals) RETURNING id;" > "$out/table_only.sql"
echo "$cols SELECT q.id, $vals FROM pgqueue.queue q WHERE q.name = :queue RETURNING id;" > "$out/plus_lookup.sql"
echo "$cols SELECT q.id, $vals FROM pgqueue.queue q WHERE q.name = :queue
    AND pgqueue._queue_lock(q.id) RETURNING id;" > "$out/plus_lock.sql"
echo "$cols SELECT q.id, $vals FROM pgqueue.queue q WHERE q.name = :queue
    AND pgqueue._queue_lock(q.id) AND pg_catalog.nextval(pgqueue._count_seq(q.id, 0)) > 0 RETURNING id;" > "$out/plus_counter.sql"
cp "$bench/pgbench/pgqueue_create.sql" "$out/message_create.sql"
cp "$bench/pgbench/raw_insert.sql" "$out/raw_insert.sql"
cp "$bench/pgbench/pgmq_send.sql" "$out/pgmq_send.sql"
names="message_create rule_b rule_c table_only plus_lookup plus_lock plus_counter raw_insert pgmq_send"
for r in $(seq "$rounds"); do
    for s in $names; do
        tps=$(pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -D queue=q -f "$out/$s.sql" $db 2>&1 \
              | grep -oP 'tps = \K[0-9.]+' | head -1)
        echo "round $r $s $tps" | tee -a "$out/all"
    done
    psql -q -X -d $db -c "TRUNCATE pgqueue.message, bench_raw.message" -c "DELETE FROM pgmq.q_bench" \
        -c "VACUUM pgqueue.message, bench_raw.message, pgmq.q_bench"
done
python3 - "$out/all" $names <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {n: statistics.median(float(r[3]) for r in rows if r[2] == n) for n in sys.argv[2:]}
for n, v in med.items():
    print(f"{n:15s} {v:9.0f}/s  vs message_create {v / med['message_create']:.2f}x"
          f"  vs raw INSERT {v / med['raw_insert']:.2f}x  vs pgmq send {v / med['pgmq_send']:.2f}x")
PY
