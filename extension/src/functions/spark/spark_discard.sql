-- Delete the staging rows of a write (an aborted Spark job); returns how many.
CREATE FUNCTION pgqueue.spark_discard(p_write_id uuid)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    PERFORM pgqueue._not_null(p_write_id IS NULL, 'p_write_id'::text);
    DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_discard(uuid) IS
    'Delete the staging rows of a Spark write that will not be published (an aborted job); returns how many';
