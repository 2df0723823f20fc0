-- message_dequeue for a queue with message groups (group_concurrency not NULL): hand out up to
-- p_limit messages, expired leases first, then the messages that have their group's turn, by
-- (turn_at, id), leased for p_lock_ms (0: deleted). Each round is two bounded index probes under
-- one LIMIT, FOR UPDATE SKIP LOCKED, as in pgqueue._message_take: message_leased_idx, and
-- message_turn_idx, which holds only the messages whose group's turn it is, at most one waiting
-- per group, so a probe never walks a group's backlog, nor the groups whose turns are all in
-- flight or scheduled. A message handed out gives its group the next turn if the group has room
-- (pgqueue._message_group_next; in delete mode the trigger message_removed does), behind the
-- turns already waiting: groups are served in turn. While there is room under p_limit and the
-- round handed something out, another round takes the turns just handed on, so a call hands out
-- several messages of one group when the group's limit allows. A lease that ran out
-- p_max_attempts times goes to the dead letters (its group's next turn follows). The caller holds
-- the queue's lock stripe and has checked the arguments; message_dequeue counts the messages
-- handed out (queue_counters), this function the expired leases among them (in the WHERE of the
-- statement that hands them out: the rows are locked, so it is evaluated once per row; a
-- generic plan, so _count_seq is inlined once per session). No session hints here
-- (pgqueue._message_take has them): dead index entries are walked until vacuum removes them.
CREATE FUNCTION pgqueue._message_dequeue_grouped(
    p_queue_id     integer,
    p_limit        integer,
    p_lock_ms      bigint,
    p_max_attempts integer,
    p_concurrency  integer)
RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,
               content_type text, created_at bigint, locked_until bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_now      bigint;
    v_turn     bigint;
    v_need     integer;
    v_all      bigint[] := '{}';
    v_ids      bigint[];
    v_found    bigint[];
    v_dead_ids bigint[];
    v_dead     bigint;
    v_group    text;
    v_groups   text[];
    v_more     text[];
    v_until    bigint;
    v_turned   boolean;
BEGIN
    LOOP
        v_now := pgqueue.now_ms();
        v_turn := pgqueue._turn_key(v_now, true);
        v_need := p_limit - cardinality(v_all);
        v_ids := '{}';
        v_groups := '{}';
        LOOP
            SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
                   array_agg(c.id) FILTER (WHERE c.dead),
                   coalesce(array_agg(c.grp) FILTER (WHERE c.src = 1 AND c.grp IS NOT NULL), '{}')
              INTO v_found, v_dead_ids, v_more
              FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                          coalesce(m.attempts >= p_max_attempts, false) AS dead,
                                          m.group_key AS grp
                                     FROM pgqueue.message m
                                    WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                      AND m.locked_until <= v_now AND m.id <> ALL (v_all || v_ids)
                                    ORDER BY m.locked_until, m.id
                                    LIMIT v_need
                                      FOR UPDATE SKIP LOCKED) e
                    UNION ALL
                    SELECT * FROM (SELECT 1, m.turn_at, m.id, false, m.group_key
                                     FROM pgqueue.message m
                                    WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL
                                      AND m.locked_until IS NULL AND m.turn_at <= v_turn
                                      AND m.id <> ALL (v_all || v_ids)
                                    ORDER BY m.turn_at, m.id
                                    LIMIT v_need
                                      FOR UPDATE SKIP LOCKED) r
                    LIMIT v_need) c;
            v_ids := v_ids || v_found;
            v_groups := v_groups || v_more;
            EXIT WHEN v_dead_ids IS NULL;
            FOREACH v_dead IN ARRAY v_dead_ids LOOP
                PERFORM pgqueue._dead_letter(v_dead, 'lease expired', v_now);
            END LOOP;
            v_need := p_limit - cardinality(v_all) - cardinality(v_ids);
            EXIT WHEN v_need = 0;
        END LOOP;
        EXIT WHEN cardinality(v_ids) = 0;
        v_all := v_all || v_ids;
        IF p_lock_ms = 0 THEN
            -- the next turns follow from the trigger message_removed
            RETURN QUERY
            WITH d AS (
                DELETE FROM pgqueue.message m WHERE m.id = ANY (v_ids)
                   AND (m.locked_until IS NULL OR pgqueue._counted(p_queue_id, 5))  -- expired (queue_counters)
                RETURNING m.id, m.content, m.attempts + 1 AS attempts, m.dequeue_at, m.state,
                          m.content_type, m.created_at, NULL::bigint AS locked_until)
            SELECT * FROM d ORDER BY array_position(v_ids, d.id);
        ELSE
            v_until := pgqueue.now_ms() + p_lock_ms;
            RETURN QUERY
            WITH u AS (
                UPDATE pgqueue.message m
                   SET locked_until = v_until, attempts = m.attempts + 1
                 WHERE m.id = ANY (v_ids)
                   AND (m.locked_until IS NULL OR pgqueue._counted(p_queue_id, 5))  -- expired (queue_counters)
                RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                          m.content_type, m.created_at, m.locked_until)
            SELECT * FROM u ORDER BY array_position(v_ids, u.id);
            -- the groups whose waiting turn was handed out get their next one if they have room
            -- (with one in flight per group the turn passes on only when the message leaves), in
            -- the order of their keys, so that two consumers lock the groups in one order
            IF p_concurrency <> 1 THEN
                FOR v_group IN SELECT DISTINCT g.g FROM unnest(v_groups) AS g(g) ORDER BY 1 LOOP
                    v_turned := pgqueue._message_group_next(p_queue_id, v_group, p_concurrency);
                END LOOP;
            END IF;
        END IF;
        EXIT WHEN cardinality(v_all) >= p_limit;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_dequeue_grouped(integer, integer, bigint, integer, integer) IS
    'pgqueue internal: message_dequeue for a queue with message groups (turns served in order, at most group_concurrency in flight per group)';
