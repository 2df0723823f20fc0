-- pgqueue._message_group_next for a producer's enqueue (pgqueue._message_insert): a message
-- enqueued into a group with room behind a message of the group waiting without a turn (a group
-- left below its limit, docs/guarantees.md) hands the turn to that one. Producers may not UPDATE
-- pgqueue.message (docs/grants.sql: with it, plain SQL could lock messages FOR UPDATE, which
-- every consumer then skips), so the hand-off runs as the owner; it gives a turn only by the
-- group's rules: under the group's lock, taken first, then the queue's limit read in a later
-- statement, so that a direct call (without the queue's lock stripe, which keeps queue_alter
-- out of an enqueue) sees a changed limit that committed while it waited for the lock (a
-- review: it read the old one first and handed a turn past a lowered limit). Not executable by
-- PUBLIC (the recipes grant it to producers, admins and the Spark role, whose enqueues call it
-- too).
CREATE FUNCTION pgqueue._message_group_hand(p_queue_id integer, p_group text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_concurrency integer;
BEGIN
    IF p_group IS NULL THEN
        RETURN false;  -- a message without a group is a group of its own: nothing to hand on
    END IF;
    -- (PQ001 for a queue without groups; false: a REPEATABLE READ snapshot may miss a decision)
    IF NOT pgqueue._message_group_lock(p_queue_id, p_group) THEN
        RAISE EXCEPTION 'message group "%" changed after this transaction''s snapshot', p_group
            USING ERRCODE = '40001',
                  HINT = 'Retry the transaction, or enqueue to grouped queues under READ COMMITTED.';
    END IF;
    SELECT q.group_concurrency INTO v_concurrency FROM pgqueue.queue q WHERE q.id = p_queue_id;
    IF v_concurrency IS NULL THEN
        RETURN false;  -- dropped meanwhile
    END IF;
    RETURN pgqueue._message_group_next(p_queue_id, p_group, v_concurrency);
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._message_group_hand(integer, text) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._message_group_hand(integer, text) IS
    'pgqueue internal: a producer''s hand-off of a message group''s turn to its first waiting message (as the owner, by the group''s rules)';
