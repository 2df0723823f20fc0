-- Trigger function of message_placed_low: a message became deliverable at a place below the
-- clock (a priority or past dequeue_at, a defer or fail to an earlier time, a lease given back
-- at its old place by spark_release, or any such INSERT or UPDATE in plain SQL), or got a lease
-- that had run out already (plain SQL). Advance the
-- queue's lock stripe, after the write, so that consumers' session hints look again from the
-- bottom once this transaction has ended (pgqueue._message_take, docs/performance.md).
CREATE FUNCTION pgqueue._message_placed_low()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM nextval(pgqueue._lock_stripe(NEW.queue_id));
    RETURN NULL;
END;
$$;
