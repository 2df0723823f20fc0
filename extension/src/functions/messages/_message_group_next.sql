-- Give a message group its next turn if it is due one: when the group has no message waiting with
-- its turn and fewer than p_concurrency in flight (0: no limit), its first message waiting behind,
-- by (dequeue_at, id), gets the turn from now on (pgqueue._turn_key: not before the clock), so
-- behind the groups already waiting: the round-robin. Called after a message of the group was
-- handed out (message_dequeue, message_complete_and_dequeue, message_complete_batch), left the
-- queue (pgqueue._message_left), was enqueued behind a waiting one into a group with room
-- (pgqueue._message_insert), or its limit was raised (queue_alter), under the group's lock, so
-- that every such decision sees the ones committed before it. Returns whether a turn
-- was given. The turn's key is read after the caller's DELETE or UPDATE assigned its xid, as the
-- session hints of pgqueue._message_take need (that is why no trigger watches turn_at alone).
--
-- The common path is two statements: the lock, and one UPDATE whose WHERE holds the room (the
-- probes of pgqueue._message_group_room, as initplans: run once, under the lock's newer
-- snapshot, from the session's floor of the group's turn keys, pgqueue._group_floor_get).
-- With one in flight per group the hand-off of every delivery is done by trigger
-- pgqueue._message_left without this function, which it calls only when its own UPDATE found no
-- message waiting; the statement below covers that case too. When it changes nothing: nothing waits (one more probe), or no room, or the message it chose was
-- deleted meanwhile by message_cancel (READ COMMITTED reads the next one; REPEATABLE READ
-- raises 40001 instead).
-- p_concurrency is the queue's limit as the caller read it after it took the queue's lock stripe
-- (message_dequeue reads it again after the stripe; the others read it after their first
-- statement took it): a consumer that waited behind queue_alter's new limit uses that one
-- (specs/group_alter.spec). (A read of the limit inside this function, for every hand-off,
-- cost 10-20 us a call and did the callers' work again: taken out.)
CREATE FUNCTION pgqueue._message_group_next(p_queue_id integer, p_group text, p_concurrency integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_locked boolean;
    v_floor  bigint;
BEGIN
    v_locked := pgqueue._message_group_lock(p_queue_id, p_group);
    IF NOT v_locked THEN
        -- REPEATABLE READ: a message of the group added after this snapshot would be left waiting
        -- with no turn, or passed by a later one that this snapshot sees
        -- (pgqueue._message_group_lock; specs/rr_group_order.spec)
        RAISE EXCEPTION 'message group "%" changed after this transaction''s snapshot', p_group
            USING ERRCODE = '40001',
                  HINT = 'Retry the transaction, or hand messages of grouped queues out and complete them under READ COMMITTED.';
    END IF;
    -- the session's floor of the group's turn keys, for the stripe read now, under the lock
    -- (pgqueue._group_floor_get)
    v_floor := pgqueue._group_floor_get(p_queue_id, p_group, pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)));
    -- Nothing waiting (a group its consumers keep up with) and no floor, or one kept more than
    -- 20 ms ago: nothing to hand on, but the room's probes keep a new floor if the group has no
    -- message with the turn (this call's delivery was its last), so that the hand-offs of this
    -- session's next deliveries in the group walk at most the entries of 20 ms of the group's
    -- deliveries under a hold. (The room's call at every such hand-off cost a delivery 35 us
    -- more without a hold.)
    IF v_floor < (date_part('epoch', clock_timestamp()) * 1000000)::bigint - 25000
       AND NOT EXISTS (SELECT 1 FROM pgqueue.message w
                        WHERE w.queue_id = p_queue_id AND w.group_key = p_group AND w.turn_at IS NULL) THEN
        PERFORM pgqueue._message_group_room(p_queue_id, p_group, p_concurrency);
        RETURN false;
    END IF;
    UPDATE pgqueue.message m
       SET turn_at = pgqueue._turn_key(m.dequeue_at, true)
     WHERE m.id = (SELECT w.id FROM pgqueue.message w
                    WHERE w.queue_id = p_queue_id AND w.group_key = p_group AND w.turn_at IS NULL
                    ORDER BY w.dequeue_at, w.id
                    LIMIT 1)
       -- the room: no turn waiting ...
       AND (SELECT t.turn_at FROM pgqueue.message t
             WHERE t.queue_id = p_queue_id AND t.group_key = p_group AND t.turn_at IS NOT NULL
               AND t.turn_at >= (SELECT v_floor) AND NOT pgqueue._leased(t.locked_until)
             ORDER BY t.turn_at LIMIT 1) IS NULL
       -- ... and fewer than p_concurrency in flight (0: no limit)
       AND (p_concurrency = 0
            OR (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message t
                                       WHERE t.queue_id = p_queue_id AND t.group_key = p_group
                                         AND t.turn_at IS NOT NULL AND t.turn_at >= (SELECT v_floor)
                                         AND pgqueue._leased(t.locked_until)
                                       ORDER BY t.turn_at LIMIT p_concurrency) f) < p_concurrency);
    IF FOUND THEN
        RETURN true;
    END IF;
    LOOP
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pgqueue.message w
                               WHERE w.queue_id = p_queue_id AND w.group_key = p_group
                                 AND w.turn_at IS NULL)
               OR NOT pgqueue._message_group_room(p_queue_id, p_group, p_concurrency);
        UPDATE pgqueue.message m
           SET turn_at = pgqueue._turn_key(m.dequeue_at, true)
         WHERE m.id = (SELECT w.id FROM pgqueue.message w
                        WHERE w.queue_id = p_queue_id AND w.group_key = p_group AND w.turn_at IS NULL
                        ORDER BY w.dequeue_at, w.id
                        LIMIT 1);
        IF FOUND THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_next(integer, text, integer) IS
    'pgqueue internal: give a message group its next turn if it has none waiting and room in flight';
