-- Move the staged rows of the winning task attempts into a queue, once per publish key.
--
-- p_partitions[i] won with attempt p_attempts[i], which staged p_counts[i] rows. All rows go in
-- one statement through pgqueue._queue_admit (the queue's lock stripe, max_size, then NOTIFY),
-- as message_create_batch; ids follow (partition, row) order. Rows with a group or an
-- idempotency key, and every row of a queue with message groups, go in one at a time in that
-- order through pgqueue._message_insert, as message_create_batch(..., p_groups, p_keys) does: a
-- group's messages keep their order and turns; a row whose key is taken (a live message, or one
-- within the queue's key_window_ms) inserts nothing. The write's staging rows (losers too) are
-- deleted. Returns how many rows were published (a row whose key was taken counts), NULL if the
-- publish key was published before (then only the staging rows are deleted). Errors:
-- 22004/22023 for bad arrays (22023 for a negative count, or counts that add up to more than
-- the largest bigint: before anything is written), 22023 for a group on a queue without groups
-- (nothing is published; also when a capped queue is full, never PQ003), PQ007 if the staged rows differ from p_counts, PQ003 if the queue is
-- full, PQ001 if it does not exist.
CREATE FUNCTION pgqueue.spark_publish(
    p_publish_key text,
    p_queue       text,
    p_write_id    uuid,
    p_partitions  integer[],
    p_attempts    bigint[],
    p_counts      bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue   pgqueue.queue;
    v_now     bigint := pgqueue.to_epoch(now());
    v_clock   bigint := pgqueue.now_ms();
    v_count   bigint;
    v_bad     record;
    v_row     record;
BEGIN
    PERFORM pgqueue._not_null(p_publish_key IS NULL, 'p_publish_key'::text);
    IF length(p_publish_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'p_publish_key must have 1 to 200 characters, got %', length(p_publish_key)
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue._not_null(p_write_id IS NULL, 'p_write_id'::text);
    PERFORM pgqueue._not_null(p_partitions IS NULL, 'p_partitions'::text);
    PERFORM pgqueue._not_null(p_attempts IS NULL, 'p_attempts'::text);
    PERFORM pgqueue._not_null(p_counts IS NULL, 'p_counts'::text);
    IF array_ndims(p_partitions) > 1 OR array_ndims(p_attempts) > 1 OR array_ndims(p_counts) > 1
       OR cardinality(p_attempts) <> cardinality(p_partitions)
       OR cardinality(p_counts) <> cardinality(p_partitions) THEN
        RAISE EXCEPTION 'p_partitions, p_attempts and p_counts must be one-dimensional and of the same length'
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_partitions, NULL) IS NOT NULL OR array_position(p_attempts, NULL) IS NOT NULL
       OR array_position(p_counts, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_partitions, p_attempts and p_counts must not contain NULL'
            USING ERRCODE = '22004';
    END IF;
    -- the counts add up to the publication's count (a bigint): a negative count, or a sum past
    -- the largest bigint, is refused here, not as PQ007 or 22003 "bigint out of range" later
    IF EXISTS (SELECT FROM unnest(p_counts) AS u(c) WHERE u.c < 0)
       OR (SELECT sum(u.c) FROM unnest(p_counts) AS u(c)) > 9223372036854775807 THEN
        RAISE EXCEPTION 'p_counts must be >= 0 and add up to at most 9223372036854775807'
            USING ERRCODE = '22023';
    END IF;
    IF (SELECT count(DISTINCT u.p) FROM unnest(p_partitions) AS u(p)) <> cardinality(p_partitions) THEN
        RAISE EXCEPTION 'each partition must have exactly one winning attempt'
            USING ERRCODE = '22023';
    END IF;
    v_queue := pgqueue._queue_get(p_queue);

    IF EXISTS (SELECT 1 FROM pgqueue.spark_publish_log l WHERE l.publish_key = p_publish_key) THEN
        DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
        RETURN NULL;
    END IF;

    v_count := (SELECT coalesce(sum(u.c), 0) FROM unnest(p_counts) AS u(c));

    -- a concurrent publish of the same key waits here and then finds it taken
    INSERT INTO pgqueue.spark_publish_log (publish_key, write_id, queue_id, n, published_at)
    VALUES (p_publish_key, p_write_id, v_queue.id, v_count, v_clock)
    ON CONFLICT (publish_key) DO NOTHING;
    IF NOT FOUND THEN
        DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
        RETURN NULL;
    END IF;
    -- The staged rows are counted only now that this call's row of the log is in: an earlier
    -- publication of the key (a first attempt whose reply was lost, still running when its
    -- retry came) either committed before that insert, which then found its row, or never
    -- will. Counted before it, a publication committing in between had deleted them (PQ007
    -- where the answer is NULL: specs/spark_publish_retry.spec).
    SELECT w.p AS partition, w.a AS attempt, w.c AS expected,
           (SELECT count(*) FROM pgqueue.spark_staging s
             WHERE s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a) AS staged
      INTO v_bad
      FROM unnest(p_partitions, p_attempts, p_counts) AS w(p, a, c)
     WHERE w.c <> (SELECT count(*) FROM pgqueue.spark_staging s
                    WHERE s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'partition % attempt % of write % staged % row(s), expected %',
                        v_bad.partition, v_bad.attempt, p_write_id, v_bad.staged, v_bad.expected
            USING ERRCODE = 'PQ007',
                  HINT = 'The staging rows were deleted or never committed: run the write again.';
    END IF;

    -- a group on a queue without groups is refused before the queue's room is asked for, as by
    -- message_create_batch: a full capped queue answered PQ003 to a publish that can never
    -- succeed (pgqueue._message_insert checks again under the queue's lock)
    IF v_queue.group_concurrency IS NULL
       AND EXISTS (SELECT 1 FROM unnest(p_partitions, p_attempts) AS w(p, a)
                     JOIN pgqueue.spark_staging s
                       ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
                    WHERE s.group_key IS NOT NULL) THEN
        RAISE EXCEPTION 'queue "%" has no message groups', v_queue.name
            USING ERRCODE = '22023',
                  HINT = 'Create the queue with pgqueue.queue_create(..., p_group_concurrency => n).';
    END IF;
    -- so is a new key into a queue with key_window_ms under REPEATABLE READ or SERIALIZABLE
    -- (PQ009, as pgqueue._message_insert refuses it; message_create_batch)
    IF v_queue.key_window_ms > 0
       AND current_setting('transaction_isolation') IN ('repeatable read', 'serializable')
       AND EXISTS (SELECT 1 FROM unnest(p_partitions, p_attempts) AS w(p, a)
                     JOIN pgqueue.spark_staging s
                       ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
                    WHERE s.idem_key IS NOT NULL
                      AND pgqueue._message_key_taken(v_queue.id, s.idem_key) IS NULL) THEN
        PERFORM pgqueue._require_read_committed('an enqueue of a new key into a queue with key_window_ms');
    END IF;
    v_queue := pgqueue._queue_admit(p_queue, v_count);
    IF v_count > 0 AND (v_queue.group_concurrency IS NOT NULL
                        OR EXISTS (SELECT 1 FROM pgqueue.spark_staging s
                                    WHERE s.write_id = p_write_id
                                      AND (s.group_key IS NOT NULL OR s.idem_key IS NOT NULL))) THEN
        IF v_queue.group_concurrency IS NOT NULL THEN
            -- the groups' locks first, in the stripes' order (no deadlock between two writes;
            -- READ COMMITTED)
            PERFORM pgqueue._message_group_locks(v_queue.id, array_agg(s.group_key))
               FROM unnest(p_partitions, p_attempts) AS w(p, a)
               JOIN pgqueue.spark_staging s
                 ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
              WHERE s.group_key IS NOT NULL;
        END IF;
        v_clock := pgqueue._write_clock();
        FOR v_row IN
            SELECT s.content, s.content_type, s.group_key, s.idem_key,
                   -- NULL when due now: pgqueue._message_insert reads the clock (its turn's key
                   -- in microseconds)
                   coalesce(s.dequeue_at,
                            v_clock + CASE WHEN s.delay_ms IS NOT NULL  -- saturate, never overflow
                                           THEN least(s.delay_ms, 9223372036854775807 - v_clock) END) AS dequeue_at
              FROM unnest(p_partitions, p_attempts) AS w(p, a)
              JOIN pgqueue.spark_staging s
                ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
             ORDER BY w.p, s.n
        LOOP
            PERFORM pgqueue._message_insert(v_queue, v_row.content, v_row.dequeue_at, v_row.content_type,
                                            v_row.group_key, v_row.idem_key, v_now);
        END LOOP;
        IF v_queue.notify THEN
            PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
        END IF;
    ELSIF v_count > 0 THEN
        v_clock := pgqueue._write_clock();
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
        SELECT v_queue.id, k.at, v_now, s.content, s.content_type,
               -- keyed at or above this writer's clock: no check by trigger message_placed_low
               CASE WHEN k.at >= v_clock - 5 THEN false END
          FROM unnest(p_partitions, p_attempts) AS w(p, a)
          JOIN pgqueue.spark_staging s
            ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
         CROSS JOIN LATERAL (
               SELECT coalesce(s.dequeue_at,
                               v_clock + CASE WHEN s.delay_ms IS NOT NULL  -- saturate, never overflow
                                              THEN least(s.delay_ms, 9223372036854775807 - v_clock) END,
                               v_clock) AS at) AS k
         ORDER BY w.p, s.n;
        IF v_queue.notify THEN
            PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
        END IF;
    END IF;
    -- enqueued (queue_counters), before the commit (a capped queue's bound counts on it:
    -- pgqueue._queue_reserve) and after the inserts, so that a refused row counts nothing
    PERFORM pgqueue._counted_n(v_queue.id, 0, v_count);
    DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_publish(text, text, uuid, integer[], bigint[], bigint[]) IS
    'Publish the staged rows of the winning Spark task attempts (with their groups and idempotency keys) into a queue in one transaction, once per publish key (NULL if already published), and delete the write''s staging rows; returns how many rows';
