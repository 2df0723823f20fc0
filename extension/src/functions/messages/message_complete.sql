-- Acknowledge a leased message: delete it. False if the token is stale.
CREATE FUNCTION pgqueue.message_complete(p_id bigint, p_attempts integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
-- No SET search_path clause (its save and restore at every call cost about a tenth of the call):
-- as in message_create, every name below is schema-qualified or an SQL keyword and every
-- operator is written OPERATOR(pg_catalog.x) (docs/security.md, tests/test_security.py).
-- enable_seqscan = off, as on every function that finds messages by id or by queue and group:
-- planned while pgqueue.message was recorded empty (a queue that drained, then a VACUUM or an
-- ANALYZE), the DELETE below and the hand-off's probes were Seq Scans, and the session's
-- generic plan kept them until the next ANALYZE: every acknowledgement then read the whole
-- table (60,000 messages: 8.6-9.0 ms a lease + complete against 0.7-0.8; docs/performance.md).
-- The clause costs about 1 us a call (0.7 and 1.3 us in two runs of a call that finds nothing:
-- bench/experiments/emptied_table/set_cost.py).
SET enable_seqscan = off
AS $$
DECLARE
    v_queue_id integer;
    v_group    pg_catalog.text;
    v_turn_at  bigint;
    v_idem_key pg_catalog.text;
    v_floor    bigint[];  -- its group's wait floor, and the queue's lock stripe before the
    v_seen     bigint;    -- hand-off (pgqueue._wait_floor_next) and before this transaction's
    v_pre      bigint;    -- xid: the lease's (pgqueue._wait_floor_leased), if that xid is lower
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id IS NULL, 'message id'::pg_catalog.text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts token'::pg_catalog.text);
    END IF;
    -- The queue's shared lock before the row lock (see the locking discipline in 0.1): the
    -- condition is evaluated on the row before the DELETE locks it. The lock function returns
    -- void, which is never NULL; the test only makes the call part of the condition.
    DELETE FROM pgqueue.message m
     WHERE m.id OPERATOR(pg_catalog.=) p_id AND m.attempts OPERATOR(pg_catalog.=) p_attempts
       AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL
       AND pgqueue._queue_lock(m.queue_id)
    RETURNING m.queue_id, m.group_key, m.turn_at, m.idem_key, m.wait_floor,
              CASE WHEN m.group_key IS NOT NULL
                   THEN pg_catalog.pg_sequence_last_value(pgqueue._lock_stripe(m.queue_id)) END,
              -- (the DELETE has assigned this transaction's xid; no call of it for the others)
              CASE WHEN m.wait_floor[8] IS NOT NULL
                        AND m.wait_floor[8] OPERATOR(pg_catalog.<) pg_catalog.pg_current_xact_id()::pg_catalog.text::bigint
                   THEN m.wait_floor[7] END
         INTO v_queue_id, v_group, v_turn_at, v_idem_key, v_floor, v_seen, v_pre;
    -- a key to keep for the queue's window, a turn to pass on (pgqueue._message_left). The
    -- ordered hand-off of _message_left (see there) is done here, on a queue of group
    -- concurrency 1, rather than through it: a call of a PL/pgSQL function and its read of the
    -- queue's row cost a grouped lease + complete 4% (docs/performance.md); when it hands
    -- nothing on, _message_left does the rest (another concurrency, or a look under the lock).
    IF v_idem_key IS NULL AND v_group IS NOT NULL AND v_turn_at IS NOT NULL THEN
        UPDATE pgqueue.message m
           SET turn_at = pgqueue._turn_key(m.dequeue_at, true),
               wait_floor = pgqueue._wait_floor_next(v_floor, v_seen, v_pre,
                                                     pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::pg_catalog.text::bigint,
                                                     m.dequeue_at, m.id)
         WHERE m.id OPERATOR(pg_catalog.=) (
                   SELECT w.id FROM pgqueue.message w
                    WHERE w.queue_id OPERATOR(pg_catalog.=) v_queue_id
                      AND w.group_key OPERATOR(pg_catalog.=) v_group AND w.turn_at IS NULL
                      AND (w.dequeue_at, w.id) OPERATOR(pg_catalog.>=) (CASE WHEN v_floor[6] OPERATOR(pg_catalog.=) v_seen THEN v_floor[1] ELSE -9223372036854775808 END,
                                                                        CASE WHEN v_floor[6] OPERATOR(pg_catalog.=) v_seen THEN v_floor[2] ELSE -9223372036854775808 END)
                    ORDER BY w.dequeue_at, w.id
                    LIMIT 1)
           -- the room: while the group's wait floor holds (read before this statement, and
           -- again after its snapshot), no message of the group but the one leaving has
           -- the turn (pgqueue._wait_floor_next)
           AND CASE WHEN v_floor[6] OPERATOR(pg_catalog.=) v_seen THEN (SELECT pgqueue._wait_floor_ok(v_floor, v_queue_id))
                    ELSE (SELECT t.turn_at FROM pgqueue.message t
                           WHERE t.queue_id OPERATOR(pg_catalog.=) v_queue_id
                             AND t.group_key OPERATOR(pg_catalog.=) v_group AND t.turn_at IS NOT NULL
                             AND t.turn_at OPERATOR(pg_catalog.>=) (SELECT pgqueue._group_floor_get(v_queue_id, v_group, v_seen))
                           ORDER BY t.turn_at LIMIT 1) IS NULL END
           AND EXISTS (SELECT 1 FROM pgqueue.queue q
                        WHERE q.id OPERATOR(pg_catalog.=) v_queue_id
                          AND q.group_concurrency OPERATOR(pg_catalog.=) 1)
           -- without the lock under READ COMMITTED only (pgqueue._message_left)
           AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'repeatable read'
           AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'serializable';
        IF NOT FOUND THEN
            PERFORM pgqueue._message_left(v_queue_id, p_id, v_group, v_turn_at, NULL, v_floor, v_pre);
        END IF;
    ELSIF v_idem_key IS NOT NULL THEN
        PERFORM pgqueue._message_left(v_queue_id, p_id, v_group, v_turn_at, v_idem_key, v_floor, v_pre);
    END IF;
    RETURN v_queue_id IS NOT NULL AND pgqueue._counted(v_queue_id, 2);  -- completed (queue_counters)
END;
$$;

COMMENT ON FUNCTION pgqueue.message_complete(bigint, integer) IS
    'Complete (delete) a leased message; returns false and changes nothing if the attempts token is stale';
