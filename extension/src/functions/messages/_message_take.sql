-- Lock up to p_limit deliverable messages of a queue and return their ids in delivery order: the
-- one dequeue probe, shared by message_dequeue and spark_claim.
--
-- Expired leases first (overdue work), then ready messages by (dequeue_at, id): two bounded
-- index probes (message_leased_idx, message_ready_idx) under one LIMIT, so the second runs only
-- for the room the first leaves, both FOR UPDATE SKIP LOCKED (never waiting on another
-- consumer). A lease that ran out p_max_attempts times is locked too but goes to the dead
-- letters (a poison message must not loop forever); the probe is then repeated for the room it
-- leaves, leaving out the rows this call has locked already (SKIP LOCKED does not skip a
-- transaction's own locks). Each round dead-letters at least one row, so it ends. p_max_id (if
-- not NULL) leaves out messages with a larger id. The caller holds the queue's lock stripe.
CREATE FUNCTION pgqueue._message_take(
    p_queue_id     integer,
    p_limit        integer,
    p_now          bigint,
    p_max_attempts integer,
    p_max_id       bigint)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- Custom plans would be re-planned on every call (a LIMIT parameter makes the generic plan look
-- dear to the plan cache); the generic plans are the same index probes and save half the call.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_need     integer := p_limit;
    v_ids      bigint[] := '{}';
    v_found    bigint[];
    v_dead_ids bigint[];
    v_dead     bigint;
BEGIN
    LOOP
        SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
               array_agg(c.id) FILTER (WHERE c.dead)
          INTO v_found, v_dead_ids
          FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                      coalesce(m.attempts >= p_max_attempts, false) AS dead
                                 FROM pgqueue.message m
                                WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                  AND m.locked_until <= p_now
                                  AND m.id <> ALL (v_ids)
                                  AND (p_max_id IS NULL OR m.id <= p_max_id)
                                ORDER BY m.locked_until, m.id
                                LIMIT v_need
                                  FOR UPDATE SKIP LOCKED) e
                UNION ALL
                SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false
                                 FROM pgqueue.message m
                                WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                  AND m.dequeue_at <= p_now
                                  AND m.id <> ALL (v_ids)
                                  AND (p_max_id IS NULL OR m.id <= p_max_id)
                                ORDER BY m.dequeue_at, m.id
                                LIMIT v_need
                                  FOR UPDATE SKIP LOCKED) r
                LIMIT v_need) c;
        v_ids := v_ids || v_found;
        EXIT WHEN v_dead_ids IS NULL;
        FOREACH v_dead IN ARRAY v_dead_ids LOOP
            PERFORM pgqueue._dead_letter(v_dead, 'lease expired', p_now);
        END LOOP;
        v_need := p_limit - cardinality(v_ids);
        EXIT WHEN v_need = 0;
    END LOOP;
    RETURN v_ids;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_take(integer, integer, bigint, integer, bigint) IS
    'pgqueue internal: lock up to p_limit deliverable messages (expired leases first, then by dequeue_at, id), dead-lettering poison leases; ids in delivery order';
