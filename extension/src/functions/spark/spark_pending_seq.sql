-- The highest sequence number of a consumer's claims not acknowledged yet, NULL if none.
-- Errors: 22004/42602 for a NULL or invalid consumer name, PQ001/42602/22004 for the queue, PQ006
-- for a consumer that does not exist (as spark_ack and spark_release; 0.3 answered NULL, as for
-- a consumer with no open claim).
CREATE FUNCTION pgqueue.spark_pending_seq(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer integer;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_get(p_queue);
    v_consumer := pgqueue._spark_consumer_get(v_queue, p_consumer);
    RETURN (SELECT max(k.seq) FROM pgqueue.spark_claim k WHERE k.consumer_id = v_consumer);
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_pending_seq(text, text) IS
    'Highest sequence number among the Spark consumer''s claims that are not acknowledged yet; NULL if there is none; PQ006 for a consumer that does not exist';
