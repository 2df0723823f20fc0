-- Move one locked message to the dead letters (the caller holds its row lock).
CREATE FUNCTION pgqueue._dead_letter(p_id bigint, p_error text, p_now bigint)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    WITH d AS (
        DELETE FROM pgqueue.message m WHERE m.id = p_id
        RETURNING m.id, m.queue_id, m.dequeue_at, m.attempts, m.created_at,
                  m.content, m.content_type, m.state, m.last_error, m.locked_until
    )
    INSERT INTO pgqueue.dead_letter
        (id, queue_id, dequeue_at, attempts, created_at, dead_at,
         content, content_type, state, last_error)
    SELECT d.id, d.queue_id, d.dequeue_at, d.attempts, d.created_at, p_now,
           d.content, d.content_type, d.state, coalesce(p_error, d.last_error)
      FROM d
     WHERE pgqueue._counted_dead(d.queue_id, d.locked_until, p_now);  -- queue_counters
END;
