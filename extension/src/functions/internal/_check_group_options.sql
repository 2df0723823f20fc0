-- Validate the message-group, idempotency and rate-limit options of queue_create and queue_alter
-- (22023); p_rate_limit 0 is valid (queue_alter: no limit).
CREATE FUNCTION pgqueue._check_group_options(p_group_concurrency integer, p_key_window_ms bigint,
                                             p_rate_limit integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_group_concurrency < 0 THEN
        RAISE EXCEPTION 'group_concurrency must be >= 0 (0 = no limit), got %', p_group_concurrency
            USING ERRCODE = '22023',
                  HINT = 'NULL: no message groups; 1: one message of a group in flight at a time.';
    END IF;
    IF p_key_window_ms < 0 OR p_key_window_ms > 31536000000 THEN
        RAISE EXCEPTION 'key_window_ms must be between 0 and 31536000000 (a year), got %', p_key_window_ms
            USING ERRCODE = '22023';
    END IF;
    IF p_rate_limit < 0 OR p_rate_limit > 1000000 THEN
        RAISE EXCEPTION 'rate_limit must be between 1 and 1000000 messages a second (0 = none), got %', p_rate_limit
            USING ERRCODE = '22023';
    END IF;
END;
$$;
