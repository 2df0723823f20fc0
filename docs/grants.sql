-- pgqueue privilege recipes: run as the extension's owner (a plain install: the owner of schema
-- pgqueue), or a superuser, with psql, naming the roles that should produce, consume and administer:
--
--   psql -d mydb -v producer=app_writer -v consumer=app_worker -v admin=queue_ops -f docs/grants.sql
--
-- The roles must exist (CREATE ROLE ... NOLOGIN, then GRANT them to login roles). pgqueue's
-- functions are SECURITY INVOKER but for six SECURITY DEFINER ones (docs/security.md), so
-- these table and column privileges are what decides who may do what; without them PUBLIC can
-- call the other functions but every call fails with 42501.
-- Run it again after every upgrade (ALTER EXTENSION pgqueue UPDATE, pgqueue install, a plain
-- install's step scripts): a new version may add tables, sequences and functions.
-- See docs/security.md for what each role can and cannot do.

\set ON_ERROR_STOP on

-- The SECURITY DEFINER functions run as the owner: only the roles below may call them. The
-- install revokes them from PUBLIC; a dump of a plain install restored without its privileges
-- (pg_restore -x, pg_dump -x) gives them back to PUBLIC, so the recipe takes them back too.
REVOKE ALL ON FUNCTION pgqueue._queue_reserve(integer, bigint), pgqueue._queue_pin(integer),
                       pgqueue._queue_quiesce(integer), pgqueue._message_group_lock(integer, text),
                       pgqueue._message_group_hand(integer, text), pgqueue.schedule_run(integer) FROM PUBLIC;
-- ... and from the roles that default privileges on functions name (ALTER DEFAULT PRIVILEGES ...
-- GRANT EXECUTE ON FUNCTIONS TO an application role): the install takes them back from those,
-- but a dump of a plain install restored where the restoring role (a superuser, say, before it
-- sets the owner) has default privileges on functions creates them under those. Any role's:
-- the functions' creator is not recorded. The roles below are granted theirs after this.
SELECT DISTINCT format('REVOKE ALL ON FUNCTION %s FROM %s CASCADE', p.oid::regprocedure,
                       CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END)
  FROM pg_proc p
  JOIN pg_default_acl d ON d.defaclobjtype = 'f' AND d.defaclnamespace IN (0, p.pronamespace)
 CROSS JOIN aclexplode(d.defaclacl) a
 WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosecdef AND a.grantee <> p.proowner
   AND a.privilege_type = 'EXECUTE' \gexec

-- Producer: enqueue (message_create, message_create_batch), read settings and stats.
-- It can see message ids, queues and times but not contents, and cannot dequeue, complete or
-- drop anything (all of those need UPDATE or DELETE).
GRANT USAGE ON SCHEMA pgqueue TO :"producer";
GRANT SELECT ON pgqueue.queue TO :"producer";
-- INSERT on the columns pgqueue's enqueue functions write, not on id (whose default is the
-- sequence): with it, plain SQL could take ids the sequence will hand out next, and every other
-- producer's message_create would fail on them (23505); nor on locked_until, attempts, state,
-- last_error or claim_id, which only consumers write. (REVOKE first: a table-wide INSERT from
-- an earlier run of this recipe would cover every column.)
REVOKE INSERT ON pgqueue.message FROM :"producer";
GRANT INSERT (queue_id, dequeue_at, created_at, content, content_type, group_key, turn_at, idem_key, write_mark)
      ON pgqueue.message TO :"producer";
GRANT SELECT (id, queue_id, dequeue_at, locked_until, created_at, group_key, turn_at, idem_key)
      ON pgqueue.message TO :"producer";
GRANT SELECT (queue_id) ON pgqueue.dead_letter TO :"producer";
-- idempotency keys: the keys kept for a queue's key_window_ms; message groups: a group's lock (issue 14)
GRANT SELECT ON pgqueue.message_key TO :"producer";
GRANT EXECUTE ON FUNCTION pgqueue._message_group_lock(integer, text), pgqueue._message_group_hand(integer, text)
      TO :"producer";
GRANT USAGE ON SEQUENCE pgqueue.message_id_seq TO :"producer";
-- the queues' lock stripes (docs/locking.md) and counters (queue_counters); max_size accounting and the REPEATABLE READ pin
-- run as the extension's owner: producers may not write pgqueue.queue or pgqueue.queue_size
SELECT format('GRANT USAGE ON SEQUENCE %s TO %I', c.oid::regclass, :'producer')
  FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname ~ '^(queue_lock|counter_[a-z0-9]+)_[0-9]+$' \gexec
GRANT EXECUTE ON FUNCTION pgqueue._queue_reserve(integer, bigint), pgqueue._queue_pin(integer) TO :"producer";
-- queue_next_due reads a rate-limited queue's rate sequence (SELECT reads it, it cannot take slots);
-- the Python client calls it to tell an unknown queue from an empty answer
SELECT format('GRANT SELECT ON SEQUENCE %s TO %I', c.oid::regclass, :'producer')
  FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname ~ '^queue_rate_[0-9]+$' \gexec
-- ... and run the schedules (schedule_run, `pgqueue scheduler`; it runs as the extension's owner
-- and enqueues only the slots that are due) and read them (schedule_list); creating and dropping
-- schedules is the administrator's. Not UPDATE: with it plain SQL could move any schedule's
-- next_run (stop every schedule) or lock their rows (REVOKE: earlier versions of this recipe
-- granted UPDATE (next_run), which schedule_run needed before it ran as the owner).
REVOKE UPDATE ON pgqueue.schedule FROM :"producer";
GRANT SELECT ON pgqueue.schedule TO :"producer";
GRANT EXECUTE ON FUNCTION pgqueue.schedule_run(integer) TO :"producer";
-- A plain install (`pgqueue install`) records its version in pgqueue.install, which the client,
-- the worker and the command line read at start (pgqueue.check_server): every role reads it
-- (administrators through their grant on every table, below).
SELECT format('GRANT SELECT ON pgqueue.install TO %I', r)
  FROM unnest(ARRAY[:'producer', :'consumer']) r
 WHERE pg_catalog.to_regclass('pgqueue.install') IS NOT NULL \gexec

-- Consumer: dequeue, complete (also acknowledge-and-fetch), heartbeat, defer, fail (which may
-- dead-letter), stats, and message_peek (SELECT) and message_cancel (DELETE); producers can do
-- neither.
-- It cannot create, alter or drop queues, nor requeue or purge dead letters.
GRANT USAGE ON SCHEMA pgqueue TO :"consumer";
GRANT SELECT ON pgqueue.queue TO :"consumer";
GRANT SELECT, DELETE ON pgqueue.message TO :"consumer";
-- UPDATE of the columns a lease, heartbeat, defer, fail and a group's hand-off write, not of id
-- or queue_id: with them plain SQL could move messages onto the ids the sequence hands out next,
-- and every producer's message_create would fail on them (23505). (REVOKE first: a table-wide
-- UPDATE from an earlier run of this recipe would cover every column.)
REVOKE UPDATE ON pgqueue.message FROM :"consumer";
GRANT UPDATE (locked_until, attempts, dequeue_at, state, last_error, turn_at, write_mark, wait_floor)
      ON pgqueue.message TO :"consumer";
-- dead letters: written when a message fails for the last time, counted by queue_stats (REVOKE
-- first: 0.3's recipe granted SELECT (id, queue_id))
REVOKE SELECT ON pgqueue.dead_letter FROM :"consumer";
GRANT SELECT (queue_id), INSERT ON pgqueue.dead_letter TO :"consumer";
-- a completed message's idempotency key is kept for the queue's key_window_ms (pgqueue._message_left)
GRANT SELECT, INSERT, UPDATE, DELETE ON pgqueue.message_key TO :"consumer";
-- ... and a message handed out or completed hands its group's turn on, under the group's lock;
-- a REPEATABLE READ lease on a queue with groups pins the queue's row (a limit changed since)
GRANT EXECUTE ON FUNCTION pgqueue._message_group_lock(integer, text), pgqueue._queue_pin(integer) TO :"consumer";
-- ... and rate-limited queues take their slots from the queue's rate sequence (nextval, setval)
SELECT format('GRANT USAGE, UPDATE ON SEQUENCE %s TO %I', c.oid::regclass, :'consumer')
  FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname ~ '^queue_rate_[0-9]+$' \gexec
-- the lock stripes and the counters (each dequeue, completion and failure counts)
SELECT format('GRANT USAGE ON SEQUENCE %s TO %I', c.oid::regclass, :'consumer')
  FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname ~ '^(queue_lock|counter_[a-z0-9]+)_[0-9]+$' \gexec

-------------------------------------------------------------------------------
-- Monitoring, optional: add -v monitor=ROLE (pgqueue metrics, pgqueue stats with --groups, a
-- read-only dashboard). Reads queue_stats, queue_counters, queue_list and queue_group_stats: the
-- queues, the message columns the counts need (the group keys too, never contents or
-- idempotency keys) and the counters' values (SELECT on a sequence reads it, it cannot advance
-- it). It can change nothing.
\if :{?monitor}
GRANT USAGE ON SCHEMA pgqueue TO :"monitor";
GRANT SELECT ON pgqueue.queue TO :"monitor";
GRANT SELECT (id, queue_id, dequeue_at, locked_until, created_at, group_key, turn_at) ON pgqueue.message TO :"monitor";
GRANT SELECT (queue_id) ON pgqueue.dead_letter TO :"monitor";
SELECT format('GRANT SELECT ON SEQUENCE %s TO %I', c.oid::regclass, :'monitor')
  FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname ~ '^(counter_[a-z0-9]+|queue_rate)_[0-9]+$' \gexec
SELECT format('GRANT SELECT ON pgqueue.install TO %I', :'monitor')
 WHERE pg_catalog.to_regclass('pgqueue.install') IS NOT NULL \gexec
\endif

-------------------------------------------------------------------------------
-- pgqueue_spark (#17): the Spark data source (pgqueue.spark), optional: add -v spark=ROLE.
--   psql -d mydb -v producer=... -v consumer=... -v admin=... -v spark=etl_spark -f docs/grants.sql
-- Enough for every entry point: df.write (task and job mode), writeStream, spark.read (with
-- includeDead) and spark.readStream, and pgqueue.spark.release(). It can read message contents,
-- enqueue, claim and acknowledge (delete) messages, dead-letter poison messages as
-- message_dequeue does, and keep its own consumers, claims, staging and publish log. It cannot
-- create, alter or drop queues, requeue or purge dead letters, or delete consumers.
\if :{?spark}
GRANT USAGE ON SCHEMA pgqueue TO :"spark";
GRANT SELECT ON pgqueue.queue TO :"spark";
GRANT SELECT, DELETE ON pgqueue.message TO :"spark";
-- INSERT and UPDATE of the columns its functions write, as for producers and consumers above
-- (not id nor queue_id: plain SQL could take the ids the sequence hands out next)
REVOKE INSERT, UPDATE ON pgqueue.message FROM :"spark";
GRANT INSERT (queue_id, dequeue_at, created_at, content, content_type, group_key, turn_at, idem_key, write_mark)
      ON pgqueue.message TO :"spark";
GRANT UPDATE (locked_until, attempts, dequeue_at, state, last_error, turn_at, write_mark, wait_floor, claim_id)
      ON pgqueue.message TO :"spark";
GRANT SELECT, INSERT ON pgqueue.dead_letter TO :"spark";
GRANT SELECT, INSERT, UPDATE, DELETE ON pgqueue.message_key TO :"spark";
GRANT EXECUTE ON FUNCTION pgqueue._message_group_lock(integer, text), pgqueue._message_group_hand(integer, text)
      TO :"spark";
GRANT USAGE ON SEQUENCE pgqueue.message_id_seq, pgqueue.spark_consumer_id_seq, pgqueue.spark_claim_id_seq
      TO :"spark";
GRANT SELECT, INSERT, UPDATE ON pgqueue.spark_consumer TO :"spark";
GRANT SELECT, INSERT, DELETE ON pgqueue.spark_claim, pgqueue.spark_staging, pgqueue.spark_publish_log
      TO :"spark";
SELECT format('GRANT USAGE ON SEQUENCE %s TO %I', c.oid::regclass, :'spark')
  FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relname ~ '^(queue_lock|counter_[a-z0-9]+)_[0-9]+$' \gexec
GRANT EXECUTE ON FUNCTION pgqueue._queue_reserve(integer, bigint), pgqueue._queue_pin(integer) TO :"spark";
SELECT format('GRANT SELECT ON pgqueue.install TO %I', :'spark')
 WHERE pg_catalog.to_regclass('pgqueue.install') IS NOT NULL \gexec
\endif

-------------------------------------------------------------------------------
-- Administrator: everything, including queue_create/alter/drop and dead-letter requeue/purge.
-- Last, so that a role that is also another's (the recipes above REVOKE table-wide rights on
-- pgqueue.message before their column grants) keeps everything.
GRANT USAGE ON SCHEMA pgqueue TO :"admin";
-- Not ALL: TRIGGER would let it put a trigger of its own on pgqueue's tables, which then runs as
-- whoever writes them, the extension's owner (a superuser, often) and the upgrade scripts
-- included; REFERENCES a foreign key of its own that holds queue_drop up. (REVOKE: earlier runs
-- of this recipe granted ALL.)
REVOKE TRIGGER, REFERENCES ON ALL TABLES IN SCHEMA pgqueue FROM :"admin";
GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA pgqueue TO :"admin";
GRANT ALL ON ALL SEQUENCES IN SCHEMA pgqueue TO :"admin";
GRANT EXECUTE ON FUNCTION pgqueue._queue_reserve(integer, bigint), pgqueue._queue_pin(integer),
                          pgqueue._queue_quiesce(integer), pgqueue._message_group_lock(integer, text),
                          pgqueue._message_group_hand(integer, text), pgqueue.schedule_run(integer) TO :"admin";
