-- Serialise the decisions about one message group's turns (pgqueue._message_insert,
-- pgqueue._message_group_next) until the end of the transaction: lock the row of the group's
-- stripe (hashtext(group) & 255) in pgqueue.message_group_lock FOR UPDATE, making it on first use
-- (PQ001 if no queue with groups has that id: rows are made for such queues only).
-- Under REPEATABLE READ a row made after the snapshot cannot be locked: 40001 (retry).
--
-- Returns whether the caller's snapshot sees every earlier decision on the stripe: always true
-- under READ COMMITTED, where the caller's next statement takes a snapshot after the lock. Under
-- REPEATABLE READ or SERIALIZABLE the snapshot is the transaction's: false when the stripe's
-- previous locker (its xmax, read as the lock is taken; locks serialise, so the last locker
-- ended after every earlier one) is not visible to it, i.e. a producer may have added a message
-- that this transaction cannot see, or a consumer may have removed one it still sees. A caller
-- that then finds nothing to give the turn to raises 40001 instead of leaving a message waiting
-- with no turn. (A previous locker that was one of this transaction's own subtransactions, or a
-- multixact, counts as not visible: at worst a 40001 more.)
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
    IF v_prev::text = '0' OR current_setting('transaction_isolation') = 'read committed' THEN
        RETURN true;
    END IF;
    -- the previous locker's full transaction id (it is recent: within 2^31 of this one's)
    v_cur := pg_current_xact_id()::text::bigint;
    v_cur := v_cur - ((v_cur - v_prev::text::bigint) % 4294967296 + 4294967296) % 4294967296;
    RETURN v_cur::text::xid8 = pg_current_xact_id()
        OR pg_visible_in_snapshot(v_cur::text::xid8, pg_current_snapshot());
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._message_group_lock(integer, text) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._message_group_lock(integer, text) IS
    'pgqueue internal: lock a message group''s stripe of a queue until the end of the transaction (row lock, made on first use); false if this transaction''s snapshot may miss an earlier decision on it (REPEATABLE READ)';
