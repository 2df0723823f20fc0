-- The floor in a value of the setting pgqueue.group_floor_<queue id>_<group's stripe>,
-- '<queue stripe>/<floor>/<xid>/<group>' (kept by pgqueue._message_group_room), if it is the
-- group's, the stripe is p_stripe, and the transaction that kept it (xid) committed or is this
-- one; NULL otherwise. The xid: a PREPARE TRANSACTION keeps a transaction's settings as a commit
-- does, and a ROLLBACK PREPARED then brings back the message with the turn that the
-- transaction's own DELETE had hidden from the probe that kept the floor, below it (a review).
-- VOLATILE as pg_xact_status is, so that it is inlined (a STABLE function with a volatile body
-- is called instead): no call at run time.
CREATE FUNCTION pgqueue._group_floor_at(p_value text, p_group text, p_stripe bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN CASE WHEN p_value OPERATOR(pg_catalog.=) (pg_catalog.split_part(p_value, '/', 1) || '/' || pg_catalog.split_part(p_value, '/', 2) || '/'
                                                 || pg_catalog.split_part(p_value, '/', 3) || '/' || p_group)
                 AND pg_catalog.split_part(p_value, '/', 1) OPERATOR(pg_catalog.=) p_stripe::text
                 AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'repeatable read'
                 AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'serializable'
            THEN CASE WHEN pg_catalog.pg_xact_status(pg_catalog.split_part(p_value, '/', 3)::xid8) OPERATOR(pg_catalog.=) 'committed'
                           OR pg_catalog.split_part(p_value, '/', 3)::xid8 OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned()
                      THEN pg_catalog.split_part(p_value, '/', 2)::bigint END END;

COMMENT ON FUNCTION pgqueue._group_floor_at(text, text, bigint) IS
    'pgqueue internal: the floor in a value of a group floor setting, if it is the group''s and the stripe''s and its transaction committed';
