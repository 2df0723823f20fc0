-- The id range a snapshot of a queue covers: from the smallest to the largest live (and dead) id.
CREATE FUNCTION pgqueue.spark_snapshot_range(p_queue text, p_include_dead boolean DEFAULT false)
RETURNS TABLE (min_id bigint, max_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgqueue._queue_get(p_queue);
    -- two probes of each primary key; the range is shared by every queue, the scans filter
    RETURN QUERY
    SELECT CASE WHEN coalesce(p_include_dead, false)
                THEN least((SELECT min(m.id) FROM pgqueue.message m),
                           (SELECT min(d.id) FROM pgqueue.dead_letter d))
                ELSE (SELECT min(m.id) FROM pgqueue.message m) END,
           CASE WHEN coalesce(p_include_dead, false)
                THEN greatest((SELECT max(m.id) FROM pgqueue.message m),
                              (SELECT max(d.id) FROM pgqueue.dead_letter d))
                ELSE (SELECT max(m.id) FROM pgqueue.message m) END;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_snapshot_range(text, boolean) IS
    'The id range [min_id, max_id] that a snapshot of the queue covers (NULLs if there is nothing); planned once, split into partitions';
