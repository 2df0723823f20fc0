-- Count a move to the dead letters (pgqueue._dead_letter): dead_lettered, and expired if the
-- message's lease had run out at p_now; always true. PL/pgSQL so that its expression is planned
-- once per session, not with each call of the SQL function _dead_letter (see _counted).
CREATE FUNCTION pgqueue._counted_dead(p_queue_id integer, p_locked_until bigint, p_now bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pgqueue._counted(p_queue_id, 4)
       AND (p_locked_until IS NULL OR p_locked_until > p_now OR pgqueue._counted(p_queue_id, 5));
END;
$$;

COMMENT ON FUNCTION pgqueue._counted_dead(integer, bigint, bigint) IS
    'pgqueue internal: count a message moved to the dead letters (and an expired lease if its lease had run out at p_now); always true';
