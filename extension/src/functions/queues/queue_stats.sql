-- Count a queue's messages by state, cheaply enough to be called every second beside full load:
-- each count is exact up to 10,000 (a count that stops there, through the index its state has);
-- a larger one is estimated from a block sample of the table (TABLESAMPLE SYSTEM of 2,048 pages,
-- 16 MB, or the whole table if it is smaller). pgqueue.queue_stats_exact counts everything.
-- Counting a million messages exactly takes 0.1 s of a core (docs/benchmarks.md, target 9).
CREATE FUNCTION pgqueue.queue_stats(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, dead bigint,
               oldest_ready_age_ms bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    c_cap     CONSTANT bigint := 10000;
    v_now     bigint := pgqueue.now_ms();
    v_q       record;
    v_ready   bigint;
    v_expired bigint;
    v_sched   bigint;
    v_leased  bigint;
    v_dead    bigint;
    v_oldest  bigint;
    v_pct     float8;
    v_s       record;
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    FOR v_q IN SELECT q.id, q.name FROM pgqueue.queue q
                WHERE p_queue IS NULL OR q.name = p_queue ORDER BY q.name LOOP
        SELECT (SELECT count(*) FROM (SELECT FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now
                 LIMIT c_cap + 1) s),
               (SELECT count(*) FROM (SELECT FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now
                 LIMIT c_cap + 1) s),
               (SELECT count(*) FROM (SELECT FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NULL AND m.dequeue_at > v_now
                 LIMIT c_cap + 1) s),
               (SELECT count(*) FROM (SELECT FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NOT NULL AND m.locked_until > v_now
                 LIMIT c_cap + 1) s),
               (SELECT count(*) FROM (SELECT FROM pgqueue.dead_letter d
                 WHERE d.queue_id = v_q.id LIMIT c_cap + 1) s),
               (SELECT v_now - greatest(m.dequeue_at, m.created_at) FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now
                 ORDER BY m.dequeue_at, m.id LIMIT 1)
          INTO v_ready, v_expired, v_sched, v_leased, v_dead, v_oldest;
        IF greatest(v_ready, v_expired, v_sched, v_leased) > c_cap THEN
            -- 2,048 pages of the table, at least 1%; each sampled row stands for 100/pct
            v_pct := least(100, greatest(1, 204800.0 / greatest(1, pg_relation_size('pgqueue.message') / 8192)));
            SELECT count(*) FILTER (WHERE m.locked_until IS NULL AND m.dequeue_at <= v_now) AS ready,
                   count(*) FILTER (WHERE m.locked_until <= v_now) AS expired,
                   count(*) FILTER (WHERE m.locked_until IS NULL AND m.dequeue_at > v_now) AS sched,
                   count(*) FILTER (WHERE m.locked_until > v_now) AS leased
              INTO v_s
              FROM pgqueue.message m TABLESAMPLE SYSTEM (v_pct)
             WHERE m.queue_id = v_q.id;
            IF v_ready > c_cap THEN v_ready := greatest(c_cap + 1, round(v_s.ready * 100 / v_pct)::bigint); END IF;
            IF v_expired > c_cap THEN v_expired := greatest(c_cap + 1, round(v_s.expired * 100 / v_pct)::bigint); END IF;
            IF v_sched > c_cap THEN v_sched := greatest(c_cap + 1, round(v_s.sched * 100 / v_pct)::bigint); END IF;
            IF v_leased > c_cap THEN v_leased := greatest(c_cap + 1, round(v_s.leased * 100 / v_pct)::bigint); END IF;
        END IF;
        IF v_dead > c_cap THEN
            v_pct := least(100, greatest(1, 204800.0 / greatest(1, pg_relation_size('pgqueue.dead_letter') / 8192)));
            SELECT greatest(c_cap + 1, round(count(*) * 100 / v_pct)::bigint) INTO v_dead
              FROM pgqueue.dead_letter d TABLESAMPLE SYSTEM (v_pct)
             WHERE d.queue_id = v_q.id;
        END IF;
        queue := v_q.name;
        ready := v_ready + v_expired;
        scheduled := v_sched;
        leased := v_leased;
        dead := v_dead;
        oldest_ready_age_ms := v_oldest;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_stats(text) IS
    'Per queue: ready (incl. expired leases), scheduled, leased and dead counts (exact up to 10,000 each, estimated from a sample above: see queue_stats_exact), and how long the next ready message has waited (ms)';
