-- How many of p_limit messages a rate-limited queue (p_rate messages a second) may hand out now:
-- the slots that are due and not taken, read from the queue's rate sequence without changing it
-- (an empty poll stays read-only). Slot s is due at s / p_rate s since the epoch; a queue idle
-- for a while may catch up by at most a twentieth of a second's slots (one at least).
CREATE FUNCTION pgqueue._rate_room(p_queue_id integer, p_rate integer, p_limit integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot bigint := floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint;
    v_last bigint := pg_sequence_last_value(pgqueue._rate_seq(p_queue_id));
BEGIN
    RETURN least(p_limit, greatest(v_slot - greatest(v_last, v_slot - greatest(p_rate / 20, 1)), 0));
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_room(integer, integer, integer) IS
    'pgqueue internal: how many messages a rate-limited queue may hand out now (due slots not taken)';
