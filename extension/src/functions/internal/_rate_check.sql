-- Refuse a rate limit on a queue whose rate sequence (pgqueue._rate_seq: id & 63) another
-- rate-limited queue uses already (22023): possible only once there are more than 64 queues.
CREATE FUNCTION pgqueue._rate_check(p_queue_id integer, p_queue text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_other text;
BEGIN
    SELECT q.name INTO v_other FROM pgqueue.queue q
     WHERE q.id <> p_queue_id AND q.id & 63 = p_queue_id & 63 AND q.rate_limit IS NOT NULL
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queue "%" cannot have a rate limit: queue "%" has one on the same stripe (id & 63)', p_queue, v_other
            USING ERRCODE = '22023',
                  HINT = 'Rate-limit at most one queue of each stripe of 64; drop the other''s limit or recreate the queue.';
    END IF;
END;
$$;
