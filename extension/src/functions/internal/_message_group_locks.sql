-- Lock the stripes of a batch's message groups (pgqueue._message_group_lock), one a stripe, in
-- the stripes' order, before the batch inserts its messages (message_create_batch,
-- spark_publish). Taken message by message in the batch's order, two batches sharing two
-- stripes in opposite orders deadlocked (40P01). Under REPEATABLE READ each lock answers as
-- pgqueue._message_insert's would: 40001 if the snapshot may miss an earlier decision on the
-- stripe (pgqueue._message_insert then finds its stripe locked by this transaction already).
CREATE FUNCTION pgqueue._message_group_locks(p_queue_id integer, p_groups text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_group text;
BEGIN
    FOR v_group IN SELECT DISTINCT ON (hashtext(u.g) & 255) u.g FROM unnest(p_groups) AS u(g)
                    WHERE u.g IS NOT NULL ORDER BY hashtext(u.g) & 255 LOOP
        IF NOT pgqueue._message_group_lock(p_queue_id, v_group) THEN
            RAISE EXCEPTION 'message group "%" changed after this transaction''s snapshot', v_group
                USING ERRCODE = '40001',
                      HINT = 'Retry the transaction, or enqueue to grouped queues under READ COMMITTED.';
        END IF;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_locks(integer, text[]) IS
    'pgqueue internal: lock the stripes of a batch''s message groups in the stripes'' order (no deadlock between batches); 40001 under REPEATABLE READ as _message_group_lock says';
