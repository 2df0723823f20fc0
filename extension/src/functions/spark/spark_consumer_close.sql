-- Give up this session's hold on a consumer (closing the session does it too).
CREATE FUNCTION pgqueue.spark_consumer_close(p_queue text, p_consumer text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id integer := pgqueue._spark_consumer_id(p_queue, p_consumer);
    v_released boolean := false;
BEGIN
    IF v_id IS NULL THEN
        RETURN false;
    END IF;
    -- every spark_consumer_open of this session took the lock once; give back all of them
    WHILE EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted
                     AND l.classid = 1885827447 AND l.objid = v_id AND l.objsubid = 2) LOOP
        EXIT WHEN NOT pg_advisory_unlock(1885827447, v_id);
        v_released := true;
    END LOOP;
    RETURN v_released;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumer_close(text, text) IS
    'Release this session''s hold on a Spark consumer taken by spark_consumer_open; false if it held none';
