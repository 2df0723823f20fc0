-- The catalog: tables, indexes, the ready index's predicate, dumped tables, and every public
-- function with its signature, a COMMENT and a pinned search_path.
BEGIN;
SELECT plan(64);

-- relations
SELECT has_table('pgqueue', 'queue', 'table pgqueue.queue');
SELECT has_table('pgqueue', 'message', 'table pgqueue.message');
SELECT has_table('pgqueue', 'dead_letter', 'table pgqueue.dead_letter');
SELECT has_table('pgqueue', 'queue_size', 'table pgqueue.queue_size');
SELECT has_view('pgqueue', 'dead_letters', 'view pgqueue.dead_letters');
SELECT has_sequence('pgqueue', 'message_id_seq', 'sequence pgqueue.message_id_seq');
SELECT has_sequence('pgqueue', 'queue_id_seq', 'sequence pgqueue.queue_id_seq');
SELECT col_is_pk('pgqueue', 'message', 'id', 'message.id is the primary key');
SELECT col_type_is('pgqueue', 'message', 'dequeue_at', 'bigint', 'dequeue_at is epoch ms (bigint)');
SELECT col_type_is('pgqueue', 'message', 'locked_until', 'bigint', 'locked_until is epoch ms (bigint)');
SELECT col_type_is('pgqueue', 'message', 'attempts', 'integer', 'attempts is the integer fencing token');
SELECT col_not_null('pgqueue', 'message', 'content', 'message content is NOT NULL');
SELECT col_is_null('pgqueue', 'message', 'locked_until', 'locked_until is NULL when not leased');

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
SELECT has_index('pgqueue', 'dead_letter', 'dead_letter_queue_idx', ARRAY['queue_id', 'dead_at', 'id'],
                 'dead_letter_queue_idx on (queue_id, dead_at, id)');

-- the extension
SELECT is((SELECT extrelocatable FROM pg_extension WHERE extname = 'pgqueue'), false, 'pgqueue is not relocatable');
SELECT set_has($$ SELECT unnest(extconfig)::regclass::text FROM pg_extension WHERE extname = 'pgqueue' $$,
               $$ VALUES ('pgqueue.queue'), ('pgqueue.queue_id_seq'), ('pgqueue.message'),
                         ('pgqueue.message_id_seq'), ('pgqueue.dead_letter') $$,
               'data tables and their sequences are registered with pg_extension_config_dump');
SELECT is_empty($$ SELECT 1 FROM pg_extension WHERE extname = 'pgqueue'
                     AND 'pgqueue.queue_size'::regclass = ANY (extconfig) $$,
                'queue_size (derived, recounted on demand) is not dumped');

-- every public function, with its signature
SELECT has_function('pgqueue', 'to_epoch', ARRAY['timestamp with time zone'], 'to_epoch(timestamptz)');
SELECT has_function('pgqueue', 'from_epoch', ARRAY['bigint'], 'from_epoch(bigint)');
SELECT has_function('pgqueue', 'now_ms', ARRAY[]::text[], 'now_ms()');
SELECT has_function('pgqueue', 'priority_dequeue_at', ARRAY['integer'], 'priority_dequeue_at(integer)');
SELECT has_function('pgqueue', 'queue_create',
                    ARRAY['text', 'bigint', 'integer', 'bigint', 'bigint', 'bigint', 'boolean', 'boolean'], 'queue_create(...)');
SELECT has_function('pgqueue', 'queue_alter',
                    ARRAY['text', 'bigint', 'integer', 'bigint', 'bigint', 'bigint', 'boolean'], 'queue_alter(...)');
SELECT has_function('pgqueue', 'queue_drop', ARRAY['text'], 'queue_drop(text)');
SELECT has_function('pgqueue', 'queue_list', ARRAY[]::text[], 'queue_list()');
SELECT has_function('pgqueue', 'queue_stats', ARRAY['text'], 'queue_stats(text)');
SELECT has_function('pgqueue', 'queue_next_due', ARRAY['text'], 'queue_next_due(text)');
SELECT has_function('pgqueue', 'message_create', ARRAY['text', 'bytea', 'bigint', 'text'], 'message_create(text, bytea, bigint, text)');
SELECT has_function('pgqueue', 'message_create', ARRAY['bytea'], 'message_create(bytea)');
SELECT has_function('pgqueue', 'message_create_batch',
                    ARRAY['text', 'bytea[]', 'bigint', 'text', 'bigint[]', 'text[]'], 'message_create_batch(...)');
SELECT has_function('pgqueue', 'message_dequeue', ARRAY['text', 'integer', 'bigint'], 'message_dequeue(text, integer, bigint)');
SELECT has_function('pgqueue', 'message_complete', ARRAY['bigint', 'integer'], 'message_complete(bigint, integer)');
SELECT has_function('pgqueue', 'message_heartbeat', ARRAY['bigint', 'integer', 'bigint'], 'message_heartbeat(bigint, integer, bigint)');
SELECT has_function('pgqueue', 'message_defer', ARRAY['bigint', 'integer', 'bigint', 'bytea'], 'message_defer(bigint, integer, bigint, bytea)');
SELECT has_function('pgqueue', 'message_fail', ARRAY['bigint', 'integer', 'text', 'bigint'], 'message_fail(bigint, integer, text, bigint)');
SELECT has_function('pgqueue', 'dead_letter_requeue', ARRAY['text', 'bigint[]', 'bigint'], 'dead_letter_requeue(text, bigint[], bigint)');
SELECT has_function('pgqueue', 'dead_letter_purge', ARRAY['text', 'bigint[]', 'bigint'], 'dead_letter_purge(text, bigint[], bigint)');

-- return types of the contract
SELECT function_returns('pgqueue', 'message_create', ARRAY['text', 'bytea', 'bigint', 'text'], 'bigint', 'message_create returns the id');
SELECT function_returns('pgqueue', 'message_create_batch', ARRAY['text', 'bytea[]', 'bigint', 'text', 'bigint[]', 'text[]'],
                        'setof bigint', 'message_create_batch returns SETOF bigint');
SELECT function_returns('pgqueue', 'message_complete', ARRAY['bigint', 'integer'], 'boolean', 'message_complete returns boolean');
SELECT function_returns('pgqueue', 'message_heartbeat', ARRAY['bigint', 'integer', 'bigint'], 'boolean', 'message_heartbeat returns boolean');
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

-- volatility of the time helpers
SELECT volatility_is('pgqueue', 'to_epoch', ARRAY['timestamp with time zone'], 'immutable', 'to_epoch is IMMUTABLE');
SELECT volatility_is('pgqueue', 'now_ms', ARRAY[]::text[], 'volatile', 'now_ms is VOLATILE');
SELECT volatility_is('pgqueue', 'message_dequeue', ARRAY['text', 'integer', 'bigint'], 'volatile', 'message_dequeue is VOLATILE');

-- rules that hold for every function, present and future
SELECT cmp_ok((SELECT count(*)::int FROM pg_proc p
                WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.proname NOT LIKE '\_%'),
              '>=', 20, 'at least the 20 public functions of the contract exist');
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
SELECT is_empty($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                    WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosqlbody IS NULL
                      AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false) $$,
                'every pgqueue function with a string body pins search_path = pg_catalog, pg_temp');
-- SECURITY DEFINER only where a privilege must not be given to the callers (docs/security.md),
-- and none of those callable by PUBLIC: holding their locks would stall a queue.
SELECT set_eq($$ SELECT p.oid::regprocedure::text FROM pg_proc p
                  WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosecdef $$,
              ARRAY['pgqueue._queue_pin(integer)', 'pgqueue._queue_quiesce(integer)',
                    'pgqueue._queue_reserve(integer,bigint)'],
              'the SECURITY DEFINER functions are _queue_pin, _queue_quiesce and _queue_reserve');
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
SELECT is((SELECT count(*)::int FROM pgqueue.queue_list() WHERE queue = 'default'), 1, 'the default queue exists');
SELECT results_eq($$ SELECT lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify
                       FROM pgqueue.queue_list() WHERE queue = 'default' $$,
                  $$ VALUES (30000::bigint, NULL::integer, 1000::bigint, 3600000::bigint, NULL::bigint, false) $$,
                  'the default queue has the documented defaults');

SELECT * FROM finish();
ROLLBACK;
