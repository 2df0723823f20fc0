-- A message left pgqueue.message (completed, delivered in delete mode, cancelled, acknowledged by
-- Spark, dead-lettered): keep its idempotency key p_idem_key taken for the queue's key_window_ms
-- (pgqueue._dead_letter passes none: a dead letter frees its key at once), removing two windows
-- that have ended on the way (so the
-- table stays as small as the keys of one window), and give its group its next turn
-- (pgqueue._message_group_next). Called by the function that deleted the row, after its DELETE,
-- for a row with an idempotency key or with its group's turn (the callers test that, so that
-- other rows cost no call): message_dequeue (delete mode), message_complete,
-- message_complete_batch, message_cancel, spark_ack and pgqueue._dead_letter. Nothing when the
-- queue is gone (queue_drop). Not a trigger (AFTER DELETE FOR EACH ROW, as it was while 0.4 was
-- developed): a trigger's presence alone cost every delete-mode dequeue 10 us of about 155 of
-- server time (its WHEN clause prepared at every statement, the deleted row fetched again for
-- it), whether it fired or not (docs/performance.md). A row deleted with plain SQL is not
-- handed on (docs/guarantees.md). Returns whether it took the group's lock (a multi-round
-- message_dequeue keeps its later locks in stripe order with it: see there).
--
-- With one in flight per group (group concurrency 1, the ordered case) the message leaving is the
-- group's only one with the turn, and the common hand-off is done here by one UPDATE, without the
-- group's lock and without the two calls of pgqueue._message_group_next: the group's first
-- message waiting gets the turn if no message of the group has it (that function's UPDATE with
-- one in flight allowed). That needs no lock because nothing else can give the group a turn
-- meanwhile: a producer gives its new message the turn only if it sees no message with the
-- turn, and it sees the one leaving until this transaction commits, which commits the new turn
-- with it. When the UPDATE finds no message waiting (or its row was cancelled meanwhile),
-- pgqueue._message_group_next takes the group's lock and looks again under a newer snapshot: a
-- producer adding a message now either waits for that lock and gives its own message the turn
-- (it then sees the one leaving gone), or holds it first and is seen (specs/group_producer.spec).
-- Against the call chain through _message_group_next at 4 clients: lease + complete 1.23x,
-- delete mode 1.14x (medians of 8 paired rounds; docs/performance.md, "Message groups").
-- The two common callers, message_dequeue (one message in delete mode) and message_complete, run
-- this UPDATE themselves on a queue of group concurrency 1 for a message without an idempotency
-- key, and only when it handed nothing on call this function (message_complete, which reads
-- the queue's concurrency in its UPDATE) or pgqueue._message_group_next (message_dequeue, which
-- knows it): the call and its read of the queue's row cost a grouped delete-mode dequeue 8% and
-- a lease + complete 4% (session 28).
-- The three copies of the statement must stay the same (tests/test_group_probes.py).
-- p_floor: the leaving message's wait_floor (its callers that read it pass it; NULL: none), where
-- that UPDATE starts its probe of the group's waiting messages, and which lets it skip the probe
-- of the group's turns; p_pre: the queue's lock stripe as the caller read it before its
-- transaction's xid was assigned (message_dequeue; message_complete passes the one its lease
-- recorded, pgqueue._wait_floor_leased; NULL: none so read), without which the hand-off takes
-- no new candidate for the floor (pgqueue._wait_floor_next).
CREATE FUNCTION pgqueue._message_left(
    p_queue_id integer,
    p_id       bigint,
    p_group    text,
    p_turn_at  bigint,
    p_idem_key text,
    p_floor    bigint[] DEFAULT NULL,
    p_pre      bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_window      bigint;
    v_concurrency integer;
    v_now         bigint;
    v_turned      boolean;
    v_written     integer;  -- key windows this transaction wrote before (REPEATABLE READ)
    v_seen        bigint;   -- the queue's lock stripe before the hand-off (pgqueue._wait_floor_next)
BEGIN
    SELECT q.key_window_ms, q.group_concurrency INTO v_window, v_concurrency
      FROM pgqueue.queue q WHERE q.id = p_queue_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_idem_key IS NOT NULL AND v_window > 0 THEN
        v_now := pgqueue.now_ms();
        INSERT INTO pgqueue.message_key AS k (queue_id, idem_key, id, until)
        VALUES (p_queue_id, p_idem_key, p_id, v_now + v_window)
        ON CONFLICT (queue_id, idem_key) DO UPDATE SET id = excluded.id, until = excluded.until;
        IF current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
            PERFORM pgqueue._message_key_expire(p_queue_id, v_now, 2);
        ELSE
            -- REPEATABLE READ or SERIALIZABLE: an ended window another session removed after this
            -- snapshot raises 40001 when locked (SKIP LOCKED skips locks, not that), which failed
            -- an acknowledgement of another message (a review: 251 of 3,000 completes of four
            -- such consumers). So the removal gives up on that, in a subtransaction; one for
            -- every 64 windows the transaction writes, removing two for each of them (a batch
            -- acknowledges many in one transaction, and more than 64 subtransactions with an xid
            -- overflow its snapshot): the count, per queue (the removal is the queue's), in a
            -- setting local to the transaction.
            v_written := coalesce(nullif(current_setting('pgqueue.key_windows_' || p_queue_id, true), '')::integer, 0);
            PERFORM set_config('pgqueue.key_windows_' || p_queue_id, (v_written + 1)::text, true);
            IF v_written % 64 = 0 THEN
                BEGIN
                    PERFORM pgqueue._message_key_expire(p_queue_id, v_now, 128);
                EXCEPTION WHEN serialization_failure THEN
                    NULL;  -- (another call, or session, removes them)
                END;
            END IF;
        END IF;
    END IF;
    IF p_group IS NOT NULL AND p_turn_at IS NOT NULL AND v_concurrency = 1 THEN
        v_seen := pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id));
        UPDATE pgqueue.message m
           SET turn_at = pgqueue._turn_key(m.dequeue_at, true),
               wait_floor = pgqueue._wait_floor_next(p_floor, v_seen, p_pre,
                                                     pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                                                     m.dequeue_at, m.id)
         WHERE m.id = (SELECT w.id FROM pgqueue.message w
                        WHERE w.queue_id = p_queue_id AND w.group_key = p_group
                          AND w.turn_at IS NULL
                          AND (w.dequeue_at, w.id) >= (CASE WHEN p_floor[6] = v_seen THEN p_floor[1] ELSE -9223372036854775808 END,
                                                       CASE WHEN p_floor[6] = v_seen THEN p_floor[2] ELSE -9223372036854775808 END)
                        ORDER BY w.dequeue_at, w.id
                        LIMIT 1)
           -- the room: while the group's wait floor holds (read before this statement, and
           -- again after its snapshot), no message of the group but the one leaving has
           -- the turn (pgqueue._wait_floor_next)
           AND CASE WHEN p_floor[6] = v_seen THEN (SELECT pgqueue._wait_floor_ok(p_floor, p_queue_id))
                    ELSE (SELECT t.turn_at FROM pgqueue.message t
                           WHERE t.queue_id = p_queue_id AND t.group_key = p_group
                             AND t.turn_at IS NOT NULL
                             AND t.turn_at >= (SELECT pgqueue._group_floor_get(p_queue_id, p_group, v_seen))
                           ORDER BY t.turn_at LIMIT 1) IS NULL END
           -- Under REPEATABLE READ or SERIALIZABLE the snapshot may miss a message a producer
           -- added to the group after it (with an earlier dequeue_at than the one this would
           -- choose): the decision is taken under the group's lock instead, which raises 40001
           -- when the lock shows a decision the snapshot cannot see (specs/rr_group_order.spec)
           AND current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable');
        IF FOUND THEN
            RETURN false;  -- (no lock taken)
        END IF;
        -- nothing handed on: _message_group_next looks again, under the group's lock
    END IF;
    IF p_group IS NOT NULL AND p_turn_at IS NOT NULL AND v_concurrency IS NOT NULL THEN
        v_turned := pgqueue._message_group_next(p_queue_id, p_group, v_concurrency);
        RETURN true;
    END IF;
    RETURN false;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_left(integer, bigint, text, bigint, text, bigint[], bigint) IS
    'pgqueue internal: a message with an idempotency key or its group''s turn left the queue: keep its key for the queue''s window and give its group the next turn; true if it took the group''s lock';
