-- Every documented error path, with its SQLSTATE (README "Error codes"):
-- 22004 NULL, PQ001 unknown queue, 42602 invalid queue name, 22023 invalid parameter value,
-- PQ002 queue exists, PQ003 queue full, PQ004 the default queue cannot be dropped.
BEGIN;
SELECT plan(69);

CREATE TEMP TABLE lease (id bigint, attempts integer);
DO $$
BEGIN
    PERFORM pgqueue.queue_create('q');
    PERFORM pgqueue.message_create('q', 'leased');
    INSERT INTO lease SELECT id, attempts FROM pgqueue.message_dequeue('q', 1, 600000);
    PERFORM pgqueue.queue_create('capped', p_max_size => 2, p_max_attempts => 1);
    PERFORM pgqueue.message_create_batch('capped', ARRAY['a', 'b']::bytea[]);
END
$$;

-- 22004: NULL where a value is required
SELECT throws_ok($$ SELECT pgqueue.message_create('q', NULL::bytea) $$, '22004', NULL, 'message_create: NULL content');
SELECT throws_ok($$ SELECT pgqueue.message_create(NULL::bytea) $$, '22004', NULL, 'message_create(bytea): NULL content');
SELECT throws_ok($$ SELECT pgqueue.message_create(NULL::text, 'x'::bytea) $$, '22004', NULL, 'message_create: NULL queue');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', NULL::bytea[]) $$, '22004', NULL, 'message_create_batch: NULL array');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('q', ARRAY['a', NULL]::bytea[]) $$, '22004', NULL, 'message_create_batch: NULL element');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch(NULL, ARRAY['a']::bytea[]) $$, '22004', NULL, 'message_create_batch: NULL queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue(NULL) $$, '22004', NULL, 'message_dequeue: NULL queue');
SELECT throws_ok($$ SELECT pgqueue.message_complete(NULL, 1) $$, '22004', NULL, 'message_complete: NULL id');
SELECT throws_ok($$ SELECT pgqueue.message_complete((SELECT id FROM lease), NULL) $$, '22004', NULL, 'message_complete: NULL token');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat(NULL, 1, 1000) $$, '22004', NULL, 'message_heartbeat: NULL id');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat((SELECT id FROM lease), NULL, 1000) $$, '22004', NULL, 'message_heartbeat: NULL token');
SELECT throws_ok($$ SELECT pgqueue.message_defer(NULL, 1, 0) $$, '22004', NULL, 'message_defer: NULL id');
SELECT throws_ok($$ SELECT pgqueue.message_defer((SELECT id FROM lease), NULL, 0) $$, '22004', NULL, 'message_defer: NULL token');
SELECT throws_ok($$ SELECT pgqueue.message_fail(NULL, 1, 'e') $$, '22004', NULL, 'message_fail: NULL id');
SELECT throws_ok($$ SELECT pgqueue.message_fail((SELECT id FROM lease), NULL, 'e') $$, '22004', NULL, 'message_fail: NULL token');
SELECT throws_ok($$ SELECT pgqueue.queue_create(NULL) $$, '22004', NULL, 'queue_create: NULL name');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_lock_ms => NULL) $$, '22004', NULL, 'queue_create: NULL lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_alter(NULL, p_lock_ms => 1) $$, '22004', NULL, 'queue_alter: NULL name');
SELECT throws_ok($$ SELECT pgqueue.queue_drop(NULL) $$, '22004', NULL, 'queue_drop: NULL name');
SELECT throws_ok($$ SELECT pgqueue.queue_next_due(NULL) $$, '22004', NULL, 'queue_next_due: NULL name');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_requeue(NULL) $$, '22004', NULL, 'dead_letter_requeue: NULL name');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_purge(NULL) $$, '22004', NULL, 'dead_letter_purge: NULL name');

-- PQ001: unknown queue
SELECT throws_ok($$ SELECT pgqueue.message_create('nope', 'x') $$, 'PQ001', NULL, 'message_create: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('nope', ARRAY['x']::bytea[]) $$, 'PQ001', NULL, 'message_create_batch: unknown queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('nope') $$, 'PQ001', NULL, 'message_dequeue: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('nope', p_lock_ms => 1) $$, 'PQ001', NULL, 'queue_alter: unknown queue');
SELECT throws_ok($$ SELECT * FROM pgqueue.queue_stats('nope') $$, 'PQ001', NULL, 'queue_stats: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.queue_next_due('nope') $$, 'PQ001', NULL, 'queue_next_due: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_requeue('nope') $$, 'PQ001', NULL, 'dead_letter_requeue: unknown queue');
SELECT throws_ok($$ SELECT pgqueue.dead_letter_purge('nope') $$, 'PQ001', NULL, 'dead_letter_purge: unknown queue');
SELECT throws_ok(format('SELECT pgqueue.message_create(%L, %L)', repeat('x', 48), 'x'), 'PQ001', NULL,
                 'a 48-character name is valid, so unknown');

-- 42602: invalid queue names
SELECT throws_ok($$ SELECT pgqueue.queue_create('') $$, '42602', NULL, 'queue_create: empty name');
SELECT throws_ok(format('SELECT pgqueue.queue_create(%L)', repeat('x', 49)), '42602', NULL, 'queue_create: 49 characters');
SELECT throws_ok($$ SELECT pgqueue.queue_create('it''s') $$, '42602', NULL, 'queue_create: quote');
SELECT throws_ok($$ SELECT pgqueue.queue_create('a"b') $$, '42602', NULL, 'queue_create: double quote');
SELECT throws_ok($$ SELECT pgqueue.queue_create('a;b') $$, '42602', NULL, 'queue_create: semicolon');
SELECT throws_ok($$ SELECT pgqueue.queue_create('a b') $$, '42602', NULL, 'queue_create: space');
SELECT throws_ok($$ SELECT pgqueue.queue_create('ünïcode') $$, '42602', NULL, 'queue_create: unicode');
SELECT throws_ok($$ SELECT pgqueue.queue_create('.dot') $$, '42602', NULL, 'queue_create: leading dot');
SELECT throws_ok($$ SELECT pgqueue.queue_create('-dash') $$, '42602', NULL, 'queue_create: leading dash');
SELECT throws_ok($$ SELECT pgqueue.message_create('', 'x') $$, '42602', NULL, 'message_create: empty name');
SELECT throws_ok(format('SELECT pgqueue.message_create(%L, %L)', repeat('x', 49), 'x'), '42602', NULL, 'message_create: 49 characters');
SELECT throws_ok($$ SELECT pgqueue.message_create('a;b', 'x') $$, '42602', NULL, 'message_create: semicolon');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('a b') $$, '42602', NULL, 'message_dequeue: space');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('') $$, '42602', NULL, 'message_dequeue: empty name');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('it''s', p_lock_ms => 1) $$, '42602', NULL, 'queue_alter: quote');
SELECT throws_ok($$ SELECT * FROM pgqueue.queue_stats('队列') $$, '42602', NULL, 'queue_stats: unicode');
SELECT throws_ok($$ SELECT pgqueue.queue_drop('a;b') $$, '42602', NULL, 'queue_drop: semicolon');
SELECT throws_ok(format('SELECT pgqueue.queue_drop(%L)', repeat('x', 49)), '42602', NULL, 'queue_drop: 49 characters');

-- 22023: invalid parameter values
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', 0) $$, '22023', NULL, 'message_dequeue: limit 0');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', -1) $$, '22023', NULL, 'message_dequeue: negative limit');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', 10001) $$, '22023', NULL, 'message_dequeue: limit above 10000');
SELECT throws_ok($$ SELECT * FROM pgqueue.message_dequeue('q', 1, -1) $$, '22023', NULL, 'message_dequeue: negative lock_ms');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat((SELECT id FROM lease), (SELECT attempts FROM lease), -1) $$,
                 '22023', NULL, 'message_heartbeat: negative lock_ms');
SELECT throws_ok($$ SELECT pgqueue.message_heartbeat((SELECT id FROM lease), (SELECT attempts FROM lease), 0) $$,
                 '22023', NULL, 'message_heartbeat: zero lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_lock_ms => 0) $$, '22023', NULL, 'queue_create: zero lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_lock_ms => -1) $$, '22023', NULL, 'queue_create: negative lock_ms');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_max_attempts => -1) $$, '22023', NULL, 'queue_create: negative max_attempts');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_retry_base_ms => 10, p_retry_cap_ms => 5) $$,
                 '22023', NULL, 'queue_create: retry base above cap');
SELECT throws_ok($$ SELECT pgqueue.queue_create('new', p_max_size => -1) $$, '22023', NULL, 'queue_create: negative max_size');
SELECT throws_ok($$ SELECT pgqueue.queue_alter('q', p_lock_ms => -1) $$, '22023', NULL, 'queue_alter: negative lock_ms');
SELECT throws_ok($$ SELECT pgqueue.priority_dequeue_at(-1) $$, '22023', NULL, 'priority_dequeue_at: negative priority');

-- PQ002 / PQ003 / PQ004
SELECT throws_ok($$ SELECT pgqueue.queue_create('q') $$, 'PQ002', NULL, 'queue_create: queue exists');
SELECT throws_ok($$ SELECT pgqueue.queue_create('default') $$, 'PQ002', NULL, 'queue_create: default exists');
SELECT throws_ok($$ SELECT pgqueue.message_create('capped', 'c') $$, 'PQ003', NULL, 'message_create: queue full');
SELECT throws_ok($$ SELECT pgqueue.message_create_batch('capped', ARRAY['c']::bytea[]) $$, 'PQ003', NULL, 'message_create_batch: queue full');
SELECT throws_ok($$ SELECT pgqueue.queue_drop('default') $$, 'PQ004', NULL, 'queue_drop: default');

-- and none of it changed anything
SELECT results_eq($$ SELECT q.name, count(m.id) FROM pgqueue.queue q LEFT JOIN pgqueue.message m ON m.queue_id = q.id
                     GROUP BY q.name ORDER BY q.name $$,
                  $$ VALUES ('capped'::text, 2::bigint), ('default', 0), ('q', 1) $$,
                  'the refused calls created, dropped and deleted nothing');
SELECT results_eq($$ SELECT id, attempts FROM pgqueue.message WHERE locked_until IS NOT NULL $$,
                  $$ SELECT id, attempts FROM lease $$,
                  'the leased message is unchanged');

SELECT * FROM finish();
ROLLBACK;
