"""Every SQL statement the Python package sends, as constants.

They call only the extension's public functions and views (``pgqueue.*``); parameters are
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
    "%(content_type)s::text)"
)

ENQUEUE_MANY: Final[LiteralString] = (
    "SELECT b.id FROM pgqueue.message_create_batch("
    "p_queue => %(queue)s::text, p_contents => %(contents)s::bytea[], "
    "p_dequeue_at => coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint), "
    "p_content_types => %(content_types)s::text[]"
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

HEARTBEAT: Final[LiteralString] = (
    "SELECT pgqueue.message_heartbeat(%(id)s::bigint, %(attempts)s::integer, %(lock_ms)s::bigint)"
)

DEFER: Final[LiteralString] = (
    "SELECT pgqueue.message_defer(%(id)s::bigint, %(attempts)s::integer, "
    "coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint), %(state)s::bytea)"
)

FAIL: Final[LiteralString] = (
    "SELECT pgqueue.message_fail(%(id)s::bigint, %(attempts)s::integer, %(error)s::text, "
    "coalesce(%(dequeue_at)s::bigint, pgqueue.now_ms() + %(delay_ms)s::bigint))"
)

NEXT_DUE: Final[LiteralString] = "SELECT pgqueue.queue_next_due(%(queue)s::text)"

# Raises QueueNotFound / InvalidQueueName for a queue that is not there (a cheap probe).
CHECK_QUEUE: Final[LiteralString] = NEXT_DUE

QUEUE_CREATE: Final[LiteralString] = (
    "SELECT pgqueue.queue_create(p_queue => %(queue)s::text, p_lock_ms => %(lock_ms)s::bigint, "
    "p_max_attempts => %(max_attempts)s::integer, p_retry_base_ms => %(retry_base_ms)s::bigint, "
    "p_retry_cap_ms => %(retry_cap_ms)s::bigint, p_max_size => %(max_size)s::bigint, "
    "p_notify => %(notify)s::boolean, p_if_not_exists => %(if_not_exists)s::boolean)"
)

QUEUE_ALTER: Final[LiteralString] = (
    "SELECT pgqueue.queue_alter(p_queue => %(queue)s::text, p_lock_ms => %(lock_ms)s::bigint, "
    "p_max_attempts => %(max_attempts)s::integer, p_retry_base_ms => %(retry_base_ms)s::bigint, "
    "p_retry_cap_ms => %(retry_cap_ms)s::bigint, p_max_size => %(max_size)s::bigint, "
    "p_notify => %(notify)s::boolean)"
)

QUEUE_DROP: Final[LiteralString] = "SELECT pgqueue.queue_drop(%(queue)s::text)"

QUEUE_LIST: Final[LiteralString] = (
    "SELECT q.queue, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms, q.max_size, "
    "q.notify, q.created_at FROM pgqueue.queue_list() AS q ORDER BY q.queue"
)

QUEUE_SETTINGS: Final[LiteralString] = (
    "SELECT q.queue, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms, q.max_size, "
    "q.notify, q.created_at FROM pgqueue.queue_list() AS q WHERE q.queue = %(queue)s::text"
)

QUEUE_STATS: Final[LiteralString] = (
    "SELECT s.queue, s.ready, s.scheduled, s.leased, s.dead, s.oldest_ready_age_ms "
    "FROM pgqueue.queue_stats(%(queue)s::text) AS s"
)

ALL_STATS: Final[LiteralString] = (
    "SELECT s.queue, s.ready, s.scheduled, s.leased, s.dead, s.oldest_ready_age_ms "
    "FROM pgqueue.queue_stats() AS s ORDER BY s.queue"
)

DEAD_LETTERS: Final[LiteralString] = (
    "SELECT d.id, d.queue, d.content, d.content_type, d.state, d.attempts, d.last_error, "
    "d.created_at, d.dead_at FROM pgqueue.dead_letters AS d "
    "WHERE d.queue = %(queue)s::text ORDER BY d.dead_at, d.id LIMIT %(limit)s::bigint"
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
SERVER_VERSION: Final[LiteralString] = (
    "SELECT (SELECT e.extversion FROM pg_catalog.pg_extension e WHERE e.extname = 'pgqueue'), "
    "pg_catalog.to_regclass('pgqueue.install') IS NOT NULL"
)

PLAIN_INSTALL_VERSIONS: Final[LiteralString] = "SELECT version FROM pgqueue.install"
