-- Give up this session's hold on a consumer (closing the session does it too).
--
-- False if this session held none: a consumer it never opened or closed already (a second
-- close), one that does not exist, or one of a queue that does not exist (any more: the Spark
-- source closes its consumer when its query stops, also after the queue was dropped under it,
-- which took the consumer with it). Errors, for arguments no consumer can have: 22004 for a
-- NULL queue or consumer name, 42602 for an invalid one.
CREATE FUNCTION pgqueue.spark_consumer_close(p_queue text, p_consumer text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id  integer;
    v_key bigint;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_id := pgqueue._spark_consumer_id(p_queue, p_consumer);
    IF v_id IS NULL THEN
        IF NOT EXISTS (SELECT FROM pgqueue.queue q WHERE q.name = p_queue) THEN
            BEGIN
                PERFORM pgqueue._queue_missing(p_queue);  -- 22004 and 42602 raise
            EXCEPTION WHEN SQLSTATE 'PQ001' THEN
                NULL;  -- a valid name of no queue: nothing held
            END;
        END IF;
        RETURN false;
    END IF;
    SELECT c.holder_key INTO v_key FROM pgqueue.spark_consumer c
     WHERE c.id = v_id AND c.holder_pid = pg_backend_pid();
    IF v_key IS NULL OR NOT pgqueue._spark_consumer_held(pg_backend_pid(), v_key) THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_unlock(v_key);
    UPDATE pgqueue.spark_consumer c SET holder_pid = NULL, holder_key = NULL
     WHERE c.id = v_id AND c.holder_pid = pg_backend_pid();
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumer_close(text, text) IS
    'Release this session''s hold on a Spark consumer taken by spark_consumer_open; false if it held none (also for a consumer or queue that does not exist); 22004/42602 for a NULL or invalid name';
