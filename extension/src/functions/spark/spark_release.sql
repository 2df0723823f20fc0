-- Give back the messages of every open claim of a consumer (one that will not come back).
--
-- The messages become deliverable again at their old place in the queue (dequeue_at kept,
-- attempts kept); the consumer's acknowledged position moves to its last claim. Errors: PQ005
-- if a session holds the consumer (its query is running), PQ006 for an unknown consumer.
CREATE FUNCTION pgqueue.spark_release(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer pgqueue.spark_consumer;
    v_claims   bigint[];
    v_count    bigint;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_enter(p_queue);
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, false);
    -- the consumer row is locked FOR UPDATE: no spark_consumer_open can slip in meanwhile;
    -- the session that holds the consumer may release it
    IF v_consumer.holder_pid IS DISTINCT FROM pg_backend_pid()
       AND pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Stop the Spark query that consumes as it first; release is for consumers that will not come back.';
    END IF;
    v_claims := ARRAY(SELECT k.id FROM pgqueue.spark_claim k
                       WHERE k.consumer_id = v_consumer.id ORDER BY k.seq);
    UPDATE pgqueue.message m SET locked_until = NULL, claim_id = NULL
     WHERE m.claim_id = ANY (v_claims);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    DELETE FROM pgqueue.spark_claim k WHERE k.id = ANY (v_claims);
    UPDATE pgqueue.spark_consumer c SET acked_seq = c.next_seq - 1 WHERE c.id = v_consumer.id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_release(text, text) IS
    'Give back the messages of every open claim of a Spark consumer that will not come back: they become deliverable again; PQ005 if its query is running; returns how many';
