\set VERBOSITY terse
SET client_min_messages = warning;
-- Failure and dead letters: back-off, max_attempts via fail and via lease expiry,
-- the dead_letters view, requeue and purge.
-- pg_regress shows scenarios and their output; which bad call gets which SQLSTATE is tested in
-- tests/pgtap/20_errors.sql. The refused requeue into a full queue stays here as a step of its
-- scenario (the dead letters stay, and go back once there is room).

CREATE FUNCTION pg_temp.err(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE p_sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- The back-off of the n-th failure is uniform in [d/2, d], d = min(cap, base * 2^(n-1)).
SELECT n, base, cap,
       min(b) >= least(cap, base * 2 ^ greatest(n - 1, 0)) / 2 AS min_ok,
       max(b) <= least(cap, base * 2 ^ greatest(n - 1, 0)) AS max_ok,
       count(DISTINCT b) > 1 AS jittered
  FROM (VALUES (1, 100, 10000), (2, 100, 10000), (4, 100, 10000), (8, 100, 10000),
               (0, 100, 10000), (30, 1000, 3600000), (1000, 1000, 3600000)) t(n, base, cap),
       LATERAL (SELECT pgqueue._backoff_ms(t.n, t.base, t.cap) AS b FROM generate_series(1, 500)) s
 GROUP BY n, base, cap
 ORDER BY n, base;
SELECT DISTINCT pgqueue._backoff_ms(3, 0, 0) AS no_backoff FROM generate_series(1, 20);

SELECT pgqueue.queue_create('qdl', p_max_attempts => 3, p_retry_base_ms => 100000,
                            p_retry_cap_ms => 150000);

-- fail: the message becomes ready again after the back-off, keeps attempts, records the error.
SELECT pgqueue.message_create('qdl', convert_to('flaky', 'UTF8'), NULL, 'text/plain') AS f \gset
SELECT attempts FROM pgqueue.message_dequeue('qdl');
SELECT pgqueue.now_ms() AS before_ms \gset
SELECT pgqueue.message_fail(:f, 1, 'first error') AS failed;
SELECT attempts, locked_until, last_error,
       dequeue_at BETWEEN :before_ms + 50000 AND pgqueue.now_ms() + 100000 AS backoff_1
  FROM pgqueue.message WHERE id = :f;
SELECT count(*) AS delivered_during_backoff FROM pgqueue.message_dequeue('qdl');
SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats('qdl');
-- The back-off doubles with each attempt, up to the cap.
UPDATE pgqueue.message SET dequeue_at = 0 WHERE id = :f;
SELECT attempts FROM pgqueue.message_dequeue('qdl');
SELECT pgqueue.now_ms() AS before_ms \gset
SELECT pgqueue.message_fail(:f, 2, 'second error') AS failed;
SELECT attempts, last_error,
       dequeue_at BETWEEN :before_ms + 75000 AND pgqueue.now_ms() + 150000 AS backoff_2_capped
  FROM pgqueue.message WHERE id = :f;
-- An explicit p_dequeue_at replaces the back-off.
UPDATE pgqueue.message SET dequeue_at = 0 WHERE id = :f;
SELECT attempts FROM pgqueue.message_dequeue('qdl');
SELECT pgqueue.message_fail(:f, 3, 'third error', 0) AS failed;
-- That was attempt 3 of 3: the message is a dead letter now, with the last error.
SELECT count(*) AS live FROM pgqueue.message WHERE id = :f;
SELECT id = :f AS same_id, queue, convert_from(content, 'UTF8') AS content, content_type, state,
       attempts, last_error, dead_at BETWEEN created_at AND pgqueue.now_ms() AS dead_at_ok,
       dead_time = pgqueue.from_epoch(dead_at) AS dead_time_ok
  FROM pgqueue.dead_letters WHERE queue = 'qdl' ORDER BY id;
SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats('qdl');
-- A stale fail on a dead letter does nothing.
SELECT pgqueue.message_fail(:f, 3, 'again') AS failed_again;

-- max_attempts via lease expiry: a lease that ran out max_attempts times is dead, not redelivered.
SELECT pgqueue.queue_alter('qdl', p_max_attempts => 2);
SELECT pgqueue.message_create('qdl', convert_to('crashy', 'UTF8')) AS c \gset
SELECT pgqueue.message_create('qdl', convert_to('fine', 'UTF8')) AS ok \gset
SELECT id = :c AS is_c, attempts FROM pgqueue.message_dequeue('qdl', 1, 1);
SELECT pg_sleep(0.01);
SELECT id = :c AS is_c, attempts FROM pgqueue.message_dequeue('qdl', 1, 1);
SELECT pg_sleep(0.01);
-- The next dequeue moves it to the dead letters and hands out the next message instead.
SELECT id = :ok AS is_ok, attempts FROM pgqueue.message_dequeue('qdl', 10);
SELECT id = :c AS is_c, convert_from(content, 'UTF8') AS content, attempts, last_error
  FROM pgqueue.dead_letters WHERE queue = 'qdl' AND id = :c;
SELECT pgqueue.message_complete(:c, 2) AS stale_complete;
SELECT pgqueue.message_complete(:ok, 1) AS complete_ok;

-- Lowering max_attempts applies to messages already past it on their next failure.
SELECT pgqueue.queue_alter('qdl', p_max_attempts => 0);
SELECT pgqueue.message_create('qdl', convert_to('unlimited', 'UTF8')) AS u \gset
SELECT attempts FROM pgqueue.message_dequeue('qdl');
SELECT pgqueue.message_fail(:u, 1, 'e1', 0);
SELECT attempts FROM pgqueue.message_dequeue('qdl');
SELECT pgqueue.message_fail(:u, 2, 'e2', 0);
SELECT attempts FROM pgqueue.message_dequeue('qdl');
SELECT pgqueue.message_fail(:u, 3, 'e3', 0);
SELECT count(*) AS live_after_3_failures FROM pgqueue.message WHERE id = :u;
SELECT pgqueue.queue_alter('qdl', p_max_attempts => 2);
SELECT attempts FROM pgqueue.message_dequeue('qdl');
SELECT pgqueue.message_fail(:u, 4, 'e4', 0);
SELECT id = :u AS is_u, attempts, last_error FROM pgqueue.dead_letters WHERE id = :u;

-- The view lists the dead letters of every queue.
SELECT queue, convert_from(content, 'UTF8') AS content, attempts, last_error
  FROM pgqueue.dead_letters WHERE queue = 'qdl' ORDER BY id;

-- Requeue by id: a new message with a fresh id and attempts 0, same content and state.
SELECT pgqueue.dead_letter_requeue('qdl', ARRAY[:f]::bigint[]) AS requeued;
SELECT count(*) AS still_dead FROM pgqueue.dead_letter WHERE id = :f;
SELECT m.id <> :f AS new_id, m.id > :u AS id_from_sequence, convert_from(m.content, 'UTF8') AS content,
       m.content_type, m.attempts, m.last_error, m.locked_until,
       m.dequeue_at <= pgqueue.now_ms() AS due_now
  FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
 WHERE q.name = 'qdl' ORDER BY m.id;
-- The old token cannot touch the new message.
SELECT pgqueue.message_complete(:f, 3) AS old_token;
SELECT id <> :f AS new_id, convert_from(content, 'UTF8') AS content, attempts
  FROM pgqueue.message_dequeue('qdl', 1, 0);
-- Requeue ids of another queue or unknown ids: nothing.
SELECT pgqueue.queue_create('qdl2');
SELECT pgqueue.dead_letter_requeue('qdl2', ARRAY[:c, :u]::bigint[]) AS other_queue;
SELECT pgqueue.dead_letter_requeue('qdl', ARRAY[-1]::bigint[]) AS unknown_ids;
SELECT pgqueue.dead_letter_requeue('qdl', '{}'::bigint[]) AS empty_ids;
-- Requeue all, scheduled for later.
SELECT pgqueue.dead_letter_requeue('qdl', p_dequeue_at => pgqueue.now_ms() + 3600000) AS requeued_all;
SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats('qdl');
SELECT convert_from(content, 'UTF8') AS content, attempts, last_error
  FROM pgqueue.message m WHERE queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'qdl')
 ORDER BY id;
SELECT pgqueue.dead_letter_requeue('qdl') AS nothing_left;

-- Requeue into a full queue is refused as a whole (PQ003): the dead letters stay.
SELECT pgqueue.queue_create('qdlcap', p_max_attempts => 1, p_max_size => 2);
SELECT count(*) FROM pgqueue.message_create_batch('qdlcap', ARRAY['\x01', '\x02']::bytea[]);
SELECT count(*) FROM (SELECT pgqueue.message_fail(id, attempts, 'bad') FROM pgqueue.message_dequeue('qdlcap', 2)) s;
SELECT pgqueue.message_create('qdlcap', '\x03') > 0 AS created;
SELECT pg_temp.err($$SELECT pgqueue.dead_letter_requeue('qdlcap')$$);
SELECT queue, ready, dead FROM pgqueue.queue_stats('qdlcap');
-- Once there is room for all of them, they go back.
SELECT encode(content, 'hex') AS took FROM pgqueue.message_dequeue('qdlcap', 1, 0);
SELECT pgqueue.dead_letter_requeue('qdlcap') AS requeued;
SELECT queue, ready, dead FROM pgqueue.queue_stats('qdlcap');

-- Purge: by ids, by time, all; only the named queue.
SELECT count(*) FROM pgqueue.message_create_batch('qdl2', ARRAY['\x01', '\x02', '\x03', '\x04']::bytea[]);
SELECT pgqueue.queue_alter('qdl2', p_max_attempts => 1);
SELECT count(*) FROM (SELECT pgqueue.message_fail(id, attempts, 'bad') FROM pgqueue.message_dequeue('qdl2', 4)) s;
SELECT count(*) AS dead_in_qdl2 FROM pgqueue.dead_letters WHERE queue = 'qdl2';
SELECT pgqueue.dead_letter_purge('qdl2', (SELECT array_agg(id) FROM (SELECT id FROM pgqueue.dead_letters WHERE queue = 'qdl2' ORDER BY id LIMIT 1) s)) AS purged_by_id;
SELECT pgqueue.dead_letter_purge('qdl2', ARRAY[:c]::bigint[]) AS other_queue_id;
SELECT pgqueue.dead_letter_purge('qdl2', p_before => 0) AS dead_before_1970;
SELECT pgqueue.dead_letter_purge('qdl2', (SELECT array_agg(id) FROM pgqueue.dead_letters WHERE queue = 'qdl2'), 0) AS ids_and_before;
SELECT pgqueue.dead_letter_purge('qdl2', p_before => pgqueue.now_ms() + 1) AS purged_before_now;
SELECT pgqueue.dead_letter_purge('qdl2') AS nothing_left;
SELECT count(*) FROM (SELECT pgqueue.message_fail(id, attempts, 'bad') FROM pgqueue.message_dequeue('qdlcap', 2)) s;
SELECT pgqueue.dead_letter_purge('qdlcap') AS purged_all;
SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats() WHERE queue IN ('qdl', 'qdl2', 'qdlcap') ORDER BY queue COLLATE "C";

-- A dequeue of one message (its own take statement, without the aggregate of larger takes) that
-- meets a lease run out max_attempts times: the lease goes to the dead letters and the same call
-- hands out the next message; on a queue without groups and on one with them.
SELECT pgqueue.queue_create('qdl1', p_max_attempts => 1);
SELECT pgqueue.queue_create('qdl1g', p_max_attempts => 1, p_group_concurrency => 1);
SELECT pgqueue.message_create('qdl1', '\x01') AS p1 \gset
SELECT pgqueue.message_create('qdl1', '\x02') AS n1 \gset
SELECT pgqueue.message_create('qdl1g', '\x01', p_group => 'a') AS pg1 \gset
SELECT pgqueue.message_create('qdl1g', '\x02', p_group => 'b') AS ng1 \gset
SELECT id = :p1 AS is_poison FROM pgqueue.message_dequeue('qdl1', 1, 1);
SELECT id = :pg1 AS is_poison FROM pgqueue.message_dequeue('qdl1g', 1, 1);
SELECT pg_sleep(0.01);
SELECT id = :n1 AS is_next, attempts FROM pgqueue.message_dequeue('qdl1', 1, 0);
SELECT id = :ng1 AS is_next, attempts FROM pgqueue.message_dequeue('qdl1g', 1, 0);
SELECT count(*) AS dead, bool_and(last_error = 'lease expired') AS lease_expired
  FROM pgqueue.dead_letter WHERE id IN (:p1, :pg1);
SELECT count(*) AS left_in_queues FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
 WHERE q.name IN ('qdl1', 'qdl1g');

-- A lease that runs out at its last attempt, after an earlier attempt failed with an error: the
-- dead letter says the lease expired and keeps that error after it (it said 'lease expired'
-- alone, and the handler's error was lost).
SELECT pgqueue.queue_create('qdl2x', p_max_attempts => 2, p_retry_base_ms => 0, p_retry_cap_ms => 0);
SELECT pgqueue.message_create('qdl2x', '\x01') AS e1 \gset
SELECT pgqueue.message_fail(id, attempts, 'SMTP 550: mailbox unavailable') AS failed FROM pgqueue.message_dequeue('qdl2x', 1, 1);
SELECT attempts AS second_attempt FROM pgqueue.message_dequeue('qdl2x', 1, 1);
SELECT pg_sleep(0.01);
SELECT count(*) AS nothing_left FROM pgqueue.message_dequeue('qdl2x', 1, 0);
SELECT attempts, last_error FROM pgqueue.dead_letter WHERE id = :e1;
SELECT pgqueue.queue_drop('qdl2x');

SELECT pgqueue.queue_drop(q) FROM unnest(ARRAY['qdl', 'qdl2', 'qdlcap', 'qdl1', 'qdl1g']) q;
SELECT count(*) AS dead_letters_left FROM pgqueue.dead_letter;
