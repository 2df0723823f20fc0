-- pgqueue, plain SQL install (no extension files on the server): run as the role that is to own
-- pgqueue, in a database where it has CREATE, e.g. `psql -v ON_ERROR_STOP=1 -1 -f <this file>`,
-- or let `pgqueue install --dsn ...` do it. The schema must not exist yet.
-- (plain/guard.sql, before this, pins the search_path for the script's transaction.)
CREATE SCHEMA pgqueue;
