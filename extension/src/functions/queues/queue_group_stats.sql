-- The message groups of a queue with the most messages waiting (issue 14): per group, the
-- messages waiting (ready or scheduled, its turn or behind it) and those in flight (leased:
-- a lease that ran out counts here until a dequeue takes it again, since it keeps its group's
-- turn, where queue_stats counts it as ready), the p_limit groups with the most waiting first
-- (ties by key). Counts every grouped message of the queue (message_group_wait_idx and
-- message_group_turn_idx), like queue_stats_exact: a monitoring call, not for every poll. No rows for a queue without groups. Errors: PQ001, 42602,
-- 22004 (NULL queue or limit), 22023 (p_limit outside 1-10000).
CREATE FUNCTION pgqueue.queue_group_stats(p_queue text, p_limit integer DEFAULT 10)
RETURNS TABLE (group_key text, waiting bigint, in_flight bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    PERFORM pgqueue._not_null(p_limit IS NULL, 'p_limit'::text);
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT g.group_key, sum(g.waiting)::bigint, sum(g.in_flight)::bigint
      FROM (SELECT m.group_key, count(*) AS waiting, 0 AS in_flight
              FROM pgqueue.message m
             WHERE m.queue_id = v_queue.id AND m.group_key IS NOT NULL AND m.turn_at IS NULL
             GROUP BY m.group_key
            UNION ALL
            SELECT m.group_key, count(*) FILTER (WHERE m.locked_until IS NULL),
                   count(*) FILTER (WHERE m.locked_until IS NOT NULL)
              FROM pgqueue.message m
             WHERE m.queue_id = v_queue.id AND m.group_key IS NOT NULL AND m.turn_at IS NOT NULL
             GROUP BY m.group_key) g
     GROUP BY g.group_key
     ORDER BY 2 DESC, 1
     LIMIT p_limit;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_group_stats(text, integer) IS
    'The p_limit message groups of a queue with the most messages waiting: group key, waiting (ready or scheduled), in flight (leased, an expired lease too: it keeps the group''s turn)';
