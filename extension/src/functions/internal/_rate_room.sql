-- How many of p_limit messages a rate-limited queue (p_rate messages a second) may hand out now:
-- the slots that are due and not taken, read from the queue's rate sequence without changing it
-- (an empty poll stays read-only). Slot s is due at s / p_rate s since the epoch; a queue idle
-- for a while may catch up by at most a twentieth of a second's slots (one at least). A last
-- slot more than 10^9 slots ahead of the clock was taken at another rate (by a consumer that
-- read the rate before queue_alter changed it; queue_create and queue_alter start the slots
-- afresh, pgqueue._rate_reset): slots depend on the rate, so it counts as none. Two rates'
-- slots are at least the seconds since the epoch apart (1.7 * 10^9), while consumers that race
-- run the sequence ahead by at most a call's p_limit (10,000) each, however long they were held
-- up (a minute's slots, the bound before session 46, forgave that debt at low rates).
CREATE FUNCTION pgqueue._rate_room(p_queue_id integer, p_rate integer, p_limit integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot bigint := floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint;
    v_last bigint := pg_sequence_last_value(pgqueue._rate_seq(p_queue_id));
BEGIN
    IF v_last > v_slot + 1000000000 THEN
        v_last := NULL;  -- taken at another rate
    END IF;
    RETURN least(p_limit, greatest(v_slot - greatest(v_last, v_slot - greatest(p_rate / 20, 1)), 0));
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_room(integer, integer, integer) IS
    'pgqueue internal: how many messages a rate-limited queue may hand out now (due slots not taken)';
