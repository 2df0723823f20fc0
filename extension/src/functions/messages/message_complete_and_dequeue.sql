-- Acknowledge and fetch in one call and one transaction: hand out up to p_limit messages of
-- p_queue exactly as message_dequeue(p_queue, p_limit, p_lock_ms) does, and complete the caller's
-- finished messages p_ids, each with its attempts token p_attempts, exactly as
-- message_complete_batch(p_ids, p_attempts) does. A worker in lease mode so pays one
-- transaction per message instead of two. (On a queue whose group_concurrency is not 1 the
-- turns its leases hand on are handed on with the acknowledgements', after them: this call
-- does not take the messages those turns go to, where message_dequeue may in a further round.)
--
-- Rows: the messages handed out (stale = false), then one row per acknowledgement whose token
-- was stale (stale = true: only id and attempts, the token given, are set), in input order. A
-- stale acknowledgement changes nothing for its message. The take runs first, so that the
-- session hints of pgqueue._message_take advance (they need the take to assign this
-- transaction's xid); a lease that ran out before its acknowledgement may so be handed out again
-- by this very call, as by any other call, and its acknowledgement comes back stale. Errors are
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
AS $$
#variable_conflict use_column
DECLARE
    v_stale bigint[];
    v_set   text;
BEGIN
    PERFORM pgqueue._ack_arrays_check(p_ids, p_attempts);
    -- On a queue whose group_concurrency is not 1 a lease hands its group's next message a
    -- turn, which takes the group's lock; the acknowledgements hand turns on too. Taken in two
    -- runs (the dequeue's, then the acknowledgements'), each in stripe order, two such calls
    -- deadlocked (40P01). So the dequeue leaves its leases' turns (pgqueue.defer_turns, a
    -- transaction-local setting) to message_complete_batch, which hands them on with the
    -- acknowledgements', in one run in stripe order, after its DELETE. The take still runs
    -- first (its session hints need the take to assign this transaction's xid).
    v_set := set_config('pgqueue.defer_turns', 'on', true);
    RETURN QUERY
    SELECT d.id, d.content, d.attempts, d.dequeue_at, d.state, d.content_type, d.created_at,
           d.locked_until, false
      FROM pgqueue.message_dequeue(p_queue, p_limit, p_lock_ms) AS d;
    v_set := set_config('pgqueue.defer_turns', '', true);
    -- message_complete_batch returns the stale ids in input order, an id listed twice at each
    -- of its places or at none (it is completed at most once): the places of those ids are the
    -- stale acknowledgements, each with the token given at its place (whatever the arrays'
    -- lower bounds)
    v_stale := pgqueue.message_complete_batch(p_ids, p_attempts);
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
