-- Count a queue's messages by state, all of them: what queue_stats returns, with no estimate.
-- It reads every live message of the queue (0.25-1 s of a core for a million), so it is for
-- checks and tests, not for a monitor that polls. oldest_ready_age_ms as in queue_stats: how
-- long the ready message that has waited longest has waited, from greatest(dequeue_at,
-- created_at), or an expired lease from when it ran out; here over every ready message.
CREATE FUNCTION pgqueue.queue_stats_exact(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, dead bigint,
               oldest_ready_age_ms bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint := pgqueue.now_ms();
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name,
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now)
         + (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now),
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at > v_now),
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NOT NULL AND m.locked_until > v_now),
           (SELECT count(*) FROM pgqueue.dead_letter d WHERE d.queue_id = q.id),
           greatest((SELECT v_now - min(greatest(m.dequeue_at, m.created_at)) FROM pgqueue.message m
                      WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now),
                    (SELECT v_now - min(m.locked_until) FROM pgqueue.message m
                      WHERE m.queue_id = q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now))
      FROM pgqueue.queue q
     WHERE p_queue IS NULL OR q.name = p_queue
     ORDER BY q.name;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_stats_exact(text) IS
    'Per queue: ready (incl. expired leases), scheduled, leased and dead counts, all exact (reads every live message; queue_stats estimates counts above 10,000), and how long the ready message that has waited longest has waited (ms; expired leases since they ran out)';
