-- Trigger function of message_removed: a message with an idempotency key or with its group's turn
-- left pgqueue.message (completed, delivered in delete mode, cancelled, acknowledged by Spark,
-- dead-lettered). Keep its key taken for the queue's key_window_ms unless it went to the dead
-- letters, removing two windows that have ended on the way (so the table stays as small as the
-- keys of one window), and give its group its next turn (pgqueue._message_group_next). Nothing
-- when the queue itself is being dropped (its row is gone first).
CREATE FUNCTION pgqueue._message_removed()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_window      bigint;
    v_concurrency integer;
    v_now         bigint;
    v_turned      boolean;
BEGIN
    SELECT q.key_window_ms, q.group_concurrency INTO v_window, v_concurrency
      FROM pgqueue.queue q WHERE q.id = OLD.queue_id;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF OLD.idem_key IS NOT NULL AND v_window > 0 THEN
        IF EXISTS (SELECT 1 FROM pgqueue.dead_letter d WHERE d.id = OLD.id) THEN
            v_window := 0;  -- dead-lettered: the key is free at once
        END IF;
    END IF;
    IF OLD.idem_key IS NOT NULL AND v_window > 0 THEN
        v_now := pgqueue.now_ms();
        INSERT INTO pgqueue.message_key AS k (queue_id, idem_key, id, until)
        VALUES (OLD.queue_id, OLD.idem_key, OLD.id, v_now + v_window)
        ON CONFLICT (queue_id, idem_key) DO UPDATE SET id = excluded.id, until = excluded.until;
        DELETE FROM pgqueue.message_key k
         WHERE (k.queue_id, k.idem_key) IN (SELECT e.queue_id, e.idem_key FROM pgqueue.message_key e
                                             WHERE e.queue_id = OLD.queue_id AND e.until <= v_now
                                             ORDER BY e.until
                                             LIMIT 2
                                               FOR UPDATE SKIP LOCKED);
    END IF;
    IF OLD.group_key IS NOT NULL AND OLD.turn_at IS NOT NULL AND v_concurrency IS NOT NULL THEN
        v_turned := pgqueue._message_group_next(OLD.queue_id, OLD.group_key, v_concurrency);
    END IF;
    RETURN NULL;
END;
$$;
