#!/usr/bin/env bash
# Producers of a capped queue (max_size) while a snapshot is held: every admission updates the
# queue's pgqueue.queue_size row (pgqueue._queue_reserve), and under a held snapshot that row's
# dead versions pile up, so each producer's FOR UPDATE walks more of them (issue 12's pitfall of
# "a row that every call updates"). Runs CLIENTS pgbench producers for SECONDS on a capped and
# on an uncapped queue of database DB (pgqueue installed, synchronous_commit off), printing
# pgbench's 5-s progress: first with nothing held, then with a REPEATABLE READ snapshot held
# from 5 s after the start to 10 s before the end. The cap (10,000,000) is never reached.
# Usage: bench/experiments/capped_held/run.sh DB [CLIENTS] [SECONDS]
set -euo pipefail
db=$1 clients=${2:-4} secs=${3:-60}
script=$(mktemp)
trap 'rm -f "$script"' EXIT
for q in held_capped held_uncapped; do
  psql -qAt -d "$db" -c "SELECT pgqueue.queue_drop('$q')" >/dev/null 2>&1 || true
done
psql -qAt -d "$db" -c "SELECT pgqueue.queue_create('held_capped', p_max_size => 10000000)" \
  -c "SELECT pgqueue.queue_create('held_uncapped')" >/dev/null
for q in held_capped held_uncapped; do
  echo "SELECT pgqueue.message_create('$q', '\x0102'::bytea);" > "$script"
  for hold in no yes; do
    psql -q -d "$db" -c "VACUUM pgqueue.queue_size" -c "VACUUM pgqueue.message"
    if [ "$hold" = yes ]; then
      (sleep 5; psql -q -d "$db" -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM pg_class" \
         -c "SELECT pg_sleep($secs - 15)" -c "COMMIT" >/dev/null) &
    fi
    echo "== $q, snapshot held from 5 s to $((secs - 10)) s: $hold"
    PGOPTIONS="-c synchronous_commit=off" pgbench -n -M prepared -c "$clients" -j 2 -T "$secs" -P 5 \
      -f "$script" "$db" 2>&1 | grep -E '^progress|^tps' | sed 's/ (without initial connection time)//'
    wait
  done
done
for q in held_capped held_uncapped; do
  psql -qAt -d "$db" -c "SELECT pgqueue.queue_drop('$q')" >/dev/null
done
