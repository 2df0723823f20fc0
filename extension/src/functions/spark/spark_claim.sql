-- Claim up to p_max_messages deliverable messages for a consumer; returns the claim's sequence number.
--
-- Takes messages through pgqueue._message_take, the probe of message_dequeue (expired leases
-- first, then ready messages by (dequeue_at, id), FOR UPDATE SKIP LOCKED, poison leases
-- dead-lettered); p_max_id (if not NULL) leaves out messages with a larger id. p_from (epoch
-- ms, if not NULL: a stream's starting position) leaves out messages created before it, which
-- stay in the queue for other consumers; the probe is then pgqueue._spark_take_from, which
-- starts at p_from in message_ready_idx instead of at the oldest message. Returns NULL and
-- claims nothing when no message is due; creates the consumer if needed. Errors: 22004 (a NULL
-- p_max_messages), 22023 (p_max_messages outside 1..1000000), 0A000 (a queue with message
-- groups), PQ001/42602/22004 (the queue, the consumer name), PQ005 (another session holds the
-- consumer: spark_consumer_open).
CREATE FUNCTION pgqueue.spark_claim(
    p_queue        text,
    p_consumer     text,
    p_max_messages integer,
    p_max_id       bigint DEFAULT NULL,
    p_from         bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- the settings pgqueue._message_take runs with (it has no SET clauses of its own; see there)
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer pgqueue.spark_consumer;
    v_now      bigint := pgqueue.now_ms();
    v_ids      bigint[];
    v_claim_id bigint;
BEGIN
    PERFORM pgqueue._not_null(p_max_messages IS NULL, 'p_max_messages'::text);
    IF p_max_messages < 1 OR p_max_messages > 1000000 THEN
        RAISE EXCEPTION 'p_max_messages must be between 1 and 1000000, got %', p_max_messages
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_enter(p_queue);
    PERFORM pgqueue._spark_refuse_groups(v_queue);
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, true);
    -- (locked FOR UPDATE, as in spark_ack: a claim by hand on a consumer that a running query
    -- holds was taken, and that query's next latestOffset handed it out again: a review)
    IF v_consumer.holder_pid IS DISTINCT FROM pg_backend_pid()
       AND pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Its Spark query claims what it reads itself; stop the query first.';
    END IF;

    IF p_from IS NULL THEN
        v_ids := pgqueue._message_take(v_queue.id, p_max_messages, v_now, v_queue.max_attempts, p_max_id);
    ELSE
        v_ids := pgqueue._spark_take_from(v_queue.id, p_max_messages, v_now, v_queue.max_attempts, p_max_id, p_from);
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN NULL;
    END IF;

    v_claim_id := nextval('pgqueue.spark_claim_id_seq');
    UPDATE pgqueue.message m
       SET locked_until = pgqueue._spark_claimed_until(), attempts = m.attempts + 1,
           claim_id = v_claim_id,
           write_mark = NOT coalesce(m.write_mark, false)  -- year 9999: not below the clock
     WHERE m.id = ANY (v_ids);
    INSERT INTO pgqueue.spark_claim (id, consumer_id, seq, n, min_id, max_id, claimed_at)
    SELECT v_claim_id, v_consumer.id, v_consumer.next_seq, cardinality(v_ids), min(u.id), max(u.id), v_now
      FROM unnest(v_ids) AS u(id);
    UPDATE pgqueue.spark_consumer c SET next_seq = c.next_seq + 1 WHERE c.id = v_consumer.id;
    RETURN v_consumer.next_seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_claim(text, text, integer, bigint, bigint) IS
    'Claim up to p_max_messages deliverable messages (id <= p_max_id; if p_from (epoch ms) is given, created at or after it and, unless a priority, not placed before it) for a Spark consumer, hiding them from message_dequeue; returns the claim sequence number, NULL if nothing was due';
