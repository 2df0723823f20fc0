-- Take p_n slots of a rate-limited queue's sequence for the messages just handed out: nextval per
-- message, or, when the queue was idle and its last slot lies more than the catch-up allowance
-- (a twentieth of a second's slots, rounded up) behind the clock, setval to the allowance's start
-- plus p_n. Two consumers racing past the same due slots take more slots than were due; the
-- sequence then runs ahead of the clock and the next calls wait until it is due, so over time no
-- more than p_rate a second are handed out. A last slot more than a minute's slots and 100,000
-- more ahead was taken at another rate (pgqueue._rate_room): setval too. The setval is a read and
-- a write: consumers that find the queue idle at the same moment each write it, and one can write
-- over slots another took meanwhile, which are then never waited out (docs/guarantees.md, "Rate
-- limit", measured by bench/experiments/rate_rebase/burst.py; a lock that the others do not wait
-- for did not close it, session 86).
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
BEGIN
    IF p_n > 0 THEN
        v_slot := floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint;
        v_floor := v_slot - (p_rate + 19) / 20;
        v_last := pg_sequence_last_value(v_seq);
        IF v_last IS NULL OR v_last < v_floor OR v_last > v_slot + 60::bigint * p_rate + 100000 THEN
            PERFORM setval(v_seq, v_floor + p_n);
        ELSE
            PERFORM nextval(v_seq) FROM generate_series(1, p_n);
        END IF;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_take(integer, integer, integer) IS
    'pgqueue internal: take the rate-limit slots of p_n messages handed out';
