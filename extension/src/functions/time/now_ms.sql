-- The current wall-clock time in epoch milliseconds (leases and due times use this).
CREATE FUNCTION pgqueue.now_ms()
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN floor(EXTRACT(EPOCH FROM (clock_timestamp() AT TIME ZONE 'UTC')) * 1000)::bigint;

COMMENT ON FUNCTION pgqueue.now_ms() IS
    'Current wall-clock time (clock_timestamp) in epoch milliseconds, the clock of leases and due times';
