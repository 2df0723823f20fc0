-- Rate limits (issue 14): 64 sequences, pgqueue.queue_rate_<id & 63>, one per rate-limited queue
-- (two rate-limited queues on one stripe are refused, 22023: the unique index
-- queue_rate_stripe_key). The value is the
-- last slot handed out: slot s is due at s / rate_limit seconds since the epoch, so a queue hands
-- out a message only for a slot that is due (pgqueue._rate_room), and every message handed out
-- takes the next slot (pgqueue._rate_take). A sequence leaves no dead tuples, unlike a row that
-- every dequeue would update; nextval is not rolled back, so a rolled-back dequeue still used its
-- slots.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_rate_%s', i);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_rate_%s IS %L', i,
            'pgqueue internal: rate-limit slots of the rate-limited queue whose id & 63 = ' || i);
    END LOOP;
END;
$$;
