-- No role but the extension's owner can run pgqueue's SECURITY DEFINER functions until the
-- recipes of docs/grants.sql grant them (_queue_quiesce to administrators, schedule_run and the
-- admission, pin and group-lock helpers to the roles whose calls need them): each function
-- revokes EXECUTE from PUBLIC, but the installing role's default privileges (ALTER DEFAULT
-- PRIVILEGES ... GRANT EXECUTE ON FUNCTIONS TO an application role, as managed setups often
-- have) gave it to that role on creation, and with it the owner's rights through them: stop any
-- queue, fire the schedules, hold a capped queue's admission or a group's lock (a review). Taken
-- back here, after every function is made (as queue_size's privileges, tables/queue_size.sql).
DO $$
DECLARE
    v_fn      pg_catalog.regprocedure;
    v_grantee text;
BEGIN
    FOR v_fn, v_grantee IN
        SELECT DISTINCT p.oid::pg_catalog.regprocedure,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.pronamespace = 'pgqueue'::pg_catalog.regnamespace AND p.prosecdef
           AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', v_fn, v_grantee);
    END LOOP;
END;
$$;
