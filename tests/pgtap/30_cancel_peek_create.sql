-- message_cancel, message_peek, message_create_text and message_create_json (issue 16): what
-- each returns and changes, and its errors with their SQLSTATEs; the message groups and
-- idempotency keys of the text and JSON entry points (message_create's: sql/90_groups.sql).
BEGIN;
SELECT plan(76);

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
-- a NULL among the ids is refused before anything is cancelled (it cancelled the others)
SELECT throws_ok($$SELECT * FROM pgqueue.message_cancel('c', ARRAY[(SELECT id FROM m WHERE name = 'ready1'), NULL])$$,
                 '22004', 'p_ids must not contain NULL', 'cancel: a NULL id');
SELECT is((SELECT count(*) FROM pgqueue.message WHERE id = (SELECT id FROM m WHERE name = 'ready1')), 1::bigint,
          'cancel: the refused call cancelled nothing');

-- text: stored exactly, never through bytea's escape syntax
INSERT INTO m VALUES
    ('backslash', pgqueue.message_create_text('c', '{"path":"C:\temp"}')),
    ('hexlike',   pgqueue.message_create_text('c', '\x4869')),
    ('utf8',      pgqueue.message_create_text('c', 'zürich ✓')),
    ('astext',    pgqueue.message_create_text('c', '{"a": 1}', NULL, 'application/json')),
    ('textlater', pgqueue.message_create_text('c', 'later', pgqueue.now_ms() + 60000)),
    ('textnull',  pgqueue.message_create_text('c', 'n', NULL, NULL)),
    ('textutf8',  pgqueue.message_create_text('c', 'u', NULL, 'text/csv; Charset = "UTF8"')),
    ('textutf_8', pgqueue.message_create_text('c', 'u', NULL, 'text/plain; charset=UTF_8')),
    ('textascii', pgqueue.message_create_text('c', 'plain ascii', NULL, 'application/json; CHARSET="us-ascii"')),
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
-- a NULL content type is the default (drivers bind every parameter); a charset, if named, is
-- UTF-8's (any case, spelled utf-8, utf8 or utf_8, as the codec reads it), what the bytes are,
-- or us-ascii / ascii on an ASCII text: any other, or an ASCII label on a text outside ASCII, is
-- refused, and nothing is stored
SELECT is((SELECT content_type FROM made WHERE name = 'textnull'), 'text/plain; charset=utf-8',
          'text: a NULL content type is the default');
SELECT is((SELECT content_type FROM made WHERE name = 'textutf8'), 'text/csv; Charset = "UTF8"',
          'text: a UTF-8 charset in another spelling, kept as given');
SELECT throws_ok($$SELECT pgqueue.message_create_text('c', 'café', NULL, 'text/plain; charset=latin1')$$, '22023',
                 'content type ''text/plain; charset=latin1'' names charset ''latin1'', but message_create_text stores the text as UTF-8',
                 'text: charset latin1');
SELECT throws_ok($$SELECT pgqueue.message_create_text('c', 'refused', NULL, 'text/plain; charset=utf-16')$$, '22023', NULL,
                 'text: charset utf-16');
SELECT throws_ok($$SELECT pgqueue.message_create_text('c', 'refused', NULL, 'text/plain; charset=nonsense')$$, '22023', NULL,
                 'text: an unknown charset');
SELECT is((SELECT content_type FROM made WHERE name = 'textutf_8'), 'text/plain; charset=UTF_8',
          'text: charset UTF_8, kept as given');
SELECT is((SELECT row(content, content_type)::text FROM made WHERE name = 'textascii'),
          row('plain ascii'::bytea, 'application/json; CHARSET="us-ascii"')::text,
          'text: charset us-ascii on an ASCII text, kept as given');
SELECT throws_ok($$SELECT pgqueue.message_create_text('c', 'café', NULL, 'application/json; CHARSET="us-ascii"')$$, '22023',
                 'content type ''application/json; CHARSET="us-ascii"'' names charset ''us-ascii'', but message_create_text stores the text as UTF-8 and the text is not ASCII',
                 'text: charset us-ascii on a text outside ASCII');
SELECT throws_ok($$SELECT pgqueue.message_create_text('c', 'é', NULL, 'text/plain; charset=ascii')$$, '22023', NULL,
                 'text: charset ascii on a text outside ASCII');
SELECT throws_ok($$SELECT pgqueue.message_create_text('c', 'refused', NULL, 'text/plain; charset=utf-8; charset=latin1')$$, '22023', NULL,
                 'text: a second charset that is not UTF-8');
SELECT is((SELECT count(*) FROM pgqueue.message x WHERE x.content IN (convert_to('café', 'UTF8'), convert_to('é', 'UTF8'), 'refused'::bytea)
             AND x.queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'c')), 0::bigint,
          'text: the refused calls stored nothing');

-- JSON: application/json, a task name in the content type
SELECT is((SELECT row(convert_from(content, 'UTF8'), content_type)::text FROM made WHERE name = 'json'),
          row('{"a": "C:\\x", "b": 1}', 'application/json')::text, 'json: the jsonb text, application/json');
SELECT is((SELECT content_type FROM made WHERE name = 'task'), 'application/json; task=send_email',
          'json: the task in the content type');
SELECT throws_ok($$SELECT pgqueue.message_create_json('c', '{}', p_task => 'a;b')$$, '22023', NULL, 'json: bad task name');
SELECT throws_ok($$SELECT pgqueue.message_create_json('c', '{}', p_task => '')$$, '22023', NULL, 'json: empty task name');
SELECT throws_ok($$SELECT pgqueue.message_create_json('c', '{}', p_task => repeat('t', 10000))$$, '22023',
                 'invalid task name ''' || repeat('t', 100) || ''' (10000 characters)', 'json: a long task name: its start and length');
-- every long bad value is quoted by its start, with its length when cut
SELECT throws_ok($$SELECT pgqueue.message_create(repeat('q', 500), 'x')$$, '42602',
                 'invalid queue name ''' || repeat('q', 100) || ''' (500 characters)', 'a long queue name: its start and length');
SELECT throws_ok($$SELECT pgqueue.spark_consumer_open('c', repeat('n', 300) || ' x')$$, '42602',
                 'invalid consumer name ''' || repeat('n', 120) || ''' (302 characters)', 'a long consumer name: its start and length');
SELECT throws_ok($$SELECT pgqueue.message_create_text('c', 'x', NULL, 'text/plain; charset=' || repeat('l', 300))$$, '22023',
                 'content type ''text/plain; charset=' || repeat('l', 180) || ''' (320 characters) names charset '''
                 || repeat('l', 100) || ''' (300 characters), but message_create_text stores the text as UTF-8',
                 'text: a long content type and charset: their starts and lengths');
SELECT throws_ok($$SELECT pgqueue.message_create_json('c', NULL)$$, '22004', NULL, 'json: NULL content');
SELECT throws_ok($$SELECT pgqueue.message_create_json('nope', '{}')$$, 'PQ001', NULL, 'json: unknown queue');

-- groups: p_group is message_create's. In a queue of group_concurrency 1 the second message of
-- a group waits while the first is leased, whichever entry point enqueued it.
SELECT pgqueue.queue_create('g', p_group_concurrency => 1);
INSERT INTO m VALUES ('ta1', pgqueue.message_create_text('g', 'a1', p_group => 'a'));
INSERT INTO m VALUES ('ta2', pgqueue.message_create_text('g', 'a2', NULL, 'text/plain', 'a'));
INSERT INTO m VALUES ('jb1', pgqueue.message_create_json('g', '{"b": 1}', p_task => 'send_email', p_group => 'b'));
INSERT INTO m VALUES ('jb2', pgqueue.message_create_json('g', '{"b": 2}', NULL, NULL, 'b'));
SELECT results_eq($$SELECT x.group_key, x.content_type FROM m JOIN pgqueue.message x USING (id)
                     WHERE m.name IN ('ta1', 'ta2', 'jb1', 'jb2') ORDER BY m.name$$,
                  $$VALUES ('b', 'application/json; task=send_email'), ('b', 'application/json'),
                           ('a', 'text/plain; charset=utf-8'), ('a', 'text/plain')$$,
                  'groups: text and json store the group, with their content types');
SELECT results_eq($$SELECT d.id FROM pgqueue.message_dequeue('g', 10, 600000) d ORDER BY d.id$$,
                  $$SELECT id FROM m WHERE name IN ('ta1', 'jb1') ORDER BY id$$,
                  'groups: the first of each group is handed out, not the second');
SELECT is((SELECT count(*) FROM pgqueue.message_dequeue('g', 10, 600000)), 0::bigint,
          'groups: nothing more while the first of each group is leased');
SELECT is((SELECT pgqueue.message_complete(id, 1) FROM m WHERE name = 'ta1'), true, 'groups: text: the first completed');
SELECT results_eq($$SELECT d.id FROM pgqueue.message_dequeue('g', 10, 600000) d$$,
                  $$SELECT id FROM m WHERE name = 'ta2'$$, 'groups: text: then the second of its group, alone');
SELECT is((SELECT pgqueue.message_complete(id, 1) FROM m WHERE name = 'jb1'), true, 'groups: json: the first completed');
SELECT results_eq($$SELECT d.id FROM pgqueue.message_dequeue('g', 10, 600000) d$$,
                  $$SELECT id FROM m WHERE name = 'jb2'$$, 'groups: json: then the second of its group, alone');

-- keys: p_key is message_create's. A taken key returns the live message's id and inserts
-- nothing, whichever entry point took it (keys are per queue), and stays taken within the
-- queue's key window after its message left.
SELECT pgqueue.queue_create('k', p_key_window_ms => 3600000);
INSERT INTO m VALUES ('tk', pgqueue.message_create_text('k', 'first', p_key => 'order-1'));
INSERT INTO m VALUES ('jk', pgqueue.message_create_json('k', '{"n": 1}', NULL, NULL, NULL, 'order-2'));
SELECT isnt((SELECT id FROM m WHERE name = 'tk'), (SELECT id FROM m WHERE name = 'jk'), 'keys: two keys, two messages');
SELECT is(pgqueue.message_create_text('k', 'again', p_key => 'order-1'), (SELECT id FROM m WHERE name = 'tk'),
          'keys: text: a taken key returns the live message''s id');
SELECT is(pgqueue.message_create_json('k', '{"n": 2}', p_key => 'order-2'), (SELECT id FROM m WHERE name = 'jk'),
          'keys: json: a taken key returns the live message''s id');
SELECT is(pgqueue.message_create_json('k', '{"n": 3}', p_key => 'order-1'), (SELECT id FROM m WHERE name = 'tk'),
          'keys: json: a key taken by message_create_text, the same id');
SELECT is(pgqueue.message_create('k', 'bytes', p_key => 'order-2'), (SELECT id FROM m WHERE name = 'jk'),
          'keys: message_create agrees');
SELECT results_eq($$SELECT x.idem_key, x.content FROM pgqueue.message x
                     JOIN pgqueue.queue q ON q.id = x.queue_id WHERE q.name = 'k' ORDER BY x.id$$,
                  $$VALUES ('order-1', 'first'::bytea), ('order-2', '{"n": 1}'::bytea)$$,
                  'keys: the first messages alone, unchanged');
SELECT is((SELECT count(*) FROM pgqueue.message_dequeue('k', 10, 0)), 2::bigint, 'keys: both delivered in delete mode');
SELECT is(pgqueue.message_create_text('k', 'later', p_key => 'order-1'), (SELECT id FROM m WHERE name = 'tk'),
          'keys: text: within the key window the key is still taken');
SELECT is(pgqueue.message_create_json('k', '{"n": 4}', p_key => 'order-2'), (SELECT id FROM m WHERE name = 'jk'),
          'keys: json: within the key window the key is still taken');
SELECT is((SELECT count(*) FROM pgqueue.message x JOIN pgqueue.queue q ON q.id = x.queue_id WHERE q.name = 'k'),
          0::bigint, 'keys: nothing inserted within the window');
SELECT is(pgqueue.message_create_json('g', '{}', p_group => 'c', p_key => 'both'),
          pgqueue.message_create_text('g', 'x', p_group => 'c', p_key => 'both'),
          'keys: with a group too, the same id');

-- message_peek shows expired leases in the order a dequeue takes them, by expiry (no test had
-- two of them: a mutation-testing review)
SELECT pgqueue.queue_create('pk');
SELECT count(*) FROM (SELECT pgqueue.message_create_text('pk', t) FROM unnest('{a,b,c}'::text[]) t) s;
SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('pk', 1, 300);  -- a, lease 300 ms
SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('pk', 1, 100);  -- b, 100 ms
SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('pk', 1, 200);  -- c, 200 ms
SELECT pg_sleep(0.5);
SELECT is(ARRAY(SELECT convert_from(content, 'UTF8') FROM pgqueue.message_peek('pk')), '{b,c,a}',
          'peek: expired leases by expiry, as a dequeue takes them');

-- queue_alter: a NULL setting keeps it, for every setting (an alter of lock_ms reset nothing;
-- the key window's "NULL keeps" was not pinned: a mutation-testing review)
SELECT pgqueue.queue_create('ka', p_key_window_ms => 60000, p_max_attempts => 3, p_max_size => 100,
                            p_retry_base_ms => 100, p_retry_cap_ms => 1000, p_notify => true,
                            p_group_concurrency => 2, p_rate_limit => 50);
SELECT pgqueue.queue_alter('ka', p_lock_ms => 5000);
SELECT is((SELECT row(lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify, group_concurrency,
                      key_window_ms, rate_limit)::text FROM pgqueue.queue_list() WHERE queue = 'ka'),
          row(5000, 3, 100, 1000, 100, true, 2, 60000, 50)::text, 'queue_alter: NULL keeps every other setting');

SELECT * FROM finish();
ROLLBACK;
