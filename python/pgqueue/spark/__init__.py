"""pgqueue for Apache Spark: a PySpark data source that feeds and drains queues.

Needs the ``spark`` extra (``pip install './python[spark]'`` from a clone: pyspark 4.2+ and pyarrow; Java 17+);
``import pgqueue`` alone never imports pyspark. Register the format once per SparkSession::

    import pgqueue.spark
    pgqueue.spark.register(spark)

    # enqueue a DataFrame (one column "payload"; more below)
    df.write.format("pgqueue").option("dsn", dsn).mode("append").save("jobs")
    # enqueue a stream: each micro-batch exactly once, across retries and restarts
    (stream_df.writeStream.format("pgqueue").option("dsn", dsn)
        .option("checkpointLocation", ck).start("jobs"))
    # look at a queue, never consume
    spark.read.format("pgqueue").option("dsn", dsn).load("jobs")
    # consume: claims are offsets, acknowledged when Spark commits the micro-batch
    (spark.readStream.format("pgqueue").option("dsn", dsn).option("consumer", "etl").load("jobs")
        .writeStream.foreachBatch(handle).option("checkpointLocation", ck)
        .trigger(availableNow=True).start())

The least privileges for all of it: the ``pgqueue_spark`` recipe in docs/grants.sql.

Executors import this package too: install it (and psycopg) on every worker node, and point
``PYSPARK_PYTHON`` at that interpreter.

Options (names are case-insensitive; values are strings)
---------------------------------------------------------

Each entry point takes the options listed for it here and no others: one it would ignore (say
``consumer`` on ``spark.read``, ``numPartitions`` on ``df.write``) is refused like a misspelt one,
with the list of what that entry point takes. ``checkpointLocation`` is Spark's own, taken by
``writeStream`` only. Only a missing option takes its default: one given as an empty string
(``os.environ.get("X", "")`` of a variable not set, say) is refused (``InvalidArgument``, "option
consumer must not be empty, got ''"), as a bad value is; an empty ``consumer`` would otherwise
consume as the shared ``spark`` consumer. (PySpark drops an option given as None before the
source sees it: that one takes its default.)

All entry points:

``dsn`` (required; alias ``conninfo``)
    libpq connection string of the database with pgqueue 0.4 or later. Spark shows
    option values in query plans (a stream's ``explain()``, the Spark UI) unless they match
    ``spark.redaction.regex`` (by default ``secret|password|token|access.?key``): say a password
    as ``password=...`` (key=value) or ``?password=...`` (URI), which Spark redacts, or keep it in
    a password file or ``PGPASSWORD`` on every node. A URI's ``user:password@``, which Spark
    would show, is refused (``InvalidArgument``, before anything connects). Errors mask a password the connection string quotes.
``queue`` (or the path of ``load()``/``save()``/``start()``)
    the queue's name; it must exist. Both given must name the same queue (as ``dsn`` and
    ``conninfo`` must be the same string).

Writing (``df.write.format("pgqueue").mode("append")`` and ``writeStream.format("pgqueue")``).
Always say ``.mode("append")``: Spark itself refuses its default mode, ErrorIfExists, for every
Python data source before asking the source (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``, whose
advice to use "Append" or "Overwrite" is only half right here). ``overwrite`` is refused:
overwrite would delete messages that consumers may be
processing, so the sink only appends.

``payloadColumn`` (default ``payload``)
    the column that becomes the message. Every other column must be named by one of the
    schedule, group or key options below, so that nothing is dropped silently.
``payloadType``: ``auto`` (default), ``binary``, ``string``, ``json``
    how the payload is encoded, following :mod:`pgqueue.codec` so that ``Queue.dequeue()``
    decodes it: BINARY is stored as is (content_type NULL), STRING as UTF-8 text
    (``text/plain; charset=utf-8``), STRUCT/ARRAY/MAP/numbers/BOOLEAN as JSON
    (``application/json``). ``json`` with a STRING column takes it as JSON text (checked, stored
    as ``application/json``): ``to_json(struct(*)) AS payload`` is the fastest way to JSON.
    Inside JSON, a day-time INTERVAL is written as its seconds (a number); a VARIANT, a
    year-month INTERVAL, a GEOMETRY or a GEOGRAPHY is refused before any task, naming the field
    (``to_json(payload) AS payload`` with ``json`` writes a VARIANT's JSON).
``dequeueAtColumn``
    TIMESTAMP (or TIMESTAMP_NTZ, taken as UTC) or integer epoch milliseconds: deliver then
    (a time before 1970 fails its task, naming the row: pgqueue reads it as a priority).
``delayColumn``
    seconds (a number) or a day-time INTERVAL: deliver that long after the enqueue (task mode:
    the server's clock at the insert; job mode: at the publication).
``priorityColumn``
    an integer >= 0; larger is delivered first (``pgqueue.priority_dequeue_at``).
    A NULL in a schedule column means "now"; a row may set at most one of the three.
``groupColumn``
    STRING or integer (written as decimal text): the message group (1 to 200 characters, NULL:
    none), as ``message_create_batch(..., p_groups)``. The queue must have groups
    (``group_concurrency``; otherwise the write fails with SQLSTATE 22023 and, in job mode and
    streams, publishes nothing). A group's messages are delivered in the order they are
    published: a partition's rows in order, partitions in partition order (job mode, streams) or
    as their tasks commit (task mode). ``repartition("g").sortWithinPartitions(...)`` puts a
    group in one partition in a chosen order.
``keyColumn``
    STRING or integer: the idempotency key (1 to 200 characters, NULL: none), as
    ``message_create_batch(..., p_keys)``: a row whose key is taken by a live message (or within
    the queue's ``key_window_ms``) inserts nothing, and a later row with a key already written by
    the same write also maps to the first. An empty key or one over 200 characters fails the
    task, naming the row.
``commitMode``: ``task`` (default) or ``job``; streams always publish as ``job`` does
    ``task``: each partition is enqueued in one transaction (``message_create_batch`` in chunks),
    visible as soon as its task ends. ``job``: each task attempt stages its rows
    (``spark_stage``); the driver publishes the winning attempts in one transaction
    (``spark_publish``) when the job commits, and discards the staging when it aborts. The
    publication's row of ``pgqueue.spark_publish_log`` (key: the write's id) only lets a publish
    retried after a lost connection find it done: the driver deletes it once it knows the
    outcome (a failed delete logs a warning, the job succeeds), and leaves it when the outcome
    is unknown (the job fails, its error names the key) or when the retry is what published
    (the first attempt may still be running on the server: the row makes it publish nothing).
    ``writeStream`` stages each micro-batch the same way and publishes it under the key
    ``stream:<query id>:<batch id>`` (``commitMode=task`` is refused there).
``batchSize`` (default 5000)
    rows per SQL call; a call also carries at most 64 MB of payloads (a larger payload goes alone),
    as PostgreSQL takes at most 1 GB in a value. A payload over 500,000,000 bytes fails its task,
    naming the row (the Python client's limit, ``pgqueue.codec.MAX_CONTENT``: read as text, a
    value is twice its size).

Reading, batch and streaming:

``payloadType``: ``binary`` (default), ``string``, ``json``
    the ``payload`` column: the stored bytes; or the content decoded as text, whatever its
    content type (its charset, UTF-8 if none); or JSON text (JSON content as is, ``text/*`` as a
    JSON string, NULL for any other content type, raw bytes included). Content
    that its charset cannot decode (bytes not in it, or a charset Python cannot decode with:
    unknown, or ``charset=undefined``) is NULL too, never a failed read.
``numPartitions`` (default 1; alias ``minPartitions``, the Kafka source's name)
    Spark partitions per read or micro-batch, by id range.
``fetchSize`` (default 5000)
    rows per round trip of a partition's cursor.

Batch reads only: ``includeDead`` (default false) adds the dead letters (status ``dead``).
``filterPushdown`` (default false) takes Spark's filters: on ``id`` (``=``, ``<``, ``<=``,
``>``, ``>=``, ``IN``) the partitions probe only that id range of the primary key; on
``status`` (``=``, ``IN``) and on ``dequeue_at``, ``created_at`` and their ``_ms`` columns
(comparisons) the server drops the rows that fail them before they are sent (an upper
TIMESTAMP bound at 9999-12-31 23:59:59.999 or a lower one at 0001-01-01 is left to Spark: times
beyond those limits read as the limit). It needs Spark's
switch ``spark.sql.python.filterPushdown.enabled=true`` (off by default in 4.3; with it off
Spark refuses every read of a source that takes filters, hence the option). Other filters
(payload, state, ...) are evaluated by Spark after the read.

Streaming reads only:

``consumer`` (default ``spark``)
    the consumer's name: one running query per (queue, consumer) (PQ005 otherwise); keep it
    stable across restarts of a query. The checkpoint's offsets name the queue and the consumer:
    a restart with another queue or consumer is refused (``InvalidArgument``) before it
    acknowledges anything (offsets of checkpoints written before they named the queue are taken).
``maxMessagesPerBatch`` (default 100000; alias ``maxMessagesPerTrigger``, the Kafka source's name)
    messages per micro-batch (Spark's ``ReadMaxRows`` admission control, through
    ``getDefaultReadLimit``; ``availableNow`` runs as many micro-batches of this size as it takes).
``startingPosition``: ``earliest`` (default), ``latest``, or a timestamp
    where a new query starts (Kafka's ``startingOffsets`` / ``startingTimestamp``): every
    deliverable message; only messages enqueued after the query first starts (by the server's
    clock then); or messages created at or after the time (ISO 8601 with a zone, such as
    ``2026-11-23T10:00:00Z``, or epoch milliseconds). ``created_at`` is the start of the
    enqueuing transaction. Fixed at the first start: it is kept in the checkpoint's offsets from
    the first micro-batch on, so a restart from the checkpoint keeps it (and ignores a changed
    option; a query stopped before its first micro-batch resolves it again). Messages left out stay in
    the queue, untouched, for other consumers. Each claim stays bounded index probes that start at
    the position, not at the oldest message; it steps over older expired leases, older priority
    messages and older messages that came due after the position while they remain (README,
    "Spark"). A message created after the position with an explicit due time before it (not a
    priority) is not found.
``failOnDataLoss`` (default true)
    fail a micro-batch whose claims are gone (released by an administrator, or acknowledged by
    another query with the same consumer) instead of going on without them.

``spark.read``, ``spark.readStream`` and ``writeStream`` (not ``df.write``):

``reconnectTimeout`` (default 300; 0 to 86400)
    seconds to keep reconnecting after a lost connection (a server restart or failover, a
    terminated backend, a broken network) before the call fails with ``ConnectionFailed``
    ("... could not be restored within reconnectTimeout=N s"); 0 fails at the first loss (as
    before 0.4). Retries wait 0.1 s, doubling up to 30 s, as the worker's; a warning is logged
    (logger ``pgqueue.spark``) when an outage starts, one INFO line when the call works again.
    What reconnects: every driver call of a stream read (the consumer is opened again on the new
    session), the read of a micro-batch's partition (it goes on after the last row it yielded),
    a snapshot partition until its first row, and the publication of a ``writeStream``
    micro-batch. A connection that cannot be opened at the query's start fails at once. See
    "Guarantees" for what a micro-batch in flight gets.

Rows read have the schema of :func:`pgqueue.spark.source.schema_for` (fixed: a different one
given with ``.schema(...)`` is refused, as the Kafka source does; ``select()`` the columns
instead): ``id, queue, status,
payload, content_type, attempts, dequeue_at, priority, created_at, locked_until, last_error,
dead_at, state, claim_seq, dequeue_at_ms, created_at_ms``. Times are TIMESTAMPs (UTC instants,
exact to the millisecond); a priority message has ``dequeue_at`` NULL and ``priority`` set, as
in the Python client; ``dequeue_at_ms`` and ``created_at_ms`` keep the extension's BIGINT epoch
milliseconds (the queue's ordering key). These columns are what Kafka's ``includeHeaders``
gives and more: content type, attempts, times, last error and the state a handler saved.

Guarantees
----------

* ``df.write``, ``commitMode=task``: each partition lands atomically; a task that Spark runs
  again after its transaction committed (an executor lost after the write, a speculative copy)
  enqueues its partition again: at-least-once per partition. With ``keyColumn``, the rows whose
  keyed message is still in the queue (or within its key window) are not enqueued again: once
  per key while the first message lives. A NULL payload or a bad value (a STRING that is not
  UTF-8, a NUL in a group or key, ...) fails its task, naming the column and the row, before
  anything of that partition is committed, but partitions whose tasks already finished stay
  enqueued.
* ``df.write``, ``commitMode=job``: the whole DataFrame appears atomically and exactly once,
  whatever Spark retries; a failed job, a NULL payload or a bad column type publishes nothing.
  A write whose outcome the driver knows leaves no row in the publish log, but for one whose
  publish a retry after a lost connection made (the first attempt may still be running).
* ``writeStream``: each micro-batch is published exactly once: a failed task, a failed batch
  and a query restarted from its checkpoint after a crash (even one between the publication
  and Spark's commit log) publish nothing twice. The publish log keeps one row per query (its
  last micro-batch). Nothing is visible until the micro-batch commits.
* ``spark.read``: a snapshot; it changes nothing (every action reads again, so new messages may
  appear: ``cache()`` the DataFrame for a stable view). Each partition reads at its own time.
* ``spark.readStream``: a micro-batch's messages are claimed (``spark_claim``) before Spark
  records the offset, invisible to ``message_dequeue``, and deleted only once Spark has
  committed the batch. After a failed batch or a driver crash the same claims are replayed, so
  none is lost: exactly-once end to end into an idempotent or transactional sink (a table keyed
  by ``id``, ``foreachBatch`` keyed by ``batchId``, Delta, ``writeStream.format("pgqueue")``:
  examples/spark_exactly_once.py kills and restarts such a pipeline), at-least-once into any other sink
  (Spark may run a batch again whose output was written but not committed). Spark tells a
  source of a committed batch only when it plans the next one: the last batch before a stop is
  deleted when the query starts again from its checkpoint, and handed out again to a new
  checkpoint under the same consumer or after ``spark_release`` (README, "Spark": known limits).
  A queue with message groups cannot be read as a stream (``spark_claim`` raises 0A000: a claim
  holds its messages until Spark commits the micro-batch, which would break group order and
  limits); consume it with ``message_dequeue`` or the worker.
  ``trigger(availableNow=True)`` claims only messages that exist when the query starts and stops
  when they are done.
* Lost connections (``reconnectTimeout``): a stream read rides out a server restart or a
  terminated backend and the guarantees above stay as they are. A driver call in flight runs
  again on a new connection, after opening the consumer again there: ``spark_ack`` is idempotent,
  and claims the lost attempt made (a ``spark_claim`` whose answer was lost included) are open
  claims the new attempt hands out as its offset (that micro-batch is smaller; no message is
  claimed twice or skipped). A partition read in flight goes on after the last row it yielded
  (claimed messages do not change until the batch is committed): Spark sees every row once, no
  task or micro-batch is retried. The lost session may still hold the consumer until the server
  notices the broken connection: the query waits for it within ``reconnectTimeout``; a consumer
  opened by another session meanwhile fails the query with PQ005. After ``reconnectTimeout`` the
  query fails with ``ConnectionFailed`` and the in-flight micro-batch's claims stay: a restart
  from the checkpoint replays that micro-batch with the same messages, as after any failure.
  A ``writeStream`` publication whose connection broke publishes again under the same key:
  once. ``spark.read`` retries a partition that has not yielded a row yet; after that its task
  fails and Spark runs it again (a whole new read). ``df.write`` does not reconnect: a task that
  loses its connection rolls back and fails, and Spark's task retry writes the partition again
  (``commitMode=task``: a loss while its COMMIT was answered may enqueue it twice, at-least-once
  as documented above; ``commitMode=job``: once); a job-mode publish retries once (above). A consumer that will never come back is released with
  :func:`release` (its messages become deliverable again).
"""

from __future__ import annotations

from typing import Any

from psycopg.rows import tuple_row

from pgqueue import _connect
from pgqueue.errors import translating
from pgqueue.spark import _sql
from pgqueue.spark.source import (
    PgQueueBatchReader,
    PgQueueDataSource,
    PgQueueStreamReader,
    PgQueueStreamWriter,
    PgQueueWriter,
    schema_for,
)

__all__ = [
    "PgQueueDataSource",
    "PgQueueBatchReader",
    "PgQueueStreamReader",
    "PgQueueStreamWriter",
    "PgQueueWriter",
    "register",
    "release",
    "schema_for",
]


def register(spark: Any) -> None:
    """Register the ``pgqueue`` format with a SparkSession (``spark.dataSource.register``)."""
    spark.dataSource.register(PgQueueDataSource)


def release(dsn: str, queue: str, consumer: str) -> int:
    """Give back the messages claimed by a consumer that will not come back; return how many.

    They become deliverable again to every consumer. Raises PgQueueError (SQLSTATE PQ005) while
    a query consumes as that consumer, and PQ006 for a consumer that does not exist.
    """
    with translating(), _connect.connect(dsn, autocommit=True, row_factory=tuple_row) as conn:
        row = conn.execute(_sql.RELEASE, {"queue": queue, "consumer": consumer}).fetchone()
    return int(row[0]) if row is not None else 0
