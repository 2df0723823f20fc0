-- Of the transactions p_xids (xid8 as bigint), those that still run and hold no lock of any mode
-- on any relation of the schema pgqueue in this database: from pg_locks, the transaction's own
-- lock on its xid and every relation lock of the same virtual transaction. Such a transaction
-- has written no row of pgqueue.message (every write takes ROW EXCLUSIVE on it first and keeps
-- it to the end), and the keys pgqueue's functions write from the clock are read after a
-- statement on one of pgqueue's tables, so after this look. pgqueue._message_take raises the
-- restart point of such a set-aside transaction (docs/performance.md, "The look at pg_locks").
-- pg_lock_status() reads the backends' fast-path slots before the shared lock table, which holds
-- the xid's lock: a relation lock taken before its slot was read is still held when the xid's
-- lock is read (locks go at the transaction's end), so it is seen. A transaction that has ended
-- holds no xid lock and is not returned.
CREATE FUNCTION pgqueue._idle_xids(p_xids bigint[])
RETURNS bigint[]
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH l AS MATERIALIZED (
        SELECT k.locktype, k.database, k.relation, k.transactionid, k.virtualtransaction,
               k.mode, k.granted
          FROM pg_locks k)
    SELECT coalesce(array_agg(x.x), '{}')
      FROM unnest(p_xids) AS x(x)
      JOIN l t ON t.locktype = 'transactionid' AND t.granted AND t.mode = 'ExclusiveLock'
              AND t.transactionid = x.x::text::xid8::xid
     WHERE NOT EXISTS (
           SELECT FROM l r
            WHERE r.virtualtransaction = t.virtualtransaction AND r.locktype = 'relation'
              AND r.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
              AND r.relation IN (SELECT c.oid FROM pg_class c
                                  WHERE c.relnamespace = 'pgqueue'::regnamespace))
$$;

COMMENT ON FUNCTION pgqueue._idle_xids(bigint[]) IS
    'pgqueue internal: of these xids, those whose transaction runs and holds no lock on a relation of the schema pgqueue (pg_locks)';
