-- A group's wait floor (pgqueue._wait_floor_next) as a lease records it on the message it hands
-- out, on a queue of group concurrency 1: [1:6] as they were, then [7] p_pre, the queue's lock
-- stripe as message_dequeue read it before its take assigned the transaction's xid, and [8] that
-- xid, the lease's. The message's completion (pgqueue.message_complete) passes [7] to its
-- hand-off as the stripe read before its own xid if its xid is above [8]: xids are assigned in
-- order, so [7] was read before the completion's xid was, as a new candidate needs (a completion
-- whose transaction had its xid before the lease's takes none). Its DELETE assigns that xid
-- before it knows the message's queue, so it cannot read the stripe first itself. A floor that
-- is carried on from turn to turn keeps [7:8] of an earlier lease: still a stripe read before
-- that lease's xid, so as safe, only older (its queue's stripe more likely to have moved since).
-- NULL elements where the message had no floor (it holds for no one: [6] is NULL).
CREATE FUNCTION pgqueue._wait_floor_leased(p_floor bigint[], p_pre bigint)
RETURNS bigint[]
LANGUAGE sql VOLATILE
RETURN coalesce(p_floor[1:6], '{NULL,NULL,NULL,NULL,NULL,NULL}'::bigint[])
       OPERATOR(pg_catalog.||) ARRAY[p_pre, pg_catalog.pg_current_xact_id()::pg_catalog.text::bigint];

COMMENT ON FUNCTION pgqueue._wait_floor_leased(bigint[], bigint) IS
    'pgqueue internal: a group''s wait floor with the lock stripe read before a lease''s xid, and that xid, for the hand-off of the message''s completion';
