-- The slots of a cron schedule's 'all' catch-up: 10,000 minutes of '* * * * *' as one call of
-- pgqueue._cron_slots (session 54) against a chain of 10,000 _cron_next calls (how
-- _schedule_fire made them before). Run with psql in a database with pgqueue, after
-- `\i` of the old _cron_next renamed public.old_cron_next, made by:
--   git show 30d3e3b:extension/src/functions/schedules/_cron_next.sql \
--     | sed 's/CREATE FUNCTION pgqueue._cron_next/CREATE FUNCTION public.old_cron_next/' > /tmp/oldcron.sql
\timing on
SELECT cardinality(pgqueue._cron_slots('* * * * *', 0, 9223372036854775807, 10000));
WITH RECURSIVE chain(n, slot) AS (
    SELECT 1, public.old_cron_next('* * * * *', 0)
    UNION ALL SELECT n + 1, public.old_cron_next('* * * * *', slot) FROM chain WHERE n < 10000)
SELECT count(*) FROM chain;
SELECT cardinality(o_slots) FROM pgqueue._schedule_fire('default', 'x', NULL, NULL, '* * * * *', 'all', 0, 600000000, 10000, false);
