-- Give up this session's hold on a consumer (closing the session does it too).
CREATE FUNCTION pgqueue.spark_consumer_close(p_queue text, p_consumer text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id  integer := pgqueue._spark_consumer_id(p_queue, p_consumer);
    v_key bigint;
BEGIN
    IF v_id IS NULL THEN
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
    'Release this session''s hold on a Spark consumer taken by spark_consumer_open; false if it held none';
