-- Every name in the rest of the script resolves in pg_catalog (and pgqueue's own names are
-- written qualified): a plain install or upgrade (no extension files, extension/src/plain) runs
-- with the installing session's search_path, where an operator or function that another role
-- planted in public, say || (text, integer) or * (double precision, integer), would beat the
-- catalog's, which needs a cast: it would run with the installer's rights during the install
-- (the DO blocks below) and be bound for good into the SQL-standard bodies (now_ms, to_epoch,
-- ...), run by everyone who calls them. CREATE EXTENSION sets search_path to the schema (checked
-- below) itself. LOCAL: for this transaction only (the check below refuses to go on without one).
SET LOCAL search_path = pg_catalog, pg_temp;

-- Refuse to install into a schema that another role owns, that others may create objects in,
-- or that holds objects pgqueue did not create (PQ008). PostgreSQL creates the schema of
-- `CREATE EXTENSION pgqueue` (control file: schema = pgqueue) only when it is missing and
-- otherwise installs into whatever is there; a role that made the schema first could plant an
-- overload of a function pgqueue calls and have it run with the installer's rights. The same
-- holds for pg_restore into a database where such a schema was made before the restore: the
-- restore fails here, loudly. Runs first in the full install script, the plain install and
-- every upgrade delta (docs/security.md, "The schema").
--   extension: the schema's owner must be the extension's owner, and every object in the
--              schema a member of the extension;
--   plain:     the schema's owner must be the installing role, and every object in the schema
--              owned by it.
DO $$
DECLARE
    v_ns      oid;
    v_owner   oid;
    v_me      oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user);
    v_ext     oid;
    v_extown  oid;
    v_foreign text;
    v_who     text;
    v_grantee oid;
BEGIN
    IF pg_catalog.current_setting('search_path') OPERATOR(pg_catalog.<>) 'pg_catalog, pg_temp' THEN
        RAISE EXCEPTION 'pgqueue installs in one transaction only'
            USING ERRCODE = 'PQ008',
                  HINT = 'Run the script with psql -1 (--single-transaction), or use pgqueue install: '
                         'its search_path is pinned for the transaction (SET LOCAL).';
    END IF;
    SELECT n.oid, n.nspowner INTO v_ns, v_owner
      FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgqueue';
    SELECT e.oid, e.extowner INTO v_ext, v_extown
      FROM pg_catalog.pg_extension e WHERE e.extname = 'pgqueue';
    IF v_ns IS NULL THEN
        RAISE EXCEPTION 'schema pgqueue does not exist' USING ERRCODE = 'PQ008',
            HINT = 'A plain upgrade step upgrades an installed pgqueue: install it first (pgqueue install, or the '
                   'full plain script).';
    END IF;
    IF v_owner <> coalesce(v_extown, v_me) THEN
        RAISE EXCEPTION 'schema pgqueue is owned by role %, not by %, who installs pgqueue',
                        pg_catalog.pg_get_userbyid(v_owner),
                        pg_catalog.pg_get_userbyid(coalesce(v_extown, v_me))
            USING ERRCODE = 'PQ008',
                  HINT = 'pgqueue never installs into a schema someone else made: drop that schema '
                         '(after checking what it holds) or install as its owner. Restoring a dump? '
                         'Restore it as that role: pg_restore --role=<owner>, or psql -U <owner> for a '
                         'plain-format dump (pg_dumpall''s output runs as a superuser: dump this database '
                         'with pg_dump and restore it so).';
    END IF;
    -- An update creates objects owned by the role that runs it: run by another role (a
    -- superuser, say), the new tables, sequences and functions, SECURITY DEFINER ones included,
    -- would be that role's, and docs/grants.sql, run by the owner, could not grant them. (At
    -- CREATE EXTENSION the extension's owner is the role that runs it.)
    IF v_ext IS NOT NULL AND v_extown <> v_me THEN
        RAISE EXCEPTION 'pgqueue is updated by its owner %, not by %',
                        pg_catalog.pg_get_userbyid(v_extown), current_user
            USING ERRCODE = 'PQ008',
                  HINT = 'SET ROLE to that role first, or use pgqueue install, which does.';
    END IF;
    -- The same, after the fact: the updates to 0.2 and 0.3 (released, unchanged) did not refuse
    -- another role, and the objects one run by a superuser made are that role's; the owner's
    -- update then failed on the first of them, 42501 "permission denied for table spark_claim",
    -- and the superuser's was refused above: nobody could update (a review). Say which they are
    -- and what mends it.
    IF v_ext IS NOT NULL THEN
        SELECT pg_catalog.string_agg(o.what, ', ' ORDER BY o.what), pg_catalog.min(o.who)
          INTO v_foreign, v_who
          FROM (SELECT pg_catalog.pg_describe_object(d.classid, d.objid, 0) AS what,
                       pg_catalog.pg_get_userbyid(coalesce(c.relowner, p.proowner)) AS who
                  FROM pg_catalog.pg_depend d
                  LEFT JOIN pg_catalog.pg_class c
                         ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid = d.objid
                  LEFT JOIN pg_catalog.pg_proc p
                         ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = d.objid
                 WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.refobjid = v_ext
                   AND d.deptype = 'e' AND coalesce(c.relowner, p.proowner) <> v_extown) o;
        IF v_foreign IS NOT NULL THEN
            RAISE EXCEPTION 'pgqueue''s objects are owned by % where its owner is %: %',
                            v_who, pg_catalog.pg_get_userbyid(v_extown), pg_catalog.left(v_foreign, 500)
                USING ERRCODE = 'PQ008',
                      HINT = 'An update to 0.2 or 0.3 run by that role made them. As a superuser, give each to the '
                             'owner (ALTER TABLE, SEQUENCE or FUNCTION ... OWNER TO the owner), then update as the '
                             'owner (pgqueue install does).';
        END IF;
    END IF;
    -- A schema this transaction made (the plain script's CREATE SCHEMA, or CREATE EXTENSION's when
    -- it was missing) gets the owner's default privileges for schemas (ALTER DEFAULT PRIVILEGES
    -- ... GRANT CREATE ON SCHEMAS TO ...): CREATE for others, which the check below refused, and
    -- its hint, to revoke it, could not be followed, since the schema went with the failed
    -- install (a review). No other session has seen that schema yet, so the CREATE that those
    -- default privileges gave is taken back here, with a warning (it overrides what an
    -- administrator set up, and CREATE EXTENSION shows no notice of its script); a CREATE
    -- granted any other way (on a schema made before this transaction) is still refused.
    -- (Made by this transaction: the row's xmin is one of the transaction ids this session holds,
    -- the plain script's a subtransaction's, which its EXCEPTION clause opens.)
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n, pg_catalog.pg_locks l
                WHERE n.oid = v_ns AND l.locktype = 'transactionid' AND l.transactionid = n.xmin
                  AND l.pid = pg_catalog.pg_backend_pid() AND l.mode = 'ExclusiveLock' AND l.granted) THEN
        FOR v_grantee IN
            SELECT DISTINCT a.grantee
              FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
             WHERE n.oid = v_ns AND a.privilege_type = 'CREATE' AND a.grantee <> v_owner
               AND a.grantee IN (SELECT d.grantee
                                   FROM pg_catalog.pg_default_acl da, pg_catalog.aclexplode(da.defaclacl) d
                                  WHERE da.defaclrole = v_owner AND da.defaclnamespace = 0
                                    AND da.defaclobjtype = 'n' AND d.privilege_type = 'CREATE')
        LOOP
            EXECUTE pg_catalog.format('REVOKE CREATE ON SCHEMA pgqueue FROM %s',
                                      CASE WHEN v_grantee = 0 THEN 'PUBLIC'
                                           ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(v_grantee)) END);
            RAISE WARNING 'schema pgqueue: CREATE revoked from %, which the default privileges of role % granted on new schemas',
                         CASE WHEN v_grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(v_grantee)::text END,
                         pg_catalog.pg_get_userbyid(v_owner)
                USING HINT = 'pgqueue''s schema takes objects from its owner alone (docs/security.md, "The schema").';
        END LOOP;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
                WHERE n.oid = v_ns AND a.privilege_type = 'CREATE' AND a.grantee <> v_owner) THEN
        RAISE EXCEPTION 'roles other than its owner may create objects in schema pgqueue'
            USING ERRCODE = 'PQ008',
                  HINT = 'REVOKE CREATE ON SCHEMA pgqueue FROM PUBLIC (and every other grantee), then retry.';
    END IF;
    SELECT pg_catalog.string_agg(o.what, ', ' ORDER BY o.what) INTO v_foreign
      FROM (SELECT pg_catalog.pg_describe_object(o.classid, o.objid, 0) AS what, o.classid, o.objid, o.owner
              FROM (SELECT 'pg_catalog.pg_class'::pg_catalog.regclass AS classid, c.oid AS objid, c.relowner AS owner
                      FROM pg_catalog.pg_class c
                     WHERE c.relnamespace = v_ns AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
                    UNION ALL
                    SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid, p.proowner
                      FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid, t.typowner
                      FROM pg_catalog.pg_type t
                     WHERE t.typnamespace = v_ns
                       AND (t.typrelid = 0 OR (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid) = 'c')
                       AND NOT EXISTS (SELECT FROM pg_catalog.pg_type e WHERE e.typarray = t.oid)
                    UNION ALL
                    SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid, o.oprowner
                      FROM pg_catalog.pg_operator o WHERE o.oprnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, c.oid, c.collowner
                      FROM pg_catalog.pg_collation c WHERE c.collnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass, c.oid, c.conowner
                      FROM pg_catalog.pg_conversion c WHERE c.connamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, f.oid, f.opfowner
                      FROM pg_catalog.pg_opfamily f WHERE f.opfnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass, c.oid, c.cfgowner
                      FROM pg_catalog.pg_ts_config c WHERE c.cfgnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass, d.oid, d.dictowner
                      FROM pg_catalog.pg_ts_dict d WHERE d.dictnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, s.oid, s.stxowner
                      FROM pg_catalog.pg_statistic_ext s WHERE s.stxnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_extension'::pg_catalog.regclass, e.oid, e.extowner
                      FROM pg_catalog.pg_extension e
                     WHERE e.extnamespace = v_ns AND e.oid IS DISTINCT FROM v_ext) o) o
     WHERE CASE WHEN v_ext IS NOT NULL
                THEN NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                                  WHERE d.classid = o.classid AND d.objid = o.objid
                                    AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                                    AND d.refobjid = v_ext AND d.deptype = 'e')
                ELSE o.owner <> v_owner END;
    -- CREATE EXTENSION (which has made its pg_extension row by now) over a plain install: its
    -- objects are "not the extension's", but they are pgqueue, so say what they are
    IF v_foreign IS NOT NULL AND v_ext IS NOT NULL
       AND pg_catalog.to_regclass('pgqueue.install') IS NOT NULL
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                        WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                          AND d.objid = pg_catalog.to_regclass('pgqueue.install')
                          AND d.refobjid = v_ext AND d.deptype = 'e') THEN
        RAISE EXCEPTION 'schema pgqueue holds a plain install of pgqueue (no extension files): CREATE EXTENSION does not take it over'
            USING ERRCODE = 'PQ008',
                  HINT = 'Upgrade it with pgqueue install, or uninstall it (pgqueue uninstall) before CREATE EXTENSION pgqueue.';
    END IF;
    IF v_foreign IS NOT NULL THEN
        RAISE EXCEPTION 'schema pgqueue holds objects pgqueue did not create: %', pg_catalog.left(v_foreign, 500)
            USING ERRCODE = 'PQ008',
                  HINT = 'Someone else put them there: find out who before anything runs them, then '
                         'drop them (or the schema) and retry.';
    END IF;
END;
$$;
