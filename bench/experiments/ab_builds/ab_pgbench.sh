#!/usr/bin/env bash
# Two databases side by side at 15 clients: each holds pgqueue (two builds, e.g. one with a
# function replaced by CREATE OR REPLACE) and a queue 'bench'; a pgbench script of bench/pgbench
# runs against each in turn, ROUNDS times, durable commits. Each round tops both backlogs up to
# 200,000 ready messages or more and vacuums them first. With HOLD=1, a REPEATABLE READ session
# that has read pg_class holds its snapshot in the database under test through each run; with
# HOLD=b, a session holds an xid instead (issue 12's case b: SELECT txid_current(), then asleep).
# Prints transactions/s of A and B and the ratio B/A for each round, then the median ratio.
# Usage: [HOLD=1|b] bench/experiments/ab_builds/ab_pgbench.sh DB_A DB_B SCRIPT [ROUNDS] [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
a=$1 b=$2 script=$here/pgbench/$3.sql rounds=${4:-4} secs=${5:-6}
run() {  # database -> transactions/s
  psql -qAt -d "$1" -c "SELECT count(*) FROM pgqueue.message_create_batch('bench',
      array_fill('\x01'::bytea, ARRAY[300000])) WHERE (SELECT count(*) < 200000 FROM pgqueue.message)" >/dev/null
  psql -q -d "$1" -c "VACUUM pgqueue.message"
  if [ "${HOLD:-0}" = 1 ]; then
    psql -q -d "$1" -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM pg_class" \
      -c "SELECT pg_sleep($secs + 2)" -c "COMMIT" >/dev/null &
    sleep 1
  elif [ "${HOLD:-0}" = b ]; then
    psql -q -d "$1" -c "BEGIN" -c "SELECT txid_current()" -c "SELECT pg_sleep($secs + 2)" -c "COMMIT" >/dev/null &
    sleep 1
  fi
  pgbench -n -M prepared -c 15 -j 2 -T "$secs" -D queue=bench -D aid=0 -D atok=0 -f "$script" "$1" 2>/dev/null \
    | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
  wait
}
ratios=()
for _ in $(seq "$rounds"); do
  ta=$(run "$a"); tb=$(run "$b")
  ratios+=("$(echo "scale=3; $tb / $ta" | bc)")
  echo "$ta $tb ${ratios[-1]}"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{r[NR] = $1} END {print "median ratio B/A:", r[int((NR + 1) / 2)]}'
