-- The open claims of a consumer with p_after_seq < seq <= p_up_to_seq, by seq. Errors: 22004
-- for a NULL p_after_seq or p_up_to_seq (not "no bound": 0.3 matched no claim),
-- 22004/42602 for a NULL or invalid consumer name, PQ001/42602/22004 for the queue, PQ006 for a
-- consumer that does not exist (as spark_ack and spark_release; 0.3 gave no rows).
CREATE FUNCTION pgqueue.spark_claims(p_queue text, p_consumer text, p_after_seq bigint, p_up_to_seq bigint)
RETURNS TABLE (seq bigint, n integer, min_id bigint, max_id bigint, claimed_at bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue    pgqueue.queue;
    v_consumer integer;
BEGIN
    PERFORM pgqueue._not_null(p_after_seq IS NULL, 'p_after_seq'::text);
    PERFORM pgqueue._not_null(p_up_to_seq IS NULL, 'p_up_to_seq'::text);
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_get(p_queue);
    v_consumer := pgqueue._spark_consumer_get(v_queue, p_consumer);
    RETURN QUERY
    SELECT k.seq, k.n, k.min_id, k.max_id, k.claimed_at
      FROM pgqueue.spark_claim k
     WHERE k.consumer_id = v_consumer AND k.seq > p_after_seq AND k.seq <= p_up_to_seq
     ORDER BY k.seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_claims(text, text, bigint, bigint) IS
    'Open claims of a Spark consumer with p_after_seq < seq <= p_up_to_seq: sequence number, message count and id range when claimed, claim time (epoch ms); PQ006 for a consumer that does not exist';
