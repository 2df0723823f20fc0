-- The messages of a consumer's claims p_after_seq < seq <= p_up_to_seq with p_min_id <= id <= p_max_id
-- (p_min_id, p_max_id NULL: no bound on that side). Errors: 22004 for a NULL p_after_seq or
-- p_up_to_seq (0.3 matched no claim), 22004/42602 for a NULL or invalid consumer name,
-- PQ001/42602/22004 for the queue, PQ006 for a consumer that does not exist (as spark_ack and
-- spark_release; 0.3 gave no rows).
CREATE FUNCTION pgqueue.spark_claimed(
    p_queue     text,
    p_consumer  text,
    p_after_seq bigint,
    p_up_to_seq bigint,
    p_min_id    bigint DEFAULT NULL,
    p_max_id    bigint DEFAULT NULL)
RETURNS TABLE (id bigint, claim_seq bigint, content bytea, content_type text, attempts integer,
               dequeue_at bigint, created_at bigint, state bytea, last_error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
#variable_conflict use_column
DECLARE
    v_queue    pgqueue.queue;
    v_consumer integer;
    v_claim    record;
BEGIN
    PERFORM pgqueue._not_null(p_after_seq IS NULL, 'p_after_seq'::text);
    PERFORM pgqueue._not_null(p_up_to_seq IS NULL, 'p_up_to_seq'::text);
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_get(p_queue);
    v_consumer := pgqueue._spark_consumer_get(v_queue, p_consumer);
    -- one bounded range scan of message_claim_idx per claim
    FOR v_claim IN
        SELECT k.id, k.seq FROM pgqueue.spark_claim k
         WHERE k.consumer_id = v_consumer
           AND k.seq > p_after_seq AND k.seq <= p_up_to_seq
         ORDER BY k.seq
    LOOP
        RETURN QUERY
        SELECT m.id, v_claim.seq, m.content, m.content_type, m.attempts, m.dequeue_at,
               m.created_at, m.state, m.last_error
          FROM pgqueue.message m
         WHERE m.claim_id = v_claim.id
           AND m.id >= coalesce(p_min_id, -9223372036854775808)
           AND m.id <= coalesce(p_max_id, 9223372036854775807)
         ORDER BY m.id;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_claimed(text, text, bigint, bigint, bigint, bigint) IS
    'Messages held by a Spark consumer''s claims p_after_seq < seq <= p_up_to_seq, optionally within an id range; reading changes nothing; PQ006 for a consumer that does not exist';
