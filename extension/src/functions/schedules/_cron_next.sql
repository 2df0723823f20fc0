-- The first minute strictly after p_after (epoch ms) that a five-field cron expression
-- (minute hour day-of-month month day-of-week, UTC; day-of-week 0-7 with 0 and 7 Sunday)
-- matches, in epoch ms. As in cron, when both day fields are restricted (neither starts with
-- '*') a day matching either is taken; otherwise a day must match both (so '*/2' in a day field
-- is its step, not "every day"). Raises 22023 for a malformed expression or one that matches no
-- day in 50 years (a February 29 that must be a given weekday can be 40 years away).
CREATE FUNCTION pgqueue._cron_next(p_cron text, p_after bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- (no backslash in a pattern: the body is parsed with the caller's standard_conforming_strings)
    v_f      text[] := regexp_split_to_array(regexp_replace(p_cron, '^[[:space:]]+|[[:space:]]+$', '', 'g'), '[[:space:]]+');
    v_min    integer[];
    v_hour   integer[];
    v_dom    integer[];
    v_month  integer[];
    v_dow    integer[];
    v_any_dom boolean;
    v_any_dow boolean;
    v_t      timestamp := date_trunc('minute', to_timestamp(p_after / 1000.0) AT TIME ZONE 'UTC') + interval '1 minute';
    v_day    date;
    v_from   integer;
    v_h      integer;
    v_m      integer;
BEGIN
    IF cardinality(v_f) <> 5 THEN
        RAISE EXCEPTION 'invalid cron expression "%": expected 5 fields (minute hour day month weekday)', p_cron
            USING ERRCODE = '22023', HINT = 'For example ''*/15 * * * *'' (every 15 minutes) or ''0 3 * * 1'' (Mondays 03:00 UTC).';
    END IF;
    v_min := pgqueue._cron_field(v_f[1], 0, 59);
    v_hour := pgqueue._cron_field(v_f[2], 0, 23);
    v_dom := pgqueue._cron_field(v_f[3], 1, 31);
    v_month := pgqueue._cron_field(v_f[4], 1, 12);
    v_dow := pgqueue._cron_field(v_f[5], 0, 7);
    IF v_min IS NULL OR v_hour IS NULL OR v_dom IS NULL OR v_month IS NULL OR v_dow IS NULL THEN
        RAISE EXCEPTION 'invalid cron expression "%"', p_cron
            USING ERRCODE = '22023',
                  HINT = 'Each field is *, a number, a range a-b, a step */s or a-b/s, or a comma list; minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-7.';
    END IF;
    IF 7 = ANY (v_dow) THEN
        v_dow := v_dow || 0;
    END IF;
    v_any_dom := v_f[3] LIKE '*%';
    v_any_dow := v_f[5] LIKE '*%';
    FOR i IN 0 .. 366 * 50 LOOP
        v_day := v_t::date + i;
        CONTINUE WHEN NOT extract(month FROM v_day)::integer = ANY (v_month);
        CONTINUE WHEN NOT CASE
            WHEN v_any_dom OR v_any_dow
            THEN extract(day FROM v_day)::integer = ANY (v_dom) AND extract(dow FROM v_day)::integer = ANY (v_dow)
            ELSE extract(day FROM v_day)::integer = ANY (v_dom) OR extract(dow FROM v_day)::integer = ANY (v_dow)
        END;
        v_from := CASE WHEN i = 0 THEN extract(hour FROM v_t)::integer * 60 + extract(minute FROM v_t)::integer ELSE 0 END;
        SELECT h, m INTO v_h, v_m
          FROM unnest(v_hour) h, unnest(v_min) m
         WHERE h * 60 + m >= v_from
         ORDER BY h, m LIMIT 1;
        IF FOUND THEN
            RETURN pgqueue.to_epoch((v_day + make_time(v_h, v_m, 0)) AT TIME ZONE 'UTC');
        END IF;
    END LOOP;
    RAISE EXCEPTION 'cron expression "%" matches no day in 50 years', p_cron USING ERRCODE = '22023';
END;
$$;
