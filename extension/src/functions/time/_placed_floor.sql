-- The key below which a row written now is "placed low" (trigger message_placed_low): 5 ms (the
-- margin the session hints keep below the clock, pgqueue._message_take) below a clock reading
-- taken after this transaction's xid was assigned. That reading is the one pgqueue._write_clock
-- kept in pgqueue.write_clock if it is at most 1 s old, else the clock now (plain SQL writes,
-- a long batch, or a setting that is not a number). The earlier reading matters: a row keyed
-- with the clock must not count as placed low because its writer was descheduled for a few ms
-- between the reading and the trigger (under load that moved the stripes hundreds of times a
-- second, and every move sends the consumers' probes back to the bottom). The 1 s bound is what
-- a session that sets pgqueue.write_clock by hand can get wrong: its own transactions' rows
-- placed less than 1 s below the clock may then go unsignalled (docs/performance.md).
CREATE FUNCTION pgqueue._placed_floor()
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN CASE WHEN pg_catalog.current_setting('pgqueue.write_clock', true) ~ '^[0-9]{1,15}$'
             AND pgqueue.now_ms() - pg_catalog.current_setting('pgqueue.write_clock', true)::bigint
                 BETWEEN 0 AND 1000
            THEN pg_catalog.current_setting('pgqueue.write_clock', true)::bigint
            ELSE pgqueue.now_ms() END - 5;

COMMENT ON FUNCTION pgqueue._placed_floor() IS
    'pgqueue internal: 5 ms below the clock reading pgqueue._write_clock kept for this transaction (pgqueue.write_clock, if at most 1 s old) or below the clock now; a key below it is placed low';
