-- A message that becomes deliverable more than 5 ms below the clock (the margin the session
-- hints keep below it, pgqueue._message_take), or a lease that runs out more than 5 ms below
-- it, is signalled to the consumers' session hints, unless it was keyed with its writer's own
-- clock reading (pgqueue._message_placed_low; pgqueue._write_clock). The WHEN clause is
-- prepared at every INSERT or UPDATE statement, so it is kept short and calls built-in functions
-- only: an SQL function there is inlined, its body read from the catalog and planned each time
-- (0.4's first version, with pgqueue.now_ms(), took half the time of a message_create).
CREATE TRIGGER message_placed_low
    AFTER INSERT OR UPDATE OF dequeue_at, locked_until ON pgqueue.message
    FOR EACH ROW WHEN (coalesce(NEW.locked_until, NEW.dequeue_at)
                           < pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000 - 5)
    EXECUTE FUNCTION pgqueue._message_placed_low();
