-- Convert epoch milliseconds back to a timestamp.
--
-- Exact for every time a timestamptz holds: whole days and the milliseconds left over, added as
-- intervals (integers of days and microseconds) to the epoch. 0.1-0.3 divided by 1000.0 and
-- went through to_timestamp's double precision, which is 30 us coarse by the year 9999: 375 of
-- the 1,001 times near its end that sql/20_create.sql round-trips came back a millisecond early.
-- Beyond the days an interval holds (far outside the range of a timestamptz) to_timestamp
-- raises the error instead, 22008 "timestamp out of range" (the interval's overflow said
-- "interval out of range", which names nothing the caller passed: a review). Not STRICT: the
-- planner inlines a STRICT SQL function only when its body is strict, which a CASE is not, and
-- the call cost 6.5 times the inlined expression (a review: the dead_letters view calls it on
-- every row); a NULL gives NULL all the same (the CASE's ELSE, to_timestamp(NULL)).
CREATE FUNCTION pgqueue.from_epoch(p_ms bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN p_ms / 86400000 BETWEEN -2147483648 AND 2147483647
            THEN ('1970-01-01 00:00:00'::timestamp + (p_ms / 86400000) * interval '1 day'
                  + (p_ms % 86400000) * interval '1 millisecond') AT TIME ZONE 'UTC'
            ELSE to_timestamp(p_ms / 1000.0::double precision) END;

COMMENT ON FUNCTION pgqueue.from_epoch(bigint) IS
    'Convert BIGINT milliseconds since the Unix epoch to a timestamptz';
