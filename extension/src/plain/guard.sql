-- Plain scripts only (an install or an upgrade step), first: outside a transaction block (psql
-- without -1) each statement would commit on its own, and the checks that refuse that (PQ008)
-- stop only a psql run with ON_ERROR_STOP; without it psql prints the error and runs the rest,
-- statement by statement, without the pinned search_path and past every other check. So there,
-- and only there, this session is first made read-only (default_transaction_read_only, not
-- LOCAL, which would not outlive this statement): every statement after this one then fails with
-- 25006 and nothing is made or recorded, whatever psql's options. Reconnect to run the script
-- again. (SET LOCAL does nothing outside a transaction block: that is the test.)
SET LOCAL search_path = pg_catalog, pg_temp;
DO $$
BEGIN
    IF pg_catalog.current_setting('search_path') OPERATOR(pg_catalog.<>) 'pg_catalog, pg_temp' THEN
        PERFORM pg_catalog.set_config('default_transaction_read_only', 'on', false);
    END IF;
END;
$$;
