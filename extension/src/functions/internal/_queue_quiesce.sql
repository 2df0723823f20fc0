-- Wait for the work in flight on a queue's lock stripe and hold new work off until the end of the
-- transaction: the stripe in SHARE ROW EXCLUSIVE mode (docs/locking.md). queue_drop and a
-- max_size or group_concurrency change call it before they read or change any row of the queue.
--
-- SECURITY DEFINER because ALTER SEQUENCE (the only statement that takes a strong lock on a
-- sequence) needs its owner; it runs nothing but that statement, on a name it computes itself.
-- EXECUTE is revoked from PUBLIC: holding a stripe this way stops every queue on it.
CREATE FUNCTION pgqueue._queue_quiesce(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('ALTER SEQUENCE %s NO CYCLE', pgqueue._lock_stripe(p_queue_id));
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._queue_quiesce(integer) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._queue_quiesce(integer) IS
    'pgqueue internal: wait for in-flight work on the queue''s lock stripe and block new work until commit (queue_drop, max_size and group_concurrency changes)';
