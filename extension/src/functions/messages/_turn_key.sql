-- The key of a group's turn (message.turn_at, epoch microseconds): p_dequeue_at in microseconds
-- (clamped so that it cannot overflow), or, when p_later, no earlier than the clock: a turn
-- handed on, kept by a retry or a defer, or given to a message created due now, goes behind the
-- turns already waiting. Microseconds, so that turns handed on and messages created in one
-- millisecond still queue in the order they were handed on or created. The
-- clock in double precision, exact to the microsecond until 2106 (as in pgqueue.now_ms).
CREATE FUNCTION pgqueue._turn_key(p_dequeue_at bigint, p_later boolean)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN CASE WHEN p_later
            THEN GREATEST(
                     LEAST(GREATEST(p_dequeue_at, -9223372036854775), 9223372036854775) * 1000,
                     (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000000)::bigint)
            ELSE LEAST(GREATEST(p_dequeue_at, -9223372036854775), 9223372036854775) * 1000 END;

COMMENT ON FUNCTION pgqueue._turn_key(bigint, boolean) IS
    'pgqueue internal: the turn key (epoch us) of a grouped message due at p_dequeue_at (ms); p_later: not before the clock';
