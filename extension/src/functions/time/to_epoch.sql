-- Convert a timestamp to epoch milliseconds (floor).
CREATE FUNCTION pgqueue.to_epoch(p_ts timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN floor(EXTRACT(EPOCH FROM (p_ts AT TIME ZONE 'UTC')) * 1000)::bigint;

COMMENT ON FUNCTION pgqueue.to_epoch(timestamptz) IS
    'Convert a timestamptz to BIGINT milliseconds since the Unix epoch (floor)';
