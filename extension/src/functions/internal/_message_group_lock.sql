-- Serialise the decisions about one message group's turns (pgqueue._message_insert,
-- pgqueue._message_group_next) until the end of the transaction: lock the row of the group's
-- stripe (hashtext(group) & 255) in pgqueue.message_group_lock FOR UPDATE, making it on first use
-- (PQ001 if no queue with groups has that id: rows are made for such queues only; 22004 for a
-- NULL queue id or group, which has no stripe).
-- Under REPEATABLE READ a row made after the snapshot cannot be locked: 40001 (retry).
--
-- Returns whether the caller's snapshot sees every earlier decision on the stripe: always true
-- under READ COMMITTED, where the caller's next statement takes a snapshot after the lock. Under
-- REPEATABLE READ or SERIALIZABLE the snapshot is the transaction's: false when the stripe's
-- previous locker (its xmax, read as the lock is taken; locks serialise, so the last locker
-- ended after every earlier one) is not visible to it, i.e. a producer may have added a message
-- that this transaction cannot see, or a consumer may have removed one it still sees. A caller
-- then raises 40001 before it decides anything: a producer would give a turn the room for which
-- is taken already, or leave its message waiting with no turn; a hand-off would pass a message
-- it cannot see (specs/rr_group_producer.spec, specs/rr_group_order.spec). (A previous locker
-- that is one of this transaction's own subtransactions, a savepoint released or still open,
-- counts as visible: its decisions are the transaction's own. One rolled back counts as not
-- visible, since its lock hides the locker before it: a 40001 more, for a transaction that
-- rolled back to a savepoint after a grouped call and makes another on the same stripe.)
--
-- SECURITY DEFINER because locking the row needs UPDATE on the table, which no other role has:
-- nobody can hold a group's lock outside pgqueue's functions. EXECUTE is revoked from PUBLIC and
-- granted to producers, consumers and Spark by docs/grants.sql.
CREATE FUNCTION pgqueue._message_group_lock(p_queue_id integer, p_group text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_stripe integer := hashtext(p_group) & 255;
    v_prev   xid;
    v_cur    bigint;
BEGIN
    SELECT l.xmax INTO v_prev FROM pgqueue.message_group_lock l
     WHERE l.queue_id = p_queue_id AND l.stripe = v_stripe FOR UPDATE;
    IF NOT FOUND THEN
        -- (a NULL has no stripe: checked here, off the path of a row that exists)
        PERFORM pgqueue._not_null(p_queue_id IS NULL, 'p_queue_id'::text);
        PERFORM pgqueue._not_null(p_group IS NULL, 'p_group'::text);
        -- made only for a queue with message groups: a role granted EXECUTE cannot fill the
        -- table with rows of queues that do not exist (PQ001, nothing written)
        IF NOT EXISTS (SELECT 1 FROM pgqueue.queue q
                        WHERE q.id = p_queue_id AND q.group_concurrency IS NOT NULL) THEN
            RAISE EXCEPTION 'queue % does not exist or has no message groups', p_queue_id
                USING ERRCODE = 'PQ001',
                      HINT = 'Only the queues created with p_group_concurrency have message groups.';
        END IF;
        INSERT INTO pgqueue.message_group_lock (queue_id, stripe) VALUES (p_queue_id, v_stripe)
            ON CONFLICT DO NOTHING;
        SELECT l.xmax INTO v_prev FROM pgqueue.message_group_lock l
         WHERE l.queue_id = p_queue_id AND l.stripe = v_stripe FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'could not lock message group stripe % of queue %', v_stripe, p_queue_id
                USING ERRCODE = '40001',
                      HINT = 'Another transaction made it after this one''s snapshot: retry the transaction.';
        END IF;
    END IF;
    -- READ UNCOMMITTED runs as READ COMMITTED
    IF v_prev::text = '0' OR current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        RETURN true;
    END IF;
    -- the previous locker's full transaction id: recent, within 2^30 after this transaction's
    -- (a subtransaction of it, or a transaction that began after it) or 2^31 before it, so the one
    -- with its 32 bits in the 2^32 ids up to 2^30 after this transaction's
    v_cur := pg_current_xact_id()::text::bigint + 1073741824;
    v_cur := v_cur - ((v_cur - v_prev::text::bigint) % 4294967296 + 4294967296) % 4294967296;
    -- this transaction, one of its subtransactions (a savepoint released or still open: while
    -- this one holds the lock, no other transaction that locked the row can be in progress), or
    -- a transaction its snapshot sees
    RETURN v_cur::text::xid8 = pg_current_xact_id()
        OR pg_xact_status(v_cur::text::xid8) = 'in progress'
        OR pg_visible_in_snapshot(v_cur::text::xid8, pg_current_snapshot());
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._message_group_lock(integer, text) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._message_group_lock(integer, text) IS
    'pgqueue internal: lock a message group''s stripe of a queue until the end of the transaction (row lock, made on first use); false if this transaction''s snapshot may miss an earlier decision on it (REPEATABLE READ)';
