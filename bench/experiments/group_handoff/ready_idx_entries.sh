#!/usr/bin/env bash
# What one index entry fewer would save the hand-off (issue 14; a measurement, not a change).
# The hand-off's UPDATE gives a waiting message its turn (turn_at NULL -> a key). It is never a
# HOT update, so the new row version gets an entry in every index whose predicate it meets:
# message_pkey, message_ready_idx, message_turn_idx and message_group_turn_idx. B rebuilds
# message_ready_idx without the messages that have their turn (`AND turn_at IS NULL`), which
# leaves three; A rebuilds it as it is. Each round times 20,000 such UPDATEs of random waiting
# messages, a transaction each (synchronous_commit off, one session, a DO loop), then puts the
# rows back and vacuums. 10,000 groups of 20 messages, concurrency 1. The database is dropped
# and made again (default: handoff_entries).
# Usage (a server on the default socket where the role may create databases, pgqueue installed):
#   bench/experiments/group_handoff/ready_idx_entries.sh [ROUNDS] [DB]
set -euo pipefail
rounds=${1:-3} db=${2:-handoff_entries}
psql -q -X -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -q -X -d "$db" >/dev/null <<'SQL'
CREATE EXTENSION pgqueue;
SELECT pgqueue.queue_create('g', p_group_concurrency => 1);
SELECT count(*) FROM pgqueue.message_create_batch('g', ARRAY(SELECT '\x00'::bytea FROM generate_series(1, 200000)),
       p_groups => ARRAY(SELECT 'g' || (g % 10000) FROM generate_series(1, 200000) g));
SQL
round() {
  local where="locked_until IS NULL"
  [ "$1" = B ] && where="locked_until IS NULL AND turn_at IS NULL"
  psql -q -X -d "$db" -c "DROP INDEX pgqueue.message_ready_idx" \
    -c "CREATE INDEX message_ready_idx ON pgqueue.message (queue_id, dequeue_at, id) WHERE $where" \
    -c "VACUUM ANALYZE pgqueue.message"
  printf '%s ' "$1"
  psql -q -X -d "$db" 2>&1 >/dev/null <<'SQL' | grep -o 'µs an UPDATE: .*'
CREATE TEMP TABLE ids AS SELECT id FROM pgqueue.message WHERE turn_at IS NULL ORDER BY random() LIMIT 20000;
SET synchronous_commit = off;
DO $$
DECLARE t0 timestamptz := clock_timestamp(); r record;
BEGIN
  FOR r IN SELECT id FROM ids LOOP
    UPDATE pgqueue.message SET turn_at = 1 WHERE id = r.id;
    COMMIT;
  END LOOP;
  RAISE NOTICE 'µs an UPDATE: %', round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / 20000, 1);
END $$;
UPDATE pgqueue.message m SET turn_at = NULL FROM ids WHERE m.id = ids.id;
VACUUM pgqueue.message;
SQL
}
for _ in $(seq "$rounds"); do round B; round A; done
psql -q -X -d postgres -c "DROP DATABASE $db"
