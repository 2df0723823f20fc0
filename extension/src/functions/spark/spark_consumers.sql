-- The Spark consumers with their positions, open claims and whether a session holds them.
CREATE FUNCTION pgqueue.spark_consumers(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, consumer text, acked_seq bigint, next_seq bigint, claims bigint,
               claimed bigint, oldest_claim_at bigint, active boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name, c.name, c.acked_seq, c.next_seq, s.claims, s.claimed, s.oldest,
           pgqueue._spark_consumer_held(c.holder_pid, c.holder_key)
      FROM pgqueue.spark_consumer c
      JOIN pgqueue.queue q ON q.id = c.queue_id
     CROSS JOIN LATERAL (SELECT count(*) AS claims, coalesce(sum(k.n), 0)::bigint AS claimed,
                                min(k.claimed_at) AS oldest
                           FROM pgqueue.spark_claim k WHERE k.consumer_id = c.id) s
     WHERE p_queue IS NULL OR q.name = p_queue
     ORDER BY q.name, c.name;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumers(text) IS
    'Spark consumers (of one queue or all): acknowledged and next sequence numbers, open claims, messages they took, oldest claim time (epoch ms), whether a session holds them';
