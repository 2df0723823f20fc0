-- Hand out up to p_limit deliverable messages, with a lease (p_lock_ms > 0) or deleting them (0).
CREATE FUNCTION pgqueue.message_dequeue(
    p_queue   text    DEFAULT 'default',
    p_limit   integer DEFAULT 1,
    p_lock_ms bigint  DEFAULT NULL)
RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,
               content_type text, created_at bigint, locked_until bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- Custom plans would be made again at every call of several messages (the plan cache keeps
-- choosing them for "id = ANY (v_ids)": a custom plan knows the array's length): the generic
-- plans are the same primary-key probes. Measured: 234 -> 70 us a message for a dequeue of 4
-- and its message_complete_batch, a transaction each (docs/performance.md).
SET plan_cache_mode = force_generic_plan
-- for pgqueue._message_take, which has no SET clauses of its own (see there); this function's
-- own statements are index probes by name or id with or without them
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id     integer;
    v_lock_ms      bigint;
    v_max_attempts integer;
    v_locked       boolean;
    v_now          bigint := pgqueue.now_ms();
    v_ids          bigint[];
    v_until        bigint;
    v_groups       integer;
    v_rate         integer;
    v_limit        integer := p_limit;
    v_n            integer := 0;
    v_turns        text[];
    v_group        text;
    v_turned       boolean;
    v_all          bigint[];  -- the ids of the earlier rounds (NULL || an array is the array)
    v_window       bigint;
    v_left         bigint[];  -- delete mode: the messages that leave with a key or a turn ...
    v_left_groups  text[];    -- ... their groups, turn keys and idempotency keys
    v_left_turns   bigint[];
    v_left_keys    text[];
    v_group_key    text;      -- the message of a one-message delete: its group, turn, key
    v_turn_at      bigint;
    v_idem_key     text;
    v_floor        bigint[];  -- ... its group's wait floor, and the queue's lock stripe before the
    v_seen         bigint;    -- hand-off and (if the take assigned the xid) before the take
    v_pre          bigint;    -- (pgqueue._wait_floor_next)
    v_lease_check  text;
    v_stripe       integer;   -- a further round takes no group lock on a stripe below v_top, the
    v_top          integer;   -- highest this call may have locked, unless it holds that one
    v_stripes      integer[]; -- (v_stripes): such a lock taken out of order could deadlock
    v_back         bigint[];  -- delete mode: what a further round gives back for that
BEGIN
    SELECT q.id, coalesce(p_lock_ms, q.lock_ms), q.max_attempts,
           pgqueue._queue_lock(q.id), q.group_concurrency, q.rate_limit, q.key_window_ms
      INTO v_queue_id, v_lock_ms, v_max_attempts, v_locked, v_groups, v_rate, v_window
      FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF v_groups IS NOT NULL THEN
        -- A queue with groups: its limit as it is now that the stripe is held (under READ
        -- COMMITTED this statement's snapshot comes after the lock): a queue_alter of the limit
        -- that this call waited behind committed after the statement above took its snapshot,
        -- and the old limit decided the hand-offs (a raised one handed no turn on at a lease,
        -- and a message of the group enqueued later took the room ahead of older ones: a
        -- review). REPEATABLE READ sees its snapshot here; its leases pin the queue's row
        -- below (40001 after such a change).
        v_groups := coalesce((SELECT q.group_concurrency FROM pgqueue.queue q WHERE q.id = v_queue_id), v_groups);
        -- The queue's lock stripe before the take assigns this transaction's xid (its row locks),
        -- for the wait floor's new candidate (pgqueue._wait_floor_next): one in flight per
        -- group, a transaction without an xid yet. Delete mode uses it in its hand-off below; a
        -- lease records it, with the lease's xid, on the message (wait_floor[7:8]) for the
        -- hand-off of the message's completion, which reads the stripe only after its DELETE
        -- has assigned its own xid (pgqueue.message_complete)
        v_pre := CASE WHEN v_groups = 1 AND pg_current_xact_id_if_assigned() IS NULL
                      THEN pg_sequence_last_value(pgqueue._lock_stripe(v_queue_id)) END;
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        IF p_limit IS NULL THEN
            RAISE EXCEPTION 'p_limit must not be NULL' USING ERRCODE = '22004';
        END IF;
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    IF v_lock_ms < 0 OR v_lock_ms > 31536000000 THEN
        PERFORM pgqueue._check_lock_ms(v_lock_ms, true);  -- raises
    END IF;
    IF v_rate IS NOT NULL THEN  -- a rate limit: only the slots that are due (issue 14)
        v_limit := pgqueue._rate_room(v_queue_id, v_rate, p_limit);
        IF v_limit = 0 THEN
            RETURN;
        END IF;
    END IF;
    -- A queue with message groups takes by turn (p_turns): the messages whose group's turn it
    -- is, behind the groups already waiting (issue 14). Each message handed out gives its group
    -- the next turn if the group has room (pgqueue._message_group_next): in delete mode
    -- pgqueue._message_left does, as the message leaves the queue; in lease mode, with more
    -- than one in flight per group (or no limit), the loop below does, in the order of the
    -- groups' lock stripes, so that two calls lock the groups in one order (as batches of
    -- producers and acknowledgements do: pgqueue._message_group_locks); with one in flight per
    -- group the turn passes on when the message leaves (pgqueue._message_left). While there
    -- is room under p_limit and a round handed something out, another round takes the turns
    -- just handed on, so a call hands out several messages of one group when the group's limit
    -- allows. A further round takes the groups' locks in stripe order too, but only on stripes
    -- at or above the highest an earlier round locked (v_top) or that it holds (v_stripes): a
    -- lock on a lower stripe, taken after a higher one, could deadlock with a call that takes
    -- the two in order. In lease mode such a group's turn is handed on when its message leaves
    -- instead (it has one in flight); in delete mode the message leaves now, and its hand-off
    -- may need the lock, so it is given back (not deleted: row-locked by this transaction, due
    -- as before with its turn kept, to other sessions once the transaction ends; a later call of
    -- this transaction hands it out first) and the call ends there. (Each expression of this function is prepared anew in
    -- each transaction: the single-message path runs as few as it can.)
    LOOP
        v_ids := pgqueue._message_take(v_queue_id, v_limit - v_n, v_now, v_max_attempts, NULL,
                                       v_groups IS NOT NULL, v_all);
        EXIT WHEN cardinality(v_ids) = 0;
        IF v_all IS NOT NULL THEN  -- a further round (a queue with groups)
            IF v_lock_ms = 0 THEN
                v_back := ARRAY(SELECT m.id FROM pgqueue.message m
                                 WHERE m.id = ANY (v_ids) AND m.group_key IS NOT NULL
                                   AND m.turn_at IS NOT NULL
                                   AND hashtext(m.group_key) & 255 < v_top
                                   AND hashtext(m.group_key) & 255 <> ALL (coalesce(v_stripes, '{}')));
                IF cardinality(v_back) > 0 THEN
                    v_all := v_all || v_back;
                    v_ids := ARRAY(SELECT u.i FROM unnest(v_ids) WITH ORDINALITY AS u(i, n)
                                    WHERE u.i <> ALL (v_back) ORDER BY u.n);
                    EXIT WHEN cardinality(v_ids) = 0;
                END IF;
            END IF;
        END IF;
        v_n := v_n + cardinality(v_ids);
        -- The statements below count (pgqueue.queue_counters) each message handed out as
        -- delivered (more than 32 at once: _counted_n), and as expired if its lease had run out,
        -- in their WHERE clauses: evaluated once per row, on the row as it was, since the take
        -- has locked every row. (pgqueue._count_seq is inlined into each plan.)
        IF cardinality(v_ids) > 32 THEN
            PERFORM pgqueue._counted_n(v_queue_id, 1, cardinality(v_ids));
        END IF;
        IF v_lock_ms = 0 THEN
            -- A message that leaves with an idempotency key or its group's turn is handed to
            -- pgqueue._message_left after the DELETE (its key kept, its group's turn passed on):
            -- only on a queue with groups or a key window (groups are chosen at queue_create).
            IF cardinality(v_ids) = 1 AND v_groups IS NULL AND v_window = 0 THEN
                RETURN QUERY
                DELETE FROM pgqueue.message m WHERE m.id = v_ids[1]
                   AND nextval(pgqueue._count_seq(v_queue_id, 1)) > 0
                   AND (m.locked_until IS NULL OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at, m.state,
                          m.content_type, m.created_at, NULL::bigint;
            ELSIF cardinality(v_ids) = 1 THEN
                DELETE FROM pgqueue.message m WHERE m.id = v_ids[1]
                   AND nextval(pgqueue._count_seq(v_queue_id, 1)) > 0
                   AND (m.locked_until IS NULL OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at, m.state,
                          m.content_type, m.created_at, m.group_key, m.turn_at, m.idem_key, m.wait_floor,
                          CASE WHEN m.group_key IS NOT NULL THEN pg_sequence_last_value(pgqueue._lock_stripe(v_queue_id)) END
                     INTO id, content, attempts, dequeue_at, state,
                          content_type, created_at, v_group_key, v_turn_at, v_idem_key, v_floor, v_seen;
                IF FOUND THEN
                    locked_until := NULL;
                    RETURN NEXT;
                END IF;
                IF v_groups = 1 AND v_idem_key IS NULL AND v_group_key IS NOT NULL
                   AND v_turn_at IS NOT NULL THEN
                    -- the ordered hand-off of pgqueue._message_left (see there), here rather
                    -- than through it: a call of a PL/pgSQL function and its read of the queue's
                    -- row cost a grouped delete-mode dequeue 8% (docs/performance.md); when it
                    -- hands nothing on, _message_group_next looks again under the group's lock
                    -- (as _message_left would, without its read of the queue's row and a second
                    -- run of this UPDATE: this queue's concurrency is known to be 1)
                    UPDATE pgqueue.message m
                       SET turn_at = pgqueue._turn_key(m.dequeue_at, true),
                           wait_floor = pgqueue._wait_floor_next(v_floor, v_seen, v_pre,
                                                                 pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                                                                 m.dequeue_at, m.id)
                     WHERE m.id = (SELECT w.id FROM pgqueue.message w
                                    WHERE w.queue_id = v_queue_id AND w.group_key = v_group_key
                                      AND w.turn_at IS NULL
                                      AND (w.dequeue_at, w.id) >= (CASE WHEN v_floor[6] = v_seen THEN v_floor[1] ELSE -9223372036854775808 END,
                                                                   CASE WHEN v_floor[6] = v_seen THEN v_floor[2] ELSE -9223372036854775808 END)
                                    ORDER BY w.dequeue_at, w.id
                                    LIMIT 1)
                       -- the room: while the group's wait floor holds (read before this statement, and
                       -- again after its snapshot), no message of the group but the one leaving has
                       -- the turn (pgqueue._wait_floor_next)
                       AND CASE WHEN v_floor[6] = v_seen THEN (SELECT pgqueue._wait_floor_ok(v_floor, v_queue_id))
                                ELSE (SELECT t.turn_at FROM pgqueue.message t
                                       WHERE t.queue_id = v_queue_id AND t.group_key = v_group_key
                                         AND t.turn_at IS NOT NULL
                                         AND t.turn_at >= (SELECT pgqueue._group_floor_get(v_queue_id, v_group_key, v_seen))
                                       ORDER BY t.turn_at LIMIT 1) IS NULL END
                       -- without the lock under READ COMMITTED only (pgqueue._message_left)
                       AND current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable');
                    IF NOT FOUND THEN
                        v_turned := pgqueue._message_group_next(v_queue_id, v_group_key, v_groups);
                        v_stripe := hashtext(v_group_key) & 255;  -- (a lock held: see the loop)
                        v_top := greatest(v_top, v_stripe);
                        v_stripes := v_stripes || v_stripe;
                    END IF;
                ELSIF v_idem_key IS NOT NULL OR (v_group_key IS NOT NULL AND v_turn_at IS NOT NULL) THEN
                    IF pgqueue._message_left(v_queue_id, v_ids[1], v_group_key, v_turn_at, v_idem_key, v_floor, v_pre) THEN
                        v_stripe := hashtext(v_group_key) & 255;  -- (a lock held: see the loop)
                        v_top := greatest(v_top, v_stripe);
                        v_stripes := v_stripes || v_stripe;
                    END IF;
                END IF;
            ELSE
                -- the rows are locked by the take: what leaves is read before the DELETE
                IF v_groups IS NOT NULL OR v_window > 0 THEN
                    -- (in the order of their groups' stripes, as every call that hands turns
                    -- on takes the groups' locks: pgqueue._message_group_locks)
                    SELECT array_agg(m.id ORDER BY hashtext(m.group_key) & 255, m.group_key, m.id),
                           array_agg(m.group_key ORDER BY hashtext(m.group_key) & 255, m.group_key, m.id),
                           array_agg(m.turn_at ORDER BY hashtext(m.group_key) & 255, m.group_key, m.id),
                           array_agg(m.idem_key ORDER BY hashtext(m.group_key) & 255, m.group_key, m.id)
                      INTO v_left, v_left_groups, v_left_turns, v_left_keys
                      FROM pgqueue.message m
                     WHERE m.id = ANY (v_ids)
                       AND (m.idem_key IS NOT NULL OR (m.group_key IS NOT NULL AND m.turn_at IS NOT NULL));
                END IF;
                RETURN QUERY
                WITH d AS (
                    DELETE FROM pgqueue.message m WHERE m.id = ANY (v_ids)
                       AND (cardinality(v_ids) > 32
                            OR nextval(pgqueue._count_seq(v_queue_id, 1)) > 0)
                       AND (m.locked_until IS NULL
                            OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                    RETURNING m.id, m.content, m.attempts + 1 AS attempts, m.dequeue_at, m.state,
                              m.content_type, m.created_at, NULL::bigint AS locked_until)
                SELECT * FROM d ORDER BY array_position(v_ids, d.id);
                FOR i IN 1 .. coalesce(cardinality(v_left), 0) LOOP
                    -- (true when it took the group's lock: with one in flight per group the
                    -- hand-off takes none when the group has a message waiting)
                    IF pgqueue._message_left(v_queue_id, v_left[i], v_left_groups[i],
                                             v_left_turns[i], v_left_keys[i]) THEN
                        v_stripe := hashtext(v_left_groups[i]) & 255;
                        v_top := greatest(v_top, v_stripe);
                        v_stripes := v_stripes || v_stripe;
                    END IF;
                END LOOP;
                v_left := NULL;
            END IF;
        ELSE
            -- the groups whose waiting turn is handed out now (not those of expired leases: they
            -- were in flight already)
            IF v_groups > 1 OR v_groups = 0 THEN
                v_turns := ARRAY(SELECT m.group_key FROM pgqueue.message m
                                  WHERE m.id = ANY (v_ids) AND m.locked_until IS NULL
                                    AND m.group_key IS NOT NULL);
            ELSIF v_groups = 1 AND current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
                -- REPEATABLE READ read the limit above in its snapshot: a queue_alter that raised
                -- it after the snapshot would go unseen, no turn handed on (a review). The queue's
                -- row FOR SHARE raises 40001 after any change of it since the snapshot. (The
                -- groups' locks, tried first, raised it after any write on their stripes since:
                -- false 40001s, waits and deadlocks in normal operation, a review of that.)
                PERFORM pgqueue._queue_pin(v_queue_id);
            END IF;
            -- The lease runs from a clock read after the take, so after this transaction's xid
            -- was assigned (the rows are locked): see pgqueue._write_clock.
            v_until := pgqueue.now_ms() + v_lock_ms;
            IF v_lock_ms < 20 THEN
                -- a lease that runs out within 20 ms: this session's next take of one message
                -- looks for expired leases whenever it last looked (pgqueue._message_take)
                v_lease_check := set_config('pgqueue.lease_check_' || v_queue_id, '', false);
            END IF;
            IF cardinality(v_ids) = 1 THEN
                RETURN QUERY
                UPDATE pgqueue.message m
                   SET locked_until = v_until, attempts = m.attempts + 1,
                       write_mark = NOT coalesce(m.write_mark, false),  -- a lease from the clock
                       wait_floor = CASE WHEN v_pre IS NOT NULL AND m.group_key IS NOT NULL
                                         THEN pgqueue._wait_floor_leased(m.wait_floor, v_pre)
                                         ELSE m.wait_floor END
                 WHERE m.id = v_ids[1]
                   AND nextval(pgqueue._count_seq(v_queue_id, 1)) > 0
                   AND (m.locked_until IS NULL OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                          m.content_type, m.created_at, m.locked_until;
            ELSE
                RETURN QUERY
                WITH u AS (
                    UPDATE pgqueue.message m
                       SET locked_until = v_until, attempts = m.attempts + 1,
                           write_mark = NOT coalesce(m.write_mark, false),  -- a lease from the clock
                           wait_floor = CASE WHEN v_pre IS NOT NULL AND m.group_key IS NOT NULL
                                             THEN pgqueue._wait_floor_leased(m.wait_floor, v_pre)
                                             ELSE m.wait_floor END
                     WHERE m.id = ANY (v_ids)
                       AND (cardinality(v_ids) > 32
                            OR nextval(pgqueue._count_seq(v_queue_id, 1)) > 0)
                       AND (m.locked_until IS NULL
                            OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                    RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                              m.content_type, m.created_at, m.locked_until)
                SELECT * FROM u ORDER BY array_position(v_ids, u.id);
            END IF;
            IF cardinality(v_turns) > 0 THEN
                IF current_setting('pgqueue.ack_call', true) <> '' THEN
                    -- message_complete_and_dequeue's: its message_complete_batch hands these on
                    -- with the acknowledgements' hand-offs, all of the groups' locks taken in one
                    -- run, in stripe order (see there); no further round
                    PERFORM set_config('pgqueue.deferred_queue', v_queue_id::text, true),
                            set_config('pgqueue.deferred_turns', v_turns::text, true);
                    v_turns := NULL;
                    EXIT;
                END IF;
                FOR v_group, v_stripe IN SELECT g.g, hashtext(g.g) & 255 FROM unnest(v_turns) AS g(g)
                                          GROUP BY g.g ORDER BY 2, g.g LOOP
                    IF v_top IS NULL OR v_stripe >= v_top OR v_stripe = ANY (v_stripes) THEN
                        v_turned := pgqueue._message_group_next(v_queue_id, v_group, v_groups);
                        v_top := greatest(v_top, v_stripe);
                        v_stripes := v_stripes || v_stripe;
                    END IF;
                END LOOP;
                v_turns := NULL;
            END IF;
        END IF;
        EXIT WHEN v_groups IS NULL OR v_n >= v_limit OR cardinality(v_back) > 0;
        v_now := pgqueue.now_ms();
        v_all := v_all || v_ids;  -- a lease handed out above may have run out already
    END LOOP;
    IF v_rate IS NOT NULL THEN
        PERFORM pgqueue._rate_take(v_queue_id, v_rate, v_n);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_dequeue(text, integer, bigint) IS
    'Hand out up to p_limit deliverable messages (expired leases first, then by dequeue_at, id), skipping rows other consumers hold (SKIP LOCKED); p_lock_ms NULL = queue lease, 0 = delete on dequeue';
