-- B: the same take as an initplan of the DELETE: one statement.
CREATE FUNCTION proto.deq(p_q integer) RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan AS $$
DECLARE v_one bigint; v_dead boolean; v_now bigint := pgqueue.now_ms(); v_not bigint[] := '{}';
BEGIN
  RETURN QUERY DELETE FROM pgqueue.message m WHERE m.id = (SELECT c.id FROM (
    SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id, coalesce(m.attempts >= 5, false) AS dead FROM pgqueue.message m
      WHERE m.queue_id = p_q AND m.locked_until IS NOT NULL AND m.locked_until <= v_now AND m.id <> ALL (v_not)
      ORDER BY m.locked_until, m.id LIMIT 1 FOR UPDATE SKIP LOCKED) e
    UNION ALL
    SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false FROM pgqueue.message m
      WHERE m.queue_id = p_q AND m.locked_until IS NULL AND m.dequeue_at <= v_now AND m.id <> ALL (v_not)
      ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED) r
    LIMIT 1) c WHERE NOT c.dead)
  RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at;
END $$;
