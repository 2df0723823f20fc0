#!/usr/bin/env bash
# A/B of the ordered hand-off's three functions (message_dequeue, message_complete,
# pgqueue._message_left; FUNCS: other files of extension/src/functions/messages, by name) in one
# database: A as at git revision REV, B as in the tree, installed in
# turn with CREATE OR REPLACE over the tree's extension (A's older signatures are created beside
# B's). A grouped queue (group concurrency 1, GROUPS groups; 0: a queue without groups) is
# topped up to 150,000 messages or more and vacuumed before each run; pgbench SCRIPT (a script
# of bench/pgbench or a file; default pgqueue_dequeue, delete mode) at CLIENTS clients for
# SECONDS, synchronous_commit off; the order
# of A and B alternates by round. Prints transactions/s and messages delivered a second
# (pgqueue.queue_counters) of A and B, and B/A, for each round.
# (Sessions 80 and 81 measured the groups' wait floor with it: docs/performance.md, "Message
# groups under a held snapshot".)
# Usage (a server on the default socket where the role may create databases):
#   [SCRIPT=bench/experiments/group_handoff/lease_cycle.sql] [FUNCS=_message_take] bench/experiments/group_handoff/ab_rev.sh REV [ROUNDS] [SECONDS] [CLIENTS] [GROUPS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
rev=$1 rounds=${2:-6} secs=${3:-5} clients=${4:-4} groups=${5:-10} script=${SCRIPT:-pgqueue_dequeue}
db=group_handoff_ab
case $script in *.sql) script_file=$(cd "$(dirname "$script")" && pwd)/$(basename "$script") ;; *) script_file=$root/bench/pgbench/$script.sql ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$root/bench/experiments/group_handoff/ab_sql.sh"
# shellcheck disable=SC2086  # (FUNCS: names split on spaces)
ab_sql "$root" "$rev" "$tmp" ${FUNCS:-message_dequeue message_complete _message_left}
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" 2>/dev/null
if [ "$groups" = 0 ]; then gc=NULL; else gc=1; fi  # GROUPS 0: a queue without groups
psql -q -X -d $db -c "CREATE EXTENSION pgqueue" -c "SELECT pgqueue.queue_create('q', p_group_concurrency => $gc)" >/dev/null
run() {  # build -> transactions/s
  psql -q -X -v ON_ERROR_STOP=1 -d $db -f "$tmp/$1.sql" >/dev/null
  psql -qAtX -d $db -c "SELECT count(*) FROM pgqueue.message_create_batch('q', array_fill('\x01'::bytea, ARRAY[200000]),
      p_groups => CASE WHEN $groups > 0 THEN ARRAY(SELECT 'g' || (i % nullif($groups, 0)) FROM generate_series(1, 200000) i) END)
      WHERE (SELECT count(*) < 150000 FROM pgqueue.message)" >/dev/null
  psql -qX -d $db -c "VACUUM pgqueue.message"
  # (with bench/pgbench/pgqueue_lease_cycle.sql a client whose dequeue finds nothing ends, and
  # pgbench exits 2: the rate of the others still counts, and the first error is printed to
  # stderr, as is any other failure; lease_cycle.sql here lets such a dequeue find nothing)
  local d0 d1 tps rc=0
  d0=$(psql -qAtX -d $db -c "SELECT delivered FROM pgqueue.queue_counters('q')")
  PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" \
      -D queue=q -f "$script_file" $db > "$tmp/pgbench.log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    echo "build $1: pgbench exited $rc: $(grep -m1 -iE 'error|abort' "$tmp/pgbench.log")" >&2
  fi
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$tmp/pgbench.log")
  d1=$(psql -qAtX -d $db -c "SELECT delivered FROM pgqueue.queue_counters('q')")
  echo "${tps:-0} $(( (d1 - d0) / secs ))"
}
# (transactions/s counts a lease cycle whose dequeue found nothing; delivered/s does not)
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) = 1 ]; then a=($(run A)); b=($(run B)); else b=($(run B)); a=($(run A)); fi
  echo "round $i: transactions/s A ${a[0]} B ${b[0]} B/A $(python3 -c "print(round(${b[0]} / ${a[0]}, 3) if ${a[0]} else 'n/a')");" \
       "delivered/s A ${a[1]} B ${b[1]} B/A $(python3 -c "print(round(${b[1]} / ${a[1]}, 3) if ${a[1]} else 'n/a')")"
done
psql -q -X -d postgres -c "DROP DATABASE $db"
