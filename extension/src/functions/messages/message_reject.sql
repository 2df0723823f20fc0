-- Reject a leased message for good: move it to the dead letters now, whatever max_attempts says
-- (for a message no retry can fix: malformed, or naming a task no worker knows). p_error is
-- stored as its last_error (NULL keeps the last one). False, and nothing changes, if the token
-- is stale, as for message_fail.
CREATE FUNCTION pgqueue.message_reject(p_id bigint, p_attempts integer, p_error text)
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
    PERFORM FROM pgqueue.message m
     WHERE m.id = p_id AND m.attempts = p_attempts AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgqueue._dead_letter(p_id, p_error, pgqueue.now_ms());
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_reject(bigint, integer, text) IS
    'Reject a leased message: move it to the dead letters now with p_error as its last_error, whatever max_attempts says; false if the token is stale';
