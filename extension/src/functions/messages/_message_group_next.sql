-- Give a message group its next turn if it is due one: when the group has no message waiting with
-- its turn and fewer than p_concurrency in flight (0: no limit), its first message waiting behind,
-- by (dequeue_at, id), gets the turn from now on (pgqueue._turn_key: not before the clock), so
-- behind the groups already waiting: the round-robin. Called after a message of the group was handed out
-- (pgqueue._message_dequeue_grouped) or left the queue (trigger message_removed), under the
-- group's lock, so that every such decision sees the ones committed before it. Returns whether
-- a turn was given. (Called on every grouped delivery: three statements on the common path, the
-- lock, the room and the UPDATE; the others are PL/pgSQL simple expressions.)
CREATE FUNCTION pgqueue._message_group_next(p_queue_id integer, p_group text, p_concurrency integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_locked boolean;
BEGIN
    v_locked := pgqueue._message_group_lock(p_queue_id, p_group);
    IF NOT pgqueue._message_group_room(p_queue_id, p_group, p_concurrency) THEN
        RETURN false;
    END IF;
    -- (again if the message it chose was deleted meanwhile, by message_cancel: READ COMMITTED
    -- reads the next one; REPEATABLE READ raises 40001 instead)
    LOOP
        UPDATE pgqueue.message m
           SET turn_at = pgqueue._turn_key(m.dequeue_at, true)
         WHERE m.id = (SELECT w.id FROM pgqueue.message w
                        WHERE w.queue_id = p_queue_id AND w.group_key = p_group AND w.turn_at IS NULL
                        ORDER BY w.dequeue_at, w.id
                        LIMIT 1);
        IF FOUND THEN
            RETURN true;
        END IF;
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pgqueue.message w
                               WHERE w.queue_id = p_queue_id AND w.group_key = p_group
                                 AND w.turn_at IS NULL);
    END LOOP;
    RETURN false;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_next(integer, text, integer) IS
    'pgqueue internal: give a message group its next turn if it has none waiting and room in flight';
