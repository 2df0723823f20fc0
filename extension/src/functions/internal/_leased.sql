-- Whether a message row is leased (locked_until is set), for the statements that find a message
-- by its id (acknowledgements). Written as a CASE, not "locked_until IS NOT NULL": the planner
-- cannot prove message_leased_idx's predicate from a CASE, so those statements always probe
-- message_pkey. From "IS NOT NULL", statistics taken while nothing was leased made a generic
-- plan walk the whole leased index for the id, on every acknowledgement: a cost that grew with
-- the leases in flight and, under a held snapshot, with every lease since it began
-- (tests/test_index_probes.py). Inlined: no call at run time.
CREATE FUNCTION pgqueue._leased(p_locked_until bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN p_locked_until IS NULL THEN false ELSE true END;

COMMENT ON FUNCTION pgqueue._leased(bigint) IS
    'pgqueue internal: locked_until IS NOT NULL, in a form that keeps by-id statements on message_pkey';
