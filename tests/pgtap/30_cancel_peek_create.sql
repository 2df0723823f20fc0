-- message_cancel, message_peek, message_create_text and message_create_json (issue 16): what
-- each returns and changes, and its errors with their SQLSTATEs.
BEGIN;
SELECT plan(39);

SELECT pgqueue.queue_create('c', p_max_attempts => 3);
SELECT pgqueue.queue_create('other');
CREATE TEMP TABLE m (name text PRIMARY KEY, id bigint);
INSERT INTO m VALUES
    ('ready1', pgqueue.message_create('c', 'r1')),
    ('ready2', pgqueue.message_create('c', 'r2')),
    ('prio',   pgqueue.message_create('c', 'p', pgqueue.priority_dequeue_at(3))),
    ('later',  pgqueue.message_create('c', 'l', pgqueue.now_ms() + 3600000)),
    ('leased', pgqueue.message_create('c', 'x', -100)),
    ('foreign', pgqueue.message_create('other', 'o'));
-- 'leased' (it goes first: its priority is higher) is held under a live lease
SELECT is((SELECT id FROM pgqueue.message_dequeue('c', 1, 600000)), (SELECT id FROM m WHERE name = 'leased'),
          'the high-priority message is leased');
-- an expired lease
INSERT INTO m VALUES ('expired', pgqueue.message_create('c', 'e', -200));
UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1000, attempts = 1, last_error = 'boom'
 WHERE id = (SELECT id FROM m WHERE name = 'expired');

-- peek: delivery order, live leases left out, nothing changes
SELECT results_eq(
    $$SELECT p.id FROM pgqueue.message_peek('c', 10) p$$,
    $$SELECT id FROM m WHERE name IN ('expired', 'prio', 'ready1', 'ready2', 'later')
       ORDER BY array_position(ARRAY['expired', 'prio', 'ready1', 'ready2', 'later'], name)$$,
    'peek: expired leases, then priorities, ready and scheduled messages by (dequeue_at, id)');
SELECT results_eq($$SELECT p.id FROM pgqueue.message_peek('c', 2) p$$,
                  $$SELECT id FROM m WHERE name IN ('expired', 'prio') ORDER BY name$$,
                  'peek: p_limit counts the expired leases too');
SELECT results_eq($$SELECT p.id FROM pgqueue.message_peek('c', 1) p$$,
                  $$SELECT id FROM m WHERE name = 'expired'$$, 'peek: the limit can end in the expired leases');
SELECT is((SELECT row(p.content, p.attempts, p.last_error, p.locked_until IS NOT NULL)::text
             FROM pgqueue.message_peek('c', 1) p),
          row('e'::bytea, 1, 'boom', true)::text, 'peek: content, attempts, last_error, locked_until');
SELECT is((SELECT count(*) FROM pgqueue.message_peek('c', 10) p
            WHERE p.id = (SELECT id FROM m WHERE name = 'later') AND p.dequeue_at > pgqueue.now_ms()), 1::bigint,
          'peek: a scheduled message shows its due time');
SELECT is((SELECT count(*) FROM pgqueue.message WHERE locked_until IS NOT NULL AND locked_until > pgqueue.now_ms()),
          1::bigint, 'peek leased nothing');
SELECT is((SELECT count(*) FROM pgqueue.message_peek('default', 10)), 0::bigint, 'peek: an empty queue');
SELECT is((SELECT p.id FROM pgqueue.message_peek() p), NULL, 'peek: the default queue by default');
SELECT throws_ok($$SELECT * FROM pgqueue.message_peek('nope', 1)$$, 'PQ001', NULL, 'peek: unknown queue');
SELECT throws_ok($$SELECT * FROM pgqueue.message_peek('bad name!', 1)$$, '42602', NULL, 'peek: invalid name');
SELECT throws_ok($$SELECT * FROM pgqueue.message_peek(NULL, 1)$$, '22004', NULL, 'peek: NULL queue');
SELECT throws_ok($$SELECT * FROM pgqueue.message_peek('c', NULL)$$, '22004', 'p_limit must not be NULL', 'peek: NULL limit');
SELECT throws_ok($$SELECT * FROM pgqueue.message_peek('c', 0)$$, '22023',
                 'p_limit must be between 1 and 10000, got 0', 'peek: limit 0');
SELECT throws_ok($$SELECT * FROM pgqueue.message_peek('c', 10001)$$, '22023', NULL, 'peek: limit over 10000');

-- cancel: pending messages of the queue, returned by id; leases, claims and other queues stay
SELECT results_eq(
    $$SELECT c.id, c.content FROM pgqueue.message_cancel('c',
        ARRAY(SELECT id FROM m WHERE name IN ('ready2', 'later', 'leased', 'foreign', 'expired')) || 999999999::bigint) c$$,
    $$SELECT id, content FROM pgqueue.message WHERE id IN (SELECT id FROM m WHERE name IN ('ready2', 'later', 'expired'))
       ORDER BY id$$,
    'cancel: returns the ready, scheduled and expired-lease messages asked for, by id');
SELECT is((SELECT count(*) FROM pgqueue.message WHERE id IN (SELECT id FROM m WHERE name IN ('ready2', 'later', 'expired'))),
          0::bigint, 'cancel: they are gone');
SELECT is((SELECT count(*) FROM pgqueue.message WHERE id IN (SELECT id FROM m WHERE name IN ('leased', 'foreign'))),
          2::bigint, 'cancel: a live lease and another queue''s message stay');
SELECT is((SELECT count(*) FROM pgqueue.message_cancel('c', ARRAY(SELECT id FROM m WHERE name = 'ready2'))), 0::bigint,
          'cancel: twice removes nothing the second time');
SELECT is((SELECT count(*) FROM pgqueue.message_cancel('c', '{}')), 0::bigint, 'cancel: no ids, nothing');
SELECT is((SELECT c.attempts FROM pgqueue.message_cancel('c', ARRAY(SELECT id FROM m WHERE name = 'prio')) c), 0,
          'cancel: returns attempts');
SELECT is((SELECT pgqueue.message_complete(id, 1) FROM m WHERE name = 'leased'), true,
          'cancel: the live lease can still be completed');
SELECT throws_ok($$SELECT * FROM pgqueue.message_cancel('nope', '{1}')$$, 'PQ001', NULL, 'cancel: unknown queue');
SELECT throws_ok($$SELECT * FROM pgqueue.message_cancel('bad name!', '{1}')$$, '42602', NULL, 'cancel: invalid name');
SELECT throws_ok($$SELECT * FROM pgqueue.message_cancel(NULL, '{1}')$$, '22004', NULL, 'cancel: NULL queue');
SELECT throws_ok($$SELECT * FROM pgqueue.message_cancel('c', NULL)$$, '22004', 'p_ids must not be NULL', 'cancel: NULL ids');

-- text: stored exactly, never through bytea's escape syntax
INSERT INTO m VALUES
    ('backslash', pgqueue.message_create_text('c', '{"path":"C:\temp"}')),
    ('hexlike',   pgqueue.message_create_text('c', '\x4869')),
    ('utf8',      pgqueue.message_create_text('c', 'zürich ✓')),
    ('astext',    pgqueue.message_create_text('c', '{"a": 1}', NULL, 'application/json')),
    ('textlater', pgqueue.message_create_text('c', 'later', pgqueue.now_ms() + 60000)),
    ('json',      pgqueue.message_create_json('c', '{"b": 1, "a": "C:\\x"}')),
    ('task',      pgqueue.message_create_json('c', '[1]', p_task => 'send_email'));
CREATE TEMP VIEW made AS SELECT m.name, x.content, x.content_type, x.dequeue_at
                           FROM m JOIN pgqueue.message x USING (id);
SELECT is((SELECT content FROM made WHERE name = 'backslash'), convert_to('{"path":"C:\temp"}', 'UTF8'),
          'text: a backslash stays a backslash');
SELECT is((SELECT row(content, content_type)::text FROM made WHERE name = 'hexlike'),
          row(convert_to('\x4869', 'UTF8'), 'text/plain; charset=utf-8')::text, 'text: ''\x4869'' is not read as hex');
SELECT is((SELECT content FROM made WHERE name = 'utf8'), '\x7ac3bc7269636820e29c93'::bytea, 'text: UTF-8');
SELECT is((SELECT content_type FROM made WHERE name = 'astext'), 'application/json', 'text: a content type of the caller''s');
SELECT ok((SELECT dequeue_at > pgqueue.now_ms() + 50000 FROM made WHERE name = 'textlater'), 'text: scheduled');
SELECT throws_ok($$SELECT pgqueue.message_create_text('c', NULL)$$, '22004', NULL, 'text: NULL content');
SELECT throws_ok($$SELECT pgqueue.message_create_text('nope', 'x')$$, 'PQ001', NULL, 'text: unknown queue');

-- JSON: application/json, a task name in the content type
SELECT is((SELECT row(convert_from(content, 'UTF8'), content_type)::text FROM made WHERE name = 'json'),
          row('{"a": "C:\\x", "b": 1}', 'application/json')::text, 'json: the jsonb text, application/json');
SELECT is((SELECT content_type FROM made WHERE name = 'task'), 'application/json; task=send_email',
          'json: the task in the content type');
SELECT throws_ok($$SELECT pgqueue.message_create_json('c', '{}', p_task => 'a;b')$$, '22023', NULL, 'json: bad task name');
SELECT throws_ok($$SELECT pgqueue.message_create_json('c', '{}', p_task => '')$$, '22023', NULL, 'json: empty task name');
SELECT throws_ok($$SELECT pgqueue.message_create_json('c', NULL)$$, '22004', NULL, 'json: NULL content');
SELECT throws_ok($$SELECT pgqueue.message_create_json('nope', '{}')$$, 'PQ001', NULL, 'json: unknown queue');

SELECT * FROM finish();
ROLLBACK;
