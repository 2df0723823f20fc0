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
-- lets the next waiter re-base. A consumer whose clock read came a moment earlier finds the
-- same value not idle and takes its slots with nextval, which the re-base's check-then-setval
-- could write over (a review, by pausing sessions on purpose); when the value lies within a
-- hundredth of a second's slots of its floor, such a take holds the same key shared around its
-- nextval, so that a re-base waits for it (or it for the re-base's write, then takes on top):
-- one descheduled for longer than that between its clock read and its nextval is still
-- written over. The key
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
        ELSIF v_last < v_floor + (p_rate + 99) / 100 THEN
            -- within a hundredth of a second's slots of the floor: a consumer that reads the
            -- clock a moment later finds the queue idle and re-bases from this value; the key
            -- taken shared keeps its setval from writing over this nextval (a review)
            v_key := pgqueue._rate_key(p_queue_id, p_rate, v_last);
            IF coalesce(pg_try_advisory_lock_shared(v_key), true) THEN
                PERFORM nextval(v_seq) FROM generate_series(1, p_n);
                PERFORM pg_advisory_unlock_shared(v_key);
                RETURN;
            END IF;
            v_until := clock_timestamp() + interval '200 ms';  -- its re-base: wait for its write
            WHILE pg_sequence_last_value(v_seq) IS NOT DISTINCT FROM v_last AND clock_timestamp() < v_until
                  AND v_round < 200 LOOP
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
