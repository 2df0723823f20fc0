\set VERBOSITY terse
SET client_min_messages = warning;
-- Issue 14: idempotent enqueue (a key per message, kept for a window after the message left) and
-- message groups (in order within a group, at most group_concurrency in flight, groups served in
-- turn). Bad keys, groups and settings and their SQLSTATEs: tests/pgtap/20_errors.sql; races:
-- specs/group_order.spec, specs/idempotent_create.spec; index probes: tests/test_group_probes.py.

-- A view of a queue's messages by content, to keep the output free of ids and times.
CREATE FUNCTION pg_temp.got(p_queue text, p_limit integer, p_lock_ms bigint DEFAULT NULL)
RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(convert_from(d.content, 'UTF8'), ' '), '-')
      FROM pgqueue.message_dequeue(p_queue, p_limit, p_lock_ms) d $$;
CREATE FUNCTION pg_temp.done(p_queue text, p_content text)
RETURNS boolean LANGUAGE sql AS $$
    SELECT pgqueue.message_complete(m.id, m.attempts) FROM pgqueue.message m
      JOIN pgqueue.queue q ON q.id = m.queue_id
     WHERE q.name = p_queue AND m.content = convert_to(p_content, 'UTF8') $$;

-- Idempotent enqueue: the same key returns the same id and inserts nothing while the message is
-- live; without a window the key is free once the message is completed.
SELECT pgqueue.queue_create('keys', p_lock_ms => 60000);
SELECT pgqueue.message_create('keys', 'first', p_key => 'order-1') AS k1 \gset
SELECT pgqueue.message_create('keys', 'second', p_key => 'order-1') = :k1 AS same_id;
SELECT pgqueue.message_create_text('keys', 'third') <> :k1 AS no_key_is_a_new_message;
SELECT count(*) AS live_with_key FROM pgqueue.message WHERE idem_key = 'order-1';
SELECT pg_temp.got('keys', 1) AS leased;
SELECT pgqueue.message_create('keys', 'again', p_key => 'order-1') = :k1 AS same_id_while_leased;
SELECT pg_temp.done('keys', 'first');
SELECT pgqueue.message_create('keys', 'after', p_key => 'order-1') <> :k1 AS new_id_after_completion;
-- In a batch: a key that repeats gets the first one's id.
SELECT count(*) AS ids, count(DISTINCT b) AS distinct_ids
  FROM pgqueue.message_create_batch('keys', ARRAY['x', 'y']::bytea[], p_keys => ARRAY['order-2', 'order-2']) b;
SELECT count(*) AS with_order_2 FROM pgqueue.message WHERE idem_key = 'order-2';

-- With a window the key stays taken after its message was completed (or delivered in delete
-- mode, or cancelled), but not after it was dead-lettered.
SELECT pgqueue.queue_create('window', p_key_window_ms => 3600000, p_max_attempts => 1);
SELECT pgqueue.message_create('window', 'w1', p_key => 'done') AS w1 \gset
SELECT pg_temp.got('window', 1, 0) AS delivered;
SELECT pgqueue.message_create('window', 'w2', p_key => 'done') = :w1 AS same_id_within_window;
SELECT count(*) AS live FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = 'window';
SELECT pgqueue.message_create('window', 'c1', p_key => 'cancelled') AS c1 \gset
SELECT count(*) AS cancelled FROM pgqueue.message_cancel('window', ARRAY[:c1]::bigint[]);
SELECT pgqueue.message_create('window', 'c2', p_key => 'cancelled') = :c1 AS same_id_after_cancel;
SELECT pgqueue.message_create('window', 'd1', p_key => 'dead') AS d1 \gset
SELECT pg_temp.got('window', 1) AS leased;
SELECT pgqueue.message_fail(m.id, m.attempts, 'boom') AS dead_lettered FROM pgqueue.message m WHERE m.id = :d1;
SELECT pgqueue.message_create('window', 'd2', p_key => 'dead') <> :d1 AS new_id_after_dead_letter;
-- So does every other way a keyed message leaves through pgqueue's functions: completed in a
-- batch, delivered in delete mode several at a time, acknowledged by Spark.
SELECT pg_temp.got('window', 10, 0) AS delivered;
SELECT pgqueue.message_create('window', 'b1', p_key => 'batch') AS b1 \gset
SELECT pg_temp.got('window', 1) AS leased;
SELECT pgqueue.message_complete_batch(ARRAY[m.id], ARRAY[m.attempts]) AS stale
  FROM pgqueue.message m WHERE m.id = :b1;
SELECT pgqueue.message_create('window', 'b2', p_key => 'batch') = :b1 AS same_id_after_batch_complete;
SELECT count(*) FROM pgqueue.message_create_batch('window', ARRAY['m1', 'm2']::bytea[],
                                                   p_keys => ARRAY['many-1', 'many-2']);
SELECT pg_temp.got('window', 10, 0) AS delivered_two;
SELECT count(*) AS same_ids_after_delete_mode
  FROM pgqueue.message_create_batch('window', ARRAY['m3', 'm4']::bytea[],
                                    p_keys => ARRAY['many-1', 'many-2']) b
 WHERE b IN (SELECT k.id FROM pgqueue.message_key k WHERE k.idem_key LIKE 'many-%');
SELECT pgqueue.message_create('window', 's1', p_key => 'spark') AS s1 \gset
SELECT pgqueue.spark_consumer_open('window', 'etl') AS acked;
SELECT pgqueue.spark_claim('window', 'etl', 10) AS seq;
SELECT pgqueue.spark_ack('window', 'etl', 1) AS acked;
SELECT pgqueue.message_create('window', 's2', p_key => 'spark') = :s1 AS same_id_after_spark_ack;
SELECT count(*) AS live FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = 'window';
SELECT pgqueue.spark_consumer_close('window', 'etl') AS closed;
-- The window ends: the key is free again (the window row is overwritten when it is reused).
UPDATE pgqueue.message_key SET until = 0 WHERE idem_key = 'done';
SELECT pgqueue.message_create('window', 'w3', p_key => 'done') <> :w1 AS new_id_after_window;
SELECT pgqueue.queue_alter('window', p_key_window_ms => 0);
SELECT key_window_ms FROM pgqueue.queue WHERE name = 'window';

-- Groups, at most one in flight per group: a group's next message waits for the one in flight;
-- the groups are served in turn.
SELECT pgqueue.queue_create('grp', p_lock_ms => 60000, p_group_concurrency => 1);
SELECT count(*) FROM pgqueue.message_create_batch('grp', ARRAY['a1', 'a2', 'a3', 'b1', 'b2', 'n1']::bytea[],
                                                   p_groups => ARRAY['a', 'a', 'a', 'b', 'b', NULL]);
SELECT pg_temp.got('grp', 10) AS first_of_each_group;
SELECT pg_temp.got('grp', 10) AS nothing_while_in_flight;
SELECT pg_temp.done('grp', 'b1'), pg_temp.got('grp', 10) AS after_b1;
SELECT pg_temp.done('grp', 'a1'), pg_temp.done('grp', 'b2'), pg_temp.got('grp', 10) AS after_a1_b2;
-- A failed message keeps its group's turn: the group waits for its retry, the next never jumps it.
SELECT pgqueue.message_fail(m.id, m.attempts, 'retry me', pgqueue.now_ms() + 3600000) AS failed
  FROM pgqueue.message m WHERE m.content = 'a2';
SELECT pg_temp.got('grp', 10) AS a3_waits_for_a2;
SELECT pgqueue.queue_next_due('grp') > pgqueue.now_ms() AS not_now_though_a3_is_due;
-- (the hour passes)
UPDATE pgqueue.message SET dequeue_at = dequeue_at - 3600000, turn_at = turn_at - 3600000000 WHERE content = 'a2';
SELECT convert_from(content, 'UTF8') AS retried, attempts FROM pgqueue.message_dequeue('grp', 10);
SELECT pgqueue.message_defer(m.id, m.attempts, NULL) AS deferred FROM pgqueue.message m WHERE m.content = 'a2';
SELECT convert_from(content, 'UTF8') AS deferred_again, attempts FROM pgqueue.message_dequeue('grp', 10);
-- A dead letter passes the turn on.
SELECT pgqueue.message_reject(m.id, m.attempts, 'poison') AS rejected FROM pgqueue.message m WHERE m.content = 'a2';
SELECT pg_temp.got('grp', 10) AS a3_after_the_dead_letter;
SELECT pgqueue.queue_next_due('grp') > pgqueue.now_ms() AS next_due_is_the_lease;
-- A message for a group scheduled later: the group's turn waits until then.
SELECT pgqueue.message_create('grp', 'c1', pgqueue.now_ms() + 3600000, p_group => 'c') IS NOT NULL AS created;
SELECT pg_temp.got('grp', 10) AS nothing_due;
-- An enqueue into a group with nothing in flight and nothing waiting has its turn at once.
SELECT pgqueue.message_create('grp', 'd1', p_group => 'd') IS NOT NULL AS created;
SELECT pg_temp.got('grp', 10) AS d1;
-- Whichever function removes a message passes its group's turn on: a delete-mode dequeue of one
-- message, a completion in a batch.
SELECT count(*) FROM pgqueue.message_create_batch('grp', ARRAY['f1', 'f2', 'f3']::bytea[],
                                                   p_groups => ARRAY['f', 'f', 'f']);
SELECT pg_temp.got('grp', 1, 0) AS f1_deleted;
SELECT pg_temp.got('grp', 1) AS f2_leased;
SELECT pgqueue.message_complete_batch(ARRAY[m.id], ARRAY[m.attempts]) AS stale
  FROM pgqueue.message m WHERE m.content = 'f2';
SELECT pg_temp.got('grp', 1) AS f3_after_the_batch;

-- Round-robin: a big group does not starve a small one that arrived after it.
SELECT pgqueue.queue_create('fair', p_lock_ms => 60000, p_group_concurrency => 0);
SELECT count(*) FROM pgqueue.message_create_batch('fair', array_fill('big'::bytea, ARRAY[6]),
                                                   p_groups => array_fill('big'::text, ARRAY[6]));
SELECT count(*) FROM pgqueue.message_create_batch('fair', ARRAY['s1', 's2']::bytea[], p_groups => ARRAY['small', 'small']);
SELECT pg_temp.got('fair', 1) AS one, pg_temp.got('fair', 1) AS two, pg_temp.got('fair', 1) AS three,
       pg_temp.got('fair', 1) AS four;
-- With no limit a group's messages are all handed out, in turn with the other groups.
SELECT pg_temp.got('fair', 10) AS rest;
SELECT pg_temp.got('fair', 10) AS rest;
SELECT count(*) AS in_flight FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
 WHERE q.name = 'fair' AND m.locked_until IS NOT NULL;

-- Two in flight per group: one call hands out two, the third waits for one of them.
SELECT pgqueue.queue_create('two', p_group_concurrency => 2);
SELECT count(*) FROM pgqueue.message_create_batch('two', ARRAY['t1', 't2', 't3', 't4']::bytea[],
                                                   p_groups => ARRAY['t', 't', 't', 't']);
SELECT pg_temp.got('two', 10) AS leased_two;
SELECT pg_temp.done('two', 't1'), pg_temp.got('two', 10) AS then_t3;
-- In delete mode nothing stays in flight: one call takes the whole group, in order.
SELECT pg_temp.done('two', 't2'), pg_temp.done('two', 't3');
SELECT count(*) FROM pgqueue.message_create_batch('two', ARRAY['u1', 'u2', 'u3']::bytea[], p_groups => ARRAY['t', 't', 't']);
SELECT pg_temp.got('two', 10, 0) AS deleted;
SELECT pgqueue.queue_alter('two', p_group_concurrency => 0);
SELECT group_concurrency FROM pgqueue.queue WHERE name = 'two';

-- A lowered limit: two in flight, then a limit of 1. Completing one hands nothing on while the
-- other is still in flight (the ordered hand-off finds the group still holding a turn and leaves
-- that message's turn as it was); completing the other hands the turn to the third.
SELECT pgqueue.queue_create('low', p_group_concurrency => 2);
SELECT count(*) FROM pgqueue.message_create_batch('low', ARRAY['l1', 'l2', 'l3']::bytea[],
                                                   p_groups => ARRAY['l', 'l', 'l']);
SELECT pg_temp.got('low', 10) AS leased_two;
SELECT pgqueue.queue_alter('low', p_group_concurrency => 1);
SELECT turn_at AS l2_turn FROM pgqueue.message WHERE content = 'l2' \gset
SELECT pg_temp.done('low', 'l1');
SELECT turn_at = :l2_turn AS l2_turn_kept, (SELECT turn_at IS NULL FROM pgqueue.message WHERE content = 'l3') AS l3_waits
  FROM pgqueue.message WHERE content = 'l2';
SELECT pg_temp.got('low', 10) AS nothing;
SELECT pg_temp.done('low', 'l2'), pg_temp.got('low', 10) AS then_l3;

-- A raised limit gives its room to the groups in the order their first waiting messages came
-- (z before a before m), not in the order of their keys (a review: a, m, z).
SELECT pgqueue.queue_create('raise', p_group_concurrency => 1);
SELECT pgqueue.message_create('raise', convert_to(g || '1', 'UTF8'), p_group => g) > 0 AS created
  FROM unnest(ARRAY['z', 'a', 'm']) AS g;
SELECT pgqueue.message_create('raise', convert_to(g || '2', 'UTF8'), p_group => g) > 0 AS created
  FROM unnest(ARRAY['z', 'a', 'm']) AS g;
SELECT pg_temp.got('raise', 10) AS firsts;
SELECT pgqueue.queue_alter('raise', p_group_concurrency => 2);
SELECT pg_temp.got('raise', 10) AS seconds_oldest_first;
-- The same when the groups' first waiting messages are due in the same millisecond: the id of
-- that message decides, not the group's lowest id (b2 came before a2; a_later, due later, has a
-- lower id than b2: a review).
SELECT pgqueue.queue_create('tie', p_group_concurrency => 1);
SELECT pgqueue.message_create('tie', convert_to(c, 'UTF8'), 1000000000000 + d, p_group => g) > 0 AS created
  FROM (VALUES (1, 'b1', 'b', 0), (2, 'a1', 'a', 0), (3, 'a_later', 'a', 100), (4, 'b2', 'b', 0), (5, 'a2', 'a', 0))
       AS v(n, c, g, d) ORDER BY n;
SELECT pg_temp.got('tie', 10) AS firsts;
SELECT pgqueue.queue_alter('tie', p_group_concurrency => 2);
SELECT pg_temp.got('tie', 10) AS b2_first;

-- A lease that runs out inside a group hands the same message out again (attempts 2), never the next.
SELECT pgqueue.queue_create('exp', p_group_concurrency => 1);
SELECT count(*) FROM pgqueue.message_create_batch('exp', ARRAY['e1', 'e2']::bytea[], p_groups => ARRAY['e', 'e']);
SELECT pg_temp.got('exp', 10, 1) AS short_lease;
SELECT pg_sleep(0.01) IS NOT NULL AS slept;
SELECT convert_from(content, 'UTF8') AS again, attempts FROM pgqueue.message_dequeue('exp', 10);

-- Requeued dead letters of a grouped queue come back in a group of their own.
SELECT pgqueue.dead_letter_requeue('grp') AS requeued;
SELECT pg_temp.got('grp', 10) AS requeued_a2;

-- A message created due now goes behind a turn handed on before it was written, even within the
-- same millisecond (its turn's key is the clock's microsecond, as a hand-off's is; keyed in
-- milliseconds it went first 77-97 times in 100): for each way in, 100 rounds of hand-off (b1
-- taken, b2 gets the turn) then a message of another group created at once; b2 must come
-- first, then that message.
SELECT pgqueue.queue_create('order_us', p_group_concurrency => 1);
CREATE TEMP TABLE order_us_rounds (how text, went_first integer);
DO $$
DECLARE
    v_how   text;
    v_wrong integer;
    v_got   text;
    v_w     uuid := gen_random_uuid();
BEGIN
    FOREACH v_how IN ARRAY ARRAY['create', 'create_nogroup', 'batch', 'requeue', 'spark'] LOOP
        v_wrong := 0;
        FOR i IN 1 .. 100 LOOP
            IF v_how = 'requeue' THEN  -- a dead letter ready to come back
                PERFORM pgqueue.message_create('order_us', 'a'::bytea, p_group => 'a');
                PERFORM pgqueue.message_reject(m.id, m.attempts, 'back soon')
                   FROM pgqueue.message_dequeue('order_us', 1, 60000) m;
            ELSIF v_how = 'spark' THEN
                PERFORM pgqueue.spark_stage(v_w, 0, i, 0, ARRAY['a']::bytea[], p_groups => ARRAY['a']);
            END IF;
            PERFORM pgqueue.message_create_batch('order_us', ARRAY['b1', 'b2']::bytea[], p_groups => ARRAY['b', 'b']);
            PERFORM pgqueue.message_dequeue('order_us', 1, 0);  -- b1; b2 gets the turn
            CASE v_how
                WHEN 'create' THEN PERFORM pgqueue.message_create('order_us', 'a'::bytea, p_group => 'a');
                WHEN 'create_nogroup' THEN PERFORM pgqueue.message_create('order_us', 'a'::bytea);
                WHEN 'batch' THEN PERFORM pgqueue.message_create_batch('order_us', ARRAY['a']::bytea[], p_groups => ARRAY['a']);
                WHEN 'requeue' THEN PERFORM pgqueue.dead_letter_requeue('order_us');
                ELSE PERFORM pgqueue.spark_publish('order-us-' || v_w || '-' || i, 'order_us', v_w, ARRAY[0], ARRAY[i::bigint], ARRAY[1::bigint]);
            END CASE;
            SELECT convert_from(content, 'UTF8') INTO v_got FROM pgqueue.message_dequeue('order_us', 1, 0);
            SELECT v_got || ' ' || convert_from(content, 'UTF8') INTO v_got FROM pgqueue.message_dequeue('order_us', 1, 0);
            IF v_got IS DISTINCT FROM 'b2 a' THEN  -- (the second take: 'a' was created)
                v_wrong := v_wrong + 1;
            END IF;
        END LOOP;
        INSERT INTO order_us_rounds VALUES (v_how, v_wrong);
    END LOOP;
END $$;
SELECT how, went_first FROM order_us_rounds;
SELECT count(*) AS left_behind FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = 'order_us';
SELECT pgqueue.queue_drop('order_us');

-- Spark streams do not read grouped queues yet (spark_publish fills them, above): refused, nothing done.
SELECT pgqueue.spark_claim('grp', 'etl', 10);

-- Dropping a grouped queue with keys and windows leaves nothing behind.
SELECT pgqueue.queue_drop('grp'), pgqueue.queue_drop('window'), pgqueue.queue_drop('keys');
SELECT count(*) AS windows_left FROM pgqueue.message_key;
