-- Plain scripts only (an install or an upgrade step), first inside the DO block of
-- plain/open.sql, which makes the script one statement and so one transaction however it is
-- run. The search_path pin below holds for that transaction: nothing after it binds an operator,
-- function or type another role planted in the caller's search_path. The marker,
-- pgqueue.plain_script, lives as long as the transaction; the statement that records the
-- version (plain/end.sql, plain/step_end.sql) refuses without it, and the check below refuses
-- (PQ008) when it did not take: the SQL inside the block, copied out and run statement by
-- statement, would commit each statement on its own, unpinned. (A marker of its own rather than
-- the search_path, which a role's settings may hold already; and no session-wide setting, which a
-- transaction-mode pooler would leave on a server connection that other clients then use.)
SET LOCAL search_path = pg_catalog, pg_temp;
SET LOCAL pgqueue.plain_script = 'on';
DO $$
BEGIN
    IF pg_catalog.current_setting('pgqueue.plain_script', true) IS NULL
       OR pg_catalog.current_setting('pgqueue.plain_script', true) OPERATOR(pg_catalog.<>) 'on' THEN
        RAISE EXCEPTION 'pgqueue installs in one transaction only'
            USING ERRCODE = 'PQ008',
                  HINT = 'Run the whole script as make builds it (one DO block), or use pgqueue install; '
                         'what its statements make when run one by one is never recorded as installed.';
    END IF;
END;
$$;
