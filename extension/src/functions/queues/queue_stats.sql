-- Count a queue's messages by state, cheaply enough to be called every second beside full load:
-- each count is exact up to 10,000 (a count that stops there, through the index its state has);
-- a larger one is estimated from a block sample of the table (TABLESAMPLE SYSTEM of 2,048 pages,
-- 16 MB, at least 1% of the table, or the whole table if it is smaller; the fewer pages a
-- queue's messages fill, the larger the error: README), one sample for all the queues that need it (a
-- sample each cost a scrape of ten large queues ten times as much). pgqueue.queue_stats_exact
-- counts everything.
-- Counting a million messages exactly takes 0.25-1 s of a core (more for wider rows: README).
--
-- oldest_ready_age_ms is how long the ready message that has waited longest has waited, not
-- the next one's: a message waits from greatest(dequeue_at, created_at) (a prioritised or
-- past-dated one from its creation, though it sits ahead of the others), an expired lease from
-- when it ran out. A fresh prioritised message at the head must not hide a backlog that waits
-- behind it, nor leases that ran out with no consumer left to take them back, which are what an
-- alert on this age is for. The walk in (dequeue_at, id) order stops at the first message with
-- dequeue_at >= created_at: every later one waits from its dequeue_at or later, so none has
-- waited longer. One row unless prioritised or past-dated messages are ahead; at most c_ahead
-- of them are read (then from the first one that is not prioritised again), so the age is exact
-- unless more than 1,000 such messages are ready, and then a lower bound.
-- enable_seqscan is off, as in message_complete: the loop's statements go to a generic plan after
-- five queues, planned for any queue, and when one queue held most of a table of small rows that
-- plan of the dead letters' capped count was a scan of the whole table, for every queue (300
-- queues, 20,000 dead letters in one: a scrape took 190 ms instead of 9, a review). The samples
-- are sample scans, which the setting leaves alone.
CREATE FUNCTION pgqueue.queue_stats(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, dead bigint,
               oldest_ready_age_ms bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
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
    c_ahead   CONSTANT integer := 1000;
    v_from    bigint;
    v_n       integer;
    v_more    boolean;
    v_m       record;
    v_pct     float8;       -- the sample of pgqueue.message, once taken
    v_ids     integer[];    -- its queues, and their sampled rows by state
    v_s_ready   bigint[];
    v_s_expired bigint[];
    v_s_sched   bigint[];
    v_s_leased  bigint[];
    v_i       integer;
    v_pct_dead float8;      -- the sample of pgqueue.dead_letter
    v_dead_ids integer[];
    v_s_dead  bigint[];
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
               (SELECT v_now - m.locked_until FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now
                 ORDER BY m.locked_until, m.id LIMIT 1)
          INTO v_ready, v_expired, v_sched, v_leased, v_dead, v_oldest;
        v_from := -9223372036854775808;
        LOOP
            v_n := 0;
            v_more := false;
            FOR v_m IN SELECT m.dequeue_at, m.created_at FROM pgqueue.message m
                        WHERE m.queue_id = v_q.id AND m.locked_until IS NULL
                          AND m.dequeue_at >= v_from AND m.dequeue_at <= v_now
                        ORDER BY m.dequeue_at, m.id LIMIT c_ahead LOOP
                v_n := v_n + 1;
                v_oldest := greatest(v_oldest, v_now - greatest(v_m.dequeue_at, v_m.created_at));
                EXIT WHEN v_m.dequeue_at >= v_m.created_at;
                -- c_ahead prioritised messages read: the first of the others next
                v_more := v_n = c_ahead AND v_m.dequeue_at < 0;
            END LOOP;
            EXIT WHEN NOT v_more;
            v_from := 0;
        END LOOP;
        IF greatest(v_ready, v_expired, v_sched, v_leased) > c_cap THEN
            IF v_pct IS NULL THEN
                -- one sample for every queue above the bound, taken for the first: 2,048 pages
                -- of the table, at least 1%; each sampled row stands for 100/pct
                v_pct := least(100, greatest(1, 204800.0 / greatest(1, pg_relation_size('pgqueue.message') / 8192)));
                SELECT array_agg(s.queue_id), array_agg(s.ready), array_agg(s.expired),
                       array_agg(s.sched), array_agg(s.leased)
                  INTO v_ids, v_s_ready, v_s_expired, v_s_sched, v_s_leased
                  FROM (SELECT m.queue_id,
                               count(*) FILTER (WHERE m.locked_until IS NULL AND m.dequeue_at <= v_now) AS ready,
                               count(*) FILTER (WHERE m.locked_until <= v_now) AS expired,
                               count(*) FILTER (WHERE m.locked_until IS NULL AND m.dequeue_at > v_now) AS sched,
                               count(*) FILTER (WHERE m.locked_until > v_now) AS leased
                          FROM pgqueue.message m TABLESAMPLE SYSTEM (v_pct)
                         WHERE p_queue IS NULL OR m.queue_id = v_q.id
                         GROUP BY m.queue_id) s;
            END IF;
            v_i := array_position(v_ids, v_q.id);  -- NULL (no row sampled): 0
            IF v_ready > c_cap THEN
                v_ready := greatest(c_cap + 1, round(coalesce(v_s_ready[v_i], 0) * 100 / v_pct)::bigint);
            END IF;
            IF v_expired > c_cap THEN
                v_expired := greatest(c_cap + 1, round(coalesce(v_s_expired[v_i], 0) * 100 / v_pct)::bigint);
            END IF;
            IF v_sched > c_cap THEN
                v_sched := greatest(c_cap + 1, round(coalesce(v_s_sched[v_i], 0) * 100 / v_pct)::bigint);
            END IF;
            IF v_leased > c_cap THEN
                v_leased := greatest(c_cap + 1, round(coalesce(v_s_leased[v_i], 0) * 100 / v_pct)::bigint);
            END IF;
        END IF;
        IF v_dead > c_cap THEN
            IF v_pct_dead IS NULL THEN
                v_pct_dead := least(100, greatest(1, 204800.0 / greatest(1, pg_relation_size('pgqueue.dead_letter') / 8192)));
                SELECT array_agg(s.queue_id), array_agg(s.n) INTO v_dead_ids, v_s_dead
                  FROM (SELECT d.queue_id, count(*) AS n
                          FROM pgqueue.dead_letter d TABLESAMPLE SYSTEM (v_pct_dead)
                         WHERE p_queue IS NULL OR d.queue_id = v_q.id
                         GROUP BY d.queue_id) s;
            END IF;
            v_dead := greatest(c_cap + 1,
                               round(coalesce(v_s_dead[array_position(v_dead_ids, v_q.id)], 0) * 100 / v_pct_dead)::bigint);
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
    'Per queue: ready (incl. expired leases), scheduled, leased and dead counts (exact up to 10,000 each, estimated from a sample above: see queue_stats_exact), and how long the ready message that has waited longest has waited (ms; expired leases since they ran out)';
