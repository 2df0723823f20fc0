-- The counters of pgqueue.queue_counters: six sequences per lock stripe,
-- pgqueue.counter_<kind>_<stripe> (pgqueue._count_seq), kinds enqueued, delivered, completed,
-- failed, dead and expired. A queue counts on its stripe's six (queue id & 63); queue_create
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
END;
$$;
