-- A: the one-message take (expired-lease and ready probes under one LIMIT, FOR UPDATE SKIP LOCKED)
-- as a statement of its own, then the DELETE of the id it found: two statements, as
-- message_dequeue and pgqueue._message_take run them (without the hints and the checks).
CREATE FUNCTION proto.deq(p_q integer) RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE v_one bigint; v_dead boolean; v_now bigint := pgqueue.now_ms(); v_not bigint[] := '{}';
BEGIN
  SELECT c.id, c.dead INTO v_one, v_dead FROM (
    SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id, coalesce(m.attempts >= 5, false) AS dead FROM pgqueue.message m
      WHERE m.queue_id = p_q AND m.locked_until IS NOT NULL AND m.locked_until <= v_now AND m.id <> ALL (v_not)
      ORDER BY m.locked_until, m.id LIMIT 1 FOR UPDATE SKIP LOCKED) e
    UNION ALL
    SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false FROM pgqueue.message m
      WHERE m.queue_id = p_q AND m.locked_until IS NULL AND m.dequeue_at <= v_now AND m.id <> ALL (v_not)
      ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED) r
    LIMIT 1) c;
  IF v_one IS NOT NULL AND NOT v_dead THEN
    RETURN QUERY DELETE FROM pgqueue.message m WHERE m.id = v_one RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at;
  END IF;
END $$;
