-- Change a queue's settings; NULL leaves a setting as it is, 0 clears max_attempts/max_size.
CREATE FUNCTION pgqueue.queue_alter(
    p_queue         text,
    p_lock_ms       bigint  DEFAULT NULL,
    p_max_attempts  integer DEFAULT NULL,
    p_retry_base_ms bigint  DEFAULT NULL,
    p_retry_cap_ms  bigint  DEFAULT NULL,
    p_max_size      bigint  DEFAULT NULL,
    p_notify        boolean DEFAULT NULL,
    p_group_concurrency integer DEFAULT NULL,
    p_key_window_ms bigint  DEFAULT NULL,
    p_rate_limit    integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue  pgqueue.queue;
    v_group  text;
    v_turned boolean;
BEGIN
    -- Bad values are refused before anything waits: the quiesce below holds the queue's producers
    -- and consumers off while it waits for the work in flight. Whether a queue has groups is
    -- chosen when it is created; the other checks run again on the row once it is locked.
    LOOP
        SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
        IF NOT FOUND THEN
            PERFORM pgqueue._queue_missing(p_queue);
        END IF;
        PERFORM pgqueue._check_queue_options(
            coalesce(p_lock_ms, v_queue.lock_ms), p_max_attempts,
            coalesce(p_retry_base_ms, v_queue.retry_base_ms),
            coalesce(p_retry_cap_ms, v_queue.retry_cap_ms), p_max_size);
        PERFORM pgqueue._check_group_options(p_group_concurrency, p_key_window_ms, p_rate_limit);
        IF p_group_concurrency IS NOT NULL AND v_queue.group_concurrency IS NULL THEN
            RAISE EXCEPTION 'queue "%" has no message groups', p_queue
                USING ERRCODE = '22023',
                      HINT = 'Message groups are chosen when a queue is created (queue_create p_group_concurrency).';
        END IF;
        IF p_rate_limit > 0 THEN
            PERFORM pgqueue._rate_check(v_queue.id, p_queue);  -- again below, on the locked row
        END IF;
        IF p_max_size IS NOT NULL OR p_group_concurrency IS NOT NULL THEN
            -- A new cap must count every message, including those of producers still in flight:
            -- wait for them on the queue's lock stripe before locking the queue row (the other
            -- order deadlocks with a transaction that enqueued and then drops or alters), and
            -- count with snapshots taken after that, which REPEATABLE READ cannot give. So must a
            -- new group limit give turns: a producer in flight decided its message's turn under
            -- the old limit, and a message it left waiting in a group the new limit makes room in
            -- would otherwise wait for a message of the group to leave (specs/group_producer.spec).
            PERFORM pgqueue._require_read_committed(CASE WHEN p_max_size IS NOT NULL THEN 'queue_alter(p_max_size)'
                                                         ELSE 'queue_alter(p_group_concurrency)' END);
            PERFORM pgqueue._queue_quiesce(v_queue.id);
        END IF;
        -- The row of the queue whose stripe was waited for, by its id: a queue dropped meanwhile
        -- and created again under the name is another queue, on another stripe, whose producers
        -- in flight nothing waited for (found by name, its cap was set without them, and groups
        -- given to a queue created without them: a review). Then from the top, for that one.
        SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.id = v_queue.id FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;
    -- against the row as it is now: another queue_alter may have changed lock_ms or the retry bounds
    PERFORM pgqueue._check_queue_options(
        coalesce(p_lock_ms, v_queue.lock_ms), p_max_attempts,
        coalesce(p_retry_base_ms, v_queue.retry_base_ms),
        coalesce(p_retry_cap_ms, v_queue.retry_cap_ms), p_max_size);
    IF p_rate_limit > 0 THEN
        PERFORM pgqueue._rate_check(v_queue.id, p_queue);
        BEGIN
            -- the unique index queue_rate_stripe_key refuses a second rate-limited queue of
            -- the stripe whatever this snapshot saw: one committed since, or one a concurrent
            -- call sets (waited for)
            UPDATE pgqueue.queue q SET rate_limit = p_rate_limit WHERE q.id = v_queue.id;
        EXCEPTION WHEN unique_violation THEN
            RAISE EXCEPTION 'queue "%" cannot have a rate limit: another queue has one on the same stripe (id & 63 = %)', p_queue, v_queue.id & 63
                USING ERRCODE = '22023',
                      HINT = 'Rate-limit at most one queue of each stripe of 64; drop the other''s limit or recreate the queue.';
        END;
    END IF;
    UPDATE pgqueue.queue q
       SET lock_ms       = coalesce(p_lock_ms, q.lock_ms),
           max_attempts  = CASE WHEN p_max_attempts IS NULL THEN q.max_attempts
                                ELSE nullif(p_max_attempts, 0) END,
           retry_base_ms = coalesce(p_retry_base_ms, q.retry_base_ms),
           retry_cap_ms  = coalesce(p_retry_cap_ms, q.retry_cap_ms),
           max_size      = CASE WHEN p_max_size IS NULL THEN q.max_size
                                ELSE nullif(p_max_size, 0) END,
           notify        = coalesce(p_notify, q.notify),
           group_concurrency = coalesce(p_group_concurrency, q.group_concurrency),
           key_window_ms = coalesce(p_key_window_ms, q.key_window_ms),
           rate_limit    = CASE WHEN p_rate_limit IS NULL THEN q.rate_limit ELSE nullif(p_rate_limit, 0) END
     WHERE q.id = v_queue.id;
    IF p_max_size IS NOT NULL THEN
        DELETE FROM pgqueue.queue_size s WHERE s.queue_id = v_queue.id;
    END IF;
    IF p_rate_limit > 0 AND p_rate_limit IS DISTINCT FROM v_queue.rate_limit THEN
        -- a new rate starts afresh (not slots taken at an earlier limit); the same rate set
        -- again keeps its slots (and what consumers took ahead of the clock stays to wait out)
        PERFORM pgqueue._rate_reset(v_queue.id, p_rate_limit);
    END IF;
    IF p_group_concurrency IS DISTINCT FROM v_queue.group_concurrency AND p_group_concurrency IS NOT NULL THEN
        -- a new limit: each group with messages waiting and no turn gets one where the limit now
        -- leaves room (else a message enqueued later would take that room ahead of them), the
        -- group whose first message waiting is due first first (each turn is keyed as it is
        -- given: this order is the order they go out in; no deadlock, whatever the order, since
        -- the queue's stripe keeps every other writer of its groups out). Turns already given
        -- stay: after a lower limit, the messages holding one still go out, and the new limit
        -- holds from then on.
        -- The queue's lock stripe advances: the groups' wait floors recorded under the old limit
        -- no longer hold (the ordered hand-off skips its look for another message with the turn
        -- while its floor holds, which only group concurrency 1 makes safe:
        -- pgqueue._wait_floor_next). (A rolled-back change may or may not leave it moved: the
        -- quiesce's ALTER SEQUENCE above may have given the sequence a new file in this
        -- transaction. Either is safe: a move only makes the floors recorded before it stop
        -- holding.)
        PERFORM nextval(pgqueue._lock_stripe(v_queue.id));
        FOR v_group IN SELECT m.group_key FROM pgqueue.message m
                        WHERE m.queue_id = v_queue.id AND m.group_key IS NOT NULL AND m.turn_at IS NULL
                        GROUP BY m.group_key
                        ORDER BY min(ARRAY[m.dequeue_at, m.id]) LOOP
            v_turned := pgqueue._message_group_next(v_queue.id, v_group, p_group_concurrency);
        END LOOP;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_alter(text, bigint, integer, bigint, bigint, bigint, boolean, integer, bigint, integer) IS
    'Change a queue''s settings; NULL keeps a setting, 0 makes max_attempts unlimited or max_size unbounded (or group_concurrency unlimited, on a queue with groups, or removes the rate_limit)';
