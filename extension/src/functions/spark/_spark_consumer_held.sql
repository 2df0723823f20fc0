-- Whether a Spark consumer is held: its recorded holder session still holds the session-level
-- advisory lock whose random key spark_consumer_open recorded with it (docs/locking.md). A lock
-- someone else takes on that key, or a backend that reuses the holder's pid, holds nothing.
CREATE FUNCTION pgqueue._spark_consumer_held(p_holder_pid integer, p_holder_key bigint)
RETURNS boolean
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT EXISTS (
        SELECT FROM pg_catalog.pg_locks l
         WHERE l.locktype = 'advisory' AND l.granted AND l.pid = p_holder_pid
           AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                              WHERE d.datname = pg_catalog.current_database())
           AND l.classid = (p_holder_key >> 32)::oid
           AND l.objid = (p_holder_key & 4294967295)::oid
           AND l.objsubid = 1);
END;

COMMENT ON FUNCTION pgqueue._spark_consumer_held(integer, bigint) IS
    'pgqueue internal: true while the session that opened a Spark consumer still holds it';
