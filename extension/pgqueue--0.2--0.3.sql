-- pgqueue 0.2 -> 0.3: cheaper hot paths, measured by the benchmark suite (docs/performance.md).
--
-- message_create and message_dequeue keep their signatures, results, errors and locking
-- discipline; they do the same work in fewer statements:
--   * message_create finds the queue and takes its shared lock in one statement (was two) and
--     reads only the columns it needs; the INSERT still re-checks, in its own snapshot taken
--     after the lock, that the queue exists uncapped (so a concurrent queue_drop leaves no
--     orphan), and capped or unknown queues still go through pgqueue._queue_admit.
--   * message_dequeue finds the queue and tries its shared lock in one statement, then probes
--     expired leases and ready messages in ONE statement (an Append of the two bounded index
--     probes under one LIMIT: the ready probe runs only if expired leases left room), then
--     deletes or updates. A single message is returned without the ORDER BY of a batch.
--     Leases that ran out max_attempts times are still dead-lettered, and the probe is repeated
--     for the room they leave, as before.
--   * message_complete takes the queue's shared lock inside its DELETE's condition, evaluated on
--     the row before the DELETE locks it (so still the queue lock first, then the row lock), and
--     finds the row once instead of twice.
--   * message_claim_check (0.2) is dropped: PostgreSQL compiles a CHECK constraint for every
--     INSERT and UPDATE statement, which cost about 1.8 us of every message_create, lease and
--     heartbeat (bench profile). Only the spark_* functions set claim_id, and only together with
--     the far-future lease; tests/test_fuzz_sql.py and tests/test_spark_sql.py check that rule.
-- Statements per call on the common path: message_create 3 -> 2, message_dequeue 4 -> 3,
-- message_complete 2 -> 1.

\echo Use "ALTER EXTENSION pgqueue UPDATE TO '0.3'" to load this file. \quit

-------------------------------------------------------------------------------
-- Tables
-------------------------------------------------------------------------------

ALTER TABLE pgqueue.message DROP CONSTRAINT message_claim_check;

-------------------------------------------------------------------------------
-- Producing
-------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION pgqueue.message_create(
    p_queue        text,
    p_content      bytea,
    p_dequeue_at   bigint DEFAULT NULL,
    p_content_type text   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue_id integer;
    v_max_size bigint;
    v_notify   boolean;
    v_locked   boolean;
    v_queue    pgqueue.queue;
    v_now      bigint := pgqueue.to_epoch(now());
    v_id       bigint;
BEGIN
    IF p_content IS NULL THEN
        RAISE EXCEPTION 'message content must not be NULL'
            USING ERRCODE = '22004',
                  HINT = 'Send an empty bytea for an empty message.';
    END IF;
    -- Fast path (uncapped queue): find the queue and take its shared lock in one statement,
    -- then insert only if the queue still exists uncapped in the INSERT's own snapshot, which
    -- is taken after the lock (a queue_drop that got in first leaves no orphan behind).
    SELECT q.id, q.max_size, q.notify, pg_advisory_xact_lock_shared(1885827445, q.id) IS NULL
      INTO v_queue_id, v_max_size, v_notify, v_locked
      FROM pgqueue.queue q WHERE q.name = p_queue;
    IF FOUND AND v_max_size IS NULL THEN
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
        SELECT v_queue_id, coalesce(p_dequeue_at, v_now), v_now, p_content, p_content_type
         WHERE EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = v_queue_id AND q.max_size IS NULL)
        RETURNING id INTO v_id;
    END IF;
    IF v_id IS NULL THEN
        -- unknown queue (raises), capped queue, or a drop/alter got in first: full admission
        v_queue := pgqueue._queue_admit(p_queue, 1);
        v_notify := v_queue.notify;
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
        VALUES (v_queue.id, coalesce(p_dequeue_at, v_now), v_now, p_content, p_content_type)
        RETURNING id INTO v_id;
    END IF;
    IF v_notify THEN
        PERFORM pg_notify('pgqueue.' || p_queue, p_queue);
    END IF;
    RETURN v_id;
END;
$$;

-------------------------------------------------------------------------------
-- Consuming
-------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION pgqueue.message_dequeue(
    p_queue   text    DEFAULT 'default',
    p_limit   integer DEFAULT 1,
    p_lock_ms bigint  DEFAULT NULL)
RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,
               content_type text, created_at bigint, locked_until bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- Custom plans would be re-planned on every call (a LIMIT parameter makes the generic plan look
-- dear to the plan cache); the generic plans are the same index probes and save half the call.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id     integer;
    v_lock_ms      bigint;
    v_max_attempts integer;
    v_locked       boolean;
    v_now          bigint := pgqueue.now_ms();
    v_need         integer := p_limit;
    v_ids          bigint[] := '{}';
    v_found        bigint[];
    v_dead_ids     bigint[];
    v_dead         bigint;
BEGIN
    SELECT q.id, coalesce(p_lock_ms, q.lock_ms), q.max_attempts,
           pg_try_advisory_xact_lock_shared(1885827445, q.id)
      INTO v_queue_id, v_lock_ms, v_max_attempts, v_locked
      FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF p_limit IS NULL THEN
        RAISE EXCEPTION 'p_limit must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    IF v_lock_ms < 0 OR v_lock_ms > 31536000000 THEN
        PERFORM pgqueue._check_lock_ms(v_lock_ms, true);  -- raises
    END IF;
    -- Never wait: if a drop (or a max_size change) holds the queue, there is nothing to hand out.
    IF NOT v_locked THEN
        RETURN;
    END IF;
    -- Expired leases first (overdue work), then ready messages by (dequeue_at, id): two bounded
    -- index probes (message_leased_idx, message_ready_idx) under one LIMIT, so the second runs
    -- only for the room the first leaves. A lease that ran out max_attempts times is locked too
    -- but goes to the dead letters (a poison message must not loop forever); the probe is then
    -- repeated for the room it leaves. Each round dead-letters at least one row, so it ends.
    LOOP
        SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
               array_agg(c.id) FILTER (WHERE c.dead)
          INTO v_found, v_dead_ids
          FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                      coalesce(m.attempts >= v_max_attempts, false) AS dead
                                 FROM pgqueue.message m
                                WHERE m.queue_id = v_queue_id AND m.locked_until IS NOT NULL
                                  AND m.locked_until <= v_now
                                ORDER BY m.locked_until, m.id
                                LIMIT v_need
                                  FOR UPDATE SKIP LOCKED) e
                UNION ALL
                SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false
                                 FROM pgqueue.message m
                                WHERE m.queue_id = v_queue_id AND m.locked_until IS NULL
                                  AND m.dequeue_at <= v_now
                                ORDER BY m.dequeue_at, m.id
                                LIMIT v_need
                                  FOR UPDATE SKIP LOCKED) r
                LIMIT v_need) c;
        v_ids := v_ids || v_found;
        EXIT WHEN v_dead_ids IS NULL;
        FOREACH v_dead IN ARRAY v_dead_ids LOOP
            PERFORM pgqueue._dead_letter(v_dead, 'lease expired', v_now);
        END LOOP;
        v_need := p_limit - cardinality(v_ids);
        EXIT WHEN v_need = 0;
    END LOOP;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    ELSIF v_lock_ms = 0 THEN
        IF cardinality(v_ids) = 1 THEN
            RETURN QUERY
            DELETE FROM pgqueue.message m WHERE m.id = v_ids[1]
            RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at, m.state,
                      m.content_type, m.created_at, NULL::bigint;
        ELSE
            RETURN QUERY
            WITH d AS (
                DELETE FROM pgqueue.message m WHERE m.id = ANY (v_ids)
                RETURNING m.id, m.content, m.attempts + 1 AS attempts, m.dequeue_at, m.state,
                          m.content_type, m.created_at, NULL::bigint AS locked_until)
            SELECT * FROM d ORDER BY array_position(v_ids, d.id);
        END IF;
    ELSIF cardinality(v_ids) = 1 THEN
        RETURN QUERY
        UPDATE pgqueue.message m
           SET locked_until = v_now + v_lock_ms, attempts = m.attempts + 1
         WHERE m.id = v_ids[1]
        RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                  m.content_type, m.created_at, m.locked_until;
    ELSE
        RETURN QUERY
        WITH u AS (
            UPDATE pgqueue.message m
               SET locked_until = v_now + v_lock_ms, attempts = m.attempts + 1
             WHERE m.id = ANY (v_ids)
            RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                      m.content_type, m.created_at, m.locked_until)
        SELECT * FROM u ORDER BY array_position(v_ids, u.id);
    END IF;
END;
$$;

-- Acknowledge a leased message: delete it. False if the token is stale (or the message claimed).
CREATE OR REPLACE FUNCTION pgqueue.message_complete(p_id bigint, p_attempts integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id, 'message id');
        PERFORM pgqueue._not_null(p_attempts, 'attempts token');
    END IF;
    -- The queue's shared lock before the row lock (see the locking discipline in 0.1): the
    -- condition is evaluated on the row before the DELETE locks it. The lock function returns
    -- void, which is never NULL; the test only makes the call part of the condition.
    DELETE FROM pgqueue.message m
     WHERE m.id = p_id AND m.attempts = p_attempts AND m.locked_until IS NOT NULL
       AND m.claim_id IS NULL
       AND pg_advisory_xact_lock_shared(1885827445, m.queue_id) IS NOT NULL;
    RETURN FOUND;
END;
$$;
