"""Every SQL statement the Python package sends, as constants.

A client's calls use only the extension's public functions and views (``pgqueue.*``), besides
a transaction's level (:data:`SET_READ_COMMITTED`), catalog reads (the install's checks) and
:data:`BACKEND_PID`, :data:`END_SESSION` and :data:`SESSION_GONE` (``pg_backend_pid``,
``pg_stat_activity``, ``pg_terminate_backend``, the one call of a server function that needs a
privilege decision); parameters are
passed by name (``%(queue)s``) and cast explicitly, so the statements mean the same whatever
adapters the caller's connection has. Relative times (``delay``) are added to the server's
clock, ``pgqueue.now_ms()``, the clock that leases and due times are compared against, so a
client whose clock is off still schedules correctly. The one dynamic name, the LISTEN
channel, is quoted with ``psycopg.sql.Identifier``.
"""

from __future__ import annotations

from typing import Final, LiteralString

from psycopg import sql

# Due times below are written
#     coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint)
# an absolute epoch-ms value (at / priority), else the server's now plus a delay, else NULL
# (the function's default: now).

ENQUEUE: Final[LiteralString] = (
    "SELECT pgqueue.message_create(%(queue)s::text, %(content)s::bytea, "
    "coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint), "
    "%(content_type)s::text, %(group)s::text, %(key)s::text)"
)

ENQUEUE_MANY: Final[LiteralString] = (
    "SELECT b.id FROM pgqueue.message_create_batch("
    "p_queue => %(queue)s::text, p_contents => %(contents)b::bytea[], "
    "p_dequeue_at => coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint), "
    "p_content_types => %(content_types)s::text[], p_groups => %(groups)s::text[], p_keys => %(keys)s::text[]"
    ") WITH ORDINALITY AS b(id, n) ORDER BY b.n"
)

# The last column is the server's clock right after the dequeue: locked_until minus it is the
# lease that was granted, which sets the heartbeat interval of receive().
DEQUEUE: Final[LiteralString] = (
    "SELECT d.id, d.content, d.attempts, d.dequeue_at, d.state, d.content_type, "
    "d.created_at, d.locked_until, pgqueue.now_ms() "
    "FROM pgqueue.message_dequeue(%(queue)s::text, %(limit)s::integer, %(lock_ms)s::bigint) AS d"
)

COMPLETE: Final[LiteralString] = "SELECT pgqueue.message_complete(%(id)s::bigint, %(attempts)s::integer)"
COMPLETE_BATCH: Final[LiteralString] = (
    "SELECT pgqueue.message_complete_batch(%(ids)s::bigint[], %(attempts)s::integer[])")
# Acknowledge-and-fetch: the rows of DEQUEUE (stale false), then the stale acknowledgements
# (stale true: only id and attempts, the token given, are set).
COMPLETE_AND_DEQUEUE: Final[LiteralString] = (
    "SELECT d.id, d.content, d.attempts, d.dequeue_at, d.state, d.content_type, "
    "d.created_at, d.locked_until, pgqueue.now_ms(), d.stale "
    "FROM pgqueue.message_complete_and_dequeue(%(ids)s::bigint[], %(attempts)s::integer[], "
    "%(queue)s::text, %(limit)s::integer, %(lock_ms)s::bigint) AS d"
)

HEARTBEAT: Final[LiteralString] = (
    "SELECT pgqueue.message_heartbeat(%(id)s::bigint, %(attempts)s::integer, %(lock_ms)s::bigint)"
)
# The ids whose token was stale (those changed nothing), in the order given.
HEARTBEAT_BATCH: Final[LiteralString] = (
    "SELECT pgqueue.message_heartbeat_batch(%(ids)s::bigint[], %(attempts)s::integer[], %(lock_ms)s::bigint)"
)

DEFER: Final[LiteralString] = (
    "SELECT pgqueue.message_defer(%(id)s::bigint, %(attempts)s::integer, "
    "coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint), %(state)s::bytea)"
)

FAIL: Final[LiteralString] = (
    "SELECT pgqueue.message_fail(%(id)s::bigint, %(attempts)s::integer, %(error)s::text, "
    "coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint))"
)

# FAIL, and the queue's max_attempts as the statement found it: whether the failure moved the
# message to the dead letters (the workers report it). queue_list() is STABLE: it reads with the
# statement's snapshot, taken before message_fail reads the queue, so only a queue_alter
# committed between the two (microseconds) can make them disagree.
FAIL_REPORTING: Final[LiteralString] = (
    "SELECT pgqueue.message_fail(%(id)s::bigint, %(attempts)s::integer, %(error)s::text, "
    "coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint)), "
    "(SELECT q.max_attempts FROM pgqueue.queue_list() AS q WHERE q.queue = %(queue)s::text)"
)

REJECT: Final[LiteralString] = (
    "SELECT pgqueue.message_reject(%(id)s::bigint, %(attempts)s::integer, %(error)s::text)")

SCHEDULE_CREATE: Final[LiteralString] = (
    "SELECT pgqueue.schedule_create(p_name => %(name)s::text, p_queue => %(queue)s::text, "
    "p_content => %(content)s::bytea, p_every_ms => %(every_ms)s::bigint, p_cron => %(cron)s::text, "
    "p_content_type => %(content_type)s::text, p_missed => %(missed)s::text, p_start_at => %(start_at)s::bigint)"
)
SCHEDULE_DROP: Final[LiteralString] = "SELECT pgqueue.schedule_drop(%(name)s::text)"
SCHEDULE_LIST: Final[LiteralString] = (
    "SELECT s.name, s.queue, s.every_ms, s.cron, s.content, s.content_type, s.missed, s.next_run, "
    "(extract(epoch FROM s.created_at) * 1000000)::bigint "
    "FROM pgqueue.schedule_list() AS s"
)
SCHEDULE_RUN: Final[LiteralString] = (
    "SELECT r.schedule, r.message_id, r.slot FROM pgqueue.schedule_run(%(limit)s::integer) AS r")

NEXT_DUE: Final[LiteralString] = "SELECT pgqueue.queue_next_due(%(queue)s::text)"
# the same as milliseconds from the server's clock (a worker's wake-up: its host's clock may differ)
NEXT_DUE_IN: Final[LiteralString] = "SELECT pgqueue.queue_next_due(%(queue)s::text) - pgqueue.now_ms()"

PEEK: Final[LiteralString] = (
    "SELECT p.id, p.content, p.content_type, p.attempts, p.dequeue_at, p.created_at, p.locked_until, "
    "p.state, p.last_error FROM pgqueue.message_peek(%(queue)s::text, %(limit)s::integer) AS p"
)

CANCEL: Final[LiteralString] = (
    "SELECT c.id, c.content, c.content_type, c.attempts, c.dequeue_at, c.created_at, c.locked_until, "
    "c.state, c.last_error FROM pgqueue.message_cancel(%(queue)s::text, %(ids)s::bigint[]) AS c"
)

# Raises QueueNotFound / InvalidQueueName for a queue that is not there (a cheap probe).
CHECK_QUEUE: Final[LiteralString] = NEXT_DUE

# The calls that need READ COMMITTED (Call.read_committed), where the database or role defaults
# to another level: the first statement of a transaction of their own.
SET_READ_COMMITTED: Final[LiteralString] = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"

QUEUE_CREATE: Final[LiteralString] = (
    "SELECT pgqueue.queue_create(p_queue => %(queue)s::text, p_lock_ms => %(lock_ms)s::bigint, "
    "p_max_attempts => %(max_attempts)s::integer, p_retry_base_ms => %(retry_base_ms)s::bigint, "
    "p_retry_cap_ms => %(retry_cap_ms)s::bigint, p_max_size => %(max_size)s::bigint, "
    "p_notify => %(notify)s::boolean, p_if_not_exists => %(if_not_exists)s::boolean, "
    "p_group_concurrency => %(group_concurrency)s::integer, p_key_window_ms => %(key_window_ms)s::bigint, "
    "p_rate_limit => %(rate_limit)s::integer)"
)

QUEUE_ALTER: Final[LiteralString] = (
    "SELECT pgqueue.queue_alter(p_queue => %(queue)s::text, p_lock_ms => %(lock_ms)s::bigint, "
    "p_max_attempts => %(max_attempts)s::integer, p_retry_base_ms => %(retry_base_ms)s::bigint, "
    "p_retry_cap_ms => %(retry_cap_ms)s::bigint, p_max_size => %(max_size)s::bigint, "
    "p_notify => %(notify)s::boolean, p_group_concurrency => %(group_concurrency)s::integer, "
    "p_key_window_ms => %(key_window_ms)s::bigint, p_rate_limit => %(rate_limit)s::integer)"
)

QUEUE_DROP: Final[LiteralString] = "SELECT pgqueue.queue_drop(%(queue)s::text)"

# (created_at, a timestamptz, as microseconds since the epoch, not as text: psycopg parses a
# timestamp's text in the ISO DateStyle only, and a session or role with DateStyle 'SQL, DMY' or
# 'German' made Queue.settings(), the workers' start, `pgqueue queue list`, the metrics and the
# dashboard fail with NotImplementedError: a review)
QUEUE_LIST: Final[LiteralString] = (
    "SELECT q.queue, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms, q.max_size, "
    "q.notify, (extract(epoch FROM q.created_at) * 1000000)::bigint, q.group_concurrency, q.key_window_ms, q.rate_limit "
    "FROM pgqueue.queue_list() AS q ORDER BY q.queue"
)

QUEUE_SETTINGS: Final[LiteralString] = (
    "SELECT q.queue, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms, q.max_size, "
    "q.notify, (extract(epoch FROM q.created_at) * 1000000)::bigint, q.group_concurrency, q.key_window_ms, q.rate_limit "
    "FROM pgqueue.queue_list() AS q WHERE q.queue = %(queue)s::text"
)

QUEUE_STATS: Final[LiteralString] = (
    "SELECT s.queue, s.ready, s.scheduled, s.leased, s.dead, s.oldest_ready_age_ms "
    "FROM pgqueue.queue_stats(%(queue)s::text) AS s"
)

GROUP_STATS: Final[LiteralString] = (
    "SELECT g.group_key, g.waiting, g.in_flight FROM pgqueue.queue_group_stats(%(queue)s::text, %(limit)s::integer) AS g"
)

QUEUE_STATS_EXACT: Final[LiteralString] = (
    "SELECT s.queue, s.ready, s.scheduled, s.leased, s.dead, s.oldest_ready_age_ms "
    "FROM pgqueue.queue_stats_exact(%(queue)s::text) AS s"
)

ALL_STATS: Final[LiteralString] = (
    "SELECT s.queue, s.ready, s.scheduled, s.leased, s.dead, s.oldest_ready_age_ms "
    "FROM pgqueue.queue_stats() AS s ORDER BY s.queue"
)

QUEUE_COUNTERS: Final[LiteralString] = (
    "SELECT c.queue, c.enqueued, c.delivered, c.completed, c.failed, c.dead_lettered, c.expired, c.shared "
    "FROM pgqueue.queue_counters(%(queue)s::text) AS c"
)

ALL_COUNTERS: Final[LiteralString] = (
    "SELECT c.queue, c.enqueued, c.delivered, c.completed, c.failed, c.dead_lettered, c.expired, c.shared "
    "FROM pgqueue.queue_counters() AS c ORDER BY c.queue"
)

# A page of a queue's dead letters, oldest death first: the queue's id looked up once (an
# InitPlan) so that the scan walks dead_letter_queue_idx in (dead_at, id) order and stops at the
# page's end; a filter on the view's name column sorted all of the queue's letters first (78 ms
# at 200,000 letters against 0.14 ms). DEAD_LETTERS_AFTER: the page after the letter
# (dead_at, id) = (%(dead_at)s, %(id)s), keyset paging (no OFFSET: a page does not shift when
# letters before it are requeued or purged).
DEAD_LETTERS: Final[LiteralString] = (
    "SELECT d.id, d.queue, d.content, d.content_type, d.state, d.attempts, d.last_error, "
    "d.created_at, d.dead_at FROM pgqueue.dead_letters AS d "
    "WHERE d.queue_id = (SELECT q.id FROM pgqueue.queue AS q WHERE q.name = %(queue)s::text) "
    "ORDER BY d.dead_at, d.id LIMIT %(limit)s::bigint"
)
DEAD_LETTERS_AFTER: Final[LiteralString] = (
    "SELECT d.id, d.queue, d.content, d.content_type, d.state, d.attempts, d.last_error, "
    "d.created_at, d.dead_at FROM pgqueue.dead_letters AS d "
    "WHERE d.queue_id = (SELECT q.id FROM pgqueue.queue AS q WHERE q.name = %(queue)s::text) "
    "AND (d.dead_at, d.id) > (%(dead_at)s::bigint, %(id)s::bigint) "
    "ORDER BY d.dead_at, d.id LIMIT %(limit)s::bigint"
)

DEAD_REQUEUE: Final[LiteralString] = (
    "SELECT pgqueue.dead_letter_requeue(%(queue)s::text, %(ids)s::bigint[], "
    "coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint))"
)

DEAD_PURGE: Final[LiteralString] = (
    "SELECT pgqueue.dead_letter_purge(%(queue)s::text, %(ids)s::bigint[], %(before)s::bigint)"
)

SERVER_NOW_MS: Final[LiteralString] = "SELECT pgqueue.now_ms()"

#: The prefix of the NOTIFY channel of a queue created with notify.
CHANNEL_PREFIX: Final = "pgqueue."


def channel_name(queue: str) -> str:
    """Return the NOTIFY channel of a queue: ``pgqueue.<queue>``; the payload is the queue's name."""
    return CHANNEL_PREFIX + queue


def listen_statement(queue: str) -> sql.Composed:
    """Return ``LISTEN "pgqueue.<queue>"`` for a queue, with the channel quoted as an identifier."""
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel_name(queue)))


def unlisten_statement(queue: str) -> sql.Composed:
    """Return ``UNLISTEN "pgqueue.<queue>"`` for a queue."""
    return sql.SQL("UNLISTEN {}").format(sql.Identifier(channel_name(queue)))

# The version of pgqueue in the database: an extension records it in pg_extension, a plain
# (non-extension) install in its table pgqueue.install, read only when that table exists.
# (From the catalogs, as INSTALL_STATE: to_regclass fails on a schema the role has no USAGE on,
# and the extension's version is readable by anyone.)
SERVER_VERSION: Final[LiteralString] = (
    "SELECT (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'pgqueue'), "
    "EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'pgqueue' AND c.relname = 'install' AND c.relkind = 'r')"
)

PLAIN_INSTALL_VERSIONS: Final[LiteralString] = "SELECT version FROM pgqueue.install"

# ---------------------------------------------------------------------------------------
# pgqueue install / uninstall (pgqueue.installer)
# ---------------------------------------------------------------------------------------

# What the database holds, in one row: the extension's version, whether schema pgqueue exists
# and who owns it, whether the plain install's version record exists, whether the server has
# the extension's files for the wanted version, and who we are. From the catalogs only: the
# schema may be someone else's, which we may not look into (to_regclass would fail).
INSTALL_STATE: Final[LiteralString] = (
    "SELECT (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'pgqueue'), "
    "(SELECT pg_catalog.pg_get_userbyid(n.nspowner) FROM pg_catalog.pg_namespace n "
    "WHERE n.nspname = 'pgqueue'), "
    "EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'pgqueue' AND c.relname = 'install' AND c.relkind = 'r'), "
    "EXISTS (SELECT FROM pg_catalog.pg_available_extension_versions v "
    "WHERE v.name = 'pgqueue' AND v.version = %(version)s::text), "
    "current_user::text, pg_catalog.current_database()::text"
)

# Whether pgqueue.install (of a schema another role owns) can be read without running anything
# of that role's: a plain table, no row security, no child tables (whose rows a read of it
# reads, a foreign table's through its wrapper), its version column of type text.
INSTALL_TABLE_PLAIN: Final[LiteralString] = (
    "SELECT EXISTS (SELECT FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'version' AND NOT a.attisdropped "
    "WHERE n.nspname = 'pgqueue' AND c.relname = 'install' AND c.relkind = 'r' "
    "AND NOT c.relrowsecurity AND NOT c.relhassubclass AND a.atttypid = 'pg_catalog.text'::pg_catalog.regtype)"
)

# The plain install's recorded versions (one row; read only when pgqueue.install exists).
INSTALL_VERSIONS: Final[LiteralString] = "SELECT i.version FROM pgqueue.install AS i"

# Taken at the start of each upgrade step's transaction, so that two `pgqueue install` runs
# cannot apply the same step twice: the second waits, then reads the version the first wrote.
INSTALL_LOCK: Final[LiteralString] = "LOCK TABLE pgqueue.install IN SHARE ROW EXCLUSIVE MODE"

CREATE_EXTENSION: Final[LiteralString] = "CREATE EXTENSION pgqueue VERSION {version}"

UPDATE_EXTENSION: Final[LiteralString] = "ALTER EXTENSION pgqueue UPDATE TO {version}"

DROP_EXTENSION: Final[LiteralString] = "DROP EXTENSION pgqueue"

# After DROP EXTENSION: the schema goes too when it is empty (no CASCADE: whatever someone
# else put in it stays, and so does the schema).
DROP_SCHEMA_IF_EMPTY: Final[LiteralString] = "DROP SCHEMA IF EXISTS pgqueue"

# Uninstalling a plain install drops exactly pgqueue's own objects, which it learns by running
# the install script of the recorded version in a savepoint (SCHEMA_ASIDE first, so that the
# script creates a fresh schema pgqueue) and listing what it made; then it rolls that back.
SCHEMA_ASIDE: Final[LiteralString] = "ALTER SCHEMA pgqueue RENAME TO {}"

# The objects of schema pgqueue that stand on their own (the kinds the install-time schema check
# lists, extension/src/schema.sql; indexes, constraints, triggers, rules, defaults, row and array
# types and statistics belong to one of them): class and object id, whether the schema's owner
# owns it, pg_identify_object's type and identity (the same text for the same object in any
# database) and a description for messages.
SCHEMA_OBJECTS: Final[LiteralString] = """
WITH ns AS (SELECT n.oid, n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'pgqueue')
SELECT o.classid::pg_catalog.oid, o.objid, o.owner = (SELECT ns.nspowner FROM ns), i.type, i.identity,
       pg_catalog.pg_describe_object(o.classid, o.objid, 0)
  FROM (SELECT 'pg_catalog.pg_class'::pg_catalog.regclass AS classid, c.oid AS objid, c.relowner AS owner
          FROM pg_catalog.pg_class c
         WHERE c.relnamespace = (SELECT ns.oid FROM ns) AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
        UNION ALL
        SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid, p.proowner
          FROM pg_catalog.pg_proc p WHERE p.pronamespace = (SELECT ns.oid FROM ns)
        UNION ALL
        SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid, t.typowner
          FROM pg_catalog.pg_type t
         WHERE t.typnamespace = (SELECT ns.oid FROM ns)
           AND (t.typrelid = 0 OR (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid) = 'c')
           AND NOT EXISTS (SELECT FROM pg_catalog.pg_type e WHERE e.typarray = t.oid)
        UNION ALL
        SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid, o.oprowner
          FROM pg_catalog.pg_operator o WHERE o.oprnamespace = (SELECT ns.oid FROM ns)
        UNION ALL
        SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, c.oid, c.collowner
          FROM pg_catalog.pg_collation c WHERE c.collnamespace = (SELECT ns.oid FROM ns)
        UNION ALL
        SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass, c.oid, c.conowner
          FROM pg_catalog.pg_conversion c WHERE c.connamespace = (SELECT ns.oid FROM ns)
        UNION ALL
        SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, f.oid, f.opfowner
          FROM pg_catalog.pg_opfamily f WHERE f.opfnamespace = (SELECT ns.oid FROM ns)
        UNION ALL
        SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass, c.oid, c.cfgowner
          FROM pg_catalog.pg_ts_config c WHERE c.cfgnamespace = (SELECT ns.oid FROM ns)
        UNION ALL
        SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass, d.oid, d.dictowner
          FROM pg_catalog.pg_ts_dict d WHERE d.dictnamespace = (SELECT ns.oid FROM ns)
        UNION ALL
        SELECT 'pg_catalog.pg_extension'::pg_catalog.regclass, e.oid, e.extowner
          FROM pg_catalog.pg_extension e WHERE e.extnamespace = (SELECT ns.oid FROM ns)) o,
       LATERAL pg_catalog.pg_identify_object(o.classid, o.objid, 0) i
 ORDER BY 6
"""

# What dropping pgqueue's objects (the arrays) with CASCADE would drop that is not pgqueue's:
# everything that depends on them, directly or not (a view or a function with a SQL-standard
# body over pgqueue.message, a foreign key to pgqueue.queue, a column of a pgqueue type, in
# schema pgqueue or anywhere else), except what is attached to one of them and cannot outlive
# it (its indexes, constraints, triggers, rules, defaults, policies, statistics, row and array
# types, toast tables: an index someone added to pgqueue.message goes with the table, as with
# DROP EXTENSION). Uninstall refuses while there are any.
NOT_OURS_DEPENDENTS: Final[LiteralString] = """
WITH RECURSIVE ours(classid, objid) AS (
    SELECT o.classid, o.objid
      FROM ROWS FROM (pg_catalog.unnest(%(classids)s::pg_catalog.oid[]),
                      pg_catalog.unnest(%(objids)s::pg_catalog.oid[])) AS o(classid, objid)
),
attached(classid, objid) AS (
    SELECT ours.classid, ours.objid FROM ours
    UNION
    SELECT d.classid, d.objid
      FROM attached a
      JOIN pg_catalog.pg_depend d ON d.refclassid = a.classid AND d.refobjid = a.objid
     WHERE d.deptype IN ('a', 'i') AND d.objsubid = 0
       AND (d.classid IN ('pg_catalog.pg_constraint'::pg_catalog.regclass, 'pg_catalog.pg_trigger'::pg_catalog.regclass,
                          'pg_catalog.pg_rewrite'::pg_catalog.regclass, 'pg_catalog.pg_attrdef'::pg_catalog.regclass,
                          'pg_catalog.pg_policy'::pg_catalog.regclass, 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass,
                          'pg_catalog.pg_type'::pg_catalog.regclass)
            OR (d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                AND (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = d.objid) IN ('i', 'I', 't')))
),
doomed(classid, objid, objsubid) AS (
    SELECT ours.classid, ours.objid, 0 FROM ours
    UNION
    SELECT d.classid, d.objid, d.objsubid
      FROM doomed x
      JOIN pg_catalog.pg_depend d ON d.refclassid = x.classid AND d.refobjid = x.objid
                                 AND (x.objsubid = 0 OR d.refobjsubid = x.objsubid)
     WHERE d.deptype IN ('n', 'a', 'i')
)
SELECT DISTINCT CASE WHEN o.refobjid IS NULL THEN pg_catalog.pg_describe_object(x.classid, x.objid, x.objsubid)
                     ELSE pg_catalog.pg_describe_object(o.refclassid, o.refobjid, 0) END AS what
  FROM doomed x
  -- named by what it is part of: the view, not its rule; the foreign key, not its triggers
  LEFT JOIN LATERAL (SELECT d.refclassid, d.refobjid FROM pg_catalog.pg_depend d
                      WHERE d.classid = x.classid AND d.objid = x.objid AND d.deptype = 'i' LIMIT 1) o ON true
 WHERE (x.classid, x.objid) NOT IN (SELECT a.classid, a.objid FROM attached a)
 ORDER BY what
"""

# For the rest of uninstall's transaction: no NOTICE for each object a DROP ... CASCADE takes
# along, nor for each one a DROP ... IF EXISTS finds gone already.
QUIET: Final[LiteralString] = "SET LOCAL client_min_messages = warning"

# Before a receive() block's message is settled on a connection of its own because the caller's
# connection is closed (by psycopg after a second interruption during its cancel, say): end the
# closed connection's server session if it is still there, waiting up to 5 s for it to exit
# (PostgreSQL 14 and later), so that a statement of the block still running in it (autocommit:
# it would commit later) is rolled back before the message can go to another consumer. The
# session is the caller's only if the backend pid, the client address and port it had (-1 and
# NULL for a Unix socket) and the login user all match; then it is ended. True: no session has
# the pid (it is gone), or the caller's was ended. NULL: a session has the pid but is not
# provably the caller's (another address or port: a NAT, a proxy, a pooler's server connection
# that other clients share, and the pid a pooler reports to its clients may be a random key of
# its own; another user; the port unknown): it is left alone, and so is the message. False: it
# did not exit in time, or it exited between the look and the call (SESSION_GONE tells). The
# CTE is read once; the CASE runs the terminating subquery only when the session is the
# caller's.
END_SESSION: Final[LiteralString] = (
    "WITH s AS MATERIALIZED (SELECT a.pid, (a.usename = session_user "
    "AND a.client_port = %(port)s::integer "
    "AND a.client_addr IS NOT DISTINCT FROM %(addr)s::inet) AS ours "
    "FROM pg_catalog.pg_stat_activity a "
    "WHERE a.pid = %(pid)s::integer AND a.pid <> pg_catalog.pg_backend_pid()) "
    "SELECT CASE WHEN NOT EXISTS (SELECT FROM s) THEN true "
    "WHEN (SELECT bool_and(s.ours) FROM s) "
    "THEN (SELECT bool_and(pg_catalog.pg_terminate_backend(s.pid, 5000)) FROM s) END"
)

# The server process of the caller's connection, read once before its first lease: a pooler
# (PgBouncer) gives its clients a made-up process id, and a session that pid does not name
# proves nothing about the one the connection used (see _core.caller_session).
BACKEND_PID: Final[LiteralString] = "SELECT pg_catalog.pg_backend_pid()"

# After END_SESSION said False: whether no session has the pid now (a statement of its own, with
# a new snapshot of pg_stat_activity: the session may have exited between END_SESSION's look and
# its pg_terminate_backend, which then says false).
SESSION_GONE: Final[LiteralString] = (
    "SELECT NOT EXISTS (SELECT FROM pg_catalog.pg_stat_activity a "
    "WHERE a.pid = %(pid)s::integer AND a.pid <> pg_catalog.pg_backend_pid())"
)
