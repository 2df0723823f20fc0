-- pg_dump must keep the queue's contents and settings: an extension's tables are not dumped
-- unless they are marked as configuration. Consumers, claims and the publish log survive too (a
-- restored Spark consumer resumes where it was; a replayed publish stays a no-op). Staging is
-- in-flight work of running Spark jobs, which publish into the database they staged in, never
-- into a restored copy: not dumped; nor is queue_size, which is derived, nor message_group_lock,
-- whose rows are made on first use, nor the sequences but the counters below (lock stripes,
-- rate limits, the capped queues' marks: state that starts afresh). (The plain SQL install
-- leaves this file out: pg_dump dumps every table of a plain install.)
SELECT pg_catalog.pg_extension_config_dump('pgqueue.queue', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.message', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.message_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.dead_letter', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_consumer', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_consumer_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_claim', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_claim_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_publish_log', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.schedule_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.message_key', '');
-- The counters of pgqueue.queue_counters, which count since the queue was created (one call per
-- statement: each call rewrites the extension's catalog row; one line, which the plain install leaves out).
DO $$ DECLARE v_seq regclass; BEGIN FOR v_seq IN SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relnamespace = 'pgqueue'::pg_catalog.regnamespace AND c.relkind = 'S' AND c.relname ~ '^counter_[a-z0-9]+_[0-9]+$' ORDER BY c.relname LOOP PERFORM pg_catalog.pg_extension_config_dump(v_seq, ''); END LOOP; END $$;
