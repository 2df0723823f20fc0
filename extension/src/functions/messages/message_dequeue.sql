-- Hand out up to p_limit deliverable messages, with a lease (p_lock_ms > 0) or deleting them (0).
CREATE FUNCTION pgqueue.message_dequeue(
    p_queue   text    DEFAULT 'default',
    p_limit   integer DEFAULT 1,
    p_lock_ms bigint  DEFAULT NULL)
RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,
               content_type text, created_at bigint, locked_until bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- Custom plans would be re-planned on every call (a LIMIT parameter makes the generic plan look
-- dear to the plan cache); the generic plans are the same index probes and save half the call.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id     integer;
    v_lock_ms      bigint;
    v_max_attempts integer;
    v_locked       boolean;
    v_now          bigint := pgqueue.now_ms();
    v_need         integer := p_limit;
    v_ids          bigint[] := '{}';
    v_found        bigint[];
    v_dead_ids     bigint[];
    v_dead         bigint;
BEGIN
    SELECT q.id, coalesce(p_lock_ms, q.lock_ms), q.max_attempts,
           pgqueue._queue_lock(q.id)
      INTO v_queue_id, v_lock_ms, v_max_attempts, v_locked
      FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF p_limit IS NULL THEN
        RAISE EXCEPTION 'p_limit must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    IF v_lock_ms < 0 OR v_lock_ms > 31536000000 THEN
        PERFORM pgqueue._check_lock_ms(v_lock_ms, true);  -- raises
    END IF;
    -- Expired leases first (overdue work), then ready messages by (dequeue_at, id): two bounded
    -- index probes (message_leased_idx, message_ready_idx) under one LIMIT, so the second runs
    -- only for the room the first leaves. A lease that ran out max_attempts times is locked too
    -- but goes to the dead letters (a poison message must not loop forever); the probe is then
    -- repeated for the room it leaves, leaving out the rows this call has locked already (SKIP
    -- LOCKED does not skip a transaction's own locks). Each round dead-letters at least one
    -- row, so it ends.
    LOOP
        SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
               array_agg(c.id) FILTER (WHERE c.dead)
          INTO v_found, v_dead_ids
          FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                      coalesce(m.attempts >= v_max_attempts, false) AS dead
                                 FROM pgqueue.message m
                                WHERE m.queue_id = v_queue_id AND m.locked_until IS NOT NULL
                                  AND m.locked_until <= v_now
                                  AND m.id <> ALL (v_ids)
                                ORDER BY m.locked_until, m.id
                                LIMIT v_need
                                  FOR UPDATE SKIP LOCKED) e
                UNION ALL
                SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false
                                 FROM pgqueue.message m
                                WHERE m.queue_id = v_queue_id AND m.locked_until IS NULL
                                  AND m.dequeue_at <= v_now
                                  AND m.id <> ALL (v_ids)
                                ORDER BY m.dequeue_at, m.id
                                LIMIT v_need
                                  FOR UPDATE SKIP LOCKED) r
                LIMIT v_need) c;
        v_ids := v_ids || v_found;
        EXIT WHEN v_dead_ids IS NULL;
        FOREACH v_dead IN ARRAY v_dead_ids LOOP
            PERFORM pgqueue._dead_letter(v_dead, 'lease expired', v_now);
        END LOOP;
        v_need := p_limit - cardinality(v_ids);
        EXIT WHEN v_need = 0;
    END LOOP;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    ELSIF v_lock_ms = 0 THEN
        IF cardinality(v_ids) = 1 THEN
            RETURN QUERY
            DELETE FROM pgqueue.message m WHERE m.id = v_ids[1]
            RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at, m.state,
                      m.content_type, m.created_at, NULL::bigint;
        ELSE
            RETURN QUERY
            WITH d AS (
                DELETE FROM pgqueue.message m WHERE m.id = ANY (v_ids)
                RETURNING m.id, m.content, m.attempts + 1 AS attempts, m.dequeue_at, m.state,
                          m.content_type, m.created_at, NULL::bigint AS locked_until)
            SELECT * FROM d ORDER BY array_position(v_ids, d.id);
        END IF;
    ELSIF cardinality(v_ids) = 1 THEN
        RETURN QUERY
        UPDATE pgqueue.message m
           SET locked_until = v_now + v_lock_ms, attempts = m.attempts + 1
         WHERE m.id = v_ids[1]
        RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                  m.content_type, m.created_at, m.locked_until;
    ELSE
        RETURN QUERY
        WITH u AS (
            UPDATE pgqueue.message m
               SET locked_until = v_now + v_lock_ms, attempts = m.attempts + 1
             WHERE m.id = ANY (v_ids)
            RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                      m.content_type, m.created_at, m.locked_until)
        SELECT * FROM u ORDER BY array_position(v_ids, u.id);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_dequeue(text, integer, bigint) IS
    'Hand out up to p_limit deliverable messages (expired leases first, then by dequeue_at, id) without waiting on other consumers; p_lock_ms NULL = queue lease, 0 = delete on dequeue';
