-- Take p_n slots of a rate-limited queue's sequence for the messages just handed out: nextval per
-- message, or, when the queue was idle and its last slot lies more than the catch-up allowance
-- (a twentieth of a second's slots, rounded up) behind the clock, setval to the allowance's start
-- plus p_n (a re-base). Two consumers racing past the same due slots take more slots than were
-- due; the sequence then runs ahead of the clock and the next calls wait until it is due, so over
-- time no more than p_rate a second are handed out. A last slot more than a minute's slots and
-- 100,000 more ahead was taken at another rate (pgqueue._rate_room): a re-base too.
-- A re-base is a read and a write, so consumers that find the queue idle at the same moment
-- would each write it, and a later write would take back the slots of an earlier one, never to be
-- waited out (a review, session 86: 3 of 275 bursts after idle gaps). Only the consumer that holds
-- an advisory lock keyed on the idle value it read re-bases, and only when the value is still
-- that under the lock; the others wait for its write, which follows at once, and take their
-- slots on top of it with nextval. The lock is a session's, released right after the write: a
-- transaction's would stay until the transaction ended, one more for each re-base, and a long
-- transaction polling an idle queue would fill the server's lock table. A session's outlives an
-- error between the lock and the unlock (a cancel there): the waiters for it then find it free
-- no more, and, as for a holder stopped between its lock and its write or a role that holds the
-- key on purpose, a wait ends after 200 ms at most, its slots taken on the idle value, as before
-- the lock; the key is never met again (the value only grows), so the lock left holds up no
-- later call. A lock that is free again while the value has not moved (such a session ended)
-- lets the next waiter re-base. Not closed: a consumer whose clock read came a moment before
-- the value turned idle takes its slots with nextval and no lock, and a re-base's
-- check-then-setval can write over them when that nextval lands between the two (a review
-- reproduced it only by pausing sessions on purpose). Locking such takes too (the key shared,
-- session 87, not kept) needed a key that every take near the floor and every re-base agree
-- on while other takes move the value, and a lock left by a cancel in a long run of nextval
-- held up the re-bases after it. The key
-- hashes the queue's created_at, which a role that may not read pgqueue.queue does not know, so
-- such a role cannot hold it (docs/security.md). An empty poll takes no slot and no lock.
CREATE FUNCTION pgqueue._rate_take(p_queue_id integer, p_rate integer, p_n integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_seq   regclass := pgqueue._rate_seq(p_queue_id);
    v_slot  bigint;
    v_floor bigint;
    v_last  bigint;
    v_key   bigint;
    v_until timestamptz;
    v_round integer := 0;  -- the wait's rounds: 200 at most too, should the clock step back
BEGIN
    IF p_n > 0 THEN
        v_slot := floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint;
        v_floor := v_slot - (p_rate + 19) / 20;
        v_last := pg_sequence_last_value(v_seq);
        IF v_last IS NULL OR v_last < v_floor OR v_last > v_slot + 60::bigint * p_rate + 100000 THEN
            v_key := pgqueue._rate_key(p_queue_id, p_rate, v_last);
            v_until := clock_timestamp() + interval '200 ms';
            LOOP
                IF coalesce(pg_try_advisory_lock(v_key), true) THEN
                    IF pg_sequence_last_value(v_seq) IS NOT DISTINCT FROM v_last THEN
                        -- (after a wait, the allowance's start of now)
                        PERFORM setval(v_seq, floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint
                                              - (p_rate + 19) / 20 + p_n);
                        PERFORM pg_advisory_unlock(v_key);
                        RETURN;
                    END IF;
                    PERFORM pg_advisory_unlock(v_key);
                END IF;
                EXIT WHEN pg_sequence_last_value(v_seq) IS DISTINCT FROM v_last
                       OR clock_timestamp() >= v_until OR v_round >= 200;
                PERFORM pg_sleep(0.001);
                v_round := v_round + 1;
            END LOOP;
        END IF;
        PERFORM nextval(v_seq) FROM generate_series(1, p_n);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_take(integer, integer, integer) IS
    'pgqueue internal: take the rate-limit slots of p_n messages handed out';
