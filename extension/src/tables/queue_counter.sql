-- The counters of pgqueue.queue_counters: six sequences per lock stripe,
-- pgqueue.counter_<kind>_<stripe> (pgqueue._count_seq), kinds enqueued, delivered, completed,
-- failed, dead and expired, and for the three that batches advance (enqueued, delivered,
-- completed) a companion counter_<kind>32_<stripe> that counts by 32, so that a batch of n adds
-- n in at most 31 + n / 32 nextval calls (pgqueue._counted_n); a counter is the sum of the two.
-- A queue counts on its stripe's nine (queue id & 63); queue_create
-- gives each new queue a stripe no other queue uses while there are at most 64, and starts its
-- counters at zero. Sequences because nextval writes no row version: a counter row that every
-- call updated would pile up dead versions under a held snapshot (docs/performance.md, "Held
-- snapshots"). nextval is not rolled back, so a counted call that rolls back stays counted.
DO $$
DECLARE
    v_kind text;
BEGIN
    FOREACH v_kind IN ARRAY ARRAY['enqueued', 'delivered', 'completed', 'failed', 'dead', 'expired'] LOOP
        FOR i IN 0..63 LOOP
            EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.counter_%s_%s', v_kind, i);
            EXECUTE pg_catalog.format(
                'COMMENT ON SEQUENCE pgqueue.counter_%s_%s IS %L', v_kind, i,
                'pgqueue internal: messages ' || v_kind || ' on the queue whose id & 63 = ' || i
                || ' (pgqueue.queue_counters)');
        END LOOP;
    END LOOP;
    FOREACH v_kind IN ARRAY ARRAY['enqueued', 'delivered', 'completed'] LOOP
        FOR i IN 0..63 LOOP
            EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.counter_%s32_%s INCREMENT BY 32 MINVALUE 0 START WITH 32',
                                      v_kind, i);
            EXECUTE pg_catalog.format(
                'COMMENT ON SEQUENCE pgqueue.counter_%s32_%s IS %L', v_kind, i,
                'pgqueue internal: messages ' || v_kind || ' by 32 at a time (batches) on the queue whose id & 63 = '
                || i || ' (pgqueue.queue_counters)');
        END LOOP;
    END LOOP;
END;
$$;
