-- The highest sequence number of a consumer's claims not acknowledged yet, NULL if none (an
-- unknown consumer of a known queue has none); an unknown queue is an error (PQ001, checked
-- once, before the scan: a one-time filter).
CREATE FUNCTION pgqueue.spark_pending_seq(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT max(k.seq) FROM pgqueue.spark_claim k
     WHERE k.consumer_id = pgqueue._spark_consumer_id(p_queue, p_consumer)
       AND (pgqueue._queue_get(p_queue)).id IS NOT NULL;
END;

COMMENT ON FUNCTION pgqueue.spark_pending_seq(text, text) IS
    'Highest sequence number among the Spark consumer''s claims that are not acknowledged yet; NULL if there is none';
