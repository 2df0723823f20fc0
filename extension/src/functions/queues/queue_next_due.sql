-- When the next message of a queue becomes deliverable (epoch ms), NULL if none is waiting. With
-- message groups, the next turn; with a rate limit, not before its next slot is due.
CREATE FUNCTION pgqueue.queue_next_due(p_queue text DEFAULT 'default')
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_due   bigint;
BEGIN
    IF v_queue.group_concurrency IS NOT NULL THEN  -- message groups: the next turn
        v_due := least(
            (SELECT m.turn_at / 1000 FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.turn_at IS NOT NULL AND m.locked_until IS NULL
              ORDER BY m.turn_at, m.id LIMIT 1),
            (SELECT m.locked_until FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
              ORDER BY m.locked_until, m.id LIMIT 1));
    ELSE
        v_due := least(
            (SELECT m.dequeue_at FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL
              ORDER BY m.dequeue_at, m.id LIMIT 1),
            (SELECT m.locked_until FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
              ORDER BY m.locked_until, m.id LIMIT 1));
    END IF;
    IF v_queue.rate_limit IS NOT NULL AND v_due IS NOT NULL THEN
        -- the next slot (pgqueue._rate_room); a last slot more than a minute's slots and 100,000
        -- more ahead was taken at another rate and counts as none
        v_due := greatest(v_due, (SELECT CASE WHEN n.last <= floor(pgqueue.now_ms()::numeric * v_queue.rate_limit / 1000)
                                                              + 60::bigint * v_queue.rate_limit + 100000
                                              THEN ceil((n.last + 1)::numeric * 1000 / v_queue.rate_limit)::bigint END
                                    FROM (SELECT pg_sequence_last_value(pgqueue._rate_seq(v_queue.id)) AS last) n));
    END IF;
    RETURN v_due;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_next_due(text) IS
    'Epoch ms at which the next message of the queue becomes deliverable (scheduled, lease expiry, the next turn of a grouped queue, the next slot of a rate limit); NULL if the queue is empty';
