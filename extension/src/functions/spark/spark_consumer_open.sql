-- Open a consumer for one Spark query: create it if needed, hold it for this session, return acked_seq.
--
-- The hold is a session-level advisory lock on a random key recorded, with this backend's pid,
-- in the consumer row (docs/locking.md): a role granted nothing cannot take a key it cannot read
-- before the holder does, and a lock it takes on an old key holds nothing. PQ005 if another
-- live session holds the consumer. A rollback of the call's transaction leaves the key locked
-- until the session ends, on no row: that lock holds nothing (docs/locking.md, rule 6).
CREATE FUNCTION pgqueue.spark_consumer_open(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue := pgqueue._queue_enter(p_queue);
    v_consumer pgqueue.spark_consumer;
    v_key      bigint;
BEGIN
    PERFORM pgqueue._spark_refuse_groups(v_queue);  -- before the consumer's row is made
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, true);
    IF v_consumer.holder_pid = pg_backend_pid()
       AND pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RETURN v_consumer.acked_seq;  -- this session holds it already
    END IF;
    IF pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Only one Spark query may consume as a consumer at a time: stop the other query or use another consumer name.';
    END IF;
    -- 60 random bits (gen_random_uuid is a strong random source)
    v_key := ('x' || substr(md5(gen_random_uuid()::text), 1, 15))::bit(60)::bigint;
    IF NOT pg_try_advisory_lock(v_key) THEN
        RAISE EXCEPTION 'could not take a fresh lock key for consumer "%"', p_consumer
            USING ERRCODE = 'PQ005', HINT = 'Retry.';
    END IF;
    UPDATE pgqueue.spark_consumer c SET holder_pid = pg_backend_pid(), holder_key = v_key
     WHERE c.id = v_consumer.id;
    RETURN v_consumer.acked_seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumer_open(text, text) IS
    'Create the Spark consumer if needed and hold it for this session (PQ005 if another session holds it); returns the acknowledged claim sequence number';
