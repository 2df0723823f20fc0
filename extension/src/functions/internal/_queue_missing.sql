-- Raise the right error for a queue name that was not found: invalid name or unknown queue.
CREATE FUNCTION pgqueue._queue_missing(p_queue text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NULL THEN
        RAISE EXCEPTION 'queue name must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        RAISE EXCEPTION 'invalid queue name %', quote_literal(left(p_queue, 100))
                        || CASE WHEN length(p_queue) > 100 THEN format(' (%s characters)', length(p_queue)) ELSE '' END
            USING ERRCODE = '42602',
                  HINT = 'A queue name has 1 to 48 characters from A-Z a-z 0-9 _ . - and does not start with . or -.';
    END IF;
    RAISE EXCEPTION 'queue "%" does not exist', p_queue
        USING ERRCODE = 'PQ001',
              HINT = 'Create it with pgqueue.queue_create(); list queues with pgqueue.queue_list().';
END;
$$;
