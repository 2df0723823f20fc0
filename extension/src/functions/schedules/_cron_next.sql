-- The first minute strictly after p_after (epoch ms) that a five-field cron expression
-- (minute hour day-of-month month day-of-week, UTC; day-of-week 0-7 with 0 and 7 Sunday)
-- matches, in epoch ms. As in cron, when both day fields are restricted (neither starts with
-- '*') a day matching either is taken; otherwise a day must match both (so '*/2' in a day field
-- is its step, not "every day"). Raises 22023 for a malformed expression or one that matches no
-- day in 50 years (a February 29 that must be a given weekday can be 40 years away). The first
-- slot of pgqueue._cron_slots, which does the work.
CREATE FUNCTION pgqueue._cron_next(p_cron text, p_after bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (pgqueue._cron_slots(p_cron, p_after, 9223372036854775807, 1))[1];
END;
$$;
