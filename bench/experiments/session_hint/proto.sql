-- Experiment (not product code): message_dequeue in delete mode with a per-session hint of where
-- the ready messages start, kept in a custom setting (transactional: a rollback restores it; no
-- row, so no dead tuples). The hint only moves past index entries invisible to the session
-- (the first VISIBLE row bounds it, locked or not). Not safe yet against late commits: see
-- docs/performance.md, "Held snapshots: a session hint".

CREATE OR REPLACE FUNCTION pgqueue.proto_dequeue(p_queue text)
RETURNS TABLE (id bigint, content bytea)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_qid integer; v_now bigint := pgqueue.now_ms(); v_h text; v_at bigint; v_id bigint;
    v_k_at bigint; v_k_id bigint; v_got bigint;
BEGIN
    SELECT q.id INTO v_qid FROM pgqueue.queue q WHERE q.name = p_queue AND pgqueue._queue_lock(q.id);
    v_h := current_setting('pgqueue.hint_' || v_qid, true);
    IF v_h IS NULL OR v_h = '' THEN v_at := -9223372036854775808; v_id := 0;
    ELSE v_at := split_part(v_h, ',', 1)::bigint; v_id := split_part(v_h, ',', 2)::bigint; END IF;
    -- first visible row at or after the hint (locked or not): everything before it is invisible
    SELECT m.dequeue_at, m.id INTO v_k_at, v_k_id FROM pgqueue.message m
     WHERE m.queue_id = v_qid AND m.locked_until IS NULL AND (m.dequeue_at, m.id) >= (v_at, v_id)
       AND m.dequeue_at <= v_now
     ORDER BY m.dequeue_at, m.id LIMIT 1;
    IF NOT FOUND THEN RETURN; END IF;
    IF (v_k_at, v_k_id) > (v_at, v_id) THEN
        PERFORM set_config('pgqueue.hint_' || v_qid, v_k_at || ',' || v_k_id, false);
    END IF;
    SELECT m.id INTO v_got FROM pgqueue.message m
     WHERE m.queue_id = v_qid AND m.locked_until IS NULL AND (m.dequeue_at, m.id) >= (v_k_at, v_k_id)
       AND m.dequeue_at <= v_now
     ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF v_got IS NULL THEN RETURN; END IF;
    RETURN QUERY DELETE FROM pgqueue.message m WHERE m.id = v_got RETURNING m.id, m.content;
END;
$$;
