-- The values a field of a cron expression allows, from p_min to p_max: *, n, a-b, */s, a-b/s
-- and comma lists of those. NULL if the field is malformed or out of range.
CREATE FUNCTION pgqueue._cron_field(p_field text, p_min integer, p_max integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part  text;
    v_m     text[];
    v_lo    integer;
    v_hi    integer;
    v_step  integer;
    v_out   integer[] := '{}';
BEGIN
    FOREACH v_part IN ARRAY string_to_array(p_field, ',') LOOP
        -- (no backslash in a pattern: the body is parsed with the caller's standard_conforming_strings)
        v_m := regexp_match(v_part, '^([*]|([0-9]{1,2})(-([0-9]{1,2}))?)(/([0-9]{1,2}))?$');
        IF v_m IS NULL THEN
            RETURN NULL;
        END IF;
        IF v_m[1] = '*' THEN
            v_lo := p_min;
            v_hi := p_max;
        ELSE
            v_lo := v_m[2]::integer;
            v_hi := coalesce(v_m[4]::integer, CASE WHEN v_m[6] IS NULL THEN v_lo ELSE p_max END);
        END IF;
        v_step := coalesce(v_m[6]::integer, 1);
        IF v_lo < p_min OR v_hi > p_max OR v_lo > v_hi OR v_step < 1 THEN
            RETURN NULL;
        END IF;
        v_out := v_out || ARRAY(SELECT generate_series(v_lo, v_hi, v_step));
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT u FROM unnest(v_out) u ORDER BY u);
END;
$$;
