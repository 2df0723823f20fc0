-- pgqueue 0.3 -> 0.4: the fixes of an outside review (docs/security.md, docs/locking.md,
-- docs/guarantees.md "Isolation levels").
--
--   * The schema check (extension/src/schema.sql) runs first: the schema must be owned by the
--     extension's owner, grant CREATE to no one else, and hold only the extension's objects.
--   * Advisory locks are gone. A queue's lock is now a relation lock on one of 64 sequences,
--     pgqueue.queue_lock_0 .. _63 (queue id & 63): every operation takes it in ROW EXCLUSIVE
--     mode (pgqueue._queue_lock), queue_drop and max_size changes in SHARE ROW EXCLUSIVE mode
--     (pgqueue._queue_quiesce). A role that was granted nothing can no longer hold a queue's
--     lock; consumers now wait (instead of returning nothing) while a drop of their queue waits.
--   * queue_alter(p_max_size) takes the stripe before the queue row (no deadlock with a
--     transaction that enqueued and then drops or alters).
--   * REPEATABLE READ / SERIALIZABLE: producers pin the queue row FOR SHARE (pgqueue._queue_pin:
--     40001 if a drop or alter committed after their snapshot); queue_drop and
--     queue_alter(p_max_size) refuse to run there (PQ009).
--   * max_size accounting (pgqueue.queue_size) is written only by the SECURITY DEFINER function
--     pgqueue._queue_reserve; every grant on pgqueue.queue_size is revoked.
--   * message_dequeue no longer counts rows it locked itself twice after dead-lettering; its
--     probe is pgqueue._message_take, which spark_claim now shares (one probe for both).
--   * pgqueue._not_null takes (boolean, text): exact argument types at every call.
--   * Held snapshots: message_dequeue's ready and expired-lease probes start at per-session
--     hints (pgqueue._message_take; docs/performance.md). The default dequeue_at
--     is the clock read after the writer's xid (pgqueue._write_clock), and placements below the
--     clock advance the queue's lock stripe (trigger message_placed_low).
--     A one-message take looks for expired leases only when its session has not looked on the
--     queue within 20 ms and found none (setting pgqueue.lease_check_<queue id>), or when
--     nothing is ready.
--   * New: message_complete_batch(ids, attempts) completes many leased messages in one call and
--     returns the ids whose token was stale; message_complete_and_dequeue(ids, attempts, queue,
--     limit, lock_ms) acknowledges and fetches in one call; message_heartbeat_batch(ids, attempts,
--     lock_ms) extends many leases in one call and returns the ids whose token was stale.
--   * queue_list() also returns group_concurrency, key_window_ms and rate_limit.
--   * A Spark consumer's hold is a session advisory lock on a random key recorded with the
--     holder's pid (spark_consumer.holder_pid, holder_key), no longer on (1885827447, id),
--     which any role could take first.
-- Functions whose body changed are re-created below from extension/src as of 0.4.

\echo Use "ALTER EXTENSION pgqueue UPDATE TO '0.4'" to load this file. \quit

-------------------------------------------------------------------------------
-- The schema check
-------------------------------------------------------------------------------


-- Every name in the rest of the script resolves in pg_catalog (and pgqueue's own names are
-- written qualified): a plain install or upgrade (no extension files, extension/src/plain) runs
-- with the installing session's search_path, where an operator or function that another role
-- planted in public, say || (text, integer) or * (double precision, integer), would beat the
-- catalog's, which needs a cast: it would run with the installer's rights during the install
-- (the DO blocks below) and be bound for good into the SQL-standard bodies (now_ms, to_epoch,
-- ...), run by everyone who calls them. CREATE EXTENSION sets search_path to the schema (checked
-- below) itself. LOCAL: for this transaction only (the check below refuses to go on without one).
SET LOCAL search_path = pg_catalog, pg_temp;

-- Refuse to install into a schema that another role owns, that others may create objects in,
-- or that holds objects pgqueue did not create (PQ008). PostgreSQL creates the schema of
-- `CREATE EXTENSION pgqueue` (control file: schema = pgqueue) only when it is missing and
-- otherwise installs into whatever is there; a role that made the schema first could plant an
-- overload of a function pgqueue calls and have it run with the installer's rights. The same
-- holds for pg_restore into a database where such a schema was made before the restore: the
-- restore fails here, loudly. Runs first in the full install script, the plain install and
-- every upgrade delta (docs/security.md, "The schema").
--   extension: the schema's owner must be the extension's owner, and every object in the
--              schema a member of the extension;
--   plain:     the schema's owner must be the installing role, and every object in the schema
--              owned by it.
DO $$
DECLARE
    v_ns      oid;
    v_owner   oid;
    v_me      oid := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user);
    v_ext     oid;
    v_extown  oid;
    v_foreign text;
    v_who     text;
BEGIN
    IF pg_catalog.current_setting('search_path') OPERATOR(pg_catalog.<>) 'pg_catalog, pg_temp' THEN
        RAISE EXCEPTION 'pgqueue installs in one transaction only'
            USING ERRCODE = 'PQ008',
                  HINT = 'Run the script with psql -1 (--single-transaction), or use pgqueue install: '
                         'its search_path is pinned for the transaction (SET LOCAL).';
    END IF;
    SELECT n.oid, n.nspowner INTO v_ns, v_owner
      FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgqueue';
    SELECT e.oid, e.extowner INTO v_ext, v_extown
      FROM pg_catalog.pg_extension e WHERE e.extname = 'pgqueue';
    IF v_ns IS NULL THEN
        RAISE EXCEPTION 'schema pgqueue does not exist' USING ERRCODE = 'PQ008',
            HINT = 'A plain upgrade step upgrades an installed pgqueue: install it first (pgqueue install, or the '
                   'full plain script).';
    END IF;
    IF v_owner <> coalesce(v_extown, v_me) THEN
        RAISE EXCEPTION 'schema pgqueue is owned by role %, not by %, who installs pgqueue',
                        pg_catalog.pg_get_userbyid(v_owner),
                        pg_catalog.pg_get_userbyid(coalesce(v_extown, v_me))
            USING ERRCODE = 'PQ008',
                  HINT = 'pgqueue never installs into a schema someone else made: drop that schema '
                         '(after checking what it holds) or install as its owner. Restoring a dump? '
                         'Restore it as that role: pg_restore --role=<owner>, or psql -U <owner> for a '
                         'plain-format dump (pg_dumpall''s output runs as a superuser: dump this database '
                         'with pg_dump and restore it so).';
    END IF;
    -- An update creates objects owned by the role that runs it: run by another role (a
    -- superuser, say), the new tables, sequences and functions, SECURITY DEFINER ones included,
    -- would be that role's, and docs/grants.sql, run by the owner, could not grant them. (At
    -- CREATE EXTENSION the extension's owner is the role that runs it.)
    IF v_ext IS NOT NULL AND v_extown <> v_me THEN
        RAISE EXCEPTION 'pgqueue is updated by its owner %, not by %',
                        pg_catalog.pg_get_userbyid(v_extown), current_user
            USING ERRCODE = 'PQ008',
                  HINT = 'SET ROLE to that role first, or use pgqueue install, which does.';
    END IF;
    -- The same, after the fact: the updates to 0.2 and 0.3 (released, unchanged) did not refuse
    -- another role, and the objects one run by a superuser made are that role's; the owner's
    -- update then failed on the first of them, 42501 "permission denied for table spark_claim",
    -- and the superuser's was refused above: nobody could update (a review). Say which they are
    -- and what mends it.
    IF v_ext IS NOT NULL THEN
        SELECT pg_catalog.string_agg(o.what, ', ' ORDER BY o.what), pg_catalog.min(o.who)
          INTO v_foreign, v_who
          FROM (SELECT pg_catalog.pg_describe_object(d.classid, d.objid, 0) AS what,
                       pg_catalog.pg_get_userbyid(coalesce(c.relowner, p.proowner)) AS who
                  FROM pg_catalog.pg_depend d
                  LEFT JOIN pg_catalog.pg_class c
                         ON d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND c.oid = d.objid
                  LEFT JOIN pg_catalog.pg_proc p
                         ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = d.objid
                 WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.refobjid = v_ext
                   AND d.deptype = 'e' AND coalesce(c.relowner, p.proowner) <> v_extown) o;
        IF v_foreign IS NOT NULL THEN
            RAISE EXCEPTION 'pgqueue''s objects are owned by % where its owner is %: %',
                            v_who, pg_catalog.pg_get_userbyid(v_extown), pg_catalog.left(v_foreign, 500)
                USING ERRCODE = 'PQ008',
                      HINT = 'An update to 0.2 or 0.3 run by that role made them. As a superuser, give each to the '
                             'owner (ALTER TABLE, SEQUENCE or FUNCTION ... OWNER TO the owner), then update as the '
                             'owner (pgqueue install does).';
        END IF;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n, pg_catalog.aclexplode(n.nspacl) a
                WHERE n.oid = v_ns AND a.privilege_type = 'CREATE' AND a.grantee <> v_owner) THEN
        RAISE EXCEPTION 'roles other than its owner may create objects in schema pgqueue'
            USING ERRCODE = 'PQ008',
                  HINT = 'REVOKE CREATE ON SCHEMA pgqueue FROM PUBLIC (and every other grantee), then retry.';
    END IF;
    SELECT pg_catalog.string_agg(o.what, ', ' ORDER BY o.what) INTO v_foreign
      FROM (SELECT pg_catalog.pg_describe_object(o.classid, o.objid, 0) AS what, o.classid, o.objid, o.owner
              FROM (SELECT 'pg_catalog.pg_class'::pg_catalog.regclass AS classid, c.oid AS objid, c.relowner AS owner
                      FROM pg_catalog.pg_class c
                     WHERE c.relnamespace = v_ns AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
                    UNION ALL
                    SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid, p.proowner
                      FROM pg_catalog.pg_proc p WHERE p.pronamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid, t.typowner
                      FROM pg_catalog.pg_type t
                     WHERE t.typnamespace = v_ns
                       AND (t.typrelid = 0 OR (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid) = 'c')
                       AND NOT EXISTS (SELECT FROM pg_catalog.pg_type e WHERE e.typarray = t.oid)
                    UNION ALL
                    SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid, o.oprowner
                      FROM pg_catalog.pg_operator o WHERE o.oprnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, c.oid, c.collowner
                      FROM pg_catalog.pg_collation c WHERE c.collnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass, c.oid, c.conowner
                      FROM pg_catalog.pg_conversion c WHERE c.connamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, f.oid, f.opfowner
                      FROM pg_catalog.pg_opfamily f WHERE f.opfnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass, c.oid, c.cfgowner
                      FROM pg_catalog.pg_ts_config c WHERE c.cfgnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass, d.oid, d.dictowner
                      FROM pg_catalog.pg_ts_dict d WHERE d.dictnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, s.oid, s.stxowner
                      FROM pg_catalog.pg_statistic_ext s WHERE s.stxnamespace = v_ns
                    UNION ALL
                    SELECT 'pg_catalog.pg_extension'::pg_catalog.regclass, e.oid, e.extowner
                      FROM pg_catalog.pg_extension e
                     WHERE e.extnamespace = v_ns AND e.oid IS DISTINCT FROM v_ext) o) o
     WHERE CASE WHEN v_ext IS NOT NULL
                THEN NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                                  WHERE d.classid = o.classid AND d.objid = o.objid
                                    AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                                    AND d.refobjid = v_ext AND d.deptype = 'e')
                ELSE o.owner <> v_owner END;
    -- CREATE EXTENSION (which has made its pg_extension row by now) over a plain install: its
    -- objects are "not the extension's", but they are pgqueue, so say what they are
    IF v_foreign IS NOT NULL AND v_ext IS NOT NULL
       AND pg_catalog.to_regclass('pgqueue.install') IS NOT NULL
       AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d
                        WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                          AND d.objid = pg_catalog.to_regclass('pgqueue.install')
                          AND d.refobjid = v_ext AND d.deptype = 'e') THEN
        RAISE EXCEPTION 'schema pgqueue holds a plain install of pgqueue (no extension files): CREATE EXTENSION does not take it over'
            USING ERRCODE = 'PQ008',
                  HINT = 'Upgrade it with pgqueue install, or uninstall it (pgqueue uninstall) before CREATE EXTENSION pgqueue.';
    END IF;
    IF v_foreign IS NOT NULL THEN
        RAISE EXCEPTION 'schema pgqueue holds objects pgqueue did not create: %', pg_catalog.left(v_foreign, 500)
            USING ERRCODE = 'PQ008',
                  HINT = 'Someone else put them there: find out who before anything runs them, then '
                         'drop them (or the schema) and retry.';
    END IF;
END;
$$;

-- Take every table of pgqueue before anything is altered, the queues first, then the messages:
-- the statements below alter pgqueue.queue_size, pgqueue.message and pgqueue.queue one after the
-- other, each in ACCESS EXCLUSIVE mode, while a producer or consumer may hold one of them and
-- wait for the next: a deadlock that failed the update (and some workers' calls) whenever
-- workers were running. Each try waits at most 100 ms (well under deadlock_timeout, so a worker
-- waiting for it is never the deadlock check's victim), then lets go and tries again; once it
-- holds them all, the workers wait for the update and go on after it. (pgqueue install does the
-- same before it runs ALTER EXTENSION, for the frozen steps from 0.1 and 0.2 too.)
DO $$
DECLARE
    v_timeout  text := pg_catalog.current_setting('lock_timeout');
    v_lock     text;
    v_deadline timestamptz := pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) interval '2 minutes';
BEGIN
    SELECT pg_catalog.format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE',
                             pg_catalog.string_agg(c.oid::pg_catalog.regclass::text, ', '
                                                   ORDER BY c.relname OPERATOR(pg_catalog.<>) 'queue',
                                                            c.relname OPERATOR(pg_catalog.<>) 'message',
                                                            c.relname))
      INTO v_lock
      FROM pg_catalog.pg_class c
     WHERE c.relnamespace = 'pgqueue'::pg_catalog.regnamespace AND c.relkind IN ('r', 'p');
    WHILE pg_catalog.clock_timestamp() OPERATOR(pg_catalog.<) v_deadline LOOP
        BEGIN
            PERFORM pg_catalog.set_config('lock_timeout', '100ms', true);
            EXECUTE v_lock;
            PERFORM pg_catalog.set_config('lock_timeout', v_timeout, true);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_catalog.pg_sleep(0.01 + pg_catalog.random() * 0.04);
        END;
    END LOOP;
    RAISE EXCEPTION 'pgqueue''s tables stayed busy for two minutes: the update gave up'
        USING ERRCODE = 'lock_not_available',
              HINT = 'A transaction holds them (see pg_locks): end it, or stop the workers, and retry.';
END;
$$;


-------------------------------------------------------------------------------
-- Lock stripes
-------------------------------------------------------------------------------
-- The lock stripes: 64 sequences used for their relation lock (docs/locking.md).
-- Queue q uses pgqueue.queue_lock_<q & 63> (pgqueue._lock_stripe). Every operation on a
-- queue's messages takes its stripe in ROW EXCLUSIVE mode (pgqueue._queue_lock); queue_drop and
-- a max_size or group_concurrency change take it in SHARE ROW EXCLUSIVE mode
-- (pgqueue._queue_quiesce), so they wait for the work in flight and new work waits for them, in
-- the lock manager's fair queue. Unlike an advisory lock, a relation lock needs a privilege on
-- the relation: a role that was granted nothing cannot hold it. They leave no dead tuples. They advance only as a signal: when a
-- message is placed below the clock (trigger message_placed_low), which consumers' session hints
-- (pgqueue._message_take) and the groups' wait floors (pgqueue._wait_floor_next) watch, and
-- when a queue's group_concurrency changes (queue_alter), which the wait floors watch. Each
-- starts at a random value: a wait floor records the value it saw, and a restored copy of the
-- floor (pg_dump keeps the messages, not these sequences, which CREATE EXTENSION makes anew)
-- must not meet the same value again after messages were placed below it before the dump.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_lock_%s', i);
        PERFORM pg_catalog.setval(pg_catalog.format('pgqueue.queue_lock_%s', i)::regclass,
                                  (pg_catalog.random() * 4e18)::bigint);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_lock_%s IS %L', i,
            'pgqueue internal: lock stripe of the queues whose id & 63 = ' || i || ' (advanced only as a signal: trigger message_placed_low, queue_alter)');
    END LOOP;
END;
$$;

-------------------------------------------------------------------------------
-- Counters (pgqueue.queue_counters): six sequences per lock stripe; existing queues count
-- from the upgrade on (queues whose ids are equal mod 64 share them: shared = true)
-------------------------------------------------------------------------------
-- The counters of pgqueue.queue_counters: six sequences per lock stripe,
-- pgqueue.counter_<kind>_<stripe> (pgqueue._count_seq), kinds enqueued, delivered, completed,
-- failed, dead and expired, and for the three that batches advance (enqueued, delivered,
-- completed) a companion counter_<kind>32_<stripe> that counts by 32, so that a batch of n adds
-- n in at most 31 + n / 32 nextval calls (pgqueue._counted_n); a counter is the sum of the two.
-- A queue counts on its stripe's nine (queue id & 63); queue_create
-- gives each new queue a stripe no other queue uses while there are at most 64, and starts its
-- counters at zero. Sequences because nextval writes no row version: a counter row that every
-- call updated would pile up dead versions under a held snapshot (docs/performance.md, "Held
-- snapshots"). nextval is not rolled back, so a counted call that rolls back stays counted.
DO $$
DECLARE
    v_kind text;
BEGIN
    FOREACH v_kind IN ARRAY ARRAY['enqueued', 'delivered', 'completed', 'failed', 'dead', 'expired'] LOOP
        FOR i IN 0..63 LOOP
            EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.counter_%s_%s', v_kind, i);
            EXECUTE pg_catalog.format(
                'COMMENT ON SEQUENCE pgqueue.counter_%s_%s IS %L', v_kind, i,
                'pgqueue internal: messages ' || v_kind || ' on the queue whose id & 63 = ' || i
                || ' (pgqueue.queue_counters)');
        END LOOP;
    END LOOP;
    FOREACH v_kind IN ARRAY ARRAY['enqueued', 'delivered', 'completed'] LOOP
        FOR i IN 0..63 LOOP
            EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.counter_%s32_%s INCREMENT BY 32 MINVALUE 0 START WITH 32',
                                      v_kind, i);
            EXECUTE pg_catalog.format(
                'COMMENT ON SEQUENCE pgqueue.counter_%s32_%s IS %L', v_kind, i,
                'pgqueue internal: messages ' || v_kind || ' by 32 at a time (batches) on the queue whose id & 63 = '
                || i || ' (pgqueue.queue_counters)');
        END LOOP;
    END LOOP;
END;
$$;

-- The counters of pgqueue.queue_counters, which count since the queue was created (one call per
-- statement: each call rewrites the extension's catalog row; one line, which the plain install leaves out).
DO $$ DECLARE v_seq regclass; BEGIN FOR v_seq IN SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relnamespace = 'pgqueue'::pg_catalog.regnamespace AND c.relkind = 'S' AND c.relname ~ '^counter_[a-z0-9]+_[0-9]+$' ORDER BY c.relname LOOP PERFORM pg_catalog.pg_extension_config_dump(v_seq, ''); END LOOP; END $$;

-- The counter sequence of a queue (pgqueue.queue_counters): kind 0 enqueued, 1 delivered,
-- 2 completed, 3 failed (retried), 4 dead (dead-lettered), 5 expired (leases that ran out), and
-- 6, 7, 8 the companions of 0, 1, 2 that count by 32 (pgqueue._counted_n), on the queue's
-- stripe (id & 63). One regclass constant per sequence, as in pgqueue._lock_stripe, so that each
-- is a recorded dependency and the array is folded to one constant when planned.
CREATE FUNCTION pgqueue._count_seq(p_queue_id integer, p_kind integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.counter_enqueued_0'::regclass, 'pgqueue.counter_enqueued_1'::regclass,
    'pgqueue.counter_enqueued_2'::regclass, 'pgqueue.counter_enqueued_3'::regclass,
    'pgqueue.counter_enqueued_4'::regclass, 'pgqueue.counter_enqueued_5'::regclass,
    'pgqueue.counter_enqueued_6'::regclass, 'pgqueue.counter_enqueued_7'::regclass,
    'pgqueue.counter_enqueued_8'::regclass, 'pgqueue.counter_enqueued_9'::regclass,
    'pgqueue.counter_enqueued_10'::regclass, 'pgqueue.counter_enqueued_11'::regclass,
    'pgqueue.counter_enqueued_12'::regclass, 'pgqueue.counter_enqueued_13'::regclass,
    'pgqueue.counter_enqueued_14'::regclass, 'pgqueue.counter_enqueued_15'::regclass,
    'pgqueue.counter_enqueued_16'::regclass, 'pgqueue.counter_enqueued_17'::regclass,
    'pgqueue.counter_enqueued_18'::regclass, 'pgqueue.counter_enqueued_19'::regclass,
    'pgqueue.counter_enqueued_20'::regclass, 'pgqueue.counter_enqueued_21'::regclass,
    'pgqueue.counter_enqueued_22'::regclass, 'pgqueue.counter_enqueued_23'::regclass,
    'pgqueue.counter_enqueued_24'::regclass, 'pgqueue.counter_enqueued_25'::regclass,
    'pgqueue.counter_enqueued_26'::regclass, 'pgqueue.counter_enqueued_27'::regclass,
    'pgqueue.counter_enqueued_28'::regclass, 'pgqueue.counter_enqueued_29'::regclass,
    'pgqueue.counter_enqueued_30'::regclass, 'pgqueue.counter_enqueued_31'::regclass,
    'pgqueue.counter_enqueued_32'::regclass, 'pgqueue.counter_enqueued_33'::regclass,
    'pgqueue.counter_enqueued_34'::regclass, 'pgqueue.counter_enqueued_35'::regclass,
    'pgqueue.counter_enqueued_36'::regclass, 'pgqueue.counter_enqueued_37'::regclass,
    'pgqueue.counter_enqueued_38'::regclass, 'pgqueue.counter_enqueued_39'::regclass,
    'pgqueue.counter_enqueued_40'::regclass, 'pgqueue.counter_enqueued_41'::regclass,
    'pgqueue.counter_enqueued_42'::regclass, 'pgqueue.counter_enqueued_43'::regclass,
    'pgqueue.counter_enqueued_44'::regclass, 'pgqueue.counter_enqueued_45'::regclass,
    'pgqueue.counter_enqueued_46'::regclass, 'pgqueue.counter_enqueued_47'::regclass,
    'pgqueue.counter_enqueued_48'::regclass, 'pgqueue.counter_enqueued_49'::regclass,
    'pgqueue.counter_enqueued_50'::regclass, 'pgqueue.counter_enqueued_51'::regclass,
    'pgqueue.counter_enqueued_52'::regclass, 'pgqueue.counter_enqueued_53'::regclass,
    'pgqueue.counter_enqueued_54'::regclass, 'pgqueue.counter_enqueued_55'::regclass,
    'pgqueue.counter_enqueued_56'::regclass, 'pgqueue.counter_enqueued_57'::regclass,
    'pgqueue.counter_enqueued_58'::regclass, 'pgqueue.counter_enqueued_59'::regclass,
    'pgqueue.counter_enqueued_60'::regclass, 'pgqueue.counter_enqueued_61'::regclass,
    'pgqueue.counter_enqueued_62'::regclass, 'pgqueue.counter_enqueued_63'::regclass,
    'pgqueue.counter_delivered_0'::regclass, 'pgqueue.counter_delivered_1'::regclass,
    'pgqueue.counter_delivered_2'::regclass, 'pgqueue.counter_delivered_3'::regclass,
    'pgqueue.counter_delivered_4'::regclass, 'pgqueue.counter_delivered_5'::regclass,
    'pgqueue.counter_delivered_6'::regclass, 'pgqueue.counter_delivered_7'::regclass,
    'pgqueue.counter_delivered_8'::regclass, 'pgqueue.counter_delivered_9'::regclass,
    'pgqueue.counter_delivered_10'::regclass, 'pgqueue.counter_delivered_11'::regclass,
    'pgqueue.counter_delivered_12'::regclass, 'pgqueue.counter_delivered_13'::regclass,
    'pgqueue.counter_delivered_14'::regclass, 'pgqueue.counter_delivered_15'::regclass,
    'pgqueue.counter_delivered_16'::regclass, 'pgqueue.counter_delivered_17'::regclass,
    'pgqueue.counter_delivered_18'::regclass, 'pgqueue.counter_delivered_19'::regclass,
    'pgqueue.counter_delivered_20'::regclass, 'pgqueue.counter_delivered_21'::regclass,
    'pgqueue.counter_delivered_22'::regclass, 'pgqueue.counter_delivered_23'::regclass,
    'pgqueue.counter_delivered_24'::regclass, 'pgqueue.counter_delivered_25'::regclass,
    'pgqueue.counter_delivered_26'::regclass, 'pgqueue.counter_delivered_27'::regclass,
    'pgqueue.counter_delivered_28'::regclass, 'pgqueue.counter_delivered_29'::regclass,
    'pgqueue.counter_delivered_30'::regclass, 'pgqueue.counter_delivered_31'::regclass,
    'pgqueue.counter_delivered_32'::regclass, 'pgqueue.counter_delivered_33'::regclass,
    'pgqueue.counter_delivered_34'::regclass, 'pgqueue.counter_delivered_35'::regclass,
    'pgqueue.counter_delivered_36'::regclass, 'pgqueue.counter_delivered_37'::regclass,
    'pgqueue.counter_delivered_38'::regclass, 'pgqueue.counter_delivered_39'::regclass,
    'pgqueue.counter_delivered_40'::regclass, 'pgqueue.counter_delivered_41'::regclass,
    'pgqueue.counter_delivered_42'::regclass, 'pgqueue.counter_delivered_43'::regclass,
    'pgqueue.counter_delivered_44'::regclass, 'pgqueue.counter_delivered_45'::regclass,
    'pgqueue.counter_delivered_46'::regclass, 'pgqueue.counter_delivered_47'::regclass,
    'pgqueue.counter_delivered_48'::regclass, 'pgqueue.counter_delivered_49'::regclass,
    'pgqueue.counter_delivered_50'::regclass, 'pgqueue.counter_delivered_51'::regclass,
    'pgqueue.counter_delivered_52'::regclass, 'pgqueue.counter_delivered_53'::regclass,
    'pgqueue.counter_delivered_54'::regclass, 'pgqueue.counter_delivered_55'::regclass,
    'pgqueue.counter_delivered_56'::regclass, 'pgqueue.counter_delivered_57'::regclass,
    'pgqueue.counter_delivered_58'::regclass, 'pgqueue.counter_delivered_59'::regclass,
    'pgqueue.counter_delivered_60'::regclass, 'pgqueue.counter_delivered_61'::regclass,
    'pgqueue.counter_delivered_62'::regclass, 'pgqueue.counter_delivered_63'::regclass,
    'pgqueue.counter_completed_0'::regclass, 'pgqueue.counter_completed_1'::regclass,
    'pgqueue.counter_completed_2'::regclass, 'pgqueue.counter_completed_3'::regclass,
    'pgqueue.counter_completed_4'::regclass, 'pgqueue.counter_completed_5'::regclass,
    'pgqueue.counter_completed_6'::regclass, 'pgqueue.counter_completed_7'::regclass,
    'pgqueue.counter_completed_8'::regclass, 'pgqueue.counter_completed_9'::regclass,
    'pgqueue.counter_completed_10'::regclass, 'pgqueue.counter_completed_11'::regclass,
    'pgqueue.counter_completed_12'::regclass, 'pgqueue.counter_completed_13'::regclass,
    'pgqueue.counter_completed_14'::regclass, 'pgqueue.counter_completed_15'::regclass,
    'pgqueue.counter_completed_16'::regclass, 'pgqueue.counter_completed_17'::regclass,
    'pgqueue.counter_completed_18'::regclass, 'pgqueue.counter_completed_19'::regclass,
    'pgqueue.counter_completed_20'::regclass, 'pgqueue.counter_completed_21'::regclass,
    'pgqueue.counter_completed_22'::regclass, 'pgqueue.counter_completed_23'::regclass,
    'pgqueue.counter_completed_24'::regclass, 'pgqueue.counter_completed_25'::regclass,
    'pgqueue.counter_completed_26'::regclass, 'pgqueue.counter_completed_27'::regclass,
    'pgqueue.counter_completed_28'::regclass, 'pgqueue.counter_completed_29'::regclass,
    'pgqueue.counter_completed_30'::regclass, 'pgqueue.counter_completed_31'::regclass,
    'pgqueue.counter_completed_32'::regclass, 'pgqueue.counter_completed_33'::regclass,
    'pgqueue.counter_completed_34'::regclass, 'pgqueue.counter_completed_35'::regclass,
    'pgqueue.counter_completed_36'::regclass, 'pgqueue.counter_completed_37'::regclass,
    'pgqueue.counter_completed_38'::regclass, 'pgqueue.counter_completed_39'::regclass,
    'pgqueue.counter_completed_40'::regclass, 'pgqueue.counter_completed_41'::regclass,
    'pgqueue.counter_completed_42'::regclass, 'pgqueue.counter_completed_43'::regclass,
    'pgqueue.counter_completed_44'::regclass, 'pgqueue.counter_completed_45'::regclass,
    'pgqueue.counter_completed_46'::regclass, 'pgqueue.counter_completed_47'::regclass,
    'pgqueue.counter_completed_48'::regclass, 'pgqueue.counter_completed_49'::regclass,
    'pgqueue.counter_completed_50'::regclass, 'pgqueue.counter_completed_51'::regclass,
    'pgqueue.counter_completed_52'::regclass, 'pgqueue.counter_completed_53'::regclass,
    'pgqueue.counter_completed_54'::regclass, 'pgqueue.counter_completed_55'::regclass,
    'pgqueue.counter_completed_56'::regclass, 'pgqueue.counter_completed_57'::regclass,
    'pgqueue.counter_completed_58'::regclass, 'pgqueue.counter_completed_59'::regclass,
    'pgqueue.counter_completed_60'::regclass, 'pgqueue.counter_completed_61'::regclass,
    'pgqueue.counter_completed_62'::regclass, 'pgqueue.counter_completed_63'::regclass,
    'pgqueue.counter_failed_0'::regclass, 'pgqueue.counter_failed_1'::regclass,
    'pgqueue.counter_failed_2'::regclass, 'pgqueue.counter_failed_3'::regclass,
    'pgqueue.counter_failed_4'::regclass, 'pgqueue.counter_failed_5'::regclass,
    'pgqueue.counter_failed_6'::regclass, 'pgqueue.counter_failed_7'::regclass,
    'pgqueue.counter_failed_8'::regclass, 'pgqueue.counter_failed_9'::regclass,
    'pgqueue.counter_failed_10'::regclass, 'pgqueue.counter_failed_11'::regclass,
    'pgqueue.counter_failed_12'::regclass, 'pgqueue.counter_failed_13'::regclass,
    'pgqueue.counter_failed_14'::regclass, 'pgqueue.counter_failed_15'::regclass,
    'pgqueue.counter_failed_16'::regclass, 'pgqueue.counter_failed_17'::regclass,
    'pgqueue.counter_failed_18'::regclass, 'pgqueue.counter_failed_19'::regclass,
    'pgqueue.counter_failed_20'::regclass, 'pgqueue.counter_failed_21'::regclass,
    'pgqueue.counter_failed_22'::regclass, 'pgqueue.counter_failed_23'::regclass,
    'pgqueue.counter_failed_24'::regclass, 'pgqueue.counter_failed_25'::regclass,
    'pgqueue.counter_failed_26'::regclass, 'pgqueue.counter_failed_27'::regclass,
    'pgqueue.counter_failed_28'::regclass, 'pgqueue.counter_failed_29'::regclass,
    'pgqueue.counter_failed_30'::regclass, 'pgqueue.counter_failed_31'::regclass,
    'pgqueue.counter_failed_32'::regclass, 'pgqueue.counter_failed_33'::regclass,
    'pgqueue.counter_failed_34'::regclass, 'pgqueue.counter_failed_35'::regclass,
    'pgqueue.counter_failed_36'::regclass, 'pgqueue.counter_failed_37'::regclass,
    'pgqueue.counter_failed_38'::regclass, 'pgqueue.counter_failed_39'::regclass,
    'pgqueue.counter_failed_40'::regclass, 'pgqueue.counter_failed_41'::regclass,
    'pgqueue.counter_failed_42'::regclass, 'pgqueue.counter_failed_43'::regclass,
    'pgqueue.counter_failed_44'::regclass, 'pgqueue.counter_failed_45'::regclass,
    'pgqueue.counter_failed_46'::regclass, 'pgqueue.counter_failed_47'::regclass,
    'pgqueue.counter_failed_48'::regclass, 'pgqueue.counter_failed_49'::regclass,
    'pgqueue.counter_failed_50'::regclass, 'pgqueue.counter_failed_51'::regclass,
    'pgqueue.counter_failed_52'::regclass, 'pgqueue.counter_failed_53'::regclass,
    'pgqueue.counter_failed_54'::regclass, 'pgqueue.counter_failed_55'::regclass,
    'pgqueue.counter_failed_56'::regclass, 'pgqueue.counter_failed_57'::regclass,
    'pgqueue.counter_failed_58'::regclass, 'pgqueue.counter_failed_59'::regclass,
    'pgqueue.counter_failed_60'::regclass, 'pgqueue.counter_failed_61'::regclass,
    'pgqueue.counter_failed_62'::regclass, 'pgqueue.counter_failed_63'::regclass,
    'pgqueue.counter_dead_0'::regclass, 'pgqueue.counter_dead_1'::regclass,
    'pgqueue.counter_dead_2'::regclass, 'pgqueue.counter_dead_3'::regclass,
    'pgqueue.counter_dead_4'::regclass, 'pgqueue.counter_dead_5'::regclass,
    'pgqueue.counter_dead_6'::regclass, 'pgqueue.counter_dead_7'::regclass,
    'pgqueue.counter_dead_8'::regclass, 'pgqueue.counter_dead_9'::regclass,
    'pgqueue.counter_dead_10'::regclass, 'pgqueue.counter_dead_11'::regclass,
    'pgqueue.counter_dead_12'::regclass, 'pgqueue.counter_dead_13'::regclass,
    'pgqueue.counter_dead_14'::regclass, 'pgqueue.counter_dead_15'::regclass,
    'pgqueue.counter_dead_16'::regclass, 'pgqueue.counter_dead_17'::regclass,
    'pgqueue.counter_dead_18'::regclass, 'pgqueue.counter_dead_19'::regclass,
    'pgqueue.counter_dead_20'::regclass, 'pgqueue.counter_dead_21'::regclass,
    'pgqueue.counter_dead_22'::regclass, 'pgqueue.counter_dead_23'::regclass,
    'pgqueue.counter_dead_24'::regclass, 'pgqueue.counter_dead_25'::regclass,
    'pgqueue.counter_dead_26'::regclass, 'pgqueue.counter_dead_27'::regclass,
    'pgqueue.counter_dead_28'::regclass, 'pgqueue.counter_dead_29'::regclass,
    'pgqueue.counter_dead_30'::regclass, 'pgqueue.counter_dead_31'::regclass,
    'pgqueue.counter_dead_32'::regclass, 'pgqueue.counter_dead_33'::regclass,
    'pgqueue.counter_dead_34'::regclass, 'pgqueue.counter_dead_35'::regclass,
    'pgqueue.counter_dead_36'::regclass, 'pgqueue.counter_dead_37'::regclass,
    'pgqueue.counter_dead_38'::regclass, 'pgqueue.counter_dead_39'::regclass,
    'pgqueue.counter_dead_40'::regclass, 'pgqueue.counter_dead_41'::regclass,
    'pgqueue.counter_dead_42'::regclass, 'pgqueue.counter_dead_43'::regclass,
    'pgqueue.counter_dead_44'::regclass, 'pgqueue.counter_dead_45'::regclass,
    'pgqueue.counter_dead_46'::regclass, 'pgqueue.counter_dead_47'::regclass,
    'pgqueue.counter_dead_48'::regclass, 'pgqueue.counter_dead_49'::regclass,
    'pgqueue.counter_dead_50'::regclass, 'pgqueue.counter_dead_51'::regclass,
    'pgqueue.counter_dead_52'::regclass, 'pgqueue.counter_dead_53'::regclass,
    'pgqueue.counter_dead_54'::regclass, 'pgqueue.counter_dead_55'::regclass,
    'pgqueue.counter_dead_56'::regclass, 'pgqueue.counter_dead_57'::regclass,
    'pgqueue.counter_dead_58'::regclass, 'pgqueue.counter_dead_59'::regclass,
    'pgqueue.counter_dead_60'::regclass, 'pgqueue.counter_dead_61'::regclass,
    'pgqueue.counter_dead_62'::regclass, 'pgqueue.counter_dead_63'::regclass,
    'pgqueue.counter_expired_0'::regclass, 'pgqueue.counter_expired_1'::regclass,
    'pgqueue.counter_expired_2'::regclass, 'pgqueue.counter_expired_3'::regclass,
    'pgqueue.counter_expired_4'::regclass, 'pgqueue.counter_expired_5'::regclass,
    'pgqueue.counter_expired_6'::regclass, 'pgqueue.counter_expired_7'::regclass,
    'pgqueue.counter_expired_8'::regclass, 'pgqueue.counter_expired_9'::regclass,
    'pgqueue.counter_expired_10'::regclass, 'pgqueue.counter_expired_11'::regclass,
    'pgqueue.counter_expired_12'::regclass, 'pgqueue.counter_expired_13'::regclass,
    'pgqueue.counter_expired_14'::regclass, 'pgqueue.counter_expired_15'::regclass,
    'pgqueue.counter_expired_16'::regclass, 'pgqueue.counter_expired_17'::regclass,
    'pgqueue.counter_expired_18'::regclass, 'pgqueue.counter_expired_19'::regclass,
    'pgqueue.counter_expired_20'::regclass, 'pgqueue.counter_expired_21'::regclass,
    'pgqueue.counter_expired_22'::regclass, 'pgqueue.counter_expired_23'::regclass,
    'pgqueue.counter_expired_24'::regclass, 'pgqueue.counter_expired_25'::regclass,
    'pgqueue.counter_expired_26'::regclass, 'pgqueue.counter_expired_27'::regclass,
    'pgqueue.counter_expired_28'::regclass, 'pgqueue.counter_expired_29'::regclass,
    'pgqueue.counter_expired_30'::regclass, 'pgqueue.counter_expired_31'::regclass,
    'pgqueue.counter_expired_32'::regclass, 'pgqueue.counter_expired_33'::regclass,
    'pgqueue.counter_expired_34'::regclass, 'pgqueue.counter_expired_35'::regclass,
    'pgqueue.counter_expired_36'::regclass, 'pgqueue.counter_expired_37'::regclass,
    'pgqueue.counter_expired_38'::regclass, 'pgqueue.counter_expired_39'::regclass,
    'pgqueue.counter_expired_40'::regclass, 'pgqueue.counter_expired_41'::regclass,
    'pgqueue.counter_expired_42'::regclass, 'pgqueue.counter_expired_43'::regclass,
    'pgqueue.counter_expired_44'::regclass, 'pgqueue.counter_expired_45'::regclass,
    'pgqueue.counter_expired_46'::regclass, 'pgqueue.counter_expired_47'::regclass,
    'pgqueue.counter_expired_48'::regclass, 'pgqueue.counter_expired_49'::regclass,
    'pgqueue.counter_expired_50'::regclass, 'pgqueue.counter_expired_51'::regclass,
    'pgqueue.counter_expired_52'::regclass, 'pgqueue.counter_expired_53'::regclass,
    'pgqueue.counter_expired_54'::regclass, 'pgqueue.counter_expired_55'::regclass,
    'pgqueue.counter_expired_56'::regclass, 'pgqueue.counter_expired_57'::regclass,
    'pgqueue.counter_expired_58'::regclass, 'pgqueue.counter_expired_59'::regclass,
    'pgqueue.counter_expired_60'::regclass, 'pgqueue.counter_expired_61'::regclass,
    'pgqueue.counter_expired_62'::regclass, 'pgqueue.counter_expired_63'::regclass,
    'pgqueue.counter_enqueued32_0'::regclass, 'pgqueue.counter_enqueued32_1'::regclass,
    'pgqueue.counter_enqueued32_2'::regclass, 'pgqueue.counter_enqueued32_3'::regclass,
    'pgqueue.counter_enqueued32_4'::regclass, 'pgqueue.counter_enqueued32_5'::regclass,
    'pgqueue.counter_enqueued32_6'::regclass, 'pgqueue.counter_enqueued32_7'::regclass,
    'pgqueue.counter_enqueued32_8'::regclass, 'pgqueue.counter_enqueued32_9'::regclass,
    'pgqueue.counter_enqueued32_10'::regclass, 'pgqueue.counter_enqueued32_11'::regclass,
    'pgqueue.counter_enqueued32_12'::regclass, 'pgqueue.counter_enqueued32_13'::regclass,
    'pgqueue.counter_enqueued32_14'::regclass, 'pgqueue.counter_enqueued32_15'::regclass,
    'pgqueue.counter_enqueued32_16'::regclass, 'pgqueue.counter_enqueued32_17'::regclass,
    'pgqueue.counter_enqueued32_18'::regclass, 'pgqueue.counter_enqueued32_19'::regclass,
    'pgqueue.counter_enqueued32_20'::regclass, 'pgqueue.counter_enqueued32_21'::regclass,
    'pgqueue.counter_enqueued32_22'::regclass, 'pgqueue.counter_enqueued32_23'::regclass,
    'pgqueue.counter_enqueued32_24'::regclass, 'pgqueue.counter_enqueued32_25'::regclass,
    'pgqueue.counter_enqueued32_26'::regclass, 'pgqueue.counter_enqueued32_27'::regclass,
    'pgqueue.counter_enqueued32_28'::regclass, 'pgqueue.counter_enqueued32_29'::regclass,
    'pgqueue.counter_enqueued32_30'::regclass, 'pgqueue.counter_enqueued32_31'::regclass,
    'pgqueue.counter_enqueued32_32'::regclass, 'pgqueue.counter_enqueued32_33'::regclass,
    'pgqueue.counter_enqueued32_34'::regclass, 'pgqueue.counter_enqueued32_35'::regclass,
    'pgqueue.counter_enqueued32_36'::regclass, 'pgqueue.counter_enqueued32_37'::regclass,
    'pgqueue.counter_enqueued32_38'::regclass, 'pgqueue.counter_enqueued32_39'::regclass,
    'pgqueue.counter_enqueued32_40'::regclass, 'pgqueue.counter_enqueued32_41'::regclass,
    'pgqueue.counter_enqueued32_42'::regclass, 'pgqueue.counter_enqueued32_43'::regclass,
    'pgqueue.counter_enqueued32_44'::regclass, 'pgqueue.counter_enqueued32_45'::regclass,
    'pgqueue.counter_enqueued32_46'::regclass, 'pgqueue.counter_enqueued32_47'::regclass,
    'pgqueue.counter_enqueued32_48'::regclass, 'pgqueue.counter_enqueued32_49'::regclass,
    'pgqueue.counter_enqueued32_50'::regclass, 'pgqueue.counter_enqueued32_51'::regclass,
    'pgqueue.counter_enqueued32_52'::regclass, 'pgqueue.counter_enqueued32_53'::regclass,
    'pgqueue.counter_enqueued32_54'::regclass, 'pgqueue.counter_enqueued32_55'::regclass,
    'pgqueue.counter_enqueued32_56'::regclass, 'pgqueue.counter_enqueued32_57'::regclass,
    'pgqueue.counter_enqueued32_58'::regclass, 'pgqueue.counter_enqueued32_59'::regclass,
    'pgqueue.counter_enqueued32_60'::regclass, 'pgqueue.counter_enqueued32_61'::regclass,
    'pgqueue.counter_enqueued32_62'::regclass, 'pgqueue.counter_enqueued32_63'::regclass,
    'pgqueue.counter_delivered32_0'::regclass, 'pgqueue.counter_delivered32_1'::regclass,
    'pgqueue.counter_delivered32_2'::regclass, 'pgqueue.counter_delivered32_3'::regclass,
    'pgqueue.counter_delivered32_4'::regclass, 'pgqueue.counter_delivered32_5'::regclass,
    'pgqueue.counter_delivered32_6'::regclass, 'pgqueue.counter_delivered32_7'::regclass,
    'pgqueue.counter_delivered32_8'::regclass, 'pgqueue.counter_delivered32_9'::regclass,
    'pgqueue.counter_delivered32_10'::regclass, 'pgqueue.counter_delivered32_11'::regclass,
    'pgqueue.counter_delivered32_12'::regclass, 'pgqueue.counter_delivered32_13'::regclass,
    'pgqueue.counter_delivered32_14'::regclass, 'pgqueue.counter_delivered32_15'::regclass,
    'pgqueue.counter_delivered32_16'::regclass, 'pgqueue.counter_delivered32_17'::regclass,
    'pgqueue.counter_delivered32_18'::regclass, 'pgqueue.counter_delivered32_19'::regclass,
    'pgqueue.counter_delivered32_20'::regclass, 'pgqueue.counter_delivered32_21'::regclass,
    'pgqueue.counter_delivered32_22'::regclass, 'pgqueue.counter_delivered32_23'::regclass,
    'pgqueue.counter_delivered32_24'::regclass, 'pgqueue.counter_delivered32_25'::regclass,
    'pgqueue.counter_delivered32_26'::regclass, 'pgqueue.counter_delivered32_27'::regclass,
    'pgqueue.counter_delivered32_28'::regclass, 'pgqueue.counter_delivered32_29'::regclass,
    'pgqueue.counter_delivered32_30'::regclass, 'pgqueue.counter_delivered32_31'::regclass,
    'pgqueue.counter_delivered32_32'::regclass, 'pgqueue.counter_delivered32_33'::regclass,
    'pgqueue.counter_delivered32_34'::regclass, 'pgqueue.counter_delivered32_35'::regclass,
    'pgqueue.counter_delivered32_36'::regclass, 'pgqueue.counter_delivered32_37'::regclass,
    'pgqueue.counter_delivered32_38'::regclass, 'pgqueue.counter_delivered32_39'::regclass,
    'pgqueue.counter_delivered32_40'::regclass, 'pgqueue.counter_delivered32_41'::regclass,
    'pgqueue.counter_delivered32_42'::regclass, 'pgqueue.counter_delivered32_43'::regclass,
    'pgqueue.counter_delivered32_44'::regclass, 'pgqueue.counter_delivered32_45'::regclass,
    'pgqueue.counter_delivered32_46'::regclass, 'pgqueue.counter_delivered32_47'::regclass,
    'pgqueue.counter_delivered32_48'::regclass, 'pgqueue.counter_delivered32_49'::regclass,
    'pgqueue.counter_delivered32_50'::regclass, 'pgqueue.counter_delivered32_51'::regclass,
    'pgqueue.counter_delivered32_52'::regclass, 'pgqueue.counter_delivered32_53'::regclass,
    'pgqueue.counter_delivered32_54'::regclass, 'pgqueue.counter_delivered32_55'::regclass,
    'pgqueue.counter_delivered32_56'::regclass, 'pgqueue.counter_delivered32_57'::regclass,
    'pgqueue.counter_delivered32_58'::regclass, 'pgqueue.counter_delivered32_59'::regclass,
    'pgqueue.counter_delivered32_60'::regclass, 'pgqueue.counter_delivered32_61'::regclass,
    'pgqueue.counter_delivered32_62'::regclass, 'pgqueue.counter_delivered32_63'::regclass,
    'pgqueue.counter_completed32_0'::regclass, 'pgqueue.counter_completed32_1'::regclass,
    'pgqueue.counter_completed32_2'::regclass, 'pgqueue.counter_completed32_3'::regclass,
    'pgqueue.counter_completed32_4'::regclass, 'pgqueue.counter_completed32_5'::regclass,
    'pgqueue.counter_completed32_6'::regclass, 'pgqueue.counter_completed32_7'::regclass,
    'pgqueue.counter_completed32_8'::regclass, 'pgqueue.counter_completed32_9'::regclass,
    'pgqueue.counter_completed32_10'::regclass, 'pgqueue.counter_completed32_11'::regclass,
    'pgqueue.counter_completed32_12'::regclass, 'pgqueue.counter_completed32_13'::regclass,
    'pgqueue.counter_completed32_14'::regclass, 'pgqueue.counter_completed32_15'::regclass,
    'pgqueue.counter_completed32_16'::regclass, 'pgqueue.counter_completed32_17'::regclass,
    'pgqueue.counter_completed32_18'::regclass, 'pgqueue.counter_completed32_19'::regclass,
    'pgqueue.counter_completed32_20'::regclass, 'pgqueue.counter_completed32_21'::regclass,
    'pgqueue.counter_completed32_22'::regclass, 'pgqueue.counter_completed32_23'::regclass,
    'pgqueue.counter_completed32_24'::regclass, 'pgqueue.counter_completed32_25'::regclass,
    'pgqueue.counter_completed32_26'::regclass, 'pgqueue.counter_completed32_27'::regclass,
    'pgqueue.counter_completed32_28'::regclass, 'pgqueue.counter_completed32_29'::regclass,
    'pgqueue.counter_completed32_30'::regclass, 'pgqueue.counter_completed32_31'::regclass,
    'pgqueue.counter_completed32_32'::regclass, 'pgqueue.counter_completed32_33'::regclass,
    'pgqueue.counter_completed32_34'::regclass, 'pgqueue.counter_completed32_35'::regclass,
    'pgqueue.counter_completed32_36'::regclass, 'pgqueue.counter_completed32_37'::regclass,
    'pgqueue.counter_completed32_38'::regclass, 'pgqueue.counter_completed32_39'::regclass,
    'pgqueue.counter_completed32_40'::regclass, 'pgqueue.counter_completed32_41'::regclass,
    'pgqueue.counter_completed32_42'::regclass, 'pgqueue.counter_completed32_43'::regclass,
    'pgqueue.counter_completed32_44'::regclass, 'pgqueue.counter_completed32_45'::regclass,
    'pgqueue.counter_completed32_46'::regclass, 'pgqueue.counter_completed32_47'::regclass,
    'pgqueue.counter_completed32_48'::regclass, 'pgqueue.counter_completed32_49'::regclass,
    'pgqueue.counter_completed32_50'::regclass, 'pgqueue.counter_completed32_51'::regclass,
    'pgqueue.counter_completed32_52'::regclass, 'pgqueue.counter_completed32_53'::regclass,
    'pgqueue.counter_completed32_54'::regclass, 'pgqueue.counter_completed32_55'::regclass,
    'pgqueue.counter_completed32_56'::regclass, 'pgqueue.counter_completed32_57'::regclass,
    'pgqueue.counter_completed32_58'::regclass, 'pgqueue.counter_completed32_59'::regclass,
    'pgqueue.counter_completed32_60'::regclass, 'pgqueue.counter_completed32_61'::regclass,
    'pgqueue.counter_completed32_62'::regclass, 'pgqueue.counter_completed32_63'::regclass])[p_kind * 64 + (p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._count_seq(integer, integer) IS
    'pgqueue internal: the sequence that counts messages of a kind (0 enqueued .. 5 expired, 6..8 by 32) for a queue (pgqueue.queue_counters)';

-- Count one message of a kind (pgqueue._count_seq) for a queue; always true. nextval writes no
-- row version and is not rolled back. Call it in PL/pgSQL assignments and RETURN expressions,
-- which are planned once per session: inlined into a statement that is planned again and again
-- (a custom plan, a SQL function's body), _count_seq's 576 constants cost about 0.3 ms a plan.
CREATE FUNCTION pgqueue._counted(p_queue_id integer, p_kind integer)
RETURNS boolean
LANGUAGE sql VOLATILE
RETURN pg_catalog.nextval(pgqueue._count_seq(p_queue_id, p_kind)) > 0;

COMMENT ON FUNCTION pgqueue._counted(integer, integer) IS
    'pgqueue internal: add one to a queue''s counter of a kind (0 enqueued .. 5 expired); always true';

-- Count p_n messages of kind 0 (enqueued), 1 (delivered) or 2 (completed) for a queue in at most
-- 31 + p_n / 32 nextval calls: p_n % 32 on the kind's sequence and p_n / 32 on its companion
-- that counts by 32 (pgqueue._count_seq kind + 6); always true. For batches: one nextval costs
-- about 1 us, so counting a batch of 1000 one by one cost 6-8% of message_create_batch.
CREATE FUNCTION pgqueue._counted_n(p_queue_id integer, p_kind integer, p_n bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- planned once: a custom plan for each p_n would inline _count_seq again each time (see _counted)
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_one regclass := pgqueue._count_seq(p_queue_id, p_kind);
    v_32  regclass := pgqueue._count_seq(p_queue_id, p_kind + 6);
BEGIN
    PERFORM nextval(v_one) FROM generate_series(1, p_n % 32);
    PERFORM nextval(v_32) FROM generate_series(1, p_n / 32);
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue._counted_n(integer, integer, bigint) IS
    'pgqueue internal: add p_n to a queue''s counter of kind 0 (enqueued), 1 (delivered) or 2 (completed) in at most 31 + p_n / 32 nextval calls';

-- Count a move to the dead letters (pgqueue._dead_letter): dead_lettered, and expired if the
-- message's lease had run out at p_now; always true. PL/pgSQL so that its expression is planned
-- once per session, not with each call of the SQL function _dead_letter (see _counted).
CREATE FUNCTION pgqueue._counted_dead(p_queue_id integer, p_locked_until bigint, p_now bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN pgqueue._counted(p_queue_id, 4)
       AND (p_locked_until IS NULL OR p_locked_until > p_now OR pgqueue._counted(p_queue_id, 5));
END;
$$;

COMMENT ON FUNCTION pgqueue._counted_dead(integer, bigint, bigint) IS
    'pgqueue internal: count a message moved to the dead letters (and an expired lease if its lease had run out at p_now); always true';

-- Per queue, how many messages were enqueued, delivered, completed, failed, dead-lettered and
-- how many leases expired, since the queue was created (or since the upgrade to 0.4).
--
-- Read from sequences (pgqueue._count_seq), so reading is cheap (nine sequence reads a queue,
-- no scan) and counting costs the hot paths one nextval a message (a batch of n at most
-- 31 + n / 32, pgqueue._counted_n), no row version. How exact:
--   * a counted call that rolls back stays counted (nextval is not transactional);
--   * after a crash a counter may be ahead (sequences log 32 values ahead, and so on a standby):
--     failed, dead_lettered and expired by up to 32; enqueued, delivered and completed by up to
--     32 + 32 * 32 = 1,056, since their batches count on a second sequence that steps by 32;
--     or behind a value read before the crash, by what transactions that had not committed
--     counted (a sequence's WAL is flushed by the next commit, which the crash came before);
--   * shared is true when another queue counts on the same stripe (more than 64 queues, or
--     queues that existed before the upgrade to 0.4 with ids equal mod 64): then each of them
--     shows the sum of both.
-- What is counted: enqueued: message_create (and the text, JSON and schedule paths),
-- message_create_batch, dead_letter_requeue, spark_publish; delivered: each message message_dequeue hands out
-- (lease or delete mode); completed: message_complete(_batch); failed: message_fail that
-- retries; dead_lettered: every move to the dead letters (fail, reject, poison lease); expired:
-- leases that ran out, counted when a dequeue takes the message back (or a dead letter moves
-- it). Spark claims and acknowledgements are not counted. Errors: PQ001, 42602 for p_queue.
CREATE FUNCTION pgqueue.queue_counters(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, enqueued bigint, delivered bigint, completed bigint, failed bigint,
               dead_lettered bigint, expired bigint, shared boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan  -- planned once per session (see pgqueue._counted)
AS $$
#variable_conflict use_column
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name,
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 0)), 0)
             + coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 6)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 1)), 0)
             + coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 7)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 2)), 0)
             + coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 8)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 3)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 4)), 0),
           coalesce(pg_sequence_last_value(pgqueue._count_seq(q.id, 5)), 0),
           EXISTS (SELECT FROM pgqueue.queue o WHERE o.id & 63 = q.id & 63 AND o.id <> q.id)
      FROM pgqueue.queue q
     WHERE p_queue IS NULL OR q.name = p_queue
     ORDER BY q.name;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_counters(text) IS
    'Per queue: messages enqueued, delivered, completed, failed (retried), dead-lettered and leases expired since the queue was created (sequences: a rolled-back call stays counted); shared = another queue counts on the same stripe';

-- Move one locked message to the dead letters (the caller holds its row lock). A message that had
-- its group's turn gives it on (pgqueue._message_left); its idempotency key is free at once.
CREATE OR REPLACE FUNCTION pgqueue._dead_letter(p_id bigint, p_error text, p_now bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue_id integer;
    v_group    text;
    v_turn_at  bigint;
    v_left     boolean;
BEGIN
    WITH d AS (
        DELETE FROM pgqueue.message m WHERE m.id = p_id
        RETURNING m.id, m.queue_id, m.dequeue_at, m.attempts, m.created_at,
                  m.content, m.content_type, m.state, m.last_error, m.locked_until,
                  m.group_key, m.turn_at
    ), i AS (
        INSERT INTO pgqueue.dead_letter
            (id, queue_id, dequeue_at, attempts, created_at, dead_at,
             content, content_type, state, last_error)
        SELECT d.id, d.queue_id, d.dequeue_at, d.attempts, d.created_at, p_now,
               d.content, d.content_type, d.state, coalesce(p_error, d.last_error)
          FROM d
         WHERE pgqueue._counted_dead(d.queue_id, d.locked_until, p_now)  -- queue_counters
    )
    SELECT d.queue_id, d.group_key, d.turn_at INTO v_queue_id, v_group, v_turn_at FROM d;
    IF v_group IS NOT NULL AND v_turn_at IS NOT NULL THEN
        v_left := pgqueue._message_left(v_queue_id, p_id, v_group, v_turn_at, NULL);  -- no key kept
    END IF;
END;
$$;

-------------------------------------------------------------------------------
-- Spark consumers: the holder of a consumer is recorded with a random lock key
-------------------------------------------------------------------------------

ALTER TABLE pgqueue.spark_consumer ADD COLUMN holder_pid integer;
ALTER TABLE pgqueue.spark_consumer ADD COLUMN holder_key bigint;

COMMENT ON COLUMN pgqueue.spark_consumer.holder_pid IS
    'the backend that opened the consumer last (spark_consumer_open); it holds the consumer while it holds the session advisory lock holder_key';
COMMENT ON COLUMN pgqueue.spark_consumer.holder_key IS
    'random key of the holder''s session advisory lock, unknown to other roles until it is held (docs/locking.md)';

-- A consumer held now is held on (1885827447, id), which 0.4 no longer looks at: a second
-- driver would open it as well, and each could acknowledge (delete) the other's claims. So the
-- update waits for no such hold: it refuses while one exists (the hold of a 0.3 spark_claim in
-- flight too), naming the sessions to stop. Only a hold that can be a Spark query's counts: on
-- the id of a consumer, by a role that may write pgqueue.spark_consumer (the lock itself any
-- role may take, and a role granted nothing would otherwise hold every update up).
DO $$
DECLARE
    v_held text;
BEGIN
    SELECT pg_catalog.string_agg(pg_catalog.format('consumer "%s" of queue "%s" (pid %s)', c.name, q.name, l.pid),
                                 ', ' ORDER BY c.id, l.pid)
      INTO v_held
      FROM pg_catalog.pg_locks l
      JOIN pgqueue.spark_consumer c ON c.id::pg_catalog.oid OPERATOR(pg_catalog.=) l.objid
      JOIN pgqueue.queue q ON q.id OPERATOR(pg_catalog.=) c.queue_id
      JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
     WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
       AND l.classid OPERATOR(pg_catalog.=) 1885827447::pg_catalog.oid
       AND l.objsubid OPERATOR(pg_catalog.=) 2
       AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                              WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
       AND pg_catalog.has_table_privilege(a.usesysid, 'pgqueue.spark_consumer', 'INSERT, UPDATE');
    IF v_held IS NOT NULL THEN
        RAISE EXCEPTION 'Spark consumers are held by running queries of pgqueue 0.3 or earlier: %', v_held
            USING ERRCODE = 'PQ005',
                  DETAIL = '0.4 records a consumer''s holder anew: updating now would let a second query open a consumer one still holds.',
                  HINT = 'Stop those Spark queries (or end their sessions: pg_terminate_backend), update, then start them again: they go on from their committed offsets.';
    END IF;
END;
$$;

-------------------------------------------------------------------------------
-- New functions
-------------------------------------------------------------------------------

-- Raise 22004 "<p_name> must not be NULL" when p_is_null. Callers pass (x IS NULL, '...'::text):
-- exact argument types, so no overload planted beside it could be a better match.
CREATE FUNCTION pgqueue._not_null(p_is_null boolean, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_is_null THEN
        RAISE EXCEPTION '% must not be NULL', p_name USING ERRCODE = '22004';
    END IF;
END;
$$;

-- The current wall-clock time in epoch milliseconds (leases and due times use this).
--
-- In double precision (date_part), not numeric (EXTRACT, AT TIME ZONE): the epoch in seconds
-- is exact to 0.24 us until 2106 (below 2^32 s, ulp 2^-21 s), the product in microseconds to
-- 0.25 us (below 2^52), so the cast rounds to the exact microsecond, and the division floors it
-- to the millisecond: the same value as the numeric formula (tests/pgtap/10_schema.sql compares
-- them), 1.7 us less a delete-mode dequeue (docs/performance.md).
CREATE OR REPLACE FUNCTION pgqueue.now_ms()
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN (date_part('epoch', clock_timestamp()) * 1000000)::bigint / 1000;

COMMENT ON FUNCTION pgqueue.now_ms() IS
    'Current wall-clock time (clock_timestamp) in epoch milliseconds, the clock of leases and due times';

-- Convert epoch milliseconds back to a timestamp.
--
-- Exact for every time a timestamptz holds: whole days and the milliseconds left over, added as
-- intervals (integers of days and microseconds) to the epoch. 0.1-0.3 divided by 1000.0 and
-- went through to_timestamp's double precision, which is 30 us coarse by the year 9999: 375 of
-- the 1,001 times near its end that sql/20_create.sql round-trips came back a millisecond early.
-- Beyond the days an interval holds (far outside the range of a timestamptz) to_timestamp
-- raises the error instead, 22008 "timestamp out of range" (the interval's overflow said
-- "interval out of range", which names nothing the caller passed: a review). Not STRICT: the
-- planner inlines a STRICT SQL function only when its body is strict, which a CASE is not, and
-- the call cost 6.5 times the inlined expression (a review: the dead_letters view calls it on
-- every row); a NULL gives NULL all the same (the CASE's ELSE, to_timestamp(NULL)).
CREATE OR REPLACE FUNCTION pgqueue.from_epoch(p_ms bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN p_ms / 86400000 BETWEEN -2147483648 AND 2147483647
            THEN ('1970-01-01 00:00:00'::timestamp + (p_ms / 86400000) * interval '1 day'
                  + (p_ms % 86400000) * interval '1 millisecond') AT TIME ZONE 'UTC'
            ELSE to_timestamp(p_ms / 1000.0::double precision) END;

COMMENT ON FUNCTION pgqueue.from_epoch(bigint) IS
    'Convert BIGINT milliseconds since the Unix epoch to a timestamptz';

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

-- Whether a message row is leased (locked_until is set), for the statements that find a message
-- by its id (acknowledgements). Written as a CASE, not "locked_until IS NOT NULL": the planner
-- cannot prove message_leased_idx's predicate from a CASE, so those statements always probe
-- message_pkey. From "IS NOT NULL", statistics taken while nothing was leased made a generic
-- plan walk the whole leased index for the id, on every acknowledgement: a cost that grew with
-- the leases in flight and, under a held snapshot, with every lease since it began
-- (tests/test_index_probes.py). Inlined: no call at run time.
CREATE FUNCTION pgqueue._leased(p_locked_until bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN p_locked_until IS NULL THEN false ELSE true END;

COMMENT ON FUNCTION pgqueue._leased(bigint) IS
    'pgqueue internal: locked_until IS NOT NULL, in a form that keeps by-id statements on message_pkey';

-- The lock stripe of a queue: pgqueue.queue_lock_<id & 63> (docs/locking.md). One regclass
-- constant per stripe, so that each is a recorded dependency (pg_dump of a plain install then
-- creates the sequences before this function).
CREATE FUNCTION pgqueue._lock_stripe(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.queue_lock_0'::regclass, 'pgqueue.queue_lock_1'::regclass,
    'pgqueue.queue_lock_2'::regclass, 'pgqueue.queue_lock_3'::regclass,
    'pgqueue.queue_lock_4'::regclass, 'pgqueue.queue_lock_5'::regclass,
    'pgqueue.queue_lock_6'::regclass, 'pgqueue.queue_lock_7'::regclass,
    'pgqueue.queue_lock_8'::regclass, 'pgqueue.queue_lock_9'::regclass,
    'pgqueue.queue_lock_10'::regclass, 'pgqueue.queue_lock_11'::regclass,
    'pgqueue.queue_lock_12'::regclass, 'pgqueue.queue_lock_13'::regclass,
    'pgqueue.queue_lock_14'::regclass, 'pgqueue.queue_lock_15'::regclass,
    'pgqueue.queue_lock_16'::regclass, 'pgqueue.queue_lock_17'::regclass,
    'pgqueue.queue_lock_18'::regclass, 'pgqueue.queue_lock_19'::regclass,
    'pgqueue.queue_lock_20'::regclass, 'pgqueue.queue_lock_21'::regclass,
    'pgqueue.queue_lock_22'::regclass, 'pgqueue.queue_lock_23'::regclass,
    'pgqueue.queue_lock_24'::regclass, 'pgqueue.queue_lock_25'::regclass,
    'pgqueue.queue_lock_26'::regclass, 'pgqueue.queue_lock_27'::regclass,
    'pgqueue.queue_lock_28'::regclass, 'pgqueue.queue_lock_29'::regclass,
    'pgqueue.queue_lock_30'::regclass, 'pgqueue.queue_lock_31'::regclass,
    'pgqueue.queue_lock_32'::regclass, 'pgqueue.queue_lock_33'::regclass,
    'pgqueue.queue_lock_34'::regclass, 'pgqueue.queue_lock_35'::regclass,
    'pgqueue.queue_lock_36'::regclass, 'pgqueue.queue_lock_37'::regclass,
    'pgqueue.queue_lock_38'::regclass, 'pgqueue.queue_lock_39'::regclass,
    'pgqueue.queue_lock_40'::regclass, 'pgqueue.queue_lock_41'::regclass,
    'pgqueue.queue_lock_42'::regclass, 'pgqueue.queue_lock_43'::regclass,
    'pgqueue.queue_lock_44'::regclass, 'pgqueue.queue_lock_45'::regclass,
    'pgqueue.queue_lock_46'::regclass, 'pgqueue.queue_lock_47'::regclass,
    'pgqueue.queue_lock_48'::regclass, 'pgqueue.queue_lock_49'::regclass,
    'pgqueue.queue_lock_50'::regclass, 'pgqueue.queue_lock_51'::regclass,
    'pgqueue.queue_lock_52'::regclass, 'pgqueue.queue_lock_53'::regclass,
    'pgqueue.queue_lock_54'::regclass, 'pgqueue.queue_lock_55'::regclass,
    'pgqueue.queue_lock_56'::regclass, 'pgqueue.queue_lock_57'::regclass,
    'pgqueue.queue_lock_58'::regclass, 'pgqueue.queue_lock_59'::regclass,
    'pgqueue.queue_lock_60'::regclass, 'pgqueue.queue_lock_61'::regclass,
    'pgqueue.queue_lock_62'::regclass, 'pgqueue.queue_lock_63'::regclass])[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._lock_stripe(integer) IS
    'pgqueue internal: the sequence whose relation lock guards a queue (docs/locking.md)';

-- Raise the right error for a queue name that was not found: invalid name or unknown queue.
CREATE OR REPLACE FUNCTION pgqueue._queue_missing(p_queue text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NULL THEN
        RAISE EXCEPTION 'queue name must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        RAISE EXCEPTION 'invalid queue name %', quote_literal(left(p_queue, 100))
                        || CASE WHEN length(p_queue) > 100 THEN format(' (%s characters)', length(p_queue)) ELSE '' END
            USING ERRCODE = '42602',
                  HINT = 'A queue name has 1 to 48 characters from A-Z a-z 0-9 _ . - and does not start with . or -.';
    END IF;
    RAISE EXCEPTION 'queue "%" does not exist', p_queue
        USING ERRCODE = 'PQ001',
              HINT = 'Create it with pgqueue.queue_create(); list queues with pgqueue.queue_list().';
END;
$$;

-- Find a queue, take its lock stripe (docs/locking.md) and read its settings again after the
-- lock (a drop or alter may just have ended); PQ001/42602/22004 if there is no such queue.
CREATE FUNCTION pgqueue._queue_enter(p_queue text)
RETURNS pgqueue.queue
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    PERFORM pgqueue._queue_lock(v_queue.id);
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.id = v_queue.id;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    RETURN v_queue;
END;
$$;

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

-- In REPEATABLE READ and SERIALIZABLE, make sure the queue row a producer read from its snapshot
-- is still the current one, and keep it so until commit: FOR SHARE on it raises a serialization
-- failure (40001, retry the transaction) if a queue_drop or queue_alter committed after the
-- snapshot was taken, and makes a later drop or alter wait for this transaction. READ COMMITTED
-- producers do not need it: they read the queue again after taking its lock stripe.
--
-- SECURITY DEFINER because FOR SHARE needs UPDATE on pgqueue.queue, which producers must not
-- have. EXECUTE is revoked from PUBLIC (a share lock held by anyone would stall drop and alter)
-- and granted to producers by docs/grants.sql.
CREATE FUNCTION pgqueue._queue_pin(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM FROM pgqueue.queue q WHERE q.id = p_queue_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'queue % was dropped', p_queue_id
            USING ERRCODE = 'PQ001',
                  HINT = 'The queue was dropped while this transaction ran.';
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._queue_pin(integer) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._queue_pin(integer) IS
    'pgqueue internal: lock a queue row FOR SHARE for a REPEATABLE READ or SERIALIZABLE producer (40001 if it changed since the snapshot)';

-- Wait for the work in flight on a queue's lock stripe and hold new work off until the end of the
-- transaction: the stripe in SHARE ROW EXCLUSIVE mode (docs/locking.md). queue_drop and a
-- max_size or group_concurrency change call it before they read or change any row of the queue.
--
-- SECURITY DEFINER because ALTER SEQUENCE (the only statement that takes a strong lock on a
-- sequence) needs its owner; it runs nothing but that statement, on a name it computes itself.
-- EXECUTE is revoked from PUBLIC: holding a stripe this way stops every queue on it.
CREATE FUNCTION pgqueue._queue_quiesce(p_queue_id integer)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('ALTER SEQUENCE %s NO CYCLE', pgqueue._lock_stripe(p_queue_id));
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._queue_quiesce(integer) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._queue_quiesce(integer) IS
    'pgqueue internal: wait for in-flight work on the queue''s lock stripe and block new work until commit (queue_drop, max_size and group_concurrency changes)';

-- pgqueue.queue_size: the bound is upper + (the stripe's enqueued counter - mark), or upper alone
-- when mark is NULL (pgqueue._queue_reserve). Its rows are derived: recounted at the next
-- admission.
ALTER TABLE pgqueue.queue_size ADD COLUMN mark bigint;
COMMENT ON COLUMN pgqueue.queue_size.mark IS
    'the stripe''s enqueued counter when upper was counted (the bound is upper plus what was enqueued since; above the counter: no bound, the next admission counts); NULL: upper is the bound, kept by every admission';
DELETE FROM pgqueue.queue_size;

-- The stripes' exactness marks for max_size: 64 sequences, pgqueue.queue_size_exact_<id & 63>
-- (pgqueue._size_exact_seq). A sequence, because the mark must outlive the transaction that sets
-- it, which then raises 40001.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_size_exact_%s', i);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_size_exact_%s IS %L', i,
            'pgqueue internal: set once a REPEATABLE READ or SERIALIZABLE producer of a capped queue whose id & 63 = '
            || i || ' came: those queues count every admission in pgqueue.queue_size');
    END LOOP;
END;
$$;

-- The exactness mark of a queue's stripe for max_size: pgqueue.queue_size_exact_<id & 63>, NULL
-- until the first REPEATABLE READ or SERIALIZABLE producer of a capped queue on the stripe sets it
-- to its xid; from then on the stripe's capped queues add every admission to their
-- pgqueue.queue_size row (pgqueue._queue_reserve). One regclass constant per sequence, as in
-- pgqueue._lock_stripe.
CREATE FUNCTION pgqueue._size_exact_seq(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.queue_size_exact_0'::regclass, 'pgqueue.queue_size_exact_1'::regclass,
    'pgqueue.queue_size_exact_2'::regclass, 'pgqueue.queue_size_exact_3'::regclass,
    'pgqueue.queue_size_exact_4'::regclass, 'pgqueue.queue_size_exact_5'::regclass,
    'pgqueue.queue_size_exact_6'::regclass, 'pgqueue.queue_size_exact_7'::regclass,
    'pgqueue.queue_size_exact_8'::regclass, 'pgqueue.queue_size_exact_9'::regclass,
    'pgqueue.queue_size_exact_10'::regclass, 'pgqueue.queue_size_exact_11'::regclass,
    'pgqueue.queue_size_exact_12'::regclass, 'pgqueue.queue_size_exact_13'::regclass,
    'pgqueue.queue_size_exact_14'::regclass, 'pgqueue.queue_size_exact_15'::regclass,
    'pgqueue.queue_size_exact_16'::regclass, 'pgqueue.queue_size_exact_17'::regclass,
    'pgqueue.queue_size_exact_18'::regclass, 'pgqueue.queue_size_exact_19'::regclass,
    'pgqueue.queue_size_exact_20'::regclass, 'pgqueue.queue_size_exact_21'::regclass,
    'pgqueue.queue_size_exact_22'::regclass, 'pgqueue.queue_size_exact_23'::regclass,
    'pgqueue.queue_size_exact_24'::regclass, 'pgqueue.queue_size_exact_25'::regclass,
    'pgqueue.queue_size_exact_26'::regclass, 'pgqueue.queue_size_exact_27'::regclass,
    'pgqueue.queue_size_exact_28'::regclass, 'pgqueue.queue_size_exact_29'::regclass,
    'pgqueue.queue_size_exact_30'::regclass, 'pgqueue.queue_size_exact_31'::regclass,
    'pgqueue.queue_size_exact_32'::regclass, 'pgqueue.queue_size_exact_33'::regclass,
    'pgqueue.queue_size_exact_34'::regclass, 'pgqueue.queue_size_exact_35'::regclass,
    'pgqueue.queue_size_exact_36'::regclass, 'pgqueue.queue_size_exact_37'::regclass,
    'pgqueue.queue_size_exact_38'::regclass, 'pgqueue.queue_size_exact_39'::regclass,
    'pgqueue.queue_size_exact_40'::regclass, 'pgqueue.queue_size_exact_41'::regclass,
    'pgqueue.queue_size_exact_42'::regclass, 'pgqueue.queue_size_exact_43'::regclass,
    'pgqueue.queue_size_exact_44'::regclass, 'pgqueue.queue_size_exact_45'::regclass,
    'pgqueue.queue_size_exact_46'::regclass, 'pgqueue.queue_size_exact_47'::regclass,
    'pgqueue.queue_size_exact_48'::regclass, 'pgqueue.queue_size_exact_49'::regclass,
    'pgqueue.queue_size_exact_50'::regclass, 'pgqueue.queue_size_exact_51'::regclass,
    'pgqueue.queue_size_exact_52'::regclass, 'pgqueue.queue_size_exact_53'::regclass,
    'pgqueue.queue_size_exact_54'::regclass, 'pgqueue.queue_size_exact_55'::regclass,
    'pgqueue.queue_size_exact_56'::regclass, 'pgqueue.queue_size_exact_57'::regclass,
    'pgqueue.queue_size_exact_58'::regclass, 'pgqueue.queue_size_exact_59'::regclass,
    'pgqueue.queue_size_exact_60'::regclass, 'pgqueue.queue_size_exact_61'::regclass,
    'pgqueue.queue_size_exact_62'::regclass, 'pgqueue.queue_size_exact_63'::regclass])[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._size_exact_seq(integer) IS
    'pgqueue internal: the sequence that marks a queue''s stripe exact for max_size (pgqueue.queue_size_exact_<id & 63>)';

-- The recount windows for max_size: 64 sequences, pgqueue.queue_size_recount_<id & 63>
-- (pgqueue._size_recount_seq). A count of a capped queue reads up to max_size + 1 index entries;
-- one that found 10,000 or more is not repeated for ten times as long as it took (at most 1 s),
-- and until then an admission that the bound cannot prove fits is refused without counting. A sequence, because
-- the window must outlive a refusal, which rolls back what its transaction wrote.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_size_recount_%s MINVALUE 0', i);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_size_recount_%s IS %L', i,
            'pgqueue internal: until when (epoch ms * 2^20, plus the queue id >> 6) a capped queue whose id & 63 = '
            || i || ' is not counted again (pgqueue._queue_reserve)');
    END LOOP;
END;
$$;

-- The recount window of a queue's stripe for max_size: pgqueue.queue_size_recount_<id & 63>, NULL
-- until a count of a capped queue on the stripe found 10,000 messages or more; then (the time until which
-- that queue is not counted again, in epoch ms) * 2^20 + ((queue id >> 6) & (2^20 - 1)), set by
-- pgqueue._queue_reserve. One regclass constant per sequence, as in pgqueue._lock_stripe.
CREATE FUNCTION pgqueue._size_recount_seq(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.queue_size_recount_0'::regclass, 'pgqueue.queue_size_recount_1'::regclass,
    'pgqueue.queue_size_recount_2'::regclass, 'pgqueue.queue_size_recount_3'::regclass,
    'pgqueue.queue_size_recount_4'::regclass, 'pgqueue.queue_size_recount_5'::regclass,
    'pgqueue.queue_size_recount_6'::regclass, 'pgqueue.queue_size_recount_7'::regclass,
    'pgqueue.queue_size_recount_8'::regclass, 'pgqueue.queue_size_recount_9'::regclass,
    'pgqueue.queue_size_recount_10'::regclass, 'pgqueue.queue_size_recount_11'::regclass,
    'pgqueue.queue_size_recount_12'::regclass, 'pgqueue.queue_size_recount_13'::regclass,
    'pgqueue.queue_size_recount_14'::regclass, 'pgqueue.queue_size_recount_15'::regclass,
    'pgqueue.queue_size_recount_16'::regclass, 'pgqueue.queue_size_recount_17'::regclass,
    'pgqueue.queue_size_recount_18'::regclass, 'pgqueue.queue_size_recount_19'::regclass,
    'pgqueue.queue_size_recount_20'::regclass, 'pgqueue.queue_size_recount_21'::regclass,
    'pgqueue.queue_size_recount_22'::regclass, 'pgqueue.queue_size_recount_23'::regclass,
    'pgqueue.queue_size_recount_24'::regclass, 'pgqueue.queue_size_recount_25'::regclass,
    'pgqueue.queue_size_recount_26'::regclass, 'pgqueue.queue_size_recount_27'::regclass,
    'pgqueue.queue_size_recount_28'::regclass, 'pgqueue.queue_size_recount_29'::regclass,
    'pgqueue.queue_size_recount_30'::regclass, 'pgqueue.queue_size_recount_31'::regclass,
    'pgqueue.queue_size_recount_32'::regclass, 'pgqueue.queue_size_recount_33'::regclass,
    'pgqueue.queue_size_recount_34'::regclass, 'pgqueue.queue_size_recount_35'::regclass,
    'pgqueue.queue_size_recount_36'::regclass, 'pgqueue.queue_size_recount_37'::regclass,
    'pgqueue.queue_size_recount_38'::regclass, 'pgqueue.queue_size_recount_39'::regclass,
    'pgqueue.queue_size_recount_40'::regclass, 'pgqueue.queue_size_recount_41'::regclass,
    'pgqueue.queue_size_recount_42'::regclass, 'pgqueue.queue_size_recount_43'::regclass,
    'pgqueue.queue_size_recount_44'::regclass, 'pgqueue.queue_size_recount_45'::regclass,
    'pgqueue.queue_size_recount_46'::regclass, 'pgqueue.queue_size_recount_47'::regclass,
    'pgqueue.queue_size_recount_48'::regclass, 'pgqueue.queue_size_recount_49'::regclass,
    'pgqueue.queue_size_recount_50'::regclass, 'pgqueue.queue_size_recount_51'::regclass,
    'pgqueue.queue_size_recount_52'::regclass, 'pgqueue.queue_size_recount_53'::regclass,
    'pgqueue.queue_size_recount_54'::regclass, 'pgqueue.queue_size_recount_55'::regclass,
    'pgqueue.queue_size_recount_56'::regclass, 'pgqueue.queue_size_recount_57'::regclass,
    'pgqueue.queue_size_recount_58'::regclass, 'pgqueue.queue_size_recount_59'::regclass,
    'pgqueue.queue_size_recount_60'::regclass, 'pgqueue.queue_size_recount_61'::regclass,
    'pgqueue.queue_size_recount_62'::regclass, 'pgqueue.queue_size_recount_63'::regclass])[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._size_recount_seq(integer) IS
    'pgqueue internal: the sequence that keeps a capped queue''s recount window (pgqueue.queue_size_recount_<id & 63>)';

-- Reserve room for p_count new messages in a capped queue (max_size), or raise PQ003.
--
-- Producers of a capped queue take turns on its pgqueue.queue_size row (FOR UPDATE, which writes
-- no new row version). The row keeps an upper bound on the queue's live messages, recounted
-- exactly (bounded by max_size) only when the bound says "full", in one of two forms:
--   * mark NOT NULL: the bound is upper + (E - mark), where E is the enqueued counter of the
--     queue's stripe (pgqueue.queue_counters: sequences) now and mark what it was when upper was
--     counted. Every admission counts its messages as enqueued before it commits (the callers of
--     pgqueue._queue_admit), and while it holds the row lock, so every admission since the count
--     is in the difference (other queues of the stripe only make the bound looser). An admission
--     writes nothing: under a held snapshot a row written at every admission piles up dead
--     versions that every producer walks (docs/performance.md, "Capped queues under a held
--     snapshot"). A recount runs in a snapshot taken after the lock (READ COMMITTED), when every
--     earlier admission has committed.
--   * mark NULL ("exact"): upper itself is the bound, and every admission adds to it (an
--     UPDATE), as before 0.4. A REPEATABLE READ or SERIALIZABLE producer counts in its
--     transaction's snapshot, which misses admissions that committed after it; an UPDATE by each
--     of them makes its FOR UPDATE raise 40001 instead (specs/rr_backpressure.spec), an
--     admission that writes nothing would not. So the first such producer of a capped queue
--     marks the queue's stripe exact (until queue_create gives the stripe to a new queue): it sets pgqueue.queue_size_exact_<id & 63> to its
--     xid while it holds the row lock, then raises 40001. Producers read the mark after taking
--     the row lock, so every later admission on the stripe is exact, and every one before it
--     ended before the lock was taken, so before that transaction ended. Its retry, and any
--     producer whose snapshot sees the marking transaction ended, counts exactly; one whose
--     snapshot does not raises 40001 too (specs/capped_mixed.spec).
--
-- The recount window: a count reads up to max_size + 1 index entries (and the heap where the
-- visibility map is not set), so a queue kept at its cap, where producers outrun consumers, used
-- to count itself at nearly every admission, holding the row lock while it did (about 20 ms an
-- admission with a cap of 100,000). A count that finds the queue full (no room for one message), with 10,000 messages or
-- more, now sets the queue's window, pgqueue.queue_size_recount_<id & 63> (a sequence, because a refusal rolls back
-- what its transaction wrote): until ten times the count's duration (at most 1 s) after it ended,
-- an admission that the bound cannot prove fits is refused without counting. So counting takes
-- at most about a tenth of the time, and a refusal may come up to that long after consumers made
-- room; the cap itself is never exceeded. The window names the queue (id >> 6 in its low 20
-- bits, the time in epoch ms above them), so another queue of the stripe ignores it. A smaller
-- count sets no window (a cap below 10,000 never has one): such a queue is counted whenever the
-- bound says "full", as before. Nor does a count that admits: had it set a window, an admission
-- rolled back (by its caller, or by an error after it, such as a bad group) would leave the old
-- "full" bound under a window and refuse the next producers for up to 1 s with room to spare. A queue whose pgqueue.queue_size row is gone (queue_alter of
-- max_size) is counted at once.
--
-- p_count 0 reserves nothing: it waits for the admissions in progress (their producers hold the
-- row lock to their commit) and returns holding the lock. message_create calls it before it looks
-- for an idempotency key a second time on a capped queue: a producer of the same key between its
-- admission and its commit holds room the first look could not see it take, so the full queue
-- would refuse (PQ003) the call that should return that producer's id (specs/idempotent_create.spec).
-- A queue without its row gets one that a later admission recounts (mark above the counter),
-- inserted the way an admission inserts it, so that it waits for a producer inserting it too
-- (READ COMMITTED; under REPEATABLE READ the second look cannot see a new message anyway).
--
-- SECURITY DEFINER so that producers need no privilege on pgqueue.queue_size or the sequences:
-- back-pressure must not depend on a row the producers it limits can write. It reads max_size
-- itself. EXECUTE is revoked from PUBLIC and granted to producers by docs/grants.sql.
CREATE FUNCTION pgqueue._queue_reserve(p_queue_id integer, p_count bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_name    text;
    v_max     bigint;
    v_upper   bigint;
    v_mark    bigint;
    v_found   boolean;
    v_rc      boolean := current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable');
    v_exact   bigint;
    v_enq     bigint;
    v_bound   bigint;
    v_counted boolean := false;
    v_window  bigint;
    v_t0      double precision;
    v_took    double precision;
BEGIN
    IF p_count = 0 THEN
        -- the queue's lock stripe first, as every writer takes it (docs/locking.md, rule 1; the
        -- callers of an admission hold it already): a row made for a queue being dropped would
        -- outlive it. Under REPEATABLE READ no row is made: this snapshot may predate a drop.
        PERFORM pgqueue._queue_lock(p_queue_id);
    END IF;
    SELECT q.name, q.max_size INTO v_name, v_max FROM pgqueue.queue q WHERE q.id = p_queue_id;
    IF v_max IS NULL OR p_count < 0 THEN
        RETURN;
    END IF;
    IF p_count = 0 THEN
        -- wait for the admissions in progress (see the header)
        PERFORM FROM pgqueue.queue_size s WHERE s.queue_id = p_queue_id FOR UPDATE;
        IF NOT FOUND AND v_rc THEN
            INSERT INTO pgqueue.queue_size (queue_id, upper, mark)
            VALUES (p_queue_id, 0, 9223372036854775807)  -- recounted by the next admission
                ON CONFLICT (queue_id) DO NOTHING;
            PERFORM FROM pgqueue.queue_size s WHERE s.queue_id = p_queue_id FOR UPDATE;
        END IF;
        RETURN;
    END IF;
    SELECT s.upper, s.mark INTO v_upper, v_mark FROM pgqueue.queue_size s
     WHERE s.queue_id = p_queue_id FOR UPDATE;
    v_found := FOUND;
    IF NOT v_found THEN
        INSERT INTO pgqueue.queue_size (queue_id, upper) VALUES (p_queue_id, 0)
            ON CONFLICT (queue_id) DO NOTHING;
        PERFORM FROM pgqueue.queue_size s WHERE s.queue_id = p_queue_id FOR UPDATE;  -- recounted below
    END IF;
    -- read under the row lock (see the header)
    v_exact := pg_sequence_last_value(pgqueue._size_exact_seq(p_queue_id));
    IF NOT v_rc AND (v_exact IS NULL
                     OR NOT pg_visible_in_snapshot(v_exact::text::xid8, pg_current_snapshot())) THEN
        -- unset, or above every transaction id of this cluster, where it would never become
        -- visible: a plain install restored from another cluster (pg_dump copies the sequence)
        IF v_exact IS NULL OR v_exact > txid_current() THEN
            PERFORM setval(pgqueue._size_exact_seq(p_queue_id), txid_current());
        END IF;
        RAISE EXCEPTION 'could not serialize access to the size of capped queue "%"', v_name
            USING ERRCODE = '40001',
                  HINT = 'Retry the transaction: an admission may have committed after its snapshot.';
    END IF;
    v_enq := coalesce(pg_sequence_last_value(pgqueue._count_seq(p_queue_id, 0)), 0)
           + coalesce(pg_sequence_last_value(pgqueue._count_seq(p_queue_id, 6)), 0);
    -- (a counter below the mark, which only a reset of an unused stripe's counters by
    -- queue_create or a row inserted by a call with p_count 0 could cause, is recounted)
    v_bound := CASE WHEN NOT v_found OR v_enq < v_mark THEN NULL
                    WHEN v_mark IS NULL THEN v_upper
                    ELSE v_upper + (v_enq - v_mark) END;
    IF v_bound IS NULL OR v_bound + p_count > v_max THEN
        -- inside the queue's recount window (see the header): refused without counting
        v_window := pg_sequence_last_value(pgqueue._size_recount_seq(p_queue_id));
        v_t0 := date_part('epoch', clock_timestamp()) * 1000;
        IF v_bound IS NOT NULL AND v_window & 1048575 = (p_queue_id >> 6) & 1048575
           AND (v_window >> 20) > v_t0 AND (v_window >> 20) <= v_t0 + 1000 THEN
            RAISE EXCEPTION 'queue "%" is full (max_size %): % more message(s) refused',
                            v_name, v_max, p_count
                USING ERRCODE = 'PQ003',
                      DETAIL = format('The queue is counted again in %s ms (a count of 10,000 messages or more is repeated at most once in ten times its duration).',
                                      ceil((v_window >> 20) - v_t0)),
                      HINT = 'Back off and retry later, or raise max_size with pgqueue.queue_alter().';
        END IF;
        v_bound := pgqueue._queue_count(p_queue_id, least(v_max, 9223372036854775806) + 1);
        v_counted := true;
        v_took := date_part('epoch', clock_timestamp()) * 1000 - v_t0;
        -- a count that found the queue full (smaller counts are cheap, and a plan or a cold
        -- cache could make one look dear); one that found room sets none: its bound is written
        -- in the row and rolls back with the admission if its transaction does. Full means no
        -- room for one message, whatever p_count: a batch too large for the room left (or a
        -- producer calling this function with a huge p_count, again and again) would refuse
        -- the single messages that fit for the whole window (a security review)
        IF v_bound >= 10000 AND v_bound >= v_max THEN
            PERFORM setval(pgqueue._size_recount_seq(p_queue_id),
                           (ceil(v_t0 + v_took + least(10 * v_took, 1000))::bigint << 20)
                           | ((p_queue_id >> 6) & 1048575));
        END IF;
    END IF;
    IF v_bound + p_count > v_max THEN
        RAISE EXCEPTION 'queue "%" is full (max_size %): % more message(s) refused',
                        v_name, v_max, p_count
            USING ERRCODE = 'PQ003',
                  HINT = 'Back off and retry later, or raise max_size with pgqueue.queue_alter().';
    END IF;
    IF v_exact IS NOT NULL THEN
        UPDATE pgqueue.queue_size s SET upper = v_bound + p_count, mark = NULL
         WHERE s.queue_id = p_queue_id;
    ELSIF v_counted OR v_mark IS NULL THEN
        -- a new count, or a bound kept the exact way until now: from here on upper + (E - mark)
        UPDATE pgqueue.queue_size s SET upper = v_bound, mark = v_enq
         WHERE s.queue_id = p_queue_id;
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._queue_reserve(integer, bigint) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._queue_reserve(integer, bigint) IS
    'pgqueue internal: admit p_count messages into a capped queue or raise PQ003 (0: wait for the admissions in progress); the only writer of pgqueue.queue_size';

-- Refuse to run p_what under REPEATABLE READ or SERIALIZABLE (PQ009; READ UNCOMMITTED runs as
-- READ COMMITTED in PostgreSQL, and is let through as it): queue_drop, max_size and group_concurrency
-- changes wait for the work in flight and must then see what it committed, queue_create must see
-- which counter stripes other queues took, and a new idempotency key must see the keys kept for
-- a queue's window; a REPEATABLE READ or SERIALIZABLE snapshot taken earlier cannot
-- (docs/guarantees.md, "Isolation levels").
CREATE FUNCTION pgqueue._require_read_committed(p_what text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION '% needs READ COMMITTED, not %', p_what,
                        upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'PQ009',
                  HINT = 'Run it in a READ COMMITTED transaction of its own: BEGIN ISOLATION LEVEL READ COMMITTED, or SET default_transaction_isolation = ''read committed'' where the database or role defaults to another level.';
    END IF;
END;
$$;

-- Trigger function of message_placed_low and message_placed_low_update, for a row that no
-- pgqueue function vouched for (column write_mark: written by plain SQL, or by a function that
-- placed it where it cannot tell from its own clock reading). If its key (a lease's
-- locked_until, else a grouped message's turn_at in microseconds, else dequeue_at) is more than
-- 5 ms below the clock, a message became deliverable at a place below the clock (a priority or
-- past dequeue_at, a defer or fail to an earlier time, a lease given back at its old place by
-- spark_release, or any such INSERT or UPDATE in plain SQL), or got a lease that had run out
-- already (plain SQL). Advance the queue's lock stripe, after the write, so that consumers'
-- session hints look again from the bottom once this transaction has ended
-- (pgqueue._message_take, docs/performance.md).
--
-- The clock is read when the trigger runs, so a row keyed with its writer's clock reading, whose
-- trigger comes more than 5 ms after that reading (a writer descheduled under load), counts as
-- placed below the clock: the functions that key rows from their clock reading vouch for them
-- instead (write_mark), and plain SQL pays an extra signal at worst. (Before write_mark, the
-- reading was kept in a setting that this function compared with: a session could set it by
-- hand and leave its own rows unsignalled.)
CREATE FUNCTION pgqueue._message_placed_low()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(NEW.locked_until, NEW.turn_at / 1000, NEW.dequeue_at)
       >= pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000 - 5 THEN
        RETURN NULL;  -- not below the clock
    END IF;
    PERFORM nextval(pgqueue._lock_stripe(NEW.queue_id));
    RETURN NULL;
END;
$$;

-- The first lease of a queue at or after (p_at, p_id) by (locked_until, id) that has run out by
-- p_now, locked or not: the lease candidate of the session hints (pgqueue._message_take). An SQL
-- function that the planner inlines into the caller's statement (STABLE, not STRICT, no SET
-- clause), so it is the same index probe of message_leased_idx as if written there.
CREATE FUNCTION pgqueue._message_first_lease(p_queue_id integer, p_at bigint, p_id bigint, p_now bigint)
RETURNS TABLE (locked_until bigint, id bigint)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT m.locked_until, m.id FROM pgqueue.message m
     WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
       AND (m.locked_until, m.id) >= (p_at, p_id) AND m.locked_until <= p_now
     ORDER BY m.locked_until, m.id
     LIMIT 1;
END;

COMMENT ON FUNCTION pgqueue._message_first_lease(integer, bigint, bigint, bigint) IS
    'pgqueue internal: the first lease at or after (p_at, p_id) that has run out by p_now (inlined into pgqueue._message_take)';

-- Of the transactions p_xids (xid8 as bigint), those that still run and hold no lock of any mode
-- on any relation of the schema pgqueue in this database: from pg_locks, the transaction's own
-- lock on its xid and every relation lock of the same virtual transaction. Such a transaction
-- has written no row of pgqueue.message (every write takes ROW EXCLUSIVE on it first and keeps
-- it to the end), and the keys pgqueue's functions write from the clock are read after a
-- statement on one of pgqueue's tables, so after this look. pgqueue._message_take raises the
-- restart point of such a set-aside transaction (docs/performance.md, "The look at pg_locks").
-- pg_lock_status() reads the backends' fast-path slots before the shared lock table, which holds
-- the xid's lock: a relation lock taken before its slot was read is still held when the xid's
-- lock is read (locks go at the transaction's end), so it is seen. A transaction that has ended
-- holds no xid lock and is not returned.
CREATE FUNCTION pgqueue._idle_xids(p_xids bigint[])
RETURNS bigint[]
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH l AS MATERIALIZED (
        SELECT k.locktype, k.database, k.relation, k.transactionid, k.virtualtransaction,
               k.mode, k.granted
          FROM pg_locks k)
    SELECT coalesce(array_agg(x.x), '{}')
      FROM unnest(p_xids) AS x(x)
      JOIN l t ON t.locktype = 'transactionid' AND t.granted AND t.mode = 'ExclusiveLock'
              AND t.transactionid = x.x::text::xid8::xid
     WHERE NOT EXISTS (
           SELECT FROM l r
            WHERE r.virtualtransaction = t.virtualtransaction AND r.locktype = 'relation'
              AND r.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
              AND r.relation IN (SELECT c.oid FROM pg_class c
                                  WHERE c.relnamespace = 'pgqueue'::regnamespace))
$$;

COMMENT ON FUNCTION pgqueue._idle_xids(bigint[]) IS
    'pgqueue internal: of these xids, those whose transaction runs and holds no lock on a relation of the schema pgqueue (pg_locks)';

-- Lock up to p_limit deliverable messages of a queue and return their ids in delivery order: the
-- one dequeue probe, shared by message_dequeue, spark_claim and (p_turns) the grouped dequeue.
--
-- Expired leases first (overdue work), then ready messages by (dequeue_at, id): two bounded
-- index probes (message_leased_idx, message_ready_idx) under one LIMIT, so the second runs only
-- for the room the first leaves, both FOR UPDATE SKIP LOCKED (never waiting on another
-- consumer). A take of one message runs the expired-lease probe unless its session ran it on
-- the queue within the last 20 ms and found nothing, and always when no ready message is left;
-- otherwise the ready probe alone (see the loop below). A lease that ran out p_max_attempts
-- times is locked too but goes to the dead letters (a poison message must not loop forever);
-- the probe is then repeated for the room it leaves, leaving out the rows this call has locked
-- already (SKIP LOCKED does not skip a transaction's own locks), and the ids of p_skip (the
-- caller's earlier rounds in this transaction: a lease it gave may have run out already). Each
-- round dead-letters at least one row, so it ends. p_max_id (if not NULL) leaves out messages with a larger id. The caller
-- holds the queue's lock stripe.
-- p_turns (a queue with message groups, from message_dequeue): the ready probe is
-- message_turn_idx by (turn_at, id) instead, the messages whose group's turn it is; turn keys are
-- in microseconds (pgqueue._turn_key), so that probe's bound (the clock), cap and margin are in
-- microseconds too. The take and the candidate probe are one statement for each kind of ready
-- key: a branch under a one-time filter is never run but is still set up at every execution
-- (5 us a call, measured); and the take of one message has a statement of its own, without the
-- aggregate that orders several ids (6-8 us a call, measured).
--
-- The session hints: where this session's probes start, a key below which no message can be
-- delivered, so that the btree descends straight past the entries of finished messages that
-- vacuum has not removed yet, because it has not come round or because a snapshot holds it back
-- (docs/performance.md, "Held snapshots"): H, a (dequeue_at, id) for the ready probe (a
-- (turn_at, id) with p_turns), and L, a (locked_until, id) for the expired-lease probe. Kept per
-- session and queue in the setting pgqueue.hint_<queue id> (pgqueue.turn_hint_<queue id> with
-- p_turns: the keys are in other units) as the text of a bigint[], a space and its hashtext: no
-- row, so no dead tuples and no contention; transactional, so a rolled-back dequeue gets its old
-- hints back; written only when it changed.
--   * H and L only move to candidates C and D (the first visible ready row, the first visible
--     lease, locked or not, each capped 5 ms (a turn 6 ms) below the clock read before they were found; the
--     cap alone when there is none) once every transaction with an xid below X has ended, and
--     only if the first visible row from H (from L) is still at C (at D) or beyond then: a
--     producer that commits a row below C meanwhile is found first. X is this call's xid, which
--     the take assigns after the candidates were found. A call that takes nothing keeps no
--     candidate (an empty poll of a queue with nothing ready stays read-only), unless its
--     candidate probe found a ready row (one more than 5 ms old) that the take then did not get
--     (locked or taken by another consumer meanwhile, or left out by p_max_id or p_skip): it
--     assigns an xid itself, after the probes, and keeps it. A session whose takes keep losing
--     that race would otherwise never move its hints, and one that starts during a held
--     snapshot walks from the bottom of the index on every call (a grouped queue of 100 groups:
--     45-78 ms a call, in which the others take every ready turn its snapshot saw,
--     docs/performance.md). The caller's transaction keeps that xid to its end: one that goes
--     on after an empty dequeue, or stays idle, holds back vacuum as any writer does, and is
--     set aside by the other sessions' hints after 200 ms (pgqueue's client and worker poll in
--     transactions of their own). Keys written with the clock (a default
--     dequeue_at, a lease's locked_until, a turn handed on) are read after the writer's xid is
--     assigned (pgqueue._write_clock; a turn is handed on after the hand-off's DELETE or UPDATE),
--     so a writer with an xid above X writes keys above the candidates. Nor before the
--     candidates are 20 ms old (by p_now): waiting is always safe, and the candidate probe (one
--     statement, 5% of an ungrouped delete-mode call's server time, 13% of a grouped one's) runs
--     at most 50 times a second in a session. Each of 15 busy sessions calls about every 3 ms,
--     so a 3-ms wait still ran it on nearly every call: 20 ms gave 1.07-1.30x the delete-mode
--     rate at 15 clients, and the same under a held snapshot (docs/performance.md).
--   * Messages placed below the clock (a priority or past dequeue_at, defer or fail to an earlier
--     time, spark_release, requeue, plain SQL, a lease running out in the past, a turn key below
--     the clock) advance the queue's lock stripe afterwards (trigger message_placed_low); a
--     session that sees it move probes from the bottom, at that call and at every call after
--     it until its hints (F too) start again from the bottom, once the transactions with xids below
--     that call's xid have ended (or been set aside).
--   * A transaction that holds up a candidate for more than 200 ms (an idle session with an xid,
--     a long writer) is set aside, with R, where H and L stood then; when it ends the session
--     starts again from its R at its next call that decides (one with ripe candidates or none,
--     within 20 ms, below), so its rows, visible from then on, are found (not when it rolled
--     back, e.g. ended by idle_in_transaction_session_timeout: its rows never become visible, and
--     under a held snapshot each session's walk back from R over message_leased_idx visits the
--     heap for every lease completed since, docs/performance.md; nor beyond the last second
--     when it holds no lock on pgqueue's tables: the look, below, raises its R). Its keys written
--     with the clock are at or above R: H (L) last moved to a candidate once every xid below
--     that candidate's X had ended, and this one had not, so its xid came after X and its clock
--     readings after the candidate was found (placed-low writes signal the stripe, and a
--     restart from the bottom for that signal does not wait for the transactions set aside, so
--     it sets the R of each one with an xid below the restart's to the bottom: that one may
--     have placed the row, which becomes visible when it ends). Each keeps
--     its own R, so that a short one set aside while an idle session is (case b) costs a walk
--     from where the hints stood when the short one was set aside, not from the idle one's. It
--     used to start again from the bottom: under a held snapshot each such end sent every session
--     over all the dead entries of the hold, and a dequeue that ran 200 ms on two busy cores was
--     enough to set it off (issue 12's 1-s stalls).
--   * F, the fast start: the ready key of the message this session took last. The statement of
--     the ready probe alone (a take of one message while the session's last look for expired
--     leases is less than 20 ms old, below) starts at F instead of H when F is above H, the
--     stripe has not moved and this call ran no candidate probe; if it finds nothing, the
--     statement with both probes runs from H at once. Every other statement starts at H. H
--     trails the head of the queue by the 20-40 ms of deliveries the candidates wait, and under
--     a held snapshot each probe from H visits the heap for every entry of those deliveries
--     (about 100 heap buffers a call at 7,000 deliveries a second, docs/performance.md); F
--     trails it by the deliveries of the other sessions since this one's last call. The price:
--     a message that becomes deliverable below F (a late commit, another transaction's
--     rollback) may wait for this session until its next look, at most 20 ms, as an expired
--     lease may. A session's own rolled-back take restores its F with the rest of the state,
--     at or below the messages that take gave, so it finds those at once. F goes back with H:
--     to the bottom at a restart, to H when a transaction set aside has ended.
-- Layout: [1] backend pid, [2:3] H, [4:5] C, [6] when C and D were found (epoch ms, 0: none),
-- [7] the xid to wait for, [8] stripe value seen, [9] the xid to wait for before a restart from
-- the bottom (0: none), [10:11] L, [12:13] D, [14:15] F, [16] n, the number set aside,
-- [17:16+n] their xids, then n times R: the H and L of when it was set aside (4 values).
CREATE OR REPLACE FUNCTION pgqueue._message_take(
    p_queue_id     integer,
    p_limit        integer,
    p_now          bigint,
    p_max_attempts integer,
    p_max_id       bigint,
    p_turns        boolean DEFAULT false,
    p_skip         bigint[] DEFAULT '{}')
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
-- No SET clauses of its own: its two callers, message_dequeue and spark_claim, run it with
-- theirs (each SET clause is a GUC save and restore at every call: these four cost 4.2 us of
-- about 148 a delete-mode dequeue, docs/performance.md), and tests/pgtap/10_schema.sql checks
-- that every function calling it sets all four:
--   * search_path = pg_catalog, pg_temp (so every name below resolves as if pinned here);
--   * plan_cache_mode = force_generic_plan: custom plans would be re-planned on every call (a
--     LIMIT parameter makes the generic plan look dear to the plan cache); the generic plans
--     are the same index probes and save half the call;
--   * enable_seqscan = off, enable_bitmapscan = off: every probe here is an ordered walk of one
--     index that stops at its first rows, whatever the statistics say. Under a held snapshot a
--     VACUUM counts the dead entries it may not remove into the indexes' reltuples (every lease
--     completed since the hold began, in message_leased_idx), while the table's statistics say
--     almost nothing is leased; the generic plan of the candidate statement then found the
--     first lease by a Bitmap Heap Scan or a Seq Scan and a Sort of the whole table, 47-65 ms a
--     call, until statistics changed again: lease mode fell to 0.11x under issue 12's 2-minute
--     holds (tests/test_index_probes.py).
AS $$
DECLARE
    -- (Every expression below, a DECLARE default too, is prepared anew in each transaction: the
    -- common path runs as few as it can. The booleans start NULL, which IF takes as false.)
    c_min      CONSTANT bigint := -9223372036854775808;
    v_need     integer := p_limit;
    v_ids      bigint[];
    v_not      bigint[] := coalesce(p_skip, '{}');  -- p_skip and what this call locked
    v_acks     bigint[];  -- message_complete_and_dequeue's acknowledgements (pgqueue.ack_call) ...
    v_ack_keys numeric[]; -- ... and their (id, attempts token) pairs as id * 2^32 + token
    v_araw     text;
    v_found    bigint[];
    v_dead_ids bigint[];
    v_dead     bigint;
    v_name     text := CASE WHEN p_turns THEN 'pgqueue.turn_hint_' ELSE 'pgqueue.hint_' END || p_queue_id;
    -- the ready probe's bound: p_now, or for turns the clock in microseconds, read before the
    -- snapshot as p_now was (a turn handed on within this millisecond is due)
    v_due      bigint := CASE WHEN p_turns THEN pgqueue._turn_key(p_now, true) ELSE p_now END;
    v_raw      text := current_setting(v_name, true);
    v_s        bigint[];
    v_e        bigint;
    v_snap     pg_snapshot;
    v_mine     bigint := pg_current_xact_id_if_assigned()::text::bigint;
    v_xip      bigint[];
    v_x        bigint;
    v_oldest   bigint;
    v_long     bigint[];  -- the xids set aside ...
    v_longr    bigint[];  -- ... and their R, 4 values each (read from the state on deciding calls)
    v_j        integer;
    v_reset    boolean;   -- the stripe moved: start again from the bottom
    v_ended    boolean;   -- a transaction set aside has ended: start again from its R
    v_settle   boolean;
    v_moved    boolean;
    v_ripe     boolean;  -- may H and L move to C and D (the candidates are old enough)?
    v_new      boolean;
    v_k_at     bigint;
    v_k_id     bigint;
    v_d_at     bigint;
    v_d_id     bigint;
    v_xmax     bigint;
    v_cap      bigint;
    v_b        bigint[];  -- this call's probe bounds: H (ready or turn) and L (lease)
    v_one      bigint;    -- the take of one message: its id, and whether it goes to the dead letters
    v_one_dead boolean;
    v_lraw     text;
    v_last     bigint;    -- a one-message take: when this session last looked for expired leases ...
    v_look     boolean;   -- ... whether this call looks (NULL: not decided yet) ...
    v_looked   boolean;   -- ... and whether it looked and found none
    v_src      integer;
    v_fast     boolean;   -- this call's take of one message starts at F
    v_probed   boolean;   -- this call ran the candidate probe (from H) ...
    v_real     boolean;   -- ... and found a ready row (not the cap alone)
    v_one_k    bigint;    -- the ready key of a one-message take
    v_iraw     text;      -- the look for set-aside transactions that hold no lock on pgqueue: when ...
    v_ilast    bigint;    -- ... this session last looked, and ...
    v_idle     bigint[];  -- ... which it found so
BEGIN
    -- Bring the hints up to date (see the header). A value without its checksum (hashtext of the
    -- array's text, written after it) starts afresh, never an error: so does anything a session
    -- sets by hand unless it forges the checksum of text that is not a bigint[]. (The checksum
    -- replaced two regular expressions that checked the text: 4 us a call, measured.)
    v_s := CASE WHEN hashtext(split_part(v_raw, ' ', 1))::text = split_part(v_raw, ' ', 2)
                THEN split_part(v_raw, ' ', 1)::bigint[] END;
    IF v_s IS NULL OR v_s[1] <> pg_backend_pid()
       OR NOT (CASE WHEN v_s[16] BETWEEN 0 AND 10000 THEN cardinality(v_s) = 16 + 5 * v_s[16] ELSE false END) THEN
        -- [8], the stripe value seen, starts at the stripe's value now: a fresh state probes
        -- from the bottom anyway, and a row placed low by a transaction that advanced the
        -- stripe before this read had its xid before this call's, which H waits for before it
        -- moves (the stripes start at a random value, queue_lock.sql: from 0, every session's
        -- first call would restart from the bottom for nothing)
        v_s := ARRAY[pg_backend_pid(), c_min, c_min, 0, 0, 0, 0,
                     coalesce(pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)), 0),
                     0, c_min, c_min, 0, 0, c_min, c_min, 0];
    END IF;
    v_e := coalesce(pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)), 0);
    v_snap := pg_current_snapshot();  -- taken after the stripe was read
    -- every xid below v_xmax that is still running is in the snapshot's list
    v_xmax := pg_snapshot_xmax(v_snap)::text::bigint;
    -- a message was placed below the clock: this call probes from the bottom (and records the
    -- move once it has an xid, below)
    v_moved := v_e <> v_s[8];
    -- A clock set back (an NTP step, a clock that ran ahead and was corrected): H and L were
    -- capped below the clock of their time and F is a key this session took, so one above this
    -- call's bound says the clock reads earlier than it did, and the rows keyed with it since (a
    -- default dequeue_at, a lease, a turn) may lie below them: the hints start afresh, as a new
    -- session's do (without this a consumer's session delivered none of the messages enqueued
    -- after such a step until the clock came back past its hint, tests/test_fifo_and_priority.py;
    -- docs/guarantees.md, faults, says what a session idle across the step may still miss).
    IF v_s[2] > v_due OR v_s[10] > p_now OR v_s[14] > v_due THEN
        v_s[2] := c_min; v_s[3] := c_min; v_s[6] := 0; v_s[10] := c_min; v_s[11] := c_min;
        v_s[14] := c_min; v_s[15] := c_min;
        -- and the R of each transaction set aside (where H and L go back to when it ends): R above
        -- the clock too, so a row such a transaction keyed with the clock now and committed
        -- after H had passed it was never found (a review)
        IF v_s[16] > 0 THEN
            v_s[17 + v_s[16] : 16 + 5 * v_s[16]] := array_fill(c_min, ARRAY[(4 * v_s[16])::integer]);
        END IF;
    END IF;
    -- Candidates 20 ms old or more (compared as "v_s[6] <= p_now - 20", not "p_now - v_s[6] >=
    -- 20": a state set by hand must not make the subtraction overflow).
    v_ripe := v_s[6] <> 0 AND v_xmax > v_s[7] AND v_s[6] <= p_now - 20;
    -- v_oldest: the oldest transaction in progress that is not set aside (nor this one). With
    -- nothing set aside that is the snapshot's xmin. Otherwise a set-aside xid has ended when
    -- it is not in the snapshot's list of running xids (they are all below its xmax), and
    -- v_oldest is found from that list only when a check below reads it (else it stays NULL,
    -- which those checks take as false). Plain expressions and loops: no SQL statement.
    -- Only a deciding call reads the transactions set aside and what runs: one whose candidates
    -- are ripe, that has none (it runs the candidate probe), or whose restart from the bottom
    -- may be due. Every other call (nine in ten at 15 busy sessions) carries the state as it
    -- is, at the cost of this one expression: each expression that a PL/pgSQL call evaluates
    -- is prepared again in each transaction (about 62 a delete-mode call, with 330 catalog
    -- cache lookups), and the ones below, run on every call while an idle session held an xid,
    -- were what issue 12's case b cost delete mode (docs/performance.md, "Case (b): the
    -- set-aside path's expressions"). So a transaction set aside that has ended is seen
    -- at the next deciding call, within 20 ms, as a late commit below F is.
    IF v_ripe OR v_s[6] = 0 OR (v_s[9] <> 0 AND v_xmax > v_s[9]) THEN
        v_long := v_s[17 : 16 + v_s[16]];
        v_longr := v_s[17 + v_s[16] : 16 + 5 * v_s[16]];
        IF v_s[16] > 0 THEN
            -- the running xids, ascending (pg_current_snapshot sorts them; this transaction's own
            -- is never among them)
            v_xip := coalesce(string_to_array(nullif(split_part(v_snap::text, ':', 3), ''), ','), '{}')::bigint[];
            -- one expression when none of them has ended (the common case), else a loop
            IF NOT v_xip @> v_long THEN
                v_long := '{}';
                v_longr := '{}';
                FOR i IN 1 .. v_s[16] LOOP
                    v_x := v_s[16 + i];
                    v_j := 17 + v_s[16] + 4 * (i - 1);  -- its R
                    IF pg_visible_in_snapshot(v_x::text::xid8, v_snap) THEN
                        -- it has ended: H and L go back to its R, unless it rolled back (nothing it
                        -- wrote becomes visible; an unknown status counts as committed)
                        IF pg_xact_status(v_x::text::xid8) IS DISTINCT FROM 'aborted' THEN
                            v_ended := true;
                            IF (v_s[v_j], v_s[v_j + 1]) < (v_s[2], v_s[3]) THEN
                                v_s[2] := v_s[v_j]; v_s[3] := v_s[v_j + 1];
                            END IF;
                            IF (v_s[v_j + 2], v_s[v_j + 3]) < (v_s[10], v_s[11]) THEN
                                v_s[10] := v_s[v_j + 2]; v_s[11] := v_s[v_j + 3];
                            END IF;
                        END IF;
                    ELSE
                        v_long := v_long || v_x;
                        v_longr := v_longr || v_s[v_j : v_j + 3];
                    END IF;
                END LOOP;
            END IF;
            -- The look (at most once a second a session and queue, by p_now, in the setting
            -- <v_name>_look, on a deciding call; a value that is not a time within that second is as
            -- good as none, so a session can only make itself look more often; every 100 ms cost
            -- delete mode a tenth of its rate under case b, docs/performance.md): a transaction set
            -- aside that holds no lock on any relation of pgqueue's schema has written no row of
            -- pgqueue.message (every write locks the table first and keeps the lock to its end), and
            -- every key it writes from now on comes from a clock read after it took such a lock
            -- (pgqueue._write_clock and the lease's clock come after a statement on pgqueue's
            -- tables; a key placed more than 5 ms below its writer's clock signals the stripe), so
            -- after p_now, which was read before pg_locks was (pgqueue._idle_xids). Its R rises to
            -- p_now less the 5-ms margin: when an idle session's transaction (case b) ends, the
            -- hints go back over a second of deliveries at most, not over all of its hold. A
            -- transaction that has ended keeps its R.
            IF cardinality(v_long) > 0 THEN
                v_iraw := current_setting(v_name || '_look', true);
                v_ilast := CASE WHEN length(v_iraw) BETWEEN 1 AND 18 AND ltrim(v_iraw, '0123456789') = ''
                                THEN v_iraw::bigint END;
                IF NOT coalesce(v_ilast > p_now - 1000 AND v_ilast <= p_now, false) THEN
                    v_idle := pgqueue._idle_xids(v_long);
                    FOR i IN 1 .. cardinality(v_long) LOOP
                        IF v_long[i] = ANY (v_idle) THEN
                            -- (the ready keys' margin, as the candidates' cap: 5 ms, 6,000 us for turns)
                            IF (v_longr[4 * i - 3], v_longr[4 * i - 2])
                               < (v_due - CASE WHEN p_turns THEN 6000 ELSE 5 END, c_min) THEN
                                v_longr[4 * i - 3 : 4 * i - 2] :=
                                    ARRAY[v_due - CASE WHEN p_turns THEN 6000 ELSE 5 END, c_min];
                            END IF;
                            IF (v_longr[4 * i - 1], v_longr[4 * i]) < (p_now - 5, c_min) THEN
                                v_longr[4 * i - 1 : 4 * i] := ARRAY[p_now - 5, c_min];
                            END IF;
                        END IF;
                    END LOOP;
                    v_iraw := set_config(v_name || '_look', p_now::text, false);
                END IF;
            END IF;
            IF v_ripe OR (v_s[9] <> 0 AND v_xmax > v_s[9]) THEN
                -- the oldest running xid not set aside: the list and the xids set aside are both
                -- ascending, so when those are the list's first ones (an idle session's xid is
                -- older than every busy one's), it is the next one; else a loop
                IF v_xip[1 : cardinality(v_long)] = v_long THEN
                    v_oldest := coalesce(v_xip[cardinality(v_long) + 1], v_xmax);
                ELSE
                    v_oldest := v_xmax;
                    FOREACH v_x IN ARRAY v_xip LOOP
                        IF v_x < v_oldest AND v_x <> ALL (v_long) THEN
                            v_oldest := v_x;
                        END IF;
                    END LOOP;
                END IF;
            END IF;
        ELSE
            v_oldest := pg_snapshot_xmin(v_snap)::text::bigint;
        END IF;
        IF v_s[9] <> 0 AND v_xmax > v_s[9] AND v_oldest >= v_s[9] THEN
            v_reset := true;
            -- a transaction set aside with an xid below the restart's may have placed the row: the
            -- restart did not wait for it, so its end sends H and L back to the bottom (its R)
            FOR i IN 1 .. cardinality(v_long) LOOP
                IF v_long[i] < v_s[9] THEN
                    v_longr[4 * i - 3 : 4 * i] := ARRAY[c_min, c_min, c_min, c_min];
                END IF;
            END LOOP;
            v_s[9] := 0;
        END IF;
        IF v_reset THEN
            -- F too: a row placed low that the moving call did not take lies below F, which a
            -- take from F would pass (a review: a priority message waited behind later ones)
            v_s[2] := c_min; v_s[3] := c_min; v_s[6] := 0; v_s[10] := c_min; v_s[11] := c_min;
            v_s[14] := c_min; v_s[15] := c_min;
            v_ripe := false;
        ELSIF v_ended THEN  -- (H and L are back at its R, above)
            -- and F no higher than H: what the transaction wrote, visible now, lies at or above
            -- its R, and may lie below F (a review: a priority message it placed, after a
            -- restart had sent its R to the bottom, was passed by a take from F)
            IF (v_s[14], v_s[15]) > (v_s[2], v_s[3]) THEN
                v_s[14] := v_s[2]; v_s[15] := v_s[3];
            END IF;
            v_s[6] := 0;
            v_ripe := false;
        END IF;
        IF v_ripe THEN  -- may H and L move to C and D?
            IF v_oldest >= v_s[7] THEN
                v_settle := true;
            ELSIF v_s[6] < pgqueue.now_ms() - 200 THEN  -- set aside what holds them up
                IF v_xip IS NULL THEN
                    v_xip := coalesce(string_to_array(nullif(split_part(v_snap::text, ':', 3), ''), ','), '{}')::bigint[];
                END IF;
                FOREACH v_x IN ARRAY v_xip LOOP
                    IF v_x < v_s[7] AND v_x <> ALL (v_long) THEN
                        v_long := v_long || v_x;
                        v_longr := v_longr || ARRAY[v_s[2], v_s[3], v_s[10], v_s[11]];  -- its R: H and L before they move
                    END IF;
                END LOOP;
                v_settle := true;
            END IF;
        END IF;
        -- the list back into the state
        v_s := v_s[1:15] || cardinality(v_long)::bigint || v_long || v_longr;
    END IF;
    IF v_s[6] = 0 OR v_settle THEN
        v_probed := true;
        -- the first visible ready row from H and the first visible lease from L, locked or
        -- not (p_now was read before this snapshot), in one statement (one for each kind of
        -- ready key; the lease probe is pgqueue._message_first_lease, inlined); both bounded by
        -- the clock, as the candidates are capped below it (unbounded, the lease probe would
        -- walk the entries of every lease completed within the lease time)
        IF p_turns THEN
            SELECT t.turn_at, t.id, l.locked_until, l.id INTO v_k_at, v_k_id, v_d_at, v_d_id
              FROM (SELECT) AS one
              LEFT JOIN LATERAL (
                    SELECT m.turn_at, m.id FROM pgqueue.message m
                     WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL AND m.locked_until IS NULL
                       AND (m.turn_at, m.id) >= (v_s[2], v_s[3]) AND m.turn_at <= v_due
                     ORDER BY m.turn_at, m.id
                     LIMIT 1) AS t ON true
              LEFT JOIN LATERAL pgqueue._message_first_lease(p_queue_id, v_s[10], v_s[11], p_now) AS l ON true;
        ELSE
            SELECT r.dequeue_at, r.id, l.locked_until, l.id INTO v_k_at, v_k_id, v_d_at, v_d_id
              FROM (SELECT) AS one
              LEFT JOIN LATERAL (
                    SELECT m.dequeue_at, m.id FROM pgqueue.message m
                     WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                       AND (m.dequeue_at, m.id) >= (v_s[2], v_s[3]) AND m.dequeue_at <= v_due
                     ORDER BY m.dequeue_at, m.id
                     LIMIT 1) AS r ON true
              LEFT JOIN LATERAL pgqueue._message_first_lease(p_queue_id, v_s[10], v_s[11], p_now) AS l ON true;
        END IF;
        IF v_settle THEN  -- nothing visible in [H, C) or in [L, D): they move up
            IF v_k_at IS NULL OR (v_k_at, v_k_id) >= (v_s[4], v_s[5]) THEN
                v_s[2] := v_s[4]; v_s[3] := v_s[5];
            END IF;
            IF v_d_at IS NULL OR (v_d_at, v_d_id) >= (v_s[12], v_s[13]) THEN
                v_s[10] := v_s[12]; v_s[11] := v_s[13];
            END IF;
            v_s[6] := 0;
        END IF;
        -- new candidates, none above the cap (5 ms below the clock for ready keys; for turn keys,
        -- in microseconds, 6 ms: a writer counts a key as at the clock when its millisecond is
        -- at least 5 below its own, so a turn key p_dequeue_at * 1000 may lie up to 5,999 us below
        -- a clock in the same millisecond; with 5,000 a hint passed such a row, a review);
        -- recorded with this call's xid below
        v_cap := v_due - CASE WHEN p_turns THEN 6000 ELSE 5 END;
        v_real := v_k_at < v_cap;
        IF v_k_at IS NULL OR v_k_at >= v_cap THEN
            v_k_at := v_cap; v_k_id := c_min;
        END IF;
        IF v_d_at IS NULL OR v_d_at >= p_now - 5 THEN
            v_d_at := p_now - 5; v_d_id := c_min;
        END IF;
        v_new := (v_k_at, v_k_id) > (v_s[2], v_s[3]) OR (v_d_at, v_d_id) > (v_s[10], v_s[11]);
    END IF;
    -- From the bottom when the stripe moved, and on every call until the restart it records is
    -- done (v_s[9], once every transaction with an xid below that call's has ended or been set
    -- aside): a row placed low that the moving call could not see yet (its writer committed
    -- later) or did not take (it took one message, or another) is below H. Probing from H then,
    -- a session took later messages first, and an idle one found nothing while any older
    -- transaction stayed open, however unrelated (a review: seconds, for as long as it stayed).
    v_b := CASE WHEN v_moved OR v_s[9] <> 0 THEN ARRAY[c_min, c_min, c_min, c_min]
                ELSE ARRAY[v_s[2], v_s[3], v_s[10], v_s[11]] END;
    -- the fast start F (see the header), for the statement of the ready probe alone
    v_fast := p_limit = 1 AND NOT v_moved AND v_s[9] = 0 AND v_probed IS NULL AND (v_s[14], v_s[15]) > (v_b[1], v_b[2]);
    LOOP
        -- A take of one message looks for expired leases unless this session looked on this
        -- queue within the last 20 ms and found none (setting pgqueue.lease_check_<queue id>:
        -- when it last did, by p_now; a value that is not a time within those 20 ms is as good
        -- as none, so a session can only make itself look more often), and always when no
        -- ready message is left; a look that finds one leaves the setting alone, so a backlog
        -- of expired leases still goes first, one look a call. Otherwise a statement with the
        -- ready probe alone: the second probe under the UNION ALL is a plan node set up at every
        -- execution though it finds nothing almost always (docs/performance.md, "The
        -- expired-lease probe on fewer calls").
        IF v_need = 1 AND v_look IS NULL THEN
            v_lraw := current_setting('pgqueue.lease_check_' || p_queue_id, true);
            v_last := CASE WHEN length(v_lraw) BETWEEN 1 AND 18 AND ltrim(v_lraw, '0123456789') = ''
                           THEN v_lraw::bigint END;
            v_look := NOT coalesce(v_last > p_now - 20 AND v_last <= p_now, false);
        END IF;
        IF v_need = 1 AND NOT v_look THEN
            IF p_turns THEN
                SELECT m.id, m.turn_at INTO v_one, v_one_k FROM pgqueue.message m
                 WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL AND m.locked_until IS NULL
                   AND (m.turn_at, m.id) >= (CASE WHEN v_fast THEN v_s[14] ELSE v_b[1] END,
                                             CASE WHEN v_fast THEN v_s[15] ELSE v_b[2] END)
                   AND m.turn_at <= v_due
                   AND m.id <> ALL (v_not)
                   AND (p_max_id IS NULL OR m.id <= p_max_id)
                 ORDER BY m.turn_at, m.id
                 LIMIT 1
                   FOR UPDATE SKIP LOCKED;
            ELSE
                SELECT m.id, m.dequeue_at INTO v_one, v_one_k FROM pgqueue.message m
                 WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                   AND (m.dequeue_at, m.id) >= (CASE WHEN v_fast THEN v_s[14] ELSE v_b[1] END,
                                                CASE WHEN v_fast THEN v_s[15] ELSE v_b[2] END)
                   AND m.dequeue_at <= v_due
                   AND m.id <> ALL (v_not)
                   AND (p_max_id IS NULL OR m.id <= p_max_id)
                 ORDER BY m.dequeue_at, m.id
                 LIMIT 1
                   FOR UPDATE SKIP LOCKED;
            END IF;
            IF v_one IS NULL THEN
                v_look := true;  -- nothing ready: the statement with both probes (from H)
                v_fast := false;
                CONTINUE;
            END IF;
            v_found := ARRAY[v_one];
            -- F follows the takes, but a take from F moves it only once it is 32 ids behind (or
            -- above the id taken): a state written at every call cost more than the walk it
            -- saves when nothing is held (docs/performance.md)
            IF v_fast IS NOT TRUE OR v_s[15] < v_one - 32 OR v_s[15] > v_one THEN
                v_s[14] := v_one_k; v_s[15] := v_one;
            END IF;
            v_dead_ids := NULL;
        -- one statement for each kind of ready key, so that each plan has only the probes it
        -- runs, and for one message one without the aggregate (its sort is set up at every
        -- execution: 6-8 us of a one-message call, measured)
        ELSE
            IF v_acks IS NULL THEN
                -- (once a call, on the statements with the expired-lease probe) the messages
                -- message_complete_and_dequeue acknowledges in the same call: a lease of the
                -- caller's that ran out and that nobody took is still the caller's, to be
                -- completed, not handed out again or dead-lettered by its own take (a review: a
                -- finished message on its last attempt went to the dead letters). Only in the
                -- expired-lease probe and only with the caller's token: a message that another
                -- consumer leased since (a stale acknowledgement) is handed out as ever, and
                -- the ready probe, which never finds a lease, does not compare every row it
                -- visits with up to 10,000 ids (a review: 10,000 acknowledgements and 10,000
                -- takes ran 823 ms, against about 510 ms as two calls)
                v_araw := current_setting('pgqueue.ack_call', true);  -- (ids, a space, tokens)
                v_acks := coalesce(nullif(split_part(v_araw, ' ', 1), '')::bigint[], '{}');
                IF cardinality(v_acks) > 0 THEN
                    -- (built here, where a statement with the expired-lease probe runs, not by
                    -- every acknowledging call: 4.6 us a call, a review)
                    v_ack_keys := ARRAY(SELECT a.i::numeric * 4294967296 + a.t
                                          FROM unnest(v_acks, coalesce(nullif(split_part(v_araw, ' ', 2), '')::integer[], '{}')) AS a(i, t));
                END IF;
            END IF;
            IF p_turns AND v_need = 1 THEN
                SELECT c.id, c.dead, c.src, c.k INTO v_one, v_one_dead, v_src, v_one_k
                  FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                              coalesce(m.attempts >= p_max_attempts, false) AS dead
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                          AND (m.locked_until, m.id) >= (v_b[3], v_b[4])
                                          AND m.locked_until <= p_now
                                          AND m.id <> ALL (v_not)
                                          AND (m.id <> ALL (v_acks) OR m.id::numeric * 4294967296 + m.attempts <> ALL (v_ack_keys))
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.locked_until, m.id
                                        LIMIT 1
                                          FOR UPDATE SKIP LOCKED) e
                        UNION ALL
                        SELECT * FROM (SELECT 1, m.turn_at, m.id, false
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL
                                          AND m.locked_until IS NULL
                                          AND (m.turn_at, m.id) >= (v_b[1], v_b[2])
                                          AND m.turn_at <= v_due
                                          AND m.id <> ALL (v_not)
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.turn_at, m.id
                                        LIMIT 1
                                          FOR UPDATE SKIP LOCKED) t
                        LIMIT 1) c;
                v_found := CASE WHEN v_one IS NULL OR v_one_dead THEN '{}' ELSE ARRAY[v_one] END;
                v_dead_ids := CASE WHEN v_one_dead THEN ARRAY[v_one] END;
                v_looked := v_src IS DISTINCT FROM 0;  -- no expired lease found
                IF v_src = 1 THEN
                    v_s[14] := v_one_k; v_s[15] := v_one;
                END IF;
            ELSIF p_turns THEN
                SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
                       array_agg(c.id) FILTER (WHERE c.dead)
                  INTO v_found, v_dead_ids
                  FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                              coalesce(m.attempts >= p_max_attempts, false) AS dead
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                          AND (m.locked_until, m.id) >= (v_b[3], v_b[4])
                                          AND m.locked_until <= p_now
                                          AND m.id <> ALL (v_not)
                                          AND (m.id <> ALL (v_acks) OR m.id::numeric * 4294967296 + m.attempts <> ALL (v_ack_keys))
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.locked_until, m.id
                                        LIMIT v_need
                                          FOR UPDATE SKIP LOCKED) e
                        UNION ALL
                        SELECT * FROM (SELECT 1, m.turn_at, m.id, false
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL
                                          AND m.locked_until IS NULL
                                          AND (m.turn_at, m.id) >= (v_b[1], v_b[2])
                                          AND m.turn_at <= v_due
                                          AND m.id <> ALL (v_not)
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.turn_at, m.id
                                        LIMIT v_need
                                          FOR UPDATE SKIP LOCKED) t
                        LIMIT v_need) c;
            ELSIF v_need = 1 THEN
                SELECT c.id, c.dead, c.src, c.k INTO v_one, v_one_dead, v_src, v_one_k
                  FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                              coalesce(m.attempts >= p_max_attempts, false) AS dead
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                          AND (m.locked_until, m.id) >= (v_b[3], v_b[4])
                                          AND m.locked_until <= p_now
                                          AND m.id <> ALL (v_not)
                                          AND (m.id <> ALL (v_acks) OR m.id::numeric * 4294967296 + m.attempts <> ALL (v_ack_keys))
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.locked_until, m.id
                                        LIMIT 1
                                          FOR UPDATE SKIP LOCKED) e
                        UNION ALL
                        SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                          AND (m.dequeue_at, m.id) >= (v_b[1], v_b[2])
                                          AND m.dequeue_at <= v_due
                                          AND m.id <> ALL (v_not)
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.dequeue_at, m.id
                                        LIMIT 1
                                          FOR UPDATE SKIP LOCKED) r
                        LIMIT 1) c;
                v_found := CASE WHEN v_one IS NULL OR v_one_dead THEN '{}' ELSE ARRAY[v_one] END;
                v_dead_ids := CASE WHEN v_one_dead THEN ARRAY[v_one] END;
                v_looked := v_src IS DISTINCT FROM 0;  -- no expired lease found
                IF v_src = 1 THEN
                    v_s[14] := v_one_k; v_s[15] := v_one;
                END IF;
            ELSE
                SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
                       array_agg(c.id) FILTER (WHERE c.dead)
                  INTO v_found, v_dead_ids
                  FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                              coalesce(m.attempts >= p_max_attempts, false) AS dead
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                          AND (m.locked_until, m.id) >= (v_b[3], v_b[4])
                                          AND m.locked_until <= p_now
                                          AND m.id <> ALL (v_not)
                                          AND (m.id <> ALL (v_acks) OR m.id::numeric * 4294967296 + m.attempts <> ALL (v_ack_keys))
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.locked_until, m.id
                                        LIMIT v_need
                                          FOR UPDATE SKIP LOCKED) e
                        UNION ALL
                        SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                          AND (m.dequeue_at, m.id) >= (v_b[1], v_b[2])
                                          AND m.dequeue_at <= v_due
                                          AND m.id <> ALL (v_not)
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.dequeue_at, m.id
                                        LIMIT v_need
                                          FOR UPDATE SKIP LOCKED) r
                        LIMIT v_need) c;
            END IF;
        END IF;
        v_ids := v_ids || v_found;  -- NULL || an array is the array
        EXIT WHEN v_dead_ids IS NULL;
        v_not := v_not || v_found;
        FOREACH v_dead IN ARRAY v_dead_ids LOOP
            -- the reason, and the error of the message's last failure after it (a handler
            -- that failed with an error, then hung or crashed: the error is what tells why)
            PERFORM pgqueue._dead_letter(v_dead, (SELECT 'lease expired' || coalesce('; last error: ' || m.last_error, '')
                                                    FROM pgqueue.message m WHERE m.id = v_dead), p_now);
        END LOOP;
        IF p_turns THEN
            -- a dead letter hands its group's turn on (pgqueue._message_left) at the clock,
            -- above this call's bound: the repeated probe takes it too, as it takes a ready
            -- message of another group (a row that is not yet visible stays unseen either way)
            v_due := pgqueue._turn_key(p_now, true);
        END IF;
        v_need := p_limit - cardinality(v_ids);
        EXIT WHEN v_need = 0;
    END LOOP;
    -- X: an xid the take assigned (locking rows), so after the candidate probes, or, when the
    -- probe found a ready row and new candidates and the take took nothing, one assigned here
    -- (on about one call in 20 ms of a session and queue at most, as the candidates then wait to
    -- ripen; more often when the caller rolls back, which restores the state; see the header).
    -- Without one (an empty poll of a queue with nothing ready, or a transaction that had its
    -- xid before this call) no new candidate is kept and a stripe move is seen again by the
    -- next call.
    v_x := CASE WHEN v_mine IS NOT NULL THEN NULL
                WHEN v_real AND v_new THEN pg_current_xact_id()::text::bigint
                ELSE pg_current_xact_id_if_assigned()::text::bigint END;
    IF v_x IS NOT NULL THEN
        IF v_moved THEN
            v_s[8] := v_e;
            v_s[9] := v_x;
        END IF;
        IF v_new THEN
            v_s[4] := greatest(v_k_at, v_s[2]);
            v_s[5] := CASE WHEN (v_k_at, v_k_id) > (v_s[2], v_s[3]) THEN v_k_id ELSE v_s[3] END;
            v_s[12] := greatest(v_d_at, v_s[10]);
            v_s[13] := CASE WHEN (v_d_at, v_d_id) > (v_s[10], v_s[11]) THEN v_d_id ELSE v_s[11] END;
            v_s[6] := pgqueue.now_ms();
            v_s[7] := v_x;
        END IF;
    END IF;
    IF v_looked AND v_last IS DISTINCT FROM p_now THEN
        -- (transactional, as the hints: after a rollback the session looks again)
        v_lraw := set_config('pgqueue.lease_check_' || p_queue_id, p_now::text, false);
    END IF;
    -- written only when it changed (most calls change nothing)
    IF v_s::text IS DISTINCT FROM split_part(v_raw, ' ', 1) THEN
        v_raw := v_s::text;
        v_raw := set_config(v_name, v_raw || ' ' || hashtext(v_raw), false);
    END IF;
    RETURN v_ids;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_take(integer, integer, bigint, integer, bigint, boolean, bigint[]) IS
    'pgqueue internal: lock up to p_limit deliverable messages (expired leases first, then by dequeue_at, id, or with p_turns by turn_at, id), dead-lettering poison leases; ids in delivery order';

-- The argument checks of an acknowledgement of many messages: 22004 for a NULL array or element,
-- 22023 for arrays of two dimensions or of different lengths, or more than 10000 ids.
-- message_complete_batch runs them first; message_complete_and_dequeue runs them before its take,
-- so that a refused call hands nothing out and counts no delivery.
CREATE FUNCTION pgqueue._ack_arrays_check(p_ids bigint[], p_attempts integer[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_ids IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_ids IS NULL, 'message ids'::text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts tokens'::text);
    END IF;
    IF array_ndims(p_ids) > 1 OR array_ndims(p_attempts) > 1 THEN
        RAISE EXCEPTION 'message ids and attempts tokens must be one-dimensional arrays'
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_ids) <> cardinality(p_attempts) THEN
        RAISE EXCEPTION 'p_ids has % element(s) but p_attempts has %', cardinality(p_ids), cardinality(p_attempts)
            USING ERRCODE = '22023',
                  HINT = 'Pass one attempts token per message id, in the same order.';
    END IF;
    IF cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'at most 10000 messages per call, got %', cardinality(p_ids)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_ids, NULL) IS NOT NULL OR array_position(p_attempts, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message ids and attempts tokens must not contain NULL'
            USING ERRCODE = '22004';
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue._ack_arrays_check(bigint[], integer[]) IS
    'pgqueue internal: raise 22004 / 22023 for the id and token arrays of an acknowledgement of many messages';

-- Complete (delete) many leased messages in one call; returns the ids whose token was stale.
--
-- p_ids[i] is completed if p_attempts[i] is its current attempts token, exactly as
-- message_complete(p_ids[i], p_attempts[i]) would: a stale token (the lease ran out and the
-- message was handed out again, or it is gone) changes nothing for that message and its id comes
-- back in the result, in input order. An id listed twice is completed at most once, and comes
-- back (at each of its places) only if no place completed it: list each delivery once, or the
-- newest only (a message's token grows with each delivery). The queues'
-- lock stripes are taken first, in queue order, then the rows in id order (one id: its queue's
-- stripe, then its row, in message_complete's DELETE; docs/locking.md:
-- message_heartbeat_batch takes them so; in input order, a worker's acknowledgement of [b, a]
-- and its heartbeats' beat of [a, b] deadlocked). Errors: 22004
-- (NULL array or element), 22023 (arrays of different lengths or of two dimensions, more than
-- 10000 ids).
CREATE FUNCTION pgqueue.message_complete_batch(p_ids bigint[], p_attempts integer[])
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
-- Custom plans would be made again at every call (the plan cache keeps choosing them for a
-- join with unnest(p_ids, p_attempts): a custom plan knows the arrays' length): the generic
-- plans are the same primary-key probes. Measured: 260 -> 40 us a call of one id.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_done    bigint[];
    v_queues  integer[];
    v_queue   integer;
    v_counted boolean;
    v_left    bigint[];   -- the messages that left with a key or a turn, their queues, groups, ...
    v_lq      integer[];
    v_lg      text[];
    v_lt      bigint[];
    v_lk      text[];
    v_dq      integer;   -- the queue of the turns left by message_complete_and_dequeue's dequeue ...
    v_dg      text[];    -- ... their groups
    v_dc      integer;   -- ... and its group_concurrency
    v_id      bigint;    -- one message deleted (up to 8 ids): its id, queue, group, turn, key
    v_q       integer;
    v_g       text;
    v_t       bigint;
    v_k       text;
    v_ids     bigint[];  -- p_ids and p_attempts, or both sorted by id when p_ids is not (up to 8 ids)
    v_att     integer[];
    v_oi      integer;   -- their lower bounds less 1: the i-th id with the i-th token, whatever
    v_oa      integer;   -- the bounds (as unnest pairs them)
BEGIN
    PERFORM pgqueue._ack_arrays_check(p_ids, p_attempts);
    -- One id, and no turns left by message_complete_and_dequeue's dequeue (below): exactly
    -- message_complete, whose one DELETE takes the queue's stripe before the row, as the
    -- statements below do (a stale id takes no stripe), and hands a turn on or keeps a key as
    -- _message_left does: 36.8 -> 21.1 us of server time for the acknowledgement of
    -- message_complete_and_dequeue with one id (docs/performance.md, "Acknowledge-and-fetch of
    -- one message").
    IF cardinality(p_ids) = 1 AND nullif(current_setting('pgqueue.deferred_queue', true), '') IS NULL THEN
        IF pgqueue.message_complete(p_ids[array_lower(p_ids, 1)], p_attempts[array_lower(p_attempts, 1)]) THEN
            RETURN '{}';
        END IF;
        RETURN ARRAY[p_ids[array_lower(p_ids, 1)]];
    END IF;
    PERFORM pgqueue._queue_lock(q.queue_id)
       FROM (SELECT DISTINCT m.queue_id FROM pgqueue.message m WHERE m.id = ANY (p_ids)) q
      ORDER BY q.queue_id;
    -- Whatever the statistics, each message is found by a probe of message_pkey by its id. The
    -- join of one statement with unnest(p_ids, p_attempts), as this was until session 51, could
    -- be planned the other way round while pgqueue.message was recorded empty (a queue that
    -- drained, then a VACUUM): the table outside, the ids inside, a walk of the whole of
    -- message_pkey at every call from then on in the session (its generic plan): 8.7 ms a call
    -- of one id at 60,000 messages against 0.27 ms (docs/performance.md, "emptied table"). So:
    -- up to 8 ids (a worker's acknowledgements), one DELETE by id each, as message_complete
    -- does; more, the rows are locked through a probe by id each (FOR UPDATE in a LATERAL
    -- subquery, which the planner cannot turn round), then deleted by id (a lock record more in
    -- the WAL a message). Inside the server (bench/experiments/emptied_table/batch_paths.py),
    -- against the join: 1 and 4 ids within the machine's noise, 8 ids 14-19% above it (202-210
    -- against 177 us), 100 ids 0.77-1.06 ms against 0.75, where one DELETE an id took 1.61 ms.
    -- Both keep message_complete's answer for a message
    -- changed meanwhile: a DELETE or a lock that waits reads the row again, so a heartbeat of
    -- the holder (same token) leaves the token good and a new lease (a new token) makes it
    -- stale (specs/complete_batch_expiry.spec).
    IF cardinality(p_ids) <= 8 THEN
        v_done := '{}';
        v_queues := '{}';
        v_ids := p_ids;
        v_att := p_attempts;
        v_oi := array_lower(p_ids, 1) - 1;
        v_oa := array_lower(p_attempts, 1) - 1;
        -- the rows in id order: sorted here only if they are not (the Python client sends them so)
        FOR i IN 2 .. cardinality(p_ids) LOOP
            CONTINUE WHEN p_ids[v_oi + i] >= p_ids[v_oi + i - 1];
            SELECT array_agg(u.id ORDER BY u.id, u.n), array_agg(u.a ORDER BY u.id, u.n) INTO v_ids, v_att
              FROM unnest(p_ids, p_attempts) WITH ORDINALITY AS u(id, a, n);
            v_oi := 0;
            v_oa := 0;
            EXIT;
        END LOOP;
        FOR i IN 1 .. cardinality(p_ids) LOOP
            DELETE FROM pgqueue.message m
             WHERE m.id = v_ids[v_oi + i] AND m.attempts = v_att[v_oa + i]
               AND pgqueue._leased(m.locked_until) AND m.claim_id IS NULL
            RETURNING m.id, m.queue_id, m.group_key, m.turn_at, m.idem_key INTO v_id, v_q, v_g, v_t, v_k;
            CONTINUE WHEN NOT FOUND;
            v_done := v_done || v_id;
            v_queues := v_queues || v_q;
            IF v_k IS NOT NULL OR (v_g IS NOT NULL AND v_t IS NOT NULL) THEN
                v_left := coalesce(v_left, '{}') || v_id;
                v_lq := coalesce(v_lq, '{}') || v_q;
                v_lg := coalesce(v_lg, '{}') || v_g;
                v_lt := coalesce(v_lt, '{}') || v_t;
                v_lk := coalesce(v_lk, '{}') || v_k;
            END IF;
        END LOOP;
    ELSE
        WITH d AS (
            DELETE FROM pgqueue.message m
             WHERE m.id = ANY (ARRAY(SELECT x.id FROM (SELECT v.id, v.attempts FROM unnest(p_ids, p_attempts) AS v(id, attempts)
                                                        ORDER BY v.id) u,  -- the rows in id order (above)
                                     LATERAL (SELECT l.id FROM pgqueue.message l
                                               WHERE l.id = u.id AND l.attempts = u.attempts
                                                 AND pgqueue._leased(l.locked_until) AND l.claim_id IS NULL
                                                 FOR UPDATE) x))
            RETURNING m.id, m.queue_id, m.group_key, m.turn_at, m.idem_key,
                      m.idem_key IS NOT NULL OR (m.group_key IS NOT NULL AND m.turn_at IS NOT NULL) AS left_)
        SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.queue_id), '{}'),
               array_agg(d.id) FILTER (WHERE d.left_),
               array_agg(d.queue_id) FILTER (WHERE d.left_),
               array_agg(d.group_key) FILTER (WHERE d.left_),
               array_agg(d.turn_at) FILTER (WHERE d.left_),
               array_agg(d.idem_key) FILTER (WHERE d.left_)
          INTO v_done, v_queues, v_left, v_lq, v_lg, v_lt, v_lk
          FROM d;
    END IF;
    -- the turns of the leases message_complete_and_dequeue's dequeue handed out, which it left
    -- to be handed on here with the acknowledgements' (pgqueue.ack_call; see there): in the
    -- same run, in stripe order (an id of NULL marks them)
    v_dq := nullif(current_setting('pgqueue.deferred_queue', true), '')::integer;
    IF v_dq IS NOT NULL THEN
        v_dg := ARRAY(SELECT DISTINCT g.g FROM unnest(current_setting('pgqueue.deferred_turns')::text[]) AS g(g));
        PERFORM set_config('pgqueue.deferred_queue', '', true), set_config('pgqueue.deferred_turns', '', true);
        SELECT q.group_concurrency INTO v_dc FROM pgqueue.queue q WHERE q.id = v_dq;
        v_left := coalesce(v_left, '{}') || array_fill(NULL::bigint, ARRAY[cardinality(v_dg)]);
        v_lq := coalesce(v_lq, '{}') || array_fill(v_dq, ARRAY[cardinality(v_dg)]);
        v_lg := coalesce(v_lg, '{}') || v_dg;
        v_lt := coalesce(v_lt, '{}') || array_fill(NULL::bigint, ARRAY[cardinality(v_dg)]);
        v_lk := coalesce(v_lk, '{}') || array_fill(NULL::text, ARRAY[cardinality(v_dg)]);
    END IF;
    IF cardinality(v_left) > 1 THEN
        -- the hand-offs in the order of their groups' stripes, as a batch of producers takes
        -- them (pgqueue._message_group_locks): in opposite orders the two deadlocked; then by
        -- queue, for acknowledgements of several queues whose groups share a stripe number
        SELECT array_agg(u.i ORDER BY hashtext(u.g) & 255, u.q, u.i), array_agg(u.q ORDER BY hashtext(u.g) & 255, u.q, u.i),
               array_agg(u.g ORDER BY hashtext(u.g) & 255, u.q, u.i), array_agg(u.t ORDER BY hashtext(u.g) & 255, u.q, u.i),
               array_agg(u.k ORDER BY hashtext(u.g) & 255, u.q, u.i)
          INTO v_left, v_lq, v_lg, v_lt, v_lk
          FROM unnest(v_left, v_lq, v_lg, v_lt, v_lk) AS u(i, q, g, t, k);
    END IF;
    -- keys to keep for their queue's window, turns to pass on (pgqueue._message_left)
    FOR i IN 1 .. coalesce(cardinality(v_left), 0) LOOP
        IF v_left[i] IS NULL THEN
            v_counted := pgqueue._message_group_next(v_dq, v_lg[i], v_dc);
        ELSE
            v_counted := pgqueue._message_left(v_lq[i], v_left[i], v_lg[i], v_lt[i], v_lk[i]);
        END IF;
    END LOOP;
    -- completed (queue_counters): one nextval a message, or by queue for more than 32
    IF cardinality(v_done) > 32 THEN
        PERFORM pgqueue._counted_n(u.q, 2, count(*)) FROM unnest(v_queues) AS u(q) GROUP BY u.q;
    ELSE
        FOREACH v_queue IN ARRAY v_queues LOOP
            v_counted := pgqueue._counted(v_queue, 2);
        END LOOP;
    END IF;
    RETURN ARRAY(SELECT u.id FROM unnest(p_ids) WITH ORDINALITY AS u(id, n)
                  WHERE u.id <> ALL (v_done) ORDER BY u.n);
END;
$$;

COMMENT ON FUNCTION pgqueue.message_complete_batch(bigint[], integer[]) IS
    'Complete (delete) many leased messages, each with its attempts token; returns the ids whose token was stale (those changed nothing)';

-- Acknowledge and fetch in one call and one transaction: hand out up to p_limit messages of
-- p_queue exactly as message_dequeue(p_queue, p_limit, p_lock_ms) does, and complete the caller's
-- finished messages p_ids, each with its attempts token p_attempts, exactly as
-- message_complete_batch(p_ids, p_attempts) does. A worker in lease mode so pays one
-- transaction per message instead of two. (On a queue whose group_concurrency is not 1 the
-- turns its leases hand on are handed on with the acknowledgements', after them. On any queue
-- with groups, while it has handed out fewer than p_limit, further takes after the
-- acknowledgements take the messages those turns went to, as message_dequeue's own further
-- rounds would, and the messages the acknowledgements handed their groups' turns to: see
-- below; in lease mode only.)
--
-- Rows: the messages handed out (stale = false), then one row per acknowledgement whose token
-- was stale (stale = true: only id and attempts, the token given, are set), in input order. A
-- stale acknowledgement changes nothing for its message. The take runs first, so that the
-- session hints of pgqueue._message_take advance (they need the take to assign this
-- transaction's xid), and leaves out the caller's leases of p_ids that ran out (the
-- transaction-local setting pgqueue.ack_call: the text of p_ids, a space, the text of
-- p_attempts): such a lease that nobody took is still the caller's and is completed, as by
-- message_complete_batch, not handed out again or dead-lettered by the caller's own call (a
-- review: on its last attempt a finished message went to the dead letters, its acknowledgement
-- stale); a message that another consumer leased since is handed out as by any take. Errors are
-- those of the two functions; the arrays are checked before the take, so a refused call hands
-- nothing out and counts no delivery (sequences are not rolled back); an error leaves nothing
-- done (one statement).
CREATE FUNCTION pgqueue.message_complete_and_dequeue(
    p_ids      bigint[],
    p_attempts integer[],
    p_queue    text    DEFAULT 'default',
    p_limit    integer DEFAULT 1,
    p_lock_ms  bigint  DEFAULT NULL)
RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,
               content_type text, created_at bigint, locked_until bigint, stale boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
#variable_conflict use_column
DECLARE
    v_stale    bigint[];
    v_set      text;
    v_n        integer;
    v_more     integer;
    v_queue_id integer;
    v_groups   integer;
    v_held     text[];   -- the groups whose locks the acknowledgements' run takes
    v_acked    bigint[]; -- the acknowledgements of a grouped message of p_queue ...
    v_acked_g  text[];   -- ... and their groups
    v_start    bigint := pgqueue.now_ms();  -- before any lease this call hands out
    v_lock     bigint;
    v_turns    text[];
    v_group    text;
    v_turned   boolean;
BEGIN
    PERFORM pgqueue._ack_arrays_check(p_ids, p_attempts);
    -- On a queue whose group_concurrency is not 1 a lease hands its group's next message a
    -- turn, which takes the group's lock; the acknowledgements hand turns on too. Taken in two
    -- runs (the dequeue's, then the acknowledgements'), each in stripe order, two such calls
    -- deadlocked (40P01). So the dequeue leaves its leases' turns (while pgqueue.ack_call, a
    -- transaction-local setting, is set) to message_complete_batch, which hands them on with the
    -- acknowledgements', in one run in stripe order, after its DELETE. The take still runs
    -- first (its session hints need the take to assign this transaction's xid).
    -- One setting, pgqueue.ack_call, says both (not empty, it defers the turns; its text is
    -- what the take leaves out), written once and cleared at the end, where three settings were
    -- written six times (with the one-id path below, the call less its dequeue 48 -> 41 us,
    -- docs/performance.md). Before further takes
    -- (below) it becomes ' ': still deferring, and nothing to leave out, so that each further
    -- take does not read the acknowledgements again (a review: 1,200 further takes after 1,000
    -- acknowledgements ran 1.6 s instead of 0.5 s; what they would leave out is gone by then,
    -- deleted by this transaction, or is another delivery's, whose token differs).
    v_set := set_config('pgqueue.ack_call', p_ids::text || ' ' || p_attempts::text, true);
    RETURN QUERY
    SELECT d.id, d.content, d.attempts, d.dequeue_at, d.state, d.content_type, d.created_at,
           d.locked_until, false
      FROM pgqueue.message_dequeue(p_queue, p_limit, p_lock_ms) AS d;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n < p_limit THEN
        -- Room left: on a queue whose group_concurrency is not 1, the turns handed on below
        -- (the leases' and the acknowledgements') may go to messages a further take hands out.
        -- The groups whose locks that run takes are these (read before the DELETE).
        SELECT q.id, q.group_concurrency, coalesce(p_lock_ms, q.lock_ms) INTO v_queue_id, v_groups, v_lock
          FROM pgqueue.queue q WHERE q.name = p_queue;
        -- (not in delete mode: a further take would hand out again a message the first gave
        -- back, which this transaction holds, and lock its group out of stripe order. With a
        -- limit of 1 too: an acknowledgement hands its group's turn to the next message, which
        -- only a further take hands out in this call; without it a worker on a queue with fewer
        -- busy groups than its slots got nothing back, and polled: 18 messages a second on one
        -- group against 1,100 with no limit, a review. Such a take's lease hands no turn on.)
        IF v_groups IS NOT NULL AND v_lock <> 0 THEN
            v_held := coalesce(nullif(current_setting('pgqueue.deferred_turns', true), '')::text[], '{}');
            IF v_groups <> 1 THEN  -- (with a limit of 1 a lease hands no turn on: no group to match)
                SELECT array_agg(m.id), array_agg(m.group_key) INTO v_acked, v_acked_g FROM pgqueue.message m
                 WHERE m.id = ANY (p_ids) AND m.queue_id = v_queue_id AND m.group_key IS NOT NULL;
            END IF;
        END IF;
    END IF;
    -- message_complete_batch returns the stale ids in input order, an id listed twice at each
    -- of its places or at none (it is completed at most once): the places of those ids are the
    -- stale acknowledgements, each with the token given at its place (whatever the arrays'
    -- lower bounds)
    -- (One id, and no turns deferred by the dequeue: message_complete itself, as
    -- message_complete_batch would call it, without that call's entry and second check of the
    -- arrays: 11.7 us a call, docs/performance.md.)
    IF cardinality(p_ids) = 1 AND nullif(current_setting('pgqueue.deferred_queue', true), '') IS NULL THEN
        v_stale := CASE WHEN pgqueue.message_complete(p_ids[array_lower(p_ids, 1)], p_attempts[array_lower(p_attempts, 1)])
                        THEN '{}' ELSE ARRAY[p_ids[array_lower(p_ids, 1)]] END;
    ELSE
        v_stale := pgqueue.message_complete_batch(p_ids, p_attempts);
    END IF;
    -- the acknowledged messages' groups: only those of the ones completed (a stale one's group
    -- lock was not taken)
    IF v_held IS NOT NULL THEN
        v_held := v_held || ARRAY(SELECT a.g FROM unnest(v_acked, v_acked_g) AS a(i, g) WHERE a.i <> ALL (v_stale));
    END IF;
    IF v_held IS NOT NULL AND v_n < p_limit THEN
        v_set := set_config('pgqueue.ack_call', ' ', true);
    END IF;
    -- Further takes, one round each (pgqueue.ack_call is still set): their leases' turns are
    -- handed on here for the groups whose locks are held already, so that this call waits for
    -- no lock after that run (no second run to deadlock in); another group's lease hands its
    -- turn on when it leaves instead (it has one in flight: the group is not left without a turn).
    -- Only while no lease this call handed out can have run out by the time the take reads its
    -- clock (100 ms to spare): a further take, a call of its own, would hand it out again or
    -- dead-letter it (message_dequeue's own rounds skip their ids).
    WHILE v_held IS NOT NULL AND v_n < p_limit AND (v_lock = 0 OR pgqueue.now_ms() + 100 < v_start + v_lock) LOOP
        RETURN QUERY
        SELECT d.id, d.content, d.attempts, d.dequeue_at, d.state, d.content_type, d.created_at,
               d.locked_until, false
          FROM pgqueue.message_dequeue(p_queue, p_limit - v_n, p_lock_ms) AS d;
        GET DIAGNOSTICS v_more = ROW_COUNT;
        EXIT WHEN v_more = 0;
        v_n := v_n + v_more;
        v_turns := nullif(current_setting('pgqueue.deferred_turns', true), '')::text[];
        PERFORM set_config('pgqueue.deferred_queue', '', true), set_config('pgqueue.deferred_turns', '', true);
        FOR v_group IN SELECT g.g FROM unnest(v_turns) AS g(g) WHERE g.g = ANY (v_held) GROUP BY g.g
                        ORDER BY hashtext(g.g) & 255, g.g LOOP
            v_turned := pgqueue._message_group_next(v_queue_id, v_group, v_groups);
        END LOOP;
    END LOOP;
    v_set := set_config('pgqueue.ack_call', '', true);
    IF cardinality(v_stale) > 0 THEN
        RETURN QUERY
        SELECT s.id, NULL::bytea, s.attempts, NULL::bigint, NULL::bytea,
               NULL::text, NULL::bigint, NULL::bigint, true
          FROM unnest(p_ids, p_attempts) WITH ORDINALITY AS s(id, attempts, n)
         WHERE s.id = ANY (v_stale)
         ORDER BY s.n;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_complete_and_dequeue(bigint[], integer[], text, integer, bigint) IS
    'Complete the finished messages p_ids (each with its attempts token) and hand out up to p_limit new ones in one call; rows with stale = true report acknowledgements whose token was stale';

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

-------------------------------------------------------------------------------
-- Re-created functions (their 0.4 bodies)
-------------------------------------------------------------------------------

-- Delete dead letters of a queue (all, the ids given, and/or those dead before p_before ms).
-- p_ids NULL: every id; a NULL element is refused (22004), as are ids of two dimensions (22023),
-- before anything is done.
CREATE OR REPLACE FUNCTION pgqueue.dead_letter_purge(
    p_queue  text,
    p_ids    bigint[] DEFAULT NULL,
    p_before bigint   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_count bigint;
BEGIN
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'p_ids must be a one-dimensional array' USING ERRCODE = '22023';
    END IF;
    IF array_position(p_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_ids must not contain NULL' USING ERRCODE = '22004',
            HINT = 'List dead letters by id; for all of them, pass NULL for the whole array (or leave it out).';
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    -- Dropped while the lock was waited for: PQ001, as dead_letter_requeue says (not 0 purged).
    IF NOT EXISTS (SELECT FROM pgqueue.queue q WHERE q.id = v_queue.id) THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    -- The letters locked first, in the order of their ids, as dead_letter_requeue locks them: a
    -- DELETE alone took them in the order it read them (as they died), and a requeue and a
    -- purge of one queue at once deadlocked (specs/dead_requeue_purge.spec).
    DELETE FROM pgqueue.dead_letter d
     WHERE d.id = ANY (ARRAY(SELECT x.id FROM pgqueue.dead_letter x
                              WHERE x.queue_id = v_queue.id
                                AND (p_ids IS NULL OR x.id = ANY (p_ids))
                                AND (p_before IS NULL OR x.dead_at < p_before)
                              ORDER BY x.id
                                FOR UPDATE));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.dead_letter_purge(text, bigint[], bigint) IS
    'Delete dead letters of a queue: all, the ids given, and/or those dead before p_before (epoch ms); returns how many';

-- Put dead letters back on their queue as new messages (fresh id, attempts 0); returns how many.
-- p_ids NULL: all of the queue's; a NULL element is refused (22004), as are ids of two
-- dimensions (22023), before anything is done.
CREATE OR REPLACE FUNCTION pgqueue.dead_letter_requeue(
    p_queue      text,
    p_ids        bigint[] DEFAULT NULL,
    p_dequeue_at bigint   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint := pgqueue.to_epoch(now());
    v_ids   bigint[];
    v_clock bigint;
    v_turn  bigint;
BEGIN
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'p_ids must be a one-dimensional array' USING ERRCODE = '22023';
    END IF;
    IF array_position(p_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_ids must not contain NULL' USING ERRCODE = '22004',
            HINT = 'List dead letters by id; for all of them, pass NULL for the whole array (or leave it out).';
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    v_ids := ARRAY(SELECT d.id FROM pgqueue.dead_letter d
                    WHERE d.queue_id = v_queue.id AND (p_ids IS NULL OR d.id = ANY (p_ids))
                    ORDER BY d.id
                      FOR UPDATE);
    PERFORM pgqueue._queue_admit(p_queue, cardinality(v_ids));
    v_clock := pgqueue._write_clock();
    -- a queue with message groups: back without its group, in a group of its own (due now: one
    -- clock reading in microseconds for all, read after the xid, so that they go behind the turns
    -- handed on before and keep their order among themselves by id)
    IF v_queue.group_concurrency IS NOT NULL THEN
        v_turn := pgqueue._turn_key(coalesce(p_dequeue_at, v_clock), p_dequeue_at IS NULL);
    END IF;
    -- A fresh id keeps fencing sound: no token handed out before can match the new message.
    WITH d AS (
        DELETE FROM pgqueue.dead_letter d WHERE d.id = ANY (v_ids)
        RETURNING d.id, d.created_at, d.content, d.content_type, d.state, d.last_error
    )
    INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, state, last_error,
                                 turn_at, write_mark)
    SELECT v_queue.id, coalesce(p_dequeue_at, v_clock), d.created_at, d.content, d.content_type,
           d.state, d.last_error,
           v_turn,
           -- keyed at or above this writer's clock: no check by trigger message_placed_low
           CASE WHEN p_dequeue_at IS NULL OR p_dequeue_at >= v_clock - 5 THEN false END
      FROM d ORDER BY d.id;
    PERFORM pgqueue._counted_n(v_queue.id, 0, cardinality(v_ids));  -- enqueued (queue_counters)
    IF cardinality(v_ids) > 0 AND v_queue.notify THEN
        PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
    END IF;
    RETURN cardinality(v_ids);
END;
$$;

COMMENT ON FUNCTION pgqueue.dead_letter_requeue(text, bigint[], bigint) IS
    'Move dead letters of a queue (all, or the ids given) back to it as new messages with attempts 0; returns how many';

-- Admit p_count new messages into a queue and return its settings: take the queue's lock stripe,
-- read the settings again after it (a drop or alter may just have ended), in REPEATABLE READ or
-- SERIALIZABLE pin the queue row (pgqueue._queue_pin: 40001 if it changed since the snapshot),
-- and enforce max_size (pgqueue._queue_reserve). Every producer goes through here except the
-- READ COMMITTED fast path of message_create (docs/locking.md).
CREATE OR REPLACE FUNCTION pgqueue._queue_admit(p_queue text, p_count bigint)
RETURNS pgqueue.queue
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
BEGIN
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        PERFORM pgqueue._queue_pin(v_queue.id);
    END IF;
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.id = v_queue.id;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF v_queue.max_size IS NOT NULL AND p_count > 0 THEN
        PERFORM pgqueue._queue_reserve(v_queue.id, p_count);
    END IF;
    RETURN v_queue;
END;
$$;

-- Acknowledge a leased message: delete it. False if the token is stale.
CREATE OR REPLACE FUNCTION pgqueue.message_complete(p_id bigint, p_attempts integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
-- No SET search_path clause (its save and restore at every call cost about a tenth of the call):
-- as in message_create, every name below is schema-qualified or an SQL keyword and every
-- operator is written OPERATOR(pg_catalog.x) (docs/security.md, tests/test_security.py).
-- enable_seqscan = off, as on every function that finds messages by id or by queue and group:
-- planned while pgqueue.message was recorded empty (a queue that drained, then a VACUUM or an
-- ANALYZE), the DELETE below and the hand-off's probes were Seq Scans, and the session's
-- generic plan kept them until the next ANALYZE: every acknowledgement then read the whole
-- table (60,000 messages: 8.6-9.0 ms a lease + complete against 0.7-0.8; docs/performance.md).
-- The clause costs about 1 us a call (0.7 and 1.3 us in two runs of a call that finds nothing:
-- bench/experiments/emptied_table/set_cost.py).
SET enable_seqscan = off
AS $$
DECLARE
    v_queue_id integer;
    v_group    pg_catalog.text;
    v_turn_at  bigint;
    v_idem_key pg_catalog.text;
    v_floor    bigint[];  -- its group's wait floor, and the queue's lock stripe before the
    v_seen     bigint;    -- hand-off (pgqueue._wait_floor_next) and before this transaction's
    v_pre      bigint;    -- xid: the lease's (pgqueue._wait_floor_leased), if that xid is lower
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id IS NULL, 'message id'::pg_catalog.text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts token'::pg_catalog.text);
    END IF;
    -- The queue's shared lock before the row lock (see the locking discipline in 0.1): the
    -- condition is evaluated on the row before the DELETE locks it. The lock function returns
    -- void, which is never NULL; the test only makes the call part of the condition.
    DELETE FROM pgqueue.message m
     WHERE m.id OPERATOR(pg_catalog.=) p_id AND m.attempts OPERATOR(pg_catalog.=) p_attempts
       AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL
       AND pgqueue._queue_lock(m.queue_id)
    RETURNING m.queue_id, m.group_key, m.turn_at, m.idem_key, m.wait_floor,
              CASE WHEN m.group_key IS NOT NULL
                   THEN pg_catalog.pg_sequence_last_value(pgqueue._lock_stripe(m.queue_id)) END,
              -- (the DELETE has assigned this transaction's xid; no call of it for the others)
              CASE WHEN m.wait_floor[8] IS NOT NULL
                        AND m.wait_floor[8] OPERATOR(pg_catalog.<) pg_catalog.pg_current_xact_id()::pg_catalog.text::bigint
                   THEN m.wait_floor[7] END
         INTO v_queue_id, v_group, v_turn_at, v_idem_key, v_floor, v_seen, v_pre;
    -- a key to keep for the queue's window, a turn to pass on (pgqueue._message_left). The
    -- ordered hand-off of _message_left (see there) is done here, on a queue of group
    -- concurrency 1, rather than through it: a call of a PL/pgSQL function and its read of the
    -- queue's row cost a grouped lease + complete 4% (docs/performance.md); when it hands
    -- nothing on, _message_left does the rest (another concurrency, or a look under the lock).
    IF v_idem_key IS NULL AND v_group IS NOT NULL AND v_turn_at IS NOT NULL THEN
        UPDATE pgqueue.message m
           SET turn_at = pgqueue._turn_key(m.dequeue_at, true),
               wait_floor = pgqueue._wait_floor_next(v_floor, v_seen, v_pre,
                                                     pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::pg_catalog.text::bigint,
                                                     m.dequeue_at, m.id)
         WHERE m.id OPERATOR(pg_catalog.=) (
                   SELECT w.id FROM pgqueue.message w
                    WHERE w.queue_id OPERATOR(pg_catalog.=) v_queue_id
                      AND w.group_key OPERATOR(pg_catalog.=) v_group AND w.turn_at IS NULL
                      AND (w.dequeue_at, w.id) OPERATOR(pg_catalog.>=) (CASE WHEN v_floor[6] OPERATOR(pg_catalog.=) v_seen THEN v_floor[1] ELSE -9223372036854775808 END,
                                                                        CASE WHEN v_floor[6] OPERATOR(pg_catalog.=) v_seen THEN v_floor[2] ELSE -9223372036854775808 END)
                    ORDER BY w.dequeue_at, w.id
                    LIMIT 1)
           -- the room: while the group's wait floor holds (read before this statement, and
           -- again after its snapshot), no message of the group but the one leaving has
           -- the turn (pgqueue._wait_floor_next)
           AND CASE WHEN v_floor[6] OPERATOR(pg_catalog.=) v_seen THEN (SELECT pgqueue._wait_floor_ok(v_floor, v_queue_id))
                    ELSE (SELECT t.turn_at FROM pgqueue.message t
                           WHERE t.queue_id OPERATOR(pg_catalog.=) v_queue_id
                             AND t.group_key OPERATOR(pg_catalog.=) v_group AND t.turn_at IS NOT NULL
                             AND t.turn_at OPERATOR(pg_catalog.>=) (SELECT pgqueue._group_floor_get(v_queue_id, v_group, v_seen))
                           ORDER BY t.turn_at LIMIT 1) IS NULL END
           AND EXISTS (SELECT 1 FROM pgqueue.queue q
                        WHERE q.id OPERATOR(pg_catalog.=) v_queue_id
                          AND q.group_concurrency OPERATOR(pg_catalog.=) 1)
           -- without the lock under READ COMMITTED only (pgqueue._message_left)
           AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'repeatable read'
           AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'serializable';
        IF NOT FOUND THEN
            PERFORM pgqueue._message_left(v_queue_id, p_id, v_group, v_turn_at, NULL, v_floor, v_pre);
        END IF;
    ELSIF v_idem_key IS NOT NULL THEN
        PERFORM pgqueue._message_left(v_queue_id, p_id, v_group, v_turn_at, v_idem_key, v_floor, v_pre);
    END IF;
    RETURN v_queue_id IS NOT NULL AND pgqueue._counted(v_queue_id, 2);  -- completed (queue_counters)
END;
$$;

COMMENT ON FUNCTION pgqueue.message_complete(bigint, integer) IS
    'Complete (delete) a leased message; returns false and changes nothing if the attempts token is stale';

-- Enqueue one message; returns its id.
DROP FUNCTION pgqueue.message_create(bytea);
DROP FUNCTION pgqueue.message_create(text, bytea, bigint, text);
CREATE FUNCTION pgqueue.message_create(
    p_queue        text,
    p_content      bytea,
    p_dequeue_at   bigint DEFAULT NULL,
    p_content_type text   DEFAULT NULL,
    p_group        text   DEFAULT NULL,
    p_key          text   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
-- No SET search_path clause, like message_complete alone of the string-bodied functions (a SET
-- clause costs a GUC save and restore at every call: 10 us of 80, docs/performance.md). It is as
-- hijack-proof: every relation, function and type below is schema-qualified or an SQL keyword,
-- and every operator is written OPERATOR(pg_catalog.x), so the caller's search_path resolves
-- nothing here (tests/test_security.py runs it with hostile objects ahead of pg_catalog;
-- tests/pgtap checks that no other function goes without the clause). The functions it calls
-- pin their own.
AS $$
DECLARE
    v_queue_id integer;
    v_max_size bigint;
    v_grouped  boolean;
    v_notify   boolean;
    v_locked   boolean;
    v_queue    pgqueue.queue;
    v_now      bigint;
    v_id       bigint;
    v_counted  boolean;
    v_set      pg_catalog.text;
    -- the queue's lock stripe (id & 63) as this session last found it: a setting per queue name
    -- (the name's bytes in hex: setting names ignore case, so a key of the name itself, its '.'
    -- and '-' as '$', was one for 'Aq' and 'aq', and for 'a.q' and 'a-q', and each of a pair
    -- took the other's stripe too, waiting behind that queue's drop: a review), a character whose
    -- code is 64 + the stripe, '' (-64) when the queue takes the path below, unset NULL; anything
    -- else gives a number that is negative or that the INSERT finds is not the queue's stripe
    v_stripe   integer := pg_catalog.ascii(pg_catalog.current_setting(
                              'pgqueue.stripe_' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.textsend(p_queue), 'hex'),
                              true)) OPERATOR(pg_catalog.-) 64;
BEGIN
    -- The one-statement path (a queue without a cap or groups, a message without a group or key,
    -- READ COMMITTED or READ UNCOMMITTED, which runs as it): take the lock stripe this session
    -- found the queue on (v_stripe) before the INSERT, whose snapshot is then taken after the
    -- lock, and insert only if that snapshot has the queue by that name on that stripe, uncapped
    -- and without groups: a queue_drop (or a queue_alter that caps it) needs that stripe, so it
    -- either committed before the lock, and the INSERT does not see the queue as it was, or waits
    -- for this transaction. A queue dropped and created again on another stripe, or a setting
    -- changed by hand, fails the check: the path below, which looks the queue up first, and
    -- records its stripe. The enqueued counter counts the row inserted (RETURNING), the NOTIFY
    -- comes after the checks (the CASE). One statement where the path below runs two: 1.04x the
    -- creates a second at 15 clients, durable, 1.08x with synchronous_commit off
    -- (bench/experiments/create_name_stripe, docs/performance.md).
    IF p_content IS NOT NULL AND p_group IS NULL AND p_key IS NULL AND v_stripe OPERATOR(pg_catalog.>=) 0
       -- 'read committed' and 'read uncommitted' sort below 'repeatable read', 'serializable' above
       AND pg_catalog.current_setting('transaction_isolation')
           OPERATOR(pg_catalog.<) ('repeatable read' COLLATE pg_catalog."C")
       AND pgqueue._queue_lock(v_stripe) THEN
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
        SELECT q.id, coalesce(p_dequeue_at, pgqueue._write_clock()), pgqueue.to_epoch(pg_catalog.now()),
               p_content, p_content_type,
               -- keyed at or above this writer's clock: no check by trigger message_placed_low
               CASE WHEN p_dequeue_at IS NULL
                      OR p_dequeue_at OPERATOR(pg_catalog.>=) (pgqueue._write_clock() OPERATOR(pg_catalog.-) 5)
                    THEN false END
          FROM pgqueue.queue q
         WHERE q.name OPERATOR(pg_catalog.=) p_queue
           -- (the name again inside the CASE: whatever order the plan tests its conditions in,
           -- no other queue's row reaches the NOTIFY)
           AND CASE WHEN q.name OPERATOR(pg_catalog.=) p_queue
                         AND (q.id OPERATOR(pg_catalog.&) 63) OPERATOR(pg_catalog.=) v_stripe
                         AND q.max_size IS NULL AND q.group_concurrency IS NULL
                    THEN NOT q.notify
                         OR pg_catalog.pg_notify('pgqueue.' OPERATOR(pg_catalog.||) p_queue, p_queue) IS NOT NULL
                    ELSE false END
        RETURNING id, pgqueue._counted(queue_id, 0) INTO v_id, v_counted;  -- enqueued (queue_counters)
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END IF;
    -- The path of every other call: find the queue and take its lock stripe in one statement,
    -- then (uncapped, READ COMMITTED) insert only if the queue still exists uncapped in the
    -- INSERT's own snapshot, which is taken after the lock (a queue_drop that got in first leaves
    -- no orphan behind). Other isolation levels read an older snapshot: they go through
    -- _queue_admit.
    IF p_content IS NULL THEN
        RAISE EXCEPTION 'message content must not be NULL'
            USING ERRCODE = '22004',
                  HINT = 'Send an empty value (an empty bytea or text) for an empty message; JSON''s null is ''null''::jsonb, not SQL NULL.';
    END IF;
    v_now := pgqueue.to_epoch(pg_catalog.now());
    SELECT q.id, q.max_size, q.group_concurrency IS NOT NULL, q.notify, pgqueue._queue_lock(q.id)
      INTO v_queue_id, v_max_size, v_grouped, v_notify, v_locked
      FROM pgqueue.queue q WHERE q.name OPERATOR(pg_catalog.=) p_queue;
    -- what the one-statement path above takes from the next call of this session on, written
    -- when it differs from what the session has
    v_set := CASE WHEN v_max_size IS NULL AND NOT v_grouped
                  THEN pg_catalog.chr(64 OPERATOR(pg_catalog.+) (v_queue_id OPERATOR(pg_catalog.&) 63)) ELSE '' END;
    IF FOUND AND coalesce(v_stripe, -1) OPERATOR(pg_catalog.<>) (pg_catalog.ascii(v_set) OPERATOR(pg_catalog.-) 64) THEN
        v_set := pg_catalog.set_config(
            'pgqueue.stripe_' OPERATOR(pg_catalog.||) pg_catalog.encode(pg_catalog.textsend(p_queue), 'hex'), v_set, false);
    END IF;
    IF FOUND AND v_max_size IS NULL AND p_group IS NULL AND p_key IS NULL
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'repeatable read'
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'serializable' THEN
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
        SELECT v_queue_id, coalesce(p_dequeue_at, pgqueue._write_clock()), v_now, p_content, p_content_type,
               -- keyed at or above this writer's clock: no check by trigger message_placed_low
               CASE WHEN p_dequeue_at IS NULL
                      OR p_dequeue_at OPERATOR(pg_catalog.>=) (pgqueue._write_clock() OPERATOR(pg_catalog.-) 5)
                    THEN false END
         WHERE EXISTS (SELECT 1 FROM pgqueue.queue q
                        WHERE q.id OPERATOR(pg_catalog.=) v_queue_id AND q.max_size IS NULL
                          AND q.group_concurrency IS NULL)
        RETURNING id INTO v_id;
    END IF;
    IF v_id IS NULL THEN
        IF v_queue_id IS NOT NULL AND (p_group IS NOT NULL OR p_key IS NOT NULL) THEN
            -- A bad group or key, and a group on a queue without groups, are refused before the
            -- queue's room is asked for (pgqueue._queue_admit): a full capped queue would answer
            -- PQ003 to a call that can never succeed. (pgqueue._message_insert checks again under
            -- the queue's lock; an unknown queue is PQ001 from _queue_admit, whatever its group or
            -- key.) The rule is _check_message_key's, called only to raise (a call costs more
            -- than the test).
            IF p_group OPERATOR(pg_catalog.=) ''::pg_catalog.text
               OR pg_catalog.length(p_group) OPERATOR(pg_catalog.>) 200 THEN
                PERFORM pgqueue._check_message_key(p_group, 'message group'::pg_catalog.text);
            END IF;
            IF p_key OPERATOR(pg_catalog.=) ''::pg_catalog.text
               OR pg_catalog.length(p_key) OPERATOR(pg_catalog.>) 200 THEN
                PERFORM pgqueue._check_message_key(p_key, 'idempotency key'::pg_catalog.text);
            END IF;
            IF p_group IS NOT NULL AND NOT v_grouped THEN
                RAISE EXCEPTION 'queue "%" has no message groups', p_queue
                    USING ERRCODE = '22023',
                          HINT = 'Create the queue with pgqueue.queue_create(..., p_group_concurrency => n).';
            END IF;
        END IF;
        -- unknown queue (raises), capped queue, a drop/alter got in first, or not READ COMMITTED.
        -- With a key, no room yet: the queue as read after its lock stripe says whether it is
        -- capped (a max_size set since the first statement's snapshot counts too).
        v_queue := pgqueue._queue_admit(p_queue, CASE WHEN p_key IS NULL THEN 1 ELSE 0 END);
        v_notify := v_queue.notify;
        IF p_key IS NOT NULL AND v_queue.max_size IS NOT NULL THEN
            -- a capped queue: a key that is taken returns its message without asking for room
            -- (a full queue would refuse the retry of an enqueue that went through). In a
            -- function of its own, whose SET clauses keep the look-ups index probes whatever
            -- the statistics: this path alone pays their save and restore.
            IF p_group IS NULL OR v_queue.group_concurrency IS NOT NULL THEN
                v_id := pgqueue._message_key_taken(v_queue.id, p_key);
                IF v_id IS NULL AND v_queue.key_window_ms OPERATOR(pg_catalog.>) 0
                   AND (pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'repeatable read'
                        OR pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'serializable') THEN
                    -- a new key, refused as pgqueue._message_insert refuses it (PQ009), before the
                    -- wait and the room below: they answered 40001, then PQ003 for good once the
                    -- queue was full, to a call that can never succeed (a review)
                    PERFORM pgqueue._require_read_committed('an enqueue of a new key into a queue with key_window_ms');
                END IF;
                IF v_id IS NULL THEN
                    -- A producer of the same key between its admission and its commit holds
                    -- room that a full queue would refuse this call (PQ003) instead of
                    -- returning that producer's id: wait for the admissions in progress (a
                    -- count of 0, pgqueue._queue_reserve), then look again, in a new snapshot
                    -- (specs/idempotent_create.spec).
                    PERFORM pgqueue._queue_reserve(v_queue.id, 0);
                    v_id := pgqueue._message_key_taken(v_queue.id, p_key);
                END IF;
                IF v_id IS NOT NULL THEN
                    v_counted := pgqueue._counted(v_queue.id, 0);  -- enqueued, as for any key found taken
                    RETURN v_id;
                END IF;
            END IF;
            PERFORM pgqueue._queue_reserve(v_queue.id, 1);  -- the room (pgqueue._queue_admit)
        END IF;
        IF p_group IS NOT NULL OR p_key IS NOT NULL OR v_queue.group_concurrency IS NOT NULL THEN
            v_id := pgqueue._message_insert(v_queue, p_content, p_dequeue_at, p_content_type, p_group, p_key, v_now);
        ELSE
            INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
            VALUES (v_queue.id, coalesce(p_dequeue_at, pgqueue._write_clock()), v_now, p_content, p_content_type,
                    CASE WHEN p_dequeue_at IS NULL
                           OR p_dequeue_at OPERATOR(pg_catalog.>=) (pgqueue._write_clock() OPERATOR(pg_catalog.-) 5)
                         THEN false END)
            RETURNING id INTO v_id;
        END IF;
    END IF;
    v_counted := pgqueue._counted(coalesce(v_queue.id, v_queue_id), 0);  -- enqueued (queue_counters)
    IF v_notify THEN
        PERFORM pg_catalog.pg_notify('pgqueue.' OPERATOR(pg_catalog.||) p_queue, p_queue);
    END IF;
    RETURN v_id;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create(text, bytea, bigint, text, text, text) IS
    'Enqueue a message; dequeue_at NULL = now, future = scheduled, past or negative = ahead of normal messages (priority); p_group: its message group, p_key: idempotency key (the live message''s id if taken); returns the id';

-- Enqueue one message on the default queue.
CREATE FUNCTION pgqueue.message_create(p_content bytea)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN pgqueue.message_create('default', p_content, NULL::bigint, NULL::text);

COMMENT ON FUNCTION pgqueue.message_create(bytea) IS
    'Enqueue a message on the default queue; returns the id';

-- Enqueue many messages in one statement; returns their ids in input order.
DROP FUNCTION pgqueue.message_create_batch(text, bytea[], bigint, text, bigint[], text[]);
CREATE FUNCTION pgqueue.message_create_batch(
    p_queue         text,
    p_contents      bytea[],
    p_dequeue_at    bigint   DEFAULT NULL,
    p_content_type  text     DEFAULT NULL,
    p_dequeue_ats   bigint[] DEFAULT NULL,
    p_content_types text[]   DEFAULT NULL,
    p_groups        text[]   DEFAULT NULL,
    p_keys          text[]   DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
    v_now   bigint := pgqueue.to_epoch(now());
    v_clock bigint;
    v_n     integer := cardinality(p_contents);
    v_grouped boolean;
BEGIN
    IF p_contents IS NULL THEN
        RAISE EXCEPTION 'p_contents must not be NULL'
            USING ERRCODE = '22004',
                  HINT = 'Pass an empty array to enqueue nothing.';
    END IF;
    IF array_ndims(p_contents) > 1 OR array_ndims(p_dequeue_ats) > 1 OR array_ndims(p_content_types) > 1
       OR array_ndims(p_groups) > 1 OR array_ndims(p_keys) > 1 THEN
        RAISE EXCEPTION 'batch arrays must be one-dimensional'
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_contents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message content must not be NULL (element %)', array_position(p_contents, NULL)
            USING ERRCODE = '22004',
                  HINT = 'Send an empty bytea for an empty message.';
    END IF;
    IF cardinality(p_dequeue_ats) <> v_n OR cardinality(p_content_types) <> v_n THEN
        RAISE EXCEPTION 'p_dequeue_ats and p_content_types must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_groups) <> v_n OR cardinality(p_keys) <> v_n THEN
        RAISE EXCEPTION 'p_groups and p_keys must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    -- A bad group or key, and a group on a queue without groups, are refused before the queue's
    -- room is asked for: a full capped queue would answer PQ003 to a call that can never succeed
    -- (pgqueue._message_insert checks again under the queue's lock; an unknown queue is PQ001
    -- from pgqueue._queue_admit, whatever its groups and keys). The rule is
    -- _check_message_key's, called for the bad values only (not a call for every element).
    IF p_groups IS NOT NULL OR p_keys IS NOT NULL THEN
        SELECT q.group_concurrency IS NOT NULL, q.id, q.key_window_ms INTO v_grouped, v_queue.id, v_queue.key_window_ms
          FROM pgqueue.queue q WHERE q.name = p_queue;
        IF FOUND THEN
            PERFORM pgqueue._check_message_key(u.g, 'message group'::text)
               FROM unnest(p_groups) AS u(g) WHERE u.g = '' OR length(u.g) > 200;
            PERFORM pgqueue._check_message_key(u.k, 'idempotency key'::text)
               FROM unnest(p_keys) AS u(k) WHERE u.k = '' OR length(u.k) > 200;
            IF NOT v_grouped AND cardinality(array_remove(p_groups, NULL)) > 0 THEN
                RAISE EXCEPTION 'queue "%" has no message groups', p_queue
                    USING ERRCODE = '22023',
                          HINT = 'Create the queue with pgqueue.queue_create(..., p_group_concurrency => n).';
            END IF;
            -- so is a new key into a queue with key_window_ms under REPEATABLE READ or
            -- SERIALIZABLE (PQ009, as pgqueue._message_insert refuses it): a capped queue's
            -- admission answered 40001, then PQ003 for good once it was full (a review)
            IF v_queue.key_window_ms > 0
               AND current_setting('transaction_isolation') IN ('repeatable read', 'serializable')
               AND EXISTS (SELECT 1 FROM unnest(p_keys) AS u(k)
                            WHERE u.k IS NOT NULL AND pgqueue._message_key_taken(v_queue.id, u.k) IS NULL) THEN
                PERFORM pgqueue._require_read_committed('an enqueue of a new key into a queue with key_window_ms');
            END IF;
        END IF;
    END IF;
    v_queue := pgqueue._queue_admit(p_queue, v_n);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    IF p_groups IS NOT NULL OR p_keys IS NOT NULL OR v_queue.group_concurrency IS NOT NULL THEN
        -- the groups' locks first, in the stripes' order (no deadlock between two batches;
        -- READ COMMITTED)
        IF v_queue.group_concurrency IS NOT NULL AND p_groups IS NOT NULL THEN
            PERFORM pgqueue._message_group_locks(v_queue.id, p_groups);
        END IF;
        -- one at a time (pgqueue._message_insert), still in this one statement: all or nothing
        RETURN QUERY
        -- (a message due now goes in with dequeue_at NULL: its turn's key is the clock's
        -- microsecond when it is written, pgqueue._message_insert)
        SELECT pgqueue._message_insert(v_queue, u.content, coalesce(u.dequeue_at, p_dequeue_at),
                                       coalesce(u.content_type, p_content_type), u.grp, u.key, v_now)
          FROM unnest(p_contents, p_dequeue_ats, p_content_types, p_groups, p_keys)
               WITH ORDINALITY AS u(content, dequeue_at, content_type, grp, key, n)
         ORDER BY u.n;
    ELSE
        v_clock := pgqueue._write_clock();
        RETURN QUERY
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
        SELECT v_queue.id, coalesce(u.dequeue_at, p_dequeue_at, v_clock), v_now, u.content,
               coalesce(u.content_type, p_content_type),
               -- keyed at or above this writer's clock: no check by trigger message_placed_low
               CASE WHEN coalesce(u.dequeue_at, p_dequeue_at, v_clock) >= v_clock - 5 THEN false END
          FROM unnest(p_contents, p_dequeue_ats, p_content_types)
               WITH ORDINALITY AS u(content, dequeue_at, content_type, n)
         ORDER BY u.n
        RETURNING id;
    END IF;
    PERFORM pgqueue._counted_n(v_queue.id, 0, v_n);  -- enqueued (queue_counters)
    IF v_queue.notify THEN
        PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create_batch(text, bytea[], bigint, text, bigint[], text[], text[], text[]) IS
    'Enqueue many messages in one statement (all or none); per-message dequeue_ats/content_types override the scalars; groups and idempotency keys per message; returns ids in input order';

-- Give a leased message back for later, keeping its row, attempts and (new) checkpoint state.
CREATE OR REPLACE FUNCTION pgqueue.message_defer(
    p_id         bigint,
    p_attempts   integer,
    p_dequeue_at bigint,
    p_state      bytea DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id IS NULL, 'message id'::text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts token'::text);
    END IF;
    -- the queue's lock stripe before the row lock (docs/locking.md)
    PERFORM pgqueue._queue_lock(m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    UPDATE pgqueue.message m
       SET locked_until = NULL,
           dequeue_at   = coalesce(p_dequeue_at, pgqueue._write_clock()),
           state        = coalesce(p_state, m.state),
           -- a message with its group's turn keeps it: the group waits for it
           turn_at      = CASE WHEN m.turn_at IS NOT NULL
                               THEN pgqueue._turn_key(coalesce(p_dequeue_at, pgqueue._write_clock()), true) END,
           -- keyed with this writer's clock: no check by trigger message_placed_low
           write_mark   = CASE WHEN p_dequeue_at IS NULL THEN NOT coalesce(m.write_mark, false)
                               ELSE m.write_mark END
     WHERE m.id = p_id AND m.attempts = p_attempts AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_defer(bigint, integer, bigint, bytea) IS
    'Release a leased message until p_dequeue_at (NULL = now), keeping attempts; p_state (if not NULL) replaces the checkpoint state; false if the token is stale';

-- Hand out up to p_limit deliverable messages, with a lease (p_lock_ms > 0) or deleting them (0).
CREATE OR REPLACE FUNCTION pgqueue.message_dequeue(
    p_queue   text    DEFAULT 'default',
    p_limit   integer DEFAULT 1,
    p_lock_ms bigint  DEFAULT NULL)
RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,
               content_type text, created_at bigint, locked_until bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- Custom plans would be made again at every call of several messages (the plan cache keeps
-- choosing them for "id = ANY (v_ids)": a custom plan knows the array's length): the generic
-- plans are the same primary-key probes. Measured: 234 -> 70 us a message for a dequeue of 4
-- and its message_complete_batch, a transaction each (docs/performance.md).
SET plan_cache_mode = force_generic_plan
-- for pgqueue._message_take, which has no SET clauses of its own (see there); this function's
-- own statements are index probes by name or id with or without them
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    v_queue_id     integer;
    v_lock_ms      bigint;
    v_max_attempts integer;
    v_locked       boolean;
    v_now          bigint := pgqueue.now_ms();
    v_ids          bigint[];
    v_until        bigint;
    v_groups       integer;
    v_rate         integer;
    v_limit        integer := p_limit;
    v_n            integer := 0;
    v_turns        text[];
    v_group        text;
    v_turned       boolean;
    v_all          bigint[];  -- the ids of the earlier rounds (NULL || an array is the array)
    v_window       bigint;
    v_left         bigint[];  -- delete mode: the messages that leave with a key or a turn ...
    v_left_groups  text[];    -- ... their groups, turn keys and idempotency keys
    v_left_turns   bigint[];
    v_left_keys    text[];
    v_group_key    text;      -- the message of a one-message delete: its group, turn, key
    v_turn_at      bigint;
    v_idem_key     text;
    v_floor        bigint[];  -- ... its group's wait floor, and the queue's lock stripe before the
    v_seen         bigint;    -- hand-off and (if the take assigned the xid) before the take
    v_pre          bigint;    -- (pgqueue._wait_floor_next)
    v_lease_check  text;
    v_stripe       integer;   -- a further round takes no group lock on a stripe below v_top, the
    v_top          integer;   -- highest this call may have locked, unless it holds that one
    v_stripes      integer[]; -- (v_stripes): such a lock taken out of order could deadlock
    v_back         bigint[];  -- delete mode: what a further round gives back for that
BEGIN
    SELECT q.id, coalesce(p_lock_ms, q.lock_ms), q.max_attempts,
           pgqueue._queue_lock(q.id), q.group_concurrency, q.rate_limit, q.key_window_ms
      INTO v_queue_id, v_lock_ms, v_max_attempts, v_locked, v_groups, v_rate, v_window
      FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF v_groups IS NOT NULL THEN
        -- A queue with groups: its limit as it is now that the stripe is held (under READ
        -- COMMITTED this statement's snapshot comes after the lock): a queue_alter of the limit
        -- that this call waited behind committed after the statement above took its snapshot,
        -- and the old limit decided the hand-offs (a raised one handed no turn on at a lease,
        -- and a message of the group enqueued later took the room ahead of older ones: a
        -- review). REPEATABLE READ sees its snapshot here; its leases pin the queue's row
        -- below (40001 after such a change).
        v_groups := coalesce((SELECT q.group_concurrency FROM pgqueue.queue q WHERE q.id = v_queue_id), v_groups);
        -- The queue's lock stripe before the take assigns this transaction's xid (its row locks),
        -- for the wait floor's new candidate (pgqueue._wait_floor_next): one in flight per
        -- group, a transaction without an xid yet. Delete mode uses it in its hand-off below; a
        -- lease records it, with the lease's xid, on the message (wait_floor[7:8]) for the
        -- hand-off of the message's completion, which reads the stripe only after its DELETE
        -- has assigned its own xid (pgqueue.message_complete)
        v_pre := CASE WHEN v_groups = 1 AND pg_current_xact_id_if_assigned() IS NULL
                      THEN pg_sequence_last_value(pgqueue._lock_stripe(v_queue_id)) END;
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
        IF p_limit IS NULL THEN
            RAISE EXCEPTION 'p_limit must not be NULL' USING ERRCODE = '22004';
        END IF;
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    IF v_lock_ms < 0 OR v_lock_ms > 31536000000 THEN
        PERFORM pgqueue._check_lock_ms(v_lock_ms, true);  -- raises
    END IF;
    IF v_rate IS NOT NULL THEN  -- a rate limit: only the slots that are due (issue 14)
        v_limit := pgqueue._rate_room(v_queue_id, v_rate, p_limit);
        IF v_limit = 0 THEN
            RETURN;
        END IF;
    END IF;
    -- A queue with message groups takes by turn (p_turns): the messages whose group's turn it
    -- is, behind the groups already waiting (issue 14). Each message handed out gives its group
    -- the next turn if the group has room (pgqueue._message_group_next): in delete mode
    -- pgqueue._message_left does, as the message leaves the queue; in lease mode, with more
    -- than one in flight per group (or no limit), the loop below does, in the order of the
    -- groups' lock stripes, so that two calls lock the groups in one order (as batches of
    -- producers and acknowledgements do: pgqueue._message_group_locks); with one in flight per
    -- group the turn passes on when the message leaves (pgqueue._message_left). While there
    -- is room under p_limit and a round handed something out, another round takes the turns
    -- just handed on, so a call hands out several messages of one group when the group's limit
    -- allows. A further round takes the groups' locks in stripe order too, but only on stripes
    -- at or above the highest an earlier round locked (v_top) or that it holds (v_stripes): a
    -- lock on a lower stripe, taken after a higher one, could deadlock with a call that takes
    -- the two in order. In lease mode such a group's turn is handed on when its message leaves
    -- instead (it has one in flight); in delete mode the message leaves now, and its hand-off
    -- may need the lock, so it is given back (not deleted: row-locked by this transaction, due
    -- as before with its turn kept, to other sessions once the transaction ends; a later call of
    -- this transaction hands it out first) and the call ends there. (Each expression of this function is prepared anew in
    -- each transaction: the single-message path runs as few as it can.)
    LOOP
        v_ids := pgqueue._message_take(v_queue_id, v_limit - v_n, v_now, v_max_attempts, NULL,
                                       v_groups IS NOT NULL, v_all);
        EXIT WHEN cardinality(v_ids) = 0;
        IF v_all IS NOT NULL THEN  -- a further round (a queue with groups)
            IF v_lock_ms = 0 THEN
                v_back := ARRAY(SELECT m.id FROM pgqueue.message m
                                 WHERE m.id = ANY (v_ids) AND m.group_key IS NOT NULL
                                   AND m.turn_at IS NOT NULL
                                   AND hashtext(m.group_key) & 255 < v_top
                                   AND hashtext(m.group_key) & 255 <> ALL (coalesce(v_stripes, '{}')));
                IF cardinality(v_back) > 0 THEN
                    v_all := v_all || v_back;
                    v_ids := ARRAY(SELECT u.i FROM unnest(v_ids) WITH ORDINALITY AS u(i, n)
                                    WHERE u.i <> ALL (v_back) ORDER BY u.n);
                    EXIT WHEN cardinality(v_ids) = 0;
                END IF;
            END IF;
        END IF;
        v_n := v_n + cardinality(v_ids);
        -- The statements below count (pgqueue.queue_counters) each message handed out as
        -- delivered (more than 32 at once: _counted_n), and as expired if its lease had run out,
        -- in their WHERE clauses: evaluated once per row, on the row as it was, since the take
        -- has locked every row. (pgqueue._count_seq is inlined into each plan.)
        IF cardinality(v_ids) > 32 THEN
            PERFORM pgqueue._counted_n(v_queue_id, 1, cardinality(v_ids));
        END IF;
        IF v_lock_ms = 0 THEN
            -- A message that leaves with an idempotency key or its group's turn is handed to
            -- pgqueue._message_left after the DELETE (its key kept, its group's turn passed on):
            -- only on a queue with groups or a key window (groups are chosen at queue_create).
            IF cardinality(v_ids) = 1 AND v_groups IS NULL AND v_window = 0 THEN
                RETURN QUERY
                DELETE FROM pgqueue.message m WHERE m.id = v_ids[1]
                   AND nextval(pgqueue._count_seq(v_queue_id, 1)) > 0
                   AND (m.locked_until IS NULL OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at, m.state,
                          m.content_type, m.created_at, NULL::bigint;
            ELSIF cardinality(v_ids) = 1 THEN
                DELETE FROM pgqueue.message m WHERE m.id = v_ids[1]
                   AND nextval(pgqueue._count_seq(v_queue_id, 1)) > 0
                   AND (m.locked_until IS NULL OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at, m.state,
                          m.content_type, m.created_at, m.group_key, m.turn_at, m.idem_key, m.wait_floor,
                          CASE WHEN m.group_key IS NOT NULL THEN pg_sequence_last_value(pgqueue._lock_stripe(v_queue_id)) END
                     INTO id, content, attempts, dequeue_at, state,
                          content_type, created_at, v_group_key, v_turn_at, v_idem_key, v_floor, v_seen;
                IF FOUND THEN
                    locked_until := NULL;
                    RETURN NEXT;
                END IF;
                IF v_groups = 1 AND v_idem_key IS NULL AND v_group_key IS NOT NULL
                   AND v_turn_at IS NOT NULL THEN
                    -- the ordered hand-off of pgqueue._message_left (see there), here rather
                    -- than through it: a call of a PL/pgSQL function and its read of the queue's
                    -- row cost a grouped delete-mode dequeue 8% (docs/performance.md); when it
                    -- hands nothing on, _message_group_next looks again under the group's lock
                    -- (as _message_left would, without its read of the queue's row and a second
                    -- run of this UPDATE: this queue's concurrency is known to be 1)
                    UPDATE pgqueue.message m
                       SET turn_at = pgqueue._turn_key(m.dequeue_at, true),
                           wait_floor = pgqueue._wait_floor_next(v_floor, v_seen, v_pre,
                                                                 pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                                                                 m.dequeue_at, m.id)
                     WHERE m.id = (SELECT w.id FROM pgqueue.message w
                                    WHERE w.queue_id = v_queue_id AND w.group_key = v_group_key
                                      AND w.turn_at IS NULL
                                      AND (w.dequeue_at, w.id) >= (CASE WHEN v_floor[6] = v_seen THEN v_floor[1] ELSE -9223372036854775808 END,
                                                                   CASE WHEN v_floor[6] = v_seen THEN v_floor[2] ELSE -9223372036854775808 END)
                                    ORDER BY w.dequeue_at, w.id
                                    LIMIT 1)
                       -- the room: while the group's wait floor holds (read before this statement, and
                       -- again after its snapshot), no message of the group but the one leaving has
                       -- the turn (pgqueue._wait_floor_next)
                       AND CASE WHEN v_floor[6] = v_seen THEN (SELECT pgqueue._wait_floor_ok(v_floor, v_queue_id))
                                ELSE (SELECT t.turn_at FROM pgqueue.message t
                                       WHERE t.queue_id = v_queue_id AND t.group_key = v_group_key
                                         AND t.turn_at IS NOT NULL
                                         AND t.turn_at >= (SELECT pgqueue._group_floor_get(v_queue_id, v_group_key, v_seen))
                                       ORDER BY t.turn_at LIMIT 1) IS NULL END
                       -- without the lock under READ COMMITTED only (pgqueue._message_left)
                       AND current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable');
                    IF NOT FOUND THEN
                        v_turned := pgqueue._message_group_next(v_queue_id, v_group_key, v_groups);
                        v_stripe := hashtext(v_group_key) & 255;  -- (a lock held: see the loop)
                        v_top := greatest(v_top, v_stripe);
                        v_stripes := v_stripes || v_stripe;
                    END IF;
                ELSIF v_idem_key IS NOT NULL OR (v_group_key IS NOT NULL AND v_turn_at IS NOT NULL) THEN
                    IF pgqueue._message_left(v_queue_id, v_ids[1], v_group_key, v_turn_at, v_idem_key, v_floor, v_pre) THEN
                        v_stripe := hashtext(v_group_key) & 255;  -- (a lock held: see the loop)
                        v_top := greatest(v_top, v_stripe);
                        v_stripes := v_stripes || v_stripe;
                    END IF;
                END IF;
            ELSE
                -- the rows are locked by the take: what leaves is read before the DELETE
                IF v_groups IS NOT NULL OR v_window > 0 THEN
                    -- (in the order of their groups' stripes, as every call that hands turns
                    -- on takes the groups' locks: pgqueue._message_group_locks)
                    SELECT array_agg(m.id ORDER BY hashtext(m.group_key) & 255, m.group_key, m.id),
                           array_agg(m.group_key ORDER BY hashtext(m.group_key) & 255, m.group_key, m.id),
                           array_agg(m.turn_at ORDER BY hashtext(m.group_key) & 255, m.group_key, m.id),
                           array_agg(m.idem_key ORDER BY hashtext(m.group_key) & 255, m.group_key, m.id)
                      INTO v_left, v_left_groups, v_left_turns, v_left_keys
                      FROM pgqueue.message m
                     WHERE m.id = ANY (v_ids)
                       AND (m.idem_key IS NOT NULL OR (m.group_key IS NOT NULL AND m.turn_at IS NOT NULL));
                END IF;
                RETURN QUERY
                WITH d AS (
                    DELETE FROM pgqueue.message m WHERE m.id = ANY (v_ids)
                       AND (cardinality(v_ids) > 32
                            OR nextval(pgqueue._count_seq(v_queue_id, 1)) > 0)
                       AND (m.locked_until IS NULL
                            OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                    RETURNING m.id, m.content, m.attempts + 1 AS attempts, m.dequeue_at, m.state,
                              m.content_type, m.created_at, NULL::bigint AS locked_until)
                SELECT * FROM d ORDER BY array_position(v_ids, d.id);
                FOR i IN 1 .. coalesce(cardinality(v_left), 0) LOOP
                    -- (true when it took the group's lock: with one in flight per group the
                    -- hand-off takes none when the group has a message waiting)
                    IF pgqueue._message_left(v_queue_id, v_left[i], v_left_groups[i],
                                             v_left_turns[i], v_left_keys[i]) THEN
                        v_stripe := hashtext(v_left_groups[i]) & 255;
                        v_top := greatest(v_top, v_stripe);
                        v_stripes := v_stripes || v_stripe;
                    END IF;
                END LOOP;
                v_left := NULL;
            END IF;
        ELSE
            -- the groups whose waiting turn is handed out now (not those of expired leases: they
            -- were in flight already)
            IF v_groups > 1 OR v_groups = 0 THEN
                v_turns := ARRAY(SELECT m.group_key FROM pgqueue.message m
                                  WHERE m.id = ANY (v_ids) AND m.locked_until IS NULL
                                    AND m.group_key IS NOT NULL);
            ELSIF v_groups = 1 AND current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
                -- REPEATABLE READ read the limit above in its snapshot: a queue_alter that raised
                -- it after the snapshot would go unseen, no turn handed on (a review). The queue's
                -- row FOR SHARE raises 40001 after any change of it since the snapshot. (The
                -- groups' locks, tried first, raised it after any write on their stripes since:
                -- false 40001s, waits and deadlocks in normal operation, a review of that.)
                PERFORM pgqueue._queue_pin(v_queue_id);
            END IF;
            -- The lease runs from a clock read after the take, so after this transaction's xid
            -- was assigned (the rows are locked): see pgqueue._write_clock.
            v_until := pgqueue.now_ms() + v_lock_ms;
            IF v_lock_ms < 20 THEN
                -- a lease that runs out within 20 ms: this session's next take of one message
                -- looks for expired leases whenever it last looked (pgqueue._message_take)
                v_lease_check := set_config('pgqueue.lease_check_' || v_queue_id, '', false);
            END IF;
            IF cardinality(v_ids) = 1 THEN
                RETURN QUERY
                UPDATE pgqueue.message m
                   SET locked_until = v_until, attempts = m.attempts + 1,
                       write_mark = NOT coalesce(m.write_mark, false),  -- a lease from the clock
                       wait_floor = CASE WHEN v_pre IS NOT NULL AND m.group_key IS NOT NULL
                                         THEN pgqueue._wait_floor_leased(m.wait_floor, v_pre)
                                         ELSE m.wait_floor END
                 WHERE m.id = v_ids[1]
                   AND nextval(pgqueue._count_seq(v_queue_id, 1)) > 0
                   AND (m.locked_until IS NULL OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                          m.content_type, m.created_at, m.locked_until;
            ELSE
                RETURN QUERY
                WITH u AS (
                    UPDATE pgqueue.message m
                       SET locked_until = v_until, attempts = m.attempts + 1,
                           write_mark = NOT coalesce(m.write_mark, false),  -- a lease from the clock
                           wait_floor = CASE WHEN v_pre IS NOT NULL AND m.group_key IS NOT NULL
                                             THEN pgqueue._wait_floor_leased(m.wait_floor, v_pre)
                                             ELSE m.wait_floor END
                     WHERE m.id = ANY (v_ids)
                       AND (cardinality(v_ids) > 32
                            OR nextval(pgqueue._count_seq(v_queue_id, 1)) > 0)
                       AND (m.locked_until IS NULL
                            OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                    RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                              m.content_type, m.created_at, m.locked_until)
                SELECT * FROM u ORDER BY array_position(v_ids, u.id);
            END IF;
            IF cardinality(v_turns) > 0 THEN
                IF current_setting('pgqueue.ack_call', true) <> '' THEN
                    -- message_complete_and_dequeue's: its message_complete_batch hands these on
                    -- with the acknowledgements' hand-offs, all of the groups' locks taken in one
                    -- run, in stripe order (see there); no further round
                    PERFORM set_config('pgqueue.deferred_queue', v_queue_id::text, true),
                            set_config('pgqueue.deferred_turns', v_turns::text, true);
                    v_turns := NULL;
                    EXIT;
                END IF;
                FOR v_group, v_stripe IN SELECT g.g, hashtext(g.g) & 255 FROM unnest(v_turns) AS g(g)
                                          GROUP BY g.g ORDER BY 2, g.g LOOP
                    IF v_top IS NULL OR v_stripe >= v_top OR v_stripe = ANY (v_stripes) THEN
                        v_turned := pgqueue._message_group_next(v_queue_id, v_group, v_groups);
                        v_top := greatest(v_top, v_stripe);
                        v_stripes := v_stripes || v_stripe;
                    END IF;
                END LOOP;
                v_turns := NULL;
            END IF;
        END IF;
        EXIT WHEN v_groups IS NULL OR v_n >= v_limit OR cardinality(v_back) > 0;
        v_now := pgqueue.now_ms();
        v_all := v_all || v_ids;  -- a lease handed out above may have run out already
    END LOOP;
    IF v_rate IS NOT NULL THEN
        PERFORM pgqueue._rate_take(v_queue_id, v_rate, v_n);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_dequeue(text, integer, bigint) IS
    'Hand out up to p_limit deliverable messages (expired leases first, then by dequeue_at, id), skipping rows other consumers hold (SKIP LOCKED); p_lock_ms NULL = queue lease, 0 = delete on dequeue';

-- Report a failed attempt: retry after the queue's back-off, or dead-letter after max_attempts.
-- p_error is stored as the message's last_error (NULL keeps the last one, as message_reject and
-- the dead-letter path do).
CREATE OR REPLACE FUNCTION pgqueue.message_fail(
    p_id         bigint,
    p_attempts   integer,
    p_error      text,
    p_dequeue_at bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_now   bigint := pgqueue.now_ms();
    v_queue pgqueue.queue;
    v_counted boolean;
    v_at    bigint;
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id IS NULL, 'message id'::text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts token'::text);
    END IF;
    -- the queue's lock stripe before the row lock (docs/locking.md)
    PERFORM pgqueue._queue_lock(m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    SELECT q.* INTO v_queue
      FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
     WHERE m.id = p_id AND m.attempts = p_attempts AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL
       FOR UPDATE OF m;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_queue.max_attempts IS NOT NULL AND p_attempts >= v_queue.max_attempts THEN
        PERFORM pgqueue._dead_letter(p_id, p_error, v_now);
    ELSE
        v_at := coalesce(p_dequeue_at,
                         pgqueue._write_clock() + pgqueue._backoff_ms(p_attempts, v_queue.retry_base_ms,
                                                                      v_queue.retry_cap_ms));
        UPDATE pgqueue.message m
           SET locked_until = NULL,
               dequeue_at   = v_at,
               last_error   = coalesce(p_error, m.last_error),
               -- a message with its group's turn keeps it: the group waits for its retry (in the
               -- same UPDATE, so that the trigger message_placed_low sees the new turn key)
               turn_at      = CASE WHEN m.turn_at IS NOT NULL THEN pgqueue._turn_key(v_at, true) END,
               -- after its back-off from this writer's clock: no check by trigger message_placed_low
               write_mark   = CASE WHEN p_dequeue_at IS NULL THEN NOT coalesce(m.write_mark, false)
                                   ELSE m.write_mark END
         WHERE m.id = p_id;
        v_counted := pgqueue._counted(v_queue.id, 3);  -- failed (queue_counters)
    END IF;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_fail(bigint, integer, text, bigint) IS
    'Fail a leased message: retry after exponential back-off with jitter (or at p_dequeue_at), or move it to the dead letters once attempts reach max_attempts; false if the token is stale';

-- Extend a lease by p_lock_ms from now (NULL: the queue's lock_ms). False if the token is stale.
CREATE OR REPLACE FUNCTION pgqueue.message_heartbeat(p_id bigint, p_attempts integer, p_lock_ms bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id IS NULL, 'message id'::text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts token'::text);
    END IF;
    -- the queue's lock stripe before the row lock (docs/locking.md)
    PERFORM pgqueue._queue_lock(m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    PERFORM pgqueue._check_lock_ms(p_lock_ms, false);
    UPDATE pgqueue.message m
       SET locked_until = pgqueue._write_clock() + coalesce(p_lock_ms, q.lock_ms),  -- after the xid
           write_mark   = NOT coalesce(m.write_mark, false)  -- keyed from the clock (message_placed_low)
      FROM pgqueue.queue q
     WHERE m.id = p_id AND m.attempts = p_attempts AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL
       AND q.id = m.queue_id;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_heartbeat(bigint, integer, bigint) IS
    'Extend a lease to now + p_lock_ms (NULL = the queue''s lock_ms); returns false if the attempts token is stale';

-- Extend many leases in one call; returns the ids whose token was stale.
--
-- p_ids[i] is extended to now + p_lock_ms (NULL: its queue's lock_ms) if p_attempts[i] is its
-- current attempts token, exactly as message_heartbeat(p_ids[i], p_attempts[i], p_lock_ms)
-- would: a stale token (the lease ran out and the message was handed out again, or it is gone,
-- or it was never leased) changes nothing for that message and its id comes back in the result,
-- in input order. An id listed twice with the same token is extended once and comes back at
-- neither place; with two tokens, the place with the old one comes back (list the newest
-- delivery only: a message's token grows with each delivery). A worker renews every message
-- it holds with one such call a round, where message_heartbeat is a statement a message. The
-- queues' lock stripes are taken first, in queue order, then the rows in id order (as
-- message_complete_batch takes them: in input order, a worker's beat of [a, b] and its
-- acknowledgement of [b, a] deadlocked), each by a probe of message_pkey by its id
-- (whatever the statistics: message_complete_batch). Errors: 22004
-- (NULL array or element), 22023 (arrays of different lengths or of two dimensions, more than
-- 10000 ids, p_lock_ms out of range).
CREATE FUNCTION pgqueue.message_heartbeat_batch(p_ids bigint[], p_attempts integer[], p_lock_ms bigint DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
SET plan_cache_mode = force_generic_plan  -- as message_complete_batch: the same probes by id
AS $$
DECLARE
    v_stale bigint[];
BEGIN
    PERFORM pgqueue._ack_arrays_check(p_ids, p_attempts);
    PERFORM pgqueue._check_lock_ms(p_lock_ms, false);
    PERFORM pgqueue._queue_lock(q.queue_id)
       FROM (SELECT DISTINCT m.queue_id FROM pgqueue.message m WHERE m.id = ANY (p_ids)) q
      ORDER BY q.queue_id;
    -- each place's row locked through a probe by id (FOR UPDATE in a LATERAL subquery, which
    -- the planner cannot turn round into a walk of the table), in id order (a subquery with
    -- ORDER BY is not pulled up: the nested loop runs in its order), then the rows updated by id. A lock that waits reads the row again: a lease that ran out and was handed
    -- out again meanwhile has a new token, and this one is stale (specs/heartbeat_expiry.spec).
    -- A place whose probe locked nothing is stale.
    WITH p AS MATERIALIZED (
        SELECT u.n, u.id, x.id AS held
          FROM (SELECT v.id, v.attempts, v.n FROM unnest(p_ids, p_attempts) WITH ORDINALITY AS v(id, attempts, n)
                 ORDER BY v.id, v.n) u
          LEFT JOIN LATERAL (SELECT l.id FROM pgqueue.message l
                              WHERE l.id = u.id AND l.attempts = u.attempts
                                AND pgqueue._leased(l.locked_until) AND l.claim_id IS NULL
                                FOR UPDATE) x ON true),
    e AS (
        UPDATE pgqueue.message m
           SET locked_until = pgqueue._write_clock() + coalesce(p_lock_ms, q.lock_ms),  -- after the xid
               write_mark   = NOT coalesce(m.write_mark, false)  -- keyed from the clock (message_placed_low)
          FROM pgqueue.queue q
         WHERE m.id = ANY (ARRAY(SELECT p.held FROM p WHERE p.held IS NOT NULL))
           AND q.id = m.queue_id)
    SELECT coalesce(array_agg(p.id ORDER BY p.n) FILTER (WHERE p.held IS NULL), '{}') INTO v_stale FROM p;
    RETURN v_stale;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_heartbeat_batch(bigint[], integer[], bigint) IS
    'Extend many leases to now + p_lock_ms (NULL = each queue''s lock_ms), each with its attempts token; returns the ids whose token was stale (those changed nothing)';

-- Change a queue's settings; NULL leaves a setting as it is, 0 clears max_attempts/max_size.
DROP FUNCTION pgqueue.queue_alter(text, bigint, integer, bigint, bigint, bigint, boolean);
-- Change a queue's settings; NULL leaves a setting as it is, 0 clears max_attempts/max_size.
CREATE FUNCTION pgqueue.queue_alter(
    p_queue         text,
    p_lock_ms       bigint  DEFAULT NULL,
    p_max_attempts  integer DEFAULT NULL,
    p_retry_base_ms bigint  DEFAULT NULL,
    p_retry_cap_ms  bigint  DEFAULT NULL,
    p_max_size      bigint  DEFAULT NULL,
    p_notify        boolean DEFAULT NULL,
    p_group_concurrency integer DEFAULT NULL,
    p_key_window_ms bigint  DEFAULT NULL,
    p_rate_limit    integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue  pgqueue.queue;
    v_group  text;
    v_turned boolean;
BEGIN
    -- Bad values are refused before anything waits: the quiesce below holds the queue's producers
    -- and consumers off while it waits for the work in flight. Whether a queue has groups is
    -- chosen when it is created; the other checks run again on the row once it is locked.
    LOOP
        SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
        IF NOT FOUND THEN
            PERFORM pgqueue._queue_missing(p_queue);
        END IF;
        PERFORM pgqueue._check_queue_options(
            coalesce(p_lock_ms, v_queue.lock_ms), p_max_attempts,
            coalesce(p_retry_base_ms, v_queue.retry_base_ms),
            coalesce(p_retry_cap_ms, v_queue.retry_cap_ms), p_max_size);
        PERFORM pgqueue._check_group_options(p_group_concurrency, p_key_window_ms, p_rate_limit);
        IF p_group_concurrency IS NOT NULL AND v_queue.group_concurrency IS NULL THEN
            RAISE EXCEPTION 'queue "%" has no message groups', p_queue
                USING ERRCODE = '22023',
                      HINT = 'Message groups are chosen when a queue is created (queue_create p_group_concurrency).';
        END IF;
        IF p_rate_limit > 0 THEN
            PERFORM pgqueue._rate_check(v_queue.id, p_queue);  -- again below, on the locked row
        END IF;
        IF p_max_size IS NOT NULL OR p_group_concurrency IS NOT NULL THEN
            -- A new cap must count every message, including those of producers still in flight:
            -- wait for them on the queue's lock stripe before locking the queue row (the other
            -- order deadlocks with a transaction that enqueued and then drops or alters), and
            -- count with snapshots taken after that, which REPEATABLE READ cannot give. So must a
            -- new group limit give turns: a producer in flight decided its message's turn under
            -- the old limit, and a message it left waiting in a group the new limit makes room in
            -- would otherwise wait for a message of the group to leave (specs/group_producer.spec).
            PERFORM pgqueue._require_read_committed(CASE WHEN p_max_size IS NOT NULL THEN 'queue_alter(p_max_size)'
                                                         ELSE 'queue_alter(p_group_concurrency)' END);
            PERFORM pgqueue._queue_quiesce(v_queue.id);
        END IF;
        -- The row of the queue whose stripe was waited for, by its id: a queue dropped meanwhile
        -- and created again under the name is another queue, on another stripe, whose producers
        -- in flight nothing waited for (found by name, its cap was set without them, and groups
        -- given to a queue created without them: a review). Then from the top, for that one.
        SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.id = v_queue.id FOR UPDATE;
        EXIT WHEN FOUND;
    END LOOP;
    -- against the row as it is now: another queue_alter may have changed lock_ms or the retry bounds
    PERFORM pgqueue._check_queue_options(
        coalesce(p_lock_ms, v_queue.lock_ms), p_max_attempts,
        coalesce(p_retry_base_ms, v_queue.retry_base_ms),
        coalesce(p_retry_cap_ms, v_queue.retry_cap_ms), p_max_size);
    IF p_rate_limit > 0 THEN
        PERFORM pgqueue._rate_check(v_queue.id, p_queue);
        BEGIN
            -- the unique index queue_rate_stripe_key refuses a second rate-limited queue of
            -- the stripe whatever this snapshot saw: one committed since, or one a concurrent
            -- call sets (waited for)
            UPDATE pgqueue.queue q SET rate_limit = p_rate_limit WHERE q.id = v_queue.id;
        EXCEPTION WHEN unique_violation THEN
            RAISE EXCEPTION 'queue "%" cannot have a rate limit: another queue has one on the same stripe (id & 63 = %)', p_queue, v_queue.id & 63
                USING ERRCODE = '22023',
                      HINT = 'Rate-limit at most one queue of each stripe of 64; drop the other''s limit or recreate the queue.';
        END;
    END IF;
    UPDATE pgqueue.queue q
       SET lock_ms       = coalesce(p_lock_ms, q.lock_ms),
           max_attempts  = CASE WHEN p_max_attempts IS NULL THEN q.max_attempts
                                ELSE nullif(p_max_attempts, 0) END,
           retry_base_ms = coalesce(p_retry_base_ms, q.retry_base_ms),
           retry_cap_ms  = coalesce(p_retry_cap_ms, q.retry_cap_ms),
           max_size      = CASE WHEN p_max_size IS NULL THEN q.max_size
                                ELSE nullif(p_max_size, 0) END,
           notify        = coalesce(p_notify, q.notify),
           group_concurrency = coalesce(p_group_concurrency, q.group_concurrency),
           key_window_ms = coalesce(p_key_window_ms, q.key_window_ms),
           rate_limit    = CASE WHEN p_rate_limit IS NULL THEN q.rate_limit ELSE nullif(p_rate_limit, 0) END
     WHERE q.id = v_queue.id;
    IF p_max_size IS NOT NULL THEN
        DELETE FROM pgqueue.queue_size s WHERE s.queue_id = v_queue.id;
    END IF;
    IF p_rate_limit > 0 AND p_rate_limit IS DISTINCT FROM v_queue.rate_limit THEN
        -- a new rate starts afresh (not slots taken at an earlier limit); the same rate set
        -- again keeps its slots (and what consumers took ahead of the clock stays to wait out)
        PERFORM pgqueue._rate_reset(v_queue.id, p_rate_limit);
    END IF;
    IF p_group_concurrency IS DISTINCT FROM v_queue.group_concurrency AND p_group_concurrency IS NOT NULL THEN
        -- a new limit: each group with messages waiting and no turn gets one where the limit now
        -- leaves room (else a message enqueued later would take that room ahead of them), the
        -- group whose first message waiting is due first first (each turn is keyed as it is
        -- given: this order is the order they go out in; no deadlock, whatever the order, since
        -- the queue's stripe keeps every other writer of its groups out). Turns already given
        -- stay: after a lower limit, the messages holding one still go out, and the new limit
        -- holds from then on.
        -- The queue's lock stripe advances: the groups' wait floors recorded under the old limit
        -- no longer hold (the ordered hand-off skips its look for another message with the turn
        -- while its floor holds, which only group concurrency 1 makes safe:
        -- pgqueue._wait_floor_next). (A rolled-back change may or may not leave it moved: the
        -- quiesce's ALTER SEQUENCE above may have given the sequence a new file in this
        -- transaction. Either is safe: a move only makes the floors recorded before it stop
        -- holding.)
        PERFORM nextval(pgqueue._lock_stripe(v_queue.id));
        FOR v_group IN SELECT m.group_key FROM pgqueue.message m
                        WHERE m.queue_id = v_queue.id AND m.group_key IS NOT NULL AND m.turn_at IS NULL
                        GROUP BY m.group_key
                        ORDER BY min(ARRAY[m.dequeue_at, m.id]) LOOP
            v_turned := pgqueue._message_group_next(v_queue.id, v_group, p_group_concurrency);
        END LOOP;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_alter(text, bigint, integer, bigint, bigint, bigint, boolean, integer, bigint, integer) IS
    'Change a queue''s settings; NULL keeps a setting, 0 makes max_attempts unlimited or max_size unbounded (or group_concurrency unlimited, on a queue with groups, or removes the rate_limit)';

-- Create a queue.
DROP FUNCTION pgqueue.queue_create(text, bigint, integer, bigint, bigint, bigint, boolean, boolean);
-- Create a queue.
CREATE FUNCTION pgqueue.queue_create(
    p_queue         text,
    p_lock_ms       bigint  DEFAULT 30000,
    p_max_attempts  integer DEFAULT NULL,
    p_retry_base_ms bigint  DEFAULT 1000,
    p_retry_cap_ms  bigint  DEFAULT 3600000,
    p_max_size      bigint  DEFAULT NULL,
    p_notify        boolean DEFAULT false,
    p_if_not_exists boolean DEFAULT false,
    p_group_concurrency integer DEFAULT NULL,
    p_key_window_ms bigint  DEFAULT 0,
    p_rate_limit    integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id         integer;
    v_constraint text;
    v_taken      boolean;
    v_freed      integer[];
BEGIN
    PERFORM pgqueue._not_null(p_queue IS NULL, 'queue name'::text);
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    PERFORM pgqueue._not_null(p_lock_ms IS NULL, 'lock_ms'::text);
    PERFORM pgqueue._not_null(p_retry_base_ms IS NULL, 'retry_base_ms'::text);
    PERFORM pgqueue._not_null(p_retry_cap_ms IS NULL, 'retry_cap_ms'::text);
    PERFORM pgqueue._not_null(p_notify IS NULL, 'notify'::text);
    PERFORM pgqueue._not_null(p_if_not_exists IS NULL, 'if_not_exists'::text);
    PERFORM pgqueue._check_queue_options(p_lock_ms, p_max_attempts, p_retry_base_ms,
                                         p_retry_cap_ms, p_max_size);
    PERFORM pgqueue._not_null(p_key_window_ms IS NULL, 'key_window_ms'::text);
    PERFORM pgqueue._check_group_options(p_group_concurrency, p_key_window_ms, p_rate_limit);
    -- The stripe search below decides from what it reads that no queue uses a stripe, then
    -- resets the stripe's counters and max_size mark: a REPEATABLE READ or SERIALIZABLE snapshot
    -- does not see a queue created on it after the snapshot was taken, and the reset would put
    -- two queues on one stripe, that queue's counters back to zero and its cap off by what they
    -- counted (specs/rr_queue_create.spec). A queue that already exists in the snapshot with
    -- p_if_not_exists: nothing to create, so nothing to refuse.
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        IF p_if_not_exists AND EXISTS (SELECT FROM pgqueue.queue q WHERE q.name = p_queue) THEN
            RETURN;
        END IF;
        PERFORM pgqueue._require_read_committed('queue_create');
    END IF;
    -- p_if_not_exists and the name taken in this statement's snapshot: nothing to make (a read
    -- only: no id, no lock, no xid; roles that may not create queues may call it so, as in a
    -- READ ONLY transaction). A drop that commits after it is a drop after the call.
    IF p_if_not_exists AND EXISTS (SELECT FROM pgqueue.queue q WHERE q.name = p_queue) THEN
        RETURN;
    END IF;
    -- Else, is the name taken? Its row is locked FOR KEY SHARE, which waits for a queue_drop
    -- deleting it (or an alter holding it) to end, before any stripe is taken: a drop that
    -- commits leaves no row, and the search below gives the new queue a stripe of its own (it
    -- took the next id, another queue's stripe among them: a review). The lock goes at once
    -- with its subtransaction: held to the end of the caller's transaction, it deadlocked with
    -- a drop or a max_size change there (docs/locking.md, rule 1). A taken name: PQ002 at once,
    -- no search (it went on to the INSERT with the next id, and a drop that had waited behind
    -- the lock and committed before the INSERT let the queue in on another queue's stripe, its
    -- counters shared: a review). (Without UPDATE on pgqueue.queue, which the lock needs: not
    -- known, the search runs, and the INSERT refuses a taken name.)
    BEGIN
        PERFORM FROM pgqueue.queue q WHERE q.name = p_queue FOR KEY SHARE;
        v_taken := FOUND;
        RAISE SQLSTATE 'PQ999';  -- (private: rolls the subtransaction, and its lock, back)
    EXCEPTION
        WHEN SQLSTATE 'PQ999' THEN NULL;
        WHEN insufficient_privilege THEN v_taken := NULL;
    END;
    IF v_taken THEN
        IF p_if_not_exists THEN  -- (created since the read above)
            RETURN;
        END IF;
        RAISE EXCEPTION 'queue "%" already exists', p_queue
            USING ERRCODE = 'PQ002',
                  HINT = 'Use pgqueue.queue_alter() to change it, or p_if_not_exists => true.';
    END IF;
    -- A stripe of its own (id & 63) while there are at most 64 queues, so that its lock and its
    -- counters (pgqueue.queue_counters) are its alone: the next id whose stripe no queue uses,
    -- the stripe taken (a concurrent queue_create waits) and checked again; its counters set to
    -- zero, and its max_size exactness mark cleared (a REPEATABLE READ producer of a dropped queue
    -- on the stripe set it, pgqueue._queue_reserve: no producer of the stripe is left, and the new
    -- queue's first such producer sets it again). With every stripe in use (or after 128 tries),
    -- the next id: counters and mark shared. (What the search changes is a stripe no queue uses:
    -- harmless when a drop above rolls back and the name stays taken.) Not a stripe that a
    -- queue_drop of this transaction freed (pgqueue.dropped_stripes): the transaction may roll
    -- back, and the dropped queue come back with its counters reset.
    v_freed := coalesce(string_to_array(nullif(current_setting('pgqueue.dropped_stripes', true), ''), ',')::integer[], '{}');
    IF v_taken IS NOT TRUE AND (SELECT count(DISTINCT q.id & 63) FROM pgqueue.queue q) < 64 THEN
        FOR v_try IN 1..128 LOOP
            v_id := nextval('pgqueue.queue_id_seq'::regclass);
            CONTINUE WHEN v_id & 63 = ANY (v_freed)
                       OR EXISTS (SELECT FROM pgqueue.queue q WHERE q.id & 63 = v_id & 63);
            PERFORM pgqueue._queue_quiesce(v_id);
            EXIT WHEN NOT EXISTS (SELECT FROM pgqueue.queue q WHERE q.id & 63 = v_id & 63);
        END LOOP;
        IF v_id & 63 = ANY (v_freed) OR EXISTS (SELECT FROM pgqueue.queue q WHERE q.id & 63 = v_id & 63) THEN
            v_id := NULL;
        ELSE
            PERFORM setval(pgqueue._count_seq(v_id, k.k), CASE WHEN k.k < 6 THEN 1 ELSE 32 END, false)
               FROM generate_series(0, 8) AS k(k);
            PERFORM setval(pgqueue._size_exact_seq(v_id), 1, false);
        END IF;
    END IF;
    -- (nor a stripe freed in this transaction when the counters are shared: its counters are
    -- the dropped queue's, which would be this queue's alone once the drop commits)
    FOR v_try IN 1..128 LOOP
        EXIT WHEN v_id IS NOT NULL;
        v_id := nextval('pgqueue.queue_id_seq'::regclass);
        IF v_id & 63 = ANY (v_freed) AND v_try < 128 THEN
            v_id := NULL;
        END IF;
    END LOOP;
    BEGIN
        INSERT INTO pgqueue.queue (id, name, lock_ms, max_attempts, retry_base_ms, retry_cap_ms,
                                   max_size, notify, group_concurrency, key_window_ms, rate_limit)
        VALUES (v_id, p_queue, p_lock_ms,
                nullif(p_max_attempts, 0), p_retry_base_ms, p_retry_cap_ms, nullif(p_max_size, 0),
                p_notify, p_group_concurrency, p_key_window_ms, nullif(p_rate_limit, 0));
    EXCEPTION WHEN unique_violation THEN
        GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
        IF v_constraint = 'queue_rate_stripe_key'
           AND NOT EXISTS (SELECT FROM pgqueue.queue q WHERE q.name = p_queue) THEN
            PERFORM pgqueue._rate_check(v_id, p_queue);  -- raises, naming the other queue
            RAISE EXCEPTION 'queue "%" cannot have a rate limit: another queue has one on the same stripe (id & 63 = %)', p_queue, v_id & 63
                USING ERRCODE = '22023',
                      HINT = 'Rate-limit at most one queue of each stripe of 64; drop the other''s limit or recreate the queue.';
        END IF;
        IF p_if_not_exists THEN
            RETURN;
        END IF;
        RAISE EXCEPTION 'queue "%" already exists', p_queue
            USING ERRCODE = 'PQ002',
                  HINT = 'Use pgqueue.queue_alter() to change it, or p_if_not_exists => true.';
    END;
    IF p_rate_limit > 0 THEN
        PERFORM pgqueue._rate_reset(v_id, p_rate_limit);  -- (not a dropped queue's slots)
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_create(text, bigint, integer, bigint, bigint, bigint, boolean, boolean, integer, bigint, integer) IS
    'Create a queue: lease lock_ms, max_attempts (NULL/0 = unlimited), retry back-off base and cap (ms), max_size (NULL/0 = unbounded), notify, group_concurrency (NULL = no message groups, 0 = groups without a limit), key_window_ms, rate_limit (messages a second, NULL/0 = none)';

-- Drop a queue with its messages and dead letters; false if it did not exist.
CREATE OR REPLACE FUNCTION pgqueue.queue_drop(p_queue text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id integer;
BEGIN
    PERFORM pgqueue._not_null(p_queue IS NULL, 'queue name'::text);
    IF p_queue = 'default' THEN
        RAISE EXCEPTION 'the default queue cannot be dropped'
            USING ERRCODE = 'PQ004',
                  HINT = 'Empty it instead: complete or purge its messages.';
    END IF;
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    -- The deletes below must see every message committed before them: READ COMMITTED only.
    PERFORM pgqueue._require_read_committed('queue_drop');
    SELECT q.id INTO v_id FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- wait for in-flight work on the queue's lock stripe; new work waits for us
    PERFORM pgqueue._queue_quiesce(v_id);
    DELETE FROM pgqueue.queue q WHERE q.id = v_id;
    IF NOT FOUND THEN
        RETURN false;  -- dropped by someone else meanwhile
    END IF;
    -- The stripe (id & 63) is not free for a queue_create later in this transaction, which
    -- would reset its counters with setval: a rollback brings this queue back, but not its
    -- counters (zero, where Prometheus counters never go down: a review). A setting local to
    -- the transaction, undone with a subtransaction that rolls back.
    PERFORM set_config('pgqueue.dropped_stripes',
                       concat_ws(',', nullif(current_setting('pgqueue.dropped_stripes', true), ''), v_id & 63),
                       true);
    DELETE FROM pgqueue.message m WHERE m.queue_id = v_id AND m.locked_until IS NULL;
    DELETE FROM pgqueue.message m WHERE m.queue_id = v_id AND m.locked_until IS NOT NULL;
    DELETE FROM pgqueue.dead_letter d WHERE d.queue_id = v_id;
    DELETE FROM pgqueue.queue_size s WHERE s.queue_id = v_id;
    DELETE FROM pgqueue.message_key k WHERE k.queue_id = v_id;
    DELETE FROM pgqueue.message_group_lock l WHERE l.queue_id = v_id;
    DELETE FROM pgqueue.schedule s WHERE s.queue_id = v_id;
    DELETE FROM pgqueue.spark_claim k
     WHERE k.consumer_id IN (SELECT c.id FROM pgqueue.spark_consumer c WHERE c.queue_id = v_id);
    DELETE FROM pgqueue.spark_consumer c WHERE c.queue_id = v_id;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_drop(text) IS
    'Drop a queue with its messages, dead letters, schedules and Spark consumers; returns false if it did not exist';

-- The consumer row, locked FOR UPDATE; created if missing and p_create, else PQ006 (40001 in
-- REPEATABLE READ or SERIALIZABLE if the queue changed since the snapshot).
-- Call with the queue's lock stripe held (docs/locking.md).
CREATE OR REPLACE FUNCTION pgqueue._spark_consumer_row(p_queue pgqueue.queue, p_consumer text, p_create boolean)
RETURNS pgqueue.spark_consumer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_consumer pgqueue.spark_consumer;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    SELECT c.* INTO v_consumer FROM pgqueue.spark_consumer c
     WHERE c.queue_id = p_queue.id AND c.name = p_consumer
       FOR UPDATE;
    IF FOUND THEN
        RETURN v_consumer;
    END IF;
    IF NOT p_create THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" does not exist', p_consumer, p_queue.name
            USING ERRCODE = 'PQ006',
                  HINT = 'A consumer is created by its first pgqueue.spark_consumer_open() or pgqueue.spark_claim(); list them with pgqueue.spark_consumers().';
    END IF;
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        -- p_queue was read in this transaction's snapshot: a queue_drop that committed after it
        -- deleted the queue's consumers, and a row made now would be left behind for good, on
        -- no queue (a review). The queue's row FOR SHARE raises 40001 after any change of it
        -- since the snapshot, as it does for producers (specs/rr_orphans.spec).
        PERFORM pgqueue._queue_pin(p_queue.id);
    END IF;
    INSERT INTO pgqueue.spark_consumer (queue_id, name, created_at)
    VALUES (p_queue.id, p_consumer, pgqueue.now_ms())
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT c.* INTO STRICT v_consumer FROM pgqueue.spark_consumer c
     WHERE c.queue_id = p_queue.id AND c.name = p_consumer
       FOR UPDATE;
    RETURN v_consumer;
END;
$$;

-- Acknowledge a consumer's claims up to p_up_to_seq: delete their messages; returns how many.
--
-- Idempotent: claims at or below the acknowledged position are gone already. Errors: 22023 if
-- p_up_to_seq is beyond the consumer's last claim, PQ005 if another session holds the consumer
-- (a Spark query runs on it: an acknowledgement by hand deleted the claims of a micro-batch it
-- had not read yet, and the batch read fewer rows with no error; a review), PQ006 for an
-- unknown consumer.
CREATE OR REPLACE FUNCTION pgqueue.spark_ack(p_queue text, p_consumer text, p_up_to_seq bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer pgqueue.spark_consumer;
    v_claims   bigint[];
    v_count    bigint;
    v_left     bigint[];  -- the messages that left with a key or a turn, their groups, ...
    v_lg       text[];
    v_lt       bigint[];
    v_lk       text[];
    v_done     boolean;
BEGIN
    PERFORM pgqueue._not_null(p_up_to_seq IS NULL, 'p_up_to_seq'::text);
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_enter(p_queue);
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, false);
    -- (the row is locked FOR UPDATE: no spark_consumer_open can slip in meanwhile)
    IF v_consumer.holder_pid IS DISTINCT FROM pg_backend_pid()
       AND pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Its Spark query acknowledges what it has processed itself; stop the query first.';
    END IF;
    IF p_up_to_seq >= v_consumer.next_seq THEN
        RAISE EXCEPTION 'cannot acknowledge claim % of consumer "%": its last claim is %',
                        p_up_to_seq, p_consumer, v_consumer.next_seq - 1
            USING ERRCODE = '22023',
                  HINT = 'Acknowledge only sequence numbers that pgqueue.spark_claim() returned.';
    END IF;
    IF p_up_to_seq <= v_consumer.acked_seq THEN
        RETURN 0;
    END IF;
    v_claims := ARRAY(SELECT k.id FROM pgqueue.spark_claim k
                       WHERE k.consumer_id = v_consumer.id AND k.seq <= p_up_to_seq
                       ORDER BY k.seq);
    WITH d AS (
        DELETE FROM pgqueue.message m WHERE m.claim_id = ANY (v_claims)
        RETURNING m.id, m.group_key, m.turn_at, m.idem_key,
                  m.idem_key IS NOT NULL OR (m.group_key IS NOT NULL AND m.turn_at IS NOT NULL) AS left_)
    SELECT count(*), array_agg(d.id) FILTER (WHERE d.left_),
           array_agg(d.group_key) FILTER (WHERE d.left_),
           array_agg(d.turn_at) FILTER (WHERE d.left_),
           array_agg(d.idem_key) FILTER (WHERE d.left_)
      INTO v_count, v_left, v_lg, v_lt, v_lk
      FROM d;
    -- keys to keep for the queue's window, turns to pass on (pgqueue._message_left)
    FOR i IN 1 .. coalesce(cardinality(v_left), 0) LOOP
        v_done := pgqueue._message_left(v_queue.id, v_left[i], v_lg[i], v_lt[i], v_lk[i]);
    END LOOP;
    DELETE FROM pgqueue.spark_claim k WHERE k.id = ANY (v_claims);
    UPDATE pgqueue.spark_consumer c SET acked_seq = p_up_to_seq WHERE c.id = v_consumer.id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_ack(text, text, bigint) IS
    'Acknowledge a Spark consumer''s claims up to sequence number p_up_to_seq: delete their messages; idempotent; returns how many were deleted';

-- spark_claim's probe for a stream with a starting position: lock up to p_limit deliverable
-- messages of a queue created at or after p_from (epoch ms) and return their ids in delivery
-- order (expired leases first, then by (dequeue_at, id)).
--
-- created_at is the start of the enqueuing transaction and a message's default dequeue_at is the
-- clock at its insert, later still, so a message created at or after p_from and due at its
-- default time sorts at or above p_from in message_ready_idx: the probe starts there, past the
-- whole backlog enqueued before p_from, instead of walking it. Three bounded index probes under
-- one LIMIT, FOR UPDATE SKIP LOCKED: expired leases (message_leased_idx), ready priority
-- messages (message_ready_idx, dequeue_at < 0) and ready messages due in [p_from, now]
-- (message_ready_idx); each filters on created_at >= p_from. What they step over, at every
-- claim, until other consumers take it: the expired leases, priority messages and messages due
-- in [p_from, now] (scheduled earlier, due now) that were created before p_from. Not found: a
-- message created at or after p_from but placed below p_from and not as a priority (an
-- explicit past dequeue_at). A lease that ran out p_max_attempts times goes to the dead letters
-- as in pgqueue._message_take; p_max_id (if not NULL) leaves out larger ids. The caller holds
-- the queue's lock stripe.
CREATE FUNCTION pgqueue._spark_take_from(
    p_queue_id     integer,
    p_limit        integer,
    p_now          bigint,
    p_max_attempts integer,
    p_max_id       bigint,
    p_from         bigint)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_need     integer := p_limit;
    v_ids      bigint[] := '{}';
    v_found    bigint[];
    v_dead_ids bigint[];
    v_dead     bigint;
BEGIN
    LOOP
        SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
               array_agg(c.id) FILTER (WHERE c.dead)
          INTO v_found, v_dead_ids
          FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                      coalesce(m.attempts >= p_max_attempts, false) AS dead
                                 FROM pgqueue.message m
                                WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                  AND m.locked_until <= p_now
                                  AND m.created_at >= p_from
                                  AND m.id <> ALL (v_ids)
                                  AND (p_max_id IS NULL OR m.id <= p_max_id)
                                ORDER BY m.locked_until, m.id
                                LIMIT v_need
                                  FOR UPDATE SKIP LOCKED) e
                UNION ALL
                -- the ready ranges in turn: priority messages, then those due in [p_from, now]
                SELECT r.* FROM (VALUES ((-9223372036854775808)::bigint, (-1)::bigint), (greatest(p_from, 0), p_now)) AS b(lo, hi)
                 CROSS JOIN LATERAL (SELECT 1, m.dequeue_at, m.id, false
                                       FROM pgqueue.message m
                                      WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                        AND m.dequeue_at >= b.lo AND m.dequeue_at <= b.hi
                                        AND m.created_at >= p_from
                                        AND m.id <> ALL (v_ids)
                                        AND (p_max_id IS NULL OR m.id <= p_max_id)
                                      ORDER BY m.dequeue_at, m.id
                                      LIMIT v_need
                                        FOR UPDATE SKIP LOCKED) r
                LIMIT v_need) c;
        v_ids := v_ids || v_found;
        EXIT WHEN v_dead_ids IS NULL;
        FOREACH v_dead IN ARRAY v_dead_ids LOOP
            -- the reason, and the error of the message's last failure after it (a handler
            -- that failed with an error, then hung or crashed: the error is what tells why)
            PERFORM pgqueue._dead_letter(v_dead, (SELECT 'lease expired' || coalesce('; last error: ' || m.last_error, '')
                                                    FROM pgqueue.message m WHERE m.id = v_dead), p_now);
        END LOOP;
        v_need := p_limit - cardinality(v_ids);
        EXIT WHEN v_need = 0;
    END LOOP;
    RETURN v_ids;
END;
$$;

COMMENT ON FUNCTION pgqueue._spark_take_from(integer, integer, bigint, integer, bigint, bigint) IS
    'pgqueue internal: lock up to p_limit deliverable messages created at or after p_from (a Spark stream''s starting position), expired leases first, then by (dequeue_at, id); ids in delivery order';

-- Claim up to p_max_messages deliverable messages for a consumer; returns the claim's sequence number.
--
-- Takes messages through pgqueue._message_take, the probe of message_dequeue (expired leases
-- first, then ready messages by (dequeue_at, id), FOR UPDATE SKIP LOCKED, poison leases
-- dead-lettered); p_max_id (if not NULL) leaves out messages with a larger id. p_from (epoch
-- ms, if not NULL: a stream's starting position) leaves out messages created before it, which
-- stay in the queue for other consumers; the probe is then pgqueue._spark_take_from, which
-- starts at p_from in message_ready_idx instead of at the oldest message. Returns NULL and
-- claims nothing when no message is due; creates the consumer if needed. Errors: 22023
-- (p_max_messages outside 1..1000000), 0A000 (a queue with message groups), PQ001/42602/22004.
DROP FUNCTION pgqueue.spark_claim(text, text, integer, bigint);
-- Claim up to p_max_messages deliverable messages for a consumer; returns the claim's sequence number.
--
-- Takes messages through pgqueue._message_take, the probe of message_dequeue (expired leases
-- first, then ready messages by (dequeue_at, id), FOR UPDATE SKIP LOCKED, poison leases
-- dead-lettered); p_max_id (if not NULL) leaves out messages with a larger id. p_from (epoch
-- ms, if not NULL: a stream's starting position) leaves out messages created before it, which
-- stay in the queue for other consumers; the probe is then pgqueue._spark_take_from, which
-- starts at p_from in message_ready_idx instead of at the oldest message. Returns NULL and
-- claims nothing when no message is due; creates the consumer if needed. Errors: 22004 (a NULL
-- p_max_messages), 22023 (p_max_messages outside 1..1000000), 0A000 (a queue with message
-- groups), PQ001/42602/22004 (the queue, the consumer name), PQ005 (another session holds the
-- consumer: spark_consumer_open).
CREATE FUNCTION pgqueue.spark_claim(
    p_queue        text,
    p_consumer     text,
    p_max_messages integer,
    p_max_id       bigint DEFAULT NULL,
    p_from         bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- the settings pgqueue._message_take runs with (it has no SET clauses of its own; see there)
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer pgqueue.spark_consumer;
    v_now      bigint := pgqueue.now_ms();
    v_ids      bigint[];
    v_claim_id bigint;
BEGIN
    PERFORM pgqueue._not_null(p_max_messages IS NULL, 'p_max_messages'::text);
    IF p_max_messages < 1 OR p_max_messages > 1000000 THEN
        RAISE EXCEPTION 'p_max_messages must be between 1 and 1000000, got %', p_max_messages
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_enter(p_queue);
    PERFORM pgqueue._spark_refuse_groups(v_queue);
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, true);
    -- (locked FOR UPDATE, as in spark_ack: a claim by hand on a consumer that a running query
    -- holds was taken, and that query's next latestOffset handed it out again: a review)
    IF v_consumer.holder_pid IS DISTINCT FROM pg_backend_pid()
       AND pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Its Spark query claims what it reads itself; stop the query first.';
    END IF;

    IF p_from IS NULL THEN
        v_ids := pgqueue._message_take(v_queue.id, p_max_messages, v_now, v_queue.max_attempts, p_max_id);
    ELSE
        v_ids := pgqueue._spark_take_from(v_queue.id, p_max_messages, v_now, v_queue.max_attempts, p_max_id, p_from);
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN NULL;
    END IF;

    v_claim_id := nextval('pgqueue.spark_claim_id_seq');
    UPDATE pgqueue.message m
       SET locked_until = pgqueue._spark_claimed_until(), attempts = m.attempts + 1,
           claim_id = v_claim_id,
           write_mark = NOT coalesce(m.write_mark, false)  -- year 9999: not below the clock
     WHERE m.id = ANY (v_ids);
    INSERT INTO pgqueue.spark_claim (id, consumer_id, seq, n, min_id, max_id, claimed_at)
    SELECT v_claim_id, v_consumer.id, v_consumer.next_seq, cardinality(v_ids), min(u.id), max(u.id), v_now
      FROM unnest(v_ids) AS u(id);
    UPDATE pgqueue.spark_consumer c SET next_seq = c.next_seq + 1 WHERE c.id = v_consumer.id;
    RETURN v_consumer.next_seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_claim(text, text, integer, bigint, bigint) IS
    'Claim up to p_max_messages deliverable messages (id <= p_max_id; if p_from (epoch ms) is given, created at or after it and, unless a priority, not placed before it) for a Spark consumer, hiding them from message_dequeue; returns the claim sequence number, NULL if nothing was due';

-- Give up this session's hold on a consumer (closing the session does it too).
--
-- False if this session held none: a consumer it never opened or closed already (a second
-- close), one that does not exist, or one of a queue that does not exist (any more: the Spark
-- source closes its consumer when its query stops, also after the queue was dropped under it,
-- which took the consumer with it). Errors, for arguments no consumer can have: 22004 for a
-- NULL queue or consumer name, 42602 for an invalid one.
CREATE OR REPLACE FUNCTION pgqueue.spark_consumer_close(p_queue text, p_consumer text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id  integer;
    v_key bigint;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_id := pgqueue._spark_consumer_id(p_queue, p_consumer);
    IF v_id IS NULL THEN
        IF NOT EXISTS (SELECT FROM pgqueue.queue q WHERE q.name = p_queue) THEN
            BEGIN
                PERFORM pgqueue._queue_missing(p_queue);  -- 22004 and 42602 raise
            EXCEPTION WHEN SQLSTATE 'PQ001' THEN
                NULL;  -- a valid name of no queue: nothing held
            END;
        END IF;
        RETURN false;
    END IF;
    SELECT c.holder_key INTO v_key FROM pgqueue.spark_consumer c
     WHERE c.id = v_id AND c.holder_pid = pg_backend_pid();
    IF v_key IS NULL OR NOT pgqueue._spark_consumer_held(pg_backend_pid(), v_key) THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_unlock(v_key);
    UPDATE pgqueue.spark_consumer c SET holder_pid = NULL, holder_key = NULL
     WHERE c.id = v_id AND c.holder_pid = pg_backend_pid();
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumer_close(text, text) IS
    'Release this session''s hold on a Spark consumer taken by spark_consumer_open; false if it held none (also for a consumer or queue that does not exist); 22004/42602 for a NULL or invalid name';

-- Open a consumer for one Spark query: create it if needed, hold it for this session, return acked_seq.
--
-- The hold is a session-level advisory lock on a random key recorded, with this backend's pid,
-- in the consumer row (docs/locking.md): a role granted nothing cannot take a key it cannot read
-- before the holder does, and a lock it takes on an old key holds nothing. PQ005 if another
-- live session holds the consumer. A rollback of the call's transaction leaves the key locked
-- until the session ends, on no row: that lock holds nothing (docs/locking.md, rule 6).
CREATE OR REPLACE FUNCTION pgqueue.spark_consumer_open(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue := pgqueue._queue_enter(p_queue);
    v_consumer pgqueue.spark_consumer;
    v_key      bigint;
BEGIN
    PERFORM pgqueue._spark_refuse_groups(v_queue);  -- before the consumer's row is made
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, true);
    IF v_consumer.holder_pid = pg_backend_pid()
       AND pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RETURN v_consumer.acked_seq;  -- this session holds it already
    END IF;
    IF pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Only one Spark query may consume as a consumer at a time: stop the other query or use another consumer name.';
    END IF;
    -- 60 random bits (gen_random_uuid is a strong random source)
    v_key := ('x' || substr(md5(gen_random_uuid()::text), 1, 15))::bit(60)::bigint;
    IF NOT pg_try_advisory_lock(v_key) THEN
        RAISE EXCEPTION 'could not take a fresh lock key for consumer "%"', p_consumer
            USING ERRCODE = 'PQ005', HINT = 'Retry.';
    END IF;
    UPDATE pgqueue.spark_consumer c SET holder_pid = pg_backend_pid(), holder_key = v_key
     WHERE c.id = v_consumer.id;
    RETURN v_consumer.acked_seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumer_open(text, text) IS
    'Create the Spark consumer if needed and hold it for this session (PQ005 if another session holds it); returns the acknowledged claim sequence number';

-- The Spark consumers with their positions, open claims and whether a session holds them.
CREATE OR REPLACE FUNCTION pgqueue.spark_consumers(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, consumer text, acked_seq bigint, next_seq bigint, claims bigint,
               claimed bigint, oldest_claim_at bigint, active boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name, c.name, c.acked_seq, c.next_seq, s.claims, s.claimed, s.oldest,
           pgqueue._spark_consumer_held(c.holder_pid, c.holder_key)
      FROM pgqueue.spark_consumer c
      JOIN pgqueue.queue q ON q.id = c.queue_id
     CROSS JOIN LATERAL (SELECT count(*) AS claims, coalesce(sum(k.n), 0)::bigint AS claimed,
                                min(k.claimed_at) AS oldest
                           FROM pgqueue.spark_claim k WHERE k.consumer_id = c.id) s
     WHERE p_queue IS NULL OR q.name = p_queue
     ORDER BY q.name, c.name;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumers(text) IS
    'Spark consumers (of one queue or all): acknowledged and next sequence numbers, open claims, messages they took, oldest claim time (epoch ms), whether a session holds them';

-- Delete the staging rows of a write (an aborted Spark job); returns how many.
CREATE OR REPLACE FUNCTION pgqueue.spark_discard(p_write_id uuid)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    PERFORM pgqueue._not_null(p_write_id IS NULL, 'p_write_id'::text);
    DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_discard(uuid) IS
    'Delete the staging rows of a Spark write that will not be published (an aborted job); returns how many';

-- Move the staged rows of the winning task attempts into a queue, once per publish key.
--
-- p_partitions[i] won with attempt p_attempts[i], which staged p_counts[i] rows. All rows go in
-- one statement through pgqueue._queue_admit (the queue's lock stripe, max_size, then NOTIFY),
-- as message_create_batch; ids follow (partition, row) order. Rows with a group or an
-- idempotency key, and every row of a queue with message groups, go in one at a time in that
-- order through pgqueue._message_insert, as message_create_batch(..., p_groups, p_keys) does: a
-- group's messages keep their order and turns; a row whose key is taken (a live message, or one
-- within the queue's key_window_ms) inserts nothing. The write's staging rows (losers too) are
-- deleted. Returns how many rows were published (a row whose key was taken counts), NULL if the
-- publish key was published before (then only the staging rows are deleted). Errors:
-- 22004/22023 for bad arrays (22023 for a negative count, or counts that add up to more than
-- the largest bigint: before anything is written), 22023 for a group on a queue without groups
-- (nothing is published; also when a capped queue is full, never PQ003), PQ007 if the staged rows differ from p_counts, PQ003 if the queue is
-- full, PQ001 if it does not exist.
CREATE OR REPLACE FUNCTION pgqueue.spark_publish(
    p_publish_key text,
    p_queue       text,
    p_write_id    uuid,
    p_partitions  integer[],
    p_attempts    bigint[],
    p_counts      bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue   pgqueue.queue;
    v_now     bigint := pgqueue.to_epoch(now());
    v_clock   bigint := pgqueue.now_ms();
    v_count   bigint;
    v_bad     record;
    v_row     record;
BEGIN
    PERFORM pgqueue._not_null(p_publish_key IS NULL, 'p_publish_key'::text);
    IF length(p_publish_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'p_publish_key must have 1 to 200 characters, got %', length(p_publish_key)
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue._not_null(p_write_id IS NULL, 'p_write_id'::text);
    PERFORM pgqueue._not_null(p_partitions IS NULL, 'p_partitions'::text);
    PERFORM pgqueue._not_null(p_attempts IS NULL, 'p_attempts'::text);
    PERFORM pgqueue._not_null(p_counts IS NULL, 'p_counts'::text);
    IF array_ndims(p_partitions) > 1 OR array_ndims(p_attempts) > 1 OR array_ndims(p_counts) > 1
       OR cardinality(p_attempts) <> cardinality(p_partitions)
       OR cardinality(p_counts) <> cardinality(p_partitions) THEN
        RAISE EXCEPTION 'p_partitions, p_attempts and p_counts must be one-dimensional and of the same length'
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_partitions, NULL) IS NOT NULL OR array_position(p_attempts, NULL) IS NOT NULL
       OR array_position(p_counts, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_partitions, p_attempts and p_counts must not contain NULL'
            USING ERRCODE = '22004';
    END IF;
    -- the counts add up to the publication's count (a bigint): a negative count, or a sum past
    -- the largest bigint, is refused here, not as PQ007 or 22003 "bigint out of range" later
    IF EXISTS (SELECT FROM unnest(p_counts) AS u(c) WHERE u.c < 0)
       OR (SELECT sum(u.c) FROM unnest(p_counts) AS u(c)) > 9223372036854775807 THEN
        RAISE EXCEPTION 'p_counts must be >= 0 and add up to at most 9223372036854775807'
            USING ERRCODE = '22023';
    END IF;
    IF (SELECT count(DISTINCT u.p) FROM unnest(p_partitions) AS u(p)) <> cardinality(p_partitions) THEN
        RAISE EXCEPTION 'each partition must have exactly one winning attempt'
            USING ERRCODE = '22023';
    END IF;
    v_queue := pgqueue._queue_get(p_queue);

    IF EXISTS (SELECT 1 FROM pgqueue.spark_publish_log l WHERE l.publish_key = p_publish_key) THEN
        DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
        RETURN NULL;
    END IF;

    v_count := (SELECT coalesce(sum(u.c), 0) FROM unnest(p_counts) AS u(c));

    -- a concurrent publish of the same key waits here and then finds it taken
    INSERT INTO pgqueue.spark_publish_log (publish_key, write_id, queue_id, n, published_at)
    VALUES (p_publish_key, p_write_id, v_queue.id, v_count, v_clock)
    ON CONFLICT (publish_key) DO NOTHING;
    IF NOT FOUND THEN
        DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
        RETURN NULL;
    END IF;
    -- The staged rows are counted only now that this call's row of the log is in: an earlier
    -- publication of the key (a first attempt whose reply was lost, still running when its
    -- retry came) either committed before that insert, which then found its row, or never
    -- will. Counted before it, a publication committing in between had deleted them (PQ007
    -- where the answer is NULL: specs/spark_publish_retry.spec).
    SELECT w.p AS partition, w.a AS attempt, w.c AS expected,
           (SELECT count(*) FROM pgqueue.spark_staging s
             WHERE s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a) AS staged
      INTO v_bad
      FROM unnest(p_partitions, p_attempts, p_counts) AS w(p, a, c)
     WHERE w.c <> (SELECT count(*) FROM pgqueue.spark_staging s
                    WHERE s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'partition % attempt % of write % staged % row(s), expected %',
                        v_bad.partition, v_bad.attempt, p_write_id, v_bad.staged, v_bad.expected
            USING ERRCODE = 'PQ007',
                  HINT = 'The staging rows were deleted or never committed: run the write again.';
    END IF;

    -- a group on a queue without groups is refused before the queue's room is asked for, as by
    -- message_create_batch: a full capped queue answered PQ003 to a publish that can never
    -- succeed (pgqueue._message_insert checks again under the queue's lock)
    IF v_queue.group_concurrency IS NULL
       AND EXISTS (SELECT 1 FROM unnest(p_partitions, p_attempts) AS w(p, a)
                     JOIN pgqueue.spark_staging s
                       ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
                    WHERE s.group_key IS NOT NULL) THEN
        RAISE EXCEPTION 'queue "%" has no message groups', v_queue.name
            USING ERRCODE = '22023',
                  HINT = 'Create the queue with pgqueue.queue_create(..., p_group_concurrency => n).';
    END IF;
    -- so is a new key into a queue with key_window_ms under REPEATABLE READ or SERIALIZABLE
    -- (PQ009, as pgqueue._message_insert refuses it; message_create_batch)
    IF v_queue.key_window_ms > 0
       AND current_setting('transaction_isolation') IN ('repeatable read', 'serializable')
       AND EXISTS (SELECT 1 FROM unnest(p_partitions, p_attempts) AS w(p, a)
                     JOIN pgqueue.spark_staging s
                       ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
                    WHERE s.idem_key IS NOT NULL
                      AND pgqueue._message_key_taken(v_queue.id, s.idem_key) IS NULL) THEN
        PERFORM pgqueue._require_read_committed('an enqueue of a new key into a queue with key_window_ms');
    END IF;
    v_queue := pgqueue._queue_admit(p_queue, v_count);
    IF v_count > 0 AND (v_queue.group_concurrency IS NOT NULL
                        OR EXISTS (SELECT 1 FROM pgqueue.spark_staging s
                                    WHERE s.write_id = p_write_id
                                      AND (s.group_key IS NOT NULL OR s.idem_key IS NOT NULL))) THEN
        IF v_queue.group_concurrency IS NOT NULL THEN
            -- the groups' locks first, in the stripes' order (no deadlock between two writes;
            -- READ COMMITTED)
            PERFORM pgqueue._message_group_locks(v_queue.id, array_agg(s.group_key))
               FROM unnest(p_partitions, p_attempts) AS w(p, a)
               JOIN pgqueue.spark_staging s
                 ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
              WHERE s.group_key IS NOT NULL;
        END IF;
        v_clock := pgqueue._write_clock();
        FOR v_row IN
            SELECT s.content, s.content_type, s.group_key, s.idem_key,
                   -- NULL when due now: pgqueue._message_insert reads the clock (its turn's key
                   -- in microseconds)
                   coalesce(s.dequeue_at,
                            v_clock + CASE WHEN s.delay_ms IS NOT NULL  -- saturate, never overflow
                                           THEN least(s.delay_ms, 9223372036854775807 - v_clock) END) AS dequeue_at
              FROM unnest(p_partitions, p_attempts) AS w(p, a)
              JOIN pgqueue.spark_staging s
                ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
             ORDER BY w.p, s.n
        LOOP
            PERFORM pgqueue._message_insert(v_queue, v_row.content, v_row.dequeue_at, v_row.content_type,
                                            v_row.group_key, v_row.idem_key, v_now);
        END LOOP;
        IF v_queue.notify THEN
            PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
        END IF;
    ELSIF v_count > 0 THEN
        v_clock := pgqueue._write_clock();
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
        SELECT v_queue.id, k.at, v_now, s.content, s.content_type,
               -- keyed at or above this writer's clock: no check by trigger message_placed_low
               CASE WHEN k.at >= v_clock - 5 THEN false END
          FROM unnest(p_partitions, p_attempts) AS w(p, a)
          JOIN pgqueue.spark_staging s
            ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
         CROSS JOIN LATERAL (
               SELECT coalesce(s.dequeue_at,
                               v_clock + CASE WHEN s.delay_ms IS NOT NULL  -- saturate, never overflow
                                              THEN least(s.delay_ms, 9223372036854775807 - v_clock) END,
                               v_clock) AS at) AS k
         ORDER BY w.p, s.n;
        IF v_queue.notify THEN
            PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
        END IF;
    END IF;
    -- enqueued (queue_counters), before the commit (a capped queue's bound counts on it:
    -- pgqueue._queue_reserve) and after the inserts, so that a refused row counts nothing
    PERFORM pgqueue._counted_n(v_queue.id, 0, v_count);
    DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_publish(text, text, uuid, integer[], bigint[], bigint[]) IS
    'Publish the staged rows of the winning Spark task attempts (with their groups and idempotency keys) into a queue in one transaction, once per publish key (NULL if already published), and delete the write''s staging rows; returns how many rows';

-- Give back the messages of every open claim of a consumer (one that will not come back).
--
-- The messages become deliverable again at their old place in the queue (dequeue_at kept,
-- attempts kept); the consumer's acknowledged position moves to its last claim. Errors: PQ005
-- if a session holds the consumer (its query is running), PQ006 for an unknown consumer.
CREATE OR REPLACE FUNCTION pgqueue.spark_release(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer pgqueue.spark_consumer;
    v_claims   bigint[];
    v_count    bigint;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_enter(p_queue);
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, false);
    -- the consumer row is locked FOR UPDATE: no spark_consumer_open can slip in meanwhile;
    -- the session that holds the consumer may release it
    IF v_consumer.holder_pid IS DISTINCT FROM pg_backend_pid()
       AND pgqueue._spark_consumer_held(v_consumer.holder_pid, v_consumer.holder_key) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Stop the Spark query that consumes as it first; release is for consumers that will not come back.';
    END IF;
    v_claims := ARRAY(SELECT k.id FROM pgqueue.spark_claim k
                       WHERE k.consumer_id = v_consumer.id ORDER BY k.seq);
    UPDATE pgqueue.message m SET locked_until = NULL, claim_id = NULL
     WHERE m.claim_id = ANY (v_claims);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    DELETE FROM pgqueue.spark_claim k WHERE k.id = ANY (v_claims);
    UPDATE pgqueue.spark_consumer c SET acked_seq = c.next_seq - 1 WHERE c.id = v_consumer.id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_release(text, text) IS
    'Give back the messages of every open claim of a Spark consumer that will not come back: they become deliverable again; PQ005 if its query is running; returns how many';

-- The messages (and dead letters) of a queue with p_min_id <= id <= p_max_id, by id; changes nothing.
--
-- status is ready (expired leases too, as queue_stats counts them), scheduled, leased, claimed
-- (by a Spark consumer) or dead.
CREATE OR REPLACE FUNCTION pgqueue.spark_snapshot(
    p_queue        text,
    p_min_id       bigint,
    p_max_id       bigint,
    p_include_dead boolean DEFAULT false)
RETURNS TABLE (id bigint, status text, content bytea, content_type text, attempts integer,
               dequeue_at bigint, created_at bigint, locked_until bigint, last_error text,
               dead_at bigint, state bytea)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue._not_null(p_min_id IS NULL, 'p_min_id'::text);
    PERFORM pgqueue._not_null(p_max_id IS NULL, 'p_max_id'::text);
    -- (NULL was taken for false: dead letters left out of a snapshot that asked NULL, a review)
    PERFORM pgqueue._not_null(p_include_dead IS NULL, 'p_include_dead'::text);
    RETURN QUERY
    SELECT m.id,
           CASE WHEN m.claim_id IS NOT NULL THEN 'claimed'
                WHEN m.locked_until IS NULL AND m.dequeue_at <= v_now THEN 'ready'
                WHEN m.locked_until IS NULL THEN 'scheduled'
                WHEN m.locked_until <= v_now THEN 'ready'
                ELSE 'leased' END,
           m.content, m.content_type, m.attempts, m.dequeue_at, m.created_at, m.locked_until,
           m.last_error, NULL::bigint, m.state
      FROM pgqueue.message m
     WHERE m.id >= p_min_id AND m.id <= p_max_id AND m.queue_id = v_queue.id
     ORDER BY m.id;
    IF p_include_dead THEN
        RETURN QUERY
        SELECT d.id, 'dead'::text, d.content, d.content_type, d.attempts, d.dequeue_at,
               d.created_at, NULL::bigint, d.last_error, d.dead_at, d.state
          FROM pgqueue.dead_letter d
         WHERE d.id >= p_min_id AND d.id <= p_max_id AND d.queue_id = v_queue.id
         ORDER BY d.id;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_snapshot(text, bigint, bigint, boolean) IS
    'Messages of a queue with p_min_id <= id <= p_max_id and their status (ready, scheduled, leased, claimed; dead letters too if asked), by id; changes nothing';

-- The id range a snapshot of a queue covers: from the smallest to the largest live (and dead) id,
-- NULLs if the queue has no message (and, with p_include_dead, no dead letter): there is nothing
-- to read (Spark plans no partition then). Errors: PQ001/42602/22004 for the queue.
CREATE OR REPLACE FUNCTION pgqueue.spark_snapshot_range(p_queue text, p_include_dead boolean DEFAULT false)
RETURNS TABLE (min_id bigint, max_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    PERFORM pgqueue._not_null(p_include_dead IS NULL, 'p_include_dead'::text);  -- (NULL was taken for false)
    -- whether the queue holds anything: a probe of each partial index of its messages (leased
    -- or not) and, if asked, of its dead letters. (The range below is every queue's: an empty
    -- queue got the range of the others, a snapshot of it scanned their ids for nothing.)
    IF NOT (EXISTS (SELECT FROM pgqueue.message m WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL)
            OR EXISTS (SELECT FROM pgqueue.message m WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL)
            OR (p_include_dead
                AND EXISTS (SELECT FROM pgqueue.dead_letter d WHERE d.queue_id = v_queue.id))) THEN
        RETURN QUERY SELECT NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    -- two probes of each primary key; the range is shared by every queue, the scans filter
    -- (a STABLE function: its statements, the probes above too, read the caller's snapshot)
    RETURN QUERY
    SELECT CASE WHEN p_include_dead
                THEN least((SELECT min(m.id) FROM pgqueue.message m),
                           (SELECT min(d.id) FROM pgqueue.dead_letter d))
                ELSE (SELECT min(m.id) FROM pgqueue.message m) END,
           CASE WHEN p_include_dead
                THEN greatest((SELECT max(m.id) FROM pgqueue.message m),
                              (SELECT max(d.id) FROM pgqueue.dead_letter d))
                ELSE (SELECT max(m.id) FROM pgqueue.message m) END;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_snapshot_range(text, boolean) IS
    'The id range [min_id, max_id] that a snapshot of the queue covers (NULLs if the queue has nothing to read); planned once, split into partitions';

-- Spark writes carry message groups and idempotency keys (groupColumn, keyColumn; issue 14).
ALTER TABLE pgqueue.spark_staging ADD COLUMN group_key text, ADD COLUMN idem_key text;

-- Stage rows of one Spark task attempt; p_first numbers them (p_first, p_first + 1, ...).
--
-- Per row: a due time (epoch ms) or a delay (ms from publication), a message group and an
-- idempotency key (as message_create_batch's p_groups and p_keys; checked again at publication,
-- where a group needs a queue with groups). Errors: 22004 (NULL argument or content), 22023
-- (array lengths, negative delay, a row with both a due time and a delay, a group or key that is
-- empty or longer than 200 characters, rows staged already).
DROP FUNCTION pgqueue.spark_stage(uuid, integer, bigint, bigint, bytea[], text, bigint[], bigint[]);
CREATE FUNCTION pgqueue.spark_stage(
    p_write_id     uuid,
    p_partition    integer,
    p_attempt      bigint,
    p_first        bigint,
    p_contents     bytea[],
    p_content_type text     DEFAULT NULL,
    p_dequeue_ats  bigint[] DEFAULT NULL,
    p_delays_ms    bigint[] DEFAULT NULL,
    p_groups       text[]   DEFAULT NULL,
    p_keys         text[]   DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_n integer := cardinality(p_contents);
BEGIN
    PERFORM pgqueue._not_null(p_write_id IS NULL, 'p_write_id'::text);
    PERFORM pgqueue._not_null(p_partition IS NULL, 'p_partition'::text);
    PERFORM pgqueue._not_null(p_attempt IS NULL, 'p_attempt'::text);
    PERFORM pgqueue._not_null(p_first IS NULL, 'p_first'::text);
    PERFORM pgqueue._not_null(p_contents IS NULL, 'p_contents'::text);
    IF p_first < 0 OR (v_n > 0 AND p_first - 1 > 9223372036854775807 - v_n) THEN
        RAISE EXCEPTION 'p_first must be >= 0 and number every row within bigint, got % for % row(s)', p_first, v_n
            USING ERRCODE = '22023';
    END IF;
    IF array_ndims(p_contents) > 1 OR array_ndims(p_dequeue_ats) > 1 OR array_ndims(p_delays_ms) > 1
       OR array_ndims(p_groups) > 1 OR array_ndims(p_keys) > 1 THEN
        RAISE EXCEPTION 'batch arrays must be one-dimensional'
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_contents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message content must not be NULL (element %)', array_position(p_contents, NULL)
            USING ERRCODE = '22004',
                  HINT = 'Send an empty bytea for an empty message.';
    END IF;
    IF cardinality(p_dequeue_ats) <> v_n OR cardinality(p_delays_ms) <> v_n THEN
        RAISE EXCEPTION 'p_dequeue_ats and p_delays_ms must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_delays_ms) AS u(d) WHERE u.d < 0) THEN
        RAISE EXCEPTION 'delays must be >= 0 ms'
            USING ERRCODE = '22023';
    END IF;
    IF p_dequeue_ats IS NOT NULL AND p_delays_ms IS NOT NULL
       AND EXISTS (SELECT 1 FROM unnest(p_dequeue_ats, p_delays_ms) AS u(a, d)
                    WHERE u.a IS NOT NULL AND u.d IS NOT NULL) THEN
        RAISE EXCEPTION 'row % has both a due time and a delay',
                        (SELECT min(u.n) FROM unnest(p_dequeue_ats, p_delays_ms) WITH ORDINALITY AS u(a, d, n)
                          WHERE u.a IS NOT NULL AND u.d IS NOT NULL)
            USING ERRCODE = '22023',
                  HINT = 'Give a row a due time (p_dequeue_ats) or a delay (p_delays_ms), not both.';
    END IF;
    IF cardinality(p_groups) <> v_n OR cardinality(p_keys) <> v_n THEN
        RAISE EXCEPTION 'p_groups and p_keys must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    -- the first bad group or key raises (22023), as message_create_batch would at publication
    PERFORM pgqueue._check_message_key(u.g, 'message group'::text)
       FROM unnest(p_groups) AS u(g) WHERE u.g = '' OR length(u.g) > 200;
    PERFORM pgqueue._check_message_key(u.k, 'idempotency key'::text)
       FROM unnest(p_keys) AS u(k) WHERE u.k = '' OR length(u.k) > 200;
    BEGIN
        INSERT INTO pgqueue.spark_staging (write_id, partition, attempt, n, dequeue_at, delay_ms,
                                           staged_at, content, content_type, group_key, idem_key)
        SELECT p_write_id, p_partition, p_attempt, p_first + (u.ord - 1), u.dequeue_at, u.delay_ms,
               pgqueue.to_epoch(now()), u.content, p_content_type, u.grp, u.key
          FROM unnest(p_contents, p_dequeue_ats, p_delays_ms, p_groups, p_keys)
               WITH ORDINALITY AS u(content, dequeue_at, delay_ms, grp, key, ord);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'rows % to % of partition % attempt % of write % are staged already',
                        p_first, p_first + (v_n - 1), p_partition, p_attempt, p_write_id
            USING ERRCODE = '22023',
                  HINT = 'Number the rows of an attempt once (p_first); a retried task is a new attempt.';
    END;
    RETURN v_n;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_stage(uuid, integer, bigint, bigint, bytea[], text, bigint[], bigint[], text[], text[]) IS
    'Stage messages of one Spark task attempt (write_id, partition, attempt), numbered from p_first, until spark_publish; one content type, per-message due times (epoch ms), delays (ms from publication), message groups and idempotency keys';

-- Delete staging rows staged before p_before (epoch ms): writes whose driver died.
CREATE OR REPLACE FUNCTION pgqueue.spark_staging_purge(p_before bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    PERFORM pgqueue._not_null(p_before IS NULL, 'p_before'::text);
    DELETE FROM pgqueue.spark_staging s WHERE s.staged_at < p_before;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_staging_purge(bigint) IS
    'Delete staging rows staged before p_before (epoch ms), left by Spark jobs whose driver died; returns how many';

-- queue_stats: counts exact up to 10,000, estimated above (0.3 counted everything); the
-- exact count moves to queue_stats_exact.
-- Count a queue's messages by state, cheaply enough to be called every second beside full load:
-- each count is exact up to 10,000 (a count that stops there, through the index its state has);
-- a larger one is estimated from a block sample of the table (TABLESAMPLE SYSTEM of 2,048 pages,
-- 16 MB, at least 1% of the table, or the whole table if it is smaller; the fewer pages a
-- queue's messages fill, the larger the error: README), one sample for all the queues that need it (a
-- sample each cost a scrape of ten large queues ten times as much). pgqueue.queue_stats_exact
-- counts everything.
-- Counting a million messages exactly takes 0.25-1 s of a core (more for wider rows: README).
--
-- oldest_ready_age_ms is how long the ready message that has waited longest has waited, not
-- the next one's: a message waits from greatest(dequeue_at, created_at) (a prioritised or
-- past-dated one from its creation, though it sits ahead of the others), an expired lease from
-- when it ran out. A fresh prioritised message at the head must not hide a backlog that waits
-- behind it, nor leases that ran out with no consumer left to take them back, which are what an
-- alert on this age is for. The walk in (dequeue_at, id) order stops at the first message with
-- dequeue_at >= created_at: every later one waits from its dequeue_at or later, so none has
-- waited longer. One row unless prioritised or past-dated messages are ahead; at most c_ahead
-- of them are read (then from the first one that is not prioritised again), so the age is exact
-- unless more than 1,000 such messages are ready, and then a lower bound.
-- enable_seqscan is off, as in message_complete: the loop's statements go to a generic plan after
-- five queues, planned for any queue, and when one queue held most of a table of small rows that
-- plan of the dead letters' capped count was a scan of the whole table, for every queue (300
-- queues, 20,000 dead letters in one: a scrape took 190 ms instead of 9, a review). The samples
-- are sample scans, which the setting leaves alone.
CREATE OR REPLACE FUNCTION pgqueue.queue_stats(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, dead bigint,
               oldest_ready_age_ms bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
#variable_conflict use_column
DECLARE
    c_cap     CONSTANT bigint := 10000;
    v_now     bigint := pgqueue.now_ms();
    v_q       record;
    v_ready   bigint;
    v_expired bigint;
    v_sched   bigint;
    v_leased  bigint;
    v_dead    bigint;
    v_oldest  bigint;
    c_ahead   CONSTANT integer := 1000;
    v_from    bigint;
    v_n       integer;
    v_more    boolean;
    v_m       record;
    v_pct     float8;       -- the sample of pgqueue.message, once taken
    v_ids     integer[];    -- its queues, and their sampled rows by state
    v_s_ready   bigint[];
    v_s_expired bigint[];
    v_s_sched   bigint[];
    v_s_leased  bigint[];
    v_i       integer;
    v_pct_dead float8;      -- the sample of pgqueue.dead_letter
    v_dead_ids integer[];
    v_s_dead  bigint[];
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    FOR v_q IN SELECT q.id, q.name FROM pgqueue.queue q
                WHERE p_queue IS NULL OR q.name = p_queue ORDER BY q.name LOOP
        SELECT (SELECT count(*) FROM (SELECT FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now
                 LIMIT c_cap + 1) s),
               (SELECT count(*) FROM (SELECT FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now
                 LIMIT c_cap + 1) s),
               (SELECT count(*) FROM (SELECT FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NULL AND m.dequeue_at > v_now
                 LIMIT c_cap + 1) s),
               (SELECT count(*) FROM (SELECT FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NOT NULL AND m.locked_until > v_now
                 LIMIT c_cap + 1) s),
               (SELECT count(*) FROM (SELECT FROM pgqueue.dead_letter d
                 WHERE d.queue_id = v_q.id LIMIT c_cap + 1) s),
               (SELECT v_now - m.locked_until FROM pgqueue.message m
                 WHERE m.queue_id = v_q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now
                 ORDER BY m.locked_until, m.id LIMIT 1)
          INTO v_ready, v_expired, v_sched, v_leased, v_dead, v_oldest;
        v_from := -9223372036854775808;
        LOOP
            v_n := 0;
            v_more := false;
            FOR v_m IN SELECT m.dequeue_at, m.created_at FROM pgqueue.message m
                        WHERE m.queue_id = v_q.id AND m.locked_until IS NULL
                          AND m.dequeue_at >= v_from AND m.dequeue_at <= v_now
                        ORDER BY m.dequeue_at, m.id LIMIT c_ahead LOOP
                v_n := v_n + 1;
                v_oldest := greatest(v_oldest, v_now - greatest(v_m.dequeue_at, v_m.created_at));
                EXIT WHEN v_m.dequeue_at >= v_m.created_at;
                -- c_ahead prioritised messages read: the first of the others next
                v_more := v_n = c_ahead AND v_m.dequeue_at < 0;
            END LOOP;
            EXIT WHEN NOT v_more;
            v_from := 0;
        END LOOP;
        IF greatest(v_ready, v_expired, v_sched, v_leased) > c_cap THEN
            IF v_pct IS NULL THEN
                -- one sample for every queue above the bound, taken for the first: 2,048 pages
                -- of the table, at least 1%; each sampled row stands for 100/pct
                v_pct := least(100, greatest(1, 204800.0 / greatest(1, pg_relation_size('pgqueue.message') / 8192)));
                SELECT array_agg(s.queue_id), array_agg(s.ready), array_agg(s.expired),
                       array_agg(s.sched), array_agg(s.leased)
                  INTO v_ids, v_s_ready, v_s_expired, v_s_sched, v_s_leased
                  FROM (SELECT m.queue_id,
                               count(*) FILTER (WHERE m.locked_until IS NULL AND m.dequeue_at <= v_now) AS ready,
                               count(*) FILTER (WHERE m.locked_until <= v_now) AS expired,
                               count(*) FILTER (WHERE m.locked_until IS NULL AND m.dequeue_at > v_now) AS sched,
                               count(*) FILTER (WHERE m.locked_until > v_now) AS leased
                          FROM pgqueue.message m TABLESAMPLE SYSTEM (v_pct)
                         WHERE p_queue IS NULL OR m.queue_id = v_q.id
                         GROUP BY m.queue_id) s;
            END IF;
            v_i := array_position(v_ids, v_q.id);  -- NULL (no row sampled): 0
            IF v_ready > c_cap THEN
                v_ready := greatest(c_cap + 1, round(coalesce(v_s_ready[v_i], 0) * 100 / v_pct)::bigint);
            END IF;
            IF v_expired > c_cap THEN
                v_expired := greatest(c_cap + 1, round(coalesce(v_s_expired[v_i], 0) * 100 / v_pct)::bigint);
            END IF;
            IF v_sched > c_cap THEN
                v_sched := greatest(c_cap + 1, round(coalesce(v_s_sched[v_i], 0) * 100 / v_pct)::bigint);
            END IF;
            IF v_leased > c_cap THEN
                v_leased := greatest(c_cap + 1, round(coalesce(v_s_leased[v_i], 0) * 100 / v_pct)::bigint);
            END IF;
        END IF;
        IF v_dead > c_cap THEN
            IF v_pct_dead IS NULL THEN
                v_pct_dead := least(100, greatest(1, 204800.0 / greatest(1, pg_relation_size('pgqueue.dead_letter') / 8192)));
                SELECT array_agg(s.queue_id), array_agg(s.n) INTO v_dead_ids, v_s_dead
                  FROM (SELECT d.queue_id, count(*) AS n
                          FROM pgqueue.dead_letter d TABLESAMPLE SYSTEM (v_pct_dead)
                         WHERE p_queue IS NULL OR d.queue_id = v_q.id
                         GROUP BY d.queue_id) s;
            END IF;
            v_dead := greatest(c_cap + 1,
                               round(coalesce(v_s_dead[array_position(v_dead_ids, v_q.id)], 0) * 100 / v_pct_dead)::bigint);
        END IF;
        queue := v_q.name;
        ready := v_ready + v_expired;
        scheduled := v_sched;
        leased := v_leased;
        dead := v_dead;
        oldest_ready_age_ms := v_oldest;
        RETURN NEXT;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_stats(text) IS
    'Per queue: ready (incl. expired leases), scheduled, leased and dead counts (exact up to 10,000 each, estimated from a sample above: see queue_stats_exact), and how long the ready message that has waited longest has waited (ms; expired leases since they ran out)';

-- Count a queue's messages by state, all of them: what queue_stats returns, with no estimate.
-- It reads every live message of the queue (0.25-1 s of a core for a million), so it is for
-- checks and tests, not for a monitor that polls. oldest_ready_age_ms as in queue_stats: how
-- long the ready message that has waited longest has waited, from greatest(dequeue_at,
-- created_at), or an expired lease from when it ran out; here over every ready message.
CREATE FUNCTION pgqueue.queue_stats_exact(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, dead bigint,
               oldest_ready_age_ms bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint := pgqueue.now_ms();
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name,
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now)
         + (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now),
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at > v_now),
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NOT NULL AND m.locked_until > v_now),
           (SELECT count(*) FROM pgqueue.dead_letter d WHERE d.queue_id = q.id),
           greatest((SELECT v_now - min(greatest(m.dequeue_at, m.created_at)) FROM pgqueue.message m
                      WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now),
                    (SELECT v_now - min(m.locked_until) FROM pgqueue.message m
                      WHERE m.queue_id = q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now))
      FROM pgqueue.queue q
     WHERE p_queue IS NULL OR q.name = p_queue
     ORDER BY q.name;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_stats_exact(text) IS
    'Per queue: ready (incl. expired leases), scheduled, leased and dead counts, all exact (reads every live message; queue_stats estimates counts above 10,000), and how long the ready message that has waited longest has waited (ms; expired leases since they ran out)';

-------------------------------------------------------------------------------
-- Triggers
-------------------------------------------------------------------------------

-- message_placed_low: below, after the message groups' columns (its WHEN clause reads write_mark).

-------------------------------------------------------------------------------
-- Gone: the advisory-lock helpers and the polymorphic _not_null
-------------------------------------------------------------------------------

DROP FUNCTION pgqueue._queue_lock_shared(integer);
DROP FUNCTION pgqueue._spark_queue_lock(text, boolean);
DROP FUNCTION pgqueue._not_null(anyelement, text);

-------------------------------------------------------------------------------
-- #16 worker and client: cancel and peek by id, text and JSON entry points
-------------------------------------------------------------------------------

-- Cancel (delete) pending messages of a queue by id; returns the messages removed.
--
-- Pending: ready, scheduled or with an expired lease. A message under a live lease is being
-- handled and stays (its consumer settles it); so does one held by a Spark claim. Ids that are
-- not pending in the queue are skipped: compare what comes back with what was asked. Takes
-- the queue's lock before the rows, like every other writer (docs/locking.md); a row that a
-- concurrent dequeue is leasing is waited for, then left alone when the lease took it (on a
-- queue with message groups, by attempts a few milliseconds apart: below). Errors, before
-- anything is done: 22004 for a NULL p_ids or a NULL element in it, 22023 for p_ids of two
-- dimensions, 22004/42602/PQ001 for the queue.
CREATE FUNCTION pgqueue.message_cancel(p_queue text, p_ids bigint[])
RETURNS TABLE (id bigint, content bytea, content_type text, attempts integer, dequeue_at bigint,
               created_at bigint, locked_until bigint, state bytea, last_error text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint;
    v_rows  pgqueue.message[];
    v_row   pgqueue.message;
    v_left  boolean;
    v_ids   bigint[];
    v_group text;
    v_held  boolean;
    v_rows_step boolean;   -- the attempt is past the groups' locks
    v_tries integer := 0;
    v_started timestamptz;
    v_wait  interval;
BEGIN
    IF p_ids IS NULL THEN
        PERFORM pgqueue._not_null(true, 'p_ids'::text);
    END IF;
    IF array_ndims(p_ids) > 1 THEN
        RAISE EXCEPTION 'p_ids must be a one-dimensional array' USING ERRCODE = '22023';
    END IF;
    IF array_position(p_ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_ids must not contain NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM pgqueue._queue_lock(v_queue.id);
    -- the rows locked in id order, as the batches of leases lock theirs (docs/locking.md,
    -- rule 8: an expired lease is both a batch heartbeat's and a cancel's): a DELETE by
    -- id = ANY planned as a Bitmap Heap Scan locked them in their order in the table, and a
    -- review made it deadlock with message_heartbeat_batch.
    --
    -- On a queue with groups (READ COMMITTED) the listed groups' locks first, in the stripes'
    -- order, then the rows without waiting for any (NOWAIT); a row locked by another
    -- transaction gives the locks of the attempt back (a subtransaction) and the attempt is made
    -- again a little later. A cancel thus never waits for a row while it holds a group's lock,
    -- nor for a group's lock while it holds a row: a hand-off takes its group's lock and then
    -- the waiting message it gives the turn to, a consumer the row it takes and then the
    -- group's lock. Locked with the rest first, a waiting message deadlocked with a batch that
    -- held another listed group's lock and handed the message's group its turn (a review: 151
    -- in 2,000 races with message_complete_batch, specs/cancel_group_lock_order.spec); locked
    -- under its group's lock with a wait, with a take of it once it had its turn, and with a
    -- second cancel (a review of that fix). The hand-offs below take no lock out of the
    -- stripes' order: every listed group's is held.
    IF v_queue.group_concurrency IS NOT NULL
       AND current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        v_started := clock_timestamp();
        v_wait := current_setting('lock_timeout')::interval;
        LOOP
            v_rows_step := false;
            BEGIN
                FOR v_group IN
                    SELECT DISTINCT ON (hashtext(l.group_key) & 255) l.group_key
                      FROM pgqueue.message l
                     WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.group_key IS NOT NULL
                     ORDER BY hashtext(l.group_key) & 255 LOOP
                    v_held := pgqueue._message_group_lock(v_queue.id, v_group);  -- (true under READ COMMITTED)
                END LOOP;
                v_rows_step := true;
                v_now := pgqueue.now_ms();
                v_ids := ARRAY(SELECT l.id FROM pgqueue.message l
                                WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.claim_id IS NULL
                                  AND (l.locked_until IS NULL OR l.locked_until <= v_now)
                                ORDER BY l.id
                                  FOR UPDATE NOWAIT);
                EXIT;
            EXCEPTION WHEN lock_not_available THEN
                -- a group's lock that lock_timeout gave up on is the caller's error; a row
                -- another transaction holds is tried again, within lock_timeout if set
                IF NOT v_rows_step OR (v_wait > interval '0' AND clock_timestamp() - v_started >= v_wait) THEN
                    RAISE;
                END IF;
            END;
            v_tries := v_tries + 1;
            -- at most about half a second of attempts (an xid each): a row held longer (a
            -- consumer's open transaction that took it, or a lock cycle through the caller's
            -- other locks, which sleeping hid from the deadlock detector: a review) is waited
            -- for as on a queue without groups, holding no group's lock, and the hand-offs below
            -- take theirs after the rows, as before session 54 (the detector sees that wait)
            EXIT WHEN v_tries >= 25;  -- (v_ids still NULL: below)
            PERFORM pg_sleep(least(0.05, 0.001 * v_tries));
        END LOOP;
    END IF;
    IF v_ids IS NULL THEN  -- no groups, REPEATABLE READ, or the attempts above gave up
        v_now := pgqueue.now_ms();
        v_ids := ARRAY(SELECT l.id FROM pgqueue.message l
                        WHERE l.id = ANY (p_ids) AND l.queue_id = v_queue.id AND l.claim_id IS NULL
                          AND (l.locked_until IS NULL OR l.locked_until <= v_now)
                        ORDER BY l.id
                          FOR UPDATE);
    END IF;
    WITH d AS (
        DELETE FROM pgqueue.message m
         WHERE m.id = ANY (v_ids)
           AND m.queue_id = v_queue.id AND m.claim_id IS NULL
           AND (m.locked_until IS NULL OR m.locked_until <= v_now)
        RETURNING m AS r)
    SELECT coalesce(array_agg(d.r ORDER BY (d.r).id), '{}') INTO v_rows FROM d;
    -- keys to keep for the queue's window, turns to pass on (pgqueue._message_left), in the
    -- order of the groups' lock stripes, as every call that hands turns on takes the groups'
    -- locks (pgqueue._message_group_locks): in the order of the ids, a cancel deadlocked
    -- with a batch of producers
    FOR v_row IN SELECT * FROM unnest(v_rows) AS r ORDER BY hashtext(r.group_key) & 255, r.id LOOP
        IF v_row.idem_key IS NOT NULL OR (v_row.group_key IS NOT NULL AND v_row.turn_at IS NOT NULL) THEN
            v_left := pgqueue._message_left(v_queue.id, v_row.id, v_row.group_key, v_row.turn_at,
                                            v_row.idem_key);
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT r.id, r.content, r.content_type, r.attempts, r.dequeue_at, r.created_at,
           r.locked_until, r.state, r.last_error
      FROM unnest(v_rows) AS r ORDER BY r.id;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_cancel(text, bigint[]) IS
    'Cancel (delete) pending messages of a queue by id (ready, scheduled or with an expired lease; never one under a live lease or a Spark claim); returns the messages removed, by id';

-- Read up to p_limit messages of a queue without leasing them, in the order dequeue would
-- hand them out: expired leases first (by lease expiry), then ready and scheduled messages by
-- (dequeue_at, id). Messages under a live lease (being handled) are not shown.
--
-- Two bounded index probes, as in dequeue: message_leased_idx for the expired leases, then
-- message_ready_idx for the room left; nothing is locked and nothing changes. A message that
-- an in-progress dequeue is leasing may still be shown; an expired lease that ran out
-- max_attempts times is shown, though the next dequeue moves it to the dead letters.
CREATE FUNCTION pgqueue.message_peek(p_queue text DEFAULT 'default', p_limit integer DEFAULT 10)
RETURNS TABLE (id bigint, content bytea, content_type text, attempts integer, dequeue_at bigint,
               created_at bigint, locked_until bigint, state bytea, last_error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint := pgqueue.now_ms();
    v_found bigint;
BEGIN
    IF p_limit IS NULL THEN
        PERFORM pgqueue._not_null(true, 'p_limit'::text);
    END IF;
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT m.id, m.content, m.content_type, m.attempts, m.dequeue_at, m.created_at,
           m.locked_until, m.state, m.last_error
      FROM pgqueue.message m
     WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now
     ORDER BY m.locked_until, m.id
     LIMIT p_limit;
    GET DIAGNOSTICS v_found = ROW_COUNT;
    IF v_found < p_limit THEN
        RETURN QUERY
        SELECT m.id, m.content, m.content_type, m.attempts, m.dequeue_at, m.created_at,
               m.locked_until, m.state, m.last_error
          FROM pgqueue.message m
         WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL
         ORDER BY m.dequeue_at, m.id
         LIMIT p_limit - v_found;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_peek(text, integer) IS
    'Read up to p_limit messages of a queue without leasing them, in delivery order (expired leases, then ready and scheduled by dequeue_at, id); two index probes, nothing locked';

-- Enqueue a text message; returns its id. For drivers that send strings: the text is stored
-- as UTF-8 bytes exactly as given, with no bytea escape parsing (a string passed as bytea is
-- read as bytea's text form, so '\x4869' would become 'Hi' and '\\' one backslash).
-- p_content_type says what the text is (default plain text, 'text/plain; charset=utf-8', also
-- when NULL: drivers bind every parameter; 'application/json' for JSON kept byte for byte). It
-- is stored as given, but a charset it names must describe the bytes stored, which are UTF-8: a
-- charset parameter (any case, spaces and double quotes around the value ignored, as
-- pgqueue.codec.media_type reads it) must be utf-8, utf8 or utf_8 in any case, or us-ascii,
-- ascii or us_ascii when the text is ASCII (a producer that copies an incoming Content-Type);
-- any other, an ASCII label on a text outside ASCII, or a quoted value with a quote, a
-- backslash or a semicolon inside, is refused with 22023.
-- A content type without a charset is kept as it is (readers take UTF-8 for text/* then).
-- Text in another charset goes to message_create as bytes, with its content type.
-- p_group and p_key are message_create's: the message group and the idempotency key, with its
-- errors (22023 for an empty or over-long one, or a group on a queue without groups).
CREATE FUNCTION pgqueue.message_create_text(
    p_queue        text,
    p_content      text,
    p_dequeue_at   bigint DEFAULT NULL,
    p_content_type text   DEFAULT 'text/plain; charset=utf-8',
    p_group        text   DEFAULT NULL,
    p_key          text   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_charset text;
    v_bytes   bytea := convert_to(p_content, 'UTF8'::name);
    v_ascii   boolean;
BEGIN
    -- the parameters after the media type: "; name=value" (a parameter without "=" is no
    -- parameter), split at every ";", where pgqueue.codec splits only outside quoted values. So
    -- that this check is never laxer than the codec, a charset's value must be a plain token or
    -- one quoted string without quotes or backslashes inside ('"utf-8"'): then it ends where the
    -- codec's ends. Any other (an unclosed quote, which a ";" inside it would have cut here:
    -- 'charset="utf-8;sig"' accepted, the codec read "utf-8;sig", Python's utf_8_sig, and
    -- dropped a byte-order mark; a review) is refused as a charset it cannot read. A charset
    -- written inside another parameter's quoted value is read here, not by the codec: refused
    -- too (stricter). Read only when a charset may be named and the content type is not the
    -- default (a simple expression, no query, for most calls).
    IF p_content_type IS DISTINCT FROM 'text/plain; charset=utf-8'
       AND strpos(lower(p_content_type), 'charset') > 0 THEN
        -- ASCII: no character (no byte, in a SQL_ASCII database) above 127
        -- (an E'' literal: a plain one with a backslash warned under standard_conforming_strings
        -- = off, a review)
        v_ascii := p_content !~ E'[^\\x01-\\x7f]';
        SELECT CASE WHEN p.raw ~ E'^("[^"\\\\]*"|[^"\\\\]*)$' THEN btrim(p.raw, '"') ELSE p.raw END INTO v_charset
          FROM unnest((string_to_array(p_content_type, ';'))[2:]) AS i(item)
               CROSS JOIN LATERAL (SELECT btrim(substr(i.item, strpos(i.item, '=') + 1), E' \t\r\n\f\v') AS raw) AS p
         WHERE strpos(i.item, '=') > 0
           AND lower(btrim(substr(i.item, 1, strpos(i.item, '=') - 1), E' \t\r\n\f\v')) = 'charset'
           AND (p.raw !~ E'^("[^"\\\\]*"|[^"\\\\]*)$'
                OR (lower(btrim(p.raw, '"')) NOT IN ('utf-8', 'utf8', 'utf_8')
                    AND NOT (v_ascii AND lower(btrim(p.raw, '"')) IN ('us-ascii', 'ascii', 'us_ascii'))))
         LIMIT 1;
    END IF;
    IF v_charset IS NOT NULL THEN
        RAISE EXCEPTION 'content type % names charset %, but message_create_text stores the text as UTF-8%',
                        quote_literal(left(p_content_type, 200))
                        || CASE WHEN length(p_content_type) > 200
                             THEN format(' (%s characters)', length(p_content_type)) ELSE '' END,
                        quote_literal(left(v_charset, 100))
                        || CASE WHEN length(v_charset) > 100 THEN format(' (%s characters)', length(v_charset)) ELSE '' END,
                        CASE WHEN lower(v_charset) IN ('us-ascii', 'ascii', 'us_ascii')
                             THEN ' and the text is not ASCII' ELSE '' END
            USING ERRCODE = '22023',
                  HINT = 'Name charset=utf-8, or no charset; to store bytes in another charset, pass them to pgqueue.message_create with their content type.';
    END IF;
    RETURN pgqueue.message_create(p_queue, v_bytes, p_dequeue_at,
                                  coalesce(p_content_type, 'text/plain; charset=utf-8'), p_group, p_key);
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create_text(text, text, bigint, text, text, text) IS
    'Enqueue a text message stored as UTF-8 exactly as given (no bytea escapes), content type text/plain; charset=utf-8 by default (also for NULL), a charset other than UTF-8 refused (22023; us-ascii taken for ASCII text); p_group: its message group, p_key: idempotency key (the live message''s id if taken); returns the id';

-- Enqueue a JSON message; returns its id. The value is stored as its jsonb text in UTF-8 with
-- content type application/json (jsonb normalises key order and spacing; send the text to
-- message_create_text with 'application/json' to keep it byte for byte).
-- p_task names the task that a worker's task registry dispatches the message to: it is kept
-- in the content type, 'application/json; task=<p_task>' (the name in double quotes when it
-- holds a ':'), which any producer can also write.
-- Raises 22023 for a task name outside [A-Za-z0-9_.:-] (1 to 200 characters). p_group and
-- p_key are message_create's: the message group and the idempotency key, with its errors
-- (22023 for an empty or over-long one, or a group on a queue without groups).
CREATE FUNCTION pgqueue.message_create_json(
    p_queue      text,
    p_content    jsonb,
    p_dequeue_at bigint DEFAULT NULL,
    p_task       text   DEFAULT NULL,
    p_group      text   DEFAULT NULL,
    p_key        text   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_task IS NOT NULL AND p_task !~ '^[A-Za-z0-9_.:-]{1,200}$' THEN
        -- (its first 100 characters: a 10-MB name was echoed whole, a review)
        RAISE EXCEPTION 'invalid task name %', pg_catalog.quote_literal(pg_catalog.left(p_task, 100))
                        || CASE WHEN pg_catalog.length(p_task) > 100
                             THEN pg_catalog.format(' (%s characters)', pg_catalog.length(p_task)) ELSE '' END
            USING ERRCODE = '22023',
                  HINT = 'A task name has 1 to 200 characters from A-Z a-z 0-9 _ . : -.';
    END IF;
    RETURN pgqueue.message_create(p_queue, pg_catalog.convert_to(p_content::text, 'UTF8'::name), p_dequeue_at,
                                  CASE WHEN p_task IS NULL THEN 'application/json'
                                       -- (quoted when it holds a ':', which a MIME parameter's
                                       -- token may not: the Python client writes the same)
                                       WHEN strpos(p_task, ':') > 0 THEN 'application/json; task="' || p_task || '"'
                                       ELSE 'application/json; task=' || p_task END,
                                  p_group, p_key);
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create_json(text, jsonb, bigint, text, text, text) IS
    'Enqueue a JSON message (content type application/json, with task=<p_task> if given); p_group: its message group, p_key: idempotency key (the live message''s id if taken); returns the id';


-- #16 worker and client: reject (dead-letter now), for the task registry

-- Reject a leased message for good: move it to the dead letters now, whatever max_attempts says
-- (for a message no retry can fix: malformed, or naming a task no worker knows). p_error is
-- stored as its last_error (NULL keeps the last one). False, and nothing changes, if the token
-- is stale, as for message_fail.
CREATE FUNCTION pgqueue.message_reject(p_id bigint, p_attempts integer, p_error text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id IS NULL, 'message id'::text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts token'::text);
    END IF;
    -- the queue's lock stripe before the row lock (docs/locking.md)
    PERFORM pgqueue._queue_lock(m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    PERFORM FROM pgqueue.message m
     WHERE m.id = p_id AND m.attempts = p_attempts AND pgqueue._leased(m.locked_until)
       AND m.claim_id IS NULL
       FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pgqueue._dead_letter(p_id, p_error, pgqueue.now_ms());
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_reject(bigint, integer, text) IS
    'Reject a leased message: move it to the dead letters now with p_error as its last_error, whatever max_attempts says; false if the token is stale';

-------------------------------------------------------------------------------
-- #16 worker and client: periodic schedules
-------------------------------------------------------------------------------

CREATE SEQUENCE pgqueue.schedule_id_seq AS integer;

-- Periodic messages: each row enqueues its content on its queue at every slot of its interval
-- or cron expression (UTC). pgqueue.schedule_run() enqueues the due slots; next_run is the next
-- slot not yet enqueued, advanced in the transaction that enqueues, under the row's lock, so a
-- slot is enqueued once however many schedulers run (docs: README "Periodic jobs").
CREATE TABLE pgqueue.schedule (
    id           integer     NOT NULL DEFAULT pg_catalog.nextval('pgqueue.schedule_id_seq'),
    name         text        NOT NULL,
    queue_id     integer     NOT NULL,
    every_ms     bigint,
    cron         text,
    content      bytea       NOT NULL,
    content_type text,
    missed       text        NOT NULL DEFAULT 'latest',
    next_run     bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_run     bigint,
    CONSTRAINT schedule_pkey PRIMARY KEY (id),
    CONSTRAINT schedule_name_key UNIQUE (name),
    CONSTRAINT schedule_kind_check CHECK ((every_ms IS NULL) <> (cron IS NULL)),
    CONSTRAINT schedule_every_check CHECK (every_ms IS NULL OR every_ms >= 1000),
    CONSTRAINT schedule_missed_check CHECK (missed IN ('latest', 'all'))
);
ALTER SEQUENCE pgqueue.schedule_id_seq OWNED BY pgqueue.schedule.id;
-- Due schedules by next_run; and a queue's schedules, which queue_drop deletes. (No foreign key to
-- pgqueue.queue: both are extension configuration tables, whose data a parallel pg_restore (-j)
-- loads in any order with the key already in place, and the schedules failed to load. The key's
-- guarantees are kept by schedule_create, which locks the queue's row, and queue_drop.)
CREATE INDEX schedule_next_run_idx ON pgqueue.schedule (next_run);
CREATE INDEX schedule_queue_idx ON pgqueue.schedule (queue_id);
-- The schedules that a run which read a later clock advanced: found after the server's clock was
-- set back (pgqueue.schedule_run), an index probe that finds nothing otherwise.
CREATE INDEX schedule_last_run_idx ON pgqueue.schedule (last_run);

COMMENT ON TABLE pgqueue.schedule IS 'pgqueue: periodic messages (interval or cron, UTC); change them with schedule_create/schedule_drop, enqueue due slots with schedule_run';
COMMENT ON COLUMN pgqueue.schedule.next_run IS 'epoch ms of the next slot not yet enqueued';
COMMENT ON COLUMN pgqueue.schedule.last_run IS 'epoch ms (the clock when it began) of the schedule_run that last set next_run; NULL: none yet';
COMMENT ON COLUMN pgqueue.schedule.missed IS 'slots missed while no scheduler ran: latest = one message for them all, all = one per slot';

SELECT pg_catalog.pg_extension_config_dump('pgqueue.schedule', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.schedule_id_seq', '');

-- The values a field of a cron expression allows, from p_min to p_max: *, n, a-b, */s, a-b/s
-- and comma lists of those. NULL if the field is malformed or out of range.
CREATE FUNCTION pgqueue._cron_field(p_field text, p_min integer, p_max integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part  text;
    v_m     text[];
    v_lo    integer;
    v_hi    integer;
    v_step  integer;
    v_out   integer[] := '{}';
BEGIN
    FOREACH v_part IN ARRAY string_to_array(p_field, ',') LOOP
        -- (no backslash in a pattern: the body is parsed with the caller's standard_conforming_strings)
        v_m := regexp_match(v_part, '^([*]|([0-9]{1,2})(-([0-9]{1,2}))?)(/([0-9]{1,2}))?$');
        IF v_m IS NULL THEN
            RETURN NULL;
        END IF;
        IF v_m[1] = '*' THEN
            v_lo := p_min;
            v_hi := p_max;
        ELSE
            v_lo := v_m[2]::integer;
            v_hi := coalesce(v_m[4]::integer, CASE WHEN v_m[6] IS NULL THEN v_lo ELSE p_max END);
        END IF;
        v_step := coalesce(v_m[6]::integer, 1);
        IF v_lo < p_min OR v_hi > p_max OR v_lo > v_hi OR v_step < 1 THEN
            RETURN NULL;
        END IF;
        v_out := v_out || ARRAY(SELECT generate_series(v_lo, v_hi, v_step));
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT u FROM unnest(v_out) u ORDER BY u);
END;
$$;

-- The first minute strictly after p_after (epoch ms) that a five-field cron expression
-- (minute hour day-of-month month day-of-week, UTC; day-of-week 0-7 with 0 and 7 Sunday)
-- matches, in epoch ms. As in cron, when both day fields are restricted (neither starts with
-- '*') a day matching either is taken; otherwise a day must match both (so '*/2' in a day field
-- is its step, not "every day"). Raises 22023 for a malformed expression or one that matches no
-- day in 50 years (a February 29 that must be a given weekday can be 40 years away). The first
-- slot of pgqueue._cron_slots, which does the work.
CREATE FUNCTION pgqueue._cron_next(p_cron text, p_after bigint)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN (pgqueue._cron_slots(p_cron, p_after, 9223372036854775807, 1))[1];
END;
$$;

-- The minutes strictly after p_after (epoch ms) and at or before p_upto that a five-field cron
-- expression matches, in epoch ms, in order, at most p_limit of them (the rules of
-- pgqueue._cron_next, which is this function's first slot). The expression is parsed once and
-- each matching day's minutes come from one sorted list, so a catch-up of many slots
-- (pgqueue._schedule_fire, missed = 'all') costs a few microseconds a slot, where a
-- _cron_next call a slot parsed the expression every time (10,000 slots of '* * * * *': 5.3 s,
-- a review). Raises 22023 for a malformed expression, or one that matches no day in the 50
-- years after p_after (within p_upto: an empty array when p_upto comes first), as _cron_next
-- does; stops at the last slot found when the next is more than 50 years after it (a chain of
-- _cron_next calls would raise there); an empty array when p_limit < 1.
CREATE FUNCTION pgqueue._cron_slots(p_cron text, p_after bigint, p_upto bigint, p_limit integer)
RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    -- (no backslash in a pattern: the body is parsed with the caller's standard_conforming_strings)
    v_f      text[] := regexp_split_to_array(regexp_replace(p_cron, '^[[:space:]]+|[[:space:]]+$', '', 'g'), '[[:space:]]+');
    v_min    integer[];
    v_hour   integer[];
    v_dom    integer[];
    v_month  integer[];
    v_dow    integer[];
    v_hm     integer[];  -- the minutes of a matching day, h * 60 + m, in order
    v_any_dom boolean;
    v_any_dow boolean;
    v_t      timestamp := date_trunc('minute', to_timestamp(p_after / 1000.0) AT TIME ZONE 'UTC') + interval '1 minute';
    v_from   integer := extract(hour FROM v_t)::integer * 60 + extract(minute FROM v_t)::integer;
    v_day    date;
    v_base   bigint;
    v_slot   bigint;
    v_out    bigint[] := '{}';
    v_first  boolean := true;   -- the day of p_after: only its minutes after it
    v_gap    integer := 0;      -- days since the last slot (or p_after)
    v_match  boolean;
BEGIN
    IF cardinality(v_f) <> 5 THEN
        RAISE EXCEPTION 'invalid cron expression "%": expected 5 fields (minute hour day month weekday)', p_cron
            USING ERRCODE = '22023', HINT = 'For example ''*/15 * * * *'' (every 15 minutes) or ''0 3 * * 1'' (Mondays 03:00 UTC).';
    END IF;
    v_min := pgqueue._cron_field(v_f[1], 0, 59);
    v_hour := pgqueue._cron_field(v_f[2], 0, 23);
    v_dom := pgqueue._cron_field(v_f[3], 1, 31);
    v_month := pgqueue._cron_field(v_f[4], 1, 12);
    v_dow := pgqueue._cron_field(v_f[5], 0, 7);
    IF v_min IS NULL OR v_hour IS NULL OR v_dom IS NULL OR v_month IS NULL OR v_dow IS NULL THEN
        RAISE EXCEPTION 'invalid cron expression "%"', p_cron
            USING ERRCODE = '22023',
                  HINT = 'Each field is *, a number, a range a-b, a step */s or a-b/s, or a comma list; minute 0-59, hour 0-23, day 1-31, month 1-12, weekday 0-7.';
    END IF;
    IF 7 = ANY (v_dow) THEN
        v_dow := v_dow || 0;
    END IF;
    v_any_dom := v_f[3] LIKE '*%';
    v_any_dow := v_f[5] LIKE '*%';
    v_hm := ARRAY(SELECT DISTINCT h * 60 + m FROM unnest(v_hour) h, unnest(v_min) m ORDER BY 1);
    v_day := v_t::date;
    v_base := pgqueue.to_epoch(v_day::timestamp AT TIME ZONE 'UTC');
    LOOP
        IF v_base > p_upto THEN
            RETURN v_out;  -- (p_upto before the first day's end: the minutes after it are left out below)
        END IF;
        IF v_gap > 366 * 50 THEN
            EXIT WHEN cardinality(v_out) = 0;
            RETURN v_out;  -- (the next slot is more than 50 years away: _cron_next raises for it)
        END IF;
        v_match := extract(month FROM v_day)::integer = ANY (v_month) AND CASE
            WHEN v_any_dom OR v_any_dow
            THEN extract(day FROM v_day)::integer = ANY (v_dom) AND extract(dow FROM v_day)::integer = ANY (v_dow)
            ELSE extract(day FROM v_day)::integer = ANY (v_dom) OR extract(dow FROM v_day)::integer = ANY (v_dow)
        END;
        IF v_match THEN
            FOREACH v_slot IN ARRAY v_hm LOOP
                CONTINUE WHEN v_first AND v_slot < v_from;
                v_gap := 0;
                v_slot := v_base + v_slot * 60000;
                IF v_slot > p_upto OR cardinality(v_out) >= p_limit THEN
                    RETURN v_out;
                END IF;
                v_out := v_out || v_slot;
            END LOOP;
        END IF;
        v_first := false;
        v_day := v_day + 1;
        v_base := v_base + 86400000;
        v_gap := v_gap + 1;
    END LOOP;
    RAISE EXCEPTION 'cron expression "%" matches no day in 50 years', p_cron USING ERRCODE = '22023';
END;
$$;

COMMENT ON FUNCTION pgqueue._cron_slots(text, bigint, bigint, integer) IS
    'pgqueue internal: the minutes after p_after and up to p_upto (epoch ms, UTC) that a cron expression matches, at most p_limit';

-- Create a periodic message: p_content (with p_content_type) is enqueued on p_queue at every slot
-- of p_every_ms (an interval of at least 1 s, slots counted from p_start_at, default now) or of
-- p_cron (five fields, UTC; the first slot is the first match at or after p_start_at). p_missed says
-- what a scheduler that was down for several slots enqueues: 'latest' one message for them
-- all (default), 'all' one per slot. Returns the schedule's id.
-- Raises 22004 (NULL name, queue or content), 22023 (neither or both of p_every_ms and p_cron,
-- an interval outside 1 s to 100 years, a start outside 1970 to 9999, a bad cron expression or
-- one of more than 512 characters, an unknown p_missed, a name outside 1 to 200 characters),
-- PQ001 / 42602 (queue), 42710 (a schedule of that name exists).
CREATE FUNCTION pgqueue.schedule_create(
    p_name         text,
    p_queue        text,
    p_content      bytea,
    p_every_ms     bigint DEFAULT NULL,
    p_cron         text   DEFAULT NULL,
    p_content_type text   DEFAULT NULL,
    p_missed       text   DEFAULT 'latest',
    p_start_at     bigint DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
    v_start bigint := coalesce(p_start_at, pgqueue.now_ms());
    v_id    integer;
BEGIN
    IF p_name IS NULL OR p_content IS NULL OR p_missed IS NULL THEN
        PERFORM pgqueue._not_null(p_name IS NULL, 'schedule name'::text);
        PERFORM pgqueue._not_null(p_content IS NULL, 'content'::text);
        PERFORM pgqueue._not_null(p_missed IS NULL, 'p_missed'::text);
    END IF;
    v_queue := pgqueue._queue_get(p_queue);
    -- the queue's row FOR SHARE until commit, in place of a foreign key (tables/schedule.sql): a
    -- queue_drop that commits first leaves nothing to lock (PQ001; 40001 under REPEATABLE READ),
    -- one that comes later waits, then deletes this schedule with the queue
    PERFORM pgqueue._queue_pin(v_queue.id);
    IF (p_every_ms IS NULL) = (p_cron IS NULL) THEN
        RAISE EXCEPTION 'give one of p_every_ms and p_cron'
            USING ERRCODE = '22023', HINT = 'p_every_ms => 60000 for every minute, or p_cron => ''0 * * * *'' for every hour.';
    END IF;
    IF p_every_ms NOT BETWEEN 1000 AND 3153600000000 THEN
        RAISE EXCEPTION 'p_every_ms must be between 1000 (a second) and 3153600000000 (100 years), got %', p_every_ms
            USING ERRCODE = '22023';
    END IF;
    IF v_start NOT BETWEEN 0 AND 253402300799999 THEN
        RAISE EXCEPTION 'p_start_at must be between 0 and 253402300799999 (epoch ms, 1970 to 9999), got %', v_start
            USING ERRCODE = '22023';
    END IF;
    IF p_missed NOT IN ('latest', 'all') THEN
        RAISE EXCEPTION 'p_missed must be ''latest'' or ''all'', got %', pg_catalog.quote_literal(pg_catalog.left(p_missed, 20))
                        || CASE WHEN pg_catalog.length(p_missed) > 20
                             THEN pg_catalog.format(' (%s characters)', pg_catalog.length(p_missed)) ELSE '' END
            USING ERRCODE = '22023';
    END IF;
    -- a bound on the expression: each firing parses it again (20,000 list items, 80 kB, cost a
    -- scheduler run 3.3 s a firing; a review), and its text is in the errors about it
    IF pg_catalog.length(p_cron) > 512 THEN
        RAISE EXCEPTION 'a cron expression has at most 512 characters, got %', pg_catalog.length(p_cron)
            USING ERRCODE = '22023';
    END IF;
    IF length(p_name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'a schedule name has 1 to 200 characters, got %', length(p_name) USING ERRCODE = '22023';
    END IF;
    INSERT INTO pgqueue.schedule (name, queue_id, every_ms, cron, content, content_type, missed, next_run)
    VALUES (p_name, v_queue.id, p_every_ms, p_cron, p_content, p_content_type, p_missed,
            CASE WHEN p_cron IS NULL THEN v_start ELSE pgqueue._cron_next(p_cron, v_start - 1) END)
    ON CONFLICT (name) DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'schedule "%" already exists', p_name
            USING ERRCODE = '42710', HINT = 'Drop it first with pgqueue.schedule_drop(), or choose another name.';
    END IF;
    RETURN v_id;
END;
$$;

COMMENT ON FUNCTION pgqueue.schedule_create(text, text, bytea, bigint, text, text, text, bigint) IS
    'Create a periodic message (every p_every_ms, or at each match of the cron expression p_cron, UTC) on a queue; returns its id';

-- Drop a schedule by name; false if there was none. (Dropping a queue drops its schedules.)
CREATE FUNCTION pgqueue.schedule_drop(p_name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_name IS NULL THEN
        PERFORM pgqueue._not_null(true, 'schedule name'::text);
    END IF;
    DELETE FROM pgqueue.schedule s WHERE s.name = p_name;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.schedule_drop(text) IS
    'Drop a schedule by name; false if it did not exist';

-- Every schedule, by name, with its queue and next slot (epoch ms).
CREATE FUNCTION pgqueue.schedule_list()
RETURNS TABLE (name text, queue text, every_ms bigint, cron text, content bytea, content_type text,
               missed text, next_run bigint, created_at timestamptz)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT s.name, q.name, s.every_ms, s.cron, s.content, s.content_type, s.missed, s.next_run, s.created_at
      FROM pgqueue.schedule s JOIN pgqueue.queue q ON q.id = s.queue_id
     ORDER BY s.name;
END;

COMMENT ON FUNCTION pgqueue.schedule_list() IS
    'Every schedule by name: its queue, interval or cron expression, content, missed-slot policy and next slot (epoch ms)';

-- Enqueue the due slots of one schedule (pgqueue.schedule_run): from p_next_run, each slot up to
-- p_now (or, with p_missed 'latest', the last of them only), at most p_limit; returns the ids of
-- the messages created, the slots they stand for, the schedule's next slot, and whether a lock
-- held it back (o_held, below: the caller then leaves the queue's other schedules for a later
-- run instead of waiting for the same lock again for each of them). On a capped queue
-- (p_capped) the messages are created in batches, each in a subtransaction of its own (below),
-- and the first slot that the cap refuses (PQ003) ends the call: that slot is the next one, due
-- still, for a later call to enqueue once there is room. So does a batch that waits more than
-- 100 ms (or the caller's shorter lock_timeout) for a lock
-- (lock_not_available): the queue's admission row, which a producer's open transaction holds
-- until it ends. The caller holds the rows of the schedules it fired before this one meanwhile,
-- and every other scheduler skips them, so a wait here would stall every schedule, not only this
-- queue's (the caller's own lock_timeout is back in force after each batch). (Uncapped queues
-- take no subtransaction: never more than 64 of them in a transaction for the schedules that
-- need none.)
CREATE FUNCTION pgqueue._schedule_fire(
    p_queue        text,
    p_content      bytea,
    p_content_type text,
    p_every_ms     bigint,
    p_cron         text,
    p_missed       text,
    p_next_run     bigint,
    p_now          bigint,
    p_limit        integer,
    p_capped       boolean,
    OUT o_ids      bigint[],
    OUT o_slots    bigint[],
    OUT o_next     bigint,
    OUT o_held     boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot bigint := p_next_run;
    v_next bigint;
    v_hi   bigint;
    v_mid  bigint;
    v_last bigint;
    v_lt   text;     -- the caller's lock_timeout, while a capped queue's admission waits 100 ms at most
    v_full boolean;
    v_held boolean;
    v_slots bigint[];  -- the slots due, in order
    v_n    integer;
    v_i    integer;
    v_done integer := 0;  -- how many of them have their message
    v_try  integer;  -- the size of the next batch tried
    v_k    integer;
    v_new  bigint[];
    v_queue pgqueue.queue;
    v_created bigint := pgqueue.to_epoch(now());  -- created_at, as message_create has it
BEGIN
    o_ids := '{}';
    o_slots := '{}';
    o_held := false;
    IF p_missed = 'latest' AND p_cron IS NOT NULL AND v_slot < p_now THEN
        -- the last slot at or before p_now, by bisection between v_slot (a slot due) and p_now:
        -- two calls of _cron_next a step, the gap halved at each (a minute's schedule a year
        -- behind: about 20 steps), rather than a walk over every missed slot (525,600 calls), or
        -- over every slot of a dense run (every minute of January: 44,640; a review measured
        -- 16 s for one schedule_run)
        v_hi := p_now;
        LOOP
            EXIT WHEN pgqueue._cron_next(p_cron, v_slot) > v_hi;  -- v_slot is the last slot <= v_hi
            -- a slot in (v_slot, v_hi]: in (v_mid, v_hi], or else at or before v_mid
            v_mid := v_slot + (v_hi - v_slot) / 2;
            v_last := pgqueue._cron_next(p_cron, v_mid);
            IF v_last <= v_hi THEN
                v_slot := v_last;
            ELSE
                v_hi := v_mid;
            END IF;
        END LOOP;
    END IF;
    -- the slots to enqueue, at most p_limit: a cron schedule's from one call (the expression
    -- parsed once; a call of _cron_next a slot parsed it each time, about 0.5 ms a slot)
    IF p_cron IS NOT NULL AND v_slot <= p_now THEN
        v_slots := v_slot || pgqueue._cron_slots(p_cron, v_slot, p_now, p_limit - 1);
        v_slot := pgqueue._cron_next(p_cron, v_slots[cardinality(v_slots)]);
    ELSE
        v_slots := '{}';
    END IF;
    LOOP
        EXIT WHEN cardinality(v_slots) > 0 AND p_cron IS NOT NULL;
        v_next := CASE WHEN p_cron IS NULL THEN v_slot + p_every_ms ELSE pgqueue._cron_next(p_cron, v_slot) END;
        -- 'latest': skip to the last slot that is due
        IF p_missed = 'latest' AND v_next <= p_now THEN
            v_slot := CASE WHEN p_cron IS NULL
                           THEN v_slot + (p_now - v_slot) / p_every_ms * p_every_ms
                           ELSE v_next END;
            CONTINUE;
        END IF;
        v_slots := v_slots || v_slot;
        v_slot := v_next;
        EXIT WHEN v_slot > p_now OR cardinality(v_slots) >= p_limit;
    END LOOP;
    v_n := cardinality(v_slots);
    IF NOT p_capped THEN
        FOR v_i IN 1 .. v_n LOOP
            o_ids := o_ids || pgqueue.message_create(p_queue, p_content, NULL::bigint, p_content_type);
        END LOOP;
        o_slots := v_slots;
        o_next := v_slot;
        RETURN;
    END IF;
    -- A capped queue: the slots in batches, each in a subtransaction (all or none: a batch the
    -- cap refuses leaves nothing; pgqueue._queue_admit asks for the room of all of it). The first slot alone, so that a full queue costs one
    -- subtransaction (and one xid) as before (tests/pgtap/50_schedule.sql), then the rest at
    -- once; a refused batch is tried again at half its size, down to one slot. A batch that
    -- fits leaves less room than its size, so the next one of that size is refused: about
    -- 2 log2(n) subtransactions a call (36 for 100,000 slots), of which at most log2(n) + 2 are
    -- kept (those refused roll back), where a subtransaction a slot (until 0.4) kept one a
    -- message: past 64 kept subtransactions with an xid, a transaction's snapshot data
    -- overflows, and every snapshot taken on the server while it runs looks transactions up in
    -- pg_subtrans (tests/test_schedules.py counts the transaction ids that a catch-up takes).
    v_try := 1;
    WHILE v_done < v_n LOOP
        v_k := least(v_try, v_n - v_done);
        v_lt := current_setting('lock_timeout');
        IF v_lt = '0' OR v_lt::interval > interval '100 ms' THEN  -- (a caller's shorter one stays)
            PERFORM set_config('lock_timeout', '100ms', true);
        END IF;
        v_full := false;
        v_held := false;
        BEGIN
            -- what message_create_batch does with v_k copies of the content, without an array
            -- of them: k copies of a large content past 1 GB in all failed the whole run (54000)
            -- (and held that much memory below it); one row at a time by _message_insert, as
            -- into a grouped queue, also when the queue has none
            v_queue := pgqueue._queue_admit(p_queue, v_k);
            v_new := ARRAY(SELECT pgqueue._message_insert(v_queue, p_content, NULL::bigint, p_content_type,
                                                          NULL::text, NULL::text, v_created)
                             FROM generate_series(1, v_k) AS g(n) ORDER BY g.n);
            PERFORM pgqueue._counted_n(v_queue.id, 0, v_k);  -- enqueued (queue_counters)
            IF v_queue.notify THEN
                PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
            END IF;
        EXCEPTION
            WHEN SQLSTATE 'PQ003' THEN
                v_full := true;  -- no room for v_k: fewer may fit
            WHEN lock_not_available THEN
                v_held := true;  -- its admission is held: this slot and the ones after it wait
        END;
        PERFORM set_config('lock_timeout', v_lt, true);
        EXIT WHEN v_held OR (v_full AND v_k = 1);  -- the slot the cap refused is the next one
        IF v_full THEN
            v_try := v_k / 2;
        ELSE
            o_ids := o_ids || v_new;
            o_slots := o_slots || v_slots[v_done + 1 : v_done + v_k];
            v_done := v_done + v_k;
            IF v_done = 1 THEN
                v_try := v_n - 1;  -- the first slot had room: the rest at once
            END IF;
        END IF;
    END LOOP;
    o_next := CASE WHEN v_done < v_n THEN v_slots[v_done + 1] ELSE v_slot END;
    o_held := coalesce(v_held, false);
END;
$$;

COMMENT ON FUNCTION pgqueue._schedule_fire(text, bytea, text, bigint, text, text, bigint, bigint, integer, boolean) IS
    'pgqueue internal: enqueue the due slots of one schedule (schedule_run); the message ids, their slots, the next slot and whether a lock held it back';

-- Enqueue the due slots of every schedule (next_run <= now); returns one row per message
-- created: the schedule, the message id and the slot (epoch ms) it stands for.
--
-- Exactly once per slot, however many schedulers call it at once: each due schedule row is
-- locked (SKIP LOCKED: a scheduler never waits for another), after its queue's lock stripe, and
-- its messages and its advanced next_run commit together; a scheduler that finds the row after
-- that commit re-reads it and finds it no longer due. Missed slots (no scheduler ran for a
-- while) follow the schedule's policy: 'latest' enqueues one message for all of them, 'all' one
-- per slot. The next slot is then the first after now. At most p_limit messages a call, shared
-- fairly: the due schedules are visited in random order (so that when more are due than
-- p_limit, each gets its turn over the calls rather than the oldest ones every time), each
-- given an equal share of the room left (ceil(room / schedules left to visit)), so a schedule
-- catching up on a long 'all' backlog takes no more than its share while the others fire on
-- time; the room the others leave goes, in further passes, to the schedules that stopped at
-- their share with slots still due (only those are visited again), and what is left beyond
-- p_limit waits for the next call. A schedule whose queue is capped and full (PQ003) stops at
-- the slot the cap refused, which stays due for a later call to enqueue once there is room;
-- the other schedules are not held up (pgqueue._schedule_fire), it is not visited again in
-- the same call, and a NOTICE with SQLSTATE PQ003 names it (the `pgqueue scheduler` logs it).
-- So does a capped queue whose admission another open transaction holds (a producer's, or
-- another scheduler's run, which holds it to its end): the first of its schedules waits 100 ms
-- at most, and its other schedules wait for a later call without waiting again (each waited
-- 100 ms: twenty schedules on one queue held a run 2 s, past a statement_timeout that then
-- cancelled every schedule's messages; a review), each with its NOTICE.
-- Likewise a queue being dropped or altered (its lock stripe held): its schedules wait for a
-- later call, the others fire, each with its NOTICE; the run waits 100 ms at most once for each
-- lock stripe, which the queues with ids 64 apart share (each queue waited: seven due queues
-- on a stripe held a run 0.7 s, tests/test_schedules.py, long enough for a statement_timeout; a
-- review).
--
-- A server clock set back would leave a schedule silent until the clock came back to the
-- next_run that a run reading the later clock had set (for as long as the step back). So a
-- schedule whose last_run (the clock when the run that last set its next_run began) is more
-- than a second ahead of this run's clock, read again once the row is locked (a run of another
-- scheduler that began after this one may have set it: that is no step back), gets the next slot
-- that the clock now gives: an interval's first slot after now on its grid (next_run less whole
-- intervals), a cron expression's first match after now, when earlier than next_run. A WARNING
-- names it (the server's log keeps it). The slots between now and the old next_run are enqueued
-- again as the clock reaches them; a schedule that has not run yet keeps its p_start_at.
--
-- SECURITY DEFINER, EXECUTE granted by docs/grants.sql (producers, administrators), not PUBLIC:
-- a scheduler locks and advances the schedules' rows, which needs UPDATE on next_run, and with
-- that right plain SQL could set any schedule's next_run to any time (stop every schedule) or
-- hold their rows locked; here a caller can only enqueue the slots that are due, as the
-- schedules say. The messages are created as the extension's owner (the schedules are the
-- administrators', queues and contents included).
CREATE FUNCTION pgqueue.schedule_run(p_limit integer DEFAULT 1000)
RETURNS TABLE (schedule text, message_id bigint, slot bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now   bigint := pgqueue.now_ms();
    v_c     record;
    v_s     record;
    v_locked boolean;
    v_fired record;
    v_made  integer := 0;
    v_i     integer;   -- schedules visited in this pass
    v_share integer;
    v_again integer[];  -- NULL: the first pass, every due schedule; then those to visit again
    v_more  integer[];  -- the schedules that stopped at their share with slots still due
    v_busy  integer[] := '{}';  -- the lock stripes (queue id & 63) that a drop or an alter holds
    v_held  integer[] := '{}';  -- the capped queues whose admission an open transaction holds
    v_lt    text;       -- the caller's lock_timeout, while a queue's stripe waits 100 ms at most
    v_next  bigint;     -- a schedule's next slot after the clock was set back
BEGIN
    IF p_limit IS NULL THEN
        PERFORM pgqueue._not_null(true, 'p_limit'::text);
    END IF;
    IF p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 100000, got %', p_limit USING ERRCODE = '22023';
    END IF;
    LOOP  -- passes: a further one only for the schedules that stopped at their share
        v_more := '{}';
        v_i := 0;
        FOR v_c IN
            SELECT s.id, s.queue_id, s.name, q.name AS queue, count(*) OVER () AS n
              FROM pgqueue.schedule s JOIN pgqueue.queue q ON q.id = s.queue_id
             WHERE (s.next_run <= v_now OR s.last_run > v_now + 1000)
               AND (v_again IS NULL OR s.id = ANY (v_again))
             ORDER BY CASE WHEN v_again IS NULL THEN random() END, s.next_run, s.id
        LOOP
            -- an equal share of the room left among the schedules left to visit (at least 1)
            v_share := ceil((p_limit - v_made)::numeric / (v_c.n - v_i));
            v_i := v_i + 1;
            -- the queue's lock stripe before the schedule's row, as every writer takes them
            -- (docs/locking.md, rule 1): a queue_drop holding the stripe, whose cascade deletes
            -- the row, never waits for this transaction while it waits for the drop
            -- (specs/schedule_drop.spec)
            -- A queue_drop or a max_size / group_concurrency change (pgqueue._queue_quiesce)
            -- waiting for the queue's work in flight queues this lock behind it: wait 100 ms at
            -- most, then leave the schedule due for a later run (and its queue's other schedules
            -- for this run, and the schedules of every queue on that stripe) so that the other
            -- schedules fire (the subtransaction takes no xid)
            IF v_c.queue_id = ANY (v_held) THEN  -- (its slots stay due: not visited again)
                RAISE NOTICE 'schedule "%" is held: an open transaction holds the admission of its queue "%" (a producer''s, or another scheduler''s run)',
                    v_c.name, v_c.queue
                    USING ERRCODE = 'PQ003',
                          DETAIL = 'Its slots stay due and are enqueued by a later run once the transaction ends.';
                CONTINUE;
            END IF;
            IF (v_c.queue_id & 63) <> ALL (v_busy) THEN
                v_lt := current_setting('lock_timeout');
                IF v_lt = '0' OR v_lt::interval > interval '100 ms' THEN  -- (a caller's shorter one stays)
                    PERFORM set_config('lock_timeout', '100ms', true);
                END IF;
                BEGIN
                    v_locked := pgqueue._queue_lock(v_c.queue_id);
                EXCEPTION WHEN lock_not_available THEN
                    v_busy := v_busy || (v_c.queue_id & 63);
                END;
                PERFORM set_config('lock_timeout', v_lt, true);
            END IF;
            IF (v_c.queue_id & 63) = ANY (v_busy) THEN  -- (its slots stay due: not visited again)
                RAISE NOTICE 'schedule "%" is held: a queue_drop or queue_alter holds the lock stripe of its queue "%"',
                    v_c.name, v_c.queue
                    USING ERRCODE = 'PQ003',
                          DETAIL = 'A drop, or a change of max_size or group_concurrency, of that queue or of another on its stripe waits for their work in flight. Its slots stay due and are enqueued by a later run once it has ended.';
                CONTINUE;
            END IF;
            SELECT s.id, s.name, q.name AS queue, q.max_size, s.every_ms, s.cron, s.content, s.content_type,
                   s.missed, s.next_run, s.last_run
              INTO v_s
              FROM pgqueue.schedule s JOIN pgqueue.queue q ON q.id = s.queue_id
             WHERE s.id = v_c.id AND (s.next_run <= v_now OR s.last_run > v_now + 1000)
               FOR UPDATE OF s SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;  -- another scheduler has it, it is no longer due, or it was dropped
            IF v_s.next_run > v_now THEN
                -- not due, but its last run read a clock more than a second later than this
                -- run's: set back, unless that run began after this one (the clock read now)
                IF v_s.last_run > pgqueue.now_ms() + 1000 THEN
                    v_next := CASE WHEN v_s.cron IS NULL
                                   THEN v_s.next_run - (v_s.next_run - v_now - 1) / v_s.every_ms * v_s.every_ms
                                   ELSE least(v_s.next_run, pgqueue._cron_next(v_s.cron, v_now)) END;
                    UPDATE pgqueue.schedule s SET next_run = v_next, last_run = v_now WHERE s.id = v_s.id;
                    IF v_next < v_s.next_run THEN  -- (a next slot that does not move needs no word)
                        RAISE WARNING 'schedule "%": the server''s clock was set back (its last run read % ms later than now); its next slot moves from % to %',
                            v_s.name, v_s.last_run - v_now, v_s.next_run, v_next
                            USING DETAIL = 'Slots are epoch ms. The slots between now and the old next slot are enqueued again as the clock reaches them.';
                    END IF;
                END IF;
                CONTINUE;
            END IF;
            v_fired := pgqueue._schedule_fire(v_s.queue, v_s.content, v_s.content_type, v_s.every_ms, v_s.cron,
                                              v_s.missed, v_s.next_run, v_now, v_share,
                                              v_s.max_size IS NOT NULL);
            RETURN QUERY SELECT v_s.name, f.id, f.slot FROM unnest(v_fired.o_ids, v_fired.o_slots) AS f(id, slot);
            v_made := v_made + cardinality(v_fired.o_ids);
            UPDATE pgqueue.schedule s SET next_run = v_fired.o_next, last_run = v_now WHERE s.id = v_s.id;
            IF v_fired.o_held THEN
                -- held by a lock on its queue's admission: this queue's other schedules wait too
                v_held := v_held || v_c.queue_id;
                RAISE NOTICE 'schedule "%" is held: an open transaction holds the admission of its queue "%" (a producer''s, or another scheduler''s run)',
                    v_s.name, v_s.queue
                    USING ERRCODE = 'PQ003',
                          DETAIL = format('Its slot %s (epoch ms) stays due and is enqueued by a later run once the transaction ends.',
                                          v_fired.o_next);
            ELSIF v_fired.o_next <= v_now AND cardinality(v_fired.o_ids) < v_share THEN
                -- held by its capped queue, not by p_limit: say so (a NOTICE, for the caller only)
                RAISE NOTICE 'schedule "%" is held: its queue "%" is full (max_size %)',
                    v_s.name, v_s.queue, v_s.max_size
                    USING ERRCODE = 'PQ003',
                          DETAIL = format('Its slot %s (epoch ms) stays due and is enqueued by a later run once the queue has room.',
                                          v_fired.o_next);
            END IF;
            IF cardinality(v_fired.o_ids) = v_share AND v_fired.o_next <= v_now THEN
                v_more := v_more || v_s.id;
            END IF;
            EXIT WHEN v_made >= p_limit;
        END LOOP;
        EXIT WHEN cardinality(v_more) = 0 OR v_made >= p_limit;
        v_again := v_more;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION pgqueue.schedule_run(integer) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue.schedule_run(integer) IS
    'Enqueue the due slots of every schedule, each slot once however many schedulers run (row locks, SKIP LOCKED); returns schedule, message id and slot of each message created';

-------------------------------------------------------------------------------
-- Message groups and idempotent enqueue (issue 14)
-------------------------------------------------------------------------------

ALTER TABLE pgqueue.message ADD COLUMN group_key text, ADD COLUMN turn_at bigint, ADD COLUMN idem_key text,
    ADD COLUMN write_mark boolean, ADD COLUMN wait_floor bigint[];
COMMENT ON COLUMN pgqueue.message.group_key IS
    'the message group (queues with group_concurrency): in order within it, served in turn with the other groups; NULL: a group of its own';
COMMENT ON COLUMN pgqueue.message.turn_at IS
    'grouped queues: set while the message has its group''s turn (waiting to be handed out from turn_at on, or in flight); NULL while it waits behind earlier messages of its group';
COMMENT ON COLUMN pgqueue.message.idem_key IS
    'idempotency key: while the message is live (and the queue''s key_window_ms after it left), enqueueing the same key returns this id';
COMMENT ON COLUMN pgqueue.message.write_mark IS
    'pgqueue internal: set (INSERT) or flipped (UPDATE) by a pgqueue function whose write keyed the row at or above its own clock reading less 5 ms; a write that leaves it NULL or unchanged is checked by the triggers message_placed_low';
COMMENT ON COLUMN pgqueue.message.wait_floor IS
    'pgqueue internal: grouped queues of group concurrency 1, on the message with its group''s turn: where the group''s next hand-off may start its probe of the waiting messages, and the candidate for the one after (pgqueue._wait_floor_next), then while leased the lock stripe read before the lease''s xid, and that xid (pgqueue._wait_floor_leased); NULL: from the group''s first entry';

-- Message groups (queues with group_concurrency set): the messages whose group's turn it is,
-- waiting to be handed out, by (turn_at, id): the probe of a grouped dequeue.
CREATE INDEX message_turn_idx ON pgqueue.message (queue_id, turn_at, id)
    WHERE turn_at IS NOT NULL AND locked_until IS NULL;
-- A group's messages that wait for their turn, in delivery order: the next one to get it.
CREATE INDEX message_group_wait_idx ON pgqueue.message (queue_id, group_key, dequeue_at, id)
    WHERE group_key IS NOT NULL AND turn_at IS NULL;
-- A group's messages that have their turn (handed out, or waiting with it): how many are in flight.
-- By turn key, so that a probe can start at the session's floor of the group's turn keys
-- (pgqueue._group_floor_get) and descend past the entries a held snapshot keeps of the group's
-- earlier deliveries.
CREATE INDEX message_group_turn_idx ON pgqueue.message (queue_id, group_key, turn_at)
    WHERE group_key IS NOT NULL AND turn_at IS NOT NULL;
-- Idempotent enqueue: one live message per (queue, key).
CREATE UNIQUE INDEX message_idem_key_idx ON pgqueue.message (queue_id, idem_key)
    WHERE idem_key IS NOT NULL;

ALTER TABLE pgqueue.queue ADD COLUMN group_concurrency integer,
    ADD COLUMN key_window_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN rate_limit integer,
    ADD CONSTRAINT queue_group_concurrency_check CHECK (group_concurrency IS NULL OR group_concurrency >= 0),
    ADD CONSTRAINT queue_key_window_check CHECK (key_window_ms >= 0),
    ADD CONSTRAINT queue_rate_limit_check CHECK (rate_limit IS NULL OR rate_limit > 0);
COMMENT ON COLUMN pgqueue.queue.group_concurrency IS
    'NULL: no message groups; else messages are served by group in turn, at most this many of a group in flight (0: no limit)';
COMMENT ON COLUMN pgqueue.queue.rate_limit IS
    'at most this many messages handed out a second by message_dequeue, all consumers together (NULL: no limit)';
COMMENT ON COLUMN pgqueue.queue.key_window_ms IS
    'how long (ms) an idempotency key stays taken after its message was completed or delivered (0: only while it is live)';

-- queue_list: three more columns (0.4's settings), so dropped and created again (a grant on it
-- is lost; a view of the caller's on it makes the upgrade fail, to be dropped and re-created).
DROP FUNCTION pgqueue.queue_list();
-- List the queues and their settings.
CREATE FUNCTION pgqueue.queue_list()
RETURNS TABLE (queue text, lock_ms bigint, max_attempts integer, retry_base_ms bigint,
               retry_cap_ms bigint, max_size bigint, notify boolean, created_at timestamptz,
               group_concurrency integer, key_window_ms bigint, rate_limit integer)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT q.name, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms,
           q.max_size, q.notify, q.created_at, q.group_concurrency, q.key_window_ms, q.rate_limit
      FROM pgqueue.queue q
     ORDER BY q.name;
END;

COMMENT ON FUNCTION pgqueue.queue_list() IS
    'List every queue with its settings, by name (group_concurrency NULL = no message groups, 0 = groups without a limit; rate_limit NULL = none)';

-- The restore of the default queue's dumped row copies 0.4's settings too.
-- CREATE EXTENSION makes the "default" queue; pg_restore then loads the dumped row for it.
-- Turn that insert into an update so that the dumped settings win and the restore succeeds.
-- Every setting of pgqueue.queue is copied: one left out would silently come back at its
-- default after a restore (tests/test_dump_restore.py checks that none is missing).
CREATE OR REPLACE FUNCTION pgqueue._queue_restore_default()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgqueue.queue q
       SET lock_ms = NEW.lock_ms, max_attempts = NEW.max_attempts,
           retry_base_ms = NEW.retry_base_ms, retry_cap_ms = NEW.retry_cap_ms,
           max_size = NEW.max_size, notify = NEW.notify, created_at = NEW.created_at,
           group_concurrency = NEW.group_concurrency, key_window_ms = NEW.key_window_ms,
           rate_limit = NEW.rate_limit
     WHERE q.name = NEW.name AND q.id = NEW.id;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END;
$$;

-- Message groups (issue 14): one row per queue and stripe of its groups (hashtext(group) & 255),
-- made on first use. pgqueue._message_group_lock locks a row FOR UPDATE to serialise the
-- decisions about the turns of the groups on that stripe until the end of the transaction.
-- Locking a row writes no new row version (no dead tuples under a held snapshot), and no role
-- but the extension's owner has a privilege on this table, so no role can hold a group's lock
-- on its own (an advisory lock could be taken by anyone). Derived: not dumped, made again on
-- first use; queue_drop removes a queue's rows.
CREATE TABLE pgqueue.message_group_lock (
    queue_id integer NOT NULL,
    stripe   integer NOT NULL,
    CONSTRAINT message_group_lock_pkey PRIMARY KEY (queue_id, stripe)
);

COMMENT ON TABLE pgqueue.message_group_lock IS
    'pgqueue internal: rows locked to serialise the turns of a queue''s message groups (pgqueue._message_group_lock)';

-- No role but the extension's owner has a privilege on pgqueue.queue_size, its sequences
-- queue_size_exact_<n> and queue_size_recount_<n>, and pgqueue.message_group_lock: the producers
-- that back-pressure limits must not write its accounting, and no role may hold a group's lock on
-- its own (docs/security.md). The installing role's default privileges (ALTER DEFAULT PRIVILEGES
-- ... ON TABLES / SEQUENCES) would give them on creation: taken back here (the admin recipe,
-- docs/grants.sql, grants them again to administrators).
DO $$
DECLARE
    v_rel     pg_catalog.regclass;
    v_grantee text;
BEGIN
    FOR v_rel, v_grantee IN
        SELECT DISTINCT c.oid::pg_catalog.regclass,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.relnamespace = 'pgqueue'::pg_catalog.regnamespace AND a.grantee <> c.relowner
           AND (c.relname = 'message_group_lock' OR pg_catalog.left(c.relname::text, 10) = 'queue_size')
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', v_rel, v_grantee);
    END LOOP;
END;
$$;

-- Rate limits (issue 14): 64 sequences, pgqueue.queue_rate_<id & 63>, one per rate-limited queue
-- (two rate-limited queues on one stripe are refused, 22023: the unique index
-- queue_rate_stripe_key). The value is the
-- last slot handed out: slot s is due at s / rate_limit seconds since the epoch, so a queue hands
-- out a message only for a slot that is due (pgqueue._rate_room), and every message handed out
-- takes the next slot (pgqueue._rate_take). A sequence leaves no dead tuples, unlike a row that
-- every dequeue would update; nextval is not rolled back, so a rolled-back dequeue still used its
-- slots.
DO $$
BEGIN
    FOR i IN 0..63 LOOP
        EXECUTE pg_catalog.format('CREATE SEQUENCE pgqueue.queue_rate_%s', i);
        EXECUTE pg_catalog.format(
            'COMMENT ON SEQUENCE pgqueue.queue_rate_%s IS %L', i,
            'pgqueue internal: rate-limit slots of the rate-limited queue whose id & 63 = ' || i);
    END LOOP;
END;
$$;

-- Idempotency keys of messages that have left the queue (completed, delivered in delete mode,
-- acknowledged by Spark, cancelled), kept for the queue's key_window_ms: until then an enqueue
-- with the same key returns the old id (pgqueue._message_insert). Written by
-- pgqueue._message_left; windows that have ended are removed as new ones are written, and
-- queue_drop removes a queue's.
CREATE TABLE pgqueue.message_key (
    queue_id integer NOT NULL,
    idem_key text    NOT NULL,
    id       bigint  NOT NULL,
    until    bigint  NOT NULL,
    CONSTRAINT message_key_pkey PRIMARY KEY (queue_id, idem_key)
);
CREATE INDEX message_key_until_idx ON pgqueue.message_key (queue_id, until);

COMMENT ON TABLE pgqueue.message_key IS
    'pgqueue: idempotency keys of messages that have left the queue, taken until "until" (epoch ms)';
SELECT pg_catalog.pg_extension_config_dump('pgqueue.message_key', '');

-- Refuse a group or idempotency key (p_what names it) that is empty or longer than 200
-- characters (22023); NULL is fine (no key).
CREATE FUNCTION pgqueue._check_message_key(p_value text, p_what text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value = '' OR length(p_value) > 200 THEN
        RAISE EXCEPTION 'the % must have 1 to 200 characters, got %', p_what, length(p_value)
            USING ERRCODE = '22023',
                  HINT = 'Pass NULL for none; hash a longer key.';
    END IF;
END;
$$;

-- Validate the message-group, idempotency and rate-limit options of queue_create and queue_alter
-- (22023); p_rate_limit 0 is valid (queue_alter: no limit).
CREATE FUNCTION pgqueue._check_group_options(p_group_concurrency integer, p_key_window_ms bigint,
                                             p_rate_limit integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_group_concurrency < 0 THEN
        RAISE EXCEPTION 'group_concurrency must be >= 0 (0 = no limit), got %', p_group_concurrency
            USING ERRCODE = '22023',
                  HINT = 'NULL: no message groups; 1: one message of a group in flight at a time.';
    END IF;
    IF p_key_window_ms < 0 OR p_key_window_ms > 31536000000 THEN
        RAISE EXCEPTION 'key_window_ms must be between 0 and 31536000000 (a year), got %', p_key_window_ms
            USING ERRCODE = '22023';
    END IF;
    IF p_rate_limit < 0 OR p_rate_limit > 1000000 THEN
        RAISE EXCEPTION 'rate_limit must be between 1 and 1000000 messages a second (0 = none), got %', p_rate_limit
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- The rate-limit sequence of a queue: pgqueue.queue_rate_<id & 63> (a queue with a rate limit has
-- it to itself: queue_create and queue_alter refuse a second rate-limited queue on a stripe). One
-- regclass constant per sequence, as in pgqueue._lock_stripe.
CREATE FUNCTION pgqueue._rate_seq(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.queue_rate_0'::regclass, 'pgqueue.queue_rate_1'::regclass,
    'pgqueue.queue_rate_2'::regclass, 'pgqueue.queue_rate_3'::regclass,
    'pgqueue.queue_rate_4'::regclass, 'pgqueue.queue_rate_5'::regclass,
    'pgqueue.queue_rate_6'::regclass, 'pgqueue.queue_rate_7'::regclass,
    'pgqueue.queue_rate_8'::regclass, 'pgqueue.queue_rate_9'::regclass,
    'pgqueue.queue_rate_10'::regclass, 'pgqueue.queue_rate_11'::regclass,
    'pgqueue.queue_rate_12'::regclass, 'pgqueue.queue_rate_13'::regclass,
    'pgqueue.queue_rate_14'::regclass, 'pgqueue.queue_rate_15'::regclass,
    'pgqueue.queue_rate_16'::regclass, 'pgqueue.queue_rate_17'::regclass,
    'pgqueue.queue_rate_18'::regclass, 'pgqueue.queue_rate_19'::regclass,
    'pgqueue.queue_rate_20'::regclass, 'pgqueue.queue_rate_21'::regclass,
    'pgqueue.queue_rate_22'::regclass, 'pgqueue.queue_rate_23'::regclass,
    'pgqueue.queue_rate_24'::regclass, 'pgqueue.queue_rate_25'::regclass,
    'pgqueue.queue_rate_26'::regclass, 'pgqueue.queue_rate_27'::regclass,
    'pgqueue.queue_rate_28'::regclass, 'pgqueue.queue_rate_29'::regclass,
    'pgqueue.queue_rate_30'::regclass, 'pgqueue.queue_rate_31'::regclass,
    'pgqueue.queue_rate_32'::regclass, 'pgqueue.queue_rate_33'::regclass,
    'pgqueue.queue_rate_34'::regclass, 'pgqueue.queue_rate_35'::regclass,
    'pgqueue.queue_rate_36'::regclass, 'pgqueue.queue_rate_37'::regclass,
    'pgqueue.queue_rate_38'::regclass, 'pgqueue.queue_rate_39'::regclass,
    'pgqueue.queue_rate_40'::regclass, 'pgqueue.queue_rate_41'::regclass,
    'pgqueue.queue_rate_42'::regclass, 'pgqueue.queue_rate_43'::regclass,
    'pgqueue.queue_rate_44'::regclass, 'pgqueue.queue_rate_45'::regclass,
    'pgqueue.queue_rate_46'::regclass, 'pgqueue.queue_rate_47'::regclass,
    'pgqueue.queue_rate_48'::regclass, 'pgqueue.queue_rate_49'::regclass,
    'pgqueue.queue_rate_50'::regclass, 'pgqueue.queue_rate_51'::regclass,
    'pgqueue.queue_rate_52'::regclass, 'pgqueue.queue_rate_53'::regclass,
    'pgqueue.queue_rate_54'::regclass, 'pgqueue.queue_rate_55'::regclass,
    'pgqueue.queue_rate_56'::regclass, 'pgqueue.queue_rate_57'::regclass,
    'pgqueue.queue_rate_58'::regclass, 'pgqueue.queue_rate_59'::regclass,
    'pgqueue.queue_rate_60'::regclass, 'pgqueue.queue_rate_61'::regclass,
    'pgqueue.queue_rate_62'::regclass, 'pgqueue.queue_rate_63'::regclass])[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._rate_seq(integer) IS
    'pgqueue internal: the rate-limit sequence of a queue (pgqueue.queue_rate_<id & 63>)';

-- How many of p_limit messages a rate-limited queue (p_rate messages a second) may hand out now:
-- the slots that are due and not taken, read from the queue's rate sequence without changing it
-- (an empty poll stays read-only). Slot s is due at s / p_rate s since the epoch; a queue idle
-- for a while may catch up by at most a twentieth of a second's slots, rounded up. A last
-- slot more than a minute's slots and 100,000 more ahead of the clock was taken at another
-- rate (by a consumer that read the rate before queue_alter changed it; queue_create and
-- queue_alter start a new rate's slots afresh, pgqueue._rate_reset): slots depend on the rate,
-- so it counts as none. Consumers that race run the sequence ahead by a call's p_limit each,
-- however long they were held up: the 100,000 keeps such a debt (up to 100,000 messages past
-- the minute's), which a minute alone forgave at low rates (session 46); a stale rate's last
-- slot starts at least the seconds since the epoch (1.7 * 10^9) ahead and stays ignored until
-- the queue has been idle long enough at the new rate r for it to fall within the bound, then
-- holds the queue at most a minute and 100,000 / r s (a rate kept with the slots would end
-- that: not built).
CREATE FUNCTION pgqueue._rate_room(p_queue_id integer, p_rate integer, p_limit integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_slot bigint := floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint;
    v_last bigint := pg_sequence_last_value(pgqueue._rate_seq(p_queue_id));
BEGIN
    IF v_last > v_slot + 60::bigint * p_rate + 100000 THEN
        v_last := NULL;  -- taken at another rate
    END IF;
    RETURN least(p_limit, greatest(v_slot - greatest(v_last, v_slot - (p_rate + 19) / 20), 0));
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_room(integer, integer, integer) IS
    'pgqueue internal: how many messages a rate-limited queue may hand out now (due slots not taken)';

-- The advisory lock key of a rate-limited queue's re-base from the last slot p_last
-- (pgqueue._rate_take): the queue, its rate, that value, and the queue's created_at to the
-- microsecond (as epoch, whatever the session's TimeZone), which only roles that may read
-- pgqueue.queue know. NULL when the queue is gone (no lock is then taken: the caller's take
-- comes after its dequeue, which saw the queue).
CREATE FUNCTION pgqueue._rate_key(p_queue_id integer, p_rate integer, p_last bigint)
RETURNS bigint
LANGUAGE sql STABLE
RETURN (SELECT hashtextextended(format('pgqueue rate %s %s %s %s', q.id, p_rate, p_last,
                                       extract(epoch FROM q.created_at)), 0)
          FROM pgqueue.queue q WHERE q.id = p_queue_id);

COMMENT ON FUNCTION pgqueue._rate_key(integer, integer, bigint) IS
    'pgqueue internal: the advisory lock key of a rate-limited queue''s re-base from a last slot';

-- Take p_n slots of a rate-limited queue's sequence for the messages just handed out: nextval per
-- message, or, when the queue was idle and its last slot lies more than the catch-up allowance
-- (a twentieth of a second's slots, rounded up) behind the clock, setval to the allowance's start
-- plus p_n (a re-base). Two consumers racing past the same due slots take more slots than were
-- due; the sequence then runs ahead of the clock and the next calls wait until it is due, so over
-- time no more than p_rate a second are handed out. A last slot more than a minute's slots and
-- 100,000 more ahead was taken at another rate (pgqueue._rate_room): a re-base too.
-- A re-base is a read and a write, so consumers that find the queue idle at the same moment
-- would each write it, and a later write would take back the slots of an earlier one, never to be
-- waited out (a review, session 86: 3 of 275 bursts after idle gaps). Only the consumer that holds
-- an advisory lock keyed on the idle value it read re-bases, and only when the value is still
-- that under the lock; the others wait for its write, which follows at once, and take their
-- slots on top of it with nextval. The lock is a session's, released right after the write: a
-- transaction's would stay until the transaction ended, one more for each re-base, and a long
-- transaction polling an idle queue would fill the server's lock table. A session's outlives an
-- error between the lock and the unlock (a cancel there): the waiters for it then find it free
-- no more, and, as for a holder stopped between its lock and its write or a role that holds the
-- key on purpose, a wait ends after 200 ms at most, its slots taken on the idle value, as before
-- the lock; the key is never met again (the value only grows), so the lock left holds up no
-- later call. A lock that is free again while the value has not moved (such a session ended)
-- lets the next waiter re-base. Not closed: a consumer whose clock read came a moment before
-- the value turned idle takes its slots with nextval and no lock, and a re-base's
-- check-then-setval can write over them when that nextval lands between the two (a review
-- reproduced it only by pausing sessions on purpose). Locking such takes too (the key shared,
-- session 87, not kept) needed a key that every take near the floor and every re-base agree
-- on while other takes move the value, and a lock left by a cancel in a long run of nextval
-- held up the re-bases after it. The key
-- hashes the queue's created_at, which a role that may not read pgqueue.queue does not know, so
-- such a role cannot hold it (docs/security.md). An empty poll takes no slot and no lock.
CREATE FUNCTION pgqueue._rate_take(p_queue_id integer, p_rate integer, p_n integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_seq   regclass := pgqueue._rate_seq(p_queue_id);
    v_slot  bigint;
    v_floor bigint;
    v_last  bigint;
    v_key   bigint;
    v_until timestamptz;
    v_round integer := 0;  -- the wait's rounds: 200 at most too, should the clock step back
BEGIN
    IF p_n > 0 THEN
        v_slot := floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint;
        v_floor := v_slot - (p_rate + 19) / 20;
        v_last := pg_sequence_last_value(v_seq);
        IF v_last IS NULL OR v_last < v_floor OR v_last > v_slot + 60::bigint * p_rate + 100000 THEN
            v_key := pgqueue._rate_key(p_queue_id, p_rate, v_last);
            v_until := clock_timestamp() + interval '200 ms';
            LOOP
                IF coalesce(pg_try_advisory_lock(v_key), true) THEN
                    IF pg_sequence_last_value(v_seq) IS NOT DISTINCT FROM v_last THEN
                        -- (after a wait, the allowance's start of now)
                        PERFORM setval(v_seq, floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint
                                              - (p_rate + 19) / 20 + p_n);
                        PERFORM pg_advisory_unlock(v_key);
                        RETURN;
                    END IF;
                    PERFORM pg_advisory_unlock(v_key);
                END IF;
                EXIT WHEN pg_sequence_last_value(v_seq) IS DISTINCT FROM v_last
                       OR clock_timestamp() >= v_until OR v_round >= 200;
                PERFORM pg_sleep(0.001);
                v_round := v_round + 1;
            END LOOP;
        END IF;
        PERFORM nextval(v_seq) FROM generate_series(1, p_n);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_take(integer, integer, integer) IS
    'pgqueue internal: take the rate-limit slots of p_n messages handed out';

-- Refuse a rate limit on a queue whose rate sequence (pgqueue._rate_seq: id & 63) another
-- rate-limited queue uses already (22023): possible only once there are more than 64 queues.
CREATE FUNCTION pgqueue._rate_check(p_queue_id integer, p_queue text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_other text;
BEGIN
    SELECT q.name INTO v_other FROM pgqueue.queue q
     WHERE q.id <> p_queue_id AND q.id & 63 = p_queue_id & 63 AND q.rate_limit IS NOT NULL
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queue "%" cannot have a rate limit: queue "%" has one on the same stripe (id & 63)', p_queue, v_other
            USING ERRCODE = '22023',
                  HINT = 'Rate-limit at most one queue of each stripe of 64; drop the other''s limit or recreate the queue.';
    END IF;
END;
$$;

-- Serialise the decisions about one message group's turns (pgqueue._message_insert,
-- pgqueue._message_group_next) until the end of the transaction: lock the row of the group's
-- stripe (hashtext(group) & 255) in pgqueue.message_group_lock FOR UPDATE, making it on first use
-- (PQ001 if no queue with groups has that id: rows are made for such queues only; 22004 for a
-- NULL queue id or group, which has no stripe).
-- Under REPEATABLE READ a row made after the snapshot cannot be locked: 40001 (retry).
--
-- Returns whether the caller's snapshot sees every earlier decision on the stripe: always true
-- under READ COMMITTED, where the caller's next statement takes a snapshot after the lock. Under
-- REPEATABLE READ or SERIALIZABLE the snapshot is the transaction's: false when the stripe's
-- previous locker (its xmax, read as the lock is taken; locks serialise, so the last locker
-- ended after every earlier one) is not visible to it, i.e. a producer may have added a message
-- that this transaction cannot see, or a consumer may have removed one it still sees. A caller
-- then raises 40001 before it decides anything: a producer would give a turn the room for which
-- is taken already, or leave its message waiting with no turn; a hand-off would pass a message
-- it cannot see (specs/rr_group_producer.spec, specs/rr_group_order.spec). (A previous locker
-- that is one of this transaction's own subtransactions, a savepoint released or still open,
-- counts as visible: its decisions are the transaction's own. One rolled back counts as not
-- visible, since its lock hides the locker before it: a 40001 more, for a transaction that
-- rolled back to a savepoint after a grouped call and makes another on the same stripe.)
--
-- SECURITY DEFINER because locking the row needs UPDATE on the table, which no other role has:
-- nobody can hold a group's lock outside pgqueue's functions. EXECUTE is revoked from PUBLIC and
-- granted to producers, consumers and Spark by docs/grants.sql.
CREATE FUNCTION pgqueue._message_group_lock(p_queue_id integer, p_group text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_stripe integer := hashtext(p_group) & 255;
    v_prev   xid;
    v_cur    bigint;
BEGIN
    SELECT l.xmax INTO v_prev FROM pgqueue.message_group_lock l
     WHERE l.queue_id = p_queue_id AND l.stripe = v_stripe FOR UPDATE;
    IF NOT FOUND THEN
        -- (a NULL has no stripe: checked here, off the path of a row that exists)
        PERFORM pgqueue._not_null(p_queue_id IS NULL, 'p_queue_id'::text);
        PERFORM pgqueue._not_null(p_group IS NULL, 'p_group'::text);
        -- made only for a queue with message groups: a role granted EXECUTE cannot fill the
        -- table with rows of queues that do not exist (PQ001, nothing written)
        IF NOT EXISTS (SELECT 1 FROM pgqueue.queue q
                        WHERE q.id = p_queue_id AND q.group_concurrency IS NOT NULL) THEN
            RAISE EXCEPTION 'queue % does not exist or has no message groups', p_queue_id
                USING ERRCODE = 'PQ001',
                      HINT = 'Only the queues created with p_group_concurrency have message groups.';
        END IF;
        INSERT INTO pgqueue.message_group_lock (queue_id, stripe) VALUES (p_queue_id, v_stripe)
            ON CONFLICT DO NOTHING;
        SELECT l.xmax INTO v_prev FROM pgqueue.message_group_lock l
         WHERE l.queue_id = p_queue_id AND l.stripe = v_stripe FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'could not lock message group stripe % of queue %', v_stripe, p_queue_id
                USING ERRCODE = '40001',
                      HINT = 'Another transaction made it after this one''s snapshot: retry the transaction.';
        END IF;
    END IF;
    -- READ UNCOMMITTED runs as READ COMMITTED
    IF v_prev::text = '0' OR current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        RETURN true;
    END IF;
    -- the previous locker's full transaction id: recent, within 2^30 after this transaction's
    -- (a subtransaction of it, or a transaction that began after it) or 2^31 before it, so the one
    -- with its 32 bits in the 2^32 ids up to 2^30 after this transaction's
    v_cur := pg_current_xact_id()::text::bigint + 1073741824;
    v_cur := v_cur - ((v_cur - v_prev::text::bigint) % 4294967296 + 4294967296) % 4294967296;
    -- this transaction, one of its subtransactions (a savepoint released or still open: while
    -- this one holds the lock, no other transaction that locked the row can be in progress), or
    -- a transaction its snapshot sees
    RETURN v_cur::text::xid8 = pg_current_xact_id()
        OR pg_xact_status(v_cur::text::xid8) = 'in progress'
        OR pg_visible_in_snapshot(v_cur::text::xid8, pg_current_snapshot());
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._message_group_lock(integer, text) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._message_group_lock(integer, text) IS
    'pgqueue internal: lock a message group''s stripe of a queue until the end of the transaction (row lock, made on first use); false if this transaction''s snapshot may miss an earlier decision on it (REPEATABLE READ)';

-- The key of a group's turn (message.turn_at, epoch microseconds): p_dequeue_at in microseconds
-- (clamped so that it cannot overflow), or, when p_later, no earlier than the clock: a turn
-- handed on, kept by a retry or a defer, or given to a message created due now, goes behind the
-- turns already waiting. Microseconds, so that turns handed on and messages created in one
-- millisecond still queue in the order they were handed on or created. The
-- clock in double precision, exact to the microsecond until 2106 (as in pgqueue.now_ms).
CREATE FUNCTION pgqueue._turn_key(p_dequeue_at bigint, p_later boolean)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN CASE WHEN p_later
            THEN GREATEST(
                     LEAST(GREATEST(p_dequeue_at, -9223372036854775), 9223372036854775) * 1000,
                     (pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000000)::bigint)
            ELSE LEAST(GREATEST(p_dequeue_at, -9223372036854775), 9223372036854775) * 1000 END;

COMMENT ON FUNCTION pgqueue._turn_key(bigint, boolean) IS
    'pgqueue internal: the turn key (epoch us) of a grouped message due at p_dequeue_at (ms); p_later: not before the clock';

-- The floor in a value of the setting pgqueue.group_floor_<queue id>_<group's stripe>,
-- '<queue stripe>/<floor>/<xid>/<group>' (kept by pgqueue._message_group_room), if it is the
-- group's, the stripe is p_stripe, and the transaction that kept it (xid) committed or is this
-- one; NULL otherwise. The xid: a PREPARE TRANSACTION keeps a transaction's settings as a commit
-- does, and a ROLLBACK PREPARED then brings back the message with the turn that the
-- transaction's own DELETE had hidden from the probe that kept the floor, below it (a review).
-- VOLATILE as pg_xact_status is, so that it is inlined (a STABLE function with a volatile body
-- is called instead): no call at run time.
CREATE FUNCTION pgqueue._group_floor_at(p_value text, p_group text, p_stripe bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN CASE WHEN p_value OPERATOR(pg_catalog.=) (pg_catalog.split_part(p_value, '/', 1) || '/' || pg_catalog.split_part(p_value, '/', 2) || '/'
                                                 || pg_catalog.split_part(p_value, '/', 3) || '/' || p_group)
                 AND pg_catalog.split_part(p_value, '/', 1) OPERATOR(pg_catalog.=) p_stripe::text
                 AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'repeatable read'
                 AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'serializable'
            THEN CASE WHEN pg_catalog.pg_xact_status(pg_catalog.split_part(p_value, '/', 3)::xid8) OPERATOR(pg_catalog.=) 'committed'
                           OR pg_catalog.split_part(p_value, '/', 3)::xid8 OPERATOR(pg_catalog.=) pg_catalog.pg_current_xact_id_if_assigned()
                      THEN pg_catalog.split_part(p_value, '/', 2)::bigint END END;

COMMENT ON FUNCTION pgqueue._group_floor_at(text, text, bigint) IS
    'pgqueue internal: the floor in a value of a group floor setting, if it is the group''s and the stripe''s and its transaction committed';

-- The session's group floor for a message group (kept by pgqueue._message_group_room), while the
-- queue's lock stripe still reads p_stripe (as read by the caller, after the group's lock or after
-- its DELETE of the group's message with the turn): every message of the group that has the turn
-- has a turn key (message.turn_at) at or above it, so the probes of the group's turns
-- (message_group_turn_idx) start there instead of at the group's first entry, which under a held
-- snapshot is an entry for every message of the group delivered since the hold began. The lowest
-- bigint when there is none, when the stripe moved (a message placed below the clock, trigger
-- message_placed_low, may have the turn below the floor), when the transaction that kept it did
-- not commit (pgqueue._group_floor_at), or when the transaction is REPEATABLE READ or
-- SERIALIZABLE (its snapshot may predate the floor). Inlined: no call at run time. A value set
-- by hand that has the form, the stripe and a committed xid is taken as it is
-- (docs/security.md); other forged values are ignored, or fail (22P02: an xid or floor that
-- is not a number; 22023: an xid not yet assigned).
--
-- The floor is the clock, in whole milliseconds less 5, read before a probe of
-- pgqueue._message_group_room that found no message of the group with the turn. Why it holds:
-- the probe ran under the group's lock (that function is called under it only). Every turn given
-- later is given by a call that takes that lock after this transaction ends, or (group
-- concurrency 1) by the hand-off of a message that had the turn (pgqueue._message_left), which
-- this transaction's probe would have seen; either reads its clock after this one. The turn keys
-- of the hand-offs, of message_fail and of message_defer (the only calls that change the key of
-- a message holding the turn, which got it after the probe) are not below their clock
-- (pgqueue._turn_key with p_later). An enqueue keys a message below its clock only with an
-- explicit dequeue_at; less than 5 ms below its clock reading in whole milliseconds
-- (pgqueue._write_clock) it is marked as keyed with the clock (column write_mark), so at or
-- above the floor, which is 5 ms below in the same unit (a first version took the clock in
-- microseconds less 5 ms: a key in the same millisecond, 5.3 ms below, passed it unsignalled, a
-- review); further below, trigger message_placed_low advances the queue's lock stripe before the
-- group's lock is released, and the floor no longer holds for a caller that reads the stripe
-- after that lock, or after its DELETE of the group's message with the turn (no other message
-- of the group can get the turn meanwhile). Like the session hints and the wait floor, this
-- counts on a wall clock that does not step back (an enqueue keyed 5 ms below a clock stepped back
-- by any amount is unsignalled and may be below the floor: a review). The setting is the
-- session's and is transactional: a rollback, or one to a savepoint, restores the one before
-- (which held too); a floor kept by a transaction still running is seen by its own session only;
-- a prepared transaction's is not used unless it committed. Not kept for a group key longer than
-- 200 bytes (the setting would hold it) or under REPEATABLE READ or SERIALIZABLE.
CREATE FUNCTION pgqueue._group_floor_get(p_queue_id integer, p_group text, p_stripe bigint)
RETURNS bigint
LANGUAGE sql VOLATILE  -- (as pgqueue._group_floor_at, so that both are inlined)
RETURN coalesce(pgqueue._group_floor_at(
                    pg_catalog.current_setting('pgqueue.group_floor_' || p_queue_id || '_' || (pg_catalog.hashtext(p_group) & 255), true),
                    p_group, p_stripe),
                -9223372036854775808);

COMMENT ON FUNCTION pgqueue._group_floor_get(integer, text, bigint) IS
    'pgqueue internal: the session''s floor of a message group''s turn keys while the queue''s stripe reads p_stripe; the lowest bigint if none';

-- Whether a message group may get a new turn: it has no message waiting with its turn, and fewer
-- than p_concurrency in flight (0: no limit). Both bounded: message_group_turn_idx, at most
-- p_concurrency entries counted. Call under the group's lock (pgqueue._message_group_lock). The
-- probes start at the session's floor of the group's turn keys (pgqueue._group_floor_get, for the
-- queue's lock stripe read now, under the lock), and when they find no message of the group with
-- the turn at all, this call keeps a new one in the session, the clock it read before them (whole
-- ms) less 5 ms, with this transaction's xid (see there why it holds; a setting of a PL/pgSQL call's own: 1 us, where a call of an SQL
-- function that set it cost 37): under a held snapshot, a producer into a group its consumers keep
-- up with then walks the entries of the deliveries since its last enqueue into the group, not of
-- all since the hold began (docs/performance.md). With group concurrency 0 the look for a message
-- in flight is made for that only.
-- The lease is tested with pgqueue._leased, which the planner cannot match to the predicates of
-- message_leased_idx and message_ready_idx: statistics taken while nothing was leased make the
-- first look empty, and a generic plan then walked the whole queue's leases for the group.
-- enable_seqscan = off: planned while pgqueue.message is empty after a VACUUM or ANALYZE (0 rows
-- recorded, about a page now), both probes are a Seq Scan, which the session's generic plan
-- keeps: a grouped batch then scanned every message it had inserted before each one, O(n^2)
-- (10,000 messages 25-32 s against 1-2 s; tests/test_group_probes.py).
CREATE FUNCTION pgqueue._message_group_room(p_queue_id integer, p_group text, p_concurrency integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
AS $$
DECLARE
    v_seen  bigint := pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id));
    v_clock bigint := (pgqueue.now_ms() - 5) * 1000;  -- (whole ms: see pgqueue._group_floor_get)
    v_floor bigint := pgqueue._group_floor_get(p_queue_id, p_group, v_seen);
    v_busy  bigint;  -- NULL: a message waits with the turn; else how many in flight, counted up to the limit
BEGIN
    -- (Each probe in the order of the index: with the floor's range a generic plan chose a
    -- bitmap scan, which never marks an index entry dead, so that without a hold the entries of
    -- deleted messages piled up until a vacuum. The floor as an initplan, whose value no plan
    -- knows: as a variable, custom plans, which knew it, looked cheaper than the generic one,
    -- and the plan cache kept planning the statement at every call; both cost a producer
    -- into a group its consumers keep up with about half its rate.)
    SELECT CASE WHEN (SELECT m.turn_at FROM pgqueue.message m
                       WHERE m.queue_id = p_queue_id AND m.group_key = p_group
                         AND m.turn_at IS NOT NULL AND m.turn_at >= (SELECT v_floor)
                         AND NOT pgqueue._leased(m.locked_until)
                       ORDER BY m.turn_at LIMIT 1) IS NULL
                THEN (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message m
                                             WHERE m.queue_id = p_queue_id AND m.group_key = p_group
                                               AND m.turn_at IS NOT NULL AND m.turn_at >= (SELECT v_floor)
                                               AND pgqueue._leased(m.locked_until)
                                             ORDER BY m.turn_at
                                             LIMIT greatest(p_concurrency, 1)) f) END
      INTO v_busy;
    -- (not again within 10 ms of the last: a setting written at every enqueue into a group its
    -- consumers keep up with cost it a few us)
    IF v_busy = 0 AND v_floor < v_clock - 10000 AND v_seen IS NOT NULL AND octet_length(p_group) <= 200
       AND current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        PERFORM set_config('pgqueue.group_floor_' || p_queue_id || '_' || (hashtext(p_group) & 255),
                           v_seen || '/' || v_clock || '/' || pg_current_xact_id() || '/' || p_group, false);
    END IF;
    RETURN v_busy IS NOT NULL AND (p_concurrency = 0 OR v_busy < p_concurrency);
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_room(integer, text, integer) IS
    'pgqueue internal: true if a message group has no turn waiting and room in flight for one more';

-- Give a message group its next turn if it is due one: when the group has no message waiting with
-- its turn and fewer than p_concurrency in flight (0: no limit), its first message waiting behind,
-- by (dequeue_at, id), gets the turn from now on (pgqueue._turn_key: not before the clock), so
-- behind the groups already waiting: the round-robin. Called after a message of the group was
-- handed out (message_dequeue, message_complete_and_dequeue, message_complete_batch), left the
-- queue (pgqueue._message_left), was enqueued behind a waiting one into a group with room
-- (pgqueue._message_insert), or its limit was raised (queue_alter), under the group's lock, so
-- that every such decision sees the ones committed before it. Returns whether a turn
-- was given. The turn's key is read after the caller's DELETE or UPDATE assigned its xid, as the
-- session hints of pgqueue._message_take need (that is why no trigger watches turn_at alone).
--
-- The common path is two statements: the lock, and one UPDATE whose WHERE holds the room (the
-- probes of pgqueue._message_group_room, as initplans: run once, under the lock's newer
-- snapshot, from the session's floor of the group's turn keys, pgqueue._group_floor_get).
-- With one in flight per group the hand-off of every delivery is done by trigger
-- pgqueue._message_left without this function, which it calls only when its own UPDATE found no
-- message waiting; the statement below covers that case too. When it changes nothing: nothing waits (one more probe), or no room, or the message it chose was
-- deleted meanwhile by message_cancel (READ COMMITTED reads the next one; REPEATABLE READ
-- raises 40001 instead).
-- p_concurrency is the queue's limit as the caller read it after it took the queue's lock stripe
-- (message_dequeue reads it again after the stripe; the others read it after their first
-- statement took it): a consumer that waited behind queue_alter's new limit uses that one
-- (specs/group_alter.spec). (A read of the limit inside this function, for every hand-off,
-- cost 10-20 us a call and did the callers' work again: taken out.)
CREATE FUNCTION pgqueue._message_group_next(p_queue_id integer, p_group text, p_concurrency integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_locked boolean;
    v_floor  bigint;
BEGIN
    v_locked := pgqueue._message_group_lock(p_queue_id, p_group);
    IF NOT v_locked THEN
        -- REPEATABLE READ: a message of the group added after this snapshot would be left waiting
        -- with no turn, or passed by a later one that this snapshot sees
        -- (pgqueue._message_group_lock; specs/rr_group_order.spec)
        RAISE EXCEPTION 'message group "%" changed after this transaction''s snapshot', p_group
            USING ERRCODE = '40001',
                  HINT = 'Retry the transaction, or hand messages of grouped queues out and complete them under READ COMMITTED.';
    END IF;
    -- the session's floor of the group's turn keys, for the stripe read now, under the lock
    -- (pgqueue._group_floor_get)
    v_floor := pgqueue._group_floor_get(p_queue_id, p_group, pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)));
    -- Nothing waiting (a group its consumers keep up with) and no floor, or one kept more than
    -- 20 ms ago: nothing to hand on, but the room's probes keep a new floor if the group has no
    -- message with the turn (this call's delivery was its last), so that the hand-offs of this
    -- session's next deliveries in the group walk at most the entries of 20 ms of the group's
    -- deliveries under a hold. (The room's call at every such hand-off cost a delivery 35 us
    -- more without a hold.)
    IF v_floor < (date_part('epoch', clock_timestamp()) * 1000000)::bigint - 25000
       AND NOT EXISTS (SELECT 1 FROM pgqueue.message w
                        WHERE w.queue_id = p_queue_id AND w.group_key = p_group AND w.turn_at IS NULL) THEN
        PERFORM pgqueue._message_group_room(p_queue_id, p_group, p_concurrency);
        RETURN false;
    END IF;
    UPDATE pgqueue.message m
       SET turn_at = pgqueue._turn_key(m.dequeue_at, true)
     WHERE m.id = (SELECT w.id FROM pgqueue.message w
                    WHERE w.queue_id = p_queue_id AND w.group_key = p_group AND w.turn_at IS NULL
                    ORDER BY w.dequeue_at, w.id
                    LIMIT 1)
       -- the room: no turn waiting ...
       AND (SELECT t.turn_at FROM pgqueue.message t
             WHERE t.queue_id = p_queue_id AND t.group_key = p_group AND t.turn_at IS NOT NULL
               AND t.turn_at >= (SELECT v_floor) AND NOT pgqueue._leased(t.locked_until)
             ORDER BY t.turn_at LIMIT 1) IS NULL
       -- ... and fewer than p_concurrency in flight (0: no limit)
       AND (p_concurrency = 0
            OR (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message t
                                       WHERE t.queue_id = p_queue_id AND t.group_key = p_group
                                         AND t.turn_at IS NOT NULL AND t.turn_at >= (SELECT v_floor)
                                         AND pgqueue._leased(t.locked_until)
                                       ORDER BY t.turn_at LIMIT p_concurrency) f) < p_concurrency);
    IF FOUND THEN
        RETURN true;
    END IF;
    LOOP
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pgqueue.message w
                               WHERE w.queue_id = p_queue_id AND w.group_key = p_group
                                 AND w.turn_at IS NULL)
               OR NOT pgqueue._message_group_room(p_queue_id, p_group, p_concurrency);
        UPDATE pgqueue.message m
           SET turn_at = pgqueue._turn_key(m.dequeue_at, true)
         WHERE m.id = (SELECT w.id FROM pgqueue.message w
                        WHERE w.queue_id = p_queue_id AND w.group_key = p_group AND w.turn_at IS NULL
                        ORDER BY w.dequeue_at, w.id
                        LIMIT 1);
        IF FOUND THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_next(integer, text, integer) IS
    'pgqueue internal: give a message group its next turn if it has none waiting and room in flight';

-- pgqueue._message_group_next for a producer's enqueue (pgqueue._message_insert): a message
-- enqueued into a group with room behind a message of the group waiting without a turn (a group
-- left below its limit, docs/guarantees.md) hands the turn to that one. Producers may not UPDATE
-- pgqueue.message (docs/grants.sql: with it, plain SQL could lock messages FOR UPDATE, which
-- every consumer then skips), so the hand-off runs as the owner; it gives a turn only by the
-- group's rules: under the group's lock, taken first, then the queue's limit read in a later
-- statement, so that a direct call (without the queue's lock stripe, which keeps queue_alter
-- out of an enqueue) sees a changed limit that committed while it waited for the lock (a
-- review: it read the old one first and handed a turn past a lowered limit). Not executable by
-- PUBLIC (the recipes grant it to producers, admins and the Spark role, whose enqueues call it
-- too).
CREATE FUNCTION pgqueue._message_group_hand(p_queue_id integer, p_group text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_concurrency integer;
BEGIN
    IF p_group IS NULL THEN
        RETURN false;  -- a message without a group is a group of its own: nothing to hand on
    END IF;
    -- (PQ001 for a queue without groups; false: a REPEATABLE READ snapshot may miss a decision)
    IF NOT pgqueue._message_group_lock(p_queue_id, p_group) THEN
        RAISE EXCEPTION 'message group "%" changed after this transaction''s snapshot', p_group
            USING ERRCODE = '40001',
                  HINT = 'Retry the transaction, or enqueue to grouped queues under READ COMMITTED.';
    END IF;
    SELECT q.group_concurrency INTO v_concurrency FROM pgqueue.queue q WHERE q.id = p_queue_id;
    IF v_concurrency IS NULL THEN
        RETURN false;  -- dropped meanwhile
    END IF;
    RETURN pgqueue._message_group_next(p_queue_id, p_group, v_concurrency);
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._message_group_hand(integer, text) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._message_group_hand(integer, text) IS
    'pgqueue internal: a producer''s hand-off of a message group''s turn to its first waiting message (as the owner, by the group''s rules)';

-- Insert one message with a group and/or an idempotency key, or into a grouped queue; returns its
-- id, or the id of the live message with the same key (or of the message that had the key within
-- the queue's key_window_ms), inserting nothing then. The caller has admitted the message
-- (pgqueue._queue_admit) and passes the queue row, p_dequeue_at (NULL: now) and created_at.
--
-- Keys: concurrent producers of one key meet on message_idem_key_idx: the INSERT ... ON CONFLICT
-- DO NOTHING of the later one waits for the earlier one's transaction; if it commits, the later
-- one reads its id (READ COMMITTED: a new snapshot per statement; REPEATABLE READ raises 40001).
-- Groups: under the group's lock (pgqueue._message_group_lock) the message gets its group's turn
-- at once if the group has none waiting and room in flight, and no message of the group waits
-- ahead of it (else that one gets the turn, below); a message without a group in a
-- grouped queue is a group of its own and always has its turn. The turn's key: a message due now
-- (p_dequeue_at NULL) has it from the clock in microseconds, read after the xid, as a turn handed
-- on has (pgqueue._turn_key), so it goes behind every turn handed on before it was written, also
-- within the same millisecond (sql/90_groups.sql). A message with a dequeue_at of its own
-- (scheduled, or a priority in the past) has that time's key.
--
-- The key's look-ups are index probes whatever the statistics: a session's generic plan made
-- while pgqueue.message or pgqueue.message_key was recorded empty (a queue that drained, then a
-- VACUUM or ANALYZE) is kept until the next ANALYZE. enable_seqscan = off keeps both off Seq
-- Scans. message_key: recorded empty, its two indexes cost the same (one row either way), and
-- the tie went to message_key_until_idx (queue_id, until) with Index Cond queue_id alone (the
-- clock in "until > now_ms()" is volatile, never an index condition): a walk of every key the
-- queue keeps, 7.2-8.3 ms a keyed create at 60,000 against 0.23-0.29 on a new session
-- (bench/experiments/emptied_table/keyed_create.py, docs/performance.md). So the key is asked
-- for in message_key_pkey's order (ORDER BY idem_key, the key given as a range of one value,
-- which unlike "=" does not make that order trivial): only message_key_pkey gives it, any other
-- path needs a Sort, and enable_sort = off prices a Sort out. (A deterministic collation, which
-- a database's default is: ">= x AND <= x" holds of x alone.) pgqueue._message_key_taken is the
-- same look-up for message_create's capped queues.
CREATE FUNCTION pgqueue._message_insert(
    p_queue        pgqueue.queue,
    p_content      bytea,
    p_dequeue_at   bigint,
    p_content_type text,
    p_group        text,
    p_key          text,
    p_created_at   bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- its key look-ups by index, whatever the statistics (_message_group_room)
SET enable_sort = off     -- the look-up in message_key by message_key_pkey (above)
AS $$
DECLARE
    v_at   bigint;
    v_turn bigint;
    v_id   bigint;
    v_held boolean;
    v_hand boolean := false;  -- the group's turn is an earlier waiting message's (below)
    v_kept bigint;
BEGIN
    PERFORM pgqueue._check_message_key(p_group, 'message group'::text);
    PERFORM pgqueue._check_message_key(p_key, 'idempotency key'::text);
    IF p_group IS NOT NULL AND p_queue.group_concurrency IS NULL THEN
        RAISE EXCEPTION 'queue "%" has no message groups', p_queue.name
            USING ERRCODE = '22023',
                  HINT = 'Create the queue with pgqueue.queue_create(..., p_group_concurrency => n).';
    END IF;
    LOOP
        IF p_key IS NOT NULL THEN
            SELECT m.id INTO v_id FROM pgqueue.message m
             WHERE m.queue_id = p_queue.id AND m.idem_key = p_key;
            IF FOUND THEN
                RETURN v_id;
            END IF;
            -- a key kept by a message that left within its window, whatever the window is now
            -- (a window changed to 0 applies to the messages that leave after the change)
            SELECT k.id INTO v_id FROM pgqueue.message_key k
             WHERE k.queue_id = p_queue.id AND k.idem_key >= p_key AND k.idem_key <= p_key
               AND k.until > pgqueue.now_ms()
             ORDER BY k.idem_key;  -- by message_key_pkey alone (above)
            IF FOUND THEN
                RETURN v_id;
            END IF;
            IF p_queue.key_window_ms > 0 AND current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
                -- A key kept within the window is a pgqueue.message_key row written when its
                -- message left. A REPEATABLE READ or SERIALIZABLE snapshot taken before that
                -- message was created sees neither the message nor the row, and nothing conflicts
                -- with the INSERT below (the message's index entry is dead): the key would be
                -- enqueued twice. Producers may not write or lock pgqueue.message_key, so nothing
                -- here can turn that into a 40001: a new message with a key is refused (PQ009).
                PERFORM pgqueue._require_read_committed('an enqueue of a new key into a queue with key_window_ms');
            END IF;
        END IF;
        v_at := coalesce(p_dequeue_at, pgqueue._write_clock());
        IF p_queue.group_concurrency IS NULL THEN
            v_turn := NULL;
        ELSIF p_group IS NULL THEN
            v_turn := pgqueue._turn_key(v_at, p_dequeue_at IS NULL);
        ELSE
            v_held := pgqueue._message_group_lock(p_queue.id, p_group);
            IF NOT v_held THEN
                -- REPEATABLE READ: a decision on the group's turns committed after this snapshot
                -- may be missed either way: the message taking the room may have left (this one
                -- would wait with no turn), or another producer's message may have taken the
                -- room this snapshot still sees free (this one would get a turn too: two in flight
                -- with a limit of one, specs/rr_group_producer.spec) (pgqueue._message_group_lock)
                RAISE EXCEPTION 'message group "%" changed after this transaction''s snapshot', p_group
                    USING ERRCODE = '40001',
                          HINT = 'Retry the transaction, or enqueue to grouped queues under READ COMMITTED.';
            END IF;
            IF p_key IS NOT NULL THEN
                -- The key again, in a snapshot taken now that the group's lock is held: the look
                -- above may have run before a message of this group with the key committed, while
                -- this call waited for the lock, and a consumer may be completing that message
                -- now, its hand-off waiting for the lock this call holds. The INSERT's conflict on
                -- the key would wait for that consumer: a deadlock of two single calls (a review;
                -- specs/idempotent_create.spec). That message is still visible here (its DELETE
                -- has not committed): its id is the answer, as if the look had run a moment later.
                SELECT m.id INTO v_id FROM pgqueue.message m
                 WHERE m.queue_id = p_queue.id AND m.idem_key = p_key;
                IF FOUND THEN
                    RETURN v_id;
                END IF;
            END IF;
            v_turn := NULL;  -- (a round of this loop after a key's conflict decides again)
            v_hand := false;
            IF pgqueue._message_group_room(p_queue.id, p_group, p_queue.group_concurrency) THEN
                -- Room, and a message of the group waiting without a turn ahead of this one by
                -- (dequeue_at, id): a group can be left below its limit with messages waiting
                -- (a further round of a dequeue hands no turn on to a group whose lock it would
                -- take out of stripe order, docs/guarantees.md), and the turn is that message's,
                -- not this later one's (tests/test_fuzz_groups.py). It gets it once this one is in.
                IF EXISTS (SELECT 1 FROM pgqueue.message w
                            WHERE w.queue_id = p_queue.id AND w.group_key = p_group AND w.turn_at IS NULL
                              AND w.dequeue_at <= v_at) THEN
                    v_hand := true;
                ELSE
                    v_turn := pgqueue._turn_key(v_at, p_dequeue_at IS NULL);
                END IF;
            END IF;
        END IF;
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type,
                                     group_key, turn_at, idem_key, write_mark)
        VALUES (p_queue.id, v_at, p_created_at, p_content, p_content_type, p_group, v_turn, p_key,
                -- keyed at or above this writer's clock: no check by trigger message_placed_low
                CASE WHEN p_dequeue_at IS NULL OR coalesce(v_turn / 1000, v_at) >= pgqueue._write_clock() - 5
                     THEN false END)
        ON CONFLICT (queue_id, idem_key) WHERE idem_key IS NOT NULL DO NOTHING
        RETURNING id INTO v_id;
        IF v_id IS NOT NULL AND p_key IS NOT NULL AND p_queue.max_size IS NULL THEN
            -- The look-ups above ran before this INSERT, which may have waited: for the group's
            -- lock, or on message_idem_key_idx for a producer's transaction that created the key
            -- and then took it away. A message with the key that left meanwhile within its window
            -- kept the key in message_key, where this statement (a newer snapshot under READ
            -- COMMITTED) finds it: a duplicate of a key within its window would get in (a
            -- review). The statement fails instead, with nothing inserted (40001: its retry
            -- returns the kept id). (Not a DELETE of the row just inserted: producers may not
            -- delete messages, docs/grants.sql.) On a capped queue producers take turns at the
            -- admission, which the look-ups ran after.
            SELECT k.id INTO v_kept FROM pgqueue.message_key k
             WHERE k.queue_id = p_queue.id AND k.idem_key >= p_key AND k.idem_key <= p_key
               AND k.until > pgqueue.now_ms()
             ORDER BY k.idem_key;  -- by message_key_pkey alone (above)
            IF FOUND THEN
                RAISE EXCEPTION 'the idempotency key of this message was kept by a message that left while the enqueue waited'
                    USING ERRCODE = '40001',
                          DETAIL = format('Message %s keeps the key for the queue''s key_window_ms.', v_kept),
                          HINT = 'Retry the transaction: the enqueue then returns the id that keeps the key.';
            END IF;
        END IF;
        IF v_id IS NOT NULL THEN
            IF v_hand THEN  -- (as the owner: producers may not update messages)
                PERFORM pgqueue._message_group_hand(p_queue.id, p_group);
            END IF;
            RETURN v_id;
        END IF;
        -- another producer's message with this key committed while this one waited: read it
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_insert(pgqueue.queue, bytea, bigint, text, text, text, bigint) IS
    'pgqueue internal: insert a message with a group and/or idempotency key (or into a grouped queue); the existing id if the key is taken';

-- Remove up to p_limit windows of idempotency keys that have ended (pgqueue.message_key rows
-- whose until has passed), oldest first, skipping rows other sessions hold: pgqueue._message_left's
-- clean-up, two for each window written, so that the table stays as small as the keys of one
-- window. A function of its own so that _message_left can run it plainly under READ COMMITTED
-- and, under REPEATABLE READ or SERIALIZABLE, in a subtransaction that gives up on a
-- serialization failure (see there).
CREATE FUNCTION pgqueue._message_key_expire(p_queue_id integer, p_now bigint, p_limit integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM pgqueue.message_key k
     WHERE (k.queue_id, k.idem_key) IN (SELECT e.queue_id, e.idem_key FROM pgqueue.message_key e
                                         WHERE e.queue_id = p_queue_id AND e.until <= p_now
                                         ORDER BY e.until
                                         LIMIT p_limit
                                           FOR UPDATE SKIP LOCKED);
$$;

COMMENT ON FUNCTION pgqueue._message_key_expire(integer, bigint, integer) IS
    'pgqueue internal: delete up to p_limit ended idempotency-key windows of a queue (pgqueue._message_left)';

-- A group's wait floor (pgqueue._wait_floor_next) as a lease records it on the message it hands
-- out, on a queue of group concurrency 1: [1:6] as they were, then [7] p_pre, the queue's lock
-- stripe as message_dequeue read it before its take assigned the transaction's xid, and [8] that
-- xid, the lease's. The message's completion (pgqueue.message_complete) passes [7] to its
-- hand-off as the stripe read before its own xid if its xid is above [8]: xids are assigned in
-- order, so [7] was read before the completion's xid was, as a new candidate needs (a completion
-- whose transaction had its xid before the lease's takes none). Its DELETE assigns that xid
-- before it knows the message's queue, so it cannot read the stripe first itself. A floor that
-- is carried on from turn to turn keeps [7:8] of an earlier lease: still a stripe read before
-- that lease's xid, so as safe, only older (its queue's stripe more likely to have moved since).
-- NULL elements where the message had no floor (it holds for no one: [6] is NULL).
CREATE FUNCTION pgqueue._wait_floor_leased(p_floor bigint[], p_pre bigint)
RETURNS bigint[]
LANGUAGE sql VOLATILE
RETURN coalesce(p_floor[1:6], '{NULL,NULL,NULL,NULL,NULL,NULL}'::bigint[])
       OPERATOR(pg_catalog.||) ARRAY[p_pre, pg_catalog.pg_current_xact_id()::pg_catalog.text::bigint];

COMMENT ON FUNCTION pgqueue._wait_floor_leased(bigint[], bigint) IS
    'pgqueue internal: a group''s wait floor with the lock stripe read before a lease''s xid, and that xid, for the hand-off of the message''s completion';

-- The wait floor that the ordered hand-off (a queue of group concurrency 1: pgqueue._message_left,
-- and its copies in message_dequeue and message_complete) records on the message it gives the
-- turn, the key (p_at, p_id), for the group's next hand-off: where that one's probe of the
-- group's waiting messages may start (message_group_wait_idx, by (dequeue_at, id)). Under a
-- held snapshot the group's first entries there are those of every message handed a turn since
-- the hold began (each turn is an UPDATE; the old version's entry can be neither removed nor
-- marked dead), so a probe from the group's first entry visited them all, and a probe of the
-- group's messages with the turn (message_group_turn_idx, the room) did the same: with 10
-- groups a grouped dequeue fell to a tenth of its rate (docs/performance.md, "Message groups
-- under a held snapshot"). The floor is the session hints' protocol (pgqueue._message_take) for
-- one group, carried from turn to turn on the message holding it: no row of its own (a row
-- updated at every hand-off would pile up versions under the hold just as the entries do).
--
-- Layout: [1:2] V, the floor: no message of the group waits below it (none is visible, and none
-- can become visible) unless one was placed below the clock since [6]; [3:4] C, the candidate
-- for the next V; [5] X, an xid: C becomes V once every transaction with an xid below X has
-- ended; [6] the queue's lock stripe as read before the hand-off's statement (p_stripe).
-- The floor p_floor of the message leaving holds if the stripe was still at its [6] when read
-- before the statement (p_stripe) and again after its snapshot, where the hand-off's statement
-- checks it (pgqueue._wait_floor_ok) before it gives a turn by the floor: its probe then started
-- at V, and (p_at, p_id) is the group's first waiting message that the snapshot sees. p_xmin is
-- that snapshot's xmin, passed by the statement (so that it is the probe's snapshot whether or
-- not this function is inlined: a VOLATILE SQL function that is not inlined takes a snapshot of
-- its own under READ COMMITTED). (Not a read of the stripe here: an argument that calls a
-- volatile function and is used more than once keeps an SQL function from being inlined, and
-- this one, not inlined, cost a grouped delete-mode dequeue a third of its rate: measured.)
--   * C is the key of the message given the turn, or the clock less 5 ms if that is lower (a
--     turn given to a scheduled message): every other message of the group that this snapshot
--     sees waiting comes after it. X is the hand-off's own xid, and the clock its transaction's
--     start (transaction_timestamp), before X: a transaction with an xid above X got it later,
--     and writes its keys from its clock read after that (pgqueue._write_clock), at or above
--     C, or more than 5 ms below its clock, which advances the stripe (trigger
--     message_placed_low) after it got its xid. So that advance must come after the stripe
--     value this floor records: a new candidate is taken only when the stripe was read before
--     X was assigned (p_pre: message_dequeue reads it before its take, if the transaction had
--     no xid yet; a completion passes the one its lease read, if its xid came after the
--     lease's: pgqueue._wait_floor_leased) and is still the value read before the statement
--     (p_stripe); else none (the floor is carried, or starts from the group's first entry
--     with no candidate). A stripe
--     read after X (a first version read it in the hand-off's DELETE, after the take's row
--     lock had assigned X) let a producer with a later xid place a message below C, advance
--     the stripe before that read and commit after the candidate became the floor: the floor
--     passed it (a review; specs/group_wait_floor.spec). (Nor is X the snapshot's xmax: that
--     is the last xid to end plus one, and a transaction still running may have an xid at or
--     above it.) A transaction with an xid below X may have written a key below C and commit
--     later: once every one of them has ended, what they wrote is visible, and a probe from V
--     finds it first.
--   * So at a later hand-off with the floor holding that may take a new candidate: once every
--     xid below X has ended (p_xmin is X or above), V moves to C, or to the key found by this
--     probe from V if that is lower (a late commit below C), and a new candidate is taken;
--     until then, and at every hand-off that may take none, the floor is carried as it is (V
--     does not move: a hand-off without a new candidate would have to record the old one
--     again, which it may, but does not yet). With the floor not holding (a message placed
--     low, a changed concurrency, none recorded) V is the group's first entry.
--   * While the floor holds, the group's one message with the turn is the one leaving: each
--     turn it records was given by the ordered hand-off, which gives it only when no other
--     message of the group has it, under group concurrency 1; every other way a turn is given
--     (a producer's enqueue, pgqueue._message_group_next) looks for a message with the turn
--     and sees the one leaving until the hand-off commits; and a change of the concurrency
--     advances the stripe (queue_alter). The hand-off then skips that probe of the group's
--     turns.
-- What it does not cover: new candidates are taken by message_dequeue's delete mode and by
-- message_complete after a lease of message_dequeue (and by _message_left when they call it);
-- a completion in the lease's transaction or in one that had its xid before the lease's, a
-- lease taken in a transaction that had an xid already (message_complete_and_dequeue's
-- further takes, after its acknowledgements; its first take records the stripe), and the batch
-- acknowledgements (which pass no floor) carry floors or start from the group's first entry.
-- And a transaction that holds an xid for the whole hold (issue 12's case b, an idle session)
-- keeps every candidate from becoming the floor, so the group's probes walk back to the floor
-- of when it began, as they did from the first entry before (the session hints set such a
-- transaction aside; the floor does not).
CREATE FUNCTION pgqueue._wait_floor_next(p_floor bigint[], p_stripe bigint, p_pre bigint, p_xmin bigint,
                                         p_at bigint, p_id bigint)
RETURNS bigint[]
LANGUAGE sql VOLATILE
RETURN CASE
    -- the floor holds, and its candidate waits for the transactions before X, or this hand-off
    -- may take no new one: carried as it is
    WHEN coalesce(p_floor[6] = p_stripe, false)
         AND (p_xmin < p_floor[5] OR NOT coalesce(p_pre = p_stripe, false))
        THEN p_floor
    -- no floor that holds, and no new candidate: from the group's first entry
    WHEN NOT coalesce(p_pre = p_stripe, false)
        THEN ARRAY[-9223372036854775808, -9223372036854775808, -9223372036854775808, -9223372036854775808,
                   0, p_stripe]::bigint[]
    -- V: the group's first entry if there is no floor that holds, else C (or the key found, if
    -- lower); then a new candidate
    ELSE CASE WHEN NOT coalesce(p_floor[6] = p_stripe, false)
                  THEN ARRAY[-9223372036854775808, -9223372036854775808]::bigint[]
              WHEN (p_floor[3], p_floor[4]) <= (p_at, p_id) THEN p_floor[3:4]
              ELSE ARRAY[p_at, p_id] END
         || CASE WHEN ((pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp()) * 1000000)::bigint / 1000 - 5,
                       -9223372036854775808) <= (p_at, p_id)
                 THEN ARRAY[(pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp()) * 1000000)::bigint / 1000 - 5,
                            -9223372036854775808]
                 ELSE ARRAY[p_at, p_id] END
         || ARRAY[pg_catalog.pg_current_xact_id()::text::bigint, p_stripe]
    END;

COMMENT ON FUNCTION pgqueue._wait_floor_next(bigint[], bigint, bigint, bigint, bigint, bigint) IS
    'pgqueue internal: the wait floor the ordered hand-off records on the message it gives its group''s turn (where the group''s next hand-off starts its probe)';

-- Whether a group's wait floor p_floor (pgqueue._wait_floor_next: on the message leaving with the
-- group's turn) still holds: no message was placed below the clock in the queue, and its group
-- concurrency was not changed, since the floor was recorded (the queue's lock stripe, which both
-- advance, still at the value the floor saw). Read inside the hand-off's statement, after its
-- snapshot was taken: a message placed low that the snapshot sees advanced the stripe before
-- it committed, so before this read (a read before the statement could miss it and hand the
-- turn past it). False for a NULL floor (reading nothing).
CREATE FUNCTION pgqueue._wait_floor_ok(p_floor bigint[], p_queue_id integer)
RETURNS boolean
LANGUAGE sql VOLATILE
RETURN CASE WHEN p_floor IS NULL THEN false
            ELSE coalesce(p_floor[6] OPERATOR(pg_catalog.=)
                          pg_catalog.pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)), false) END;

COMMENT ON FUNCTION pgqueue._wait_floor_ok(bigint[], integer) IS
    'pgqueue internal: true if a message group''s wait floor still holds (the queue''s lock stripe has not moved since it was recorded)';

-- A message left pgqueue.message (completed, delivered in delete mode, cancelled, acknowledged by
-- Spark, dead-lettered): keep its idempotency key p_idem_key taken for the queue's key_window_ms
-- (pgqueue._dead_letter passes none: a dead letter frees its key at once), removing two windows
-- that have ended on the way (so the
-- table stays as small as the keys of one window), and give its group its next turn
-- (pgqueue._message_group_next). Called by the function that deleted the row, after its DELETE,
-- for a row with an idempotency key or with its group's turn (the callers test that, so that
-- other rows cost no call): message_dequeue (delete mode), message_complete,
-- message_complete_batch, message_cancel, spark_ack and pgqueue._dead_letter. Nothing when the
-- queue is gone (queue_drop). Not a trigger (AFTER DELETE FOR EACH ROW, as it was while 0.4 was
-- developed): a trigger's presence alone cost every delete-mode dequeue 10 us of about 155 of
-- server time (its WHEN clause prepared at every statement, the deleted row fetched again for
-- it), whether it fired or not (docs/performance.md). A row deleted with plain SQL is not
-- handed on (docs/guarantees.md). Returns whether it took the group's lock (a multi-round
-- message_dequeue keeps its later locks in stripe order with it: see there).
--
-- With one in flight per group (group concurrency 1, the ordered case) the message leaving is the
-- group's only one with the turn, and the common hand-off is done here by one UPDATE, without the
-- group's lock and without the two calls of pgqueue._message_group_next: the group's first
-- message waiting gets the turn if no message of the group has it (that function's UPDATE with
-- one in flight allowed). That needs no lock because nothing else can give the group a turn
-- meanwhile: a producer gives its new message the turn only if it sees no message with the
-- turn, and it sees the one leaving until this transaction commits, which commits the new turn
-- with it. When the UPDATE finds no message waiting (or its row was cancelled meanwhile),
-- pgqueue._message_group_next takes the group's lock and looks again under a newer snapshot: a
-- producer adding a message now either waits for that lock and gives its own message the turn
-- (it then sees the one leaving gone), or holds it first and is seen (specs/group_producer.spec).
-- Against the call chain through _message_group_next at 4 clients: lease + complete 1.23x,
-- delete mode 1.14x (medians of 8 paired rounds; docs/performance.md, "Message groups").
-- The two common callers, message_dequeue (one message in delete mode) and message_complete, run
-- this UPDATE themselves on a queue of group concurrency 1 for a message without an idempotency
-- key, and only when it handed nothing on call this function (message_complete, which reads
-- the queue's concurrency in its UPDATE) or pgqueue._message_group_next (message_dequeue, which
-- knows it): the call and its read of the queue's row cost a grouped delete-mode dequeue 8% and
-- a lease + complete 4% (session 28).
-- The three copies of the statement must stay the same (tests/test_group_probes.py).
-- p_floor: the leaving message's wait_floor (its callers that read it pass it; NULL: none), where
-- that UPDATE starts its probe of the group's waiting messages, and which lets it skip the probe
-- of the group's turns; p_pre: the queue's lock stripe as the caller read it before its
-- transaction's xid was assigned (message_dequeue; message_complete passes the one its lease
-- recorded, pgqueue._wait_floor_leased; NULL: none so read), without which the hand-off takes
-- no new candidate for the floor (pgqueue._wait_floor_next).
CREATE FUNCTION pgqueue._message_left(
    p_queue_id integer,
    p_id       bigint,
    p_group    text,
    p_turn_at  bigint,
    p_idem_key text,
    p_floor    bigint[] DEFAULT NULL,
    p_pre      bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_window      bigint;
    v_concurrency integer;
    v_now         bigint;
    v_turned      boolean;
    v_written     integer;  -- key windows this transaction wrote before (REPEATABLE READ)
    v_seen        bigint;   -- the queue's lock stripe before the hand-off (pgqueue._wait_floor_next)
BEGIN
    SELECT q.key_window_ms, q.group_concurrency INTO v_window, v_concurrency
      FROM pgqueue.queue q WHERE q.id = p_queue_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_idem_key IS NOT NULL AND v_window > 0 THEN
        v_now := pgqueue.now_ms();
        INSERT INTO pgqueue.message_key AS k (queue_id, idem_key, id, until)
        VALUES (p_queue_id, p_idem_key, p_id, v_now + v_window)
        ON CONFLICT (queue_id, idem_key) DO UPDATE SET id = excluded.id, until = excluded.until;
        IF current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
            PERFORM pgqueue._message_key_expire(p_queue_id, v_now, 2);
        ELSE
            -- REPEATABLE READ or SERIALIZABLE: an ended window another session removed after this
            -- snapshot raises 40001 when locked (SKIP LOCKED skips locks, not that), which failed
            -- an acknowledgement of another message (a review: 251 of 3,000 completes of four
            -- such consumers). So the removal gives up on that, in a subtransaction; one for
            -- every 64 windows the transaction writes, removing two for each of them (a batch
            -- acknowledges many in one transaction, and more than 64 subtransactions with an xid
            -- overflow its snapshot): the count, per queue (the removal is the queue's), in a
            -- setting local to the transaction.
            v_written := coalesce(nullif(current_setting('pgqueue.key_windows_' || p_queue_id, true), '')::integer, 0);
            PERFORM set_config('pgqueue.key_windows_' || p_queue_id, (v_written + 1)::text, true);
            IF v_written % 64 = 0 THEN
                BEGIN
                    PERFORM pgqueue._message_key_expire(p_queue_id, v_now, 128);
                EXCEPTION WHEN serialization_failure THEN
                    NULL;  -- (another call, or session, removes them)
                END;
            END IF;
        END IF;
    END IF;
    IF p_group IS NOT NULL AND p_turn_at IS NOT NULL AND v_concurrency = 1 THEN
        v_seen := pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id));
        UPDATE pgqueue.message m
           SET turn_at = pgqueue._turn_key(m.dequeue_at, true),
               wait_floor = pgqueue._wait_floor_next(p_floor, v_seen, p_pre,
                                                     pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
                                                     m.dequeue_at, m.id)
         WHERE m.id = (SELECT w.id FROM pgqueue.message w
                        WHERE w.queue_id = p_queue_id AND w.group_key = p_group
                          AND w.turn_at IS NULL
                          AND (w.dequeue_at, w.id) >= (CASE WHEN p_floor[6] = v_seen THEN p_floor[1] ELSE -9223372036854775808 END,
                                                       CASE WHEN p_floor[6] = v_seen THEN p_floor[2] ELSE -9223372036854775808 END)
                        ORDER BY w.dequeue_at, w.id
                        LIMIT 1)
           -- the room: while the group's wait floor holds (read before this statement, and
           -- again after its snapshot), no message of the group but the one leaving has
           -- the turn (pgqueue._wait_floor_next)
           AND CASE WHEN p_floor[6] = v_seen THEN (SELECT pgqueue._wait_floor_ok(p_floor, p_queue_id))
                    ELSE (SELECT t.turn_at FROM pgqueue.message t
                           WHERE t.queue_id = p_queue_id AND t.group_key = p_group
                             AND t.turn_at IS NOT NULL
                             AND t.turn_at >= (SELECT pgqueue._group_floor_get(p_queue_id, p_group, v_seen))
                           ORDER BY t.turn_at LIMIT 1) IS NULL END
           -- Under REPEATABLE READ or SERIALIZABLE the snapshot may miss a message a producer
           -- added to the group after it (with an earlier dequeue_at than the one this would
           -- choose): the decision is taken under the group's lock instead, which raises 40001
           -- when the lock shows a decision the snapshot cannot see (specs/rr_group_order.spec)
           AND current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable');
        IF FOUND THEN
            RETURN false;  -- (no lock taken)
        END IF;
        -- nothing handed on: _message_group_next looks again, under the group's lock
    END IF;
    IF p_group IS NOT NULL AND p_turn_at IS NOT NULL AND v_concurrency IS NOT NULL THEN
        v_turned := pgqueue._message_group_next(p_queue_id, p_group, v_concurrency);
        RETURN true;
    END IF;
    RETURN false;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_left(integer, bigint, text, bigint, text, bigint[], bigint) IS
    'pgqueue internal: a message with an idempotency key or its group''s turn left the queue: keep its key for the queue''s window and give its group the next turn; true if it took the group''s lock';

-- When the next message of a queue becomes deliverable (epoch ms), NULL if none is waiting. With
-- message groups, the next turn; with a rate limit, not before its next slot is due.
CREATE OR REPLACE FUNCTION pgqueue.queue_next_due(p_queue text DEFAULT 'default')
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_due   bigint;
BEGIN
    IF v_queue.group_concurrency IS NOT NULL THEN  -- message groups: the next turn
        v_due := least(
            (SELECT m.turn_at / 1000 FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.turn_at IS NOT NULL AND m.locked_until IS NULL
              ORDER BY m.turn_at, m.id LIMIT 1),
            (SELECT m.locked_until FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
              ORDER BY m.locked_until, m.id LIMIT 1));
    ELSE
        v_due := least(
            (SELECT m.dequeue_at FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL
              ORDER BY m.dequeue_at, m.id LIMIT 1),
            (SELECT m.locked_until FROM pgqueue.message m
              WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
              ORDER BY m.locked_until, m.id LIMIT 1));
    END IF;
    IF v_queue.rate_limit IS NOT NULL AND v_due IS NOT NULL THEN
        -- the next slot (pgqueue._rate_room); a last slot more than a minute's slots and 100,000
        -- more ahead was taken at another rate and counts as none
        v_due := greatest(v_due, (SELECT CASE WHEN n.last <= floor(pgqueue.now_ms()::numeric * v_queue.rate_limit / 1000)
                                                              + 60::bigint * v_queue.rate_limit + 100000
                                              THEN ceil((n.last + 1)::numeric * 1000 / v_queue.rate_limit)::bigint END
                                    FROM (SELECT pg_sequence_last_value(pgqueue._rate_seq(v_queue.id)) AS last) n));
    END IF;
    RETURN v_due;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_next_due(text) IS
    'Epoch ms at which the next message of the queue becomes deliverable (scheduled, lease expiry, the next turn of a grouped queue, the next slot of a rate limit); NULL if the queue is empty';

-- The message groups of a queue with the most messages waiting (issue 14): per group, the
-- messages waiting (ready or scheduled, its turn or behind it) and those in flight (leased:
-- a lease that ran out counts here until a dequeue takes it again, since it keeps its group's
-- turn, where queue_stats counts it as ready), the p_limit groups with the most waiting first
-- (ties by key). Counts every grouped message of the queue (message_group_wait_idx and
-- message_group_turn_idx), like queue_stats_exact: a monitoring call, not for every poll. No rows for a queue without groups. Errors: PQ001, 42602,
-- 22004 (NULL queue or limit), 22023 (p_limit outside 1-10000).
CREATE FUNCTION pgqueue.queue_group_stats(p_queue text, p_limit integer DEFAULT 10)
RETURNS TABLE (group_key text, waiting bigint, in_flight bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    PERFORM pgqueue._not_null(p_limit IS NULL, 'p_limit'::text);
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT g.group_key, sum(g.waiting)::bigint, sum(g.in_flight)::bigint
      FROM (SELECT m.group_key, count(*) AS waiting, 0 AS in_flight
              FROM pgqueue.message m
             WHERE m.queue_id = v_queue.id AND m.group_key IS NOT NULL AND m.turn_at IS NULL
             GROUP BY m.group_key
            UNION ALL
            SELECT m.group_key, count(*) FILTER (WHERE m.locked_until IS NULL),
                   count(*) FILTER (WHERE m.locked_until IS NOT NULL)
              FROM pgqueue.message m
             WHERE m.queue_id = v_queue.id AND m.group_key IS NOT NULL AND m.turn_at IS NOT NULL
             GROUP BY m.group_key) g
     GROUP BY g.group_key
     ORDER BY 2 DESC, 1
     LIMIT p_limit;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_group_stats(text, integer) IS
    'The p_limit message groups of a queue with the most messages waiting: group key, waiting (ready or scheduled), in flight (leased, an expired lease too: it keeps the group''s turn)';

-- A message that becomes deliverable more than 5 ms below the clock (the margin the session
-- hints keep below it, pgqueue._message_take), or a lease that runs out more than 5 ms below
-- it, is signalled to the consumers' session hints, unless it was keyed with its writer's own
-- clock reading (pgqueue._message_placed_low; pgqueue._write_clock). The key: a lease's
-- locked_until, else a grouped message's turn_at (in microseconds), else dequeue_at.
--
-- pgqueue's own functions vouch for the rows they key at or above their clock reading less
-- 5 ms (a default dequeue_at, a lease, a retry after its back-off): an INSERT sets write_mark,
-- an UPDATE flips it. Only the other writes (plain SQL, a given dequeue_at below the writer's
-- clock) run the trigger function, which compares the key with the clock. A WHEN clause is
-- prepared at every INSERT or UPDATE statement, so these are a null test and a comparison of
-- two columns: the clock comparison these triggers had in their WHEN clause before (built-in
-- functions only) cost 10-14 us of a message_create and of a lease (docs/performance.md). Not on
-- an UPDATE of turn_at alone: the one such UPDATE, a group's turn handed on, keys the turn with
-- the clock read after its xid (pgqueue._message_group_next); plain SQL that writes turn_at
-- alone is not signalled.
CREATE TRIGGER message_placed_low
    AFTER INSERT ON pgqueue.message
    FOR EACH ROW WHEN (NEW.write_mark IS NULL)
    EXECUTE FUNCTION pgqueue._message_placed_low();
CREATE TRIGGER message_placed_low_update
    AFTER UPDATE OF dequeue_at, locked_until ON pgqueue.message
    FOR EACH ROW WHEN (NEW.write_mark IS NOT DISTINCT FROM OLD.write_mark)
    EXECUTE FUNCTION pgqueue._message_placed_low();
-- ALWAYS: also in a session with session_replication_role = replica (a logical replication
-- apply, a migration tool, a data load), where ordinary triggers do not fire: a priority
-- message, a fail to 0 or a requeue written there was never found by the consumers whose hints
-- had moved past it (a review; tests/test_held_hints.py... see sql/30_consume).
ALTER TABLE pgqueue.message ENABLE ALWAYS TRIGGER message_placed_low;
ALTER TABLE pgqueue.message ENABLE ALWAYS TRIGGER message_placed_low_update;

-- Spark's claim readers: an unknown queue is PQ001 (0.3 returned nothing)

-- Check a consumer name: 22004 if NULL, 42602 if it breaks the rule.
CREATE OR REPLACE FUNCTION pgqueue._spark_check_consumer(p_consumer text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_consumer IS NULL THEN
        RAISE EXCEPTION 'consumer name must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF p_consumer !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$' THEN
        RAISE EXCEPTION 'invalid consumer name %', quote_literal(left(p_consumer, 120))
                        || CASE WHEN length(p_consumer) > 120 THEN format(' (%s characters)', length(p_consumer)) ELSE '' END
            USING ERRCODE = '42602',
                  HINT = 'A consumer name has 1 to 100 characters from A-Z a-z 0-9 _ . : - and does not start with . : or -.';
    END IF;
END;
$$;

-- The id of a queue's consumer, read without a lock, for the readers of claims (which check the
-- name first, pgqueue._spark_check_consumer): PQ006 if there is no such consumer (as spark_ack
-- and spark_release, through pgqueue._spark_consumer_row).
CREATE FUNCTION pgqueue._spark_consumer_get(p_queue pgqueue.queue, p_consumer text)
RETURNS integer
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_consumer integer;
BEGIN
    SELECT c.id INTO v_consumer FROM pgqueue.spark_consumer c
     WHERE c.queue_id = p_queue.id AND c.name = p_consumer;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" does not exist', p_consumer, p_queue.name
            USING ERRCODE = 'PQ006',
                  HINT = 'A consumer is created by its first pgqueue.spark_consumer_open() or pgqueue.spark_claim(); list them with pgqueue.spark_consumers().';
    END IF;
    RETURN v_consumer;
END;
$$;

COMMENT ON FUNCTION pgqueue._spark_consumer_get(pgqueue.queue, text) IS
    'pgqueue internal: the id of a Spark consumer of the queue, read without a lock; PQ006 if there is none';

-- The open claims of a consumer with p_after_seq < seq <= p_up_to_seq, by seq. Errors: 22004
-- for a NULL p_after_seq or p_up_to_seq (not "no bound": 0.3 matched no claim),
-- 22004/42602 for a NULL or invalid consumer name, PQ001/42602/22004 for the queue, PQ006 for a
-- consumer that does not exist (as spark_ack and spark_release; 0.3 gave no rows).
CREATE OR REPLACE FUNCTION pgqueue.spark_claims(p_queue text, p_consumer text, p_after_seq bigint, p_up_to_seq bigint)
RETURNS TABLE (seq bigint, n integer, min_id bigint, max_id bigint, claimed_at bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue    pgqueue.queue;
    v_consumer integer;
BEGIN
    PERFORM pgqueue._not_null(p_after_seq IS NULL, 'p_after_seq'::text);
    PERFORM pgqueue._not_null(p_up_to_seq IS NULL, 'p_up_to_seq'::text);
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_get(p_queue);
    v_consumer := pgqueue._spark_consumer_get(v_queue, p_consumer);
    RETURN QUERY
    SELECT k.seq, k.n, k.min_id, k.max_id, k.claimed_at
      FROM pgqueue.spark_claim k
     WHERE k.consumer_id = v_consumer AND k.seq > p_after_seq AND k.seq <= p_up_to_seq
     ORDER BY k.seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_claims(text, text, bigint, bigint) IS
    'Open claims of a Spark consumer with p_after_seq < seq <= p_up_to_seq: sequence number, message count and id range when claimed, claim time (epoch ms); PQ006 for a consumer that does not exist';

-- The highest sequence number of a consumer's claims not acknowledged yet, NULL if none.
-- Errors: 22004/42602 for a NULL or invalid consumer name, PQ001/42602/22004 for the queue, PQ006
-- for a consumer that does not exist (as spark_ack and spark_release; 0.3 answered NULL, as for
-- a consumer with no open claim).
CREATE OR REPLACE FUNCTION pgqueue.spark_pending_seq(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer integer;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_get(p_queue);
    v_consumer := pgqueue._spark_consumer_get(v_queue, p_consumer);
    RETURN (SELECT max(k.seq) FROM pgqueue.spark_claim k WHERE k.consumer_id = v_consumer);
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_pending_seq(text, text) IS
    'Highest sequence number among the Spark consumer''s claims that are not acknowledged yet; NULL if there is none; PQ006 for a consumer that does not exist';

-- The messages of a consumer's claims p_after_seq < seq <= p_up_to_seq with p_min_id <= id <= p_max_id
-- (p_min_id, p_max_id NULL: no bound on that side). Errors: 22004 for a NULL p_after_seq or
-- p_up_to_seq (0.3 matched no claim), 22004/42602 for a NULL or invalid consumer name,
-- PQ001/42602/22004 for the queue, PQ006 for a consumer that does not exist (as spark_ack and
-- spark_release; 0.3 gave no rows).
CREATE OR REPLACE FUNCTION pgqueue.spark_claimed(
    p_queue     text,
    p_consumer  text,
    p_after_seq bigint,
    p_up_to_seq bigint,
    p_min_id    bigint DEFAULT NULL,
    p_max_id    bigint DEFAULT NULL)
RETURNS TABLE (id bigint, claim_seq bigint, content bytea, content_type text, attempts integer,
               dequeue_at bigint, created_at bigint, state bytea, last_error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off  -- index probes, however small the table when planned (message_complete)
AS $$
#variable_conflict use_column
DECLARE
    v_queue    pgqueue.queue;
    v_consumer integer;
    v_claim    record;
BEGIN
    PERFORM pgqueue._not_null(p_after_seq IS NULL, 'p_after_seq'::text);
    PERFORM pgqueue._not_null(p_up_to_seq IS NULL, 'p_up_to_seq'::text);
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._queue_get(p_queue);
    v_consumer := pgqueue._spark_consumer_get(v_queue, p_consumer);
    -- one bounded range scan of message_claim_idx per claim
    FOR v_claim IN
        SELECT k.id, k.seq FROM pgqueue.spark_claim k
         WHERE k.consumer_id = v_consumer
           AND k.seq > p_after_seq AND k.seq <= p_up_to_seq
         ORDER BY k.seq
    LOOP
        RETURN QUERY
        SELECT m.id, v_claim.seq, m.content, m.content_type, m.attempts, m.dequeue_at,
               m.created_at, m.state, m.last_error
          FROM pgqueue.message m
         WHERE m.claim_id = v_claim.id
           AND m.id >= coalesce(p_min_id, -9223372036854775808)
           AND m.id <= coalesce(p_max_id, 9223372036854775807)
         ORDER BY m.id;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_claimed(text, text, bigint, bigint, bigint, bigint) IS
    'Messages held by a Spark consumer''s claims p_after_seq < seq <= p_up_to_seq, optionally within an id range; reading changes nothing; PQ006 for a consumer that does not exist';

-- spark_publish_log: the Python driver now deletes a job-mode write's row (session 42)
COMMENT ON TABLE pgqueue.spark_publish_log IS
    'pgqueue: the publications of spark_publish by publish key, so that each happens once; a job-mode write''s row is deleted once its driver knows the outcome, a stream keeps its last micro-batch''s';

-- new in 0.4 (session 43): a batch's group locks in the stripes' order
-- Lock the stripes of a batch's message groups (pgqueue._message_group_lock), one a stripe, in
-- the stripes' order, before the batch inserts its messages (message_create_batch,
-- spark_publish). Taken message by message in the batch's order, two batches sharing two
-- stripes in opposite orders deadlocked (40P01); so did a producer's batch and a consumer's
-- (message_complete_batch hands turns on in the stripes' order too). A message whose key is
-- live inserts nothing, but its group's stripe is locked all the same (the batch holds it until
-- it ends). READ COMMITTED only: under REPEATABLE READ each lock also answers whether the
-- snapshot may miss an earlier decision on the stripe, which only pgqueue._message_insert can
-- act on (it raises 40001 for a message it would insert, and returns a live key's id first),
-- so there the locks are taken message by message, as before.
CREATE FUNCTION pgqueue._message_group_locks(p_queue_id integer, p_groups text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_group text;
    v_held  boolean;
BEGIN
    IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
        RETURN;
    END IF;
    FOR v_group IN SELECT DISTINCT ON (hashtext(u.g) & 255) u.g FROM unnest(p_groups) AS u(g)
                    WHERE u.g IS NOT NULL ORDER BY hashtext(u.g) & 255 LOOP
        v_held := pgqueue._message_group_lock(p_queue_id, v_group);  -- (true under READ COMMITTED)
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_group_locks(integer, text[]) IS
    'pgqueue internal: lock the stripes of a batch''s message groups in the stripes'' order (no deadlock between batches); READ COMMITTED only';

-- new in 0.4 (session 43): the Spark stream's refusal of a grouped queue, asked by spark_consumer_open too
-- Refuse a queue with message groups to the Spark streaming consumer (0A000): a claim takes
-- messages by (dequeue_at, id) and holds them until Spark commits the micro-batch, which would
-- break group order and limits. spark_consumer_open asks first, so a refused stream leaves no
-- consumer row behind; spark_claim asks again (a plain SQL caller may skip the open).
CREATE FUNCTION pgqueue._spark_refuse_groups(p_queue pgqueue.queue)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue.group_concurrency IS NOT NULL THEN
        RAISE EXCEPTION 'queue "%" has message groups, which Spark streams do not read yet', p_queue.name
            USING ERRCODE = '0A000',
                  HINT = 'A claim takes messages by (dequeue_at, id) and holds them until Spark commits the micro-batch, which would break group order and limits: consume a grouped queue with message_dequeue (or the Python worker).';
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue._spark_refuse_groups(pgqueue.queue) IS
    'pgqueue internal: 0A000 for a queue with message groups, which Spark streams do not read';

-- new in 0.4 (session 46): the dead_letters view's queue_id, so that a page of one queue's letters is an index walk
-- Dead letters with their queue's name, readable with plain SQL. queue_id (last, added in 0.4)
-- lets a reader page through one queue's letters by index: a filter on the name joins the queue
-- first, and PostgreSQL then sorts all of the queue's letters before the first page; with
-- queue_id = (SELECT id FROM pgqueue.queue WHERE name = ...) it walks dead_letter_queue_idx in
-- (dead_at, id) order and stops at the page's end (the clients' and the dashboard's queries).
CREATE OR REPLACE VIEW pgqueue.dead_letters AS
SELECT d.id, q.name AS queue, d.content, d.content_type, d.state, d.attempts, d.last_error,
       d.created_at, d.dead_at, pgqueue.from_epoch(d.dead_at) AS dead_time, d.queue_id
  FROM pgqueue.dead_letter d
  JOIN pgqueue.queue q ON q.id = d.queue_id;

COMMENT ON VIEW pgqueue.dead_letters IS
    'pgqueue dead letters: queue, content, attempts, last error and when (dead_at epoch ms, dead_time); filter on queue_id for an index walk';

-- new in 0.4 (session 46): one rate-limited queue per rate sequence, enforced by an index (a check of the caller's snapshot let concurrent or old-snapshot callers put two on one stripe)
-- At most one rate-limited queue per rate sequence (pgqueue.queue_rate_<id & 63>): two sharing
-- one would read each other's slots, and neither limit would hold. An index, not a check in
-- queue_create / queue_alter, so that it holds for concurrent callers and old snapshots alike
-- (they raise 22023 for it).
CREATE UNIQUE INDEX queue_rate_stripe_key ON pgqueue.queue ((id & 63)) WHERE rate_limit IS NOT NULL;

-- new in 0.4 (session 46): a rate set by queue_create / queue_alter starts afresh
-- Start a rate-limited queue's slots afresh (queue_create and queue_alter, when they set a rate):
-- its sequence's last slot at the catch-up allowance's start, as after a while idle, so that
-- the queue neither inherits slots taken ahead of the clock (by a dropped queue of the same
-- stripe, or by itself at an earlier limit) nor waits for them. After the row is written: the
-- unique index queue_rate_stripe_key has then made the stripe this queue's (setval is not
-- rolled back; a rolled-back call only gave its own queue a fresh start).
CREATE FUNCTION pgqueue._rate_reset(p_queue_id integer, p_rate integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM setval(pgqueue._rate_seq(p_queue_id),
                   floor(pgqueue.now_ms()::numeric * p_rate / 1000)::bigint - (p_rate + 19) / 20);
END;
$$;

COMMENT ON FUNCTION pgqueue._rate_reset(integer, integer) IS
    'pgqueue internal: start a rate-limited queue''s slots afresh (its catch-up allowance due now)';

-- new in 0.4 (session 51): a capped queue's key check, planned with enable_seqscan off (message_create)
-- The id of the live message with an idempotency key in a queue, else of the message that had the
-- key within the queue's key_window_ms (pgqueue.message_key), else NULL: message_create's check of
-- a key on a capped queue before it asks for room (a full queue would refuse the retry of an
-- enqueue that went through). Both look-ups in one statement, so in one snapshot (those of
-- pgqueue._message_insert are two statements); its own function for the SET clauses that
-- message_create does without (its common
-- path pays no GUC save and restore; this one runs for a key on a capped queue alone): planned
-- while the tables were recorded empty (a queue that drained, then a VACUUM or ANALYZE), the
-- look-ups were Seq Scans, which the session's generic plan kept (tests/test_group_probes.py).
-- enable_seqscan = off, and message_key by message_key_pkey alone: the key asked for in its
-- order, which only message_key_pkey gives, and enable_sort = off (pgqueue._message_insert).
CREATE FUNCTION pgqueue._message_key_taken(p_queue_id integer, p_key text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
AS $$
BEGIN
    RETURN coalesce((SELECT m.id FROM pgqueue.message m
                      WHERE m.queue_id = p_queue_id AND m.idem_key = p_key),
                    (SELECT k.id FROM pgqueue.message_key k  -- kept within its window (pgqueue._message_insert)
                      WHERE k.queue_id = p_queue_id AND k.idem_key >= p_key AND k.idem_key <= p_key
                        AND k.until > pgqueue.now_ms()
                      ORDER BY k.idem_key));
END;
$$;

COMMENT ON FUNCTION pgqueue._message_key_taken(integer, text) IS
    'pgqueue internal: the id of the live message with this key in the queue, or of the message that had it within key_window_ms; NULL if the key is free';

-- No role but the extension's owner can run pgqueue's SECURITY DEFINER functions until the
-- recipes of docs/grants.sql grant them (_queue_quiesce to administrators, schedule_run and the
-- admission, pin and group-lock helpers to the roles whose calls need them): each function
-- revokes EXECUTE from PUBLIC, but the installing role's default privileges (ALTER DEFAULT
-- PRIVILEGES ... GRANT EXECUTE ON FUNCTIONS TO an application role, as managed setups often
-- have) gave it to that role on creation, and with it the owner's rights through them: stop any
-- queue, fire the schedules, hold a capped queue's admission or a group's lock (a review). Taken
-- back here, after every function is made (as queue_size's privileges, tables/queue_size.sql).
DO $$
DECLARE
    v_fn      pg_catalog.regprocedure;
    v_grantee text;
BEGIN
    FOR v_fn, v_grantee IN
        SELECT DISTINCT p.oid::pg_catalog.regprocedure,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                    ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(a.grantee)) END
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.pronamespace = 'pgqueue'::pg_catalog.regnamespace AND p.prosecdef
           AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s', v_fn, v_grantee);
    END LOOP;
END;
$$;
