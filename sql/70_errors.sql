\set VERBOSITY terse
SET client_min_messages = warning;
-- Refusals as a scenario: a queue with max_size (PQ003) refuses what does not fit, as a whole;
-- what counts towards the limit (also what the same transaction created) and what frees a place.
-- pg_regress shows scenarios and their output; which bad call gets which SQLSTATE (NULLs 22004,
-- values 22023, names 42602, PQ001-PQ004) and that a refused call changes nothing are tested in
-- tests/pgtap/20_errors.sql; the caller's transaction after a refusal in tests/test_bad_input.py.

CREATE FUNCTION pg_temp.err(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE p_sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- PQ003: a queue with max_size refuses what does not fit, as a whole, and nothing is inserted.
SELECT pgqueue.queue_create('qfull', p_max_size => 3, p_max_attempts => 1);
SELECT count(*) FROM pgqueue.message_create_batch('qfull', ARRAY['\x01', '\x02']::bytea[]);
SELECT pg_temp.err($$SELECT pgqueue.message_create_batch('qfull', ARRAY['\x03', '\x04']::bytea[])$$) AS batch_of_2;
SELECT count(*) AS live FROM pgqueue.message WHERE queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'qfull');
SELECT pgqueue.message_create('qfull', '\x03') > 0 AS third_fits;
SELECT pg_temp.err($$SELECT pgqueue.message_create('qfull', '\x04')$$) AS fourth;
SELECT pg_temp.err($$SELECT pgqueue.message_create_batch('qfull', '{}'::bytea[])$$) AS empty_batch;
SELECT count(*) AS live FROM pgqueue.message WHERE queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'qfull');
-- Leased messages still count.
SELECT count(*) AS leased FROM pgqueue.message_dequeue('qfull', 1);
SELECT pg_temp.err($$SELECT pgqueue.message_create('qfull', '\x04')$$) AS while_leased;
-- Completed, deleted-on-dequeue and dead messages free their place.
SELECT pgqueue.message_complete(id, attempts) FROM pgqueue.message
 WHERE queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'qfull') AND locked_until IS NOT NULL;
SELECT pgqueue.message_create('qfull', '\x05') > 0 AS after_complete;
SELECT pg_temp.err($$SELECT pgqueue.message_create('qfull', '\x06')$$) AS full_again;
SELECT encode(content, 'hex') AS deleted FROM pgqueue.message_dequeue('qfull', 1, 0);
SELECT pgqueue.message_create('qfull', '\x06') > 0 AS after_delete_mode;
SELECT count(pgqueue.message_fail(id, attempts, 'dead')) AS failed FROM pgqueue.message_dequeue('qfull', 1);
SELECT pgqueue.message_create('qfull', '\x07') > 0 AS after_dead_letter;
SELECT pg_temp.err($$SELECT pgqueue.message_create('qfull', '\x08')$$) AS full_again;
-- Inside a transaction the messages created so far count, and a refusal aborts it.
SELECT count(*) AS deleted FROM pgqueue.message_dequeue('qfull', 3, 0);
BEGIN;
SELECT pgqueue.message_create('qfull', '\x10') > 0 AS in_tx_1;
SELECT count(*) AS in_tx_2_3 FROM pgqueue.message_create_batch('qfull', ARRAY['\x11', '\x12']::bytea[]);
\set VERBOSITY sqlstate
SELECT pgqueue.message_create('qfull', '\x13');
\set VERBOSITY terse
ROLLBACK;
SELECT count(*) AS live_after_rollback FROM pgqueue.message WHERE queue_id = (SELECT id FROM pgqueue.queue WHERE name = 'qfull');
-- Raising max_size makes room; 0 removes the limit; lowering it below the current size
-- refuses new messages until consumers catch up.
SELECT count(*) FROM pgqueue.message_create_batch('qfull', ARRAY['\x01', '\x02', '\x03']::bytea[]);
SELECT pgqueue.queue_alter('qfull', p_max_size => 4);
SELECT pgqueue.message_create('qfull', '\x04') > 0 AS fits_in_4;
SELECT pg_temp.err($$SELECT pgqueue.message_create('qfull', '\x05')$$) AS fifth;
SELECT pgqueue.queue_alter('qfull', p_max_size => 0);
SELECT count(*) AS unbounded FROM pgqueue.message_create_batch('qfull', array_fill('\x01'::bytea, ARRAY[50]));
SELECT pgqueue.queue_alter('qfull', p_max_size => 10);
SELECT pg_temp.err($$SELECT pgqueue.message_create('qfull', '\x05')$$) AS over_new_cap;
SELECT count(*) AS deleted FROM pgqueue.message_dequeue('qfull', 45, 0);
SELECT pgqueue.message_create('qfull', '\x05') > 0 AS below_new_cap;
SELECT queue, ready, max_size FROM pgqueue.queue_stats('qfull') JOIN pgqueue.queue_list() USING (queue);

SELECT pgqueue.queue_drop('qfull');
