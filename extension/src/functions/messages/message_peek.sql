-- Read up to p_limit messages of a queue without leasing them, in the order dequeue would
-- hand them out: expired leases first (by lease expiry), then ready and scheduled messages by
-- (dequeue_at, id). Messages under a live lease (being handled) are not shown.
--
-- Two bounded index probes, as in dequeue: message_leased_idx for the expired leases, then
-- message_ready_idx for the room left; nothing is locked and nothing changes. A message that
-- an in-progress dequeue is leasing may still be shown; an expired lease that ran out
-- max_attempts times is shown, though the next dequeue moves it to the dead letters.
CREATE FUNCTION pgqueue.message_peek(p_queue text DEFAULT 'default', p_limit integer DEFAULT 10)
RETURNS TABLE (id bigint, content bytea, content_type text, attempts integer, dequeue_at bigint,
               created_at bigint, locked_until bigint, state bytea, last_error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint := pgqueue.now_ms();
    v_found bigint;
BEGIN
    IF p_limit IS NULL THEN
        PERFORM pgqueue._not_null(true, 'p_limit'::text);
    END IF;
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT m.id, m.content, m.content_type, m.attempts, m.dequeue_at, m.created_at,
           m.locked_until, m.state, m.last_error
      FROM pgqueue.message m
     WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now
     ORDER BY m.locked_until, m.id
     LIMIT p_limit;
    GET DIAGNOSTICS v_found = ROW_COUNT;
    IF v_found < p_limit THEN
        RETURN QUERY
        SELECT m.id, m.content, m.content_type, m.attempts, m.dequeue_at, m.created_at,
               m.locked_until, m.state, m.last_error
          FROM pgqueue.message m
         WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL
         ORDER BY m.dequeue_at, m.id
         LIMIT p_limit - v_found;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_peek(text, integer) IS
    'Read up to p_limit messages of a queue without leasing them, in delivery order (expired leases, then ready and scheduled by dequeue_at, id); two index probes, nothing locked';
