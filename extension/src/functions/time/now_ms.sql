-- The current wall-clock time in epoch milliseconds (leases and due times use this).
--
-- In double precision (date_part), not numeric (EXTRACT, AT TIME ZONE): the epoch in seconds
-- is exact to 0.24 us until 2106 (below 2^32 s, ulp 2^-21 s), the product in microseconds to
-- 0.25 us (below 2^52), so the cast rounds to the exact microsecond, and the division floors it
-- to the millisecond: the same value as the numeric formula (tests/pgtap/10_schema.sql compares
-- them), 1.7 us less a delete-mode dequeue (docs/performance.md).
CREATE FUNCTION pgqueue.now_ms()
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN (date_part('epoch', clock_timestamp()) * 1000000)::bigint / 1000;

COMMENT ON FUNCTION pgqueue.now_ms() IS
    'Current wall-clock time (clock_timestamp) in epoch milliseconds, the clock of leases and due times';
