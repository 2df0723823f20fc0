-- When the next message of a queue becomes deliverable (epoch ms), NULL if none is waiting.
CREATE FUNCTION pgqueue.queue_next_due(p_queue text DEFAULT 'default')
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    IF v_queue.group_concurrency IS NOT NULL THEN  -- message groups: the next turn
        RETURN least(
            (SELECT m.turn_at / 1000 FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.turn_at IS NOT NULL AND m.locked_until IS NULL
              ORDER BY m.turn_at, m.id LIMIT 1),
            (SELECT m.locked_until FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
              ORDER BY m.locked_until, m.id LIMIT 1));
    END IF;
    RETURN least(
        (SELECT m.dequeue_at FROM pgqueue.message m
          WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL
          ORDER BY m.dequeue_at, m.id LIMIT 1),
        (SELECT m.locked_until FROM pgqueue.message m
          WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
          ORDER BY m.locked_until, m.id LIMIT 1));
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_next_due(text) IS
    'Epoch ms at which the next message of the queue becomes deliverable (scheduled or lease expiry); NULL if the queue is empty';
