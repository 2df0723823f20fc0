-- Find a queue, take its lock stripe (docs/locking.md) and read its settings again after the
-- lock (a drop or alter may just have ended); PQ001/42602/22004 if there is no such queue.
CREATE FUNCTION pgqueue._queue_enter(p_queue text)
RETURNS pgqueue.queue
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    PERFORM pgqueue._queue_lock(v_queue.id);
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.id = v_queue.id;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    RETURN v_queue;
END;
$$;
