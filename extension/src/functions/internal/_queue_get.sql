-- Fetch a queue's settings row, raising PQ001/42602/22004 if there is none.
CREATE FUNCTION pgqueue._queue_get(p_queue text)
RETURNS pgqueue.queue
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
BEGIN
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    RETURN v_queue;
END;
$$;
