-- Extend a lease by p_lock_ms from now (NULL: the queue's lock_ms). False if the token is stale.
CREATE FUNCTION pgqueue.message_heartbeat(p_id bigint, p_attempts integer, p_lock_ms bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id IS NULL, 'message id'::text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts token'::text);
    END IF;
    -- the queue's lock stripe before the row lock (docs/locking.md)
    PERFORM pgqueue._queue_lock(m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    PERFORM pgqueue._check_lock_ms(p_lock_ms, false);
    UPDATE pgqueue.message m
       SET locked_until = pgqueue._write_clock() + coalesce(p_lock_ms, q.lock_ms),  -- after the xid
           write_mark   = NOT coalesce(m.write_mark, false)  -- keyed from the clock (message_placed_low)
      FROM pgqueue.queue q
     WHERE m.id = p_id AND m.attempts = p_attempts AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL
       AND q.id = m.queue_id;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_heartbeat(bigint, integer, bigint) IS
    'Extend a lease to now + p_lock_ms (NULL = the queue''s lock_ms); returns false if the attempts token is stale';
