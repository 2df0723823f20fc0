
-- Plain install only: which version this database holds (pgqueue install reads and advances it;
-- an extension install has pg_extension instead).
CREATE TABLE pgqueue.install (
    version      text        NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    upgraded_at  timestamptz,
    CONSTRAINT install_pkey PRIMARY KEY (version)
);
COMMENT ON TABLE pgqueue.install IS 'pgqueue plain install: the installed version (one row)';
-- recorded only inside the script's transaction (the marker of plain/guard.sql): the script's
-- SQL run statement by statement, out of its DO block, leaves no version, so pgqueue install
-- refuses the half-made schema
DO $$
BEGIN
    IF pg_catalog.current_setting('pgqueue.plain_script', true) IS NULL
       OR pg_catalog.current_setting('pgqueue.plain_script', true) OPERATOR(pg_catalog.<>) 'on' THEN
        RAISE EXCEPTION 'pgqueue installs in one transaction only: @VERSION@ is not recorded'
            USING ERRCODE = 'PQ008';
    END IF;
    INSERT INTO pgqueue.install (version) VALUES ('@VERSION@');
END;
$$;
