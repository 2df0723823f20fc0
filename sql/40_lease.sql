\set VERBOSITY terse
SET client_min_messages = warning;
-- Leases: hiding, attempts as a fencing token (complete/heartbeat/defer/fail), lease expiry
-- and redelivery, heartbeat extension, defer keeping attempts and state.
-- pg_regress shows scenarios and their output; which bad call gets which SQLSTATE (here: NULL
-- ids and tokens, lease lengths out of range) is tested in tests/pgtap/20_errors.sql.

SELECT pgqueue.queue_create('qlease', p_lock_ms => 60000);

-- A leased message is hidden; complete with the right token deletes it, once.
SELECT pgqueue.message_create('qlease', convert_to('one', 'UTF8')) AS m1 \gset
SELECT id = :m1 AS is_m1, attempts FROM pgqueue.message_dequeue('qlease');
SELECT count(*) AS visible FROM pgqueue.message_dequeue('qlease');
SELECT pgqueue.message_complete(:m1, 0) AS wrong_token;
SELECT pgqueue.message_complete(:m1, 2) AS future_token;
SELECT pgqueue.message_complete(:m1, 1) AS right_token;
SELECT pgqueue.message_complete(:m1, 1) AS again;
SELECT count(*) AS rows_left FROM pgqueue.message WHERE id = :m1;
SELECT pgqueue.message_complete(-42, 1) AS unknown_id;

-- None of the token functions works on a message that is not leased.
SELECT pgqueue.message_create('qlease', convert_to('ready', 'UTF8')) AS ready \gset
SELECT dequeue_at AS ready_due FROM pgqueue.message WHERE id = :ready \gset
SELECT pgqueue.message_complete(:ready, 0) AS complete_ready,
       pgqueue.message_heartbeat(:ready, 0) AS heartbeat_ready,
       pgqueue.message_defer(:ready, 0, NULL) AS defer_ready,
       pgqueue.message_fail(:ready, 0, 'x') AS fail_ready;
SELECT attempts, locked_until, last_error, dequeue_at = :ready_due AS due_unchanged
  FROM pgqueue.message WHERE id = :ready;
DELETE FROM pgqueue.message WHERE id = :ready;

-- An expired lease is redelivered, ahead of ready messages, with attempts + 1.
SELECT pgqueue.message_create('qlease', convert_to('first', 'UTF8')) AS e1 \gset
SELECT pgqueue.message_create('qlease', convert_to('second', 'UTF8')) AS e2 \gset
SELECT id = :e1 AS is_e1, attempts FROM pgqueue.message_dequeue('qlease', 1, 1);
SELECT pg_sleep(0.01);
SELECT queue, ready, scheduled, leased FROM pgqueue.queue_stats('qlease');
SELECT id = :e1 AS is_e1, convert_from(content, 'UTF8') AS content, attempts
  FROM pgqueue.message_dequeue('qlease', 10);
-- The first consumer's token (1) is stale now: every call returns false and changes nothing.
CREATE TEMP TABLE before_stale AS SELECT * FROM pgqueue.message WHERE id = :e1;
SELECT pgqueue.message_complete(:e1, 1) AS stale_complete,
       pgqueue.message_heartbeat(:e1, 1, 1) AS stale_heartbeat,
       pgqueue.message_defer(:e1, 1, 0, convert_to('stale state', 'UTF8')) AS stale_defer,
       pgqueue.message_fail(:e1, 1, 'stale error', 0) AS stale_fail;
SELECT (SELECT m FROM pgqueue.message m WHERE m.id = :e1)::text
       = (SELECT b FROM before_stale b)::text AS row_unchanged;
-- The current holder (token 2) still completes it.
SELECT pgqueue.message_complete(:e1, 2) AS current_complete;
SELECT pgqueue.message_complete(:e2, 1) AS complete_e2;

-- An expired lease that nobody took again still belongs to its holder (its token is current).
SELECT pgqueue.message_create('qlease', convert_to('late', 'UTF8')) AS late \gset
SELECT id = :late AS is_late, attempts FROM pgqueue.message_dequeue('qlease', 1, 1);
SELECT pg_sleep(0.01);
SELECT pgqueue.message_complete(:late, 1) AS late_complete;

-- Heartbeat extends a lease (here one that had already run out, before anyone took it).
SELECT pgqueue.message_create('qlease', convert_to('beat', 'UTF8')) AS beat \gset
SELECT id = :beat AS is_beat, attempts FROM pgqueue.message_dequeue('qlease', 1, 1);
SELECT pg_sleep(0.01);
SELECT pgqueue.now_ms() AS before_ms \gset
SELECT pgqueue.message_heartbeat(:beat, 1, 600000) AS heartbeat;
SELECT locked_until BETWEEN :before_ms + 600000 AND pgqueue.now_ms() + 600000 AS extended_600s,
       attempts
  FROM pgqueue.message WHERE id = :beat;
SELECT count(*) AS redelivered FROM pgqueue.message_dequeue('qlease');
-- Without p_lock_ms the queue's lock_ms is used.
SELECT pgqueue.now_ms() AS before_ms \gset
SELECT pgqueue.message_heartbeat(:beat, 1) AS heartbeat;
SELECT locked_until BETWEEN :before_ms + 60000 AND pgqueue.now_ms() + 60000 AS extended_60s
  FROM pgqueue.message WHERE id = :beat;
SELECT pgqueue.message_heartbeat(:beat, 2) AS wrong_token;
SELECT pgqueue.message_complete(:beat, 1) AS complete;
SELECT pgqueue.message_heartbeat(:beat, 1) AS after_complete;

-- Defer gives the message back (to a time, or now), keeping attempts; p_state replaces the
-- checkpoint state, NULL keeps it.
SELECT pgqueue.message_create('qlease', convert_to('job', 'UTF8')) AS job \gset
SELECT attempts FROM pgqueue.message_dequeue('qlease');
SELECT pgqueue.message_defer(:job, 1, NULL, convert_to('step 1', 'UTF8')) AS defer_now;
SELECT attempts, locked_until, convert_from(state, 'UTF8') AS state,
       dequeue_at <= pgqueue.now_ms() AS due
  FROM pgqueue.message WHERE id = :job;
SELECT pgqueue.message_complete(:job, 1) AS complete_after_defer;
SELECT id = :job AS is_job, attempts, convert_from(state, 'UTF8') AS state
  FROM pgqueue.message_dequeue('qlease');
SELECT pgqueue.message_defer(:job, 2, pgqueue.now_ms() + 3600000) AS defer_later;
SELECT attempts, locked_until, convert_from(state, 'UTF8') AS state,
       dequeue_at > pgqueue.now_ms() + 3500000 AS scheduled_in_an_hour
  FROM pgqueue.message WHERE id = :job;
SELECT queue, ready, scheduled, leased FROM pgqueue.queue_stats('qlease');
SELECT count(*) AS delivered FROM pgqueue.message_dequeue('qlease');
SELECT pgqueue.message_defer(:job, 2, pgqueue.now_ms() + 3600000) AS defer_unleased;
-- Make it due again, and take it with its state.
UPDATE pgqueue.message SET dequeue_at = 0 WHERE id = :job;
SELECT id = :job AS is_job, attempts, convert_from(state, 'UTF8') AS state
  FROM pgqueue.message_dequeue('qlease');
SELECT pgqueue.message_defer(:job, 3, 0, convert_to('step 2', 'UTF8')) AS defer_state;
SELECT id = :job AS is_job, attempts, convert_from(state, 'UTF8') AS state
  FROM pgqueue.message_dequeue('qlease', 1, 0);

-- Defer racing lease expiry: the old holder defers after the message was redelivered.
SELECT pgqueue.message_create('qlease', convert_to('race', 'UTF8')) AS race \gset
SELECT attempts FROM pgqueue.message_dequeue('qlease', 1, 1);
SELECT pg_sleep(0.01);
SELECT attempts FROM pgqueue.message_dequeue('qlease');
SELECT pgqueue.message_defer(:race, 1, 0, convert_to('lost', 'UTF8')) AS stale_defer;
SELECT attempts, locked_until IS NOT NULL AS still_leased, state FROM pgqueue.message WHERE id = :race;
SELECT pgqueue.message_complete(:race, 2) AS complete;

-- Completing a batch: each message with its own token; stale tokens come back and change nothing.
SELECT count(*) AS created FROM pgqueue.message_create_batch('qlease', ARRAY['b1', 'b2', 'b3']::bytea[]);
CREATE TEMP TABLE batch AS SELECT id, attempts FROM pgqueue.message_dequeue('qlease', 3);
SELECT count(*) AS leased FROM batch;
-- b2's token is made stale: its lease ran out and it was handed out again
UPDATE pgqueue.message SET locked_until = 0 WHERE id = (SELECT min(id) + 1 FROM batch);
SELECT attempts AS redelivered_attempts FROM pgqueue.message_dequeue('qlease');
SELECT pgqueue.message_complete_batch(array_agg(id ORDER BY id), array_agg(attempts ORDER BY id))
       = ARRAY[(SELECT min(id) + 1 FROM batch)] AS only_b2_stale
  FROM batch;
SELECT convert_from(content, 'UTF8') AS left_over, attempts FROM pgqueue.message
 WHERE id IN (SELECT id FROM batch);
SELECT pgqueue.message_complete_batch('{}', '{}') AS empty_batch;
SELECT pgqueue.message_complete_batch(ARRAY[(SELECT min(id) + 1 FROM batch)], ARRAY[2]) AS new_holder_completes;
DROP TABLE batch;

-- Heartbeats of a batch: each lease with its own token extended; stale tokens (a lease that ran
-- out and went to another delivery, a message gone or never leased) come back in input order
-- and change nothing.
SELECT count(*) AS created FROM pgqueue.message_create_batch('qlease', ARRAY['h1', 'h2', 'h3']::bytea[]);
CREATE TEMP TABLE beats AS SELECT id, attempts FROM pgqueue.message_dequeue('qlease', 3, 1000);
-- h2's lease runs out and h2 is handed out again (token 2); h4 is never leased
UPDATE pgqueue.message SET locked_until = 0 WHERE id = (SELECT min(id) + 1 FROM beats);
SELECT attempts AS h2_again FROM pgqueue.message_dequeue('qlease', 1, 1000);
SELECT pgqueue.message_create('qlease', convert_to('h4', 'UTF8')) AS h4 \gset
SELECT pgqueue.now_ms() AS before_ms \gset
SELECT pgqueue.message_heartbeat_batch(array_agg(id ORDER BY id) || ARRAY[:h4, -1]::bigint[],
                                       array_agg(attempts ORDER BY id) || ARRAY[0, 1])
       = ARRAY[(SELECT min(id) + 1 FROM beats), :h4, -1] AS h2_h4_gone_stale
  FROM beats;
-- h1 and h3 extended by the queue's lock_ms (60 s); h2's new lease (1 s) and h4 untouched
SELECT convert_from(content, 'UTF8') AS content, attempts,
       locked_until BETWEEN :before_ms + 60000 AND pgqueue.now_ms() + 60000 AS extended_60s,
       locked_until IS NULL AS ready
  FROM pgqueue.message WHERE id IN (SELECT id FROM beats) OR id = :h4 ORDER BY id;
-- an explicit p_lock_ms; an id listed twice with one token is extended once and not stale; with
-- an old token beside the new one, the old one's place is stale
SELECT pgqueue.now_ms() AS before_ms \gset
SELECT pgqueue.message_heartbeat_batch(ARRAY[b.id, b.id, b.id], ARRAY[2, 2, 1], 600000)
       = ARRAY[b.id] AS old_token_stale
  FROM (SELECT min(id) + 1 AS id FROM beats) b;
SELECT locked_until BETWEEN :before_ms + 600000 AND pgqueue.now_ms() + 600000 AS extended_600s, attempts
  FROM pgqueue.message WHERE id = (SELECT min(id) + 1 FROM beats);
SELECT pgqueue.message_heartbeat_batch('{}', '{}') AS empty_batch;
SELECT pgqueue.message_complete_batch(array_agg(id ORDER BY id), array_agg(CASE WHEN id = (SELECT min(id) + 1 FROM beats) THEN 2 ELSE attempts END ORDER BY id)) AS completed_all
  FROM beats;
SELECT pgqueue.message_complete(:h4, 0) AS h4_not_leased;
SELECT count(*) AS h4_dequeued FROM pgqueue.message_dequeue('qlease', 1, 0) WHERE id = :h4;
DROP TABLE beats;

-- Acknowledge and fetch in one call: the finished message is completed and the next one handed
-- out; a stale acknowledgement comes back as a row with stale = true (id and the token given).
SELECT count(*) AS created FROM pgqueue.message_create_batch('qlease', ARRAY['f1', 'f2', 'f3']::bytea[]);
SELECT id AS f1, attempts AS f1_token FROM pgqueue.message_dequeue('qlease') \gset
SELECT convert_from(content, 'UTF8') AS content, attempts, stale
  FROM pgqueue.message_complete_and_dequeue(ARRAY[:f1], ARRAY[:f1_token], 'qlease', 1);
SELECT count(*) AS f1_left FROM pgqueue.message WHERE id = :f1;
SELECT coalesce(convert_from(content, 'UTF8'), '(stale)') AS content, attempts, stale, id = :f1 AS is_f1
  FROM pgqueue.message_complete_and_dequeue(ARRAY[:f1], ARRAY[:f1_token], 'qlease', 5, 0);
-- Each stale acknowledgement carries the token given at its own place: an id listed twice with
-- two tokens, and ids in an array whose lower bound is not 1 (f1 is gone: every token is stale).
SELECT id = :f1 AS is_f1, attempts, stale
  FROM pgqueue.message_complete_and_dequeue(ARRAY[:f1, :f1], ARRAY[7, 8], 'qlease', 1);
SELECT id = :f1 AS is_f1, attempts, stale
  FROM pgqueue.message_complete_and_dequeue(('[5:6]={' || :f1 || ',' || :f1 || '}')::bigint[],
                                            '{9,10}'::integer[], 'qlease', 1);

-- A lease of the caller's that ran out and that nobody took is still the caller's: its
-- acknowledgement in message_complete_and_dequeue completes it; the take of the same call does
-- not dead-letter it (its last attempt) or hand it out again (one message to fetch: the look
-- that runs when nothing is ready; several: the statement with both probes).
SELECT pgqueue.queue_create('qown', p_max_attempts => 1);
SELECT pgqueue.message_create('qown', 'o1') AS o1 \gset
SELECT attempts AS o1_token FROM pgqueue.message_dequeue('qown') \gset
UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1 WHERE id = :o1;
SELECT count(*) AS rows FROM pgqueue.message_complete_and_dequeue(ARRAY[:o1], ARRAY[:o1_token], 'qown', 1);
SELECT (SELECT count(*) FROM pgqueue.message WHERE id = :o1) AS o1_left,
       (SELECT count(*) FROM pgqueue.dead_letter WHERE id = :o1) AS o1_dead;
SELECT count(*) AS created FROM pgqueue.message_create_batch('qown', ARRAY['o2', 'o3']::bytea[]);
SELECT id AS o2, attempts AS o2_token FROM pgqueue.message_dequeue('qown') \gset
UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1 WHERE id = :o2;
SELECT convert_from(content, 'UTF8') AS content, attempts, stale
  FROM pgqueue.message_complete_and_dequeue(ARRAY[:o2], ARRAY[:o2_token], 'qown', 5);
SELECT (SELECT count(*) FROM pgqueue.message WHERE id = :o2) AS o2_left,
       (SELECT count(*) FROM pgqueue.dead_letter WHERE id = :o2) AS o2_dead;
-- Only with the caller's token: an acknowledgement whose token is stale leaves nothing out (the
-- lease that ran out is another delivery's), and the settings are cleared after the call.
BEGIN;
SELECT id AS o3, attempts AS o3_token FROM pgqueue.message WHERE content = 'o3' \gset
UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1 WHERE id = :o3;
SELECT count(*) AS rows, bool_and(stale) AS stale
  FROM pgqueue.message_complete_and_dequeue(ARRAY[:o3], ARRAY[:o3_token + 1], 'qown', 1);
SELECT count(*) AS o3_dead FROM pgqueue.dead_letter WHERE id = :o3;
SELECT current_setting('pgqueue.ack_call') AS ack_call;
ROLLBACK;
SELECT pgqueue.queue_drop('qown');
-- A message whose lease the caller lost, which another consumer leased since and whose lease ran
-- out too, is handed out by the caller's call as by any take (the caller's acknowledgement is
-- stale; a review: the call left it out by its id).
SELECT pgqueue.queue_create('qlost');
SELECT pgqueue.message_create('qlost', 'l1') AS l1 \gset
SELECT attempts AS l1_mine FROM pgqueue.message_dequeue('qlost') \gset
UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1 WHERE id = :l1;
SELECT attempts AS l1_other FROM pgqueue.message_dequeue('qlost') \gset
UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1 WHERE id = :l1;
SELECT id = :l1 AS is_l1, attempts, stale
  FROM pgqueue.message_complete_and_dequeue(ARRAY[:l1], ARRAY[:l1_mine], 'qlost', 1);
SELECT pgqueue.queue_drop('qlost');

-- A failure without an error text keeps the last one, on a retry as when it dead-letters.
SELECT pgqueue.queue_create('qfail', p_max_attempts => 3);
SELECT pgqueue.message_create('qfail', 'x') AS failing \gset
SELECT pgqueue.message_fail(id, attempts, 'first error', 0) FROM pgqueue.message_dequeue('qfail');
SELECT pgqueue.message_fail(id, attempts, NULL, 0) FROM pgqueue.message_dequeue('qfail');
SELECT last_error FROM pgqueue.message WHERE id = :failing;
SELECT pgqueue.message_fail(id, attempts, NULL) FROM pgqueue.message_dequeue('qfail');
SELECT last_error, attempts FROM pgqueue.dead_letter WHERE id = :failing;
SELECT pgqueue.queue_drop('qfail');

SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats('qlease');
SELECT pgqueue.queue_drop('qlease');
