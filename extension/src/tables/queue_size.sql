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

-- No role but the extension's owner has a privilege on pgqueue.queue_size, its sequences
-- queue_size_exact_<n> and queue_size_recount_<n>, and pgqueue.message_group_lock: the producers
-- that back-pressure limits must not write its accounting, and no role may hold a group's lock on
-- its own (docs/security.md). The installing role's default privileges (ALTER DEFAULT PRIVILEGES
-- ... ON TABLES / SEQUENCES) would give them on creation: taken back here (the admin recipe,
-- docs/grants.sql, grants them again to administrators).
DO $$
DECLARE
    v_rel     pg_catalog.regclass;
    v_grantee text;
BEGIN
    FOR v_rel, v_grantee IN
        SELECT DISTINCT c.oid::pg_catalog.regclass,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.relnamespace = 'pgqueue'::pg_catalog.regnamespace AND a.grantee <> c.relowner
           AND (c.relname = 'message_group_lock' OR pg_catalog.left(c.relname::text, 10) = 'queue_size')
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', v_rel, v_grantee);
    END LOOP;
END;
$$;
