-- Extend many leases in one call; returns the ids whose token was stale.
--
-- p_ids[i] is extended to now + p_lock_ms (NULL: its queue's lock_ms) if p_attempts[i] is its
-- current attempts token, exactly as message_heartbeat(p_ids[i], p_attempts[i], p_lock_ms)
-- would: a stale token (the lease ran out and the message was handed out again, or it is gone,
-- or it was never leased) changes nothing for that message and its id comes back in the result,
-- in input order. An id listed twice with the same token is extended once and comes back at
-- neither place; with two tokens, the place with the old one comes back (list the newest
-- delivery only: a message's token grows with each delivery). A worker renews every message
-- it holds with one such call a round, where message_heartbeat is a statement a message. The
-- queues' lock stripes are taken first, in queue order, then the rows in id order (as
-- message_complete_batch takes them: in input order, a worker's beat of [a, b] and its
-- acknowledgement of [b, a] deadlocked), each by a probe of message_pkey by its id
-- (whatever the statistics: message_complete_batch). Errors: 22004
-- (NULL array or element), 22023 (arrays of different lengths or of two dimensions, more than
-- 10000 ids, p_lock_ms out of range).
CREATE FUNCTION pgqueue.message_heartbeat_batch(p_ids bigint[], p_attempts integer[], p_lock_ms bigint DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
SET plan_cache_mode = force_generic_plan  -- as message_complete_batch: the same probes by id
AS $$
DECLARE
    v_stale bigint[];
BEGIN
    PERFORM pgqueue._ack_arrays_check(p_ids, p_attempts);
    PERFORM pgqueue._check_lock_ms(p_lock_ms, false);
    PERFORM pgqueue._queue_lock(q.queue_id)
       FROM (SELECT DISTINCT m.queue_id FROM pgqueue.message m WHERE m.id = ANY (p_ids)) q
      ORDER BY q.queue_id;
    -- each place's row locked through a probe by id (FOR UPDATE in a LATERAL subquery, which
    -- the planner cannot turn round into a walk of the table), in id order (a subquery with
    -- ORDER BY is not pulled up: the nested loop runs in its order), then the rows updated by id. A lock that waits reads the row again: a lease that ran out and was handed
    -- out again meanwhile has a new token, and this one is stale (specs/heartbeat_expiry.spec).
    -- A place whose probe locked nothing is stale.
    WITH p AS MATERIALIZED (
        SELECT u.n, u.id, x.id AS held
          FROM (SELECT v.id, v.attempts, v.n FROM unnest(p_ids, p_attempts) WITH ORDINALITY AS v(id, attempts, n)
                 ORDER BY v.id, v.n) u
          LEFT JOIN LATERAL (SELECT l.id FROM pgqueue.message l
                              WHERE l.id = u.id AND l.attempts = u.attempts
                                AND pgqueue._leased(l.locked_until) AND l.claim_id IS NULL
                                FOR UPDATE) x ON true),
    e AS (
        UPDATE pgqueue.message m
           SET locked_until = pgqueue._write_clock() + coalesce(p_lock_ms, q.lock_ms),  -- after the xid
               write_mark   = NOT coalesce(m.write_mark, false)  -- keyed from the clock (message_placed_low)
          FROM pgqueue.queue q
         WHERE m.id = ANY (ARRAY(SELECT p.held FROM p WHERE p.held IS NOT NULL))
           AND q.id = m.queue_id)
    SELECT coalesce(array_agg(p.id ORDER BY p.n) FILTER (WHERE p.held IS NULL), '{}') INTO v_stale FROM p;
    RETURN v_stale;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_heartbeat_batch(bigint[], integer[], bigint) IS
    'Extend many leases to now + p_lock_ms (NULL = each queue''s lock_ms), each with its attempts token; returns the ids whose token was stale (those changed nothing)';
