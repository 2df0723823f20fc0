-- Check a lease length in milliseconds (p_allow_zero: 0 means delete on dequeue).
CREATE FUNCTION pgqueue._check_lock_ms(p_lock_ms bigint, p_allow_zero boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_lock_ms < 0 OR (p_lock_ms = 0 AND NOT p_allow_zero) OR p_lock_ms > 31536000000 THEN
        RAISE EXCEPTION 'lock_ms must be % and at most 31536000000 (a year), got %',
                        CASE WHEN p_allow_zero THEN '>= 0' ELSE '> 0' END, p_lock_ms
            USING ERRCODE = '22023',
                  HINT = 'lock_ms is the lease length in milliseconds; 0 (dequeue only) deletes on delivery.';
    END IF;
END;
$$;
