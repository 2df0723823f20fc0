-- Lock the stripes of a batch's message groups (pgqueue._message_group_lock), one a stripe, in
-- the stripes' order, before the batch inserts its messages (message_create_batch,
-- spark_publish). Taken message by message in the batch's order, two batches sharing two
-- stripes in opposite orders deadlocked (40P01); so did a producer's batch and a consumer's
-- (message_complete_batch hands turns on in the stripes' order too). A message whose key is
-- live inserts nothing, but its group's stripe is locked all the same (the batch holds it until
-- it ends). READ COMMITTED only: under REPEATABLE READ each lock also answers whether the
-- snapshot may miss an earlier decision on the stripe, which only pgqueue._message_insert can
-- act on (it raises 40001 for a message it would insert, and returns a live key's id first),
-- so there the locks are taken message by message, as before.
CREATE FUNCTION pgqueue._message_group_locks(p_queue_id integer, p_groups text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_group text;
    v_held  boolean;
BEGIN
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RETURN;
    END IF;
    FOR v_group IN SELECT DISTINCT ON (hashtext(u.g) & 255) u.g FROM unnest(p_groups) AS u(g)
                    WHERE u.g IS NOT NULL ORDER BY hashtext(u.g) & 255 LOOP
        v_held := pgqueue._message_group_lock(p_queue_id, v_group);  -- (true under READ COMMITTED)
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_locks(integer, text[]) IS
    'pgqueue internal: lock the stripes of a batch''s message groups in the stripes'' order (no deadlock between batches); READ COMMITTED only';
