\set VERBOSITY terse
SET client_min_messages = warning;
-- Producing: message_create (both overloads), time helpers, priorities and message_create_batch.
-- pg_regress shows scenarios and their output; which bad call gets which SQLSTATE (here: NULL
-- contents, bad batches, negative priorities) is tested in tests/pgtap/20_errors.sql.

SELECT pgqueue.queue_create('qcreate');

-- Time helpers: to_epoch is milliseconds since 1970 (floor, also before 1970), from_epoch its
-- inverse, now_ms the wall clock (clock_timestamp(), not the transaction's now()).
SELECT pgqueue.to_epoch('1970-01-01 00:00:00+00') AS epoch0,
       pgqueue.to_epoch('2024-01-02 03:04:05.678+00') AS ms,
       pgqueue.to_epoch('1969-12-31 23:59:59.9995+00') AS floor_negative,
       pgqueue.from_epoch(1704164645678) = '2024-01-02 03:04:05.678+00'::timestamptz AS round_trip,
       pgqueue.from_epoch(pgqueue.to_epoch('2001-02-03 04:05:06.007+00')) = '2001-02-03 04:05:06.007+00' AS round_trip2,
       pgqueue.to_epoch(NULL) IS NULL AS strict_null;
SELECT count(*) AS round_trip_failures
  FROM (SELECT (1700000000000 + g * 7919) AS ms FROM generate_series(-1000, 1000) g
        UNION ALL SELECT g FROM generate_series(-1000, 1000) g
        -- down from the last millisecond of the year 9999
        UNION ALL SELECT 253402300799999 - g * 7919 FROM generate_series(0, 1000) g) s
 WHERE pgqueue.to_epoch(pgqueue.from_epoch(s.ms)) <> s.ms;
SELECT pgqueue.from_epoch(253402300799998) AS last_day_of_9999,
       pgqueue.from_epoch(-1500) AS before_1970;
-- Beyond the range of a timestamptz: 22008, "timestamp out of range", however far.
SELECT pgqueue.from_epoch(10000000000000000);
SELECT pgqueue.from_epoch(9223372036854775807);
SELECT pgqueue.from_epoch(-9223372036854775808);
BEGIN;
SELECT pg_sleep(0.01);
SELECT pgqueue.now_ms() BETWEEN pgqueue.to_epoch(now()) + 10 AND pgqueue.to_epoch(clock_timestamp())
       AS now_ms_is_wall_clock;
COMMIT;
-- priority_dequeue_at maps priorities below every real time, larger first.
SELECT p, pgqueue.priority_dequeue_at(p) AS dequeue_at
  FROM unnest(ARRAY[0, 1, 5, 2147483647]) p ORDER BY p;
SELECT pgqueue.priority_dequeue_at(NULL) IS NULL AS strict_null;

-- message_create: defaults. created_at and dequeue_at are the transaction time in epoch ms.
BEGIN;
SELECT pgqueue.message_create('qcreate', convert_to('plain', 'UTF8')) AS id1 \gset
SELECT pgqueue.message_create('qcreate', convert_to('typed', 'UTF8'), NULL, 'application/json') AS id2 \gset
SELECT pgqueue.message_create('qcreate', convert_to('at', 'UTF8'), 1234567890123) AS id3 \gset
SELECT pgqueue.message_create('qcreate', convert_to('prio', 'UTF8'), pgqueue.priority_dequeue_at(3), 'text/plain') AS id4 \gset
SELECT pgqueue.message_create('qcreate', ''::bytea) AS id5 \gset
SELECT m.id = :id1 AS is1, m.id = :id2 AS is2, m.id = :id3 AS is3, m.id = :id4 AS is4, m.id = :id5 AS is5,
       convert_from(m.content, 'UTF8') AS content, m.content_type,
       CASE WHEN m.dequeue_at BETWEEN pgqueue.to_epoch(now()) AND pgqueue.now_ms() THEN 'now' ELSE m.dequeue_at::text END AS dequeue_at,
       m.created_at = pgqueue.to_epoch(now()) AS created_now,
       m.locked_until, m.attempts, m.state, m.last_error
  FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
 WHERE q.name = 'qcreate'
 ORDER BY m.id;
COMMIT;
-- ids grow in creation order.
SELECT :id1 < :id2 AND :id2 < :id3 AND :id3 < :id4 AND :id4 < :id5 AS ascending_ids;

-- The one-argument overload enqueues on the default queue.
SELECT pgqueue.message_create(convert_to('on default', 'UTF8')) AS def_id \gset
SELECT q.name, convert_from(m.content, 'UTF8') AS content, m.content_type,
       m.dequeue_at BETWEEN m.created_at AND pgqueue.now_ms() AS due_now
  FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
 WHERE m.id = :def_id;
SELECT id = :def_id AS got_it FROM pgqueue.message_dequeue('default', 1, 0);

DELETE FROM pgqueue.message m USING pgqueue.queue q WHERE q.id = m.queue_id AND q.name = 'qcreate';

-- message_create_batch: ids come back in input order, one row per content.
SELECT array_agg(b.id ORDER BY b.n) AS ids
  FROM pgqueue.message_create_batch('qcreate',
         ARRAY[convert_to('b1', 'UTF8'), convert_to('b2', 'UTF8'), convert_to('b3', 'UTF8'),
               convert_to('b4', 'UTF8')]) WITH ORDINALITY AS b(id, n) \gset batch_
SELECT cardinality(:'batch_ids'::bigint[]) AS returned,
       :'batch_ids'::bigint[] = (SELECT array_agg(x ORDER BY x) FROM unnest(:'batch_ids'::bigint[]) x)
       AS ascending_in_input_order,
       (SELECT count(DISTINCT m.dequeue_at) FROM pgqueue.message m WHERE m.id = ANY (:'batch_ids'::bigint[]))
       AS dequeue_at_values;
SELECT u.n, convert_from(m.content, 'UTF8') AS content, m.content_type,
       m.dequeue_at BETWEEN m.created_at AND pgqueue.now_ms() AS due_now, m.attempts, m.locked_until
  FROM unnest(:'batch_ids'::bigint[]) WITH ORDINALITY AS u(id, n)
  JOIN pgqueue.message m ON m.id = u.id
 ORDER BY u.n;
-- They are delivered in input order.
SELECT convert_from(content, 'UTF8') AS content FROM pgqueue.message_dequeue('qcreate', 10, 0);

-- Scalars apply to every message; per-message arrays override them, NULL elements fall back.
SELECT array_agg(b.id ORDER BY b.n) AS ids
  FROM pgqueue.message_create_batch('qcreate',
         ARRAY[convert_to('c1', 'UTF8'), convert_to('c2', 'UTF8'), convert_to('c3', 'UTF8')],
         p_dequeue_at    => 1000,
         p_content_type  => 'text/plain',
         p_dequeue_ats   => ARRAY[NULL, -5, 2000]::bigint[],
         p_content_types => ARRAY['application/json', NULL, 'application/x-c3']) WITH ORDINALITY AS b(id, n) \gset batch_
SELECT u.n, convert_from(m.content, 'UTF8') AS content, m.content_type, m.dequeue_at
  FROM unnest(:'batch_ids'::bigint[]) WITH ORDINALITY AS u(id, n)
  JOIN pgqueue.message m ON m.id = u.id
 ORDER BY u.n;
-- Only per-message values, no scalars: NULL elements mean now / no content type.
SELECT array_agg(b.id ORDER BY b.n) AS ids
  FROM pgqueue.message_create_batch('qcreate',
         ARRAY[convert_to('d1', 'UTF8'), convert_to('d2', 'UTF8')],
         p_dequeue_ats   => ARRAY[NULL, pgqueue.priority_dequeue_at(0)],
         p_content_types => ARRAY[NULL, 'x/y']) WITH ORDINALITY AS b(id, n) \gset batch_
SELECT u.n, convert_from(m.content, 'UTF8') AS content, m.content_type,
       CASE WHEN m.dequeue_at BETWEEN m.created_at AND pgqueue.now_ms() THEN 'now' ELSE m.dequeue_at::text END AS dequeue_at
  FROM unnest(:'batch_ids'::bigint[]) WITH ORDINALITY AS u(id, n)
  JOIN pgqueue.message m ON m.id = u.id
 ORDER BY u.n;
-- Delivery follows dequeue_at: c2 (-5), d2 (priority 0 = -1), c1 (1000), c3 (2000), d1 (now).
SELECT convert_from(content, 'UTF8') AS content, content_type FROM pgqueue.message_dequeue('qcreate', 10, 0);

-- An empty batch inserts nothing and returns no rows.
SELECT count(*) AS returned FROM pgqueue.message_create_batch('qcreate', '{}'::bytea[]);
SELECT count(*) AS returned FROM pgqueue.message_create_batch('qcreate', '{}'::bytea[], p_dequeue_ats => '{}', p_content_types => '{}');

-- A batch joins the caller's transaction: rolled back, nothing remains.
BEGIN;
SELECT count(*) AS returned FROM pgqueue.message_create_batch('qcreate', ARRAY['\x01', '\x02']::bytea[]);
ROLLBACK;
SELECT count(*) AS messages FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
 WHERE q.name = 'qcreate';

-- A larger batch keeps its order too.
CREATE TEMP TABLE big AS
SELECT b.id, b.n
  FROM pgqueue.message_create_batch('qcreate',
         ARRAY(SELECT convert_to(g::text, 'UTF8') FROM generate_series(1, 1000) g))
       WITH ORDINALITY AS b(id, n);
SELECT count(*) AS returned,
       bool_and(m.content = convert_to(b.n::text, 'UTF8')) AS contents_match,
       array_agg(b.id ORDER BY b.n) = array_agg(b.id ORDER BY b.id) AS ids_in_input_order
  FROM big b JOIN pgqueue.message m ON m.id = b.id;

SELECT pgqueue.queue_drop('qcreate');

-- The lock stripe a session found a queue on (id & 63) is recorded in its setting
-- pgqueue.stripe_<the name's bytes in hex>, as the character 64 + the stripe ('' for a queue
-- with a cap or groups), and message_create's next call takes it before its one INSERT
-- (docs/locking.md, rule 2). A wrong value, set by hand or left by a queue dropped and created
-- again, only sends that call the longer way, which records the stripe again.
SELECT pgqueue.queue_create('qstripe.a-b');
SELECT pgqueue.queue_create('qstripe_capped', p_max_size => 10);
SELECT pgqueue.message_create('qstripe.a-b', 'one') > 0 AS created,
       pgqueue.message_create('qstripe_capped', 'one') > 0 AS created_capped;
SELECT ascii(current_setting('pgqueue.stripe_' || encode(textsend('qstripe.a-b'), 'hex'))) - 64 = q.id & 63 AS recorded_its_stripe,
       current_setting('pgqueue.stripe_' || encode(textsend('qstripe_capped'), 'hex')) = '' AS capped_takes_the_longer_way
  FROM pgqueue.queue q WHERE q.name = 'qstripe.a-b';
SELECT set_config('pgqueue.stripe_' || encode(textsend('qstripe.a-b'), 'hex'), v, false) IS NOT NULL AS set_by_hand,
       pgqueue.message_create('qstripe.a-b', convert_to(v, 'UTF8')) > 0 AS created,
       ascii(current_setting('pgqueue.stripe_' || encode(textsend('qstripe.a-b'), 'hex'))) - 64 = q.id & 63 AS recorded_again
  FROM pgqueue.queue q, unnest(ARRAY['', 'not a stripe', chr(1), chr(64 + ((q.id + 1) & 63))]) AS v
 WHERE q.name = 'qstripe.a-b';
SELECT count(*) AS messages FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
 WHERE q.name = 'qstripe.a-b';
SELECT pgqueue.queue_drop('qstripe.a-b'), pgqueue.queue_drop('qstripe_capped');
