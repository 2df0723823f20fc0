-- A measurement build of pgqueue._message_removed (trigger_parts.sh), not correct: the call and the queue row, no hand-off.
CREATE OR REPLACE FUNCTION pgqueue._message_removed() RETURNS trigger LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE v_window bigint; v_concurrency integer;
BEGIN
    SELECT q.key_window_ms, q.group_concurrency INTO v_window, v_concurrency
      FROM pgqueue.queue q WHERE q.id = OLD.queue_id;
    RETURN NULL;
END; $$;
