"""Every SQL statement of the Spark integration, as constants.

They call only the extension's public functions (``pgqueue.*``, the 0.2 ``spark_*`` family and
``message_create_batch``); parameters are passed by name and cast explicitly.
"""

from __future__ import annotations

from typing import Final, LiteralString

# -- writing -----------------------------------------------------------------------------

#: Enqueue one chunk of a task-mode write. Per-row due times are an absolute epoch-ms value, or
#: the server's clock plus a delay (saturating at the largest bigint), or NULL (now). The contents
#: go in binary (``%b``): as text each byte would be sent as two hex digits, which doubles the
#: traffic and halves the largest payload that fits in PostgreSQL's 1 GB per value.
ENQUEUE_CHUNK: Final[LiteralString] = (
    "SELECT count(*) FROM pgqueue.message_create_batch("
    "p_queue => %(queue)s::text, p_contents => %(contents)b::bytea[], "
    "p_dequeue_ats => (SELECT array_agg(coalesce(u.at, c.now + CASE WHEN u.delay_ms IS NOT NULL "
    "THEN least(u.delay_ms, 9223372036854775807 - c.now) END) ORDER BY u.n) FROM unnest(%(dequeue_ats)s::bigint[], %(delays_ms)s::bigint[]) WITH ORDINALITY AS u(at, delay_ms, n), "
    "(SELECT pgqueue.now_ms() AS now) AS c), "
    "p_content_type => %(content_type)s::text, p_groups => %(groups)s::text[], p_keys => %(keys)s::text[])"
)

#: Stage one chunk of a job-mode task attempt.
STAGE_CHUNK: Final[LiteralString] = (
    "SELECT pgqueue.spark_stage(%(write_id)s::uuid, %(partition)s::integer, %(attempt)s::bigint, "
    "%(first)s::bigint, %(contents)b::bytea[], %(content_type)s::text, %(dequeue_ats)s::bigint[], "
    "%(delays_ms)s::bigint[], %(groups)s::text[], %(keys)s::text[])"
)

PUBLISH: Final[LiteralString] = (
    "SELECT pgqueue.spark_publish(%(publish_key)s::text, %(queue)s::text, %(write_id)s::uuid, "
    "%(partitions)s::integer[], %(attempts)s::bigint[], %(counts)s::bigint[])"
)

#: Forget the publications of a streaming query's earlier micro-batches (keys "stream:<query>:<batch>").
PRUNE_STREAM_LOG: Final[LiteralString] = (
    "DELETE FROM pgqueue.spark_publish_log l WHERE starts_with(l.publish_key, %(prefix)s::text) "
    "AND l.publish_key <> %(keep)s::text"
)

#: Forget the publication of a job-mode write (its key is its write id) once its driver knows the
#: outcome: the row only lets a publish retried after a lost connection find that it is done.
FORGET_PUBLISH: Final[LiteralString] = (
    "DELETE FROM pgqueue.spark_publish_log l WHERE l.publish_key = %(publish_key)s::text"
)

#: Whether a publish key is in the log (published).
PUBLISHED: Final[LiteralString] = (
    "SELECT EXISTS (SELECT FROM pgqueue.spark_publish_log l WHERE l.publish_key = %(publish_key)s::text)"
)

DISCARD: Final[LiteralString] = "SELECT pgqueue.spark_discard(%(write_id)s::uuid)"

#: Raises PQ001 / 42602 for a queue that is not there.
CHECK_QUEUE: Final[LiteralString] = "SELECT pgqueue.queue_next_due(%(queue)s::text)"

# -- batch reads (snapshots) -------------------------------------------------------------------

SNAPSHOT_RANGE: Final[LiteralString] = (
    "SELECT r.min_id, r.max_id FROM pgqueue.spark_snapshot_range(%(queue)s::text, %(include_dead)s::boolean) AS r"
)

SNAPSHOT: Final[LiteralString] = (
    "SELECT s.id, s.status, s.content, s.content_type, s.attempts, s.dequeue_at, s.created_at, "
    "s.locked_until, s.last_error, s.dead_at, s.state "
    "FROM pgqueue.spark_snapshot(%(queue)s::text, %(min_id)s::bigint, %(max_id)s::bigint, "
    "%(include_dead)s::boolean) AS s"
)

#: Conditions pushed down from Spark's filters, appended to SNAPSHOT (after "WHERE true").
SNAPSHOT_WHERE: Final[dict[str, LiteralString]] = {
    "statuses": " AND s.status = ANY (%(statuses)s::text[])",
    "dequeue_at_lo": " AND s.dequeue_at >= %(dequeue_at_lo)s::bigint",
    "dequeue_at_hi": " AND s.dequeue_at <= %(dequeue_at_hi)s::bigint",
    "created_at_lo": " AND s.created_at >= %(created_at_lo)s::bigint",
    "created_at_hi": " AND s.created_at <= %(created_at_hi)s::bigint",
}

# -- streaming reads (claims) --------------------------------------------------------------------

CONSUMER_OPEN: Final[LiteralString] = "SELECT pgqueue.spark_consumer_open(%(queue)s::text, %(consumer)s::text)"

CONSUMER_CLOSE: Final[LiteralString] = "SELECT pgqueue.spark_consumer_close(%(queue)s::text, %(consumer)s::text)"

#: p_from: the stream's starting position (epoch ms), NULL for every deliverable message.
CLAIM: Final[LiteralString] = (
    "SELECT pgqueue.spark_claim(%(queue)s::text, %(consumer)s::text, %(max_messages)s::integer, "
    "%(max_id)s::bigint, %(from)s::bigint)"
)

#: The server's clock (epoch ms): where startingPosition=latest starts.
NOW_MS: Final[LiteralString] = "SELECT pgqueue.now_ms()"

PENDING_SEQ: Final[LiteralString] = "SELECT pgqueue.spark_pending_seq(%(queue)s::text, %(consumer)s::text)"

#: The consumer's claim sequence: (acked_seq, next_seq), no row if the consumer does not exist.
CONSUMER_POSITION: Final[LiteralString] = (
    "SELECT c.acked_seq, c.next_seq FROM pgqueue.spark_consumers(%(queue)s::text) AS c "
    "WHERE c.consumer = %(consumer)s::text"
)

CLAIMS: Final[LiteralString] = (
    "SELECT k.seq, k.n, k.min_id, k.max_id FROM pgqueue.spark_claims(%(queue)s::text, "
    "%(consumer)s::text, %(after_seq)s::bigint, %(up_to_seq)s::bigint) AS k ORDER BY k.seq"
)

CLAIMED: Final[LiteralString] = (
    "SELECT m.id, m.claim_seq, m.content, m.content_type, m.attempts, m.dequeue_at, m.created_at, "
    "m.state, m.last_error "
    "FROM pgqueue.spark_claimed(%(queue)s::text, %(consumer)s::text, %(after_seq)s::bigint, "
    "%(up_to_seq)s::bigint, %(min_id)s::bigint, %(max_id)s::bigint) AS m"
)

#: CLAIMED resumed after a lost connection: the rows after (last_seq, last_id) in CLAIMED's order
#: (by claim, then id), with after_seq = last_seq - 1.
CLAIMED_AFTER: Final[LiteralString] = (
    CLAIMED + " WHERE m.claim_seq > %(last_seq)s::bigint OR m.id > %(last_id)s::bigint"
)

#: Whether a backend (this query's session before a lost connection) is still there.
BACKEND_ALIVE: Final[LiteralString] = (
    "SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity a WHERE a.pid = %(pid)s::integer)"
)

ACK: Final[LiteralString] = "SELECT pgqueue.spark_ack(%(queue)s::text, %(consumer)s::text, %(up_to_seq)s::bigint)"

RELEASE: Final[LiteralString] = "SELECT pgqueue.spark_release(%(queue)s::text, %(consumer)s::text)"

#: The largest message id now: the AvailableNow target (one probe of the primary key).
MAX_MESSAGE_ID: Final[LiteralString] = (
    "SELECT r.max_id FROM pgqueue.spark_snapshot_range(%(queue)s::text, false) AS r"
)
