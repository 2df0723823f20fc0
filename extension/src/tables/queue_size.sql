-- Upper bound on the number of live messages of a queue that has max_size: upper + (the stripe's
-- enqueued counter - mark), or upper alone when mark is NULL (pgqueue._queue_reserve).
-- Derived data (recounted when missing or when it says "full"), so not dumped. Only the
-- extension's owner writes it, through pgqueue._queue_reserve (docs/locking.md): back-pressure
-- must not depend on rows that the producers it limits could write.
CREATE TABLE pgqueue.queue_size (
    queue_id integer NOT NULL,
    upper    bigint  NOT NULL,
    mark     bigint,
    CONSTRAINT queue_size_pkey PRIMARY KEY (queue_id)
);

COMMENT ON TABLE pgqueue.queue_size IS 'pgqueue internal: cached upper bound of live messages per capped queue';
COMMENT ON COLUMN pgqueue.queue_size.mark IS
    'the stripe''s enqueued counter when upper was counted (the bound is upper plus what was enqueued since; above the counter: no bound, the next admission counts); NULL: upper is the bound, kept by every admission';

-- The stripes' exactness marks for max_size: 64 sequences, pgqueue.queue_size_exact_<id & 63>
-- (pgqueue._size_exact_seq). A sequence, because the mark must outlive the transaction that sets
-- it, which then raises 40001.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_size_exact_%s', i);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_size_exact_%s IS %L', i,
            'pgqueue internal: set once a REPEATABLE READ or SERIALIZABLE producer of a capped queue whose id & 63 = '
            || i || ' came: those queues count every admission in pgqueue.queue_size');
    END LOOP;
END;
$$;

-- The recount windows for max_size: 64 sequences, pgqueue.queue_size_recount_<id & 63>
-- (pgqueue._size_recount_seq). A count of a capped queue reads up to max_size + 1 index entries;
-- one that found 10,000 or more is not repeated for ten times as long as it took (at most 1 s),
-- and until then an admission that the bound cannot prove fits is refused without counting. A sequence, because
-- the window must outlive a refusal, which rolls back what its transaction wrote.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_size_recount_%s MINVALUE 0', i);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_size_recount_%s IS %L', i,
            'pgqueue internal: until when (epoch ms * 2^20, plus the queue id >> 6) a capped queue whose id & 63 = '
            || i || ' is not counted again (pgqueue._queue_reserve)');
    END LOOP;
END;
$$;
