-- Enqueue the due slots of one schedule (pgqueue.schedule_run): from p_next_run, each slot up to
-- p_now (or, with p_missed 'latest', the last of them only), at most p_limit; returns the ids of
-- the messages created, the slots they stand for, and the schedule's next slot. On a capped queue
-- (p_capped) each message is created in a subtransaction of its own, and the first that the cap
-- refuses (PQ003) ends the call: that slot is the next one, due still, for a later call to
-- enqueue once there is room. So does one that waits more than 100 ms (or the caller's shorter
-- lock_timeout) for a lock
-- (lock_not_available): the queue's admission row, which a producer's open transaction holds
-- until it ends. The caller holds the rows of the schedules it fired before this one meanwhile,
-- and every other scheduler skips them, so a wait here would stall every schedule, not only this
-- queue's (the caller's own lock_timeout is back in force after each message). (Uncapped queues
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
    OUT o_next     bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot bigint := p_next_run;
    v_next bigint;
    v_id   bigint;
    v_hi   bigint;
    v_mid  bigint;
    v_last bigint;
    v_lt   text;     -- the caller's lock_timeout, while a capped queue's admission waits 100 ms at most
    v_full boolean;
BEGIN
    o_ids := '{}';
    o_slots := '{}';
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
    LOOP
        v_next := CASE WHEN p_cron IS NULL THEN v_slot + p_every_ms ELSE pgqueue._cron_next(p_cron, v_slot) END;
        -- 'latest': skip to the last slot that is due
        IF p_missed = 'latest' AND v_next <= p_now THEN
            v_slot := CASE WHEN p_cron IS NULL
                           THEN v_slot + (p_now - v_slot) / p_every_ms * p_every_ms
                           ELSE v_next END;
            CONTINUE;
        END IF;
        IF p_capped THEN
            v_lt := current_setting('lock_timeout');
            IF v_lt = '0' OR v_lt::interval > interval '100 ms' THEN  -- (a caller's shorter one stays)
                PERFORM set_config('lock_timeout', '100ms', true);
            END IF;
            v_full := false;
            BEGIN
                v_id := pgqueue.message_create(p_queue, p_content, NULL::bigint, p_content_type);
            EXCEPTION WHEN SQLSTATE 'PQ003' OR lock_not_available THEN
                v_full := true;  -- full, or its admission is held: this slot and the ones after it wait
            END;
            PERFORM set_config('lock_timeout', v_lt, true);
            EXIT WHEN v_full;
        ELSE
            v_id := pgqueue.message_create(p_queue, p_content, NULL::bigint, p_content_type);
        END IF;
        o_ids := o_ids || v_id;
        o_slots := o_slots || v_slot;
        v_slot := v_next;
        EXIT WHEN v_slot > p_now OR cardinality(o_ids) >= p_limit;
    END LOOP;
    o_next := v_slot;
END;
$$;

COMMENT ON FUNCTION pgqueue._schedule_fire(text, bytea, text, bigint, text, text, bigint, bigint, integer, boolean) IS
    'pgqueue internal: enqueue the due slots of one schedule (schedule_run); the message ids, their slots and the next slot';
