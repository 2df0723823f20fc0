-- How many of p_limit messages a rate-limited queue (p_rate messages a second) may hand out now:
-- the slots that are due and not taken, read from the queue's rate sequence without changing it
-- (an empty poll stays read-only). Slot s is due at s / p_rate s since the epoch; a queue idle
-- for a while may catch up by at most a twentieth of a second's slots, rounded up. A last
-- slot more than a minute's slots and 100,000 more ahead of the clock was taken at another
-- rate (by a consumer that read the rate before queue_alter changed it; queue_create and
-- queue_alter start a new rate's slots afresh, pgqueue._rate_reset): slots depend on the rate,
-- so it counts as none. Consumers that race run the sequence ahead by a call's p_limit each,
-- however long they were held up: the 100,000 keeps such a debt (up to 100,000 messages past
-- the minute's), which a minute alone forgave at low rates (session 46); a stale rate's last
-- slot starts at least the seconds since the epoch (1.7 * 10^9) ahead and stays ignored until
-- the queue has been idle long enough at the new rate r for it to fall within the bound, then
-- holds the queue at most a minute and 100,000 / r s (a rate kept with the slots would end
-- that: not built).
CREATE FUNCTION pgqueue._rate_room(p_queue_id integer, p_rate integer, p_limit integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot bigint := floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint;
    v_last bigint := pg_sequence_last_value(pgqueue._rate_seq(p_queue_id));
BEGIN
    IF v_last > v_slot + 60::bigint * p_rate + 100000 THEN
        v_last := NULL;  -- taken at another rate
    END IF;
    RETURN least(p_limit, greatest(v_slot - greatest(v_last, v_slot - (p_rate + 19) / 20), 0));
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_room(integer, integer, integer) IS
    'pgqueue internal: how many messages a rate-limited queue may hand out now (due slots not taken)';
