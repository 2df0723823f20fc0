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
    'the stripe''s enqueued counter when upper was counted (the bound is upper plus what was enqueued since); NULL: upper is the bound, kept by every admission';

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
