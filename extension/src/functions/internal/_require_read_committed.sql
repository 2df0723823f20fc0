-- Refuse to run p_what under REPEATABLE READ or SERIALIZABLE (PQ009; READ UNCOMMITTED runs as
-- READ COMMITTED in PostgreSQL, and is let through as it): queue_drop, max_size and group_concurrency
-- changes wait for the work in flight and must then see what it committed, queue_create must see
-- which counter stripes other queues took, and a new idempotency key must see the keys kept for
-- a queue's window; a REPEATABLE READ or SERIALIZABLE snapshot taken earlier cannot
-- (docs/guarantees.md, "Isolation levels").
CREATE FUNCTION pgqueue._require_read_committed(p_what text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION '% needs READ COMMITTED, not %', p_what,
                        upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'PQ009',
                  HINT = 'Run it in a READ COMMITTED transaction of its own: BEGIN ISOLATION LEVEL READ COMMITTED, or SET default_transaction_isolation = ''read committed'' where the database or role defaults to another level.';
    END IF;
END;
$$;
