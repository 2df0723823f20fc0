-- message_heartbeat_batch against message_heartbeat calls, inside the server (no round trips):
-- 10,000 leases in one batch call, 100 and 1,000 in one call, and 1,000 single calls from one
-- DO block. Run on a scratch database with pgqueue installed:
--
--     psql -X -d scratch -f bench/experiments/heartbeat_batch/timing.sql
--
-- Session 53 (local server, 2 cores): 10,000 in 123 ms, 100 in 3 ms, 1,000 single calls 57 ms,
-- 1,000 in one call 20 ms.
\set ON_ERROR_STOP 1
SELECT pgqueue.queue_create('hb_timing', p_lock_ms => 60000);
SELECT count(*) FROM pgqueue.message_create_batch('hb_timing', array_fill('x'::bytea, ARRAY[10000]));
CREATE TEMP TABLE dd AS SELECT id, attempts FROM pgqueue.message_dequeue('hb_timing', 10000, 60000);
\timing on
SELECT cardinality(pgqueue.message_heartbeat_batch((SELECT array_agg(id) FROM dd), (SELECT array_agg(attempts) FROM dd), 60000)) AS stale_of_10000;
SELECT cardinality(pgqueue.message_heartbeat_batch(ARRAY(SELECT id FROM dd ORDER BY id LIMIT 100),
                                                   ARRAY(SELECT attempts FROM dd ORDER BY id LIMIT 100), 60000)) AS stale_of_100;
DO $$ DECLARE r record; BEGIN FOR r IN SELECT id, attempts FROM dd ORDER BY id LIMIT 1000 LOOP PERFORM pgqueue.message_heartbeat(r.id, r.attempts, 60000); END LOOP; END $$;
SELECT cardinality(pgqueue.message_heartbeat_batch(ARRAY(SELECT id FROM dd ORDER BY id LIMIT 1000),
                                                   ARRAY(SELECT attempts FROM dd ORDER BY id LIMIT 1000), 60000)) AS stale_of_1000;
\timing off
SELECT pgqueue.queue_drop('hb_timing');
