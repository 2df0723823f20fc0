\set VERBOSITY terse
SET client_min_messages = warning;
-- Consuming: order (dequeue_at, id), priorities, schedules, lease vs delete mode, limits.
-- pg_regress shows scenarios and their output; which bad call gets which SQLSTATE (here: limits
-- and lease lengths out of range) is tested in tests/pgtap/20_errors.sql.

SELECT pgqueue.queue_create('qdeq', p_lock_ms => 60000);
SELECT pgqueue.queue_create('qother');

-- An empty queue returns no rows (the no-argument call uses the default queue).
SELECT * FROM pgqueue.message_dequeue();
SELECT count(*) AS got FROM pgqueue.message_dequeue('qdeq', 100);

-- FIFO by id among messages with the same dequeue_at (one transaction: one now()).
BEGIN;
SELECT count(pgqueue.message_create('qdeq', convert_to('m' || g, 'UTF8'))) AS created FROM generate_series(1, 5) g;
COMMIT;
SELECT pgqueue.message_create('qother', convert_to('other', 'UTF8')) AS other_id \gset
SELECT convert_from(content, 'UTF8') AS content, attempts FROM pgqueue.message_dequeue('qdeq');
SELECT convert_from(content, 'UTF8') AS content, attempts FROM pgqueue.message_dequeue('qdeq', 2);
SELECT convert_from(content, 'UTF8') AS content, attempts FROM pgqueue.message_dequeue('qdeq', 10);
SELECT count(*) AS got FROM pgqueue.message_dequeue('qdeq', 10);
-- The other queue's message was not touched.
SELECT attempts, locked_until FROM pgqueue.message WHERE id = :other_id;
DELETE FROM pgqueue.message m USING pgqueue.queue q WHERE q.id = m.queue_id AND q.name = 'qdeq';

-- The same explicit dequeue_at in separate transactions: still by id.
SELECT count(pgqueue.message_create('qdeq', convert_to('x' || g, 'UTF8'), 1000)) AS created FROM generate_series(1, 3) g;
SELECT convert_from(content, 'UTF8') AS content, dequeue_at FROM pgqueue.message_dequeue('qdeq', 10, 0);

-- Priorities: negative dequeue_at goes first, larger priority first, then normal messages,
-- and scheduled messages are not delivered before their time.
SELECT pgqueue.message_create('qdeq', convert_to('normal-1', 'UTF8')) > 0 AS created;
SELECT pgqueue.message_create('qdeq', convert_to('scheduled', 'UTF8'), pgqueue.now_ms() + 3600000) > 0 AS created;
SELECT pgqueue.message_create('qdeq', convert_to('prio-0', 'UTF8'), pgqueue.priority_dequeue_at(0)) > 0 AS created;
SELECT pgqueue.message_create('qdeq', convert_to('prio-9', 'UTF8'), pgqueue.priority_dequeue_at(9)) > 0 AS created;
SELECT pgqueue.message_create('qdeq', convert_to('normal-2', 'UTF8')) > 0 AS created;
SELECT pgqueue.message_create('qdeq', convert_to('prio-9b', 'UTF8'), pgqueue.priority_dequeue_at(9)) > 0 AS created;
SELECT pgqueue.message_create('qdeq', convert_to('past', 'UTF8'), pgqueue.to_epoch(now() - interval '1 day')) > 0 AS created;
SELECT convert_from(content, 'UTF8') AS content, attempts,
       CASE WHEN dequeue_at < 0 THEN dequeue_at::text ELSE 'time' END AS dequeue_at
  FROM pgqueue.message_dequeue('qdeq', 100, 0);
SELECT queue, ready, scheduled, leased FROM pgqueue.queue_stats('qdeq');
SELECT count(*) AS got FROM pgqueue.message_dequeue('qdeq', 100);
DELETE FROM pgqueue.message m USING pgqueue.queue q WHERE q.id = m.queue_id AND q.name = 'qdeq';

-- A message scheduled a little ahead is delivered once its time has come.
SELECT pgqueue.message_create('qdeq', convert_to('soon', 'UTF8'), pgqueue.now_ms() + 500) AS soon_id \gset
SELECT count(*) AS got_early FROM pgqueue.message_dequeue('qdeq');
SELECT pg_sleep(0.6);
SELECT id = :soon_id AS got_soon FROM pgqueue.message_dequeue('qdeq', 1, 0);

-- Lease mode (the default): the row stays, leased for the queue's lock_ms, attempts counts up;
-- the returned row carries every column.
SELECT pgqueue.message_create('qdeq', convert_to('leased', 'UTF8'), NULL, 'text/plain') AS lease_id \gset
SELECT pgqueue.now_ms() AS before_ms \gset
SELECT id = :lease_id AS is_it, convert_from(content, 'UTF8') AS content, attempts,
       dequeue_at BETWEEN created_at AND :before_ms AS due_at_creation, state, content_type,
       locked_until BETWEEN :before_ms + 60000 AND pgqueue.now_ms() + 60000 AS leased_for_lock_ms
  FROM pgqueue.message_dequeue('qdeq');
SELECT attempts, locked_until IS NOT NULL AS locked FROM pgqueue.message WHERE id = :lease_id;
-- A leased message is not delivered again while its lease lasts.
SELECT count(*) AS got FROM pgqueue.message_dequeue('qdeq');
DELETE FROM pgqueue.message WHERE id = :lease_id;
-- p_lock_ms overrides the queue's lease length.
SELECT pgqueue.message_create('qdeq', convert_to('short', 'UTF8')) AS short_id \gset
SELECT pgqueue.now_ms() AS before_ms \gset
SELECT locked_until BETWEEN :before_ms + 5000 AND pgqueue.now_ms() + 5000 AS leased_for_5s
  FROM pgqueue.message_dequeue('qdeq', 1, 5000);
DELETE FROM pgqueue.message WHERE id = :short_id;

-- Delete mode (p_lock_ms => 0): the message is returned once and removed.
SELECT pgqueue.message_create('qdeq', convert_to('gone', 'UTF8'), NULL, 'text/plain') AS gone_id \gset
SELECT id = :gone_id AS is_it, convert_from(content, 'UTF8') AS content, attempts, content_type,
       locked_until
  FROM pgqueue.message_dequeue('qdeq', p_lock_ms => 0);
SELECT count(*) AS remaining FROM pgqueue.message WHERE id = :gone_id;
SELECT pgqueue.message_complete(:gone_id, 1) AS complete_after_delete;

-- A dequeue that is rolled back hands the message out again, with attempts unchanged.
SELECT pgqueue.message_create('qdeq', convert_to('rolled back', 'UTF8')) AS rb_id \gset
BEGIN;
SELECT id = :rb_id AS is_it, attempts FROM pgqueue.message_dequeue('qdeq');
ROLLBACK;
SELECT attempts, locked_until IS NULL AS ready FROM pgqueue.message WHERE id = :rb_id;
SELECT id = :rb_id AS is_it, attempts FROM pgqueue.message_dequeue('qdeq', 1, 0);

-- Limits: p_limit caps the batch; 10000 is the largest allowed.
SELECT count(*) FROM pgqueue.message_create_batch('qdeq', ARRAY(SELECT convert_to(g::text, 'UTF8') FROM generate_series(1, 25) g));
SELECT count(*) AS got FROM pgqueue.message_dequeue('qdeq', 10);
SELECT count(*) AS got FROM pgqueue.message_dequeue('qdeq', 10000);
SELECT count(*) AS got FROM pgqueue.message_dequeue('qdeq', 10000);
-- Returned rows of a batch are in delivery order.
SELECT count(pgqueue.message_create('qdeq', convert_to('b' || g, 'UTF8'), 1000 - g)) AS created FROM generate_series(1, 4) g;
SELECT convert_from(content, 'UTF8') AS content, dequeue_at FROM pgqueue.message_dequeue('qdeq', 4, 0);

-- The no-argument call takes one message of the default queue with the default lease.
SELECT pgqueue.message_create(convert_to('default msg', 'UTF8')) AS def_id \gset
SELECT id = :def_id AS is_it, convert_from(content, 'UTF8') AS content, attempts,
       locked_until > pgqueue.now_ms() AS leased
  FROM pgqueue.message_dequeue();
SELECT pgqueue.message_complete(:def_id, 1);

SELECT pgqueue.queue_drop('qdeq'), pgqueue.queue_drop('qother');

-- A session hint setting that pgqueue did not write (malformed) is ignored, not an error.
SELECT set_config('pgqueue.hint_' || q.id, 'garbage', false) IS NOT NULL AS hint_set
  FROM pgqueue.queue q WHERE q.name = 'default';
SELECT pgqueue.message_create('default', convert_to('g', 'UTF8')) > 0 AS created;
SELECT convert_from(content, 'UTF8') AS got FROM pgqueue.message_dequeue('default', 10, 0);
SELECT current_setting('pgqueue.hint_' || q.id) ~ ('^\{' || pg_backend_pid() || ',') AS hint_written
  FROM pgqueue.queue q WHERE q.name = 'default';
-- A poll that finds nothing stays read-only: the hints take no xid of their own.
BEGIN;
SELECT count(*) AS got FROM pgqueue.message_dequeue('default', 10, 0);
SELECT pg_current_xact_id_if_assigned() IS NULL AS read_only;
COMMIT;

-- Trigger message_placed_low signals a row placed below the clock by plain SQL (the queue's lock
-- stripe moves: consumers' hints look again from the bottom), by the clock when the trigger runs:
-- a row keyed with a clock reading taken 50 ms before counts as placed low (pgqueue's own
-- functions vouch for such rows instead: below). A setting pgqueue.write_clock, which an earlier
-- build compared with, changes nothing: a reading of it from 100 ms ago, the kind that build
-- honoured (it took a key at or above such a reading, less 5 ms, for a row keyed with its
-- writer's clock), leaves a row keyed 50 ms below the clock signalled.
SELECT q.id AS def_q FROM pgqueue.queue q WHERE q.name = 'default' \gset
CREATE TEMP VIEW stripe AS
    SELECT coalesce(pg_sequence_last_value(pgqueue._lock_stripe(:def_q)), 0) AS v;
SELECT v AS stripe0 FROM stripe \gset
INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content)
VALUES (:def_q, pgqueue.now_ms() + 1000, 0, '\x00');
SELECT v = :stripe0 AS future_key_no_signal FROM stripe;
INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content)
SELECT :def_q, k.at, 0, '\x00'
  FROM (SELECT pgqueue._write_clock() AS at OFFSET 0) k,
       LATERAL (SELECT pg_sleep(0.05) WHERE k.at IS NOT NULL) late;
SELECT v = :stripe0 + 1 AS late_trigger_signals FROM stripe;
SELECT set_config('pgqueue.write_clock', (pgqueue.now_ms() - 100)::text, false) IS NOT NULL AS clock_set;
INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content)
VALUES (:def_q, pgqueue.now_ms() - 50, 0, '\x00');
SELECT v = :stripe0 + 2 AS low_key_signals FROM stripe;
RESET pgqueue.write_clock;
SELECT count(*) AS signalled_rows FROM pgqueue.message_dequeue('default', 10, 0);
DELETE FROM pgqueue.message WHERE queue_id = :def_q;

-- pgqueue's own writes keyed from their clock reading vouch for their rows (column write_mark:
-- set by an INSERT, flipped by an UPDATE), so the trigger function never runs for them: a
-- default or future dequeue_at, a batch, a lease, a heartbeat, a retry after its back-off, a
-- defer to now. A write that leaves the mark as it was goes through the trigger function, which
-- signals a key below the clock: a given dequeue_at in the past, plain SQL.
BEGIN;
SET LOCAL track_functions = 'pl';
CREATE TEMP VIEW placed_low_calls AS
    SELECT coalesce((SELECT calls FROM pg_stat_xact_user_functions
                      WHERE funcid = 'pgqueue._message_placed_low()'::regprocedure), 0) AS n;
SELECT pgqueue.message_create('default', '\x01') > 0 AS created,
       pgqueue.message_create('default', '\x02', pgqueue.now_ms() + 60000) > 0 AS scheduled,
       (SELECT count(*) FROM pgqueue.message_create_batch('default', ARRAY['\x03', '\x04']::bytea[])) AS batch;
SELECT id AS vid, attempts AS vatt FROM pgqueue.message_dequeue('default', 1, 30000) \gset
SELECT pgqueue.message_heartbeat(:vid, :vatt, 60000) AS heartbeat,
       pgqueue.message_fail(:vid, :vatt, 'retry') AS failed;
SELECT id AS vid, attempts AS vatt FROM pgqueue.message_dequeue('default', 1, 30000) \gset
SELECT pgqueue.message_defer(:vid, :vatt, NULL::bigint, NULL::bytea) AS deferred;
SELECT n AS trigger_function_calls FROM placed_low_calls;
SELECT v AS stripe1 FROM stripe \gset
SELECT pgqueue.message_create('default', '\x05', pgqueue.now_ms() - 1000) > 0 AS created_low;
SELECT n AS trigger_function_calls, (SELECT v = :stripe1 + 1 FROM stripe) AS signalled FROM placed_low_calls;
UPDATE pgqueue.message SET dequeue_at = pgqueue.now_ms() - 50 WHERE id = :vid;
SELECT n AS trigger_function_calls, (SELECT v = :stripe1 + 2 FROM stripe) AS signalled FROM placed_low_calls;
UPDATE pgqueue.message SET dequeue_at = pgqueue.now_ms() + 60000 WHERE id = :vid;
SELECT n AS trigger_function_calls, (SELECT v = :stripe1 + 2 FROM stripe) AS not_signalled FROM placed_low_calls;
ROLLBACK;
DROP VIEW stripe;

-- A restart from the bottom that a stripe move recorded (the transactions below it have ended)
-- moves the fast start F (the key of the session's last take) to the bottom with the hints: the
-- row placed low (here a priority message, beside leases that ran out) that the moving call did
-- not take lies below F, and the next take of one message must find it before later ones. The
-- session looked for expired leases less than 20 ms ago (the setting), so that take is the
-- statement of the ready probe alone; it took m2 (a review). Ungrouped, then grouped (turn keys).
CREATE FUNCTION pg_temp.got(p_queue text, p_limit integer)
RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(convert_from(d.content, 'UTF8'), ' '), '-')
      FROM pgqueue.message_dequeue(p_queue, p_limit) d $$;
CREATE FUNCTION pg_temp.fill(p_queue text, p_names text[])
RETURNS bigint LANGUAGE sql AS $$
    SELECT count(pgqueue.message_create_text(p_queue, x, p_group => CASE WHEN p_queue = 'qfg' THEN 'g-' || x END))
      FROM unnest(p_names) x $$;
SELECT pgqueue.queue_create('qf', p_lock_ms => 600000) IS NOT NULL AS created,
       pgqueue.queue_create('qfg', p_lock_ms => 600000, p_group_concurrency => 1) IS NOT NULL AS created_grouped;
SELECT pg_temp.fill('qf', ARRAY['e1', 'e2', 'e3', 'e4']), pg_temp.fill('qfg', ARRAY['e1', 'e2', 'e3', 'e4']);
SELECT pg_temp.got('qf', 4) AS leased;
SELECT pg_temp.got('qfg', 4) AS leased;
SELECT pg_temp.fill('qf', ARRAY['m1', 'm2', 'm3', 'm4', 'm5']), pg_temp.fill('qfg', ARRAY['m1', 'm2', 'm3', 'm4', 'm5']);
SELECT pg_temp.got('qf', 1) AS first;
SELECT pg_temp.got('qfg', 1) AS first;
UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1000
 WHERE queue_id IN (SELECT id FROM pgqueue.queue WHERE name IN ('qf', 'qfg'))
   AND convert_from(content, 'UTF8') LIKE 'e%';
SELECT pgqueue.message_create_text('qf', 'urgent', pgqueue.priority_dequeue_at(1)) > 0 AS urgent,
       pgqueue.message_create_text('qfg', 'urgent', pgqueue.priority_dequeue_at(1), p_group => 'g-urgent') > 0 AS urgent;
SELECT pg_temp.got('qf', 2) AS moving;
SELECT pg_temp.got('qfg', 2) AS moving;
BEGIN;
SELECT pg_temp.got('qf', 2) AS restarted;
SELECT set_config('pgqueue.lease_check_' || id, pgqueue.now_ms()::text, false) IS NOT NULL AS looked
  FROM pgqueue.queue WHERE name = 'qf';
SELECT pg_temp.got('qf', 1) AS next;
COMMIT;
BEGIN;
SELECT pg_temp.got('qfg', 2) AS restarted;
SELECT set_config('pgqueue.lease_check_' || id, pgqueue.now_ms()::text, false) IS NOT NULL AS looked
  FROM pgqueue.queue WHERE name = 'qfg';
SELECT pg_temp.got('qfg', 1) AS next;
COMMIT;
SELECT pgqueue.queue_drop('qf'), pgqueue.queue_drop('qfg');
