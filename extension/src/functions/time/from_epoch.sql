-- Convert epoch milliseconds back to a timestamp.
CREATE FUNCTION pgqueue.from_epoch(p_ms bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_timestamp(p_ms / 1000.0);

COMMENT ON FUNCTION pgqueue.from_epoch(bigint) IS
    'Convert BIGINT milliseconds since the Unix epoch to a timestamptz';
