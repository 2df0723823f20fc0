-- Trigger function of message_placed_low, for a row whose key (a ready message's dequeue_at or,
-- in a queue with groups, its turn_at; a lease's locked_until) the trigger's WHEN clause found
-- more than 5 ms below the clock: a message became deliverable at a place below the clock (a
-- priority or past dequeue_at, a defer or fail to an earlier time, a lease given back at its old
-- place by spark_release, or any such INSERT or UPDATE in plain SQL), or got a lease that had
-- run out already (plain SQL). Advance the queue's lock stripe, after the write, so that
-- consumers' session hints look again from the bottom once this transaction has ended
-- (pgqueue._message_take, docs/performance.md).
--
-- Unless the row was keyed with its writer's own clock reading and the trigger only ran late.
-- Any clock reading taken after the writer's xid is a correct reference for "below the clock",
-- and the earliest is the least strict: the one pgqueue._write_clock kept in
-- pgqueue.write_clock, if it is at most 1 s old. (A writer descheduled for a few ms between its
-- reading and the trigger, under load, moved the stripes hundreds of times a second, and every
-- move sends the consumers' probes back to the bottom.) The 1 s bound is what a session that
-- sets pgqueue.write_clock by hand can get wrong: its own transactions' rows placed less than
-- 1 s below the clock may then go unsignalled.
CREATE FUNCTION pgqueue._message_placed_low()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_clock text := current_setting('pgqueue.write_clock', true);
BEGIN
    IF v_clock ~ '^[0-9]{1,15}$' AND pgqueue.now_ms() - v_clock::bigint BETWEEN 0 AND 1000
       AND coalesce(NEW.locked_until, NEW.turn_at / 1000, NEW.dequeue_at) >= v_clock::bigint - 5 THEN
        RETURN NULL;  -- keyed with this transaction's clock reading: not placed low
    END IF;
    PERFORM nextval(pgqueue._lock_stripe(NEW.queue_id));
    RETURN NULL;
END;
$$;
