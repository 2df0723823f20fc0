-- Take a queue's lock stripe in ROW EXCLUSIVE mode until the end of the transaction; always true.
-- Every operation on a queue's messages or dead letters calls it before it touches a row, so
-- queue_drop and a max_size or group_concurrency change (pgqueue._queue_quiesce) wait for it and
-- it waits for them.
-- pg_sequence_last_value opens the sequence with that lock and needs SELECT or USAGE on it;
-- its value (random at the start, moved as a signal: tables/queue_lock.sql) is not used here
-- (docs/locking.md).
CREATE FUNCTION pgqueue._queue_lock(p_queue_id integer)
RETURNS boolean
LANGUAGE sql VOLATILE
RETURN (pg_catalog.pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)) IS NULL) IS NOT NULL;

COMMENT ON FUNCTION pgqueue._queue_lock(integer) IS
    'pgqueue internal: take the queue''s lock stripe in ROW EXCLUSIVE mode for the rest of the transaction (docs/locking.md)';
