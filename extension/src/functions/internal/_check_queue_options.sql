-- Validate queue options shared by queue_create and queue_alter.
CREATE FUNCTION pgqueue._check_queue_options(
    p_lock_ms bigint, p_max_attempts integer, p_retry_base_ms bigint,
    p_retry_cap_ms bigint, p_max_size bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgqueue._check_lock_ms(p_lock_ms, false);
    IF p_max_attempts < 0 THEN
        RAISE EXCEPTION 'max_attempts must be >= 0 (0 = unlimited), got %', p_max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF p_retry_base_ms < 0 OR p_retry_cap_ms < 0 OR p_retry_cap_ms < p_retry_base_ms
       OR p_retry_cap_ms > 31536000000 THEN
        RAISE EXCEPTION 'retry back-off needs 0 <= retry_base_ms <= retry_cap_ms <= 31536000000, got % and %',
                        p_retry_base_ms, p_retry_cap_ms
            USING ERRCODE = '22023';
    END IF;
    IF p_max_size < 0 THEN
        RAISE EXCEPTION 'max_size must be >= 0 (0 = unbounded), got %', p_max_size
            USING ERRCODE = '22023';
    END IF;
END;
$$;
