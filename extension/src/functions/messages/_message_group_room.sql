-- Whether a message group may get a new turn: it has no message waiting with its turn, and fewer
-- than p_concurrency in flight (0: no limit). Both bounded: message_group_turn_idx, at most
-- p_concurrency entries counted. Call under the group's lock (pgqueue._message_group_lock). The
-- probes start at the session's floor of the group's turn keys (pgqueue._group_floor_get, for the
-- queue's lock stripe read now, under the lock), and when they find no message of the group with
-- the turn at all, this call keeps a new one in the session, the clock it read before them (whole
-- ms) less 5 ms, with this transaction's xid (see there why it holds; a setting of a PL/pgSQL call's own: 1 us, where a call of an SQL
-- function that set it cost 37): under a held snapshot, a producer into a group its consumers keep
-- up with then walks the entries of the deliveries since its last enqueue into the group, not of
-- all since the hold began (docs/performance.md). With group concurrency 0 the look for a message
-- in flight is made for that only.
-- The lease is tested with pgqueue._leased, which the planner cannot match to the predicates of
-- message_leased_idx and message_ready_idx: statistics taken while nothing was leased make the
-- first look empty, and a generic plan then walked the whole queue's leases for the group.
-- enable_seqscan = off: planned while pgqueue.message is empty after a VACUUM or ANALYZE (0 rows
-- recorded, about a page now), both probes are a Seq Scan, which the session's generic plan
-- keeps: a grouped batch then scanned every message it had inserted before each one, O(n^2)
-- (10,000 messages 25-32 s against 1-2 s; tests/test_group_probes.py).
CREATE FUNCTION pgqueue._message_group_room(p_queue_id integer, p_group text, p_concurrency integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    v_seen  bigint := pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id));
    v_clock bigint := (pgqueue.now_ms() - 5) * 1000;  -- (whole ms: see pgqueue._group_floor_get)
    v_floor bigint := pgqueue._group_floor_get(p_queue_id, p_group, v_seen);
    v_busy  bigint;  -- NULL: a message waits with the turn; else how many in flight, counted up to the limit
BEGIN
    -- (Each probe in the order of the index: with the floor's range a generic plan chose a
    -- bitmap scan, which never marks an index entry dead, so that without a hold the entries of
    -- deleted messages piled up until a vacuum. The floor as an initplan, whose value no plan
    -- knows: as a variable, custom plans, which knew it, looked cheaper than the generic one,
    -- and the plan cache kept planning the statement at every call; both cost a producer
    -- into a group its consumers keep up with about half its rate.)
    SELECT CASE WHEN (SELECT m.turn_at FROM pgqueue.message m
                       WHERE m.queue_id = p_queue_id AND m.group_key = p_group
                         AND m.turn_at IS NOT NULL AND m.turn_at >= (SELECT v_floor)
                         AND NOT pgqueue._leased(m.locked_until)
                       ORDER BY m.turn_at LIMIT 1) IS NULL
                THEN (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message m
                                             WHERE m.queue_id = p_queue_id AND m.group_key = p_group
                                               AND m.turn_at IS NOT NULL AND m.turn_at >= (SELECT v_floor)
                                               AND pgqueue._leased(m.locked_until)
                                             ORDER BY m.turn_at
                                             LIMIT greatest(p_concurrency, 1)) f) END
      INTO v_busy;
    -- (not again within 10 ms of the last: a setting written at every enqueue into a group its
    -- consumers keep up with cost it a few us)
    IF v_busy = 0 AND v_floor < v_clock - 10000 AND v_seen IS NOT NULL AND octet_length(p_group) <= 200
       AND current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        PERFORM set_config('pgqueue.group_floor_' || p_queue_id || '_' || (hashtext(p_group) & 255),
                           v_seen || '/' || v_clock || '/' || pg_current_xact_id() || '/' || p_group, false);
    END IF;
    RETURN v_busy IS NOT NULL AND (p_concurrency = 0 OR v_busy < p_concurrency);
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_room(integer, text, integer) IS
    'pgqueue internal: true if a message group has no turn waiting and room in flight for one more';
