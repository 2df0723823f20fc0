-- The clock for the key of a row about to be written: this transaction's xid is assigned first
-- (if it has none yet), then the clock is read. A consumer's session hint relies on that order
-- (pgqueue._message_take): a write whose xid a consumer's snapshot did not see yet gets a key
-- that is not below the hint. A row keyed at or above this reading less 5 ms is not below the
-- clock, and the function that writes it says so (column write_mark, triggers
-- message_placed_low), however late the row's trigger would run.
CREATE FUNCTION pgqueue._write_clock()
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN CASE WHEN pg_catalog.pg_current_xact_id() IS NOT NULL THEN pgqueue.now_ms() END;

COMMENT ON FUNCTION pgqueue._write_clock() IS
    'pgqueue internal: assign the transaction''s xid, then read the clock (epoch ms) for a row''s default dequeue_at or lease';
