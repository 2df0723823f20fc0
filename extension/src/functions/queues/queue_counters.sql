-- Per queue, how many messages were enqueued, delivered, completed, failed, dead-lettered and
-- how many leases expired, since the queue was created (or since the upgrade to 0.4).
--
-- Read from sequences (pgqueue._count_seq), so reading is cheap (nine sequence reads a queue,
-- no scan) and counting costs the hot paths one nextval a message (a batch of n at most
-- 31 + n / 32, pgqueue._counted_n), no row version. How exact:
--   * a counted call that rolls back stays counted (nextval is not transactional);
--   * after a crash a counter may be ahead (sequences log 32 values ahead, and so on a standby):
--     failed, dead_lettered and expired by up to 32; enqueued, delivered and completed by up to
--     32 + 32 * 32 = 1,056, since their batches count on a second sequence that steps by 32;
--     or behind a value read before the crash, by what transactions that had not committed
--     counted (a sequence's WAL is flushed by the next commit, which the crash came before);
--   * shared is true when another queue counts on the same stripe (more than 64 queues, or
--     queues that existed before the upgrade to 0.4 with ids equal mod 64): then each of them
--     shows the sum of both.
-- What is counted: enqueued: message_create (and the text, JSON and schedule paths),
-- message_create_batch, dead_letter_requeue, spark_publish; delivered: each message message_dequeue hands out
-- (lease or delete mode); completed: message_complete(_batch); failed: message_fail that
-- retries; dead_lettered: every move to the dead letters (fail, reject, poison lease); expired:
-- leases that ran out, counted when a dequeue takes the message back (or a dead letter moves
-- it). Spark claims and acknowledgements are not counted. Errors: PQ001, 42602 for p_queue.
CREATE FUNCTION pgqueue.queue_counters(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, enqueued bigint, delivered bigint, completed bigint, failed bigint,
               dead_lettered bigint, expired bigint, shared boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan  -- planned once per session (see pgqueue._counted)
AS $$
#variable_conflict use_column
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name,
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 0)), 0)
             + coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 6)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 1)), 0)
             + coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 7)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 2)), 0)
             + coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 8)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 3)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 4)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 5)), 0),
           EXISTS (SELECT FROM pgqueue.queue o WHERE o.id & 63 = q.id & 63 AND o.id <> q.id)
      FROM pgqueue.queue q
     WHERE p_queue IS NULL OR q.name = p_queue
     ORDER BY q.name;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_counters(text) IS
    'Per queue: messages enqueued, delivered, completed, failed (retried), dead-lettered and leases expired since the queue was created (sequences: a rolled-back call stays counted); shared = another queue counts on the same stripe';
