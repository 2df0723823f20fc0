-- The error contract of the SQL API (README "Error codes"): every error path of every public
-- queue and message function, with its SQLSTATE and message, and that a refused call moves no
-- sequence (its rows PostgreSQL undoes itself: each call is one statement, and throws_ok runs it
-- in a subtransaction).
--   22004 NULL where a value is required      42602 invalid queue name
--   22023 invalid parameter value             PQ001 unknown queue
--   PQ002 queue exists   PQ003 queue full      PQ004 the default queue cannot be dropped
--
-- Where each behaviour is tested (one suite each, tests/test_sql_suites.py runs the first two):
-- - here, pgTAP: which bad call gets which SQLSTATE. throws_ok names each case, and the whole
--   matrix stays one readable list; sql/ and pytest do not repeat it.
-- - sql/ (pg_regress): scenarios whose output documents behaviour; a refusal shows there only as
--   a step of a scenario about something else (max_size back-pressure in 70_errors, requeue into
--   a full queue, no NOTIFY for a refused create). Spark's errors stay in sql/80_spark.sql and
--   tests/test_spark_sql.py for now, but for the bad arguments of the Spark functions at the end
--   (queue sp, empty, with no consumer; no spark_consumer row is ever made here).
-- - pytest: what needs a client: the caller's transaction after a refusal (test_bad_input.py),
--   the client's error classes (test_client.py), roles, concurrency, random calls (test_fuzz_sql.py).
BEGIN;
SELECT plan(407);

-- One database with something of every kind: in queue q (max_attempts 1, retry 10..100 ms)
-- ready, scheduled, leased and dead messages; a message in the default queue; queue full
-- (max_size 2) holding two messages and a dead letter that would not fit back; queue almost
-- (max_size 3) with room for one more.
CREATE TEMP TABLE lease (id bigint, attempts integer);
DO $$
DECLARE
    v_id bigint;
    v_attempts integer;
BEGIN
    PERFORM pgqueue.queue_create('q', p_max_attempts => 1, p_retry_base_ms => 10, p_retry_cap_ms => 100);
    PERFORM pgqueue.message_create_batch('q', ARRAY['a', 'b', 'c']::bytea[]);
    PERFORM pgqueue.message_create('q', 'later', pgqueue.now_ms() + 3600000);
    PERFORM pgqueue.message_create('default', 'd');
    SELECT id, attempts INTO v_id, v_attempts FROM pgqueue.message_dequeue('q', 1, 600000);
    PERFORM pgqueue.message_fail(v_id, v_attempts, 'dead');
    INSERT INTO lease SELECT id, attempts FROM pgqueue.message_dequeue('q', 1, 600000);
    PERFORM pgqueue.queue_create('full', p_max_size => 2, p_max_attempts => 1);
    PERFORM pgqueue.message_create('full', 'x');
    SELECT id, attempts INTO v_id, v_attempts FROM pgqueue.message_dequeue('full', 1, 600000);
    PERFORM pgqueue.message_fail(v_id, v_attempts, 'dead');
    PERFORM pgqueue.message_create_batch('full', ARRAY['y', 'z']::bytea[]);
    PERFORM pgqueue.queue_create('almost', p_max_size => 3);
    PERFORM pgqueue.message_create_batch('almost', ARRAY['1', '2']::bytea[]);
END
$$;
DO $$ BEGIN PERFORM pgqueue.queue_create('grp', p_group_concurrency => 1); END $$;
-- Spark: an empty queue (a consumer of it is never made), one write's staged row
DO $$
BEGIN
    PERFORM pgqueue.queue_create('sp');
    PERFORM pgqueue.spark_stage('00000000-0000-0000-0000-0000000000e5', 0, 0, 0, ARRAY['staged']::bytea[]);
    -- a write's row with a group, for a full capped queue without groups (capfull, below)
    PERFORM pgqueue.spark_stage('00000000-0000-0000-0000-0000000000e6', 0, 0, 0, ARRAY['grouped']::bytea[],
                                p_groups => ARRAY['g']);
END
$$;
-- capped queues holding a message with a key: a taken key is looked up before the queue's room
DO $$
BEGIN
    PERFORM pgqueue.queue_create('capk', p_max_size => 5);
    PERFORM pgqueue.message_create('capk', 'x', p_key => 'k');
    PERFORM pgqueue.queue_create('capgrp', p_max_size => 5, p_group_concurrency => 1);
    PERFORM pgqueue.message_create('capgrp', 'x', p_group => 'g', p_key => 'k');
    -- ... and full ones: a bad group or key is refused as such, not as a full queue (PQ003)
    PERFORM pgqueue.queue_create('capfull', p_max_size => 1);
    PERFORM pgqueue.message_create('capfull', 'x', p_key => 'k');
    PERFORM pgqueue.queue_create('capgfull', p_max_size => 1, p_group_concurrency => 1);
    PERFORM pgqueue.message_create('capgfull', 'x', p_group => 'g', p_key => 'k');
END
$$;
SELECT lives_ok($$ SELECT pgqueue.queue_create('ackfetch'), pgqueue.message_create('ackfetch', '\x01'::bytea) $$,
                'a queue with a message to hand out');
-- What a refused call could leave behind. Its rows cannot stay (throws_ok runs it in a
-- subtransaction, which also undoes set_config, even is_local => false), so the rows are compared
-- only to catch a call between here and the check that is not a refusal. What a rollback does not
-- undo is a sequence: the counters of queue_counters (counter_*), the lock stripes, the rate-limit
-- state, the capped queues' exactness marks and recount windows. Left out, the two id sequences:
-- a refused INSERT takes its id before failing (message_id_seq: message_create_batch with an
-- empty second key; queue_id_seq: queue_create of an existing name), and a gap in ids is harmless.
-- pgqueue._queue_reserve sets queue_size_exact_* and queue_size_recount_* on purpose before it
-- raises 40001 or PQ003, but only for a REPEATABLE READ or SERIALIZABLE producer (the mark) or
-- after a count of 10,000 messages or more (the window); this file runs in READ COMMITTED and
-- its capped queues hold two or three, so a change of either here is a bug, and both are compared.
CREATE TEMP VIEW state_now AS
    SELECT 'queue' AS tab, to_jsonb(t) AS r FROM pgqueue.queue t
    UNION ALL SELECT 'message', to_jsonb(t) FROM pgqueue.message t
    UNION ALL SELECT 'dead_letter', to_jsonb(t) FROM pgqueue.dead_letter t
    UNION ALL SELECT 'queue_size', to_jsonb(t) FROM pgqueue.queue_size t
    UNION ALL SELECT 'sequence', jsonb_build_object(c.relname, pg_sequence_last_value(c.oid))
                FROM pg_class c
               WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'S'
                 AND c.relname NOT IN ('message_id_seq', 'queue_id_seq');
CREATE TEMP TABLE state_before AS SELECT * FROM state_now;

-- 22004: NULL where a value is required
SELECT throws_ok($$ SELECT pgqueue.message_create('q', NULL::bytea) $$, '22004',
                 'message content must not be NULL', 'message_create: NULL content');
SELECT throws_ok($$ SELECT pgqueue.message_create(NULL::bytea) $$, '22004',
                 'message content must not be NULL', 'message_create(bytea): NULL content');
SELECT throws_ok($$ SELECT pgqueue.message_create(NULL::text, 'x'::bytea) $$, '22004',
                 'queue name must not be NULL', 'message_create: NULL queue');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', NULL::bytea[]) $$, '22004',
                 'p_contents must not be NULL', 'message_create_batch: NULL array');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY['a', NULL, 'c']::bytea[]) $$, '22004',
                 'message content must not be NULL (element 2)', 'message_create_batch: NULL element');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch(NULL, ARRAY['a']::bytea[]) $$, '22004',
                 'queue name must not be NULL', 'message_create_batch: NULL queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue(NULL) $$, '22004',
                 'queue name must not be NULL', 'message_dequeue: NULL queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', NULL) $$, '22004',
                 'p_limit must not be NULL', 'message_dequeue: NULL limit');
SELECT throws_ok($$ SELECT pgqueue.message_complete(NULL, (SELECT attempts FROM lease)) $$, '22004',
                 'message id must not be NULL', 'message_complete: NULL id');
SELECT throws_ok($$ SELECT pgqueue.message_complete((SELECT id FROM lease), NULL) $$, '22004',
                 'attempts token must not be NULL', 'message_complete: NULL token');
SELECT throws_ok($$ SELECT pgqueue.message_complete_batch(NULL, ARRAY[1]) $$, '22004',
                 'message ids must not be NULL', 'message_complete_batch: NULL ids');
SELECT throws_ok($$ SELECT pgqueue.message_complete_batch(ARRAY[1::bigint], NULL) $$, '22004',
                 'attempts tokens must not be NULL', 'message_complete_batch: NULL tokens');
SELECT throws_ok($$ SELECT pgqueue.message_complete_batch(ARRAY[1::bigint, NULL], ARRAY[1, 1]) $$, '22004',
                 'message ids and attempts tokens must not contain NULL', 'message_complete_batch: NULL id element');
SELECT throws_ok($$ SELECT pgqueue.message_complete_batch(ARRAY[1::bigint], ARRAY[NULL::integer]) $$, '22004',
                 'message ids and attempts tokens must not contain NULL', 'message_complete_batch: NULL token element');
SELECT throws_ok($$ SELECT pgqueue.message_complete_batch(ARRAY[1::bigint, 2], ARRAY[1]) $$, '22023',
                 'p_ids has 2 element(s) but p_attempts has 1', 'message_complete_batch: lengths differ');
SELECT throws_ok($$ SELECT pgqueue.message_complete_batch('{{1,2},{3,4}}'::bigint[], '{{1,1},{1,1}}'::integer[]) $$, '22023',
                 'message ids and attempts tokens must be one-dimensional arrays', 'message_complete_batch: two dimensions');
-- the other functions taking ids refuse two dimensions too (they flattened them before)
SELECT throws_ok($$ SELECT * FROM pgqueue.message_cancel('default', '{{1,2},{3,4}}'::bigint[]) $$, '22023',
                 'p_ids must be a one-dimensional array', 'message_cancel: two dimensions');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_requeue('default', '{{1,2},{3,4}}'::bigint[]) $$, '22023',
                 'p_ids must be a one-dimensional array', 'dead_letter_requeue: two dimensions');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_purge('default', '{{1,2},{3,4}}'::bigint[]) $$, '22023',
                 'p_ids must be a one-dimensional array', 'dead_letter_purge: two dimensions');
-- a NULL among the ids is refused before anything is done (the dead-letter calls acted on the
-- others: ARRAY[NULL] answered 0; a NULL array is "all" there, and stays so; message_cancel's:
-- 30_cancel_peek_create.sql); queue q's dead letter is listed beside it: the final check finds it
-- where it was
SELECT throws_ok($$ SELECT pgqueue.dead_letter_requeue('q', ARRAY[(SELECT id FROM pgqueue.dead_letter WHERE queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'q')), NULL]) $$,
                 '22004', 'p_ids must not contain NULL', 'dead_letter_requeue: a NULL id');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_requeue('q', ARRAY[NULL]::bigint[]) $$, '22004',
                 'p_ids must not contain NULL', 'dead_letter_requeue: only a NULL id');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_purge('q', ARRAY[(SELECT id FROM pgqueue.dead_letter WHERE queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'q')), NULL]) $$,
                 '22004', 'p_ids must not contain NULL', 'dead_letter_purge: a NULL id');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_purge('q', ARRAY[NULL]::bigint[]) $$, '22004',
                 'p_ids must not contain NULL', 'dead_letter_purge: only a NULL id');
-- acknowledge-and-fetch: the errors of message_dequeue and of message_complete_batch, and nothing
-- done (the message handed out by the failed call is still ready)
SELECT throws_ok($$ SELECT * FROM pgqueue.message_complete_and_dequeue(NULL, ARRAY[1]) $$, '22004',
                 'message ids must not be NULL', 'message_complete_and_dequeue: NULL ids');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_complete_and_dequeue(ARRAY[1::bigint, 2], ARRAY[1]) $$, '22023',
                 'p_ids has 2 element(s) but p_attempts has 1', 'message_complete_and_dequeue: lengths differ');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_complete_and_dequeue('{}', '{}', 'no_such_queue') $$, 'PQ001',
                 NULL, 'message_complete_and_dequeue: unknown queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_complete_and_dequeue('{}', '{}', 'default', 0) $$, '22023',
                 'p_limit must be between 1 and 10000, got 0', 'message_complete_and_dequeue: limit 0');
-- (queue ackfetch, with one message, was created before the snapshot)
SELECT throws_ok($$ SELECT * FROM pgqueue.message_complete_and_dequeue(ARRAY[1::bigint, NULL], ARRAY[1, 1], 'ackfetch', 1, 0) $$, '22004',
                 'message ids and attempts tokens must not contain NULL', 'message_complete_and_dequeue: a NULL id, checked before the take');
SELECT is((SELECT ready FROM pgqueue.queue_stats('ackfetch')), 1::bigint,
          'message_complete_and_dequeue: the refused call leaves the message in the queue (and counts no delivery: the check below)');
SELECT throws_ok($$ SELECT pgqueue.message_complete_batch(array_fill(1::bigint, ARRAY[10001]), array_fill(1, ARRAY[10001])) $$, '22023',
                 'at most 10000 messages per call, got 10001', 'message_complete_batch: too many');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat(NULL, (SELECT attempts FROM lease), 1000) $$, '22004',
                 'message id must not be NULL', 'message_heartbeat: NULL id');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat((SELECT id FROM lease), NULL, 1000) $$, '22004',
                 'attempts token must not be NULL', 'message_heartbeat: NULL token');
SELECT throws_ok($$ SELECT pgqueue.message_defer(NULL, (SELECT attempts FROM lease), 0) $$, '22004',
                 'message id must not be NULL', 'message_defer: NULL id');
SELECT throws_ok($$ SELECT pgqueue.message_defer((SELECT id FROM lease), NULL, 0) $$, '22004',
                 'attempts token must not be NULL', 'message_defer: NULL token');
SELECT throws_ok($$ SELECT pgqueue.message_fail(NULL, (SELECT attempts FROM lease), 'e') $$, '22004',
                 'message id must not be NULL', 'message_fail: NULL id');
SELECT throws_ok($$ SELECT pgqueue.message_fail((SELECT id FROM lease), NULL, 'e') $$, '22004',
                 'attempts token must not be NULL', 'message_fail: NULL token');
SELECT throws_ok($$ SELECT pgqueue.queue_create(NULL) $$, '22004',
                 'queue name must not be NULL', 'queue_create: NULL name');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_lock_ms => NULL) $$, '22004',
                 'lock_ms must not be NULL', 'queue_create: NULL lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_retry_base_ms => NULL) $$, '22004',
                 'retry_base_ms must not be NULL', 'queue_create: NULL retry_base_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_retry_cap_ms => NULL) $$, '22004',
                 'retry_cap_ms must not be NULL', 'queue_create: NULL retry_cap_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_notify => NULL) $$, '22004',
                 'notify must not be NULL', 'queue_create: NULL notify');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_if_not_exists => NULL) $$, '22004',
                 'if_not_exists must not be NULL', 'queue_create: NULL if_not_exists');
SELECT throws_ok($$ SELECT pgqueue.queue_alter(NULL, p_lock_ms => 1000) $$, '22004',
                 'queue name must not be NULL', 'queue_alter: NULL name');
SELECT throws_ok($$ SELECT pgqueue.queue_alter(NULL, p_max_size => 1) $$, '22004',
                 'queue name must not be NULL', 'queue_alter: NULL name, with max_size');
SELECT throws_ok($$ SELECT pgqueue.queue_drop(NULL) $$, '22004',
                 'queue name must not be NULL', 'queue_drop: NULL name');
SELECT throws_ok($$ SELECT pgqueue.queue_next_due(NULL) $$, '22004',
                 'queue name must not be NULL', 'queue_next_due: NULL name');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_requeue(NULL) $$, '22004',
                 'queue name must not be NULL', 'dead_letter_requeue: NULL name');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_purge(NULL) $$, '22004',
                 'queue name must not be NULL', 'dead_letter_purge: NULL name');

-- PQ001: unknown queue (names are case-sensitive; a 48-character name is valid, so unknown)
SELECT throws_ok($$ SELECT pgqueue.message_create('nope', 'x') $$, 'PQ001',
                 'queue "nope" does not exist', 'message_create: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('nope', ARRAY['x']::bytea[]) $$, 'PQ001',
                 'queue "nope" does not exist', 'message_create_batch: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('nope', '{}'::bytea[]) $$, 'PQ001',
                 'queue "nope" does not exist', 'message_create_batch: an empty batch, unknown queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('nope') $$, 'PQ001',
                 'queue "nope" does not exist', 'message_dequeue: unknown queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('nope', 5, 0) $$, 'PQ001',
                 'queue "nope" does not exist', 'message_dequeue: unknown queue, delete mode');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('nope', p_lock_ms => 1000) $$, 'PQ001',
                 'queue "nope" does not exist', 'queue_alter: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('nope', p_notify => true) $$, 'PQ001',
                 'queue "nope" does not exist', 'queue_alter: unknown queue, notify');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('nope', p_max_size => 10) $$, 'PQ001',
                 'queue "nope" does not exist', 'queue_alter: unknown queue, max_size');
SELECT throws_ok($$ SELECT * FROM pgqueue.queue_stats('nope') $$, 'PQ001',
                 'queue "nope" does not exist', 'queue_stats: unknown queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.queue_counters('nope') $$, 'PQ001',
                 'queue "nope" does not exist', 'queue_counters: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.queue_next_due('nope') $$, 'PQ001',
                 'queue "nope" does not exist', 'queue_next_due: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_requeue('nope') $$, 'PQ001',
                 'queue "nope" does not exist', 'dead_letter_requeue: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_purge('nope') $$, 'PQ001',
                 'queue "nope" does not exist', 'dead_letter_purge: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.message_create('Q', 'x') $$, 'PQ001',
                 'queue "Q" does not exist', 'message_create: names are case-sensitive');
SELECT throws_ok(format('SELECT pgqueue.message_create(%L, %L)', repeat('x', 48), 'x'), 'PQ001',
                 format('queue "%s" does not exist', repeat('x', 48)), 'a 48-character name is valid, so unknown');

-- 42602: invalid queue names, the same error from every function that takes a queue name
SELECT throws_ok(format(c.call, quote_literal(n.name)), '42602', format('invalid queue name %L', n.name),
                 format('%s: %s', c.function, n.label))
  FROM (VALUES (1, 'empty', ''),
               (2, '49 characters', repeat('x', 49)),
               (3, 'single quote', 'it''s'),
               (4, 'double quote', 'a"b'),
               (5, 'semicolon', 'a;b'),
               (6, 'SQL after a semicolon', 'a;DROP TABLE pgqueue.message'),
               (7, 'SQL with a comment', 'DROP TABLE pgqueue.message; --'),
               (8, 'space', 'a b'),
               (9, 'leading space', ' a'),
               (10, 'tab', E'tab\there'),
               (11, 'newline', E'new\nline'),
               (12, 'trailing newline', E'a\n'),
               (13, 'diacritics', 'ünïcode'),
               (14, 'accent', 'café'),
               (15, 'CJK', '队列'),
               (16, 'leading dot', '.dot'),
               (17, 'leading dash', '-dash'),
               (18, 'slash', 'a/b'),
               (19, 'star', 'a*'),
               (20, 'dollar', 'a$b')) AS n(i, label, name)
 CROSS JOIN (VALUES (1, 'queue_create', 'SELECT pgqueue.queue_create(%s)'),
                    (2, 'message_create', 'SELECT pgqueue.message_create(%s, ''x''::bytea)'),
                    (3, 'message_create_batch', 'SELECT pgqueue.message_create_batch(%s, ARRAY[''x'']::bytea[])'),
                    (4, 'message_dequeue', 'SELECT * FROM pgqueue.message_dequeue(%s)'),
                    (5, 'queue_alter', 'SELECT pgqueue.queue_alter(%s, p_lock_ms => 1000)'),
                    (6, 'queue_stats', 'SELECT * FROM pgqueue.queue_stats(%s)'),
                    (7, 'queue_next_due', 'SELECT pgqueue.queue_next_due(%s)'),
                    (8, 'dead_letter_requeue', 'SELECT pgqueue.dead_letter_requeue(%s)'),
                    (9, 'dead_letter_purge', 'SELECT pgqueue.dead_letter_purge(%s)'),
                    (10, 'queue_drop', 'SELECT pgqueue.queue_drop(%s)'),
                    (11, 'queue_counters', 'SELECT * FROM pgqueue.queue_counters(%s)')) AS c(j, function, call)
 ORDER BY c.j, n.i;

-- 22023: invalid parameter values
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', 0) $$, '22023',
                 'p_limit must be between 1 and 10000, got 0', 'message_dequeue: limit 0');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', -1, 0) $$, '22023',
                 'p_limit must be between 1 and 10000, got -1', 'message_dequeue: negative limit');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', 10001) $$, '22023',
                 'p_limit must be between 1 and 10000, got 10001', 'message_dequeue: limit above 10000');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', 2147483647, 0) $$, '22023',
                 'p_limit must be between 1 and 10000, got 2147483647', 'message_dequeue: largest integer limit');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', 1, -1) $$, '22023',
                 'lock_ms must be >= 0 and at most 31536000000 (a year), got -1', 'message_dequeue: negative lock_ms');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', 1, 31536000001) $$, '22023',
                 'lock_ms must be >= 0 and at most 31536000000 (a year), got 31536000001',
                 'message_dequeue: lock_ms over a year');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat((SELECT id FROM lease), (SELECT attempts FROM lease), 0) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got 0', 'message_heartbeat: zero lock_ms');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat((SELECT id FROM lease), (SELECT attempts FROM lease), -1) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got -1', 'message_heartbeat: negative lock_ms');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat((SELECT id FROM lease), (SELECT attempts FROM lease), 31536000001) $$,
                 '22023', 'lock_ms must be > 0 and at most 31536000000 (a year), got 31536000001',
                 'message_heartbeat: lock_ms over a year');
-- message_heartbeat_batch: the array checks of message_complete_batch, the lock_ms check of
-- message_heartbeat, and a refused call extends nothing
CREATE TEMP TABLE lease_before AS SELECT m.locked_until FROM pgqueue.message m WHERE m.id = (SELECT id FROM lease);
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat_batch(NULL, ARRAY[1]) $$, '22004',
                 'message ids must not be NULL', 'message_heartbeat_batch: NULL ids');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat_batch(ARRAY[1::bigint], NULL, 1000) $$, '22004',
                 'attempts tokens must not be NULL', 'message_heartbeat_batch: NULL tokens');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat_batch(ARRAY[(SELECT id FROM lease), NULL], ARRAY[1, 1]) $$, '22004',
                 'message ids and attempts tokens must not contain NULL', 'message_heartbeat_batch: NULL id element');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat_batch(ARRAY[1::bigint, 2], ARRAY[1]) $$, '22023',
                 'p_ids has 2 element(s) but p_attempts has 1', 'message_heartbeat_batch: lengths differ');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat_batch('{{1,2},{3,4}}'::bigint[], '{{1,1},{1,1}}'::integer[]) $$, '22023',
                 'message ids and attempts tokens must be one-dimensional arrays', 'message_heartbeat_batch: two dimensions');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat_batch(array_fill(1::bigint, ARRAY[10001]), array_fill(1, ARRAY[10001])) $$, '22023',
                 'at most 10000 messages per call, got 10001', 'message_heartbeat_batch: too many');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat_batch(ARRAY[(SELECT id FROM lease)], ARRAY[(SELECT attempts FROM lease)], 0) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got 0', 'message_heartbeat_batch: zero lock_ms');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat_batch(ARRAY[(SELECT id FROM lease)], ARRAY[(SELECT attempts FROM lease)], 31536000001) $$,
                 '22023', 'lock_ms must be > 0 and at most 31536000000 (a year), got 31536000001',
                 'message_heartbeat_batch: lock_ms over a year');
SELECT is((SELECT m.locked_until FROM pgqueue.message m WHERE m.id = (SELECT id FROM lease)),
          (SELECT locked_until FROM lease_before),
          'message_heartbeat_batch: the refused calls left the lease as it was');
SELECT throws_ok($$ SELECT pgqueue.priority_dequeue_at(-1) $$, '22023',
                 'priority must be >= 0, got -1', 'priority_dequeue_at: negative priority');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_lock_ms => 0) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got 0', 'queue_create: zero lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_lock_ms => -5) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got -5', 'queue_create: negative lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_lock_ms => 31536000001) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got 31536000001', 'queue_create: lock_ms over a year');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_max_attempts => -1) $$, '22023',
                 'max_attempts must be >= 0 (0 = unlimited), got -1', 'queue_create: negative max_attempts');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_retry_base_ms => -1) $$, '22023',
                 'retry back-off needs 0 <= retry_base_ms <= retry_cap_ms <= 31536000000, got -1 and 3600000',
                 'queue_create: negative retry base');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_retry_base_ms => 10, p_retry_cap_ms => 9) $$, '22023',
                 'retry back-off needs 0 <= retry_base_ms <= retry_cap_ms <= 31536000000, got 10 and 9',
                 'queue_create: retry base above cap');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_retry_cap_ms => 31536000001) $$, '22023',
                 'retry back-off needs 0 <= retry_base_ms <= retry_cap_ms <= 31536000000, got 1000 and 31536000001',
                 'queue_create: retry cap over a year');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_max_size => -1) $$, '22023',
                 'max_size must be >= 0 (0 = unbounded), got -1', 'queue_create: negative max_size');
SELECT throws_ok($$ SELECT pgqueue.queue_create('q', p_lock_ms => 0, p_if_not_exists => true) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got 0',
                 'queue_create: if_not_exists on an existing queue still validates the options');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_lock_ms => 0) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got 0', 'queue_alter: zero lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_lock_ms => -1) $$, '22023',
                 'lock_ms must be > 0 and at most 31536000000 (a year), got -1', 'queue_alter: negative lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_max_attempts => -1) $$, '22023',
                 'max_attempts must be >= 0 (0 = unlimited), got -1', 'queue_alter: negative max_attempts');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_max_size => -1) $$, '22023',
                 'max_size must be >= 0 (0 = unbounded), got -1', 'queue_alter: negative max_size');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_retry_base_ms => 101) $$, '22023',
                 'retry back-off needs 0 <= retry_base_ms <= retry_cap_ms <= 31536000000, got 101 and 100',
                 'queue_alter: a new base above the stored cap');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_retry_cap_ms => 9) $$, '22023',
                 'retry back-off needs 0 <= retry_base_ms <= retry_cap_ms <= 31536000000, got 10 and 9',
                 'queue_alter: a new cap below the stored base');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_retry_cap_ms => 1, p_retry_base_ms => 2) $$, '22023',
                 'retry back-off needs 0 <= retry_base_ms <= retry_cap_ms <= 31536000000, got 2 and 1',
                 'queue_alter: a new cap below a new base');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY['a', 'b']::bytea[], p_dequeue_ats => ARRAY[1]::bigint[]) $$,
                 '22023', 'p_dequeue_ats and p_content_types must have as many elements as p_contents (2)',
                 'message_create_batch: dequeue_ats too short');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY['a', 'b']::bytea[], p_content_types => ARRAY['a', 'b', 'c']) $$,
                 '22023', 'p_dequeue_ats and p_content_types must have as many elements as p_contents (2)',
                 'message_create_batch: content_types too long');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY['a']::bytea[], p_dequeue_ats => '{}'::bigint[]) $$,
                 '22023', 'p_dequeue_ats and p_content_types must have as many elements as p_contents (1)',
                 'message_create_batch: empty dequeue_ats');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY[['a', 'b'], ['c', 'd']]::bytea[]) $$, '22023',
                 'batch arrays must be one-dimensional', 'message_create_batch: contents of two dimensions');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY['a', 'b']::bytea[], p_dequeue_ats => ARRAY[[1], [2]]::bigint[]) $$,
                 '22023', 'batch arrays must be one-dimensional', 'message_create_batch: dequeue_ats of two dimensions');

-- PQ002 / PQ003 / PQ004
SELECT throws_ok($$ SELECT pgqueue.queue_create('q') $$, 'PQ002',
                 'queue "q" already exists', 'queue_create: queue exists');
SELECT throws_ok($$ SELECT pgqueue.queue_create('default') $$, 'PQ002',
                 'queue "default" already exists', 'queue_create: default exists');
SELECT throws_ok($$ SELECT pgqueue.queue_create('full', p_max_size => 1000) $$, 'PQ002',
                 'queue "full" already exists', 'queue_create: queue exists, with other options');
SELECT throws_ok($$ SELECT pgqueue.message_create('full', 'x') $$, 'PQ003',
                 'queue "full" is full (max_size 2): 1 more message(s) refused', 'message_create: queue full');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('full', ARRAY['x']::bytea[]) $$, 'PQ003',
                 'queue "full" is full (max_size 2): 1 more message(s) refused', 'message_create_batch: queue full');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('almost', ARRAY['1', '2']::bytea[]) $$, 'PQ003',
                 'queue "almost" is full (max_size 3): 2 more message(s) refused',
                 'message_create_batch: room for one of two, so none');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_requeue('full') $$, 'PQ003',
                 'queue "full" is full (max_size 2): 1 more message(s) refused', 'dead_letter_requeue: queue full');
SELECT throws_ok($$ SELECT pgqueue.queue_drop('default') $$, 'PQ004',
                 'the default queue cannot be dropped', 'queue_drop: default');

-- Message groups and idempotency keys (issue 14); queue grp has groups, one in flight per group
SELECT throws_ok($$ SELECT pgqueue.message_create('q', 'x', p_key => '') $$, '22023',
                 'the idempotency key must have 1 to 200 characters, got 0', 'message_create: empty key');
SELECT throws_ok($$ SELECT pgqueue.message_create('q', 'x', p_key => repeat('k', 201)) $$, '22023',
                 'the idempotency key must have 1 to 200 characters, got 201', 'message_create: key too long');
SELECT throws_ok($$ SELECT pgqueue.message_create('grp', 'x', p_group => '') $$, '22023',
                 'the message group must have 1 to 200 characters, got 0', 'message_create: empty group');
SELECT throws_ok($$ SELECT pgqueue.message_create('grp', 'x', p_group => repeat('g', 201)) $$, '22023',
                 'the message group must have 1 to 200 characters, got 201', 'message_create: group too long');
SELECT throws_ok($$ SELECT pgqueue.message_create('q', 'x', p_group => 'g') $$, '22023',
                 'queue "q" has no message groups', 'message_create: a group on a queue without groups');
-- message_create_text and message_create_json pass a bad group or key on: message_create's error
SELECT throws_ok($$SELECT pgqueue.message_create_text('grp', 'x', p_group => '')$$, '22023',
                 'the message group must have 1 to 200 characters, got 0', 'text: empty group');
SELECT throws_ok($$SELECT pgqueue.message_create_text('q', 'x', p_key => repeat('k', 201))$$, '22023',
                 'the idempotency key must have 1 to 200 characters, got 201', 'text: key over 200 characters');
SELECT throws_ok($$SELECT pgqueue.message_create_text('q', 'x', p_group => 'a')$$, '22023',
                 'queue "q" has no message groups', 'text: a group on a queue without groups');
SELECT throws_ok($$SELECT pgqueue.message_create_json('grp', '{}', p_group => repeat('g', 201))$$, '22023',
                 'the message group must have 1 to 200 characters, got 201', 'json: group over 200 characters');
SELECT throws_ok($$SELECT pgqueue.message_create_json('q', '{}', p_key => '')$$, '22023',
                 'the idempotency key must have 1 to 200 characters, got 0', 'json: empty key');
SELECT throws_ok($$SELECT pgqueue.message_create_json('q', '{}', p_task => 't', p_group => 'a')$$, '22023',
                 'queue "q" has no message groups', 'json: a group on a queue without groups');
SELECT throws_ok($$SELECT pgqueue.message_create_json('nope', '{}', p_group => 'a', p_key => 'k')$$, 'PQ001', NULL,
                 'json: unknown queue, whatever its group or key');
SELECT throws_ok($$ SELECT pgqueue.message_create('capk', 'x', p_group => 'g', p_key => 'k') $$, '22023',
                 'queue "capk" has no message groups',
                 'message_create: a group on a capped queue without groups, the key taken');
SELECT throws_ok($$ SELECT pgqueue.message_create('capk', 'x', p_group => '', p_key => 'k') $$, '22023',
                 'the message group must have 1 to 200 characters, got 0',
                 'message_create: empty group on a capped queue, the key taken');
SELECT throws_ok($$ SELECT pgqueue.message_create('capgrp', 'x', p_group => repeat('g', 201), p_key => 'k') $$, '22023',
                 'the message group must have 1 to 200 characters, got 201',
                 'message_create: group too long on a capped grouped queue, the key taken');
SELECT throws_ok($$ SELECT pgqueue.message_create('capfull', 'x', p_group => 'g') $$, '22023',
                 'queue "capfull" has no message groups', 'message_create: a group on a full capped queue without groups');
SELECT throws_ok($$ SELECT pgqueue.message_create('capfull', 'x', p_group => 'g', p_key => 'k2') $$, '22023',
                 'queue "capfull" has no message groups',
                 'message_create: a group and a new key on a full capped queue without groups');
SELECT throws_ok($$ SELECT pgqueue.message_create('capfull', 'x', p_group => '') $$, '22023',
                 'the message group must have 1 to 200 characters, got 0', 'message_create: empty group on a full capped queue');
SELECT throws_ok($$ SELECT pgqueue.message_create('capgfull', 'x', p_group => '') $$, '22023',
                 'the message group must have 1 to 200 characters, got 0',
                 'message_create: empty group on a full capped grouped queue');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('capfull', ARRAY['x']::bytea[], p_keys => ARRAY['']) $$, '22023',
                 'the idempotency key must have 1 to 200 characters, got 0',
                 'message_create_batch: an empty key on a full capped queue');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('capfull', ARRAY['x', 'y']::bytea[], p_groups => ARRAY[NULL, 'g']) $$,
                 '22023', 'queue "capfull" has no message groups',
                 'message_create_batch: a group on a full capped queue without groups');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('capgfull', ARRAY['x']::bytea[], p_groups => ARRAY[''], p_keys => ARRAY['k']) $$,
                 '22023', 'the message group must have 1 to 200 characters, got 0',
                 'message_create_batch: an empty group on a full capped grouped queue, the key taken');
SELECT throws_ok($$ SELECT pgqueue.message_create('capfull', 'x', p_key => 'k2') $$, 'PQ003',
                 'queue "capfull" is full (max_size 1): 1 more message(s) refused',
                 'message_create: a good new key on a full capped queue is refused for room');
SELECT is((SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
            WHERE q.name IN ('capfull', 'capgfull')), 2::bigint, 'the refused calls on full capped queues inserted nothing');
SELECT throws_ok($$ SELECT pgqueue.message_create('nope', 'x', p_group => '', p_key => '') $$, 'PQ001',
                 'queue "nope" does not exist', 'message_create: unknown queue, with a bad group and key');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('nope', ARRAY['x']::bytea[], p_groups => ARRAY[''], p_keys => ARRAY['']) $$,
                 'PQ001', 'queue "nope" does not exist', 'message_create_batch: unknown queue, with a bad group and key');
SELECT throws_ok($$ SELECT pgqueue.message_create('nope', 'x', p_key => 'k') $$, 'PQ001',
                 'queue "nope" does not exist', 'message_create: unknown queue, with a key');
SELECT throws_ok($$ SELECT pgqueue.message_create('grp', NULL::bytea, p_group => 'g', p_key => 'k') $$, '22004',
                 'message content must not be NULL', 'message_create: NULL content, with a group and key');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY['a', 'b']::bytea[], p_keys => ARRAY['k']) $$,
                 '22023', 'p_groups and p_keys must have as many elements as p_contents (2)',
                 'message_create_batch: fewer keys than contents');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('grp', ARRAY['a']::bytea[], p_groups => ARRAY['g', 'h']) $$,
                 '22023', 'p_groups and p_keys must have as many elements as p_contents (1)',
                 'message_create_batch: more groups than contents');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY['a', 'b']::bytea[], p_keys => ARRAY['k1', '']) $$,
                 '22023', 'the idempotency key must have 1 to 200 characters, got 0',
                 'message_create_batch: an empty key (the first message is not kept either)');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('grp', ARRAY['a', 'b']::bytea[], p_groups => ARRAY[['g', 'h']]) $$,
                 '22023', 'batch arrays must be one-dimensional', 'message_create_batch: groups of two dimensions');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_group_concurrency => -1) $$, '22023',
                 'group_concurrency must be >= 0 (0 = no limit), got -1', 'queue_create: negative group_concurrency');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_key_window_ms => -1) $$, '22023',
                 'key_window_ms must be between 0 and 31536000000 (a year), got -1', 'queue_create: negative key window');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_key_window_ms => 31536000001) $$, '22023',
                 'key_window_ms must be between 0 and 31536000000 (a year), got 31536000001',
                 'queue_create: key window over a year');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_key_window_ms => NULL) $$, '22004',
                 'key_window_ms must not be NULL', 'queue_create: NULL key window');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_group_concurrency => 1) $$, '22023',
                 'queue "q" has no message groups', 'queue_alter: group_concurrency of a queue without groups');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('grp', p_group_concurrency => -1) $$, '22023',
                 'group_concurrency must be >= 0 (0 = no limit), got -1', 'queue_alter: negative group_concurrency');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('grp', p_key_window_ms => -5) $$, '22023',
                 'key_window_ms must be between 0 and 31536000000 (a year), got -5', 'queue_alter: negative key window');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_rate_limit => -1) $$, '22023',
                 'rate_limit must be between 1 and 1000000 messages a second (0 = none), got -1', 'queue_create: negative rate limit');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_rate_limit => 1000001) $$, '22023',
                 'rate_limit must be between 1 and 1000000 messages a second (0 = none), got 1000001', 'queue_create: rate limit too high');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_rate_limit => -5) $$, '22023',
                 'rate_limit must be between 1 and 1000000 messages a second (0 = none), got -5', 'queue_alter: negative rate limit');
SELECT throws_ok($$ SELECT * FROM pgqueue.queue_group_stats('nope') $$, 'PQ001',
                 'queue "nope" does not exist', 'queue_group_stats: unknown queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.queue_group_stats('grp', NULL) $$, '22004',
                 'p_limit must not be NULL', 'queue_group_stats: NULL limit');
SELECT throws_ok($$ SELECT * FROM pgqueue.queue_group_stats('grp', 0) $$, '22023',
                 'p_limit must be between 1 and 10000, got 0', 'queue_group_stats: limit 0');
SELECT throws_ok($$ SELECT * FROM pgqueue.queue_group_stats('grp', 10001) $$, '22023',
                 'p_limit must be between 1 and 10000, got 10001', 'queue_group_stats: limit too high');
SELECT throws_ok($$ SELECT pgqueue.spark_claim('grp', 'etl', 10) $$, '0A000',
                 'queue "grp" has message groups, which Spark streams do not read yet',
                 'spark_claim: a queue with message groups');
-- the stream's open is refused first, before it makes the consumer's row (it left one per name tried)
SELECT throws_ok($$ SELECT pgqueue.spark_consumer_open('grp', 'etl') $$, '0A000',
                 'queue "grp" has message groups, which Spark streams do not read yet',
                 'spark_consumer_open: a queue with message groups');
SELECT is((SELECT count(*) FROM pgqueue.spark_consumer), 0::bigint,
          'spark_consumer_open refused on a grouped queue: no consumer row');

-- Spark: bad arguments of the consumer's functions (README: 22004 a NULL required value, 42602
-- an invalid consumer name, PQ001 an unknown queue, PQ006 a consumer that does not exist)
SELECT throws_ok($$ SELECT pgqueue.spark_consumer_close(NULL, 'c') $$, '22004',
                 'queue name must not be NULL', 'spark_consumer_close: NULL queue');
SELECT throws_ok($$ SELECT pgqueue.spark_consumer_close('sp', NULL) $$, '22004',
                 'consumer name must not be NULL', 'spark_consumer_close: NULL consumer');
SELECT throws_ok($$ SELECT pgqueue.spark_consumer_close('sp', '') $$, '42602',
                 'invalid consumer name ''''', 'spark_consumer_close: empty consumer name');
SELECT throws_ok($$ SELECT pgqueue.spark_consumer_close('bad name', 'c') $$, '42602',
                 'invalid queue name ''bad name''', 'spark_consumer_close: invalid queue name');
-- (a valid name of no queue holds nothing: false, as for a queue dropped under a running query,
-- whose Spark source closes its consumer as it stops; a second close is false too)
SELECT is(pgqueue.spark_consumer_close('nope', 'c'), false, 'spark_consumer_close: an unknown queue, false');
SELECT is(pgqueue.spark_consumer_close('sp', 'c'), false, 'spark_consumer_close: an unknown consumer, false');
SELECT throws_ok($$ SELECT * FROM pgqueue.spark_claims('sp', 'c', NULL, 10) $$, '22004',
                 'p_after_seq must not be NULL', 'spark_claims: NULL p_after_seq');
SELECT throws_ok($$ SELECT * FROM pgqueue.spark_claims('sp', 'c', 0, NULL) $$, '22004',
                 'p_up_to_seq must not be NULL', 'spark_claims: NULL p_up_to_seq');
SELECT throws_ok($$ SELECT * FROM pgqueue.spark_claimed('sp', 'c', NULL, 10) $$, '22004',
                 'p_after_seq must not be NULL', 'spark_claimed: NULL p_after_seq');
SELECT throws_ok($$ SELECT * FROM pgqueue.spark_claimed('sp', 'c', 0, NULL) $$, '22004',
                 'p_up_to_seq must not be NULL', 'spark_claimed: NULL p_up_to_seq');
SELECT throws_ok($$ SELECT * FROM pgqueue.spark_claims('sp', NULL, 0, 10) $$, '22004',
                 'consumer name must not be NULL', 'spark_claims: NULL consumer');
SELECT throws_ok($$ SELECT * FROM pgqueue.spark_claimed('sp', '-c', 0, 10) $$, '42602',
                 'invalid consumer name ''-c''', 'spark_claimed: invalid consumer name');
SELECT throws_ok($$ SELECT pgqueue.spark_pending_seq('sp', NULL) $$, '22004',
                 'consumer name must not be NULL', 'spark_pending_seq: NULL consumer');
SELECT throws_ok($$ SELECT pgqueue.spark_pending_seq('sp', 'c') $$, 'PQ006',
                 'consumer "c" of queue "sp" does not exist', 'spark_pending_seq: unknown consumer');
SELECT throws_ok($$ SELECT * FROM pgqueue.spark_claims('sp', 'c', 0, 10) $$, 'PQ006',
                 'consumer "c" of queue "sp" does not exist', 'spark_claims: unknown consumer');
SELECT throws_ok($$ SELECT * FROM pgqueue.spark_claimed('sp', 'c', 0, 10) $$, 'PQ006',
                 'consumer "c" of queue "sp" does not exist', 'spark_claimed: unknown consumer');
SELECT throws_ok($$ SELECT pgqueue.spark_claim('sp', 'c', NULL) $$, '22004',
                 'p_max_messages must not be NULL', 'spark_claim: NULL p_max_messages');
-- counts past the largest bigint (a 22003 "bigint out of range" from their sum) or negative
-- (a PQ007 once the log's row was written) are refused up front (22023, before the log row is written)
SELECT throws_ok($$ SELECT pgqueue.spark_publish('k9', 'sp', '00000000-0000-0000-0000-0000000000e5', ARRAY[0, 1],
                                                 ARRAY[0, 0]::bigint[], ARRAY[9223372036854775807, 1]::bigint[]) $$, '22023',
                 'p_counts must be >= 0 and add up to at most 9223372036854775807', 'spark_publish: counts past the largest bigint');
SELECT throws_ok($$ SELECT pgqueue.spark_publish('k9', 'sp', '00000000-0000-0000-0000-0000000000e5', ARRAY[0],
                                                 ARRAY[0]::bigint[], ARRAY[-1]::bigint[]) $$, '22023',
                 'p_counts must be >= 0 and add up to at most 9223372036854775807', 'spark_publish: a negative count');
-- a group on a queue without groups is refused as such, also where a capped queue is full (it
-- was PQ003, which a caller retries, for a publish that can never succeed)
SELECT throws_ok($$ SELECT pgqueue.spark_publish('k10', 'capfull', '00000000-0000-0000-0000-0000000000e6', ARRAY[0],
                                                 ARRAY[0]::bigint[], ARRAY[1]::bigint[]) $$, '22023',
                 'queue "capfull" has no message groups', 'spark_publish: a group on a full capped queue without groups');
-- not an error: an empty queue's snapshot range is NULLs (its comment), not the range of the
-- other queues' ids (queue q holds messages and a dead letter)
SELECT is((SELECT row(r.min_id, r.max_id)::text FROM pgqueue.spark_snapshot_range('sp') r), '(,)',
          'spark_snapshot_range: an empty queue, NULLs');
SELECT is((SELECT row(r.min_id, r.max_id)::text FROM pgqueue.spark_snapshot_range('sp', true) r), '(,)',
          'spark_snapshot_range: an empty queue, dead letters included, NULLs');

-- and none of it changed anything
SELECT bag_eq($$ SELECT tab, r FROM state_now $$, $$ SELECT tab, r FROM state_before $$,
              'the refused calls moved no sequence of pgqueue but the id sequences (and the calls that were not refused changed no row of queue, message, dead_letter and queue_size)');
SELECT results_eq($$ SELECT id, attempts FROM pgqueue.message WHERE locked_until IS NOT NULL $$,
                  $$ SELECT id, attempts FROM lease $$,
                  'the leased message is still leased with the same token');
SELECT lives_ok($$ SELECT pgqueue.queue_drop('ackfetch') $$, 'drop queue ackfetch');

-- the name rule's other side: a name may start with an underscore
SELECT lives_ok($$ SELECT pgqueue.queue_create('_underscore') $$, 'queue_create: a leading underscore is valid');

SELECT * FROM finish();
ROLLBACK;
