-- pgqueue, plain SQL install (no extension files on the server): run as the role that is to own
-- pgqueue, in a database where it has CREATE, e.g. `psql -v ON_ERROR_STOP=1 -1 -f <this file>`,
-- or let `pgqueue install --dsn ...` do it. The schema must not exist yet.
-- Names resolve in pg_catalog, not in the session's search_path (extension/src/schema.sql says
-- why); LOCAL, so outside a transaction it would not hold: refused before anything is made.
SET LOCAL search_path = pg_catalog, pg_temp;
DO $$
BEGIN
    IF pg_catalog.current_setting('search_path') OPERATOR(pg_catalog.<>) 'pg_catalog, pg_temp' THEN
        RAISE EXCEPTION 'pgqueue installs in one transaction only'
            USING ERRCODE = 'PQ008',
                  HINT = 'Run the script with psql -1 (--single-transaction), or use pgqueue install: '
                         'its search_path is pinned for the transaction (SET LOCAL).';
    END IF;
END;
$$;
CREATE SCHEMA pgqueue;
