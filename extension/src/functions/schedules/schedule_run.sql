-- Enqueue the due slots of every schedule (next_run <= now); returns one row per message
-- created: the schedule, the message id and the slot (epoch ms) it stands for.
--
-- Exactly once per slot, however many schedulers call it at once: each due schedule row is
-- locked (SKIP LOCKED: a scheduler never waits for another), and its messages and its advanced
-- next_run commit together; a scheduler that finds the row after that commit re-reads it and
-- finds it no longer due. Missed slots (no scheduler ran for a while) follow the schedule's
-- policy: 'latest' enqueues one message for all of them, 'all' one per slot (at most p_limit
-- per call; the rest on the next call). The next slot is then the first after now.
CREATE FUNCTION pgqueue.schedule_run(p_limit integer DEFAULT 1000)
RETURNS TABLE (schedule text, message_id bigint, slot bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now  bigint := pgqueue.now_ms();
    v_s    record;
    v_slot bigint;
    v_next bigint;
    v_made integer := 0;
BEGIN
    IF p_limit IS NULL THEN
        PERFORM pgqueue._not_null(true, 'p_limit'::text);
    END IF;
    IF p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 100000, got %', p_limit USING ERRCODE = '22023';
    END IF;
    FOR v_s IN
        SELECT s.id, s.name, q.name AS queue, s.every_ms, s.cron, s.content, s.content_type, s.missed, s.next_run
          FROM pgqueue.schedule s JOIN pgqueue.queue q ON q.id = s.queue_id
         WHERE s.next_run <= v_now
         ORDER BY s.next_run, s.id
           FOR UPDATE OF s SKIP LOCKED
    LOOP
        v_slot := v_s.next_run;
        LOOP
            v_next := CASE WHEN v_s.cron IS NULL THEN v_slot + v_s.every_ms ELSE pgqueue._cron_next(v_s.cron, v_slot) END;
            -- 'latest': skip to the last slot that is due
            IF v_s.missed = 'latest' AND v_next <= v_now THEN
                v_slot := CASE WHEN v_s.cron IS NULL
                               THEN v_slot + (v_now - v_slot) / v_s.every_ms * v_s.every_ms
                               ELSE v_next END;
                CONTINUE;
            END IF;
            schedule := v_s.name;
            message_id := pgqueue.message_create(v_s.queue, v_s.content, NULL::bigint, v_s.content_type);
            slot := v_slot;
            RETURN NEXT;
            v_made := v_made + 1;
            v_slot := v_next;
            EXIT WHEN v_slot > v_now OR v_made >= p_limit;
        END LOOP;
        UPDATE pgqueue.schedule s SET next_run = v_slot WHERE s.id = v_s.id;
        EXIT WHEN v_made >= p_limit;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue.schedule_run(integer) IS
    'Enqueue the due slots of every schedule, each slot once however many schedulers run (row locks, SKIP LOCKED); returns schedule, message id and slot of each message created';
