-- The consumer row, locked FOR UPDATE; created if missing and p_create, else PQ006 (40001 in
-- REPEATABLE READ or SERIALIZABLE if the queue changed since the snapshot).
-- Call with the queue's lock stripe held (docs/locking.md).
CREATE FUNCTION pgqueue._spark_consumer_row(p_queue pgqueue.queue, p_consumer text, p_create boolean)
RETURNS pgqueue.spark_consumer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_consumer pgqueue.spark_consumer;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    SELECT c.* INTO v_consumer FROM pgqueue.spark_consumer c
     WHERE c.queue_id = p_queue.id AND c.name = p_consumer
       FOR UPDATE;
    IF FOUND THEN
        RETURN v_consumer;
    END IF;
    IF NOT p_create THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" does not exist', p_consumer, p_queue.name
            USING ERRCODE = 'PQ006',
                  HINT = 'A consumer is created by its first pgqueue.spark_consumer_open() or pgqueue.spark_claim(); list them with pgqueue.spark_consumers().';
    END IF;
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        -- p_queue was read in this transaction's snapshot: a queue_drop that committed after it
        -- deleted the queue's consumers, and a row made now would be left behind for good, on
        -- no queue (a review). The queue's row FOR SHARE raises 40001 after any change of it
        -- since the snapshot, as it does for producers (specs/rr_orphans.spec).
        PERFORM pgqueue._queue_pin(p_queue.id);
    END IF;
    INSERT INTO pgqueue.spark_consumer (queue_id, name, created_at)
    VALUES (p_queue.id, p_consumer, pgqueue.now_ms())
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT c.* INTO STRICT v_consumer FROM pgqueue.spark_consumer c
     WHERE c.queue_id = p_queue.id AND c.name = p_consumer
       FOR UPDATE;
    RETURN v_consumer;
END;
$$;
