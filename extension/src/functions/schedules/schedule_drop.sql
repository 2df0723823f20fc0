-- Drop a schedule by name; false if there was none. (Dropping a queue drops its schedules.)
CREATE FUNCTION pgqueue.schedule_drop(p_name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_name IS NULL THEN
        PERFORM pgqueue._not_null(true, 'schedule name'::text);
    END IF;
    DELETE FROM pgqueue.schedule s WHERE s.name = p_name;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.schedule_drop(text) IS
    'Drop a schedule by name; false if it did not exist';
