-- A measurement build of pgqueue._message_removed (trigger_parts.sh), not correct: the call, the queue row and the probe for the group's next message, no hand-off.
CREATE OR REPLACE FUNCTION pgqueue._message_removed() RETURNS trigger LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE v_window bigint; v_concurrency integer; v_id bigint;
BEGIN
    SELECT q.key_window_ms, q.group_concurrency INTO v_window, v_concurrency
      FROM pgqueue.queue q WHERE q.id = OLD.queue_id;
    SELECT w.id INTO v_id FROM pgqueue.message w
                        WHERE w.queue_id = OLD.queue_id AND w.group_key = OLD.group_key
                          AND w.turn_at IS NULL
                        ORDER BY w.dequeue_at, w.id
                        LIMIT 1;
    RETURN NULL;
END; $$;
