-- Whether a message group may get a new turn: it has no message waiting with its turn, and fewer
-- than p_concurrency in flight (0: no limit). Both bounded: message_group_turn_idx, at most
-- p_concurrency entries counted. Call under the group's lock (pgqueue._message_group_lock).
-- The lease is tested with pgqueue._leased, which the planner cannot match to the predicates of
-- message_leased_idx and message_ready_idx: statistics taken while nothing was leased make the
-- first look empty, and a generic plan then walked the whole queue's leases for the group.
-- enable_seqscan = off: planned while pgqueue.message is empty after a VACUUM or ANALYZE (0 rows
-- recorded, about a page now), both probes are a Seq Scan, which the session's generic plan
-- keeps: a grouped batch then scanned every message it had inserted before each one, O(n^2)
-- (10,000 messages 25-32 s against 1-2 s; tests/test_group_probes.py).
CREATE FUNCTION pgqueue._message_group_room(p_queue_id integer, p_group text, p_concurrency integer)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
BEGIN
    RETURN NOT EXISTS (SELECT 1 FROM pgqueue.message m
                        WHERE m.queue_id = p_queue_id AND m.group_key = p_group
                          AND m.turn_at IS NOT NULL AND NOT pgqueue._leased(m.locked_until))
       AND (p_concurrency = 0
            OR (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message m
                                       WHERE m.queue_id = p_queue_id AND m.group_key = p_group
                                         AND m.turn_at IS NOT NULL AND pgqueue._leased(m.locked_until)
                                       LIMIT p_concurrency) f) < p_concurrency);
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_room(integer, text, integer) IS
    'pgqueue internal: true if a message group has no turn waiting and room in flight for one more';
