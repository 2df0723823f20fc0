-- A message that becomes deliverable more than 5 ms below the clock (the margin the session
-- hints keep below it, pgqueue._message_take), or a lease that runs out more than 5 ms below
-- it, is signalled to the consumers' session hints, unless it was keyed with its writer's own
-- clock reading (pgqueue._message_placed_low; pgqueue._write_clock). The key: a lease's
-- locked_until, else a grouped message's turn_at (in microseconds), else dequeue_at. The WHEN
-- clause is prepared at every INSERT or UPDATE statement, so it is kept short and calls
-- built-in functions only: an SQL function there is inlined, its body read from the catalog and
-- planned each time (0.4's first version, with pgqueue.now_ms(), took half the time of a
-- message_create). Not on an UPDATE of turn_at alone: the one such UPDATE, a group's turn
-- handed on, keys the turn with the clock read after its xid (pgqueue._message_group_next), and
-- the WHEN clause would add a fifth to its cost; plain SQL that writes turn_at alone is not
-- signalled.
CREATE TRIGGER message_placed_low
    AFTER INSERT OR UPDATE OF dequeue_at, locked_until ON pgqueue.message
    FOR EACH ROW WHEN (coalesce(NEW.locked_until, NEW.turn_at / 1000, NEW.dequeue_at)
                           < pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000 - 5)
    EXECUTE FUNCTION pgqueue._message_placed_low();
