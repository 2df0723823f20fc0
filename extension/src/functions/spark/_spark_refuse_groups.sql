-- Refuse a queue with message groups to the Spark streaming consumer (0A000): a claim takes
-- messages by (dequeue_at, id) and holds them until Spark commits the micro-batch, which would
-- break group order and limits. spark_consumer_open asks first, so a refused stream leaves no
-- consumer row behind; spark_claim asks again (a plain SQL caller may skip the open).
CREATE FUNCTION pgqueue._spark_refuse_groups(p_queue pgqueue.queue)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue.group_concurrency IS NOT NULL THEN
        RAISE EXCEPTION 'queue "%" has message groups, which Spark streams do not read yet', p_queue.name
            USING ERRCODE = '0A000',
                  HINT = 'A claim takes messages by (dequeue_at, id) and holds them until Spark commits the micro-batch, which would break group order and limits: consume a grouped queue with message_dequeue (or the Python worker).';
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue._spark_refuse_groups(pgqueue.queue) IS
    'pgqueue internal: 0A000 for a queue with message groups, which Spark streams do not read';
