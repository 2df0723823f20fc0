-- The session's group floor for a message group (kept by pgqueue._message_group_room), while the
-- queue's lock stripe still reads p_stripe (as read by the caller, after the group's lock or after
-- its DELETE of the group's message with the turn): every message of the group that has the turn
-- has a turn key (message.turn_at) at or above it, so the probes of the group's turns
-- (message_group_turn_idx) start there instead of at the group's first entry, which under a held
-- snapshot is an entry for every message of the group delivered since the hold began. The lowest
-- bigint when there is none, when the stripe moved (a message placed below the clock, trigger
-- message_placed_low, may have the turn below the floor), when the transaction that kept it did
-- not commit (pgqueue._group_floor_at), or when the transaction is REPEATABLE READ or
-- SERIALIZABLE (its snapshot may predate the floor). Inlined: no call at run time. A value set
-- by hand that has the form, the stripe and a committed xid is taken as it is
-- (docs/security.md); other forged values are ignored, or fail (22P02: an xid or floor that
-- is not a number; 22023: an xid not yet assigned).
--
-- The floor is the clock, in whole milliseconds less 5, read before a probe of
-- pgqueue._message_group_room that found no message of the group with the turn. Why it holds:
-- the probe ran under the group's lock (that function is called under it only). Every turn given
-- later is given by a call that takes that lock after this transaction ends, or (group
-- concurrency 1) by the hand-off of a message that had the turn (pgqueue._message_left), which
-- this transaction's probe would have seen; either reads its clock after this one. The turn keys
-- of the hand-offs, of message_fail and of message_defer (the only calls that change the key of
-- a message holding the turn, which got it after the probe) are not below their clock
-- (pgqueue._turn_key with p_later). An enqueue keys a message below its clock only with an
-- explicit dequeue_at; less than 5 ms below its clock reading in whole milliseconds
-- (pgqueue._write_clock) it is marked as keyed with the clock (column write_mark), so at or
-- above the floor, which is 5 ms below in the same unit (a first version took the clock in
-- microseconds less 5 ms: a key in the same millisecond, 5.3 ms below, passed it unsignalled, a
-- review); further below, trigger message_placed_low advances the queue's lock stripe before the
-- group's lock is released, and the floor no longer holds for a caller that reads the stripe
-- after that lock, or after its DELETE of the group's message with the turn (no other message
-- of the group can get the turn meanwhile). Like the session hints and the wait floor, this
-- counts on a wall clock that does not step back (an enqueue keyed 5 ms below a clock stepped back
-- by any amount is unsignalled and may be below the floor: a review). The setting is the
-- session's and is transactional: a rollback, or one to a savepoint, restores the one before
-- (which held too); a floor kept by a transaction still running is seen by its own session only;
-- a prepared transaction's is not used unless it committed. Not kept for a group key longer than
-- 200 bytes (the setting would hold it) or under REPEATABLE READ or SERIALIZABLE.
CREATE FUNCTION pgqueue._group_floor_get(p_queue_id integer, p_group text, p_stripe bigint)
RETURNS bigint
LANGUAGE sql VOLATILE  -- (as pgqueue._group_floor_at, so that both are inlined)
RETURN coalesce(pgqueue._group_floor_at(
                    pg_catalog.current_setting('pgqueue.group_floor_' || p_queue_id || '_' || (pg_catalog.hashtext(p_group) & 255), true),
                    p_group, p_stripe),
                -9223372036854775808);

COMMENT ON FUNCTION pgqueue._group_floor_get(integer, text, bigint) IS
    'pgqueue internal: the session''s floor of a message group''s turn keys while the queue''s stripe reads p_stripe; the lowest bigint if none';
