"""The SQL the dashboard sends beside the client's (``pgqueue._sql``), as constants.

Queues, stats and dead-letter actions go through :class:`pgqueue.Queue` and the extension's
functions. What the SQL API has no function for is read here: the role's privileges, the
messages under a live lease, the database sessions of workers (``pg_stat_activity``) and the
message id sequence, whose growth is the enqueue rate of all queues together; and peeking and
dead letters are read here through the client's function and view, but only the first bytes of
each payload.
"""

from __future__ import annotations

from typing import Final, LiteralString

# What the role may do, in one row. Each privilege is the one the extension's functions need
# (they are SECURITY INVOKER, docs/grants.sql): queue_stats reads a few columns of
# pgqueue.message; message_peek also its content; the dead_letters view is granted on its own;
# the dead-letter page also looks the queue's id up in pgqueue.queue (an index walk, below);
# requeue and purge delete from pgqueue.dead_letter (requeue also inserts messages). A read-only
# transaction (default_transaction_read_only, a standby) can change nothing.
PRIVILEGES: Final[LiteralString] = (
    "SELECT current_user::text, "
    "pg_catalog.has_table_privilege('pgqueue.queue', 'SELECT'), "
    "pg_catalog.has_column_privilege('pgqueue.message', 'locked_until', 'SELECT') "
    "  AND pg_catalog.has_column_privilege('pgqueue.dead_letter', 'queue_id', 'SELECT'), "
    "pg_catalog.has_column_privilege('pgqueue.message', 'content', 'SELECT'), "
    "pg_catalog.has_table_privilege('pgqueue.dead_letters', 'SELECT') "
    "  AND pg_catalog.has_table_privilege('pgqueue.queue', 'SELECT'), "
    "pg_catalog.has_table_privilege('pgqueue.dead_letter', 'DELETE') "
    "  AND pg_catalog.has_table_privilege('pgqueue.message', 'INSERT'), "
    "pg_catalog.has_table_privilege('pgqueue.dead_letter', 'DELETE'), "
    "pg_catalog.has_sequence_privilege('pgqueue.message_id_seq', 'SELECT, USAGE'), "
    "pg_catalog.current_setting('transaction_read_only') = 'on' OR pg_catalog.pg_is_in_recovery(), "
    "pg_catalog.pg_has_role('pg_read_all_stats', 'USAGE'), "
    "pg_catalog.has_column_privilege('pgqueue.message', 'attempts', 'SELECT')"
)

# Messages under a live lease (being handled), soonest expiry first: a walk of
# message_leased_idx per queue, from the clock read once (pgqueue.now_ms() is volatile: in the
# WHERE clause it is no index condition, and the page of all queues read the whole table, a
# parallel scan, and the page of one queue every leased row of it: a review). A lease names no
# holder: the row has no worker column, only its expiry, its attempt (the fencing token) and,
# for a Spark claim, an expiry in the year 9999. LEASED_COUNTS_ONLY leaves out the attempt, for a
# role that may read only the columns queue_stats needs (the monitor recipe of docs/grants.sql).
_LEASED_FROM: Final[LiteralString] = (
    "FROM (SELECT pgqueue.now_ms() AS now) AS n CROSS JOIN pgqueue.queue AS q CROSS JOIN LATERAL (")
_LEASED_WALK: Final[LiteralString] = (
    "FROM pgqueue.message AS l "
    "WHERE l.queue_id = q.id AND l.locked_until IS NOT NULL AND l.locked_until > n.now "
    "ORDER BY l.locked_until, l.id LIMIT %(limit)s::bigint) AS m "
    "WHERE (%(queue)s::text IS NULL OR q.name = %(queue)s::text) "
    "ORDER BY m.locked_until, m.id LIMIT %(limit)s::bigint"
)
LEASED: Final[LiteralString] = (
    "SELECT m.id, q.name, m.attempts, m.locked_until, m.created_at, n.now " + _LEASED_FROM
    + "SELECT l.id, l.attempts, l.locked_until, l.created_at " + _LEASED_WALK)
LEASED_COUNTS_ONLY: Final[LiteralString] = (
    "SELECT m.id, q.name, NULL::integer, m.locked_until, m.created_at, n.now " + _LEASED_FROM
    + "SELECT l.id, l.locked_until, l.created_at " + _LEASED_WALK)

#: locked_until of a message held by a Spark claim (9999-12-31 23:59:59.999 UTC).
SPARK_CLAIM_LOCKED_UNTIL: Final = 253402300799999

# The sessions of this database that look like pgqueue clients: the workers name themselves
# (application_name pgqueue-worker), other clients are recognised by what they run. The
# query text of another role's session is "<insufficient privilege>" unless the dashboard's
# role has pg_read_all_stats. The dashboard's own sessions are left out.
# (Their times as epoch milliseconds, not timestamptz: psycopg parses a timestamp's text in the
# ISO DateStyle only, and a role with DateStyle 'German' had the pages answer 500: a review.)
SESSIONS: Final[LiteralString] = (
    "SELECT a.pid, a.application_name, a.usename::text, a.client_addr::text, "
    "(extract(epoch FROM a.backend_start) * 1000)::bigint, "
    "a.state, (extract(epoch FROM a.state_change) * 1000)::bigint, a.wait_event_type, a.wait_event, a.query "
    "FROM pg_catalog.pg_stat_activity a "
    "WHERE a.datname = pg_catalog.current_database() AND a.pid <> pg_catalog.pg_backend_pid() "
    "AND a.backend_type = 'client backend' "
    "AND a.application_name IS DISTINCT FROM %(own)s::text "
    "AND (a.application_name LIKE 'pgqueue%%' OR a.query LIKE '%%pgqueue.message\\_%%' "
    "     OR a.query LIKE 'LISTEN \"pgqueue.%%') "
    "ORDER BY a.application_name, a.backend_start, a.pid LIMIT 200"
)

# Spark consumers (pgqueue.spark): their open claims, the messages those hold, the oldest
# claim's time and whether a running query holds the consumer. Needs SELECT on the spark tables.
SPARK_CONSUMERS: Final[LiteralString] = (
    "SELECT s.queue, s.consumer, s.claims, s.claimed, s.oldest_claim_at, s.active, pgqueue.now_ms() "
    "FROM pgqueue.spark_consumers(%(queue)s::text) AS s"
)

# The last id handed out by pgqueue.message_id_seq: every enqueue (and dead-letter requeue)
# takes one, rolled back or not. NULL before the first.
LAST_MESSAGE_ID: Final[LiteralString] = (
    "SELECT pg_catalog.pg_sequence_last_value('pgqueue.message_id_seq'::regclass)")

# Whether the extension has per-queue counters (pgqueue.queue_counters, from 0.4 on; read with
# pgqueue.client.all_counters): the sampler uses them for throughput when they are there, and its
# own samples of depth when not.
COUNTERS_FUNCTION: Final[LiteralString] = (
    "SELECT pg_catalog.to_regprocedure('pgqueue.queue_counters(text)') IS NOT NULL")

# The queue page's messages and the dead-letter page's letters: what pgqueue._sql.PEEK and
# pgqueue._sql.DEAD_LETTERS read, through the same function and view (same privileges, same
# order), the same columns in the same places (pgqueue._core.pending_from_row and
# dead_letter_from_row read them), but only the first %(shown)s bytes of each content, its size
# stored last (octet_length) and no checkpoint state (NULL): the pages show at most
# payload.MAX_SHOWN bytes of a payload, and a page of 100 messages of 10 MB would otherwise be
# a gigabyte in the dashboard's memory.
PEEK_SHOWN: Final[LiteralString] = (
    "SELECT p.id, substring(p.content FROM 1 FOR %(shown)s::integer), p.content_type, p.attempts, "
    "p.dequeue_at, p.created_at, p.locked_until, NULL::bytea, p.last_error, octet_length(p.content) "
    "FROM pgqueue.message_peek(%(queue)s::text, %(limit)s::integer) AS p"
)
DEAD_LETTERS_SHOWN: Final[LiteralString] = (
    "SELECT d.id, d.queue, substring(d.content FROM 1 FOR %(shown)s::integer), d.content_type, NULL::bytea, "
    "d.attempts, d.last_error, d.created_at, d.dead_at, octet_length(d.content) FROM pgqueue.dead_letters AS d "
    "WHERE d.queue_id = (SELECT q.id FROM pgqueue.queue AS q WHERE q.name = %(queue)s::text) ORDER BY d.dead_at, d.id LIMIT %(limit)s::bigint"
)
# The dead-letter page's further pages: keyset paging in the same order, (dead_at, id) (the
# order of the index dead_letter_queue_idx), from the last letter a page showed, not an OFFSET:
# a page does not shift when letters before it are requeued or purged. Every page, the first
# too, names the queue by its id, looked up once (an InitPlan), so that the scan walks
# dead_letter_queue_idx from the cursor and stops at the page's end (filtered on the view's name
# column, PostgreSQL sorted all of the queue's letters past the cursor). AFTER: the page after the
# letter (dead_at, id) = (%(dead_at)s, %(id)s); BEFORE: the page before it, newest first (the
# caller turns it round). Separate statements, not one with "cursor IS NULL OR", so that the
# cursor stays a plain condition on the scan of pgqueue.dead_letter in any plan.
DEAD_LETTERS_SHOWN_AFTER: Final[LiteralString] = (
    "SELECT d.id, d.queue, substring(d.content FROM 1 FOR %(shown)s::integer), d.content_type, NULL::bytea, "
    "d.attempts, d.last_error, d.created_at, d.dead_at, octet_length(d.content) FROM pgqueue.dead_letters AS d "
    "WHERE d.queue_id = (SELECT q.id FROM pgqueue.queue AS q WHERE q.name = %(queue)s::text) AND (d.dead_at, d.id) > (%(dead_at)s::bigint, %(id)s::bigint) "
    "ORDER BY d.dead_at, d.id LIMIT %(limit)s::bigint"
)
DEAD_LETTERS_SHOWN_BEFORE: Final[LiteralString] = (
    "SELECT d.id, d.queue, substring(d.content FROM 1 FOR %(shown)s::integer), d.content_type, NULL::bytea, "
    "d.attempts, d.last_error, d.created_at, d.dead_at, octet_length(d.content) FROM pgqueue.dead_letters AS d "
    "WHERE d.queue_id = (SELECT q.id FROM pgqueue.queue AS q WHERE q.name = %(queue)s::text) AND (d.dead_at, d.id) < (%(dead_at)s::bigint, %(id)s::bigint) "
    "ORDER BY d.dead_at DESC, d.id DESC LIMIT %(limit)s::bigint"
)

# "Requeue all" / "Purge all" act on the dead letters the confirmation page counted: those dead
# by the newest dead_at it saw (NULL: none), not on letters that died after it was shown.
# Purge takes the bound itself (dead_letter_purge's p_before, dead_at < bound + 1); requeue
# takes ids, so the ids of the letters dead by then are read in the same statement.
# (which letters: the sum of the ids' 64-bit hashes, DEAD_COUNT_UPTO below)
_IDS_HASH: Final[LiteralString] = "coalesce(sum(pg_catalog.hashint8extended(d.id, 0)::numeric), 0)"
DEAD_NEWEST: Final[LiteralString] = (  # and how many there are (the confirmation's exact count), and which
    "SELECT max(d.dead_at), count(*), " + _IDS_HASH + " "
    "FROM pgqueue.dead_letters AS d WHERE d.queue_id = (SELECT q.id FROM pgqueue.queue AS q WHERE q.name = %(queue)s::text)")
# The action counts again, in its own transaction, the letters dead by that bound: dead_at is
# the clock of the transaction that dead-lettered the message, so one that committed after the
# page was shown (a consumer failing a message inside a longer transaction of its own) can be
# dead by it too; a count or a hash of the ids that differs from the page's sends the
# confirmation again (a review). The hash is the sum of the ids' 64-bit hashes: a late letter and
# one requeued or purged meanwhile leave the count as it was, and a sum of the ids themselves
# could be met again by other ids (a second review).
DEAD_COUNT_UPTO: Final[LiteralString] = (
    "SELECT count(*), " + _IDS_HASH + " FROM pgqueue.dead_letters AS d WHERE d.queue_id = (SELECT q.id FROM pgqueue.queue AS q "
    "WHERE q.name = %(queue)s::text) AND d.dead_at <= %(upto)s::bigint")
DEAD_REQUEUE_UPTO: Final[LiteralString] = (
    "SELECT pgqueue.dead_letter_requeue(%(queue)s::text, ARRAY(SELECT d.id FROM pgqueue.dead_letters AS d "
    "WHERE d.queue_id = (SELECT q.id FROM pgqueue.queue AS q WHERE q.name = %(queue)s::text) AND d.dead_at <= %(upto)s::bigint ORDER BY d.id))"
)

# The counter stripe (id & 63, pgqueue._count_seq) of each queue: the queues that share one
# (queue_counters' shared) each report the stripe's sum, which the all-queues throughput counts
# once. queue_counters reads these columns, so a role that may read the counters may read them.
QUEUE_STRIPES: Final[LiteralString] = "SELECT q.name::text, q.id & 63 FROM pgqueue.queue AS q"
