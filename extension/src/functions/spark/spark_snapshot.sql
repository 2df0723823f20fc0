-- The messages (and dead letters) of a queue with p_min_id <= id <= p_max_id, by id; changes nothing.
--
-- status is ready (expired leases too, as queue_stats counts them), scheduled, leased, claimed
-- (by a Spark consumer) or dead.
CREATE FUNCTION pgqueue.spark_snapshot(
    p_queue        text,
    p_min_id       bigint,
    p_max_id       bigint,
    p_include_dead boolean DEFAULT false)
RETURNS TABLE (id bigint, status text, content bytea, content_type text, attempts integer,
               dequeue_at bigint, created_at bigint, locked_until bigint, last_error text,
               dead_at bigint, state bytea)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue._not_null(p_min_id IS NULL, 'p_min_id'::text);
    PERFORM pgqueue._not_null(p_max_id IS NULL, 'p_max_id'::text);
    -- (NULL was taken for false: dead letters left out of a snapshot that asked NULL, a review)
    PERFORM pgqueue._not_null(p_include_dead IS NULL, 'p_include_dead'::text);
    RETURN QUERY
    SELECT m.id,
           CASE WHEN m.claim_id IS NOT NULL THEN 'claimed'
                WHEN m.locked_until IS NULL AND m.dequeue_at <= v_now THEN 'ready'
                WHEN m.locked_until IS NULL THEN 'scheduled'
                WHEN m.locked_until <= v_now THEN 'ready'
                ELSE 'leased' END,
           m.content, m.content_type, m.attempts, m.dequeue_at, m.created_at, m.locked_until,
           m.last_error, NULL::bigint, m.state
      FROM pgqueue.message m
     WHERE m.id >= p_min_id AND m.id <= p_max_id AND m.queue_id = v_queue.id
     ORDER BY m.id;
    IF p_include_dead THEN
        RETURN QUERY
        SELECT d.id, 'dead'::text, d.content, d.content_type, d.attempts, d.dequeue_at,
               d.created_at, NULL::bigint, d.last_error, d.dead_at, d.state
          FROM pgqueue.dead_letter d
         WHERE d.id >= p_min_id AND d.id <= p_max_id AND d.queue_id = v_queue.id
         ORDER BY d.id;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_snapshot(text, bigint, bigint, boolean) IS
    'Messages of a queue with p_min_id <= id <= p_max_id and their status (ready, scheduled, leased, claimed; dead letters too if asked), by id; changes nothing';
