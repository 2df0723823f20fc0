-- Insert one message with a group and/or an idempotency key, or into a grouped queue; returns its
-- id, or the id of the live message with the same key (or of the message that had the key within
-- the queue's key_window_ms), inserting nothing then. The caller has admitted the message
-- (pgqueue._queue_admit) and passes the queue row, p_dequeue_at (NULL: now) and created_at.
--
-- Keys: concurrent producers of one key meet on message_idem_key_idx: the INSERT ... ON CONFLICT
-- DO NOTHING of the later one waits for the earlier one's transaction; if it commits, the later
-- one reads its id (READ COMMITTED: a new snapshot per statement; REPEATABLE READ raises 40001).
-- Groups: under the group's lock (pgqueue._message_group_lock) the message gets its group's turn
-- at once if the group has none waiting and room in flight, and no message of the group waits
-- ahead of it (else that one gets the turn, below); a message without a group in a
-- grouped queue is a group of its own and always has its turn. The turn's key: a message due now
-- (p_dequeue_at NULL) has it from the clock in microseconds, read after the xid, as a turn handed
-- on has (pgqueue._turn_key), so it goes behind every turn handed on before it was written, also
-- within the same millisecond (sql/90_groups.sql). A message with a dequeue_at of its own
-- (scheduled, or a priority in the past) has that time's key.
--
-- The key's look-ups are index probes whatever the statistics: a session's generic plan made
-- while pgqueue.message or pgqueue.message_key was recorded empty (a queue that drained, then a
-- VACUUM or ANALYZE) is kept until the next ANALYZE. enable_seqscan = off keeps both off Seq
-- Scans. message_key: recorded empty, its two indexes cost the same (one row either way), and
-- the tie went to message_key_until_idx (queue_id, until) with Index Cond queue_id alone (the
-- clock in "until > now_ms()" is volatile, never an index condition): a walk of every key the
-- queue keeps, 7.2-8.3 ms a keyed create at 60,000 against 0.23-0.29 on a new session
-- (bench/experiments/emptied_table/keyed_create.py, docs/performance.md). So the key is asked
-- for in message_key_pkey's order (ORDER BY idem_key, the key given as a range of one value,
-- which unlike "=" does not make that order trivial): only message_key_pkey gives it, any other
-- path needs a Sort, and enable_sort = off prices a Sort out. (A deterministic collation, which
-- a database's default is: ">= x AND <= x" holds of x alone.) pgqueue._message_key_taken is the
-- same look-up for message_create's capped queues.
CREATE FUNCTION pgqueue._message_insert(
    p_queue        pgqueue.queue,
    p_content      bytea,
    p_dequeue_at   bigint,
    p_content_type text,
    p_group        text,
    p_key          text,
    p_created_at   bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- its key look-ups by index, whatever the statistics (_message_group_room)
SET enable_sort = off     -- the look-up in message_key by message_key_pkey (above)
AS $$
DECLARE
    v_at   bigint;
    v_turn bigint;
    v_id   bigint;
    v_held boolean;
    v_hand boolean := false;  -- the group's turn is an earlier waiting message's (below)
    v_kept bigint;
BEGIN
    PERFORM pgqueue._check_message_key(p_group, 'message group'::text);
    PERFORM pgqueue._check_message_key(p_key, 'idempotency key'::text);
    IF p_group IS NOT NULL AND p_queue.group_concurrency IS NULL THEN
        RAISE EXCEPTION 'queue "%" has no message groups', p_queue.name
            USING ERRCODE = '22023',
                  HINT = 'Create the queue with pgqueue.queue_create(..., p_group_concurrency => n).';
    END IF;
    LOOP
        IF p_key IS NOT NULL THEN
            SELECT m.id INTO v_id FROM pgqueue.message m
             WHERE m.queue_id = p_queue.id AND m.idem_key = p_key;
            IF FOUND THEN
                RETURN v_id;
            END IF;
            -- a key kept by a message that left within its window, whatever the window is now
            -- (a window changed to 0 applies to the messages that leave after the change)
            SELECT k.id INTO v_id FROM pgqueue.message_key k
             WHERE k.queue_id = p_queue.id AND k.idem_key >= p_key AND k.idem_key <= p_key
               AND k.until > pgqueue.now_ms()
             ORDER BY k.idem_key;  -- by message_key_pkey alone (above)
            IF FOUND THEN
                RETURN v_id;
            END IF;
            IF p_queue.key_window_ms > 0 AND current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
                -- A key kept within the window is a pgqueue.message_key row written when its
                -- message left. A REPEATABLE READ or SERIALIZABLE snapshot taken before that
                -- message was created sees neither the message nor the row, and nothing conflicts
                -- with the INSERT below (the message's index entry is dead): the key would be
                -- enqueued twice. Producers may not write or lock pgqueue.message_key, so nothing
                -- here can turn that into a 40001: a new message with a key is refused (PQ009).
                PERFORM pgqueue._require_read_committed('an enqueue of a new key into a queue with key_window_ms');
            END IF;
        END IF;
        v_at := coalesce(p_dequeue_at, pgqueue._write_clock());
        IF p_queue.group_concurrency IS NULL THEN
            v_turn := NULL;
        ELSIF p_group IS NULL THEN
            v_turn := pgqueue._turn_key(v_at, p_dequeue_at IS NULL);
        ELSE
            v_held := pgqueue._message_group_lock(p_queue.id, p_group);
            IF NOT v_held THEN
                -- REPEATABLE READ: a decision on the group's turns committed after this snapshot
                -- may be missed either way: the message taking the room may have left (this one
                -- would wait with no turn), or another producer's message may have taken the
                -- room this snapshot still sees free (this one would get a turn too: two in flight
                -- with a limit of one, specs/rr_group_producer.spec) (pgqueue._message_group_lock)
                RAISE EXCEPTION 'message group "%" changed after this transaction''s snapshot', p_group
                    USING ERRCODE = '40001',
                          HINT = 'Retry the transaction, or enqueue to grouped queues under READ COMMITTED.';
            END IF;
            IF p_key IS NOT NULL THEN
                -- The key again, in a snapshot taken now that the group's lock is held: the look
                -- above may have run before a message of this group with the key committed, while
                -- this call waited for the lock, and a consumer may be completing that message
                -- now, its hand-off waiting for the lock this call holds. The INSERT's conflict on
                -- the key would wait for that consumer: a deadlock of two single calls (a review;
                -- specs/idempotent_create.spec). That message is still visible here (its DELETE
                -- has not committed): its id is the answer, as if the look had run a moment later.
                SELECT m.id INTO v_id FROM pgqueue.message m
                 WHERE m.queue_id = p_queue.id AND m.idem_key = p_key;
                IF FOUND THEN
                    RETURN v_id;
                END IF;
            END IF;
            v_turn := NULL;  -- (a round of this loop after a key's conflict decides again)
            v_hand := false;
            IF pgqueue._message_group_room(p_queue.id, p_group, p_queue.group_concurrency) THEN
                -- Room, and a message of the group waiting without a turn ahead of this one by
                -- (dequeue_at, id): a group can be left below its limit with messages waiting
                -- (a further round of a dequeue hands no turn on to a group whose lock it would
                -- take out of stripe order, docs/guarantees.md), and the turn is that message's,
                -- not this later one's (tests/test_fuzz_groups.py). It gets it once this one is in.
                IF EXISTS (SELECT 1 FROM pgqueue.message w
                            WHERE w.queue_id = p_queue.id AND w.group_key = p_group AND w.turn_at IS NULL
                              AND w.dequeue_at <= v_at) THEN
                    v_hand := true;
                ELSE
                    v_turn := pgqueue._turn_key(v_at, p_dequeue_at IS NULL);
                END IF;
            END IF;
        END IF;
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type,
                                     group_key, turn_at, idem_key, write_mark)
        VALUES (p_queue.id, v_at, p_created_at, p_content, p_content_type, p_group, v_turn, p_key,
                -- keyed at or above this writer's clock: no check by trigger message_placed_low
                CASE WHEN p_dequeue_at IS NULL OR coalesce(v_turn / 1000, v_at) >= pgqueue._write_clock() - 5
                     THEN false END)
        ON CONFLICT (queue_id, idem_key) WHERE idem_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL AND p_key IS NOT NULL AND p_queue.max_size IS NULL THEN
            -- The look-ups above ran before this INSERT, which may have waited: for the group's
            -- lock, or on message_idem_key_idx for a producer's transaction that created the key
            -- and then took it away. A message with the key that left meanwhile within its window
            -- kept the key in message_key, where this statement (a newer snapshot under READ
            -- COMMITTED) finds it: a duplicate of a key within its window would get in (a
            -- review). The statement fails instead, with nothing inserted (40001: its retry
            -- returns the kept id). (Not a DELETE of the row just inserted: producers may not
            -- delete messages, docs/grants.sql.) On a capped queue producers take turns at the
            -- admission, which the look-ups ran after.
            SELECT k.id INTO v_kept FROM pgqueue.message_key k
             WHERE k.queue_id = p_queue.id AND k.idem_key >= p_key AND k.idem_key <= p_key
               AND k.until > pgqueue.now_ms()
             ORDER BY k.idem_key;  -- by message_key_pkey alone (above)
            IF FOUND THEN
                RAISE EXCEPTION 'the idempotency key of this message was kept by a message that left while the enqueue waited'
                    USING ERRCODE = '40001',
                          DETAIL = format('Message %s keeps the key for the queue''s key_window_ms.', v_kept),
                          HINT = 'Retry the transaction: the enqueue then returns the id that keeps the key.';
            END IF;
        END IF;
        IF v_id IS NOT NULL THEN
            IF v_hand THEN  -- (as the owner: producers may not update messages)
                PERFORM pgqueue._message_group_hand(p_queue.id, p_group);
            END IF;
            RETURN v_id;
        END IF;
        -- another producer's message with this key committed while this one waited: read it
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_insert(pgqueue.queue, bytea, bigint, text, text, text, bigint) IS
    'pgqueue internal: insert a message with a group and/or idempotency key (or into a grouped queue); the existing id if the key is taken';
