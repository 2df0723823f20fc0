-- The first lease of a queue at or after (p_at, p_id) by (locked_until, id) that has run out by
-- p_now, locked or not: the lease candidate of the session hints (pgqueue._message_take). An SQL
-- function that the planner inlines into the caller's statement (STABLE, not STRICT, no SET
-- clause), so it is the same index probe of message_leased_idx as if written there.
CREATE FUNCTION pgqueue._message_first_lease(p_queue_id integer, p_at bigint, p_id bigint, p_now bigint)
RETURNS TABLE (locked_until bigint, id bigint)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT m.locked_until, m.id FROM pgqueue.message m
     WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
       AND (m.locked_until, m.id) >= (p_at, p_id) AND m.locked_until <= p_now
     ORDER BY m.locked_until, m.id
     LIMIT 1;
END;

COMMENT ON FUNCTION pgqueue._message_first_lease(integer, bigint, bigint, bigint) IS
    'pgqueue internal: the first lease at or after (p_at, p_id) that has run out by p_now (inlined into pgqueue._message_take)';
