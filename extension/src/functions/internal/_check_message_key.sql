-- Refuse a group or idempotency key (p_what names it) that is empty or longer than 200
-- characters (22023); NULL is fine (no key).
CREATE FUNCTION pgqueue._check_message_key(p_value text, p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value = '' OR length(p_value) > 200 THEN
        RAISE EXCEPTION 'the % must have 1 to 200 characters, got %', p_what, length(p_value)
            USING ERRCODE = '22023',
                  HINT = 'Pass NULL for none; hash a longer key.';
    END IF;
END;
$$;
