-- The happy path of every public function.
BEGIN;
SELECT plan(58);

-- time
SELECT is(pgqueue.to_epoch('1970-01-01 00:00:01.5+00'), 1500::bigint, 'to_epoch: milliseconds since the epoch');
SELECT is(pgqueue.to_epoch('1969-12-31 23:59:59.9995+00'), -1::bigint, 'to_epoch: floor, also before 1970');
SELECT is(pgqueue.from_epoch(1500), '1970-01-01 00:00:01.5+00'::timestamptz, 'from_epoch: inverse of to_epoch');
SELECT is(pgqueue.to_epoch(pgqueue.from_epoch(1700000000123)), 1700000000123::bigint, 'to_epoch(from_epoch(x)) = x');
SELECT ok(pgqueue.now_ms() BETWEEN pgqueue.to_epoch(now()) AND pgqueue.to_epoch(clock_timestamp()),
          'now_ms is the wall clock in ms');
SELECT is(pgqueue.priority_dequeue_at(0), -1::bigint, 'priority 0 is dequeue_at -1');
SELECT ok(pgqueue.priority_dequeue_at(9) < pgqueue.priority_dequeue_at(1), 'a larger priority sorts first');

-- queues
SELECT lives_ok($$ SELECT pgqueue.queue_create('jobs', p_lock_ms => 5000, p_max_attempts => 3,
                                               p_retry_base_ms => 0, p_retry_cap_ms => 0) $$, 'queue_create');
SELECT lives_ok($$ SELECT pgqueue.queue_create('jobs', p_if_not_exists => true) $$, 'queue_create if not exists');
SELECT results_eq($$ SELECT lock_ms, max_attempts, notify FROM pgqueue.queue_list() WHERE queue = 'jobs' $$,
                  $$ VALUES (5000::bigint, 3, false) $$, 'queue_list shows the settings');
SELECT lives_ok($$ SELECT pgqueue.queue_alter('jobs', p_notify => true, p_max_size => 100) $$, 'queue_alter');
SELECT results_eq($$ SELECT lock_ms, max_attempts, max_size, notify FROM pgqueue.queue_list() WHERE queue = 'jobs' $$,
                  $$ VALUES (5000::bigint, 3, 100::bigint, true) $$, 'queue_alter changed only what it was given');
SELECT lives_ok($$ SELECT pgqueue.queue_alter('jobs', p_max_size => 0, p_max_attempts => 0) $$, 'queue_alter: 0 clears');
SELECT results_eq($$ SELECT max_attempts, max_size FROM pgqueue.queue_list() WHERE queue = 'jobs' $$,
                  $$ VALUES (NULL::integer, NULL::bigint) $$, 'max_attempts and max_size cleared');
SELECT lives_ok($$ SELECT pgqueue.queue_alter('jobs', p_max_attempts => 3) $$, 'queue_alter back to 3 attempts');
SELECT lives_ok($$ SELECT pgqueue.queue_create('tmp') $$, 'queue_create tmp');
SELECT lives_ok($$ SELECT pgqueue.message_create('tmp', 'x') $$, 'a message in tmp');
SELECT is(pgqueue.queue_drop('tmp'), true, 'queue_drop: true when it existed');
SELECT is(pgqueue.queue_drop('tmp'), false, 'queue_drop: false when it did not');
SELECT is((SELECT count(*)::int FROM pgqueue.message m WHERE NOT EXISTS
             (SELECT 1 FROM pgqueue.queue q WHERE q.id = m.queue_id)), 0, 'queue_drop leaves no orphan messages');

-- producing
CREATE TEMP TABLE ids (n serial, id bigint);
SELECT lives_ok($$ INSERT INTO ids (id) SELECT pgqueue.message_create('jobs', 'one') $$, 'message_create');
SELECT lives_ok($$ INSERT INTO ids (id) SELECT pgqueue.message_create_batch('jobs', ARRAY['two', 'three', 'four']::bytea[]) $$,
                'message_create_batch');
SELECT is((SELECT array_agg(id ORDER BY n) FROM ids),
          (SELECT array_agg(id ORDER BY id) FROM ids), 'ids in input order, ascending');
SELECT is((SELECT array_agg(convert_from(m.content, 'UTF8') ORDER BY m.id) FROM pgqueue.message m
            JOIN ids USING (id)), ARRAY['one', 'two', 'three', 'four'], 'contents stored in input order');
SELECT ok((SELECT bool_and(m.dequeue_at BETWEEN pgqueue.to_epoch(now()) AND pgqueue.now_ms())
             AND count(DISTINCT m.dequeue_at) FILTER (WHERE m.id <> (SELECT min(id) FROM ids)) = 1
            FROM pgqueue.message m JOIN ids USING (id)),
          'dequeue_at is now, read when each call writes (one value for a batch)');
SELECT lives_ok($$ SELECT pgqueue.message_create('hello') $$, 'message_create(bytea) on the default queue');
SELECT is((SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue()), 'hello',
          'message_dequeue() with no arguments takes from the default queue');
SELECT is((SELECT count(*)::int FROM pgqueue.message_create_batch('jobs', ARRAY[]::bytea[])), 0, 'an empty batch creates nothing');
SELECT lives_ok($$ SELECT pgqueue.message_create('jobs', 'later', pgqueue.now_ms() + 3600000, 'text/plain') $$,
                'message_create scheduled with a content type');
SELECT results_eq($$ SELECT ready, scheduled, leased, dead FROM pgqueue.queue_stats('jobs') $$,
                  $$ VALUES (4::bigint, 1::bigint, 0::bigint, 0::bigint) $$, 'queue_stats counts ready and scheduled');
SELECT ok(pgqueue.queue_next_due('jobs') <= pgqueue.now_ms(), 'queue_next_due: something is due now');

-- lease, heartbeat, defer, complete
CREATE TEMP TABLE got AS SELECT * FROM pgqueue.message_dequeue('jobs', 2, 60000);
SELECT is((SELECT array_agg(id ORDER BY id) FROM got), (SELECT array_agg(id) FROM ids WHERE n <= 2),
          'message_dequeue hands out the oldest two, FIFO');
SELECT ok((SELECT bool_and(attempts = 1 AND locked_until > pgqueue.now_ms()) FROM got), 'leased: attempts 1, locked_until ahead');
SELECT results_eq($$ SELECT ready, leased FROM pgqueue.queue_stats('jobs') $$,
                  $$ VALUES (2::bigint, 2::bigint) $$, 'queue_stats counts the leases');
SELECT is(pgqueue.message_heartbeat((SELECT min(id) FROM got), 1, 120000), true, 'message_heartbeat extends the lease');
SELECT ok((SELECT locked_until FROM pgqueue.message WHERE id = (SELECT min(id) FROM got)) > pgqueue.now_ms() + 60000,
          'the lease now runs longer');
SELECT is(pgqueue.message_complete((SELECT min(id) FROM got), 1), true, 'message_complete');
SELECT is((SELECT count(*)::int FROM pgqueue.message WHERE id = (SELECT min(id) FROM got)), 0, 'a completed message is gone');
SELECT is(pgqueue.message_defer((SELECT max(id) FROM got), 1, pgqueue.priority_dequeue_at(0), 'checkpoint'), true,
          'message_defer with state');
SELECT results_eq($$ SELECT id, attempts, state FROM pgqueue.message_dequeue('jobs', 1, 60000) $$,
                  $$ SELECT max(id), 2, 'checkpoint'::bytea FROM got $$,
                  'the deferred message comes back with its state and the next token');
SELECT is(pgqueue.message_defer((SELECT max(id) FROM got), 2, pgqueue.priority_dequeue_at(0)), true,
          'message_defer without state');
SELECT is((SELECT state FROM pgqueue.message WHERE id = (SELECT max(id) FROM got)), 'checkpoint'::bytea,
          'a NULL state keeps the checkpoint');

-- fail, retry, dead letters (max_attempts 3)
CREATE TEMP TABLE f (id bigint);
INSERT INTO f SELECT pgqueue.message_create('jobs', 'doomed', pgqueue.priority_dequeue_at(50));
SELECT results_eq($$ SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1, 60000) $$,
                  $$ SELECT id, 1 FROM f $$, 'a priority message is handed out first');
SELECT is(pgqueue.message_fail((SELECT id FROM f), 1, 'first error', pgqueue.priority_dequeue_at(50)), true,
          'message_fail retries');
SELECT results_eq($$ SELECT locked_until IS NULL, last_error FROM pgqueue.message WHERE id = (SELECT id FROM f) $$,
                  $$ VALUES (true, 'first error'::text) $$, 'a failed message waits unleased with its error');
SELECT is(pgqueue.message_fail((SELECT id FROM f), 1, 'again'), false, 'a second fail with the same token is stale');
SELECT results_eq($$ SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1, 60000) $$,
                  $$ SELECT id, 2 FROM f $$, 'delivered again');
SELECT is(pgqueue.message_fail((SELECT id FROM f), 2, 'second error', pgqueue.priority_dequeue_at(50)), true,
          'message_fail retries again');
SELECT results_eq($$ SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1, 60000) $$,
                  $$ SELECT id, 3 FROM f $$, 'third attempt');
SELECT is(pgqueue.message_fail((SELECT id FROM f), 3, 'last straw'), true, 'message_fail at max_attempts');
SELECT is((SELECT format('%s|%s|%s|%s|%s', id, queue, attempts, last_error, convert_from(content, 'UTF8'))
             FROM pgqueue.dead_letters),
          (SELECT format('%s|jobs|3|last straw|doomed', id) FROM f), 'the message is a dead letter');
SELECT is((SELECT dead FROM pgqueue.queue_stats('jobs')), 1::bigint, 'queue_stats counts the dead');
SELECT is(pgqueue.dead_letter_requeue('jobs'), 1::bigint, 'dead_letter_requeue');
SELECT results_eq($$ SELECT attempts, id > (SELECT id FROM f) FROM pgqueue.message WHERE content = 'doomed' $$,
                  $$ VALUES (0, true) $$, 'requeued as a new message (new id) with attempts 0');
SELECT is((SELECT count(*)::int FROM pgqueue.dead_letter), 0, 'the dead letter is gone');

-- delete mode
-- due now: "two" (deferred), "three", "four" and the requeued "doomed"; "later" is scheduled
SELECT is((SELECT count(*)::int FROM pgqueue.message_dequeue('jobs', 10, 0)), 4, 'delete mode hands out what is due');
SELECT is((SELECT count(*)::int FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
            WHERE q.name = 'jobs' AND m.locked_until IS NULL AND m.dequeue_at <= pgqueue.now_ms()), 0,
          'and deletes it');
SELECT is(pgqueue.dead_letter_purge('jobs'), 0::bigint, 'dead_letter_purge on an empty list');

SELECT * FROM finish();
ROLLBACK;
