\set VERBOSITY terse
SET client_min_messages = warning;
-- Errors: every bad input gets its documented SQLSTATE, and a refused call changes nothing.
--   22004 NULL where a value is required      42602 invalid queue name
--   22023 invalid parameter value             PQ001 unknown queue
--   PQ002 queue exists   PQ003 queue full      PQ004 the default queue cannot be dropped

CREATE FUNCTION pg_temp.err(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE p_sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT pgqueue.queue_create('qerr');
SELECT pgqueue.message_create('qerr', '\x01') AS leased_id \gset
SELECT count(*) AS leased FROM pgqueue.message_dequeue('qerr');

-- NULL content, ids and tokens: 22004.
SELECT t.label, pg_temp.err(t.stmt) AS result
  FROM (VALUES
    (1, 'create NULL content',          $$SELECT pgqueue.message_create('qerr', NULL)$$),
    (2, 'create(bytea) NULL',           $$SELECT pgqueue.message_create(NULL::bytea)$$),
    (3, 'batch NULL element',           $$SELECT pgqueue.message_create_batch('qerr', ARRAY[NULL]::bytea[])$$),
    (4, 'batch NULL array',             $$SELECT pgqueue.message_create_batch('qerr', NULL::bytea[])$$),
    (5, 'create NULL queue',            $$SELECT pgqueue.message_create(NULL, '\x01')$$),
    (6, 'batch NULL queue',             $$SELECT pgqueue.message_create_batch(NULL, ARRAY['\x01']::bytea[])$$),
    (7, 'dequeue NULL queue',           $$SELECT * FROM pgqueue.message_dequeue(NULL)$$),
    (8, 'complete NULL id',             $$SELECT pgqueue.message_complete(NULL, 1)$$),
    (9, 'complete NULL token',          $$SELECT pgqueue.message_complete(1, NULL)$$),
    (10, 'heartbeat NULL id',           $$SELECT pgqueue.message_heartbeat(NULL, 1)$$),
    (11, 'heartbeat NULL token',        $$SELECT pgqueue.message_heartbeat(1, NULL)$$),
    (12, 'defer NULL id',               $$SELECT pgqueue.message_defer(NULL, 1, 0)$$),
    (13, 'defer NULL token',            $$SELECT pgqueue.message_defer(1, NULL, 0)$$),
    (14, 'fail NULL id',                $$SELECT pgqueue.message_fail(NULL, 1, 'e')$$),
    (15, 'fail NULL token',             $$SELECT pgqueue.message_fail(1, NULL, 'e')$$),
    (16, 'queue_create NULL',           $$SELECT pgqueue.queue_create(NULL)$$),
    (17, 'queue_drop NULL',             $$SELECT pgqueue.queue_drop(NULL)$$),
    (18, 'queue_next_due NULL',         $$SELECT pgqueue.queue_next_due(NULL)$$),
    (19, 'requeue NULL queue',          $$SELECT pgqueue.dead_letter_requeue(NULL)$$)
  ) t(n, label, stmt)
 ORDER BY t.n;

-- Unknown queues: PQ001.
SELECT t.label, pg_temp.err(t.stmt) AS result
  FROM (VALUES
    (1, 'message_create',       $$SELECT pgqueue.message_create('nosuchqueue', '\x01')$$),
    (2, 'message_create_batch', $$SELECT pgqueue.message_create_batch('nosuchqueue', ARRAY['\x01']::bytea[])$$),
    (3, 'message_dequeue',      $$SELECT * FROM pgqueue.message_dequeue('nosuchqueue')$$),
    (4, 'queue_alter',          $$SELECT pgqueue.queue_alter('nosuchqueue', p_notify => true)$$),
    (5, 'queue_stats',          $$SELECT * FROM pgqueue.queue_stats('nosuchqueue')$$),
    (6, 'queue_next_due',       $$SELECT pgqueue.queue_next_due('nosuchqueue')$$),
    (7, 'dead_letter_requeue',  $$SELECT pgqueue.dead_letter_requeue('nosuchqueue')$$),
    (8, 'dead_letter_purge',    $$SELECT pgqueue.dead_letter_purge('nosuchqueue')$$),
    (9, 'case matters',         $$SELECT pgqueue.message_create('QERR', '\x01')$$)
  ) t(n, label, stmt)
 ORDER BY t.n;

-- Invalid queue names: 42602, for creating, producing and consuming alike.
SELECT t.label, pg_temp.err(format('SELECT pgqueue.queue_create(%L)', t.name)) AS queue_create,
       pg_temp.err(format('SELECT pgqueue.message_create(%L, %L::bytea)', t.name, '\x01')) = pg_temp.err(format('SELECT pgqueue.queue_create(%L)', t.name)) AS create_same,
       pg_temp.err(format('SELECT * FROM pgqueue.message_dequeue(%L)', t.name)) = pg_temp.err(format('SELECT pgqueue.queue_create(%L)', t.name)) AS dequeue_same
  FROM (VALUES
    (1, 'empty',        ''),
    (2, '49 characters', repeat('q', 49)),
    (3, 'single quote', 'it''s'),
    (4, 'double quote', 'a"b'),
    (5, 'semicolon',    'a;DROP TABLE pgqueue.message'),
    (6, 'space',        'a b'),
    (7, 'leading space', ' a'),
    (8, 'trailing newline', E'a\n'),
    (9, 'unicode',      'café'),
    (10, 'leading dot',  '.a'),
    (11, 'leading dash', '-a'),
    (12, 'slash',        'a/b'),
    (13, 'star',         'a*')
  ) t(n, label, name)
 ORDER BY t.n;
SELECT count(*) AS queues FROM pgqueue.queue;
SELECT count(*) AS messages FROM pgqueue.message;

-- Limits and lease lengths: 22023.
SELECT t.label, pg_temp.err(t.stmt) AS result
  FROM (VALUES
    (1, 'dequeue limit 0',           $$SELECT * FROM pgqueue.message_dequeue('qerr', 0)$$),
    (2, 'dequeue limit -5',          $$SELECT * FROM pgqueue.message_dequeue('qerr', -5)$$),
    (3, 'dequeue limit 10001',       $$SELECT * FROM pgqueue.message_dequeue('qerr', 10001)$$),
    (4, 'dequeue limit 10000',       $$SELECT * FROM pgqueue.message_dequeue('qerr', 10000)$$),
    (5, 'dequeue lock_ms -1',        $$SELECT * FROM pgqueue.message_dequeue('qerr', 1, -1)$$),
    (6, 'heartbeat lock_ms 0',       $$SELECT pgqueue.message_heartbeat(1, 1, 0)$$),
    (7, 'heartbeat lock_ms -1',      $$SELECT pgqueue.message_heartbeat(1, 1, -1)$$),
    (8, 'heartbeat lock_ms > year',  $$SELECT pgqueue.message_heartbeat(1, 1, 31536000001)$$),
    (9, 'priority -1',               $$SELECT pgqueue.priority_dequeue_at(-1)$$),
    (10, 'queue lock_ms 0',          $$SELECT pgqueue.queue_create('qerr2', p_lock_ms => 0)$$),
    (11, 'queue max_size -1',        $$SELECT pgqueue.queue_create('qerr2', p_max_size => -1)$$),
    (12, 'batch length mismatch',    $$SELECT pgqueue.message_create_batch('qerr', ARRAY['\x01']::bytea[], p_content_types => ARRAY['a', 'b'])$$)
  ) t(n, label, stmt)
 ORDER BY t.n;
-- The refused calls changed nothing: the leased message is still leased with attempts 1.
SELECT attempts, locked_until IS NOT NULL AS leased FROM pgqueue.message WHERE id = :leased_id;

-- PQ002, PQ004.
SELECT pg_temp.err($$SELECT pgqueue.queue_create('qerr')$$) AS duplicate,
       pg_temp.err($$SELECT pgqueue.queue_drop('default')$$) AS drop_default;

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

SELECT pgqueue.queue_drop('qerr'), pgqueue.queue_drop('qfull');
