-- Cancel (delete) pending messages of a queue by id; returns the messages removed.
--
-- Pending: ready, scheduled or with an expired lease. A message under a live lease is being
-- handled and stays (its consumer settles it); so does one held by a Spark claim. Ids that are
-- not pending in the queue are skipped: compare what comes back with what was asked. Takes
-- the queue's lock before the rows, like every other writer (docs/locking.md); a row that a
-- concurrent dequeue is leasing is waited for, then left alone when the lease took it (on a
-- queue with message groups, by attempts a few milliseconds apart: below). Errors, before
-- anything is done: 22004 for a NULL p_ids or a NULL element in it, 22023 for p_ids of two
-- dimensions, 22004/42602/PQ001 for the queue.
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
    v_group text;
    v_held  boolean;
    v_rows_step boolean;   -- the attempt is past the groups' locks
    v_tries integer := 0;
    v_started timestamptz;
    v_wait  interval;
BEGIN
    IF p_ids IS NULL THEN
        PERFORM pgqueue._not_null(true, 'p_ids'::text);
    END IF;
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'p_ids must be a one-dimensional array' USING ERRCODE = '22023';
    END IF;
    IF array_position(p_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_ids must not contain NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    -- the rows locked in id order, as the batches of leases lock theirs (docs/locking.md,
    -- rule 8: an expired lease is both a batch heartbeat's and a cancel's): a DELETE by
    -- id = ANY planned as a Bitmap Heap Scan locked them in their order in the table, and a
    -- review made it deadlock with message_heartbeat_batch.
    --
    -- On a queue with groups (READ COMMITTED) the listed groups' locks first, in the stripes'
    -- order, then the rows without waiting for any (NOWAIT); a row locked by another
    -- transaction gives the locks of the attempt back (a subtransaction) and the attempt is made
    -- again a little later. A cancel thus never waits for a row while it holds a group's lock,
    -- nor for a group's lock while it holds a row: a hand-off takes its group's lock and then
    -- the waiting message it gives the turn to, a consumer the row it takes and then the
    -- group's lock. Locked with the rest first, a waiting message deadlocked with a batch that
    -- held another listed group's lock and handed the message's group its turn (a review: 151
    -- in 2,000 races with message_complete_batch, specs/cancel_group_lock_order.spec); locked
    -- under its group's lock with a wait, with a take of it once it had its turn, and with a
    -- second cancel (a review of that fix). The hand-offs below take no lock out of the
    -- stripes' order: every listed group's is held.
    IF v_queue.group_concurrency IS NOT NULL
       AND current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        v_started := clock_timestamp();
        v_wait := current_setting('lock_timeout')::interval;
        LOOP
            v_rows_step := false;
            BEGIN
                FOR v_group IN
                    SELECT DISTINCT ON (hashtext(l.group_key) & 255) l.group_key
                      FROM pgqueue.message l
                     WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.group_key IS NOT NULL
                     ORDER BY hashtext(l.group_key) & 255 LOOP
                    v_held := pgqueue._message_group_lock(v_queue.id, v_group);  -- (true under READ COMMITTED)
                END LOOP;
                v_rows_step := true;
                v_now := pgqueue.now_ms();
                v_ids := ARRAY(SELECT l.id FROM pgqueue.message l
                                WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.claim_id IS NULL
                                  AND (l.locked_until IS NULL OR l.locked_until <= v_now)
                                ORDER BY l.id
                                  FOR UPDATE NOWAIT);
                EXIT;
            EXCEPTION WHEN lock_not_available THEN
                -- a group's lock that lock_timeout gave up on is the caller's error; a row
                -- another transaction holds is tried again, within lock_timeout if set
                IF NOT v_rows_step OR (v_wait > interval '0' AND clock_timestamp() - v_started >= v_wait) THEN
                    RAISE;
                END IF;
            END;
            v_tries := v_tries + 1;
            -- at most about half a second of attempts (an xid each): a row held longer (a
            -- consumer's open transaction that took it, or a lock cycle through the caller's
            -- other locks, which sleeping hid from the deadlock detector: a review) is waited
            -- for as on a queue without groups, holding no group's lock, and the hand-offs below
            -- take theirs after the rows, as before session 54 (the detector sees that wait)
            EXIT WHEN v_tries >= 25;  -- (v_ids still NULL: below)
            PERFORM pg_sleep(least(0.05, 0.001 * v_tries));
        END LOOP;
    END IF;
    IF v_ids IS NULL THEN  -- no groups, REPEATABLE READ, or the attempts above gave up
        v_now := pgqueue.now_ms();
        v_ids := ARRAY(SELECT l.id FROM pgqueue.message l
                        WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.claim_id IS NULL
                          AND (l.locked_until IS NULL OR l.locked_until <= v_now)
                        ORDER BY l.id
                          FOR UPDATE);
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
