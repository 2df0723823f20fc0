-- Plain upgrade steps only, last: the new version, recorded only inside the script's transaction
-- (the marker of plain/guard.sql) and only over the version this step upgrades.
DO $$
BEGIN
    IF pg_catalog.current_setting('pgqueue.plain_script', true) IS NULL
       OR pg_catalog.current_setting('pgqueue.plain_script', true) OPERATOR(pg_catalog.<>) 'on' THEN
        RAISE EXCEPTION 'pgqueue installs in one transaction only: @TO@ is not recorded'
            USING ERRCODE = 'PQ008';
    END IF;
    UPDATE pgqueue.install SET version = '@TO@', upgraded_at = pg_catalog.now()
     WHERE version OPERATOR(pg_catalog.=) '@FROM@';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgqueue--@FROM@--@TO@.sql upgrades pgqueue @FROM@, which this database no longer holds'
            USING ERRCODE = 'PQ010';
    END IF;
END;
$$;
