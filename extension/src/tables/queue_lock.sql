-- The lock stripes: 64 sequences used for their relation lock (docs/locking.md).
-- Queue q uses pgqueue.queue_lock_<q & 63> (pgqueue._lock_stripe). Every operation on a
-- queue's messages takes its stripe in ROW EXCLUSIVE mode (pgqueue._queue_lock); queue_drop and
-- a max_size or group_concurrency change take it in SHARE ROW EXCLUSIVE mode
-- (pgqueue._queue_quiesce), so they wait for the work in flight and new work waits for them, in
-- the lock manager's fair queue. Unlike an advisory lock, a relation lock needs a privilege on
-- the relation: a role that was granted nothing cannot hold it. They leave no dead tuples. They advance only as a signal: when a
-- message is placed below the clock (trigger message_placed_low), which consumers' session hints
-- (pgqueue._message_take) and the groups' wait floors (pgqueue._wait_floor_next) watch, and
-- when a queue's group_concurrency changes (queue_alter), which the wait floors watch. Each
-- starts at a random value: a wait floor records the value it saw, and a restored copy of the
-- floor (pg_dump keeps the messages, not these sequences, which CREATE EXTENSION makes anew)
-- must not meet the same value again after messages were placed below it before the dump.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_lock_%s', i);
        PERFORM pg_catalog.setval(pg_catalog.format('pgqueue.queue_lock_%s', i)::regclass,
                                  (pg_catalog.random() * 4e18)::bigint);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_lock_%s IS %L', i,
            'pgqueue internal: lock stripe of the queues whose id & 63 = ' || i || ' (advanced only as a signal: trigger message_placed_low, queue_alter)');
    END LOOP;
END;
$$;
