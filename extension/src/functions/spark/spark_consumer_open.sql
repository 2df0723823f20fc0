-- Open a consumer for one Spark query: create it if needed, hold its session lock, return acked_seq.
CREATE FUNCTION pgqueue.spark_consumer_open(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue := pgqueue._queue_enter(p_queue);
    v_consumer pgqueue.spark_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, true);
BEGIN
    IF NOT pg_try_advisory_lock(1885827447, v_consumer.id) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Only one Spark query may consume as a consumer at a time: stop the other query or use another consumer name.';
    END IF;
    RETURN v_consumer.acked_seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumer_open(text, text) IS
    'Create the Spark consumer if needed and hold its lock for this session (PQ005 if another session holds it); returns the acknowledged claim sequence number';
