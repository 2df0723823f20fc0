-- Delete staging rows staged before p_before (epoch ms): writes whose driver died.
CREATE FUNCTION pgqueue.spark_staging_purge(p_before bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    PERFORM pgqueue._not_null(p_before IS NULL, 'p_before'::text);
    DELETE FROM pgqueue.spark_staging s WHERE s.staged_at < p_before;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_staging_purge(bigint) IS
    'Delete staging rows staged before p_before (epoch ms), left by Spark jobs whose driver died; returns how many';
