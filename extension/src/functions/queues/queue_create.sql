-- Create a queue.
CREATE FUNCTION pgqueue.queue_create(
    p_queue         text,
    p_lock_ms       bigint  DEFAULT 30000,
    p_max_attempts  integer DEFAULT NULL,
    p_retry_base_ms bigint  DEFAULT 1000,
    p_retry_cap_ms  bigint  DEFAULT 3600000,
    p_max_size      bigint  DEFAULT NULL,
    p_notify        boolean DEFAULT false,
    p_if_not_exists boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgqueue._not_null(p_queue IS NULL, 'queue name'::text);
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    PERFORM pgqueue._not_null(p_lock_ms IS NULL, 'lock_ms'::text);
    PERFORM pgqueue._not_null(p_retry_base_ms IS NULL, 'retry_base_ms'::text);
    PERFORM pgqueue._not_null(p_retry_cap_ms IS NULL, 'retry_cap_ms'::text);
    PERFORM pgqueue._not_null(p_notify IS NULL, 'notify'::text);
    PERFORM pgqueue._not_null(p_if_not_exists IS NULL, 'if_not_exists'::text);
    PERFORM pgqueue._check_queue_options(p_lock_ms, p_max_attempts, p_retry_base_ms,
                                         p_retry_cap_ms, p_max_size);
    BEGIN
        INSERT INTO pgqueue.queue (name, lock_ms, max_attempts, retry_base_ms, retry_cap_ms,
                                   max_size, notify)
        VALUES (p_queue, p_lock_ms, nullif(p_max_attempts, 0), p_retry_base_ms, p_retry_cap_ms,
                nullif(p_max_size, 0), p_notify);
    EXCEPTION WHEN unique_violation THEN
        IF p_if_not_exists THEN
            RETURN;
        END IF;
        RAISE EXCEPTION 'queue "%" already exists', p_queue
            USING ERRCODE = 'PQ002',
                  HINT = 'Use pgqueue.queue_alter() to change it, or p_if_not_exists => true.';
    END;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_create(text, bigint, integer, bigint, bigint, bigint, boolean, boolean) IS
    'Create a queue: lease lock_ms, max_attempts (NULL/0 = unlimited), retry back-off base and cap (ms), max_size (NULL/0 = unbounded), notify';
