-- Delete dead letters of a queue (all, the ids given, and/or those dead before p_before ms).
-- p_ids NULL: every id; a NULL element is refused (22004), as are ids of two dimensions (22023),
-- before anything is done.
CREATE FUNCTION pgqueue.dead_letter_purge(
    p_queue  text,
    p_ids    bigint[] DEFAULT NULL,
    p_before bigint   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_count bigint;
BEGIN
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'p_ids must be a one-dimensional array' USING ERRCODE = '22023';
    END IF;
    IF array_position(p_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_ids must not contain NULL' USING ERRCODE = '22004',
            HINT = 'List dead letters by id; for all of them, pass NULL for the whole array (or leave it out).';
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    -- Dropped while the lock was waited for: PQ001, as dead_letter_requeue says (not 0 purged).
    IF NOT EXISTS (SELECT FROM pgqueue.queue q WHERE q.id = v_queue.id) THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    -- The letters locked first, in the order of their ids, as dead_letter_requeue locks them: a
    -- DELETE alone took them in the order it read them (as they died), and a requeue and a
    -- purge of one queue at once deadlocked (specs/dead_requeue_purge.spec).
    DELETE FROM pgqueue.dead_letter d
     WHERE d.id = ANY (ARRAY(SELECT x.id FROM pgqueue.dead_letter x
                              WHERE x.queue_id = v_queue.id
                                AND (p_ids IS NULL OR x.id = ANY (p_ids))
                                AND (p_before IS NULL OR x.dead_at < p_before)
                              ORDER BY x.id
                                FOR UPDATE));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.dead_letter_purge(text, bigint[], bigint) IS
    'Delete dead letters of a queue: all, the ids given, and/or those dead before p_before (epoch ms); returns how many';
