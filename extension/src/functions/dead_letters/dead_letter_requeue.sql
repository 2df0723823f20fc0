-- Put dead letters back on their queue as new messages (fresh id, attempts 0); returns how many.
-- p_ids NULL: all of the queue's; a NULL element is refused (22004), as are ids of two
-- dimensions (22023), before anything is done.
CREATE FUNCTION pgqueue.dead_letter_requeue(
    p_queue      text,
    p_ids        bigint[] DEFAULT NULL,
    p_dequeue_at bigint   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint := pgqueue.to_epoch(now());
    v_ids   bigint[];
    v_clock bigint;
    v_turn  bigint;
BEGIN
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'p_ids must be a one-dimensional array' USING ERRCODE = '22023';
    END IF;
    IF array_position(p_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_ids must not contain NULL' USING ERRCODE = '22004',
            HINT = 'List dead letters by id; for all of them, pass NULL for the whole array (or leave it out).';
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    v_ids := ARRAY(SELECT d.id FROM pgqueue.dead_letter d
                    WHERE d.queue_id = v_queue.id AND (p_ids IS NULL OR d.id = ANY (p_ids))
                    ORDER BY d.id
                      FOR UPDATE);
    PERFORM pgqueue._queue_admit(p_queue, cardinality(v_ids));
    v_clock := pgqueue._write_clock();
    -- a queue with message groups: back without its group, in a group of its own (due now: one
    -- clock reading in microseconds for all, read after the xid, so that they go behind the turns
    -- handed on before and keep their order among themselves by id)
    IF v_queue.group_concurrency IS NOT NULL THEN
        v_turn := pgqueue._turn_key(coalesce(p_dequeue_at, v_clock), p_dequeue_at IS NULL);
    END IF;
    -- A fresh id keeps fencing sound: no token handed out before can match the new message.
    WITH d AS (
        DELETE FROM pgqueue.dead_letter d WHERE d.id = ANY (v_ids)
        RETURNING d.id, d.created_at, d.content, d.content_type, d.state, d.last_error
    )
    INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, state, last_error,
                                 turn_at, write_mark)
    SELECT v_queue.id, coalesce(p_dequeue_at, v_clock), d.created_at, d.content, d.content_type,
           d.state, d.last_error,
           v_turn,
           -- keyed at or above this writer's clock: no check by trigger message_placed_low
           CASE WHEN p_dequeue_at IS NULL OR p_dequeue_at >= v_clock - 5 THEN false END
      FROM d ORDER BY d.id;
    PERFORM pgqueue._counted_n(v_queue.id, 0, cardinality(v_ids));  -- enqueued (queue_counters)
    IF cardinality(v_ids) > 0 AND v_queue.notify THEN
        PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
    END IF;
    RETURN cardinality(v_ids);
END;
$$;

COMMENT ON FUNCTION pgqueue.dead_letter_requeue(text, bigint[], bigint) IS
    'Move dead letters of a queue (all, or the ids given) back to it as new messages with attempts 0; returns how many';
