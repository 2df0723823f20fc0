-- Reserve room for p_count new messages in a capped queue (max_size), or raise PQ003.
--
-- Producers of a capped queue take turns on its pgqueue.queue_size row (FOR UPDATE). The cached
-- value only grows with admissions while consumers shrink the real size, so it is an upper
-- bound; it is recounted exactly (bounded by max_size) only when it says "full". Under
-- REPEATABLE READ the row lock raises 40001 if another producer admitted since the snapshot.
--
-- SECURITY DEFINER so that producers need no privilege on pgqueue.queue_size: back-pressure must
-- not depend on a row the producers it limits can write. It reads max_size itself. EXECUTE is
-- revoked from PUBLIC and granted to producers by docs/grants.sql.
CREATE FUNCTION pgqueue._queue_reserve(p_queue_id integer, p_count bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_name  text;
    v_max   bigint;
    v_upper bigint;
BEGIN
    SELECT q.name, q.max_size INTO v_name, v_max FROM pgqueue.queue q WHERE q.id = p_queue_id;
    IF v_max IS NULL OR p_count <= 0 THEN
        RETURN;
    END IF;
    SELECT s.upper INTO v_upper FROM pgqueue.queue_size s WHERE s.queue_id = p_queue_id FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO pgqueue.queue_size (queue_id, upper) VALUES (p_queue_id, 0)
            ON CONFLICT (queue_id) DO NOTHING;
        PERFORM FROM pgqueue.queue_size s WHERE s.queue_id = p_queue_id FOR UPDATE;
        v_upper := NULL;
    END IF;
    IF v_upper IS NULL OR v_upper + p_count > v_max THEN
        v_upper := pgqueue._queue_count(p_queue_id, least(v_max, 9223372036854775806) + 1);
    END IF;
    IF v_upper + p_count > v_max THEN
        RAISE EXCEPTION 'queue "%" is full (max_size %): % more message(s) refused',
                        v_name, v_max, p_count
            USING ERRCODE = 'PQ003',
                  HINT = 'Back off and retry later, or raise max_size with pgqueue.queue_alter().';
    END IF;
    UPDATE pgqueue.queue_size s SET upper = v_upper + p_count WHERE s.queue_id = p_queue_id;
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._queue_reserve(integer, bigint) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._queue_reserve(integer, bigint) IS
    'pgqueue internal: admit p_count messages into a capped queue or raise PQ003; the only writer of pgqueue.queue_size';
