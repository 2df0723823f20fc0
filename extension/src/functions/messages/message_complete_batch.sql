-- Complete (delete) many leased messages in one call; returns the ids whose token was stale.
--
-- p_ids[i] is completed if p_attempts[i] is its current attempts token, exactly as
-- message_complete(p_ids[i], p_attempts[i]) would: a stale token (the lease ran out and the
-- message was handed out again, or it is gone) changes nothing for that message and its id comes
-- back in the result, in input order. An id listed twice is completed at most once, and comes
-- back (at each of its places) only if no place completed it: list each delivery once, or the
-- newest only (a message's token grows with each delivery). The queues'
-- lock stripes are taken first, in queue order, then the rows in id order (one id: its queue's
-- stripe, then its row, in message_complete's DELETE; docs/locking.md:
-- message_heartbeat_batch takes them so; in input order, a worker's acknowledgement of [b, a]
-- and its heartbeats' beat of [a, b] deadlocked). Errors: 22004
-- (NULL array or element), 22023 (arrays of different lengths or of two dimensions, more than
-- 10000 ids).
CREATE FUNCTION pgqueue.message_complete_batch(p_ids bigint[], p_attempts integer[])
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
-- Custom plans would be made again at every call (the plan cache keeps choosing them for a
-- join with unnest(p_ids, p_attempts): a custom plan knows the arrays' length): the generic
-- plans are the same primary-key probes. Measured: 260 -> 40 us a call of one id.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_done    bigint[];
    v_queues  integer[];
    v_queue   integer;
    v_counted boolean;
    v_left    bigint[];   -- the messages that left with a key or a turn, their queues, groups, ...
    v_lq      integer[];
    v_lg      text[];
    v_lt      bigint[];
    v_lk      text[];
    v_dq      integer;   -- the queue of the turns left by message_complete_and_dequeue's dequeue ...
    v_dg      text[];    -- ... their groups
    v_dc      integer;   -- ... and its group_concurrency
    v_id      bigint;    -- one message deleted (up to 8 ids): its id, queue, group, turn, key
    v_q       integer;
    v_g       text;
    v_t       bigint;
    v_k       text;
    v_ids     bigint[];  -- p_ids and p_attempts, or both sorted by id when p_ids is not (up to 8 ids)
    v_att     integer[];
    v_oi      integer;   -- their lower bounds less 1: the i-th id with the i-th token, whatever
    v_oa      integer;   -- the bounds (as unnest pairs them)
BEGIN
    PERFORM pgqueue._ack_arrays_check(p_ids, p_attempts);
    -- One id, and no turns left by message_complete_and_dequeue's dequeue (below): exactly
    -- message_complete, whose one DELETE takes the queue's stripe before the row, as the
    -- statements below do (a stale id takes no stripe), and hands a turn on or keeps a key as
    -- _message_left does: 36.8 -> 21.1 us of server time for the acknowledgement of
    -- message_complete_and_dequeue with one id (docs/performance.md, "Acknowledge-and-fetch of
    -- one message").
    IF cardinality(p_ids) = 1 AND nullif(current_setting('pgqueue.deferred_queue', true), '') IS NULL THEN
        IF pgqueue.message_complete(p_ids[array_lower(p_ids, 1)], p_attempts[array_lower(p_attempts, 1)]) THEN
            RETURN '{}';
        END IF;
        RETURN ARRAY[p_ids[array_lower(p_ids, 1)]];
    END IF;
    PERFORM pgqueue._queue_lock(q.queue_id)
       FROM (SELECT DISTINCT m.queue_id FROM pgqueue.message m WHERE m.id = ANY (p_ids)) q
      ORDER BY q.queue_id;
    -- Whatever the statistics, each message is found by a probe of message_pkey by its id. The
    -- join of one statement with unnest(p_ids, p_attempts), as this was until session 51, could
    -- be planned the other way round while pgqueue.message was recorded empty (a queue that
    -- drained, then a VACUUM): the table outside, the ids inside, a walk of the whole of
    -- message_pkey at every call from then on in the session (its generic plan): 8.7 ms a call
    -- of one id at 60,000 messages against 0.27 ms (docs/performance.md, "emptied table"). So:
    -- up to 8 ids (a worker's acknowledgements), one DELETE by id each, as message_complete
    -- does; more, the rows are locked through a probe by id each (FOR UPDATE in a LATERAL
    -- subquery, which the planner cannot turn round), then deleted by id (a lock record more in
    -- the WAL a message). Inside the server (bench/experiments/emptied_table/batch_paths.py),
    -- against the join: 1 and 4 ids within the machine's noise, 8 ids 14-19% above it (202-210
    -- against 177 us), 100 ids 0.77-1.06 ms against 0.75, where one DELETE an id took 1.61 ms.
    -- Both keep message_complete's answer for a message
    -- changed meanwhile: a DELETE or a lock that waits reads the row again, so a heartbeat of
    -- the holder (same token) leaves the token good and a new lease (a new token) makes it
    -- stale (specs/complete_batch_expiry.spec).
    IF cardinality(p_ids) <= 8 THEN
        v_done := '{}';
        v_queues := '{}';
        v_ids := p_ids;
        v_att := p_attempts;
        v_oi := array_lower(p_ids, 1) - 1;
        v_oa := array_lower(p_attempts, 1) - 1;
        -- the rows in id order: sorted here only if they are not (the Python client sends them so)
        FOR i IN 2 .. cardinality(p_ids) LOOP
            CONTINUE WHEN p_ids[v_oi + i] >= p_ids[v_oi + i - 1];
            SELECT array_agg(u.id ORDER BY u.id, u.n), array_agg(u.a ORDER BY u.id, u.n) INTO v_ids, v_att
              FROM unnest(p_ids, p_attempts) WITH ORDINALITY AS u(id, a, n);
            v_oi := 0;
            v_oa := 0;
            EXIT;
        END LOOP;
        FOR i IN 1 .. cardinality(p_ids) LOOP
            DELETE FROM pgqueue.message m
             WHERE m.id = v_ids[v_oi + i] AND m.attempts = v_att[v_oa + i]
               AND pgqueue._leased(m.locked_until) AND m.claim_id IS NULL
            RETURNING m.id, m.queue_id, m.group_key, m.turn_at, m.idem_key INTO v_id, v_q, v_g, v_t, v_k;
            CONTINUE WHEN NOT FOUND;
            v_done := v_done || v_id;
            v_queues := v_queues || v_q;
            IF v_k IS NOT NULL OR (v_g IS NOT NULL AND v_t IS NOT NULL) THEN
                v_left := coalesce(v_left, '{}') || v_id;
                v_lq := coalesce(v_lq, '{}') || v_q;
                v_lg := coalesce(v_lg, '{}') || v_g;
                v_lt := coalesce(v_lt, '{}') || v_t;
                v_lk := coalesce(v_lk, '{}') || v_k;
            END IF;
        END LOOP;
    ELSE
        WITH d AS (
            DELETE FROM pgqueue.message m
             WHERE m.id = ANY (ARRAY(SELECT x.id FROM (SELECT v.id, v.attempts FROM unnest(p_ids, p_attempts) AS v(id, attempts)
                                                        ORDER BY v.id) u,  -- the rows in id order (above)
                                     LATERAL (SELECT l.id FROM pgqueue.message l
                                               WHERE l.id = u.id AND l.attempts = u.attempts
                                                 AND pgqueue._leased(l.locked_until) AND l.claim_id IS NULL
                                                 FOR UPDATE) x))
            RETURNING m.id, m.queue_id, m.group_key, m.turn_at, m.idem_key,
                      m.idem_key IS NOT NULL OR (m.group_key IS NOT NULL AND m.turn_at IS NOT NULL) AS left_)
        SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.queue_id), '{}'),
               array_agg(d.id) FILTER (WHERE d.left_),
               array_agg(d.queue_id) FILTER (WHERE d.left_),
               array_agg(d.group_key) FILTER (WHERE d.left_),
               array_agg(d.turn_at) FILTER (WHERE d.left_),
               array_agg(d.idem_key) FILTER (WHERE d.left_)
          INTO v_done, v_queues, v_left, v_lq, v_lg, v_lt, v_lk
          FROM d;
    END IF;
    -- the turns of the leases message_complete_and_dequeue's dequeue handed out, which it left
    -- to be handed on here with the acknowledgements' (pgqueue.ack_call; see there): in the
    -- same run, in stripe order (an id of NULL marks them)
    v_dq := nullif(current_setting('pgqueue.deferred_queue', true), '')::integer;
    IF v_dq IS NOT NULL THEN
        v_dg := ARRAY(SELECT DISTINCT g.g FROM unnest(current_setting('pgqueue.deferred_turns')::text[]) AS g(g));
        PERFORM set_config('pgqueue.deferred_queue', '', true), set_config('pgqueue.deferred_turns', '', true);
        SELECT q.group_concurrency INTO v_dc FROM pgqueue.queue q WHERE q.id = v_dq;
        v_left := coalesce(v_left, '{}') || array_fill(NULL::bigint, ARRAY[cardinality(v_dg)]);
        v_lq := coalesce(v_lq, '{}') || array_fill(v_dq, ARRAY[cardinality(v_dg)]);
        v_lg := coalesce(v_lg, '{}') || v_dg;
        v_lt := coalesce(v_lt, '{}') || array_fill(NULL::bigint, ARRAY[cardinality(v_dg)]);
        v_lk := coalesce(v_lk, '{}') || array_fill(NULL::text, ARRAY[cardinality(v_dg)]);
    END IF;
    IF cardinality(v_left) > 1 THEN
        -- the hand-offs in the order of their groups' stripes, as a batch of producers takes
        -- them (pgqueue._message_group_locks): in opposite orders the two deadlocked; then by
        -- queue, for acknowledgements of several queues whose groups share a stripe number
        SELECT array_agg(u.i ORDER BY hashtext(u.g) & 255, u.q, u.i), array_agg(u.q ORDER BY hashtext(u.g) & 255, u.q, u.i),
               array_agg(u.g ORDER BY hashtext(u.g) & 255, u.q, u.i), array_agg(u.t ORDER BY hashtext(u.g) & 255, u.q, u.i),
               array_agg(u.k ORDER BY hashtext(u.g) & 255, u.q, u.i)
          INTO v_left, v_lq, v_lg, v_lt, v_lk
          FROM unnest(v_left, v_lq, v_lg, v_lt, v_lk) AS u(i, q, g, t, k);
    END IF;
    -- keys to keep for their queue's window, turns to pass on (pgqueue._message_left)
    FOR i IN 1 .. coalesce(cardinality(v_left), 0) LOOP
        IF v_left[i] IS NULL THEN
            v_counted := pgqueue._message_group_next(v_dq, v_lg[i], v_dc);
        ELSE
            v_counted := pgqueue._message_left(v_lq[i], v_left[i], v_lg[i], v_lt[i], v_lk[i]);
        END IF;
    END LOOP;
    -- completed (queue_counters): one nextval a message, or by queue for more than 32
    IF cardinality(v_done) > 32 THEN
        PERFORM pgqueue._counted_n(u.q, 2, count(*)) FROM unnest(v_queues) AS u(q) GROUP BY u.q;
    ELSE
        FOREACH v_queue IN ARRAY v_queues LOOP
            v_counted := pgqueue._counted(v_queue, 2);
        END LOOP;
    END IF;
    RETURN ARRAY(SELECT u.id FROM unnest(p_ids) WITH ORDINALITY AS u(id, n)
                  WHERE u.id <> ALL (v_done) ORDER BY u.n);
END;
$$;

COMMENT ON FUNCTION pgqueue.message_complete_batch(bigint[], integer[]) IS
    'Complete (delete) many leased messages, each with its attempts token; returns the ids whose token was stale (those changed nothing)';
