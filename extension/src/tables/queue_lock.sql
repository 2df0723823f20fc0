-- The lock stripes: 64 sequences whose only use is their relation lock (docs/locking.md).
-- Queue q uses pgqueue.queue_lock_<q & 63> (pgqueue._lock_stripe). Every operation on a
-- queue's messages takes its stripe in ROW EXCLUSIVE mode (pgqueue._queue_lock); queue_drop and
-- a max_size change take it in SHARE ROW EXCLUSIVE mode (pgqueue._queue_quiesce), so they wait
-- for the work in flight and new work waits for them, in the lock manager's fair queue. Unlike
-- an advisory lock, a relation lock needs a privilege on the relation: a role that was granted
-- nothing cannot hold it. They are never advanced, so they leave no dead tuples and no WAL.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_lock_%s AS integer', i);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_lock_%s IS %L', i,
            'pgqueue internal: lock stripe of the queues whose id & 63 = ' || i || ' (never advanced)');
    END LOOP;
END;
$$;
