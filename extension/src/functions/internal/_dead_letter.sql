-- Move one locked message to the dead letters (the caller holds its row lock). A message that had
-- its group's turn gives it on (pgqueue._message_left); its idempotency key is free at once.
CREATE FUNCTION pgqueue._dead_letter(p_id bigint, p_error text, p_now bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue_id integer;
    v_group    text;
    v_turn_at  bigint;
    v_left     boolean;
BEGIN
    WITH d AS (
        DELETE FROM pgqueue.message m WHERE m.id = p_id
        RETURNING m.id, m.queue_id, m.dequeue_at, m.attempts, m.created_at,
                  m.content, m.content_type, m.state, m.last_error, m.locked_until,
                  m.group_key, m.turn_at
    ), i AS (
        INSERT INTO pgqueue.dead_letter
            (id, queue_id, dequeue_at, attempts, created_at, dead_at,
             content, content_type, state, last_error)
        SELECT d.id, d.queue_id, d.dequeue_at, d.attempts, d.created_at, p_now,
               d.content, d.content_type, d.state, coalesce(p_error, d.last_error)
          FROM d
         WHERE pgqueue._counted_dead(d.queue_id, d.locked_until, p_now)  -- queue_counters
    )
    SELECT d.queue_id, d.group_key, d.turn_at INTO v_queue_id, v_group, v_turn_at FROM d;
    IF v_group IS NOT NULL AND v_turn_at IS NOT NULL THEN
        v_left := pgqueue._message_left(v_queue_id, p_id, v_group, v_turn_at, NULL);  -- no key kept
    END IF;
END;
$$;
