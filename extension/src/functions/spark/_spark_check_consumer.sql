-- Check a consumer name: 22004 if NULL, 42602 if it breaks the rule.
CREATE FUNCTION pgqueue._spark_check_consumer(p_consumer text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_consumer IS NULL THEN
        RAISE EXCEPTION 'consumer name must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF p_consumer !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$' THEN
        RAISE EXCEPTION 'invalid consumer name %', quote_literal(left(p_consumer, 120))
                        || CASE WHEN length(p_consumer) > 120 THEN format(' (%s characters)', length(p_consumer)) ELSE '' END
            USING ERRCODE = '42602',
                  HINT = 'A consumer name has 1 to 100 characters from A-Z a-z 0-9 _ . : - and does not start with . : or -.';
    END IF;
END;
$$;
