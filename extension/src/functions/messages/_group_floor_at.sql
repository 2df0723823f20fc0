-- The floor in a value of the setting pgqueue.group_floor_<queue id>_<group's stripe>,
-- '<queue stripe>/<floor>/<group>' (pgqueue._group_floor_keep), if it is the group's and the
-- stripe is p_stripe; NULL otherwise. Inlined: no call at run time.
CREATE FUNCTION pgqueue._group_floor_at(p_value text, p_group text, p_stripe bigint)
RETURNS bigint
LANGUAGE sql STABLE
RETURN CASE WHEN p_value OPERATOR(pg_catalog.=) (pg_catalog.split_part(p_value, '/', 1) || '/' || pg_catalog.split_part(p_value, '/', 2) || '/' || p_group)
                 AND pg_catalog.split_part(p_value, '/', 1) OPERATOR(pg_catalog.=) p_stripe::text
                 AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'repeatable read'
                 AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'serializable'
            THEN pg_catalog.split_part(p_value, '/', 2)::bigint END;

COMMENT ON FUNCTION pgqueue._group_floor_at(text, text, bigint) IS
    'pgqueue internal: the floor in a value of a group floor setting, if it is the group''s and the stripe''s';
