-- Enqueue many messages in one statement; returns their ids in input order.
CREATE FUNCTION pgqueue.message_create_batch(
    p_queue         text,
    p_contents      bytea[],
    p_dequeue_at    bigint   DEFAULT NULL,
    p_content_type  text     DEFAULT NULL,
    p_dequeue_ats   bigint[] DEFAULT NULL,
    p_content_types text[]   DEFAULT NULL,
    p_groups        text[]   DEFAULT NULL,
    p_keys          text[]   DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
    v_now   bigint := pgqueue.to_epoch(now());
    v_clock bigint;
    v_n     integer := cardinality(p_contents);
    v_grouped boolean;
BEGIN
    IF p_contents IS NULL THEN
        RAISE EXCEPTION 'p_contents must not be NULL'
            USING ERRCODE = '22004',
                  HINT = 'Pass an empty array to enqueue nothing.';
    END IF;
    IF array_ndims(p_contents) > 1 OR array_ndims(p_dequeue_ats) > 1 OR array_ndims(p_content_types) > 1
       OR array_ndims(p_groups) > 1 OR array_ndims(p_keys) > 1 THEN
        RAISE EXCEPTION 'batch arrays must be one-dimensional'
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_contents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message content must not be NULL (element %)', array_position(p_contents, NULL)
            USING ERRCODE = '22004',
                  HINT = 'Send an empty bytea for an empty message.';
    END IF;
    IF cardinality(p_dequeue_ats) <> v_n OR cardinality(p_content_types) <> v_n THEN
        RAISE EXCEPTION 'p_dequeue_ats and p_content_types must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_groups) <> v_n OR cardinality(p_keys) <> v_n THEN
        RAISE EXCEPTION 'p_groups and p_keys must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    -- A bad group or key, and a group on a queue without groups, are refused before the queue's
    -- room is asked for: a full capped queue would answer PQ003 to a call that can never succeed
    -- (pgqueue._message_insert checks again under the queue's lock; an unknown queue is PQ001
    -- from pgqueue._queue_admit, whatever its groups and keys). The rule is
    -- _check_message_key's, called for the bad values only (not a call for every element).
    IF p_groups IS NOT NULL OR p_keys IS NOT NULL THEN
        SELECT q.group_concurrency IS NOT NULL, q.id, q.key_window_ms INTO v_grouped, v_queue.id, v_queue.key_window_ms
          FROM pgqueue.queue q WHERE q.name = p_queue;
        IF FOUND THEN
            PERFORM pgqueue._check_message_key(u.g, 'message group'::text)
               FROM unnest(p_groups) AS u(g) WHERE u.g = '' OR length(u.g) > 200;
            PERFORM pgqueue._check_message_key(u.k, 'idempotency key'::text)
               FROM unnest(p_keys) AS u(k) WHERE u.k = '' OR length(u.k) > 200;
            IF NOT v_grouped AND cardinality(array_remove(p_groups, NULL)) > 0 THEN
                RAISE EXCEPTION 'queue "%" has no message groups', p_queue
                    USING ERRCODE = '22023',
                          HINT = 'Create the queue with pgqueue.queue_create(..., p_group_concurrency => n).';
            END IF;
            -- so is a new key into a queue with key_window_ms under REPEATABLE READ or
            -- SERIALIZABLE (PQ009, as pgqueue._message_insert refuses it): a capped queue's
            -- admission answered 40001, then PQ003 for good once it was full (a review)
            IF v_queue.key_window_ms > 0
               AND current_setting('transaction_isolation') IN ('repeatable read', 'serializable')
               AND EXISTS (SELECT 1 FROM unnest(p_keys) AS u(k)
                            WHERE u.k IS NOT NULL AND pgqueue._message_key_taken(v_queue.id, u.k) IS NULL) THEN
                PERFORM pgqueue._require_read_committed('an enqueue of a new key into a queue with key_window_ms');
            END IF;
        END IF;
    END IF;
    v_queue := pgqueue._queue_admit(p_queue, v_n);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF p_groups IS NOT NULL OR p_keys IS NOT NULL OR v_queue.group_concurrency IS NOT NULL THEN
        -- the groups' locks first, in the stripes' order (no deadlock between two batches;
        -- READ COMMITTED)
        IF v_queue.group_concurrency IS NOT NULL AND p_groups IS NOT NULL THEN
            PERFORM pgqueue._message_group_locks(v_queue.id, p_groups);
        END IF;
        -- one at a time (pgqueue._message_insert), still in this one statement: all or nothing
        RETURN QUERY
        -- (a message due now goes in with dequeue_at NULL: its turn's key is the clock's
        -- microsecond when it is written, pgqueue._message_insert)
        SELECT pgqueue._message_insert(v_queue, u.content, coalesce(u.dequeue_at, p_dequeue_at),
                                       coalesce(u.content_type, p_content_type), u.grp, u.key, v_now)
          FROM unnest(p_contents, p_dequeue_ats, p_content_types, p_groups, p_keys)
               WITH ORDINALITY AS u(content, dequeue_at, content_type, grp, key, n)
         ORDER BY u.n;
    ELSE
        v_clock := pgqueue._write_clock();
        RETURN QUERY
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
        SELECT v_queue.id, coalesce(u.dequeue_at, p_dequeue_at, v_clock), v_now, u.content,
               coalesce(u.content_type, p_content_type),
               -- keyed at or above this writer's clock: no check by trigger message_placed_low
               CASE WHEN coalesce(u.dequeue_at, p_dequeue_at, v_clock) >= v_clock - 5 THEN false END
          FROM unnest(p_contents, p_dequeue_ats, p_content_types)
               WITH ORDINALITY AS u(content, dequeue_at, content_type, n)
         ORDER BY u.n
        RETURNING id;
    END IF;
    PERFORM pgqueue._counted_n(v_queue.id, 0, v_n);  -- enqueued (queue_counters)
    IF v_queue.notify THEN
        PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create_batch(text, bytea[], bigint, text, bigint[], text[], text[], text[]) IS
    'Enqueue many messages in one statement (all or none); per-message dequeue_ats/content_types override the scalars; groups and idempotency keys per message; returns ids in input order';
