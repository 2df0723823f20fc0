-- The highest sequence number of a consumer's claims not acknowledged yet, NULL if none.
CREATE FUNCTION pgqueue.spark_pending_seq(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT max(k.seq) FROM pgqueue.spark_claim k
     WHERE k.consumer_id = pgqueue._spark_consumer_id(p_queue, p_consumer);
END;

COMMENT ON FUNCTION pgqueue.spark_pending_seq(text, text) IS
    'Highest sequence number among the Spark consumer''s claims that are not acknowledged yet; NULL if there is none';
