-- The clock for the key of a row about to be written: this transaction's xid is assigned first
-- (if it has none yet), then the clock is read. A consumer's session hint relies on that order
-- (pgqueue._message_take): a write whose xid a consumer's snapshot did not see yet gets a key
-- that is not below the hint. The reading is also kept in the transaction-local setting
-- pgqueue.write_clock, where the trigger message_placed_low compares the rows' keys with it
-- (pgqueue._message_placed_low).
CREATE FUNCTION pgqueue._write_clock()
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN CASE WHEN pg_catalog.pg_current_xact_id() IS NOT NULL
            THEN pg_catalog.set_config('pgqueue.write_clock', pgqueue.now_ms()::text, true)::bigint END;

COMMENT ON FUNCTION pgqueue._write_clock() IS
    'pgqueue internal: assign the transaction''s xid, then read the clock (epoch ms) for a row''s default dequeue_at; kept in pgqueue.write_clock for the trigger message_placed_low';
