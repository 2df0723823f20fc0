-- Create a queue.
CREATE FUNCTION pgqueue.queue_create(
    p_queue         text,
    p_lock_ms       bigint  DEFAULT 30000,
    p_max_attempts  integer DEFAULT NULL,
    p_retry_base_ms bigint  DEFAULT 1000,
    p_retry_cap_ms  bigint  DEFAULT 3600000,
    p_max_size      bigint  DEFAULT NULL,
    p_notify        boolean DEFAULT false,
    p_if_not_exists boolean DEFAULT false,
    p_group_concurrency integer DEFAULT NULL,
    p_key_window_ms bigint  DEFAULT 0,
    p_rate_limit    integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id         integer;
    v_constraint text;
    v_taken      boolean;
    v_freed      integer[];
BEGIN
    PERFORM pgqueue._not_null(p_queue IS NULL, 'queue name'::text);
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    PERFORM pgqueue._not_null(p_lock_ms IS NULL, 'lock_ms'::text);
    PERFORM pgqueue._not_null(p_retry_base_ms IS NULL, 'retry_base_ms'::text);
    PERFORM pgqueue._not_null(p_retry_cap_ms IS NULL, 'retry_cap_ms'::text);
    PERFORM pgqueue._not_null(p_notify IS NULL, 'notify'::text);
    PERFORM pgqueue._not_null(p_if_not_exists IS NULL, 'if_not_exists'::text);
    PERFORM pgqueue._check_queue_options(p_lock_ms, p_max_attempts, p_retry_base_ms,
                                         p_retry_cap_ms, p_max_size);
    PERFORM pgqueue._not_null(p_key_window_ms IS NULL, 'key_window_ms'::text);
    PERFORM pgqueue._check_group_options(p_group_concurrency, p_key_window_ms, p_rate_limit);
    -- The stripe search below decides from what it reads that no queue uses a stripe, then
    -- resets the stripe's counters and max_size mark: a REPEATABLE READ or SERIALIZABLE snapshot
    -- does not see a queue created on it after the snapshot was taken, and the reset would put
    -- two queues on one stripe, that queue's counters back to zero and its cap off by what they
    -- counted (specs/rr_queue_create.spec). A queue that already exists in the snapshot with
    -- p_if_not_exists: nothing to create, so nothing to refuse.
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        IF p_if_not_exists AND EXISTS (SELECT FROM pgqueue.queue q WHERE q.name = p_queue) THEN
            RETURN;
        END IF;
        PERFORM pgqueue._require_read_committed('queue_create');
    END IF;
    -- p_if_not_exists and the name taken in this statement's snapshot: nothing to make (a read
    -- only: no id, no lock, no xid; roles that may not create queues may call it so, as in a
    -- READ ONLY transaction). A drop that commits after it is a drop after the call.
    IF p_if_not_exists AND EXISTS (SELECT FROM pgqueue.queue q WHERE q.name = p_queue) THEN
        RETURN;
    END IF;
    -- Else, is the name taken? Its row is locked FOR KEY SHARE, which waits for a queue_drop
    -- deleting it (or an alter holding it) to end, before any stripe is taken: a drop that
    -- commits leaves no row, and the search below gives the new queue a stripe of its own (it
    -- took the next id, another queue's stripe among them: a review). The lock goes at once
    -- with its subtransaction: held to the end of the caller's transaction, it deadlocked with
    -- a drop or a max_size change there (docs/locking.md, rule 1). A taken name: PQ002 at once,
    -- no search (it went on to the INSERT with the next id, and a drop that had waited behind
    -- the lock and committed before the INSERT let the queue in on another queue's stripe, its
    -- counters shared: a review). (Without UPDATE on pgqueue.queue, which the lock needs: not
    -- known, the search runs, and the INSERT refuses a taken name.)
    BEGIN
        PERFORM FROM pgqueue.queue q WHERE q.name = p_queue FOR KEY SHARE;
        v_taken := FOUND;
        RAISE SQLSTATE 'PQ999';  -- (private: rolls the subtransaction, and its lock, back)
    EXCEPTION
        WHEN SQLSTATE 'PQ999' THEN NULL;
        WHEN insufficient_privilege THEN v_taken := NULL;
    END;
    IF v_taken THEN
        IF p_if_not_exists THEN  -- (created since the read above)
            RETURN;
        END IF;
        RAISE EXCEPTION 'queue "%" already exists', p_queue
            USING ERRCODE = 'PQ002',
                  HINT = 'Use pgqueue.queue_alter() to change it, or p_if_not_exists => true.';
    END IF;
    -- A stripe of its own (id & 63) while there are at most 64 queues, so that its lock and its
    -- counters (pgqueue.queue_counters) are its alone: the next id whose stripe no queue uses,
    -- the stripe taken (a concurrent queue_create waits) and checked again; its counters set to
    -- zero, and its max_size exactness mark cleared (a REPEATABLE READ producer of a dropped queue
    -- on the stripe set it, pgqueue._queue_reserve: no producer of the stripe is left, and the new
    -- queue's first such producer sets it again). With every stripe in use (or after 128 tries),
    -- the next id: counters and mark shared. (What the search changes is a stripe no queue uses:
    -- harmless when a drop above rolls back and the name stays taken.) Not a stripe that a
    -- queue_drop of this transaction freed (pgqueue.dropped_stripes): the transaction may roll
    -- back, and the dropped queue come back with its counters reset.
    v_freed := coalesce(string_to_array(nullif(current_setting('pgqueue.dropped_stripes', true), ''), ',')::integer[], '{}');
    IF v_taken IS NOT TRUE AND (SELECT count(DISTINCT q.id & 63) FROM pgqueue.queue q) < 64 THEN
        FOR v_try IN 1..128 LOOP
            v_id := nextval('pgqueue.queue_id_seq'::regclass);
            CONTINUE WHEN v_id & 63 = ANY (v_freed)
                       OR EXISTS (SELECT FROM pgqueue.queue q WHERE q.id & 63 = v_id & 63);
            PERFORM pgqueue._queue_quiesce(v_id);
            EXIT WHEN NOT EXISTS (SELECT FROM pgqueue.queue q WHERE q.id & 63 = v_id & 63);
        END LOOP;
        IF v_id & 63 = ANY (v_freed) OR EXISTS (SELECT FROM pgqueue.queue q WHERE q.id & 63 = v_id & 63) THEN
            v_id := NULL;
        ELSE
            PERFORM setval(pgqueue._count_seq(v_id, k.k), CASE WHEN k.k < 6 THEN 1 ELSE 32 END, false)
               FROM generate_series(0, 8) AS k(k);
            PERFORM setval(pgqueue._size_exact_seq(v_id), 1, false);
        END IF;
    END IF;
    -- (nor a stripe freed in this transaction when the counters are shared: its counters are
    -- the dropped queue's, which would be this queue's alone once the drop commits)
    FOR v_try IN 1..128 LOOP
        EXIT WHEN v_id IS NOT NULL;
        v_id := nextval('pgqueue.queue_id_seq'::regclass);
        IF v_id & 63 = ANY (v_freed) AND v_try < 128 THEN
            v_id := NULL;
        END IF;
    END LOOP;
    BEGIN
        INSERT INTO pgqueue.queue (id, name, lock_ms, max_attempts, retry_base_ms, retry_cap_ms,
                                   max_size, notify, group_concurrency, key_window_ms, rate_limit)
        VALUES (v_id, p_queue, p_lock_ms,
                nullif(p_max_attempts, 0), p_retry_base_ms, p_retry_cap_ms, nullif(p_max_size, 0),
                p_notify, p_group_concurrency, p_key_window_ms, nullif(p_rate_limit, 0));
    EXCEPTION WHEN unique_violation THEN
        GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
        IF v_constraint = 'queue_rate_stripe_key'
           AND NOT EXISTS (SELECT FROM pgqueue.queue q WHERE q.name = p_queue) THEN
            PERFORM pgqueue._rate_check(v_id, p_queue);  -- raises, naming the other queue
            RAISE EXCEPTION 'queue "%" cannot have a rate limit: another queue has one on the same stripe (id & 63 = %)', p_queue, v_id & 63
                USING ERRCODE = '22023',
                      HINT = 'Rate-limit at most one queue of each stripe of 64; drop the other''s limit or recreate the queue.';
        END IF;
        IF p_if_not_exists THEN
            RETURN;
        END IF;
        RAISE EXCEPTION 'queue "%" already exists', p_queue
            USING ERRCODE = 'PQ002',
                  HINT = 'Use pgqueue.queue_alter() to change it, or p_if_not_exists => true.';
    END;
    IF p_rate_limit > 0 THEN
        PERFORM pgqueue._rate_reset(v_id, p_rate_limit);  -- (not a dropped queue's slots)
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_create(text, bigint, integer, bigint, bigint, bigint, boolean, boolean, integer, bigint, integer) IS
    'Create a queue: lease lock_ms, max_attempts (NULL/0 = unlimited), retry back-off base and cap (ms), max_size (NULL/0 = unbounded), notify, group_concurrency (NULL = no message groups, 0 = groups without a limit), key_window_ms, rate_limit (messages a second, NULL/0 = none)';
