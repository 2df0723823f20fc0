-- Raise 22004 "<p_name> must not be NULL" when p_is_null. Callers pass (x IS NULL, '...'::text):
-- exact argument types, so no overload planted beside it could be a better match.
CREATE FUNCTION pgqueue._not_null(p_is_null boolean, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_is_null THEN
        RAISE EXCEPTION '% must not be NULL', p_name USING ERRCODE = '22004';
    END IF;
END;
$$;
