\set VERBOSITY terse
SET client_min_messages = warning;
-- Installation: the extension, its objects, comments and pinned search_path.
SELECT extname, extversion, extrelocatable, n.nspname AS schema
  FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
 WHERE extname = 'pgqueue';

-- The default queue is created by CREATE EXTENSION, with the documented defaults.
SELECT queue, lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify
  FROM pgqueue.queue_list();

-- Every relation of the extension, by kind.
SELECT c.relname, c.relkind
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pgqueue'
 ORDER BY c.relkind, c.relname;

-- Every relation belongs to the extension (so DROP EXTENSION removes it).
SELECT count(*) AS relations_not_in_extension
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pgqueue'
   AND NOT EXISTS (SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                      AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e')
   AND c.relkind IN ('r', 'v', 'S');

-- Tables and sequences that pg_dump must keep (pg_extension_config_dump).
SELECT unnest(extconfig)::regclass::text AS dumped
  FROM pg_extension WHERE extname = 'pgqueue'
 ORDER BY 1;

-- Named constraints.
SELECT conrelid::regclass::text AS rel, conname, contype
  FROM pg_constraint
 WHERE connamespace = 'pgqueue'::regnamespace
 ORDER BY 1, 2;

-- Every public function: signature, volatility, strictness, and whether it has a COMMENT.
SELECT p.oid::regprocedure AS function, p.provolatile AS vol, p.proisstrict AS strict,
       obj_description(p.oid, 'pg_proc') IS NOT NULL AS has_comment
  FROM pg_proc p
 WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.proname NOT LIKE '\_%'
 ORDER BY p.oid::regprocedure::text;

-- Public functions without a comment (must be none).
SELECT p.oid::regprocedure AS uncommented
  FROM pg_proc p
 WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.proname NOT LIKE '\_%'
   AND obj_description(p.oid, 'pg_proc') IS NULL
 ORDER BY p.oid::regprocedure::text;

-- Every function, private helpers included, is immune to search_path (must be none unsafe):
-- it either pins search_path or has a SQL-standard body, whose names are bound at CREATE time.
SELECT p.oid::regprocedure AS unpinned
  FROM pg_proc p
 WHERE p.pronamespace = 'pgqueue'::regnamespace
   AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
   AND p.prosqlbody IS NULL
 ORDER BY p.oid::regprocedure::text;

-- The functions with a SQL-standard body (no SET clause, so the planner can inline them).
SELECT p.oid::regprocedure AS sql_standard_body
  FROM pg_proc p
 WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosqlbody IS NOT NULL
 ORDER BY p.oid::regprocedure::text;

-- The view and the tables have comments too.
SELECT c.relname, obj_description(c.oid, 'pg_class') IS NOT NULL AS has_comment
  FROM pg_class c
 WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind IN ('r', 'v')
 ORDER BY c.relname;

-- Time helpers.
SELECT pgqueue.to_epoch('1970-01-01 00:00:00+00') AS epoch0,
       pgqueue.to_epoch('2024-01-02 03:04:05.678+00') AS ms,
       pgqueue.to_epoch('1969-12-31 23:59:59.9995+00') AS floor_negative,
       pgqueue.from_epoch(1704164645678) = '2024-01-02 03:04:05.678+00'::timestamptz AS round_trip,
       pgqueue.from_epoch(pgqueue.to_epoch('2001-02-03 04:05:06.007+00')) = '2001-02-03 04:05:06.007+00' AS round_trip2,
       abs(pgqueue.now_ms() - pgqueue.to_epoch(clock_timestamp())) < 1000 AS now_ms_is_wall_clock,
       pgqueue.to_epoch(NULL) IS NULL AS strict_null;
SELECT count(*) AS round_trip_failures
  FROM (SELECT (1700000000000 + g * 7919) AS ms FROM generate_series(-1000, 1000) g
        UNION ALL SELECT g FROM generate_series(-1000, 1000) g) s
 WHERE pgqueue.to_epoch(pgqueue.from_epoch(s.ms)) <> s.ms;
