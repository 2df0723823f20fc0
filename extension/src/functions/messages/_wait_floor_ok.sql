-- Whether a group's wait floor p_floor (pgqueue._wait_floor_next: on the message leaving with the
-- group's turn) still holds: no message was placed below the clock in the queue, and its group
-- concurrency was not changed, since the floor was recorded (the queue's lock stripe, which both
-- advance, still at the value the floor saw). Read inside the hand-off's statement, after its
-- snapshot was taken: a message placed low that the snapshot sees advanced the stripe before
-- it committed, so before this read (a read before the statement could miss it and hand the
-- turn past it). False for a NULL floor (reading nothing).
CREATE FUNCTION pgqueue._wait_floor_ok(p_floor bigint[], p_queue_id integer)
RETURNS boolean
LANGUAGE sql VOLATILE
RETURN CASE WHEN p_floor IS NULL THEN false
            ELSE coalesce(p_floor[6] OPERATOR(pg_catalog.=)
                          pg_catalog.pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)), false) END;

COMMENT ON FUNCTION pgqueue._wait_floor_ok(bigint[], integer) IS
    'pgqueue internal: true if a message group''s wait floor still holds (the queue''s lock stripe has not moved since it was recorded)';
