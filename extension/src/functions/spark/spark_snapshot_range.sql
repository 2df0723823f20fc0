-- The id range a snapshot of a queue covers: from the smallest to the largest live (and dead) id,
-- NULLs if the queue has no message (and, with p_include_dead, no dead letter): there is nothing
-- to read (Spark plans no partition then). Errors: PQ001/42602/22004 for the queue.
CREATE FUNCTION pgqueue.spark_snapshot_range(p_queue text, p_include_dead boolean DEFAULT false)
RETURNS TABLE (min_id bigint, max_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    PERFORM pgqueue._not_null(p_include_dead IS NULL, 'p_include_dead'::text);  -- (NULL was taken for false)
    -- whether the queue holds anything: a probe of each partial index of its messages (leased
    -- or not) and, if asked, of its dead letters. (The range below is every queue's: an empty
    -- queue got the range of the others, a snapshot of it scanned their ids for nothing.)
    IF NOT (EXISTS (SELECT FROM pgqueue.message m WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL)
            OR EXISTS (SELECT FROM pgqueue.message m WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL)
            OR (p_include_dead
                AND EXISTS (SELECT FROM pgqueue.dead_letter d WHERE d.queue_id = v_queue.id))) THEN
        RETURN QUERY SELECT NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    -- two probes of each primary key; the range is shared by every queue, the scans filter
    -- (a STABLE function: its statements, the probes above too, read the caller's snapshot)
    RETURN QUERY
    SELECT CASE WHEN p_include_dead
                THEN least((SELECT min(m.id) FROM pgqueue.message m),
                           (SELECT min(d.id) FROM pgqueue.dead_letter d))
                ELSE (SELECT min(m.id) FROM pgqueue.message m) END,
           CASE WHEN p_include_dead
                THEN greatest((SELECT max(m.id) FROM pgqueue.message m),
                              (SELECT max(d.id) FROM pgqueue.dead_letter d))
                ELSE (SELECT max(m.id) FROM pgqueue.message m) END;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_snapshot_range(text, boolean) IS
    'The id range [min_id, max_id] that a snapshot of the queue covers (NULLs if the queue has nothing to read); planned once, split into partitions';
