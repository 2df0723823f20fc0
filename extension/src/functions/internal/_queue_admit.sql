-- Admit p_count new messages into a queue and return its settings: take the queue's lock stripe,
-- read the settings again after it (a drop or alter may just have ended), in REPEATABLE READ or
-- SERIALIZABLE pin the queue row (pgqueue._queue_pin: 40001 if it changed since the snapshot),
-- and enforce max_size (pgqueue._queue_reserve). Every producer goes through here except the
-- READ COMMITTED fast path of message_create (docs/locking.md).
CREATE FUNCTION pgqueue._queue_admit(p_queue text, p_count bigint)
RETURNS pgqueue.queue
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
BEGIN
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        PERFORM pgqueue._queue_pin(v_queue.id);
    END IF;
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.id = v_queue.id;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF v_queue.max_size IS NOT NULL AND p_count > 0 THEN
        PERFORM pgqueue._queue_reserve(v_queue.id, p_count);
    END IF;
    RETURN v_queue;
END;
$$;
