-- Enqueue the due slots of one schedule (pgqueue.schedule_run): from p_next_run, each slot up to
-- p_now (or, with p_missed 'latest', the last of them only), at most p_limit; returns the ids of
-- the messages created, the slots they stand for, the schedule's next slot, and whether a lock
-- held it back (o_held, below: the caller then leaves the queue's other schedules for a later
-- run instead of waiting for the same lock again for each of them). On a capped queue
-- (p_capped) the messages are created in batches, each in a subtransaction of its own (below),
-- and the first slot that the cap refuses (PQ003) ends the call: that slot is the next one, due
-- still, for a later call to enqueue once there is room. So does a batch that waits more than
-- 100 ms (or the caller's shorter lock_timeout) for a lock
-- (lock_not_available): the queue's admission row, which a producer's open transaction holds
-- until it ends. The caller holds the rows of the schedules it fired before this one meanwhile,
-- and every other scheduler skips them, so a wait here would stall every schedule, not only this
-- queue's (the caller's own lock_timeout is back in force after each batch). (Uncapped queues
-- take no subtransaction: never more than 64 of them in a transaction for the schedules that
-- need none.)
CREATE FUNCTION pgqueue._schedule_fire(
    p_queue        text,
    p_content      bytea,
    p_content_type text,
    p_every_ms     bigint,
    p_cron         text,
    p_missed       text,
    p_next_run     bigint,
    p_now          bigint,
    p_limit        integer,
    p_capped       boolean,
    OUT o_ids      bigint[],
    OUT o_slots    bigint[],
    OUT o_next     bigint,
    OUT o_held     boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot bigint := p_next_run;
    v_next bigint;
    v_hi   bigint;
    v_mid  bigint;
    v_last bigint;
    v_lt   text;     -- the caller's lock_timeout, while a capped queue's admission waits 100 ms at most
    v_full boolean;
    v_held boolean;
    v_slots bigint[];  -- the slots due, in order
    v_n    integer;
    v_i    integer;
    v_done integer := 0;  -- how many of them have their message
    v_try  integer;  -- the size of the next batch tried
    v_k    integer;
    v_new  bigint[];
    v_queue pgqueue.queue;
    v_created bigint := pgqueue.to_epoch(now());  -- created_at, as message_create has it
BEGIN
    o_ids := '{}';
    o_slots := '{}';
    o_held := false;
    IF p_missed = 'latest' AND p_cron IS NOT NULL AND v_slot < p_now THEN
        -- the last slot at or before p_now, by bisection between v_slot (a slot due) and p_now:
        -- two calls of _cron_next a step, the gap halved at each (a minute's schedule a year
        -- behind: about 20 steps), rather than a walk over every missed slot (525,600 calls), or
        -- over every slot of a dense run (every minute of January: 44,640; a review measured
        -- 16 s for one schedule_run)
        v_hi := p_now;
        LOOP
            EXIT WHEN pgqueue._cron_next(p_cron, v_slot) > v_hi;  -- v_slot is the last slot <= v_hi
            -- a slot in (v_slot, v_hi]: in (v_mid, v_hi], or else at or before v_mid
            v_mid := v_slot + (v_hi - v_slot) / 2;
            v_last := pgqueue._cron_next(p_cron, v_mid);
            IF v_last <= v_hi THEN
                v_slot := v_last;
            ELSE
                v_hi := v_mid;
            END IF;
        END LOOP;
    END IF;
    -- the slots to enqueue, at most p_limit: a cron schedule's from one call (the expression
    -- parsed once; a call of _cron_next a slot parsed it each time, about 0.5 ms a slot)
    IF p_cron IS NOT NULL AND v_slot <= p_now THEN
        v_slots := v_slot || pgqueue._cron_slots(p_cron, v_slot, p_now, p_limit - 1);
        v_slot := pgqueue._cron_next(p_cron, v_slots[cardinality(v_slots)]);
    ELSE
        v_slots := '{}';
    END IF;
    LOOP
        EXIT WHEN cardinality(v_slots) > 0 AND p_cron IS NOT NULL;
        v_next := CASE WHEN p_cron IS NULL THEN v_slot + p_every_ms ELSE pgqueue._cron_next(p_cron, v_slot) END;
        -- 'latest': skip to the last slot that is due
        IF p_missed = 'latest' AND v_next <= p_now THEN
            v_slot := CASE WHEN p_cron IS NULL
                           THEN v_slot + (p_now - v_slot) / p_every_ms * p_every_ms
                           ELSE v_next END;
            CONTINUE;
        END IF;
        v_slots := v_slots || v_slot;
        v_slot := v_next;
        EXIT WHEN v_slot > p_now OR cardinality(v_slots) >= p_limit;
    END LOOP;
    v_n := cardinality(v_slots);
    IF NOT p_capped THEN
        FOR v_i IN 1 .. v_n LOOP
            o_ids := o_ids || pgqueue.message_create(p_queue, p_content, NULL::bigint, p_content_type);
        END LOOP;
        o_slots := v_slots;
        o_next := v_slot;
        RETURN;
    END IF;
    -- A capped queue: the slots in batches, each in a subtransaction (all or none: a batch the
    -- cap refuses leaves nothing; pgqueue._queue_admit asks for the room of all of it). The first slot alone, so that a full queue costs one
    -- subtransaction (and one xid) as before (tests/pgtap/50_schedule.sql), then the rest at
    -- once; a refused batch is tried again at half its size, down to one slot. A batch that
    -- fits leaves less room than its size, so the next one of that size is refused: about
    -- 2 log2(n) subtransactions a call (36 for 100,000 slots), of which at most log2(n) + 2 are
    -- kept (those refused roll back), where a subtransaction a slot (until 0.4) kept one a
    -- message: past 64 kept subtransactions with an xid, a transaction's snapshot data
    -- overflows, and every snapshot taken on the server while it runs looks transactions up in
    -- pg_subtrans (tests/test_schedules.py counts the transaction ids that a catch-up takes).
    v_try := 1;
    WHILE v_done < v_n LOOP
        v_k := least(v_try, v_n - v_done);
        v_lt := current_setting('lock_timeout');
        IF v_lt = '0' OR v_lt::interval > interval '100 ms' THEN  -- (a caller's shorter one stays)
            PERFORM set_config('lock_timeout', '100ms', true);
        END IF;
        v_full := false;
        v_held := false;
        BEGIN
            -- what message_create_batch does with v_k copies of the content, without an array
            -- of them: k copies of a large content past 1 GB in all failed the whole run (54000)
            -- (and held that much memory below it); one row at a time by _message_insert, as
            -- into a grouped queue, also when the queue has none
            v_queue := pgqueue._queue_admit(p_queue, v_k);
            v_new := ARRAY(SELECT pgqueue._message_insert(v_queue, p_content, NULL::bigint, p_content_type,
                                                          NULL::text, NULL::text, v_created)
                             FROM generate_series(1, v_k) AS g(n) ORDER BY g.n);
            PERFORM pgqueue._counted_n(v_queue.id, 0, v_k);  -- enqueued (queue_counters)
            IF v_queue.notify THEN
                PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
            END IF;
        EXCEPTION
            WHEN SQLSTATE 'PQ003' THEN
                v_full := true;  -- no room for v_k: fewer may fit
            WHEN lock_not_available THEN
                v_held := true;  -- its admission is held: this slot and the ones after it wait
        END;
        PERFORM set_config('lock_timeout', v_lt, true);
        EXIT WHEN v_held OR (v_full AND v_k = 1);  -- the slot the cap refused is the next one
        IF v_full THEN
            v_try := v_k / 2;
        ELSE
            o_ids := o_ids || v_new;
            o_slots := o_slots || v_slots[v_done + 1 : v_done + v_k];
            v_done := v_done + v_k;
            IF v_done = 1 THEN
                v_try := v_n - 1;  -- the first slot had room: the rest at once
            END IF;
        END IF;
    END LOOP;
    o_next := CASE WHEN v_done < v_n THEN v_slots[v_done + 1] ELSE v_slot END;
    o_held := coalesce(v_held, false);
END;
$$;

COMMENT ON FUNCTION pgqueue._schedule_fire(text, bytea, text, bigint, text, text, bigint, bigint, integer, boolean) IS
    'pgqueue internal: enqueue the due slots of one schedule (schedule_run); the message ids, their slots, the next slot and whether a lock held it back';
