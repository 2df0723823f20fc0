-- Give a leased message back for later, keeping its row, attempts and (new) checkpoint state.
CREATE FUNCTION pgqueue.message_defer(
    p_id         bigint,
    p_attempts   integer,
    p_dequeue_at bigint,
    p_state      bytea DEFAULT NULL)
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
    UPDATE pgqueue.message m
       SET locked_until = NULL,
           dequeue_at   = coalesce(p_dequeue_at, pgqueue._write_clock()),
           state        = coalesce(p_state, m.state),
           -- a message with its group's turn keeps it: the group waits for it
           turn_at      = CASE WHEN m.turn_at IS NOT NULL
                               THEN pgqueue._turn_key(coalesce(p_dequeue_at, pgqueue._write_clock()), true) END,
           -- keyed with this writer's clock: no check by trigger message_placed_low
           write_mark   = CASE WHEN p_dequeue_at IS NULL THEN NOT coalesce(m.write_mark, false)
                               ELSE m.write_mark END
     WHERE m.id = p_id AND m.attempts = p_attempts AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_defer(bigint, integer, bigint, bytea) IS
    'Release a leased message until p_dequeue_at (NULL = now), keeping attempts; p_state (if not NULL) replaces the checkpoint state; false if the token is stale';
