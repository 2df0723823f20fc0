-- The id of a queue's consumer, read without a lock, for the readers of claims (which check the
-- name first, pgqueue._spark_check_consumer): PQ006 if there is no such consumer (as spark_ack
-- and spark_release, through pgqueue._spark_consumer_row).
CREATE FUNCTION pgqueue._spark_consumer_get(p_queue pgqueue.queue, p_consumer text)
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_consumer integer;
BEGIN
    SELECT c.id INTO v_consumer FROM pgqueue.spark_consumer c
     WHERE c.queue_id = p_queue.id AND c.name = p_consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" does not exist', p_consumer, p_queue.name
            USING ERRCODE = 'PQ006',
                  HINT = 'A consumer is created by its first pgqueue.spark_consumer_open() or pgqueue.spark_claim(); list them with pgqueue.spark_consumers().';
    END IF;
    RETURN v_consumer;
END;
$$;

COMMENT ON FUNCTION pgqueue._spark_consumer_get(pgqueue.queue, text) IS
    'pgqueue internal: the id of a Spark consumer of the queue, read without a lock; PQ006 if there is none';
