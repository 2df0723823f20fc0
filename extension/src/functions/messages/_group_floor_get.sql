-- The session's group floor for a message group (kept by pgqueue._message_group_room), while the
-- queue's lock stripe still reads p_stripe (as read by the caller, after the group's lock or after
-- its DELETE of the group's message with the turn): every message of the group that has the turn
-- has a turn key (message.turn_at) at or above it, so the probes of the group's turns
-- (message_group_turn_idx) start there instead of at the group's first entry, which under a held
-- snapshot is an entry for every message of the group delivered since the hold began. The lowest
-- bigint when there is none, when the stripe moved (a message placed below the clock, trigger
-- message_placed_low, may have the turn below the floor), or when the transaction is REPEATABLE
-- READ or SERIALIZABLE (its snapshot may predate the floor). Inlined: no call at run time. A value
-- that is not one this function wrote fails with 22P02 (docs/security.md).
--
-- The floor is the clock less 5 ms (for clocks of different sessions), read before a probe of
-- pgqueue._message_group_room that found no message of the group with the turn. Why it holds: the
-- probe ran under the group's lock (that function is called under it only). Every turn given later
-- is given by a call that takes that lock after this transaction ends, or (group concurrency 1) by
-- the hand-off of a message that had the turn (pgqueue._message_left), which this transaction's
-- probe would have seen; either reads its clock after this one, and the turn keys it writes
-- (pgqueue._turn_key with p_later) are not below that clock. The calls that change the key of a
-- message holding the turn (message_fail, message_defer, a take) hold the message, which got its
-- turn after the probe, and key it at or above their clock too. A key below the clock comes only
-- from an enqueue with an explicit dequeue_at, which advances the queue's lock stripe (trigger
-- message_placed_low) before it releases the group's lock, so the floor no longer holds for a
-- caller that reads the stripe after that lock, or after its DELETE of the group's message with
-- the turn (no other message of the group can get the turn meanwhile). The setting is the
-- session's and is transactional: a rollback restores the one before (which held too); a floor
-- kept by a transaction that is still running is seen by its own session only. Not kept for a
-- group key longer than 200 bytes (the setting would hold it) or under REPEATABLE READ or
-- SERIALIZABLE.
CREATE FUNCTION pgqueue._group_floor_get(p_queue_id integer, p_group text, p_stripe bigint)
RETURNS bigint
LANGUAGE sql STABLE
RETURN coalesce(pgqueue._group_floor_at(
                    pg_catalog.current_setting('pgqueue.group_floor_' || p_queue_id || '_' || (pg_catalog.hashtext(p_group) & 255), true),
                    p_group, p_stripe),
                -9223372036854775808);

COMMENT ON FUNCTION pgqueue._group_floor_get(integer, text, bigint) IS
    'pgqueue internal: the session''s floor of a message group''s turn keys while the queue''s stripe reads p_stripe; the lowest bigint if none';
