-- A message that becomes deliverable more than 5 ms below the clock, or a lease that runs out
-- more than 5 ms below it, is signalled to the consumers' session hints
-- (pgqueue._message_placed_low). A row written with the clock as its key (pgqueue._write_clock)
-- does not fire it; the 5 ms are the margin the hints keep below the clock
-- (pgqueue._message_take).
CREATE TRIGGER message_placed_low
    AFTER INSERT OR UPDATE OF dequeue_at, locked_until ON pgqueue.message
    FOR EACH ROW WHEN ((NEW.locked_until IS NULL AND NEW.dequeue_at < pgqueue.now_ms() - 5)
                       OR NEW.locked_until < pgqueue.now_ms() - 5)
    EXECUTE FUNCTION pgqueue._message_placed_low();
