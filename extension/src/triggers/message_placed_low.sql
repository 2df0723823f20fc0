-- A message that becomes deliverable more than 5 ms below the clock (the margin the session
-- hints keep below it, pgqueue._message_take), or a lease that runs out more than 5 ms below
-- it, is signalled to the consumers' session hints, unless it was keyed with its writer's own
-- clock reading (pgqueue._message_placed_low; pgqueue._write_clock). The key: a lease's
-- locked_until, else a grouped message's turn_at (in microseconds), else dequeue_at.
--
-- pgqueue's own functions vouch for the rows they key at or above their clock reading less
-- 5 ms (a default dequeue_at, a lease, a retry after its back-off): an INSERT sets write_mark,
-- an UPDATE flips it. Only the other writes (plain SQL, a given dequeue_at below the writer's
-- clock) run the trigger function, which compares the key with the clock. A WHEN clause is
-- prepared at every INSERT or UPDATE statement, so these are a null test and a comparison of
-- two columns: the clock comparison these triggers had in their WHEN clause before (built-in
-- functions only) cost 10-14 us of a message_create and of a lease (docs/performance.md). Not on
-- an UPDATE of turn_at alone: the one such UPDATE, a group's turn handed on, keys the turn with
-- the clock read after its xid (pgqueue._message_group_next); plain SQL that writes turn_at
-- alone is not signalled.
CREATE TRIGGER message_placed_low
    AFTER INSERT ON pgqueue.message
    FOR EACH ROW WHEN (NEW.write_mark IS NULL)
    EXECUTE FUNCTION pgqueue._message_placed_low();
CREATE TRIGGER message_placed_low_update
    AFTER UPDATE OF dequeue_at, locked_until ON pgqueue.message
    FOR EACH ROW WHEN (NEW.write_mark IS NOT DISTINCT FROM OLD.write_mark)
    EXECUTE FUNCTION pgqueue._message_placed_low();
-- ALWAYS: also in a session with session_replication_role = replica (a logical replication
-- apply, a migration tool, a data load), where ordinary triggers do not fire: a priority
-- message, a fail to 0 or a requeue written there was never found by the consumers whose hints
-- had moved past it (a review; tests/test_held_hints.py... see sql/30_consume).
ALTER TABLE pgqueue.message ENABLE ALWAYS TRIGGER message_placed_low;
ALTER TABLE pgqueue.message ENABLE ALWAYS TRIGGER message_placed_low_update;
