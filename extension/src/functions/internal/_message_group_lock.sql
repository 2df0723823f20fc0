-- Serialise the decisions about one message group's turns (pgqueue._message_insert,
-- pgqueue._message_group_next) until the end of the transaction: lock the row of the group's
-- stripe (hashtext(group) & 255) in pgqueue.message_group_lock FOR UPDATE, making it on first use.
-- Under REPEATABLE READ a row made after the snapshot cannot be locked: 40001 (retry). Returns
-- true: callers assign it (a PL/pgSQL simple expression) rather than run a PERFORM query.
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
BEGIN
    PERFORM FROM pgqueue.message_group_lock l
     WHERE l.queue_id = p_queue_id AND l.stripe = v_stripe FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO pgqueue.message_group_lock (queue_id, stripe) VALUES (p_queue_id, v_stripe)
            ON CONFLICT DO NOTHING;
        PERFORM FROM pgqueue.message_group_lock l
         WHERE l.queue_id = p_queue_id AND l.stripe = v_stripe FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'could not lock message group stripe % of queue %', v_stripe, p_queue_id
                USING ERRCODE = '40001',
                      HINT = 'Another transaction made it after this one''s snapshot: retry the transaction.';
        END IF;
    END IF;
    RETURN true;
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._message_group_lock(integer, text) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._message_group_lock(integer, text) IS
    'pgqueue internal: lock a message group''s stripe of a queue until the end of the transaction (row lock, made on first use)';
