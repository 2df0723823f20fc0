-- Plain upgrade steps only, after the schema check: this step upgrades @FROM@ to @TO@ and
-- nothing else. A step run on another version (a step skipped, run twice, or out of order) or on
-- a database without a plain install (none, or pgqueue as an extension) would fail on whichever
-- object it met first, or worse without -1: refused here (PQ010), before it changes anything.
DO $$
DECLARE
    v_version text;
BEGIN
    IF pg_catalog.to_regclass('pgqueue.install') IS NULL THEN
        RAISE EXCEPTION 'this database has no plain install of pgqueue for pgqueue--@FROM@--@TO@.sql to upgrade'
            USING ERRCODE = 'PQ010',
                  HINT = CASE WHEN EXISTS (SELECT FROM pg_catalog.pg_extension e WHERE e.extname = 'pgqueue')
                              THEN 'pgqueue is an extension here: upgrade it with ALTER EXTENSION pgqueue UPDATE.'
                              ELSE 'Install pgqueue first (pgqueue install, or the full plain script).' END;
    END IF;
    SELECT i.version INTO v_version FROM pgqueue.install i;
    IF v_version IS DISTINCT FROM '@FROM@' THEN
        RAISE EXCEPTION 'pgqueue--@FROM@--@TO@.sql upgrades pgqueue @FROM@, but this database holds %',
                        coalesce(v_version, 'no version')
            USING ERRCODE = 'PQ010',
                  HINT = 'Run the step scripts from the version installed on, one after the other, or let pgqueue install choose them.';
    END IF;
END;
$$;
