-- Trigger function of message_placed_low and message_placed_low_update, for a row that no
-- pgqueue function vouched for (column write_mark: written by plain SQL, or by a function that
-- placed it where it cannot tell from its own clock reading). If its key (a lease's
-- locked_until, else a grouped message's turn_at in microseconds, else dequeue_at) is more than
-- 5 ms below the clock, a message became deliverable at a place below the clock (a priority or
-- past dequeue_at, a defer or fail to an earlier time, a lease given back at its old place by
-- spark_release, or any such INSERT or UPDATE in plain SQL), or got a lease that had run out
-- already (plain SQL). Advance the queue's lock stripe, after the write, so that consumers'
-- session hints look again from the bottom once this transaction has ended
-- (pgqueue._message_take, docs/performance.md).
--
-- The clock is read when the trigger runs, so a row keyed with its writer's clock reading, whose
-- trigger comes more than 5 ms after that reading (a writer descheduled under load), counts as
-- placed below the clock: the functions that key rows from their clock reading vouch for them
-- instead (write_mark), and plain SQL pays an extra signal at worst. (Before write_mark, the
-- reading was kept in a setting that this function compared with: a session could set it by
-- hand and leave its own rows unsignalled.)
CREATE FUNCTION pgqueue._message_placed_low()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(NEW.locked_until, NEW.turn_at / 1000, NEW.dequeue_at)
       >= pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000 - 5 THEN
        RETURN NULL;  -- not below the clock
    END IF;
    PERFORM nextval(pgqueue._lock_stripe(NEW.queue_id));
    RETURN NULL;
END;
$$;
