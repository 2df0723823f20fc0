-- The minutes strictly after p_after (epoch ms) and at or before p_upto that a five-field cron
-- expression matches, in epoch ms, in order, at most p_limit of them (the rules of
-- pgqueue._cron_next, which is this function's first slot). The expression is parsed once and
-- each matching day's minutes come from one sorted list, so a catch-up of many slots
-- (pgqueue._schedule_fire, missed = 'all') costs a few microseconds a slot, where a
-- _cron_next call a slot parsed the expression every time (10,000 slots of '* * * * *': 5.3 s,
-- a review). Raises 22023 for a malformed expression, or one that matches no day in the 50
-- years after p_after (within p_upto: an empty array when p_upto comes first), as _cron_next
-- does; stops at the last slot found when the next is more than 50 years after it (a chain of
-- _cron_next calls would raise there); an empty array when p_limit < 1.
CREATE FUNCTION pgqueue._cron_slots(p_cron text, p_after bigint, p_upto bigint, p_limit integer)
RETURNS bigint[]
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
    v_hm     integer[];  -- the minutes of a matching day, h * 60 + m, in order
    v_any_dom boolean;
    v_any_dow boolean;
    v_t      timestamp := date_trunc('minute', to_timestamp(p_after / 1000.0) AT TIME ZONE 'UTC') + interval '1 minute';
    v_from   integer := extract(hour FROM v_t)::integer * 60 + extract(minute FROM v_t)::integer;
    v_day    date;
    v_base   bigint;
    v_slot   bigint;
    v_out    bigint[] := '{}';
    v_first  boolean := true;   -- the day of p_after: only its minutes after it
    v_gap    integer := 0;      -- days since the last slot (or p_after)
    v_match  boolean;
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
    v_hm := ARRAY(SELECT DISTINCT h * 60 + m FROM unnest(v_hour) h, unnest(v_min) m ORDER BY 1);
    v_day := v_t::date;
    v_base := pgqueue.to_epoch(v_day::timestamp AT TIME ZONE 'UTC');
    LOOP
        IF v_base > p_upto THEN
            RETURN v_out;  -- (p_upto before the first day's end: the minutes after it are left out below)
        END IF;
        IF v_gap > 366 * 50 THEN
            EXIT WHEN cardinality(v_out) = 0;
            RETURN v_out;  -- (the next slot is more than 50 years away: _cron_next raises for it)
        END IF;
        v_match := extract(month FROM v_day)::integer = ANY (v_month) AND CASE
            WHEN v_any_dom OR v_any_dow
            THEN extract(day FROM v_day)::integer = ANY (v_dom) AND extract(dow FROM v_day)::integer = ANY (v_dow)
            ELSE extract(day FROM v_day)::integer = ANY (v_dom) OR extract(dow FROM v_day)::integer = ANY (v_dow)
        END;
        IF v_match THEN
            FOREACH v_slot IN ARRAY v_hm LOOP
                CONTINUE WHEN v_first AND v_slot < v_from;
                v_gap := 0;
                v_slot := v_base + v_slot * 60000;
                IF v_slot > p_upto OR cardinality(v_out) >= p_limit THEN
                    RETURN v_out;
                END IF;
                v_out := v_out || v_slot;
            END LOOP;
        END IF;
        v_first := false;
        v_day := v_day + 1;
        v_base := v_base + 86400000;
        v_gap := v_gap + 1;
    END LOOP;
    RAISE EXCEPTION 'cron expression "%" matches no day in 50 years', p_cron USING ERRCODE = '22023';
END;
$$;

COMMENT ON FUNCTION pgqueue._cron_slots(text, bigint, bigint, integer) IS
    'pgqueue internal: the minutes after p_after and up to p_upto (epoch ms, UTC) that a cron expression matches, at most p_limit';
