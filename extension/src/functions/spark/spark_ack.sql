-- Acknowledge a consumer's claims up to p_up_to_seq: delete their messages; returns how many.
--
-- Idempotent: claims at or below the acknowledged position are gone already. Errors: 22023 if
-- p_up_to_seq is beyond the consumer's last claim, PQ005 if another session holds the consumer
-- (a Spark query runs on it: an acknowledgement by hand deleted the claims of a micro-batch it
-- had not read yet, and the batch read fewer rows with no error; a review), PQ006 for an
-- unknown consumer.
CREATE FUNCTION pgqueue.spark_ack(p_queue text, p_consumer text, p_up_to_seq bigint)
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
    v_left     bigint[];  -- the messages that left with a key or a turn, their groups, ...
    v_lg       text[];
    v_lt       bigint[];
    v_lk       text[];
    v_done     boolean;
BEGIN
    PERFORM pgqueue._not_null(p_up_to_seq IS NULL, 'p_up_to_seq'::text);
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_enter(p_queue);
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, false);
    -- (the row is locked FOR UPDATE: no spark_consumer_open can slip in meanwhile)
    IF v_consumer.holder_pid IS DISTINCT FROM pg_backend_pid()
       AND pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Its Spark query acknowledges what it has processed itself; stop the query first.';
    END IF;
    IF p_up_to_seq >= v_consumer.next_seq THEN
        RAISE EXCEPTION 'cannot acknowledge claim % of consumer "%": its last claim is %',
                        p_up_to_seq, p_consumer, v_consumer.next_seq - 1
            USING ERRCODE = '22023',
                  HINT = 'Acknowledge only sequence numbers that pgqueue.spark_claim() returned.';
    END IF;
    IF p_up_to_seq <= v_consumer.acked_seq THEN
        RETURN 0;
    END IF;
    v_claims := ARRAY(SELECT k.id FROM pgqueue.spark_claim k
                       WHERE k.consumer_id = v_consumer.id AND k.seq <= p_up_to_seq
                       ORDER BY k.seq);
    WITH d AS (
        DELETE FROM pgqueue.message m WHERE m.claim_id = ANY (v_claims)
        RETURNING m.id, m.group_key, m.turn_at, m.idem_key,
                  m.idem_key IS NOT NULL OR (m.group_key IS NOT NULL AND m.turn_at IS NOT NULL) AS left_)
    SELECT count(*), array_agg(d.id) FILTER (WHERE d.left_),
           array_agg(d.group_key) FILTER (WHERE d.left_),
           array_agg(d.turn_at) FILTER (WHERE d.left_),
           array_agg(d.idem_key) FILTER (WHERE d.left_)
      INTO v_count, v_left, v_lg, v_lt, v_lk
      FROM d;
    -- keys to keep for the queue's window, turns to pass on (pgqueue._message_left)
    FOR i IN 1 .. coalesce(cardinality(v_left), 0) LOOP
        v_done := pgqueue._message_left(v_queue.id, v_left[i], v_lg[i], v_lt[i], v_lk[i]);
    END LOOP;
    DELETE FROM pgqueue.spark_claim k WHERE k.id = ANY (v_claims);
    UPDATE pgqueue.spark_consumer c SET acked_seq = p_up_to_seq WHERE c.id = v_consumer.id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_ack(text, text, bigint) IS
    'Acknowledge a Spark consumer''s claims up to sequence number p_up_to_seq: delete their messages; idempotent; returns how many were deleted';
