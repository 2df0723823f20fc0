-- Acknowledge and fetch in one call and one transaction: hand out up to p_limit messages of
-- p_queue exactly as message_dequeue(p_queue, p_limit, p_lock_ms) does, and complete the caller's
-- finished messages p_ids, each with its attempts token p_attempts, exactly as
-- message_complete_batch(p_ids, p_attempts) does. A worker in lease mode so pays one
-- transaction per message instead of two. (On a queue whose group_concurrency is not 1 the
-- turns its leases hand on are handed on with the acknowledgements', after them. On any queue
-- with groups, while it has handed out fewer than p_limit, further takes after the
-- acknowledgements take the messages those turns went to, as message_dequeue's own further
-- rounds would, and the messages the acknowledgements handed their groups' turns to: see
-- below; in lease mode only.)
--
-- Rows: the messages handed out (stale = false), then one row per acknowledgement whose token
-- was stale (stale = true: only id and attempts, the token given, are set), in input order. A
-- stale acknowledgement changes nothing for its message. The take runs first, so that the
-- session hints of pgqueue._message_take advance (they need the take to assign this
-- transaction's xid), and leaves out the caller's leases of p_ids that ran out (the
-- transaction-local setting pgqueue.ack_call: the text of p_ids, a space, the text of
-- p_attempts): such a lease that nobody took is still the caller's and is completed, as by
-- message_complete_batch, not handed out again or dead-lettered by the caller's own call (a
-- review: on its last attempt a finished message went to the dead letters, its acknowledgement
-- stale); a message that another consumer leased since is handed out as by any take. Errors are
-- those of the two functions; the arrays are checked before the take, so a refused call hands
-- nothing out and counts no delivery (sequences are not rolled back); an error leaves nothing
-- done (one statement).
CREATE FUNCTION pgqueue.message_complete_and_dequeue(
    p_ids      bigint[],
    p_attempts integer[],
    p_queue    text    DEFAULT 'default',
    p_limit    integer DEFAULT 1,
    p_lock_ms  bigint  DEFAULT NULL)
RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,
               content_type text, created_at bigint, locked_until bigint, stale boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
#variable_conflict use_column
DECLARE
    v_stale    bigint[];
    v_set      text;
    v_n        integer;
    v_more     integer;
    v_queue_id integer;
    v_groups   integer;
    v_held     text[];   -- the groups whose locks the acknowledgements' run takes
    v_acked    bigint[]; -- the acknowledgements of a grouped message of p_queue ...
    v_acked_g  text[];   -- ... and their groups
    v_start    bigint := pgqueue.now_ms();  -- before any lease this call hands out
    v_lock     bigint;
    v_turns    text[];
    v_group    text;
    v_turned   boolean;
BEGIN
    PERFORM pgqueue._ack_arrays_check(p_ids, p_attempts);
    -- On a queue whose group_concurrency is not 1 a lease hands its group's next message a
    -- turn, which takes the group's lock; the acknowledgements hand turns on too. Taken in two
    -- runs (the dequeue's, then the acknowledgements'), each in stripe order, two such calls
    -- deadlocked (40P01). So the dequeue leaves its leases' turns (while pgqueue.ack_call, a
    -- transaction-local setting, is set) to message_complete_batch, which hands them on with the
    -- acknowledgements', in one run in stripe order, after its DELETE. The take still runs
    -- first (its session hints need the take to assign this transaction's xid).
    -- One setting, pgqueue.ack_call, says both (not empty, it defers the turns; its text is
    -- what the take leaves out), written once and cleared at the end, where three settings were
    -- written six times (with the one-id path below, the call less its dequeue 48 -> 41 us,
    -- docs/performance.md). Before further takes
    -- (below) it becomes ' ': still deferring, and nothing to leave out, so that each further
    -- take does not read the acknowledgements again (a review: 1,200 further takes after 1,000
    -- acknowledgements ran 1.6 s instead of 0.5 s; what they would leave out is gone by then,
    -- deleted by this transaction, or is another delivery's, whose token differs).
    v_set := set_config('pgqueue.ack_call', p_ids::text || ' ' || p_attempts::text, true);
    RETURN QUERY
    SELECT d.id, d.content, d.attempts, d.dequeue_at, d.state, d.content_type, d.created_at,
           d.locked_until, false
      FROM pgqueue.message_dequeue(p_queue, p_limit, p_lock_ms) AS d;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n < p_limit THEN
        -- Room left: on a queue whose group_concurrency is not 1, the turns handed on below
        -- (the leases' and the acknowledgements') may go to messages a further take hands out.
        -- The groups whose locks that run takes are these (read before the DELETE).
        SELECT q.id, q.group_concurrency, coalesce(p_lock_ms, q.lock_ms) INTO v_queue_id, v_groups, v_lock
          FROM pgqueue.queue q WHERE q.name = p_queue;
        -- (not in delete mode: a further take would hand out again a message the first gave
        -- back, which this transaction holds, and lock its group out of stripe order. With a
        -- limit of 1 too: an acknowledgement hands its group's turn to the next message, which
        -- only a further take hands out in this call; without it a worker on a queue with fewer
        -- busy groups than its slots got nothing back, and polled: 18 messages a second on one
        -- group against 1,100 with no limit, a review. Such a take's lease hands no turn on.)
        IF v_groups IS NOT NULL AND v_lock <> 0 THEN
            v_held := coalesce(nullif(current_setting('pgqueue.deferred_turns', true), '')::text[], '{}');
            IF v_groups <> 1 THEN  -- (with a limit of 1 a lease hands no turn on: no group to match)
                SELECT array_agg(m.id), array_agg(m.group_key) INTO v_acked, v_acked_g FROM pgqueue.message m
                 WHERE m.id = ANY (p_ids) AND m.queue_id = v_queue_id AND m.group_key IS NOT NULL;
            END IF;
        END IF;
    END IF;
    -- message_complete_batch returns the stale ids in input order, an id listed twice at each
    -- of its places or at none (it is completed at most once): the places of those ids are the
    -- stale acknowledgements, each with the token given at its place (whatever the arrays'
    -- lower bounds)
    -- (One id, and no turns deferred by the dequeue: message_complete itself, as
    -- message_complete_batch would call it, without that call's entry and second check of the
    -- arrays: 11.7 us a call, docs/performance.md.)
    IF cardinality(p_ids) = 1 AND nullif(current_setting('pgqueue.deferred_queue', true), '') IS NULL THEN
        v_stale := CASE WHEN pgqueue.message_complete(p_ids[array_lower(p_ids, 1)], p_attempts[array_lower(p_attempts, 1)])
                        THEN '{}' ELSE ARRAY[p_ids[array_lower(p_ids, 1)]] END;
    ELSE
        v_stale := pgqueue.message_complete_batch(p_ids, p_attempts);
    END IF;
    -- the acknowledged messages' groups: only those of the ones completed (a stale one's group
    -- lock was not taken)
    IF v_held IS NOT NULL THEN
        v_held := v_held || ARRAY(SELECT a.g FROM unnest(v_acked, v_acked_g) AS a(i, g) WHERE a.i <> ALL (v_stale));
    END IF;
    IF v_held IS NOT NULL AND v_n < p_limit THEN
        v_set := set_config('pgqueue.ack_call', ' ', true);
    END IF;
    -- Further takes, one round each (pgqueue.ack_call is still set): their leases' turns are
    -- handed on here for the groups whose locks are held already, so that this call waits for
    -- no lock after that run (no second run to deadlock in); another group's lease hands its
    -- turn on when it leaves instead (it has one in flight: the group is not left without a turn).
    -- Only while no lease this call handed out can have run out by the time the take reads its
    -- clock (100 ms to spare): a further take, a call of its own, would hand it out again or
    -- dead-letter it (message_dequeue's own rounds skip their ids).
    WHILE v_held IS NOT NULL AND v_n < p_limit AND (v_lock = 0 OR pgqueue.now_ms() + 100 < v_start + v_lock) LOOP
        RETURN QUERY
        SELECT d.id, d.content, d.attempts, d.dequeue_at, d.state, d.content_type, d.created_at,
               d.locked_until, false
          FROM pgqueue.message_dequeue(p_queue, p_limit - v_n, p_lock_ms) AS d;
        GET DIAGNOSTICS v_more = ROW_COUNT;
        EXIT WHEN v_more = 0;
        v_n := v_n + v_more;
        v_turns := nullif(current_setting('pgqueue.deferred_turns', true), '')::text[];
        PERFORM set_config('pgqueue.deferred_queue', '', true), set_config('pgqueue.deferred_turns', '', true);
        FOR v_group IN SELECT g.g FROM unnest(v_turns) AS g(g) WHERE g.g = ANY (v_held) GROUP BY g.g
                        ORDER BY hashtext(g.g) & 255, g.g LOOP
            v_turned := pgqueue._message_group_next(v_queue_id, v_group, v_groups);
        END LOOP;
    END LOOP;
    v_set := set_config('pgqueue.ack_call', '', true);
    IF cardinality(v_stale) > 0 THEN
        RETURN QUERY
        SELECT s.id, NULL::bytea, s.attempts, NULL::bigint, NULL::bytea,
               NULL::text, NULL::bigint, NULL::bigint, true
          FROM unnest(p_ids, p_attempts) WITH ORDINALITY AS s(id, attempts, n)
         WHERE s.id = ANY (v_stale)
         ORDER BY s.n;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_complete_and_dequeue(bigint[], integer[], text, integer, bigint) IS
    'Complete the finished messages p_ids (each with its attempts token) and hand out up to p_limit new ones in one call; rows with stale = true report acknowledgements whose token was stale';
