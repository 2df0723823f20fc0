-- The open claims of a consumer with p_after_seq < seq <= p_up_to_seq, by seq. An unknown queue
-- is an error (PQ001, checked once, before the scan: a one-time filter); an unknown consumer of a
-- known queue has no claims.
CREATE FUNCTION pgqueue.spark_claims(p_queue text, p_consumer text, p_after_seq bigint, p_up_to_seq bigint)
RETURNS TABLE (seq bigint, n integer, min_id bigint, max_id bigint, claimed_at bigint)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT k.seq, k.n, k.min_id, k.max_id, k.claimed_at
      FROM pgqueue.spark_claim k
     WHERE k.consumer_id = pgqueue._spark_consumer_id(p_queue, p_consumer)
       AND k.seq > p_after_seq AND k.seq <= p_up_to_seq
       AND (pgqueue._queue_get(p_queue)).id IS NOT NULL
     ORDER BY k.seq;
END;

COMMENT ON FUNCTION pgqueue.spark_claims(text, text, bigint, bigint) IS
    'Open claims of a Spark consumer with p_after_seq < seq <= p_up_to_seq: sequence number, message count and id range when claimed, claim time (epoch ms)';
