-- Plain scripts only (an install or an upgrade step), first. They must run in one transaction
-- (psql -1, or pgqueue install): the search_path pin below and every check after it are LOCAL
-- to a transaction. Outside one, each statement would commit on its own, and psql without
-- ON_ERROR_STOP goes on after an error: so the refusal here (PQ008) is not all. The marker set
-- here, pgqueue.plain_script, lives only as long as the transaction, and the statement that
-- records the version (plain/end.sql, plain/step_end.sql) refuses without it: a script run
-- statement by statement never records a version, so pgqueue install and the version checks
-- see it as the damaged install it is, never as installed. (A marker of its own rather than the
-- search_path, which a role's settings may hold already; and no session-wide setting, which a
-- transaction-mode pooler would leave on a server connection that other clients then use.)
SET LOCAL search_path = pg_catalog, pg_temp;
SET LOCAL pgqueue.plain_script = 'on';
DO $$
BEGIN
    IF pg_catalog.current_setting('pgqueue.plain_script', true) IS NULL
       OR pg_catalog.current_setting('pgqueue.plain_script', true) OPERATOR(pg_catalog.<>) 'on' THEN
        RAISE EXCEPTION 'pgqueue installs in one transaction only'
            USING ERRCODE = 'PQ008',
                  HINT = 'Run the script with psql -1 -v ON_ERROR_STOP=1, or use pgqueue install. Without '
                         'ON_ERROR_STOP psql goes on after this error; what it makes then is never recorded '
                         'as installed.';
    END IF;
END;
$$;
