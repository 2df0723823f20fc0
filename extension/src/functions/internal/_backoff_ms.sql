-- Exponential back-off with equal jitter for the n-th failed attempt: d = min(cap, base * 2^(n-1)),
-- result uniformly in [d/2, d].
CREATE FUNCTION pgqueue._backoff_ms(p_attempts integer, p_base_ms bigint, p_cap_ms bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT (d / 2 + floor(random() * (d - d / 2 + 1)))::bigint
      FROM (SELECT least(p_cap_ms::float8,
                         p_base_ms * power(2::float8, least(greatest(p_attempts - 1, 0), 60)))::bigint AS d) s;
END;
