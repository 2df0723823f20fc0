\set VERBOSITY terse
SET client_min_messages = warning;
-- Queues: queue_create/alter/drop/list/stats/next_due, 0 = unlimited/unbounded, if_not_exists,
-- the default queue.
-- pg_regress shows scenarios and their output; which bad call gets which SQLSTATE (here: option
-- validation, duplicates, unknown and invalid names) is tested in tests/pgtap/20_errors.sql.

-- Create with the defaults, and with every option.
SELECT pgqueue.queue_create('qa');
SELECT pgqueue.queue_create('qb', p_lock_ms => 5000, p_max_attempts => 3, p_retry_base_ms => 10,
                            p_retry_cap_ms => 100, p_max_size => 50, p_notify => true);
-- 0 means unlimited attempts and an unbounded size (stored as NULL).
SELECT pgqueue.queue_create('qc', p_max_attempts => 0, p_max_size => 0);
-- Names: digits, dots, dashes, underscores; up to 48 characters.
SELECT pgqueue.queue_create('0q.with-all_chars');
SELECT pgqueue.queue_create(repeat('x', 48));
SELECT queue, lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify,
       created_at <= now() AS created_in_past
  FROM pgqueue.queue_list() ORDER BY queue COLLATE "C";

-- With if_not_exists a duplicate is a no-op that keeps the old settings.
SELECT pgqueue.queue_create('qb', p_lock_ms => 1, p_if_not_exists => true);
SELECT queue, lock_ms, max_attempts, max_size FROM pgqueue.queue_list() WHERE queue = 'qb';
-- Names are case-sensitive: 'QA' is another queue.
SELECT pgqueue.queue_create('QA');
SELECT pgqueue.queue_drop('QA');

-- retry_base_ms = retry_cap_ms = 0 (immediate retry) is allowed.
SELECT pgqueue.queue_create('qzero', p_retry_base_ms => 0, p_retry_cap_ms => 0);
SELECT pgqueue.queue_drop('qzero');

-- queue_alter: NULL keeps a setting, a value replaces it, 0 clears max_attempts/max_size.
SELECT pgqueue.queue_alter('qa', p_lock_ms => 1234);
SELECT pgqueue.queue_alter('qa', p_max_attempts => 5, p_max_size => 10, p_notify => true);
SELECT queue, lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify
  FROM pgqueue.queue_list() WHERE queue = 'qa';
SELECT pgqueue.queue_alter('qa');
SELECT pgqueue.queue_alter('qa', p_max_attempts => 0, p_max_size => 0, p_retry_base_ms => 0);
SELECT queue, lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify
  FROM pgqueue.queue_list() WHERE queue = 'qa';
-- The default queue can be altered (and put back).
SELECT pgqueue.queue_alter('default', p_lock_ms => 60000);
SELECT queue, lock_ms FROM pgqueue.queue_list() WHERE queue = 'default';
SELECT pgqueue.queue_alter('default', p_lock_ms => 30000);

-- queue_stats and queue_next_due on an empty queue.
SELECT queue, ready, scheduled, leased, dead, oldest_ready_age_ms FROM pgqueue.queue_stats('qc');
SELECT pgqueue.queue_next_due('qc') IS NULL AS empty_has_no_due;
-- One ready, two scheduled, one leased, one dead.
SELECT pgqueue.queue_alter('qc', p_max_attempts => 1);
SELECT pgqueue.message_create('qc', '\x01') AS ready_id \gset
SELECT pgqueue.message_create('qc', '\x02', pgqueue.now_ms() + 3600000) AS sched1 \gset
SELECT pgqueue.message_create('qc', '\x03', pgqueue.now_ms() + 7200000) AS sched2 \gset
SELECT pgqueue.message_create('qc', '\x04', -1) AS lease_id \gset
SELECT pgqueue.message_create('qc', '\x05', -2) AS dead_id \gset
SELECT id = :dead_id AS got_dead_candidate, attempts FROM pgqueue.message_dequeue('qc');
SELECT pgqueue.message_fail(:dead_id, 1, 'boom');
SELECT id = :lease_id AS got_lease_candidate, attempts FROM pgqueue.message_dequeue('qc');
SELECT queue, ready, scheduled, leased, dead, oldest_ready_age_ms >= 0 AS has_age
  FROM pgqueue.queue_stats('qc');
-- The next due time is the earliest dequeue_at of the unleased messages and lease expiries:
-- the ready message's, then (once it is gone) the lease's, then the first scheduled one's.
SELECT pgqueue.queue_next_due('qc') = (SELECT dequeue_at FROM pgqueue.message WHERE id = :ready_id)
       AS next_due_is_ready_message;
SELECT id = :ready_id AS took_ready FROM pgqueue.message_dequeue('qc', 1, 0);
SELECT pgqueue.queue_next_due('qc') = (SELECT locked_until FROM pgqueue.message WHERE id = :lease_id)
       AS next_due_is_lease_expiry;
SELECT pgqueue.message_complete(:lease_id, 1);
SELECT pgqueue.queue_next_due('qc') = (SELECT dequeue_at FROM pgqueue.message WHERE id = :sched1)
       AS next_due_is_first_scheduled;
-- queue_stats(NULL) lists every queue, by name.
SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats() ORDER BY queue COLLATE "C";

-- queue_drop removes the queue with its messages and dead letters; false if it did not exist.
SELECT pgqueue.queue_drop('qc');
SELECT pgqueue.queue_drop('qc');
SELECT pgqueue.queue_drop('never-existed');
SELECT count(*) AS orphan_messages FROM pgqueue.message m
 WHERE NOT EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = m.queue_id);
SELECT count(*) AS orphan_dead_letters FROM pgqueue.dead_letter d
 WHERE NOT EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = d.queue_id);
SELECT count(*) AS orphan_sizes FROM pgqueue.queue_size s
 WHERE NOT EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = s.queue_id);
-- A dropped queue can be created again, empty.
SELECT pgqueue.queue_create('qc');
SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats('qc');

SELECT pgqueue.queue_drop(q) FROM unnest(ARRAY['qa', 'qb', 'qc', '0q.with-all_chars', repeat('x', 48)]) q;
SELECT queue FROM pgqueue.queue_list() ORDER BY queue COLLATE "C";

-- max_size: an admission writes no new version of the queue's pgqueue.queue_size row (the bound
-- grows with the stripe's enqueued counter, so a held snapshot does not pile up the row's
-- versions); a recount writes it, only when the bound says "full".
SELECT pgqueue.queue_create('qcap', p_max_size => 5);
SELECT pgqueue.message_create('qcap', '\x01'::bytea) > 0 AS created;
CREATE TEMP TABLE qcap_row AS
    SELECT s.xmin::text AS row_xmin FROM pgqueue.queue_size s JOIN pgqueue.queue q ON q.id = s.queue_id
     WHERE q.name = 'qcap';
SELECT count(*) FROM pgqueue.message_create_batch('qcap', ARRAY['\x02', '\x03']::bytea[]);
SELECT pgqueue.message_create('qcap', '\x04'::bytea) > 0 AS created;
SELECT pgqueue.message_create('qcap', '\x05'::bytea) > 0 AS created;
SELECT s.xmin::text = r.row_xmin AS same_version, s.upper, s.mark IS NOT NULL AS counts_on_counter
  FROM pgqueue.queue_size s JOIN pgqueue.queue q ON q.id = s.queue_id, qcap_row r
 WHERE q.name = 'qcap';
SELECT pgqueue.message_create('qcap', '\x06'::bytea);  -- full: PQ003
SELECT count(*) FROM pgqueue.message_dequeue('qcap', 2, 0);
SELECT pgqueue.message_create('qcap', '\x06'::bytea) > 0 AS created;  -- recounted: 3 live
SELECT s.xmin::text <> r.row_xmin AS recounted, s.upper
  FROM pgqueue.queue_size s JOIN pgqueue.queue q ON q.id = s.queue_id, qcap_row r
 WHERE q.name = 'qcap';
SELECT count(*) AS live FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = 'qcap';
SELECT pgqueue.queue_drop('qcap');

-- max_size, the recount window: a count that found the queue full with 10,000 messages or more
-- (here 50,000) is not repeated for ten times its duration, at most 1 s; until then an
-- admission the bound cannot prove fits is refused without counting (its DETAIL says when the
-- queue is counted again). A refusal that counted has no DETAIL. After the window the queue is
-- counted again, and queue_alter of max_size (which removes the queue_size row) makes the next
-- admission count. A count that found room sets no window, so an admission rolled back after
-- its count leaves the next producer to count again, and be admitted.
SELECT pgqueue.queue_create('qbig', p_max_size => 50000);
SELECT count(*) FROM pgqueue.message_create_batch('qbig', array_fill('\x01'::bytea, ARRAY[50000]));
CREATE TEMP TABLE qbig_refusals (n integer, detail text);
CREATE FUNCTION pg_temp.qbig_try(p_n integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_detail text;
BEGIN
    PERFORM pgqueue.message_create('qbig', '\x02'::bytea);
    INSERT INTO qbig_refusals VALUES (p_n, 'admitted');
EXCEPTION WHEN SQLSTATE 'PQ003' THEN
    GET STACKED DIAGNOSTICS v_detail = PG_EXCEPTION_DETAIL;
    INSERT INTO qbig_refusals VALUES (p_n, v_detail);
END;
$$;
SELECT pg_temp.qbig_try(1);  -- counts: full
SELECT pg_temp.qbig_try(2);  -- within the window: refused without counting
SELECT count(*) FROM pgqueue.message_dequeue('qbig', 10, 0);
SELECT pg_temp.qbig_try(3);  -- room now, but within the window still: refused without counting
SELECT pg_sleep(1.05);
SELECT pg_temp.qbig_try(4);  -- the window is over: counted, admitted (no new window)
SELECT pg_temp.qbig_try(5);  -- room for 8 more: the bound admits it without counting
SELECT count(*) FROM pgqueue.message_create_batch('qbig', array_fill('\x03'::bytea, ARRAY[8]));
SELECT pg_temp.qbig_try(6);  -- full: counted (it found room last time), refused; a window starts
SELECT pg_temp.qbig_try(7);  -- within it: refused without counting
SELECT pgqueue.queue_alter('qbig', p_max_size => 50001);
SELECT pg_temp.qbig_try(8);  -- a new max_size: counted at once, window or not; admitted
SELECT count(*) FROM pgqueue.message_dequeue('qbig', 10, 0);
SELECT pg_sleep(1.05);  -- past try 6's window
BEGIN;
SELECT pgqueue.message_create('qbig', '\x04'::bytea) > 0 AS created;  -- counted, room: admitted ...
ROLLBACK;                                                              -- ... and rolled back
SELECT pg_temp.qbig_try(9);  -- the bound says full again: counted, admitted (no window was left)
SELECT n, detail = '' AS counted,
       detail = 'admitted' AS admitted,
       coalesce(substring(detail FROM '^The queue is counted again in (\d+) ms')::integer BETWEEN 1 AND 1000, false)
           AS refused_in_window
  FROM qbig_refusals ORDER BY n;
SELECT pgqueue.queue_drop('qbig');

-- queue_create clears the max_size exactness mark of the stripe it gives a new queue: a mark
-- left by a REPEATABLE READ producer of a dropped queue would keep the new queue writing its
-- queue_size row at every admission. (Every stripe is marked here; the ones in use keep it.)
SELECT count(*) FROM pgqueue.queue q
 WHERE pg_sequence_last_value(pgqueue._size_exact_seq(q.id)) IS NOT NULL;  -- none so far
SELECT count(*) FROM (SELECT setval(pgqueue._size_exact_seq(g), 1) FROM generate_series(0, 63) g) s;
SELECT pgqueue.queue_create('qfresh', p_max_size => 5);
SELECT q.name, pg_sequence_last_value(pgqueue._size_exact_seq(q.id)) IS NOT NULL AS marked
  FROM pgqueue.queue q ORDER BY q.name COLLATE "C";
SELECT count(*) FROM (SELECT setval(pgqueue._size_exact_seq(g), 1, false) FROM generate_series(0, 63) g) s;
SELECT pgqueue.queue_drop('qfresh');
