
-- Plain install only: which version this database holds (pgqueue install reads and advances it;
-- an extension install has pg_extension instead).
CREATE TABLE pgqueue.install (
    version      text        NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    upgraded_at  timestamptz,
    CONSTRAINT install_pkey PRIMARY KEY (version)
);
COMMENT ON TABLE pgqueue.install IS 'pgqueue plain install: the installed version (one row)';
INSERT INTO pgqueue.install (version) VALUES ('@VERSION@');
