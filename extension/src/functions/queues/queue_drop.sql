-- Drop a queue with its messages and dead letters; false if it did not exist.
CREATE FUNCTION pgqueue.queue_drop(p_queue text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id integer;
BEGIN
    PERFORM pgqueue._not_null(p_queue IS NULL, 'queue name'::text);
    IF p_queue = 'default' THEN
        RAISE EXCEPTION 'the default queue cannot be dropped'
            USING ERRCODE = 'PQ004',
                  HINT = 'Empty it instead: complete or purge its messages.';
    END IF;
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    -- The deletes below must see every message committed before them: READ COMMITTED only.
    PERFORM pgqueue._require_read_committed('queue_drop');
    SELECT q.id INTO v_id FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- wait for in-flight work on the queue's lock stripe; new work waits for us
    PERFORM pgqueue._queue_quiesce(v_id);
    DELETE FROM pgqueue.queue q WHERE q.id = v_id;
    IF NOT FOUND THEN
        RETURN false;  -- dropped by someone else meanwhile
    END IF;
    -- The stripe (id & 63) is not free for a queue_create later in this transaction, which
    -- would reset its counters with setval: a rollback brings this queue back, but not its
    -- counters (zero, where Prometheus counters never go down: a review). A setting local to
    -- the transaction, undone with a subtransaction that rolls back.
    PERFORM set_config('pgqueue.dropped_stripes',
                       concat_ws(',', nullif(current_setting('pgqueue.dropped_stripes', true), ''), v_id & 63),
                       true);
    DELETE FROM pgqueue.message m WHERE m.queue_id = v_id AND m.locked_until IS NULL;
    DELETE FROM pgqueue.message m WHERE m.queue_id = v_id AND m.locked_until IS NOT NULL;
    DELETE FROM pgqueue.dead_letter d WHERE d.queue_id = v_id;
    DELETE FROM pgqueue.queue_size s WHERE s.queue_id = v_id;
    DELETE FROM pgqueue.message_key k WHERE k.queue_id = v_id;
    DELETE FROM pgqueue.message_group_lock l WHERE l.queue_id = v_id;
    DELETE FROM pgqueue.schedule s WHERE s.queue_id = v_id;
    DELETE FROM pgqueue.spark_claim k
     WHERE k.consumer_id IN (SELECT c.id FROM pgqueue.spark_consumer c WHERE c.queue_id = v_id);
    DELETE FROM pgqueue.spark_consumer c WHERE c.queue_id = v_id;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_drop(text) IS
    'Drop a queue with its messages, dead letters, schedules and Spark consumers; returns false if it did not exist';
