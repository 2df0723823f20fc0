#!/usr/bin/env bash
# A capped queue kept at its cap: producers faster than the consumers, as back-pressure is meant
# for. PRODUCERS pgbench clients try message_create on a queue of max_size CAP that starts full
# (a PQ003 is caught by a helper function, so pgbench goes on, and the producer sleeps BACKOFF
# ms before it tries again), while
# CONSUMERS pgbench clients (0: none, the consumers are down) dequeue in delete mode, for SECONDS
# (synchronous_commit off). Prints
# each side's attempts a second, the messages admitted and dequeued, the backlog at the end, and
# how busy the machine's CPUs were (/proc/stat, everything on the machine).
# Before 0.4's recount window every attempt the bound could not admit counted the queue again
# (up to CAP + 1 index entries) while holding the queue's pgqueue.queue_size row lock.
# Usage: bench/experiments/capped_full/run.sh DB [CAP] [PRODUCERS] [CONSUMERS] [SECONDS] [BACKOFF]
set -euo pipefail
db=$1 cap=${2:-100000} producers=${3:-4} consumers=${4:-2} secs=${5:-20} backoff=${6:-10}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
psql -qAt -d "$db" -c "SELECT pgqueue.queue_drop('capped_full')" >/dev/null 2>&1 || true
psql -qAt -d "$db" -v ON_ERROR_STOP=1 <<SQL >/dev/null
SELECT pgqueue.queue_create('capped_full', p_max_size => $cap);
SELECT count(*) FROM pgqueue.message_create_batch('capped_full', array_fill('\x0102'::bytea, ARRAY[$cap]));
CREATE OR REPLACE FUNCTION public.capped_full_try() RETURNS boolean LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM pgqueue.message_create('capped_full', '\x0102'::bytea);
    RETURN true;
EXCEPTION WHEN SQLSTATE 'PQ003' THEN
    RETURN false;
END;
\$\$;
SQL
psql -q -d "$db" -c "VACUUM ANALYZE pgqueue.message" -c "VACUUM pgqueue.queue_size"
cat > "$dir/produce.sql" <<PGB
SELECT public.capped_full_try() AS ok \\gset
\\if :ok
\\else
\\sleep $backoff ms
\\endif
PGB
echo "SELECT count(*) FROM pgqueue.message_dequeue('capped_full', 1, 0);" > "$dir/consume.sql"
cpu() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat; }
read -r busy0 total0 < <(cpu)
enq0=$(psql -qAt -d "$db" -c "SELECT enqueued FROM pgqueue.queue_counters('capped_full')")
deq0=$(psql -qAt -d "$db" -c "SELECT delivered FROM pgqueue.queue_counters('capped_full')")
PGOPTIONS="-c synchronous_commit=off" pgbench -n -c "$producers" -j 1 -T "$secs" -f "$dir/produce.sql" "$db" \
  > "$dir/p.out" 2>&1 &
if [ "$consumers" -gt 0 ]; then
  PGOPTIONS="-c synchronous_commit=off" pgbench -n -c "$consumers" -j 1 -T "$secs" -f "$dir/consume.sql" "$db" \
    > "$dir/c.out" 2>&1
else
  echo "tps = 0" > "$dir/c.out"
fi
wait
read -r busy1 total1 < <(cpu)
enq1=$(psql -qAt -d "$db" -c "SELECT enqueued FROM pgqueue.queue_counters('capped_full')")
deq1=$(psql -qAt -d "$db" -c "SELECT delivered FROM pgqueue.queue_counters('capped_full')")
left=$(psql -qAt -d "$db" -c "SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = 'capped_full'")
echo "cap $cap, $producers producers (a refusal: $backoff ms back-off), $consumers consumers, $secs s"
echo "producers: $(grep -E '^tps' "$dir/p.out" | head -1 | awk '{print $3}') attempts/s, admitted $((enq1 - enq0)) ($(( (enq1 - enq0) / secs ))/s)"
echo "consumers: $(grep -E '^tps' "$dir/c.out" | head -1 | awk '{print $3}') calls/s, dequeued $((deq1 - deq0)) ($(( (deq1 - deq0) / secs ))/s)"
echo "backlog at the end: $left of $cap; the machine's CPUs $(( 100 * (busy1 - busy0) / (total1 - total0) ))% busy"
psql -qAt -d "$db" -c "SELECT pgqueue.queue_drop('capped_full')" -c "DROP FUNCTION public.capped_full_try()" >/dev/null
