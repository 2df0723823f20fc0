-- Map a priority (0 = lowest of the prioritised, larger = sooner) onto dequeue_at.
CREATE FUNCTION pgqueue.priority_dequeue_at(p_priority integer)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_priority < 0 THEN
        RAISE EXCEPTION 'priority must be >= 0, got %', p_priority
            USING ERRCODE = '22023',
                  HINT = 'Priorities run from 0 upwards; larger values are delivered first.';
    END IF;
    RETURN -1::bigint - p_priority;
END;
$$;

COMMENT ON FUNCTION pgqueue.priority_dequeue_at(integer) IS
    'dequeue_at for a prioritised message: -1 - priority, so it is ahead of every normal message and larger priorities go first';
