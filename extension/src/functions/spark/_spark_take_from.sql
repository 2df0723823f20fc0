-- spark_claim's probe for a stream with a starting position: lock up to p_limit deliverable
-- messages of a queue created at or after p_from (epoch ms) and return their ids in delivery
-- order (expired leases first, then by (dequeue_at, id)).
--
-- created_at is the start of the enqueuing transaction and a message's default dequeue_at is the
-- clock at its insert, later still, so a message created at or after p_from and due at its
-- default time sorts at or above p_from in message_ready_idx: the probe starts there, past the
-- whole backlog enqueued before p_from, instead of walking it. Three bounded index probes under
-- one LIMIT, FOR UPDATE SKIP LOCKED: expired leases (message_leased_idx), ready priority
-- messages (message_ready_idx, dequeue_at < 0) and ready messages due in [p_from, now]
-- (message_ready_idx); each filters on created_at >= p_from. What they step over, at every
-- claim, until other consumers take it: the expired leases, priority messages and messages due
-- in [p_from, now] (scheduled earlier, due now) that were created before p_from. Not found: a
-- message created at or after p_from but placed below p_from and not as a priority (an
-- explicit past dequeue_at). A lease that ran out p_max_attempts times goes to the dead letters
-- as in pgqueue._message_take; p_max_id (if not NULL) leaves out larger ids. The caller holds
-- the queue's lock stripe.
CREATE FUNCTION pgqueue._spark_take_from(
    p_queue_id     integer,
    p_limit        integer,
    p_now          bigint,
    p_max_attempts integer,
    p_max_id       bigint,
    p_from         bigint)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
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
                                  AND m.created_at >= p_from
                                  AND m.id <> ALL (v_ids)
                                  AND (p_max_id IS NULL OR m.id <= p_max_id)
                                ORDER BY m.locked_until, m.id
                                LIMIT v_need
                                  FOR UPDATE SKIP LOCKED) e
                UNION ALL
                -- the ready ranges in turn: priority messages, then those due in [p_from, now]
                SELECT r.* FROM (VALUES ((-9223372036854775808)::bigint, (-1)::bigint), (greatest(p_from, 0), p_now)) AS b(lo, hi)
                 CROSS JOIN LATERAL (SELECT 1, m.dequeue_at, m.id, false
                                       FROM pgqueue.message m
                                      WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                        AND m.dequeue_at >= b.lo AND m.dequeue_at <= b.hi
                                        AND m.created_at >= p_from
                                        AND m.id <> ALL (v_ids)
                                        AND (p_max_id IS NULL OR m.id <= p_max_id)
                                      ORDER BY m.dequeue_at, m.id
                                      LIMIT v_need
                                        FOR UPDATE SKIP LOCKED) r
                LIMIT v_need) c;
        v_ids := v_ids || v_found;
        EXIT WHEN v_dead_ids IS NULL;
        FOREACH v_dead IN ARRAY v_dead_ids LOOP
            -- the reason, and the error of the message's last failure after it (a handler
            -- that failed with an error, then hung or crashed: the error is what tells why)
            PERFORM pgqueue._dead_letter(v_dead, (SELECT 'lease expired' || coalesce('; last error: ' || m.last_error, '')
                                                    FROM pgqueue.message m WHERE m.id = v_dead), p_now);
        END LOOP;
        v_need := p_limit - cardinality(v_ids);
        EXIT WHEN v_need = 0;
    END LOOP;
    RETURN v_ids;
END;
$$;

COMMENT ON FUNCTION pgqueue._spark_take_from(integer, integer, bigint, integer, bigint, bigint) IS
    'pgqueue internal: lock up to p_limit deliverable messages created at or after p_from (a Spark stream''s starting position), expired leases first, then by (dequeue_at, id); ids in delivery order';
