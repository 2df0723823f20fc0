-- A message that becomes deliverable below the floor, or a lease that runs out below it, is
-- signalled to the consumers' session hints (pgqueue._message_placed_low). The floor
-- (pgqueue._placed_floor) is 5 ms, the margin the hints keep below the clock
-- (pgqueue._message_take), below the clock reading pgqueue._write_clock took for this
-- transaction: a row written with that reading as its key does not fire it.
CREATE TRIGGER message_placed_low
    AFTER INSERT OR UPDATE OF dequeue_at, locked_until ON pgqueue.message
    FOR EACH ROW WHEN (coalesce(NEW.locked_until, NEW.dequeue_at) < pgqueue._placed_floor())
    EXECUTE FUNCTION pgqueue._message_placed_low();
