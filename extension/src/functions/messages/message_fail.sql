-- Report a failed attempt: retry after the queue's back-off, or dead-letter after max_attempts.
-- p_error is stored as the message's last_error (NULL keeps the last one, as message_reject and
-- the dead-letter path do).
CREATE FUNCTION pgqueue.message_fail(
    p_id         bigint,
    p_attempts   integer,
    p_error      text,
    p_dequeue_at bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_now   bigint := pgqueue.now_ms();
    v_queue pgqueue.queue;
    v_counted boolean;
    v_at    bigint;
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id IS NULL, 'message id'::text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts token'::text);
    END IF;
    -- the queue's lock stripe before the row lock (docs/locking.md)
    PERFORM pgqueue._queue_lock(m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    SELECT q.* INTO v_queue
      FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
     WHERE m.id = p_id AND m.attempts = p_attempts AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL
       FOR UPDATE OF m;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_queue.max_attempts IS NOT NULL AND p_attempts >= v_queue.max_attempts THEN
        PERFORM pgqueue._dead_letter(p_id, p_error, v_now);
    ELSE
        v_at := coalesce(p_dequeue_at,
                         pgqueue._write_clock() + pgqueue._backoff_ms(p_attempts, v_queue.retry_base_ms,
                                                                      v_queue.retry_cap_ms));
        UPDATE pgqueue.message m
           SET locked_until = NULL,
               dequeue_at   = v_at,
               last_error   = coalesce(p_error, m.last_error),
               -- a message with its group's turn keeps it: the group waits for its retry (in the
               -- same UPDATE, so that the trigger message_placed_low sees the new turn key)
               turn_at      = CASE WHEN m.turn_at IS NOT NULL THEN pgqueue._turn_key(v_at, true) END,
               -- after its back-off from this writer's clock: no check by trigger message_placed_low
               write_mark   = CASE WHEN p_dequeue_at IS NULL THEN NOT coalesce(m.write_mark, false)
                                   ELSE m.write_mark END
         WHERE m.id = p_id;
        v_counted := pgqueue._counted(v_queue.id, 3);  -- failed (queue_counters)
    END IF;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_fail(bigint, integer, text, bigint) IS
    'Fail a leased message: retry after exponential back-off with jitter (or at p_dequeue_at), or move it to the dead letters once attempts reach max_attempts; false if the token is stale';
