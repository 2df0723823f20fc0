-- Start a rate-limited queue's slots afresh (queue_create and queue_alter, when they set a rate):
-- its sequence's last slot at the catch-up allowance's start, as after a while idle, so that
-- the queue neither inherits slots taken ahead of the clock (by a dropped queue of the same
-- stripe, or by itself at an earlier limit) nor waits for them. After the row is written: the
-- unique index queue_rate_stripe_key has then made the stripe this queue's (setval is not
-- rolled back; a rolled-back call only gave its own queue a fresh start).
CREATE FUNCTION pgqueue._rate_reset(p_queue_id integer, p_rate integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM setval(pgqueue._rate_seq(p_queue_id),
                   floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint - (p_rate + 19) / 20);
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_reset(integer, integer) IS
    'pgqueue internal: start a rate-limited queue''s slots afresh (its catch-up allowance due now)';
