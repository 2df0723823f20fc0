-- Create a periodic message: p_content (with p_content_type) is enqueued on p_queue at every slot
-- of p_every_ms (an interval of at least 1 s, slots counted from p_start_at, default now) or of
-- p_cron (five fields, UTC; the first slot is the first match at or after p_start_at). p_missed says
-- what a scheduler that was down for several slots enqueues: 'latest' one message for them
-- all (default), 'all' one per slot. Returns the schedule's id.
-- Raises 22004 (NULL name, queue or content), 22023 (neither or both of p_every_ms and p_cron,
-- an interval outside 1 s to 100 years, a start outside 1970 to 9999, a bad cron expression or
-- one of more than 512 characters, an unknown p_missed, a name outside 1 to 200 characters),
-- PQ001 / 42602 (queue), 42710 (a schedule of that name exists).
CREATE FUNCTION pgqueue.schedule_create(
    p_name         text,
    p_queue        text,
    p_content      bytea,
    p_every_ms     bigint DEFAULT NULL,
    p_cron         text   DEFAULT NULL,
    p_content_type text   DEFAULT NULL,
    p_missed       text   DEFAULT 'latest',
    p_start_at     bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
    v_start bigint := coalesce(p_start_at, pgqueue.now_ms());
    v_id    integer;
BEGIN
    IF p_name IS NULL OR p_content IS NULL OR p_missed IS NULL THEN
        PERFORM pgqueue._not_null(p_name IS NULL, 'schedule name'::text);
        PERFORM pgqueue._not_null(p_content IS NULL, 'content'::text);
        PERFORM pgqueue._not_null(p_missed IS NULL, 'p_missed'::text);
    END IF;
    v_queue := pgqueue._queue_get(p_queue);
    -- the queue's row FOR SHARE until commit, in place of a foreign key (tables/schedule.sql): a
    -- queue_drop that commits first leaves nothing to lock (PQ001; 40001 under REPEATABLE READ),
    -- one that comes later waits, then deletes this schedule with the queue
    PERFORM pgqueue._queue_pin(v_queue.id);
    IF (p_every_ms IS NULL) = (p_cron IS NULL) THEN
        RAISE EXCEPTION 'give one of p_every_ms and p_cron'
            USING ERRCODE = '22023', HINT = 'p_every_ms => 60000 for every minute, or p_cron => ''0 * * * *'' for every hour.';
    END IF;
    IF p_every_ms NOT BETWEEN 1000 AND 3153600000000 THEN
        RAISE EXCEPTION 'p_every_ms must be between 1000 (a second) and 3153600000000 (100 years), got %', p_every_ms
            USING ERRCODE = '22023';
    END IF;
    IF v_start NOT BETWEEN 0 AND 253402300799999 THEN
        RAISE EXCEPTION 'p_start_at must be between 0 and 253402300799999 (epoch ms, 1970 to 9999), got %', v_start
            USING ERRCODE = '22023';
    END IF;
    IF p_missed NOT IN ('latest', 'all') THEN
        RAISE EXCEPTION 'p_missed must be ''latest'' or ''all'', got %', pg_catalog.quote_literal(pg_catalog.left(p_missed, 20))
                        || CASE WHEN pg_catalog.length(p_missed) > 20
                             THEN pg_catalog.format(' (%s characters)', pg_catalog.length(p_missed)) ELSE '' END
            USING ERRCODE = '22023';
    END IF;
    -- a bound on the expression: each firing parses it again (20,000 list items, 80 kB, cost a
    -- scheduler run 3.3 s a firing; a review), and its text is in the errors about it
    IF pg_catalog.length(p_cron) > 512 THEN
        RAISE EXCEPTION 'a cron expression has at most 512 characters, got %', pg_catalog.length(p_cron)
            USING ERRCODE = '22023';
    END IF;
    IF length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a schedule name has 1 to 200 characters, got %', length(p_name) USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgqueue.schedule (name, queue_id, every_ms, cron, content, content_type, missed, next_run)
    VALUES (p_name, v_queue.id, p_every_ms, p_cron, p_content, p_content_type, p_missed,
            CASE WHEN p_cron IS NULL THEN v_start ELSE pgqueue._cron_next(p_cron, v_start - 1) END)
    ON CONFLICT (name) DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'schedule "%" already exists', p_name
            USING ERRCODE = '42710', HINT = 'Drop it first with pgqueue.schedule_drop(), or choose another name.';
    END IF;
    RETURN v_id;
END;
$$;

COMMENT ON FUNCTION pgqueue.schedule_create(text, text, bytea, bigint, text, text, text, bigint) IS
    'Create a periodic message (every p_every_ms, or at each match of the cron expression p_cron, UTC) on a queue; returns its id';
