-- Count the live messages of a queue, stopping at p_stop (an index-only bounded count).
CREATE FUNCTION pgqueue._queue_count(p_queue_id integer, p_stop bigint)
RETURNS bigint
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message m
                                  WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                  LIMIT p_stop) r)
         + (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message m
                                  WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                  LIMIT p_stop) l);
END;
