-- Enqueue one message; returns its id.
CREATE FUNCTION pgqueue.message_create(
    p_queue        text,
    p_content      bytea,
    p_dequeue_at   bigint DEFAULT NULL,
    p_content_type text   DEFAULT NULL,
    p_group        text   DEFAULT NULL,
    p_key          text   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
-- No SET search_path clause, like message_complete alone of the string-bodied functions (a SET
-- clause costs a GUC save and restore at every call: 10 us of 80, docs/performance.md). It is as
-- hijack-proof: every relation, function and type below is schema-qualified or an SQL keyword,
-- and every operator is written OPERATOR(pg_catalog.x), so the caller's search_path resolves
-- nothing here (tests/test_security.py runs it with hostile objects ahead of pg_catalog;
-- tests/pgtap checks that no other function goes without the clause). The functions it calls
-- pin their own.
AS $$
DECLARE
    v_queue_id integer;
    v_max_size bigint;
    v_grouped  boolean;
    v_notify   boolean;
    v_locked   boolean;
    v_queue    pgqueue.queue;
    v_now      bigint;
    v_id       bigint;
    v_counted  boolean;
    v_set      pg_catalog.text;
    -- the queue's lock stripe (id & 63) as this session last found it: a setting per queue name
    -- (the name's bytes in hex: setting names ignore case, so a key of the name itself, its '.'
    -- and '-' as '$', was one for 'Aq' and 'aq', and for 'a.q' and 'a-q', and each of a pair
    -- took the other's stripe too, waiting behind that queue's drop: a review), a character whose
    -- code is 64 + the stripe, '' (-64) when the queue takes the path below, unset NULL; anything
    -- else gives a number that is negative or that the INSERT finds is not the queue's stripe
    v_stripe   integer := pg_catalog.ascii(pg_catalog.current_setting(
                              'pgqueue.stripe_' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.textsend(p_queue), 'hex'),
                              true)) OPERATOR(pg_catalog.-) 64;
BEGIN
    -- The one-statement path (a queue without a cap or groups, a message without a group or key,
    -- READ COMMITTED or READ UNCOMMITTED, which runs as it): take the lock stripe this session
    -- found the queue on (v_stripe) before the INSERT, whose snapshot is then taken after the
    -- lock, and insert only if that snapshot has the queue by that name on that stripe, uncapped
    -- and without groups: a queue_drop (or a queue_alter that caps it) needs that stripe, so it
    -- either committed before the lock, and the INSERT does not see the queue as it was, or waits
    -- for this transaction. A queue dropped and created again on another stripe, or a setting
    -- changed by hand, fails the check: the path below, which looks the queue up first, and
    -- records its stripe. The enqueued counter counts the row inserted (RETURNING), the NOTIFY
    -- comes after the checks (the CASE). One statement where the path below runs two: 1.04x the
    -- creates a second at 15 clients, durable, 1.08x with synchronous_commit off
    -- (bench/experiments/create_name_stripe, docs/performance.md).
    IF p_content IS NOT NULL AND p_group IS NULL AND p_key IS NULL AND v_stripe OPERATOR(pg_catalog.>=) 0
       -- 'read committed' and 'read uncommitted' sort below 'repeatable read', 'serializable' above
       AND pg_catalog.current_setting('transaction_isolation')
           OPERATOR(pg_catalog.<) ('repeatable read' COLLATE pg_catalog."C")
       AND pgqueue._queue_lock(v_stripe) THEN
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
        SELECT q.id, coalesce(p_dequeue_at, pgqueue._write_clock()), pgqueue.to_epoch(pg_catalog.now()),
               p_content, p_content_type,
               -- keyed at or above this writer's clock: no check by trigger message_placed_low
               CASE WHEN p_dequeue_at IS NULL
                      OR p_dequeue_at OPERATOR(pg_catalog.>=) (pgqueue._write_clock() OPERATOR(pg_catalog.-) 5)
                    THEN false END
          FROM pgqueue.queue q
         WHERE q.name OPERATOR(pg_catalog.=) p_queue
           -- (the name again inside the CASE: whatever order the plan tests its conditions in,
           -- no other queue's row reaches the NOTIFY)
           AND CASE WHEN q.name OPERATOR(pg_catalog.=) p_queue
                         AND (q.id OPERATOR(pg_catalog.&) 63) OPERATOR(pg_catalog.=) v_stripe
                         AND q.max_size IS NULL AND q.group_concurrency IS NULL
                    THEN NOT q.notify
                         OR pg_catalog.pg_notify('pgqueue.' OPERATOR(pg_catalog.||) p_queue, p_queue) IS NOT NULL
                    ELSE false END
        RETURNING id, pgqueue._counted(queue_id, 0) INTO v_id, v_counted;  -- enqueued (queue_counters)
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    -- The path of every other call: find the queue and take its lock stripe in one statement,
    -- then (uncapped, READ COMMITTED) insert only if the queue still exists uncapped in the
    -- INSERT's own snapshot, which is taken after the lock (a queue_drop that got in first leaves
    -- no orphan behind). Other isolation levels read an older snapshot: they go through
    -- _queue_admit.
    IF p_content IS NULL THEN
        RAISE EXCEPTION 'message content must not be NULL'
            USING ERRCODE = '22004',
                  HINT = 'Send an empty value (an empty bytea or text) for an empty message; JSON''s null is ''null''::jsonb, not SQL NULL.';
    END IF;
    v_now := pgqueue.to_epoch(pg_catalog.now());
    SELECT q.id, q.max_size, q.group_concurrency IS NOT NULL, q.notify, pgqueue._queue_lock(q.id)
      INTO v_queue_id, v_max_size, v_grouped, v_notify, v_locked
      FROM pgqueue.queue q WHERE q.name OPERATOR(pg_catalog.=) p_queue;
    -- what the one-statement path above takes from the next call of this session on, written
    -- when it differs from what the session has
    v_set := CASE WHEN v_max_size IS NULL AND NOT v_grouped
                  THEN pg_catalog.chr(64 OPERATOR(pg_catalog.+) (v_queue_id OPERATOR(pg_catalog.&) 63)) ELSE '' END;
    IF FOUND AND coalesce(v_stripe, -1) OPERATOR(pg_catalog.<>) (pg_catalog.ascii(v_set) OPERATOR(pg_catalog.-) 64) THEN
        v_set := pg_catalog.set_config(
            'pgqueue.stripe_' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.textsend(p_queue), 'hex'), v_set, false);
    END IF;
    IF FOUND AND v_max_size IS NULL AND p_group IS NULL AND p_key IS NULL
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'repeatable read'
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'serializable' THEN
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
        SELECT v_queue_id, coalesce(p_dequeue_at, pgqueue._write_clock()), v_now, p_content, p_content_type,
               -- keyed at or above this writer's clock: no check by trigger message_placed_low
               CASE WHEN p_dequeue_at IS NULL
                      OR p_dequeue_at OPERATOR(pg_catalog.>=) (pgqueue._write_clock() OPERATOR(pg_catalog.-) 5)
                    THEN false END
         WHERE EXISTS (SELECT 1 FROM pgqueue.queue q
                        WHERE q.id OPERATOR(pg_catalog.=) v_queue_id AND q.max_size IS NULL
                          AND q.group_concurrency IS NULL)
        RETURNING id INTO v_id;
    END IF;
    IF v_id IS NULL THEN
        IF v_queue_id IS NOT NULL AND (p_group IS NOT NULL OR p_key IS NOT NULL) THEN
            -- A bad group or key, and a group on a queue without groups, are refused before the
            -- queue's room is asked for (pgqueue._queue_admit): a full capped queue would answer
            -- PQ003 to a call that can never succeed. (pgqueue._message_insert checks again under
            -- the queue's lock; an unknown queue is PQ001 from _queue_admit, whatever its group or
            -- key.) The rule is _check_message_key's, called only to raise (a call costs more
            -- than the test).
            IF p_group OPERATOR(pg_catalog.=) ''::pg_catalog.text
               OR pg_catalog.length(p_group) OPERATOR(pg_catalog.>) 200 THEN
                PERFORM pgqueue._check_message_key(p_group, 'message group'::pg_catalog.text);
            END IF;
            IF p_key OPERATOR(pg_catalog.=) ''::pg_catalog.text
               OR pg_catalog.length(p_key) OPERATOR(pg_catalog.>) 200 THEN
                PERFORM pgqueue._check_message_key(p_key, 'idempotency key'::pg_catalog.text);
            END IF;
            IF p_group IS NOT NULL AND NOT v_grouped THEN
                RAISE EXCEPTION 'queue "%" has no message groups', p_queue
                    USING ERRCODE = '22023',
                          HINT = 'Create the queue with pgqueue.queue_create(..., p_group_concurrency => n).';
            END IF;
        END IF;
        -- unknown queue (raises), capped queue, a drop/alter got in first, or not READ COMMITTED.
        -- With a key, no room yet: the queue as read after its lock stripe says whether it is
        -- capped (a max_size set since the first statement's snapshot counts too).
        v_queue := pgqueue._queue_admit(p_queue, CASE WHEN p_key IS NULL THEN 1 ELSE 0 END);
        v_notify := v_queue.notify;
        IF p_key IS NOT NULL AND v_queue.max_size IS NOT NULL THEN
            -- a capped queue: a key that is taken returns its message without asking for room
            -- (a full queue would refuse the retry of an enqueue that went through). In a
            -- function of its own, whose SET clauses keep the look-ups index probes whatever
            -- the statistics: this path alone pays their save and restore.
            IF p_group IS NULL OR v_queue.group_concurrency IS NOT NULL THEN
                v_id := pgqueue._message_key_taken(v_queue.id, p_key);
                IF v_id IS NULL AND v_queue.key_window_ms OPERATOR(pg_catalog.>) 0
                   AND (pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'repeatable read'
                        OR pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'serializable') THEN
                    -- a new key, refused as pgqueue._message_insert refuses it (PQ009), before the
                    -- wait and the room below: they answered 40001, then PQ003 for good once the
                    -- queue was full, to a call that can never succeed (a review)
                    PERFORM pgqueue._require_read_committed('an enqueue of a new key into a queue with key_window_ms');
                END IF;
                IF v_id IS NULL THEN
                    -- A producer of the same key between its admission and its commit holds
                    -- room that a full queue would refuse this call (PQ003) instead of
                    -- returning that producer's id: wait for the admissions in progress (a
                    -- count of 0, pgqueue._queue_reserve), then look again, in a new snapshot
                    -- (specs/idempotent_create.spec).
                    PERFORM pgqueue._queue_reserve(v_queue.id, 0);
                    v_id := pgqueue._message_key_taken(v_queue.id, p_key);
                END IF;
                IF v_id IS NOT NULL THEN
                    v_counted := pgqueue._counted(v_queue.id, 0);  -- enqueued, as for any key found taken
                    RETURN v_id;
                END IF;
            END IF;
            PERFORM pgqueue._queue_reserve(v_queue.id, 1);  -- the room (pgqueue._queue_admit)
        END IF;
        IF p_group IS NOT NULL OR p_key IS NOT NULL OR v_queue.group_concurrency IS NOT NULL THEN
            v_id := pgqueue._message_insert(v_queue, p_content, p_dequeue_at, p_content_type, p_group, p_key, v_now);
        ELSE
            INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
            VALUES (v_queue.id, coalesce(p_dequeue_at, pgqueue._write_clock()), v_now, p_content, p_content_type,
                    CASE WHEN p_dequeue_at IS NULL
                           OR p_dequeue_at OPERATOR(pg_catalog.>=) (pgqueue._write_clock() OPERATOR(pg_catalog.-) 5)
                         THEN false END)
            RETURNING id INTO v_id;
        END IF;
    END IF;
    v_counted := pgqueue._counted(coalesce(v_queue.id, v_queue_id), 0);  -- enqueued (queue_counters)
    IF v_notify THEN
        PERFORM pg_catalog.pg_notify('pgqueue.' OPERATOR(pg_catalog.||) p_queue, p_queue);
    END IF;
    RETURN v_id;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create(text, bytea, bigint, text, text, text) IS
    'Enqueue a message; dequeue_at NULL = now, future = scheduled, past or negative = ahead of normal messages (priority); p_group: its message group, p_key: idempotency key (the live message''s id if taken); returns the id';

-- Enqueue one message on the default queue.
CREATE FUNCTION pgqueue.message_create(p_content bytea)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN pgqueue.message_create('default', p_content, NULL::bigint, NULL::text);

COMMENT ON FUNCTION pgqueue.message_create(bytea) IS
    'Enqueue a message on the default queue; returns the id';
