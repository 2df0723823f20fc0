-- The catalog, one home for it (sql/ and pytest do not repeat it): exactly which tables, views,
-- sequences, indexes, constraints and public functions (signature, volatility, strictness)
-- exist, the probes' partial predicates, what pg_dump keeps, and the rules for every function:
-- a COMMENT, search_path pinned unless the body is SQL-standard, SECURITY DEFINER only where
-- docs/security.md says. Adding an object means adding it here.
BEGIN;
SELECT plan(49);

-- relations: exactly these, nothing left over from an upgrade or added by accident
SELECT tables_are('pgqueue', ARRAY['queue', 'message', 'dead_letter', 'queue_size', 'spark_claim', 'spark_consumer',
                                   'spark_publish_log', 'spark_staging', 'schedule', 'message_key', 'message_group_lock'], 'the tables of schema pgqueue');
SELECT views_are('pgqueue', ARRAY['dead_letters'], 'the views of schema pgqueue');
SELECT sequences_are('pgqueue', ARRAY['message_id_seq', 'queue_id_seq', 'spark_claim_id_seq', 'spark_consumer_id_seq',
                                      'schedule_id_seq']
                                || ARRAY(SELECT 'queue_lock_' || g FROM generate_series(0, 63) g)
                                || ARRAY(SELECT 'queue_rate_' || g FROM generate_series(0, 63) g)
                                || ARRAY(SELECT 'queue_size_exact_' || g FROM generate_series(0, 63) g)
                                || ARRAY(SELECT 'queue_size_recount_' || g FROM generate_series(0, 63) g)
                                || ARRAY(SELECT 'counter_' || k || '_' || g
                                           FROM unnest(ARRAY['enqueued', 'delivered', 'completed', 'failed',
                                                             'dead', 'expired', 'enqueued32', 'delivered32',
                                                             'completed32']) k, generate_series(0, 63) g),
                     'the sequences of schema pgqueue: ids, the 64 lock stripes queue_lock_0..63, the rate '
                     'limits queue_rate_0..63, the max_size marks queue_size_exact_0..63 and recount windows '
                     'queue_size_recount_0..63, and the '
                     'counters counter_<kind>_0..63 (and counter_<kind>32_0..63, which count by 32)');
SELECT set_eq($$ SELECT c.relname::text FROM pg_class c
                  WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'i' $$,
              ARRAY['dead_letter_pkey', 'dead_letter_queue_idx', 'message_claim_idx', 'message_leased_idx',
                    'message_pkey', 'message_ready_idx', 'queue_name_key', 'queue_pkey', 'queue_size_pkey',
                    'spark_claim_consumer_seq_key', 'spark_claim_pkey', 'spark_consumer_pkey',
                    'spark_consumer_queue_name_key', 'spark_publish_log_pkey', 'spark_staging_pkey',
                    'schedule_pkey', 'schedule_name_key', 'schedule_next_run_idx', 'schedule_queue_idx', 'schedule_last_run_idx',
                    'message_turn_idx', 'message_group_wait_idx', 'message_group_turn_idx', 'message_idem_key_idx',
                    'message_key_pkey', 'message_key_until_idx', 'message_group_lock_pkey',
                    'queue_rate_stripe_key'],
              'the indexes of schema pgqueue');
SELECT set_eq($$ SELECT conrelid::regclass::text, conname::text, contype::text FROM pg_constraint
                  WHERE connamespace = 'pgqueue'::regnamespace $$,
              $$ VALUES ('pgqueue.dead_letter', 'dead_letter_pkey', 'p'), ('pgqueue.message', 'message_pkey', 'p'),
                        ('pgqueue.queue', 'queue_lock_ms_check', 'c'), ('pgqueue.queue', 'queue_max_attempts_check', 'c'),
                        ('pgqueue.queue', 'queue_max_size_check', 'c'), ('pgqueue.queue', 'queue_name_check', 'c'),
                        ('pgqueue.queue', 'queue_name_key', 'u'), ('pgqueue.queue', 'queue_pkey', 'p'),
                        ('pgqueue.queue', 'queue_retry_check', 'c'), ('pgqueue.queue_size', 'queue_size_pkey', 'p'),
                        ('pgqueue.spark_claim', 'spark_claim_consumer_seq_key', 'u'),
                        ('pgqueue.spark_claim', 'spark_claim_pkey', 'p'),
                        ('pgqueue.spark_consumer', 'spark_consumer_name_check', 'c'),
                        ('pgqueue.spark_consumer', 'spark_consumer_pkey', 'p'),
                        ('pgqueue.spark_consumer', 'spark_consumer_queue_name_key', 'u'),
                        ('pgqueue.spark_consumer', 'spark_consumer_seq_check', 'c'),
                        ('pgqueue.spark_publish_log', 'spark_publish_log_key_check', 'c'),
                        ('pgqueue.spark_publish_log', 'spark_publish_log_pkey', 'p'),
                        ('pgqueue.spark_staging', 'spark_staging_pkey', 'p'),
                        ('pgqueue.schedule', 'schedule_pkey', 'p'), ('pgqueue.schedule', 'schedule_name_key', 'u'),
                        ('pgqueue.schedule', 'schedule_kind_check', 'c'),
                        ('pgqueue.schedule', 'schedule_every_check', 'c'),
                        ('pgqueue.schedule', 'schedule_missed_check', 'c'),
                        ('pgqueue.queue', 'queue_group_concurrency_check', 'c'),
                        ('pgqueue.queue', 'queue_key_window_check', 'c'),
                        ('pgqueue.queue', 'queue_rate_limit_check', 'c'),
                        ('pgqueue.message_key', 'message_key_pkey', 'p'),
                        ('pgqueue.message_group_lock', 'message_group_lock_pkey', 'p') $$,
              'the named constraints (relation, name, kind)');
SELECT col_is_pk('pgqueue', 'message', 'id', 'message.id is the primary key');
SELECT col_type_is('pgqueue', 'message', 'dequeue_at', 'bigint', 'dequeue_at is epoch ms (bigint)');
SELECT col_type_is('pgqueue', 'message', 'locked_until', 'bigint', 'locked_until is epoch ms (bigint)');
SELECT col_type_is('pgqueue', 'message', 'attempts', 'integer', 'attempts is the integer fencing token');
SELECT col_not_null('pgqueue', 'message', 'content', 'message content is NOT NULL');
SELECT col_is_null('pgqueue', 'message', 'locked_until', 'locked_until is nullable (NULL: not leased)');

-- indexes: the two partial probes
SELECT has_index('pgqueue', 'message', 'message_ready_idx', ARRAY['queue_id', 'dequeue_at', 'id'],
                 'message_ready_idx on (queue_id, dequeue_at, id)');
SELECT has_index('pgqueue', 'message', 'message_leased_idx', ARRAY['queue_id', 'locked_until', 'id'],
                 'message_leased_idx on (queue_id, locked_until, id)');
SELECT index_is_type('pgqueue', 'message', 'message_ready_idx', 'btree', 'message_ready_idx is a btree');
SELECT is((SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i
            WHERE i.indexrelid = 'pgqueue.message_ready_idx'::regclass),
          '(locked_until IS NULL)', 'message_ready_idx is partial: WHERE locked_until IS NULL');
SELECT is((SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i
            WHERE i.indexrelid = 'pgqueue.message_leased_idx'::regclass),
          '(locked_until IS NOT NULL)', 'message_leased_idx is partial: WHERE locked_until IS NOT NULL');
-- message groups (issue 14): the turns waiting, by (turn_at, id); nothing in flight in it
SELECT has_index('pgqueue', 'message', 'message_turn_idx', ARRAY['queue_id', 'turn_at', 'id'],
                 'message_turn_idx on (queue_id, turn_at, id)');
SELECT is((SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i
            WHERE i.indexrelid = 'pgqueue.message_turn_idx'::regclass),
          '((turn_at IS NOT NULL) AND (locked_until IS NULL))',
          'message_turn_idx is partial: WHERE turn_at IS NOT NULL AND locked_until IS NULL');
SELECT has_index('pgqueue', 'dead_letter', 'dead_letter_queue_idx', ARRAY['queue_id', 'dead_at', 'id'],
                 'dead_letter_queue_idx on (queue_id, dead_at, id)');
SELECT is(pg_get_indexdef('pgqueue.queue_rate_stripe_key'::regclass),
          'CREATE UNIQUE INDEX queue_rate_stripe_key ON pgqueue.queue USING btree (((id & 63))) WHERE (rate_limit IS NOT NULL)',
          'queue_rate_stripe_key: one rate-limited queue per rate sequence (id & 63)');

-- the extension
SELECT is((SELECT extrelocatable FROM pg_extension WHERE extname = 'pgqueue'), false, 'pgqueue is not relocatable');
SELECT set_eq($$ SELECT unnest(extconfig)::regclass::text FROM pg_extension WHERE extname = 'pgqueue' $$,
              ARRAY['pgqueue.queue', 'pgqueue.queue_id_seq', 'pgqueue.message', 'pgqueue.message_id_seq',
                    'pgqueue.dead_letter', 'pgqueue.spark_claim', 'pgqueue.spark_claim_id_seq',
                    'pgqueue.spark_consumer', 'pgqueue.spark_consumer_id_seq', 'pgqueue.spark_publish_log',
                    'pgqueue.schedule', 'pgqueue.schedule_id_seq', 'pgqueue.message_key']
                    || ARRAY(SELECT 'pgqueue.counter_' || k || '_' || g
                               FROM unnest(ARRAY['enqueued', 'delivered', 'completed', 'failed', 'dead',
                                                 'expired', 'enqueued32', 'delivered32', 'completed32']) k,
                                    generate_series(0, 63) g),
              'pg_dump keeps (pg_extension_config_dump) the data tables, their sequences and the counters, not the derived '
              'queue_size (recounted on demand) nor spark_staging');

-- every public function: signature, volatility (i/s/v) and strictness
SELECT set_eq($$ SELECT p.oid::regprocedure::text, p.provolatile::text, p.proisstrict FROM pg_proc p
                  WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.proname NOT LIKE '\_%' $$,
              $$ VALUES ('pgqueue.dead_letter_purge(text,bigint[],bigint)', 'v', false),
                        ('pgqueue.dead_letter_requeue(text,bigint[],bigint)', 'v', false),
                        ('pgqueue.from_epoch(bigint)', 'i', false),
                        ('pgqueue.message_complete(bigint,integer)', 'v', false),
                        ('pgqueue.message_complete_batch(bigint[],integer[])', 'v', false),
                        ('pgqueue.message_complete_and_dequeue(bigint[],integer[],text,integer,bigint)', 'v', false),
                        ('pgqueue.message_create(bytea)', 'v', false),
                        ('pgqueue.message_create(text,bytea,bigint,text,text,text)', 'v', false),
                        ('pgqueue.message_create_batch(text,bytea[],bigint,text,bigint[],text[],text[],text[])', 'v', false),
                        ('pgqueue.message_create_json(text,jsonb,bigint,text,text,text)', 'v', false),
                        ('pgqueue.message_create_text(text,text,bigint,text,text,text)', 'v', false),
                        ('pgqueue.message_cancel(text,bigint[])', 'v', false),
                        ('pgqueue.message_peek(text,integer)', 's', false),
                        ('pgqueue.message_reject(bigint,integer,text)', 'v', false),
                        ('pgqueue.message_defer(bigint,integer,bigint,bytea)', 'v', false),
                        ('pgqueue.message_dequeue(text,integer,bigint)', 'v', false),
                        ('pgqueue.message_fail(bigint,integer,text,bigint)', 'v', false),
                        ('pgqueue.message_heartbeat(bigint,integer,bigint)', 'v', false),
                        ('pgqueue.message_heartbeat_batch(bigint[],integer[],bigint)', 'v', false),
                        ('pgqueue.now_ms()', 'v', false),
                        ('pgqueue.priority_dequeue_at(integer)', 'i', true),
                        ('pgqueue.queue_alter(text,bigint,integer,bigint,bigint,bigint,boolean,integer,bigint,integer)', 'v', false),
                        ('pgqueue.queue_create(text,bigint,integer,bigint,bigint,bigint,boolean,boolean,integer,bigint,integer)', 'v', false),
                        ('pgqueue.queue_counters(text)', 's', false),
                        ('pgqueue.queue_drop(text)', 'v', false),
                        ('pgqueue.queue_group_stats(text,integer)', 's', false),
                        ('pgqueue.queue_list()', 's', false),
                        ('pgqueue.queue_next_due(text)', 's', false),
                        ('pgqueue.queue_stats(text)', 's', false),
                        ('pgqueue.queue_stats_exact(text)', 's', false),
                        ('pgqueue.schedule_create(text,text,bytea,bigint,text,text,text,bigint)', 'v', false),
                        ('pgqueue.schedule_drop(text)', 'v', false),
                        ('pgqueue.schedule_list()', 's', false),
                        ('pgqueue.schedule_run(integer)', 'v', false),
                        ('pgqueue.spark_ack(text,text,bigint)', 'v', false),
                        ('pgqueue.spark_claim(text,text,integer,bigint,bigint)', 'v', false),
                        ('pgqueue.spark_claimed(text,text,bigint,bigint,bigint,bigint)', 's', false),
                        ('pgqueue.spark_claims(text,text,bigint,bigint)', 's', false),
                        ('pgqueue.spark_consumer_close(text,text)', 'v', false),
                        ('pgqueue.spark_consumer_open(text,text)', 'v', false),
                        ('pgqueue.spark_consumers(text)', 's', false),
                        ('pgqueue.spark_discard(uuid)', 'v', false),
                        ('pgqueue.spark_pending_seq(text,text)', 's', false),
                        ('pgqueue.spark_publish(text,text,uuid,integer[],bigint[],bigint[])', 'v', false),
                        ('pgqueue.spark_release(text,text)', 'v', false),
                        ('pgqueue.spark_snapshot(text,bigint,bigint,boolean)', 's', false),
                        ('pgqueue.spark_snapshot_range(text,boolean)', 's', false),
                        ('pgqueue.spark_stage(uuid,integer,bigint,bigint,bytea[],text,bigint[],bigint[],text[],text[])', 'v', false),
                        ('pgqueue.spark_staging_purge(bigint)', 'v', false),
                        ('pgqueue.to_epoch(timestamp with time zone)', 'i', true) $$,
              'the public functions: signature, volatility, strictness');

-- return types of the contract
SELECT function_returns('pgqueue', 'message_create', ARRAY['text', 'bytea', 'bigint', 'text', 'text', 'text'], 'bigint', 'message_create returns the id');
SELECT function_returns('pgqueue', 'message_create_batch', ARRAY['text', 'bytea[]', 'bigint', 'text', 'bigint[]', 'text[]', 'text[]', 'text[]'],
                        'setof bigint', 'message_create_batch returns SETOF bigint');
SELECT function_returns('pgqueue', 'message_complete', ARRAY['bigint', 'integer'], 'boolean', 'message_complete returns boolean');
SELECT function_returns('pgqueue', 'message_heartbeat', ARRAY['bigint', 'integer', 'bigint'], 'boolean', 'message_heartbeat returns boolean');
SELECT function_returns('pgqueue', 'message_heartbeat_batch', ARRAY['bigint[]', 'integer[]', 'bigint'], 'bigint[]', 'message_heartbeat_batch returns the stale ids');
SELECT function_returns('pgqueue', 'message_defer', ARRAY['bigint', 'integer', 'bigint', 'bytea'], 'boolean', 'message_defer returns boolean');
SELECT function_returns('pgqueue', 'message_fail', ARRAY['bigint', 'integer', 'text', 'bigint'], 'boolean', 'message_fail returns boolean');
SELECT function_returns('pgqueue', 'queue_drop', ARRAY['text'], 'boolean', 'queue_drop returns boolean');
SELECT function_returns('pgqueue', 'to_epoch', ARRAY['timestamp with time zone'], 'bigint', 'to_epoch returns bigint');
SELECT bag_has($$ SELECT a.name, format_type(a.typ, NULL)
                    FROM pg_proc p,
                         unnest(p.proargnames[4:], p.proallargtypes[4:]) AS a(name, typ)
                   WHERE p.oid = 'pgqueue.message_dequeue(text, integer, bigint)'::regprocedure $$,
               $$ VALUES ('id', 'bigint'), ('content', 'bytea'), ('attempts', 'integer'),
                         ('dequeue_at', 'bigint'), ('state', 'bytea') $$,
               'message_dequeue returns at least id, content, attempts, dequeue_at, state');

-- rules that hold for every function, present and future
SELECT is_empty($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                    WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.proname NOT LIKE '\_%'
                      AND obj_description(p.oid, 'pg_proc') IS NULL $$,
                'every public function has a COMMENT');
SELECT is_empty($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                    WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.proname NOT LIKE '\_%'
                      AND length(obj_description(p.oid, 'pg_proc')) < 20 $$,
                'every public function''s COMMENT says something');
-- A function whose body is a string (PL/pgSQL, or SQL in quotes) resolves names when it runs,
-- so it must pin search_path; a SQL-standard body (RETURN / BEGIN ATOMIC, prosqlbody) was bound
-- when it was created and cannot be hijacked (and stays inlinable without a SET clause).
-- message_create and message_complete alone, the hot paths of producers and of the lease cycle,
-- qualify every name and operator instead (tests/test_security.py proves it against hostile
-- objects ahead of pg_catalog).
SELECT is_empty($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                    WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosqlbody IS NULL
                      AND p.oid <> ALL (ARRAY['pgqueue.message_create(text,bytea,bigint,text,text,text)',
                                              'pgqueue.message_complete(bigint,integer)',
                                              'pgqueue._message_take(integer,integer,bigint,integer,bigint,boolean,bigint[])']::regprocedure[])
                      AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false) $$,
                'every pgqueue function with a string body pins search_path = pg_catalog, pg_temp, but three');
-- _message_take runs with its callers' settings: each caller pins them all.
SELECT set_eq($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                  WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosrc LIKE '%pgqueue._message_take(%'
                    AND p.proname <> '_message_take'
                    AND coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp',
                                                      'plan_cache_mode=force_generic_plan',
                                                      'enable_seqscan=off', 'enable_bitmapscan=off'], false) $$,
              $$ SELECT p.oid::regprocedure::text FROM pg_proc p
                  WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosrc LIKE '%pgqueue._message_take(%'
                    AND p.proname <> '_message_take' $$,
              'every caller of _message_take (which has no SET clauses) pins search_path, the generic plans and the index probes');
SELECT ok((SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'pgqueue'::regnamespace
            AND p.prosrc LIKE '%pgqueue._message_take(%' AND p.proname <> '_message_take') = 2,
          'two functions call _message_take: message_dequeue and spark_claim');
SELECT set_eq($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                  WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosqlbody IS NULL
                    AND p.proconfig IS NULL $$,
              ARRAY['pgqueue.message_create(text,bytea,bigint,text,text,text)',
                    'pgqueue._message_take(integer,integer,bigint,integer,bigint,boolean,bigint[])'],
              'the string-bodied functions without a SET clause: message_create (fully qualified instead), _message_take (its callers set them)');
-- message_complete sets the planner alone: its probes by id stay index probes whatever the
-- statistics (tests/test_index_probes.py, "emptied table"), its names are qualified.
SELECT is((SELECT p.proconfig FROM pg_proc p WHERE p.oid = 'pgqueue.message_complete(bigint,integer)'::regprocedure),
          ARRAY['enable_seqscan=off'],
          'message_complete''s one SET clause: enable_seqscan = off (no search_path: fully qualified)');
SELECT set_eq($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                  WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosqlbody IS NOT NULL $$,
              ARRAY['pgqueue._backoff_ms(integer,bigint,bigint)', 'pgqueue._count_seq(integer,integer)',
                    'pgqueue._counted(integer,integer)',
                    'pgqueue._leased(bigint)', 'pgqueue._lock_stripe(integer)', 'pgqueue._turn_key(bigint,boolean)', 'pgqueue._rate_seq(integer)', 'pgqueue._rate_key(integer,integer,bigint)',
                    'pgqueue._group_floor_at(text,text,bigint)', 'pgqueue._group_floor_get(integer,text,bigint)',
                    'pgqueue._size_exact_seq(integer)', 'pgqueue._size_recount_seq(integer)',
                    'pgqueue._message_first_lease(integer,bigint,bigint,bigint)',
                    'pgqueue._queue_count(integer,bigint)', 'pgqueue._queue_lock(integer)',
                    'pgqueue._spark_claimed_until()', 'pgqueue._spark_consumer_held(integer,bigint)',
                    'pgqueue._spark_consumer_id(text,text)', 'pgqueue._write_clock()', 'pgqueue.from_epoch(bigint)',
                    'pgqueue.message_create(bytea)',
                    'pgqueue.now_ms()', 'pgqueue.queue_list()', 'pgqueue.schedule_list()',
                    'pgqueue.to_epoch(timestamp with time zone)',
                    'pgqueue._wait_floor_leased(bigint[],bigint)', 'pgqueue._wait_floor_next(bigint[],bigint,bigint,bigint,bigint,bigint)', 'pgqueue._wait_floor_ok(bigint[],integer)'],
              'the functions with a SQL-standard body (no SET clause, so the planner can inline them)');
-- SECURITY DEFINER only where a privilege must not be given to the callers (docs/security.md),
-- and none of those callable by PUBLIC: holding their locks would stall a queue (or the schedules).
SELECT set_eq($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                  WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosecdef $$,
              ARRAY['pgqueue._queue_pin(integer)', 'pgqueue._queue_quiesce(integer)',
                    'pgqueue._queue_reserve(integer,bigint)', 'pgqueue._message_group_lock(integer,text)',
                    'pgqueue._message_group_hand(integer,text)', 'pgqueue.schedule_run(integer)'],
              'the SECURITY DEFINER functions are _queue_pin, _queue_quiesce, _queue_reserve, _message_group_lock, _message_group_hand and schedule_run');
SELECT is_empty($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                    WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosecdef
                      AND has_function_privilege('public', p.oid, 'EXECUTE') $$,
                'PUBLIC may execute no SECURITY DEFINER function');
SELECT is_empty($$ SELECT c.relname FROM pg_class c
                    WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind IN ('r', 'v')
                      AND obj_description(c.oid, 'pg_class') IS NULL $$,
                'every table and view has a COMMENT');
SELECT is_empty($$ SELECT c.relname FROM pg_class c
                    WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind IN ('r', 'v', 'S', 'i')
                      AND NOT EXISTS (SELECT 1 FROM pg_depend d
                                       WHERE d.objid = c.oid AND d.classid = 'pg_class'::regclass
                                         AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')
                      AND c.relkind <> 'i' $$,
                'every table, view and sequence belongs to the extension');
SELECT results_eq($$ SELECT lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify
                       FROM pgqueue.queue_list() WHERE queue = 'default' $$,
                  $$ VALUES (30000::bigint, NULL::integer, 1000::bigint, 3600000::bigint, NULL::bigint, false) $$,
                  'CREATE EXTENSION makes the one default queue, with the documented defaults');

-- now_ms and _turn_key read the clock in double precision: exact to the microsecond, so now_ms
-- gives the same millisecond as to_epoch's numeric formula, for 300,000 instants from 1970 to
-- 2106, random microseconds. The formula tested is the one the two functions hold (as
-- pg_get_functiondef prints it), evaluated at each instant instead of clock_timestamp(): a change
-- to either function's clock fails here.
CREATE TEMP TABLE clock (us text);
INSERT INTO clock VALUES ($$((date_part('epoch'::text, clock_timestamp()) * (1000000)::double precision))::bigint$$);
SELECT ok(strpos(pg_get_functiondef('pgqueue.now_ms()'::regprocedure), 'RETURN (' || us || ' / 1000)') > 0,
          'now_ms is the clock formula tested next (microseconds) divided by 1000') FROM clock;
SELECT ok(strpos(pg_get_functiondef('pgqueue._turn_key(bigint,boolean)'::regprocedure), us) > 0,
          '_turn_key reads the clock with the formula tested next') FROM clock;
SELECT setseed(0.18);
SELECT results_eq(format($$SELECT count(*) FROM (SELECT to_timestamp(floor(random() * 4294967295) + floor(random() * 1000000) / 1000000) AS t
                                                   FROM generate_series(1, 300000)) s
                            WHERE %1$s <> (EXTRACT(EPOCH FROM s.t) * 1000000)::bigint
                               OR %1$s / 1000 <> pgqueue.to_epoch(s.t) $$,
                         replace(us, 'clock_timestamp()', 's.t')),
                  $$ VALUES (0::bigint) $$,
                  'the clock in double precision gives the exact microsecond, and to_epoch''s millisecond, until 2106')
  FROM clock;
SELECT * FROM finish();
ROLLBACK;
