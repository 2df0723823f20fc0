-- Cancel (delete) pending messages of a queue by id; returns the messages removed.
--
-- Pending: ready, scheduled or with an expired lease. A message under a live lease is being
-- handled and stays (its consumer settles it); so does one held by a Spark claim. Ids that are
-- not pending in the queue are skipped: compare what comes back with what was asked. Takes
-- the queue's lock before the rows, like every other writer (docs/locking.md); a row that a
-- concurrent dequeue is leasing is waited for, then left alone when the lease took it.
CREATE FUNCTION pgqueue.message_cancel(p_queue text, p_ids bigint[])
RETURNS TABLE (id bigint, content bytea, content_type text, attempts integer, dequeue_at bigint,
               created_at bigint, locked_until bigint, state bytea, last_error text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint;
    v_rows  pgqueue.message[];
    v_row   pgqueue.message;
    v_left  boolean;
    v_ids   bigint[];
    v_stripe integer;
    v_group text;
    v_held  boolean;
BEGIN
    IF p_ids IS NULL THEN
        PERFORM pgqueue._not_null(true, 'p_ids'::text);
    END IF;
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'p_ids must be a one-dimensional array' USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    v_now := pgqueue.now_ms();
    -- the rows locked in id order first, as the batches of leases lock theirs (docs/locking.md,
    -- rule 8: an expired lease is both a batch heartbeat's and a cancel's): a DELETE by
    -- id = ANY planned as a Bitmap Heap Scan locked them in their order in the table, and a
    -- review made it deadlock with message_heartbeat_batch. On a queue with groups (READ
    -- COMMITTED), a message waiting for its group's turn only under its group's lock, as every
    -- hand-off locks the message it gives the turn to (rule 5): first the others (their turns
    -- held: ready, scheduled, expired leases), then stripe by stripe in the stripes' order the
    -- group's lock and the rows of its groups; locked with the rest first, a waiting message
    -- of one group deadlocked with a batch that held another group's lock and handed the first
    -- group's turn to it (a review: 151 in 2,000 races with message_complete_batch;
    -- specs/cancel_group_lock_order.spec). Every group listed has its lock taken here, so that
    -- the hand-offs below take none out of the stripes' order.
    IF v_queue.group_concurrency IS NULL
       OR current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        v_ids := ARRAY(SELECT l.id FROM pgqueue.message l
                        WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.claim_id IS NULL
                          AND (l.locked_until IS NULL OR l.locked_until <= v_now)
                        ORDER BY l.id
                          FOR UPDATE);
    ELSE
        v_ids := ARRAY(SELECT l.id FROM pgqueue.message l
                        WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.claim_id IS NULL
                          AND (l.locked_until IS NULL OR l.locked_until <= v_now)
                          AND (l.group_key IS NULL OR l.turn_at IS NOT NULL)
                        ORDER BY l.id
                          FOR UPDATE);
        FOR v_stripe, v_group IN
            SELECT DISTINCT ON (hashtext(l.group_key) & 255) hashtext(l.group_key) & 255, l.group_key
              FROM pgqueue.message l
             WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.group_key IS NOT NULL
             ORDER BY hashtext(l.group_key) & 255 LOOP
            v_held := pgqueue._message_group_lock(v_queue.id, v_group);  -- (true under READ COMMITTED)
            v_ids := v_ids || ARRAY(SELECT l.id FROM pgqueue.message l
                                     WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id
                                       AND l.group_key IS NOT NULL AND hashtext(l.group_key) & 255 = v_stripe
                                       AND l.id <> ALL (v_ids) AND l.claim_id IS NULL
                                       AND (l.locked_until IS NULL OR l.locked_until <= v_now)
                                     ORDER BY l.id
                                       FOR UPDATE);
        END LOOP;
    END IF;
    WITH d AS (
        DELETE FROM pgqueue.message m
         WHERE m.id = ANY (v_ids)
           AND m.queue_id = v_queue.id AND m.claim_id IS NULL
           AND (m.locked_until IS NULL OR m.locked_until <= v_now)
        RETURNING m AS r)
    SELECT coalesce(array_agg(d.r ORDER BY (d.r).id), '{}') INTO v_rows FROM d;
    -- keys to keep for the queue's window, turns to pass on (pgqueue._message_left), in the
    -- order of the groups' lock stripes, as every call that hands turns on takes the groups'
    -- locks (pgqueue._message_group_locks): in the order of the ids, a cancel deadlocked
    -- with a batch of producers
    FOR v_row IN SELECT * FROM unnest(v_rows) AS r ORDER BY hashtext(r.group_key) & 255, r.id LOOP
        IF v_row.idem_key IS NOT NULL OR (v_row.group_key IS NOT NULL AND v_row.turn_at IS NOT NULL) THEN
            v_left := pgqueue._message_left(v_queue.id, v_row.id, v_row.group_key, v_row.turn_at,
                                            v_row.idem_key);
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT r.id, r.content, r.content_type, r.attempts, r.dequeue_at, r.created_at,
           r.locked_until, r.state, r.last_error
      FROM unnest(v_rows) AS r ORDER BY r.id;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_cancel(text, bigint[]) IS
    'Cancel (delete) pending messages of a queue by id (ready, scheduled or with an expired lease; never one under a live lease or a Spark claim); returns the messages removed, by id';
