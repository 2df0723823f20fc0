-- In REPEATABLE READ and SERIALIZABLE, make sure the queue row a producer read from its snapshot
-- is still the current one, and keep it so until commit: FOR SHARE on it raises a serialization
-- failure (40001, retry the transaction) if a queue_drop or queue_alter committed after the
-- snapshot was taken, and makes a later drop or alter wait for this transaction. READ COMMITTED
-- producers do not need it: they read the queue again after taking its lock stripe.
--
-- SECURITY DEFINER because FOR SHARE needs UPDATE on pgqueue.queue, which producers must not
-- have. EXECUTE is revoked from PUBLIC (a share lock held by anyone would stall drop and alter)
-- and granted to producers by docs/grants.sql.
CREATE FUNCTION pgqueue._queue_pin(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM FROM pgqueue.queue q WHERE q.id = p_queue_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue % was dropped', p_queue_id
            USING ERRCODE = 'PQ001',
                  HINT = 'The queue was dropped while this transaction ran.';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._queue_pin(integer) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._queue_pin(integer) IS
    'pgqueue internal: lock a queue row FOR SHARE for a REPEATABLE READ or SERIALIZABLE producer (40001 if it changed since the snapshot)';
