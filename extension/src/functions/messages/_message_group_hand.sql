-- pgqueue._message_group_next for a producer's enqueue (pgqueue._message_insert): a message
-- enqueued into a group with room behind a message of the group waiting without a turn (a group
-- left below its limit, docs/guarantees.md) hands the turn to that one. Producers and the Spark
-- role may not UPDATE pgqueue.message (docs/grants.sql: with it, plain SQL could lock messages
-- FOR UPDATE, which every consumer then skips), so the hand-off runs as the owner; it gives a
-- turn only by the group's rules, under the group's lock, and reads the queue's limit itself.
-- Not executable by PUBLIC (the recipes grant it to producers, the Spark role and admins).
CREATE FUNCTION pgqueue._message_group_hand(p_queue_id integer, p_group text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_concurrency integer;
BEGIN
    SELECT q.group_concurrency INTO v_concurrency FROM pgqueue.queue q WHERE q.id = p_queue_id;
    IF v_concurrency IS NULL OR p_group IS NULL THEN
        RETURN false;  -- no such queue, or no groups: nothing to hand on
    END IF;
    RETURN pgqueue._message_group_next(p_queue_id, p_group, v_concurrency);
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._message_group_hand(integer, text) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._message_group_hand(integer, text) IS
    'pgqueue internal: a producer''s hand-off of a message group''s turn to its first waiting message (as the owner, by the group''s rules)';
