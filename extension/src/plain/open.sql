-- pgqueue, plain SQL script (no extension files on the server), built by make from
-- extension/src/: edit the sources, not this file. The whole script is one statement, this DO
-- block, which runs the SQL below with EXECUTE: it commits whole or not at all, however it is
-- run (psql with or without -1 or ON_ERROR_STOP, pgqueue install, any client that sends it as
-- one text, inside a transaction or not). Run as the role that is to own pgqueue, e.g.
-- `psql -v ON_ERROR_STOP=1 -1 -f <this file>`, or let `pgqueue install --dsn ...` do it.
DO $pgqueue_plain$
DECLARE  -- (pg_catalog.text: out here the caller's search_path is not pinned yet)
    -- the caller's settings, given back once the script has run: inside a caller's transaction
    -- (a migration tool's) the script's SET LOCALs (plain/guard.sql) would otherwise hold for
    -- the rest of it, and the caller's unqualified names resolve in pg_catalog
    v_path   pg_catalog.text := pg_catalog.current_setting('search_path');
    v_mark   pg_catalog.text := pg_catalog.current_setting('pgqueue.plain_script', true);
    v_state  pg_catalog.text;
    v_text   pg_catalog.text;
    v_detail pg_catalog.text;
    v_hint   pg_catalog.text;
BEGIN
    EXECUTE $pgqueue_script$
