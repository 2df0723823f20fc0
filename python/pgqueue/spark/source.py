"""The ``pgqueue`` data source: batch writer, snapshot reader and streaming (claim) reader.

See :mod:`pgqueue.spark` for the options and the guarantees. Which process runs what:

* ``PgQueueDataSource``, ``writer()``, ``reader()``, ``partitions()`` of the batch reader and
  ``commit()``/``abort()`` of the writer run in Python workers on the driver;
* ``write()`` and ``read()`` run in executor Python workers on pickled copies, so they take
  everything they need from the pickled object or the partition, and open their own
  connections;
* the stream reader's ``initialOffset``/``latestOffset``/``partitions``/``commit``/``stop`` run in
  one long-lived driver worker per query, which keeps one connection (holding the consumer's
  session lock) for the whole query.

No live connection is ever pickled (``__getstate__`` drops it).

Lost connections (option ``reconnectTimeout``, see :class:`_Reconnect`): the stream reader's
driver calls, the reads of its micro-batches, a snapshot partition that has yielded nothing yet,
and the stream writer's publication reconnect with a doubling backoff (0.1 s .. 30 s) for up to
``reconnectTimeout`` seconds, then fail. Each of them is safe to run again from its start on a
new connection (see where they call :meth:`_Reconnect.failed`).
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import psycopg
from psycopg.rows import tuple_row
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CalendarIntervalType,
    DataType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    SpatialType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    UserDefinedType,
    VariantType,
    YearMonthIntervalType,
)

from pgqueue import _connect as _own, _core
from pgqueue._lease import Outage, _first_line, is_conflict
from pgqueue._worker_core import Backoff, _conflict_wait
from pgqueue.errors import (
    ConnectionFailed,
    ConsumerInUse,
    DeadlockDetected,
    InvalidArgument,
    PgQueueError,
    SerializationFailure,
    StagedRowsMissing,
    translate,
    translating,
)
from pgqueue.spark import _sql
from pgqueue.spark._encode import WritePlan, decode_payload, encode_batch
from pgqueue.spark._options import Entry, Options, parse, passwords
from pgqueue.spark._options import option as _get_option

__all__ = [
    "PgQueueDataSource",
    "PgQueueWriter",
    "PgQueueBatchReader",
    "PgQueuePushdownReader",
    "PgQueueStreamReader",
    "PgQueueCommit",
    "PgQueueStreamWriter",
    "PgQueueStreamCommit",
    "IdRange",
    "ClaimRange",
    "schema_for",
    "write_plan",
]

logger = logging.getLogger("pgqueue.spark")

#: Why overwrite is refused, in one sentence (``how`` names the append call).
OVERWRITE_REFUSED = ("the pgqueue sink only appends: overwrite would delete messages that consumers may "
                     "be processing, so a queue is never truncated by a write; use {how}")

#: The most messages one spark_claim call takes; larger micro-batches are several claims.
CLAIM_CHUNK = 100_000

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)
_NUMERIC = (*_INTEGRAL, FloatType, DoubleType, DecimalType)
_JSON_VALUE = (StructType, ArrayType, MapType, *_NUMERIC, BooleanType)


def schema_for(payload_type: str) -> StructType:
    """Return the schema of rows read from a queue, batch and streaming alike.

    ``payload`` is BINARY for ``payloadType`` binary, STRING for string and json. Times are
    TIMESTAMPs (UTC instants, exact to the millisecond), as the Python client's aware datetimes:
    a priority message has ``dequeue_at`` NULL and ``priority`` set; ``dequeue_at_ms`` and
    ``created_at_ms`` keep the extension's BIGINT epoch milliseconds (the ordering key, priority
    messages included). ``status`` is ready, scheduled, leased, claimed or dead; ``claim_seq`` is
    set for streamed messages (the claim that delivered them), NULL in snapshots.
    """
    payload: DataType = BinaryType() if payload_type == "binary" else StringType()
    return StructType([
        StructField("id", LongType(), False),
        StructField("queue", StringType(), False),
        StructField("status", StringType(), False),
        StructField("payload", payload, True),
        StructField("content_type", StringType(), True),
        StructField("attempts", IntegerType(), False),
        StructField("dequeue_at", TimestampType(), True),
        StructField("priority", LongType(), True),
        StructField("created_at", TimestampType(), False),
        StructField("locked_until", TimestampType(), True),
        StructField("last_error", StringType(), True),
        StructField("dead_at", TimestampType(), True),
        StructField("state", BinaryType(), True),
        StructField("claim_seq", LongType(), True),
        StructField("dequeue_at_ms", LongType(), False),
        StructField("created_at_ms", LongType(), False),
    ])


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The epoch milliseconds of the first and last instants a Spark TIMESTAMP (and datetime) holds.
_MIN_MS = (datetime(1, 1, 1, tzinfo=timezone.utc) - _EPOCH) // timedelta(milliseconds=1)
_MAX_MS = (datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc) - _EPOCH) // timedelta(milliseconds=1)


def _ts(epoch_ms: int | None) -> datetime | None:
    """An aware UTC datetime for epoch milliseconds, clamped to what a TIMESTAMP holds."""
    if epoch_ms is None:
        return None
    return _EPOCH + timedelta(milliseconds=min(max(epoch_ms, _MIN_MS), _MAX_MS))


def _message_row(opts: Options, mid: int, status: str, content: bytes, ctype: str | None, attempts: int,
                 dequeue_at: int, created_at: int, locked_until: int | None, last_error: str | None,
                 dead_at: int | None, state: bytes | None, seq: int | None) -> tuple[Any, ...]:
    """One row of :func:`schema_for` from a message's columns (times in epoch ms)."""
    return (mid, opts.queue, status, decode_payload(content, ctype, opts.payload_type), ctype, attempts,
            None if dequeue_at < 0 else _ts(dequeue_at), -1 - dequeue_at if dequeue_at < 0 else None,
            _ts(created_at), _ts(locked_until), last_error, _ts(dead_at),
            None if state is None else bytes(state), seq, dequeue_at, created_at)


def _connect(dsn: str, *, autocommit: bool) -> psycopg.Connection[tuple[Any, ...]]:
    """Connect, in UTF8 unless the connection string sets a client_encoding (texts load as str
    even then, on a SQL_ASCII one); an error that quotes the connection string's password has it
    masked.

    On a SQL_ASCII database (initdb under the C locale makes them) psycopg returned text columns
    as bytes: a read with payloadType string or json failed, binary read status "b'ready'", and a
    stream claimed and acknowledged rows with such values.
    """
    try:
        conn = _own.connect(dsn, autocommit=autocommit, row_factory=tuple_row)
    except psycopg.Error as exc:
        error = translate(exc)  # which leaves out what libpq quotes of a connection string it cannot parse
        text = str(error)
        for secret in passwords(dsn):
            text = text.replace(secret, "********")
        if not any(secret in str(exc) for secret in passwords(dsn)):
            raise error from exc
        # Spark prints the whole chain of a task's or the driver's exception: drop the cause
        raise type(error)(text, sqlstate=error.sqlstate, hint=error.hint) from None
    _core.utf8_texts(conn.info.encoding, conn.adapters)
    return conn


def _scalar(conn: psycopg.Connection[tuple[Any, ...]], query: Any, params: dict[str, object]) -> Any:
    with translating():
        row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


# spark_publish runs this many times at most when refused with 40001 or 40P01 (below), waiting
# _PUBLISH_WAIT seconds before the second run, twice that before the third
_PUBLISH_TRIES = 3
_PUBLISH_WAIT = 0.05


def _publish_call(conn: psycopg.Connection[tuple[Any, ...]], params: dict[str, object]) -> Any:
    """spark_publish (autocommit: a transaction of its own), run again when refused with 40001
    or 40P01, the job mode's and the stream's publication alike.

    A keyed row whose insert waited (for a producer of its key, for its group's lock) while the
    key's message left within the queue's key_window_ms fails the publication with 40001
    (pgqueue._message_insert); two publications (or a publication and a producer) that wait for
    each other's keys fail one of them with 40P01. Either rolled back whole: the staging rows
    and the publish key are as before, and run again it finds the key kept, so that row inserts
    nothing and counts, as any row whose key is taken. Without this the write failed and its
    staging was discarded (a review); message_create's keyed retry in the client is the same
    (_core.Call.again_on_40001). The runs are spaced (:data:`_PUBLISH_WAIT`, doubled), so that
    the other side of a deadlock has ended.
    """
    for tried in range(_PUBLISH_TRIES - 1):
        try:
            return _scalar(conn, _sql.PUBLISH, params)
        except (SerializationFailure, DeadlockDetected) as exc:
            logger.info("the publication was refused (%s); publishing again", exc.sqlstate)
            time.sleep(_PUBLISH_WAIT * 2 ** tried)
    return _scalar(conn, _sql.PUBLISH, params)


_T = TypeVar("_T")


def _lost(exc: BaseException) -> bool:
    """Whether an error means the connection was lost or refused (the server restarting, a
    terminated backend, a broken network), rather than a refusal of the call itself."""
    if isinstance(exc, ConnectionFailed):
        return True
    return isinstance(exc, psycopg.Error) and isinstance(translate(exc), ConnectionFailed)


#: A driver call refused with 40001 or 40P01 this many times in a row raises (each refusal is
#: another transaction's progress; the waits between runs grow to 0.1 s, as the workers' do).
_CONFLICT_TRIES = 100


class _Reconnect:
    """The retries of one call after lost connections, as the pgqueue worker does them: waits of
    0.1 s doubling up to 30 s, a warning when the outage starts, retries at DEBUG and one INFO
    line when the call works again; after ``reconnectTimeout`` seconds (from the first loss)
    :meth:`failed` raises instead. The caller runs the whole call again on a new connection, so
    it must be one that is safe to repeat (each caller says why it is)."""

    def __init__(self, opts: Options, what: str) -> None:
        self._timeout = opts.reconnect_timeout
        self._what = what
        self._backoff = Backoff()
        self._outage = Outage(logger, f"pgqueue: {what}")
        self._deadline: float | None = None
        self._tries = 0

    def failed(self, exc: BaseException) -> None:
        """After a lost connection: wait before the next try; raise when the time is up."""
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + self._timeout
        self._tries += 1
        if self._timeout <= 0:
            raise exc  # reconnectTimeout=0: fail at the first loss
        wait = min(self._backoff.next(), self._deadline - now)
        if wait <= 0:
            raise ConnectionFailed(
                f"pgqueue: {self._what}: the connection to the database was lost and could not be restored "
                f"within reconnectTimeout={self._timeout} s ({self._tries} attempt(s)); last error: "
                f"{_first_line(exc)}",
                sqlstate=getattr(exc, "sqlstate", None),
            ) from exc
        self._outage.failed(f"pgqueue: {self._what}: database connection lost: {_first_line(exc)}",
                            f"reconnecting in {wait:.3g}s (for up to {self._timeout} s)")
        time.sleep(wait)

    def worked(self) -> None:
        """The call worked (again): end the outage, if there was one, with one log line."""
        self._outage.worked()
        self._deadline, self._tries = None, 0
        self._backoff.reset()


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------


def _field(schema: StructType, name: str, role: str) -> StructField:
    for f in schema.fields:
        if f.name == name:
            return f
    raise InvalidArgument(
        f"the DataFrame has no {role} column {name!r} (columns: {', '.join(schema.fieldNames()) or 'none'})"
    )


def _type_error(role: str, f: StructField, wanted: str) -> InvalidArgument:
    return InvalidArgument(
        f"{role} column {f.name!r} has type {f.dataType.simpleString()}, but it must be {wanted}"
    )


#: Types that a JSON payload (a struct, array or map) cannot hold, with what to write instead.
#: The Arrow batches Spark hands the sink carry a VARIANT, a GEOMETRY and a GEOGRAPHY as structs
#: of their internal binary form ({"value", "metadata"}, {"srid", "wkb"}), which would be written
#: as such, and a year-month interval as a type pyarrow cannot read (the task failed with
#: ``KeyError: 21``, naming neither column nor row). Spark refuses a calendar INTERVAL in a
#: table's schema itself; it is here so that no path writes one. A day-time interval is written
#: as its seconds (a number), as ``delayColumn`` reads one.
_NOT_IN_JSON: tuple[tuple[type[DataType], str], ...] = (
    (VariantType, "to_json({col}) AS {col} with payloadType=json writes its JSON"),
    (YearMonthIntervalType, "cast it to an integer (months) or a string first"),
    (CalendarIntervalType, "cast it to a number or a string first"),
    (SpatialType, "convert it with st_asbinary (WKB) first"),
)


def _not_in_json(dt: DataType, path: str) -> tuple[str, DataType, str] | None:
    """The first field inside a JSON payload's type that JSON cannot hold: its path (``payload.a[].b``;
    ``[]`` an array's element, ``{key}`` / ``{}`` a map's keys / values), its type and what to do."""
    for bad, instead in _NOT_IN_JSON:
        if isinstance(dt, bad):
            return path, dt, instead
    if isinstance(dt, UserDefinedType):
        return _not_in_json(dt.sqlType(), path)
    if isinstance(dt, StructType):
        for f in dt.fields:
            found = _not_in_json(f.dataType, f"{path}.{f.name}")
            if found is not None:
                return found
    elif isinstance(dt, ArrayType):
        return _not_in_json(dt.elementType, f"{path}[]")
    elif isinstance(dt, MapType):
        return _not_in_json(dt.keyType, f"{path}{{key}}") or _not_in_json(dt.valueType, f"{path}{{}}")
    return None


def write_plan(opts: Options, schema: StructType) -> WritePlan:
    """Check a DataFrame's schema against the write options and return how to encode its rows.

    Raises:
        InvalidArgument: a missing column, a column of the wrong type (a struct, array or map
            payload holding a type JSON cannot hold, a VARIANT say: see :data:`_NOT_IN_JSON`),
            or a column that no option names (every column must be the payload or a schedule
            column, so nothing is dropped silently).
    """
    pf = _field(schema, opts.payload_column, "payload")
    dt = pf.dataType
    kind: str
    if opts.payload_type == "binary":
        if not isinstance(dt, BinaryType):
            raise _type_error("payload", pf, "binary for payloadType=binary")
        kind = "binary"
    elif opts.payload_type == "string":
        if not isinstance(dt, StringType):
            raise _type_error("payload", pf, "string for payloadType=string")
        kind = "text"
    elif opts.payload_type == "json":
        if isinstance(dt, StringType):
            kind = "json_text"
        elif isinstance(dt, _JSON_VALUE):
            kind = "json_value"
        else:
            raise _type_error("payload", pf, "string (JSON text), struct, array, map, number or boolean "
                                             "for payloadType=json")
    else:
        if isinstance(dt, BinaryType):
            kind = "binary"
        elif isinstance(dt, StringType):
            kind = "text"
        elif isinstance(dt, _JSON_VALUE):
            kind = "json_value"
        else:
            raise _type_error("payload", pf, "binary, string, struct, array, map, number or boolean")

    if kind == "json_value":
        # on the driver, before any task: a task would write the internal form or fail on its first row
        found = _not_in_json(dt, pf.name)
        if found is not None:
            path, inner, instead = found
            raise InvalidArgument(
                f"payload column {pf.name!r} has type {dt.simpleString()}, which holds {inner.simpleString()} "
                f"at {path}: the pgqueue sink cannot write that as JSON ({instead.format(col=pf.name)})"
            )

    used = {pf.name}
    at_kind = delay_kind = None
    if opts.dequeue_at_column is not None:
        f = _field(schema, opts.dequeue_at_column, "dequeueAt")
        if isinstance(f.dataType, (TimestampType, TimestampNTZType)):
            at_kind = "timestamp"
        elif isinstance(f.dataType, _INTEGRAL):
            at_kind = "epoch_ms"
        else:
            raise _type_error("dequeueAt", f, "a timestamp or an integer (epoch milliseconds)")
        used.add(f.name)
    if opts.delay_column is not None:
        f = _field(schema, opts.delay_column, "delay")
        if isinstance(f.dataType, DayTimeIntervalType):
            delay_kind = "interval"
        elif isinstance(f.dataType, _NUMERIC):
            delay_kind = "seconds"
        else:
            raise _type_error("delay", f, "a number of seconds or a day-time interval")
        used.add(f.name)
    if opts.priority_column is not None:
        f = _field(schema, opts.priority_column, "priority")
        if not isinstance(f.dataType, _INTEGRAL):
            raise _type_error("priority", f, "an integer")
        used.add(f.name)
    for column, role in ((opts.group_column, "group"), (opts.key_column, "key")):
        if column is not None:
            f = _field(schema, column, role)
            if not isinstance(f.dataType, (StringType, *_INTEGRAL)):
                raise _type_error(role, f, "a string or an integer")
            used.add(f.name)
    if len(used) < len([c for c in (opts.payload_column, opts.dequeue_at_column, opts.delay_column,
                                    opts.priority_column, opts.group_column, opts.key_column) if c is not None]):
        raise InvalidArgument("the payload, dequeueAt, delay, priority, group and key columns must be "
                              "different columns")
    extra = [n for n in schema.fieldNames() if n not in used]
    if extra:
        raise InvalidArgument(
            f"the DataFrame has column(s) {', '.join(map(repr, extra))} that the pgqueue sink would drop: "
            f"select only the payload column (e.g. to_json(struct(*)) AS {opts.payload_column}) and the "
            "columns named by dequeueAtColumn, delayColumn, priorityColumn, groupColumn or keyColumn"
        )
    return WritePlan(
        payload_column=pf.name,
        payload_kind=kind,
        dequeue_at_column=opts.dequeue_at_column,
        dequeue_at_kind=at_kind,
        delay_column=opts.delay_column,
        delay_kind=delay_kind,
        priority_column=opts.priority_column,
        group_column=opts.group_column,
        key_column=opts.key_column,
    )


@dataclass(frozen=True)
class PgQueueCommit(WriterCommitMessage):
    """What a write task reports to the driver: its partition, its attempt and how many rows it wrote."""

    partition: int
    attempt: int
    rows: int


def _task_identity() -> tuple[int, int]:
    """Return (partition id, task attempt id) of the running Spark task; (0, 0) outside Spark."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0
    return ctx.partitionId(), ctx.taskAttemptId()


def _write_partition(opts: Options, plan: WritePlan, iterator: Iterator[Any], partition: int, attempt: int,
                     write_id: str | None) -> int:
    """Write one partition's Arrow batches in one transaction and return how many rows.

    ``write_id`` None enqueues the rows (``message_create_batch``); otherwise they are staged
    under (write_id, partition, attempt) for ``spark_publish``.
    """
    rows = 0
    conn: psycopg.Connection[tuple[Any, ...]] | None = None
    try:
        for batch in iterator:
            if batch.num_rows == 0:
                continue
            chunk = encode_batch(plan, batch, partition=partition, first_row=rows)
            if conn is None:
                conn = _connect(opts.dsn, autocommit=False)
            for part in chunk.slices(opts.batch_size):
                params: dict[str, object] = {
                    "contents": part.contents, "content_type": part.content_type,
                    "dequeue_ats": part.dequeue_ats, "delays_ms": part.delays_ms,
                    "groups": part.groups, "keys": part.keys,
                }
                with translating():
                    if write_id is None:
                        conn.execute(_sql.ENQUEUE_CHUNK, {**params, "queue": opts.queue})
                    else:
                        conn.execute(_sql.STAGE_CHUNK, {
                            **params, "write_id": write_id, "partition": partition,
                            "attempt": attempt, "first": rows,
                        })
                rows += len(part)
        if conn is not None:
            with translating():
                conn.commit()
    finally:
        if conn is not None:
            conn.close()  # without a commit this rolls back: nothing of this attempt stays
    return rows


class PgQueueWriter(DataSourceArrowWriter):
    """Write a DataFrame into a queue: per partition (task mode) or all at once (job mode)."""

    def __init__(self, opts: Options, plan: WritePlan) -> None:
        self.opts = opts
        self.plan = plan
        #: identifies this write's staging rows and, in job mode, its publication (made on the
        #: driver, so that every task and commit()/abort() see the same value)
        self.write_id = str(uuid.uuid4())

    def write(self, iterator: Iterator[Any]) -> PgQueueCommit:
        """Enqueue (task mode) or stage (job mode) one partition in one transaction."""
        partition, attempt = _task_identity()
        write_id = self.write_id if self.opts.commit_mode == "job" else None
        rows = _write_partition(self.opts, self.plan, iterator, partition, attempt, write_id)
        return PgQueueCommit(partition, attempt, rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Job mode: publish the winning attempts in one transaction (once); task mode: nothing.

        The publication's row of pgqueue.spark_publish_log (key: the write id) is deleted once
        spark_publish has answered (:meth:`_forget`); it stays when the outcome is unknown, and
        when a retry after a lost connection is what published (see :meth:`_publish`).
        """
        if self.opts.commit_mode != "job":
            return
        done = [m for m in messages if isinstance(m, PgQueueCommit)]
        if len(done) != len(messages):
            self._discard()
            raise PgQueueError("a write task reported no result: refusing to publish part of the DataFrame")
        params: dict[str, object] = {
            "publish_key": self.write_id, "queue": self.opts.queue, "write_id": self.write_id,
            "partitions": [m.partition for m in done], "attempts": [m.attempt for m in done],
            "counts": [m.rows for m in done],
        }
        try:
            published = self._publish(params)
        except ConnectionFailed as exc:
            # The connection broke during spark_publish: the server may have committed the
            # publication before its reply was lost, or rolled it back. Publishing again under
            # the same key (this write's own) tells which: NULL if it is published already,
            # else it publishes now. Failing the job instead would claim that nothing was
            # published, and a user's retry would enqueue the whole DataFrame twice. (The first
            # attempt's log row is what the retry finds. A retry that publishes keeps its own row:
            # the first attempt's transaction may still run on the server, and the row is what
            # makes it publish nothing when it gets to its own insert into the log.)
            try:
                published = self._publish(params, first=False)
            except PgQueueError as again:
                exc.add_note(f"pgqueue: whether write {self.write_id} was published is unknown: publishing "
                             f"it again failed too ({again}); look for publish key {self.write_id} in "
                             "pgqueue.spark_publish_log before writing the DataFrame again")
                raise exc from None
            if published is None:
                logger.warning("pgqueue: the connection broke after write %s was published into queue %s; "
                               "it is published once", self.write_id, self.opts.queue)
                return
        logger.info("pgqueue: published %s message(s) into queue %s (write %s)",
                    published, self.opts.queue, self.write_id)

    def _publish(self, params: dict[str, object], *, first: bool = True) -> Any:
        """spark_publish in its own connection, then (the outcome known) :meth:`_forget` its key:
        after the first attempt, or after a retry that found it published (NULL: the first
        attempt committed, so nothing else can publish under the key); a retry that published
        keeps the row (see :meth:`commit`).

        On an error other than a lost connection the staging rows are discarded (nothing was
        published, nothing logged). After a lost connection the outcome is unknown: the staging
        rows stay, and so does the key's log row if the publication committed, for a retry (or
        the user) to find it.
        """
        with _connect(self.opts.dsn, autocommit=True) as conn:
            try:
                published = _publish_call(conn, params)
            except ConnectionFailed:
                raise
            except BaseException as exc:
                try:
                    _scalar(conn, _sql.DISCARD, {"write_id": self.write_id})
                except PgQueueError as err:  # keep the publish error; note why staging stays
                    exc.add_note(f"pgqueue: could not discard the staging rows of write {self.write_id}: {err}")
                raise
            if first or published is None:
                self._forget(conn)
            return published

    def _forget(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        """Delete this write's row of spark_publish_log (its key is the write id, used by no other write).

        spark_publish has answered (a count: published now; NULL: published by an attempt whose
        reply was lost), so nothing will publish under this key again: the row only served a
        retry after a lost connection, and kept, the log would grow by a row per job-mode write.
        A failure here (a lost connection, no DELETE right) must not fail a job whose DataFrame
        is in the queue: it leaves the one row, and a warning.
        """
        try:
            with translating():
                conn.execute(_sql.FORGET_PUBLISH, {"publish_key": self.write_id})
        except Exception as exc:
            logger.warning("pgqueue: write %s is published into queue %s, but deleting its row of "
                           "pgqueue.spark_publish_log failed (%s): the row of publish key %s is no longer "
                           "needed and may be deleted", self.write_id, self.opts.queue, exc, self.write_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Job mode: delete the write's staging rows. Task mode: report what stays enqueued."""
        if self.opts.commit_mode == "job":
            self._discard()
            return
        done = [m for m in messages if isinstance(m, PgQueueCommit) and m.rows]
        if done:
            logger.warning(
                "pgqueue: the write into queue %s failed, but %d message(s) of partition(s) %s were "
                "enqueued already (commitMode=task); use commitMode=job for all-or-nothing writes",
                self.opts.queue, sum(m.rows for m in done), sorted(m.partition for m in done))

    def _discard(self) -> None:
        with _connect(self.opts.dsn, autocommit=True) as conn:
            _scalar(conn, _sql.DISCARD, {"write_id": self.write_id})


#: Namespace of the staging ids of streamed micro-batches: uuid5(namespace, "<query id>/<batch id>").
STREAM_NAMESPACE = uuid.UUID("5f0c2a4e-3c1b-4d55-9a57-7b1d2c0e9a41")


def stream_write_id(query_id: str, batch_id: int) -> str:
    """The staging id of micro-batch ``batch_id`` of a streaming query: the same in every run."""
    return str(uuid.uuid5(STREAM_NAMESPACE, f"{query_id}/{batch_id}"))


def stream_publish_key(query_id: str, batch_id: int) -> str:
    """The publish key of micro-batch ``batch_id`` of a streaming query (spark_publish_log)."""
    return f"stream:{query_id}:{batch_id}"


@dataclass(frozen=True)
class PgQueueStreamCommit(WriterCommitMessage):
    """What a streaming write task reports: its query, micro-batch, partition, attempt and rows."""

    query_id: str
    batch_id: int
    partition: int
    attempt: int
    rows: int


def _stream_task_identity() -> tuple[str, int, int, int]:
    """Return (query id, batch id, partition, attempt) of the running streaming write task.

    Spark sets the query id (kept in the checkpoint, the same after a restart), the micro-batch
    id and the run id (new at every start) as local properties of the micro-batch's jobs. The
    attempt number mixes a hash of the run id into the task attempt id, which Spark numbers from
    0 again after a restart: a re-run of a micro-batch never collides with the rows its crashed
    run staged.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query_id = None if ctx is None else ctx.getLocalProperty("sql.streaming.queryId")
    batch = None if ctx is None else ctx.getLocalProperty("streaming.sql.batchId")
    if ctx is None or not query_id or batch is None:
        raise PgQueueError("the pgqueue stream writer runs only inside a Spark streaming query "
                           "(no query id or micro-batch id in the task's properties)")
    run = ctx.getLocalProperty("spark.jobGroup.id") or ""
    attempt = (zlib.crc32(run.encode("utf-8")) << 31) | (ctx.taskAttemptId() & 0x7FFFFFFF)
    return query_id, int(batch), ctx.partitionId(), attempt


class PgQueueStreamWriter(DataSourceStreamArrowWriter):
    """Write each micro-batch of a streaming query into a queue exactly once (``writeStream``).

    Every task stages its rows under the micro-batch's staging id; when Spark commits the
    micro-batch, the driver publishes the winning attempts in one transaction under the key
    ``stream:<query id>:<batch id>``. A micro-batch that Spark runs again (a failed task, a
    query restarted from its checkpoint after a crash, even after the publication) finds its
    key taken and publishes nothing more.
    """

    def __init__(self, opts: Options, plan: WritePlan) -> None:
        self.opts = opts
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> PgQueueStreamCommit:
        """Stage one partition of a micro-batch in one transaction."""
        query_id, batch_id, partition, attempt = _stream_task_identity()
        rows = _write_partition(self.opts, self.plan, iterator, partition, attempt,
                                stream_write_id(query_id, batch_id))
        return PgQueueStreamCommit(query_id, batch_id, partition, attempt, rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Publish micro-batch ``batchId`` once, then forget the query's older publications."""
        done = [m for m in messages if isinstance(m, PgQueueStreamCommit)]
        if len(done) != len(messages):
            raise PgQueueError(f"a write task of micro-batch {batchId} reported no result: refusing to "
                               "publish part of it")
        if not done:
            return
        query_ids = {m.query_id for m in done}
        if len(query_ids) != 1 or any(m.batch_id != batchId for m in done):
            raise PgQueueError(f"the write tasks of micro-batch {batchId} report other queries or batches: "
                               f"{sorted({(m.query_id, m.batch_id) for m in done})}")
        (query_id,) = query_ids
        retry = _Reconnect(self.opts, f"publication of micro-batch {batchId} into queue {self.opts.queue!r}")
        lost_once = False
        while True:
            try:
                published = self._publish(query_id, batchId, done)
            except StagedRowsMissing:
                # after a loss: the lost attempt may have committed between this attempt's look at
                # the log and its count of the staging rows (which that publication deleted)
                if not (lost_once and self._published(stream_publish_key(query_id, batchId))):
                    raise
                published = None
            except Exception as exc:
                if not _lost(exc):
                    raise
                lost_once = True
                # The publication may have committed before its reply was lost, or not, or still
                # be running on the lost session: publishing again under the same key publishes
                # it once in every case (spark_publish returns NULL for a key taken, and waits
                # for a running publication of the key to end first); discard and prune are
                # idempotent. The tasks' staging rows are there until a publication takes them.
                retry.failed(exc)
                continue
            retry.worked()
            break
        if published is False:
            return
        if published is None:
            logger.info("pgqueue: micro-batch %s of query %s was published before; skipped", batchId, query_id)
        else:
            logger.info("pgqueue: published %s message(s) of micro-batch %s into queue %s",
                        published, batchId, self.opts.queue)

    def _published(self, key: str) -> bool:
        with _connect(self.opts.dsn, autocommit=True) as conn:
            return bool(_scalar(conn, _sql.PUBLISHED, {"publish_key": key}))

    def _publish(self, query_id: str, batch_id: int, done: list[PgQueueStreamCommit]) -> Any:
        """Publish the micro-batch: the count, None if its key was published before, False if it
        has no rows (its staging is discarded)."""
        write_id = stream_write_id(query_id, batch_id)
        key = stream_publish_key(query_id, batch_id)
        with _connect(self.opts.dsn, autocommit=True) as conn:
            if sum(m.rows for m in done) == 0:  # nothing to publish, nothing to remember
                _scalar(conn, _sql.DISCARD, {"write_id": write_id})
                return False
            published = _publish_call(conn, {
                "publish_key": key, "queue": self.opts.queue, "write_id": write_id,
                "partitions": [m.partition for m in done], "attempts": [m.attempt for m in done],
                "counts": [m.rows for m in done],
            })
            # Spark re-runs only the last micro-batch that is not in its commit log, and it logs
            # batch N only after batch N - 1: the keys of the earlier batches are never needed again
            with translating():
                conn.execute(_sql.PRUNE_STREAM_LOG, {"prefix": f"stream:{query_id}:", "keep": key})
        return published

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Delete what the micro-batch's tasks staged (a re-run stages it again)."""
        for query_id in {m.query_id for m in messages if isinstance(m, PgQueueStreamCommit)}:
            with _connect(self.opts.dsn, autocommit=True) as conn:
                _scalar(conn, _sql.DISCARD, {"write_id": stream_write_id(query_id, batchId)})


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------


def split_range(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """Split the id range [lo, hi] into at most ``parts`` consecutive, non-empty ranges."""
    if hi < lo:
        return []
    size = hi - lo + 1
    parts = max(1, min(parts, size))
    step, extra = divmod(size, parts)
    out = []
    start = lo
    for i in range(parts):
        end = start + step - 1 + (1 if i < extra else 0)
        out.append((start, end))
        start = end + 1
    return out


@dataclass(frozen=True)
class IdRange(InputPartition):
    """A partition of a snapshot read: the queue's messages with min_id <= id <= max_id."""

    opts: Options
    min_id: int
    max_id: int


class PgQueueBatchReader(DataSourceReader):
    """A non-destructive snapshot of a queue, split into id ranges (``spark.read``)."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        #: the id bounds pushed down by Spark (inclusive), None where open
        self.min_id: int | None = None
        self.max_id: int | None = None
        #: other pushed-down conditions: parameter name (a key of _sql.SNAPSHOT_WHERE) -> value
        self.where: dict[str, Any] = {}

    def _bound(self, lo: int | None, hi: int | None) -> None:
        if lo is not None:
            self.min_id = lo if self.min_id is None else max(self.min_id, lo)
        if hi is not None:
            self.max_id = hi if self.max_id is None else min(self.max_id, hi)

    def partitions(self) -> Sequence[InputPartition]:
        """Freeze the id range now (within the pushed-down bounds), split into ``numPartitions``."""
        with _connect(self.opts.dsn, autocommit=True) as conn, translating():
            row = conn.execute(_sql.SNAPSHOT_RANGE, {
                "queue": self.opts.queue, "include_dead": self.opts.include_dead}).fetchone()
        if row is None or row[0] is None:
            return []
        lo = int(row[0]) if self.min_id is None else max(int(row[0]), self.min_id)
        hi = int(row[1]) if self.max_id is None else min(int(row[1]), self.max_id)
        return [IdRange(self.opts, a, b) for a, b in split_range(lo, hi, self.opts.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Yield the rows of one id range (Spark gives an empty partition for an empty queue)."""
        if not isinstance(partition, IdRange):
            return iter(())
        return _read_snapshot(partition, self.where)


#: Raw time columns of a snapshot and the schema columns (TIMESTAMP, or BIGINT epoch ms) read from them.
_TIME_COLUMNS = {("dequeue_at",): "dequeue_at", ("dequeue_at_ms",): "dequeue_at",
                 ("created_at",): "created_at", ("created_at_ms",): "created_at"}
_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


class PgQueuePushdownReader(PgQueueBatchReader):
    """A snapshot reader that takes Spark's filters (option ``filterPushdown``).

    * ``id`` (``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``) narrows the id range that the
      partitions probe on the primary key;
    * ``status`` (``=``, ``IN``) and the times ``dequeue_at``, ``created_at`` (and their ``_ms``
      columns; ``=``, ``<``, ``<=``, ``>``, ``>=``) are evaluated by the server, so rows that
      fail them never reach Spark.

    A filter on a TIMESTAMP column is bounded to the millisecond around it and also handed back
    to Spark, which applies it exactly (a bound at the first or last instant a TIMESTAMP holds
    is Spark's alone: rows show times beyond them clamped to them); the others are exact and
    taken over. A separate class because Spark refuses every read of a reader with
    ``pushFilters`` while its switch ``spark.sql.python.filterPushdown.enabled`` is off (the
    default in 4.3).
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:  # noqa: N802
        """Take what bounds id, status and the times; hand every other filter back to Spark."""
        for f in filters:
            column = getattr(f, "attribute", None)
            if column == ("id",):
                if not self._push_id(f):
                    yield f
            elif column == ("status",):
                if not self._push_status(f):
                    yield f
            elif column in _TIME_COLUMNS:
                if not self._push_time(_TIME_COLUMNS[column], f):
                    yield f
            else:
                yield f

    def _push_id(self, f: Filter) -> bool:
        if isinstance(f, In):
            values = [v for v in f.value if v is not None]
            if values and all(type(v) is int for v in values):
                self._bound(min(values), max(values))
            return False  # Spark still keeps only the listed ids
        value = getattr(f, "value", None)
        if type(value) is not int or not isinstance(f, _COMPARISONS):
            return False
        lo, hi = _int_bounds(f, value)
        self._bound(lo, hi)
        return True

    def _push_status(self, f: Filter) -> bool:
        if isinstance(f, EqualTo) and isinstance(f.value, str):
            values = {f.value}
        elif isinstance(f, In) and all(isinstance(v, str) or v is None for v in f.value):
            values = {v for v in f.value if v is not None}
        else:
            return False
        before = self.where.get("statuses")
        self.where["statuses"] = sorted(values if before is None else values & set(before))
        return True

    def _push_time(self, raw: str, f: Filter) -> bool:
        """Bound column ``raw`` (epoch ms); True if the bound is exact (an integer ``_ms`` filter)."""
        value = getattr(f, "value", None)
        if not isinstance(f, _COMPARISONS):
            return False
        if type(value) is int:
            lo, hi = _int_bounds(f, value)
            if not all(b is None or -(2**63) <= b < 2**63 for b in (lo, hi)):
                return False  # past bigint: Spark decides (nothing or everything passes)
            exact = True
        elif isinstance(value, datetime) and value.tzinfo is not None:
            us = (value - _EPOCH) // timedelta(microseconds=1)
            # every millisecond whose instant may pass: [floor, ceil] around the microsecond
            lo = us // 1000 if isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual)) else None
            hi = -(-us // 1000) if isinstance(f, (EqualTo, LessThan, LessThanOrEqual)) else None
            # Rows show a time past what a TIMESTAMP holds clamped to its first or last instant
            # (_ts): a message due at 2**63 - 1 ms reads as 9999-12-31 23:59:59.999. A bound at
            # or beyond a limit would let the server drop rows that Spark's own filter keeps
            # (dequeue_at <= that instant, or = it): that side is left to Spark.
            if lo is not None and lo <= _MIN_MS:
                lo = None
            if hi is not None and hi >= _MAX_MS:
                hi = None
            exact = False
        else:
            return False
        if lo is not None:
            self.where[f"{raw}_lo"] = max(lo, self.where.get(f"{raw}_lo", lo))
        if hi is not None:
            self.where[f"{raw}_hi"] = min(hi, self.where.get(f"{raw}_hi", hi))
        return exact


def _int_bounds(f: Filter, value: int) -> tuple[int | None, int | None]:
    """The inclusive bounds an integer comparison sets."""
    if isinstance(f, EqualTo):
        return value, value
    if isinstance(f, GreaterThan):
        return value + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return value, None
    if isinstance(f, LessThan):
        return None, value - 1
    return None, value


def _read_snapshot(p: IdRange, where: dict[str, Any]) -> Iterator[tuple[Any, ...]]:
    opts = p.opts
    query = _sql.SNAPSHOT + " WHERE true"
    for name in _sql.SNAPSHOT_WHERE:  # fixed clauses, in a fixed order; only the values vary
        if name in where:
            query += _sql.SNAPSHOT_WHERE[name]
    # A lost connection before the first row is retried (the read starts again, at a later
    # time); after it, the task fails and Spark runs it again: a partition is one read at one
    # time (resuming could show a message that was dead-lettered meanwhile twice).
    retry = _Reconnect(opts, f"snapshot read of queue {opts.queue!r} (ids {p.min_id}..{p.max_id})")
    started = False
    while True:
        try:
            with _connect(opts.dsn, autocommit=False) as conn, translating():
                with conn.cursor(name="pgqueue_spark_snapshot") as cur:
                    cur.itersize = opts.fetch_size
                    cur.execute(query, {"queue": opts.queue, "min_id": p.min_id, "max_id": p.max_id,
                                        "include_dead": opts.include_dead, **where})
                    for (mid, status, content, ctype, attempts, dequeue_at, created_at, locked_until,
                         last_error, dead_at, state) in cur:
                        if not started:
                            started = True
                            retry.worked()
                        yield _message_row(opts, mid, status, content, ctype, attempts, dequeue_at, created_at,
                                           locked_until, last_error, dead_at, state, None)
            retry.worked()
            return
        except Exception as exc:
            if started or not _lost(exc):
                raise
            retry.failed(exc)


@dataclass(frozen=True)
class ClaimRange(InputPartition):
    """A partition of a micro-batch: the messages of claims after_seq < seq <= up_to_seq with ids in range."""

    opts: Options
    after_seq: int
    up_to_seq: int
    min_id: int
    max_id: int


class PgQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Consume a queue with claims as offsets, acknowledged when Spark commits (``spark.readStream``).

    An offset is ``{"queue": q, "consumer": name, "seq": n}``: every claim of the consumer of
    queue q up to sequence number n, with ``"from": ms`` when the query has a starting position
    (option ``startingPosition``, resolved to epoch ms at the query's first start and carried by
    every later offset, so a restart from the checkpoint keeps it). A checkpoint of another queue
    or consumer is refused (:meth:`_seq`). See :mod:`pgqueue.spark` for the guarantees.
    """

    def __init__(self, opts: Options) -> None:
        # No I/O here: Spark also builds this object in the planner and on executors.
        self.opts = opts
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._target: int | None = None
        self._available_now = False
        #: whether this reader has held the consumer once: only then is a lost connection retried
        #: (a query that cannot connect at its start fails at once, a wrong dsn say)
        self._opened = False
        #: the backend of the connection (``_pid``), and of the one lost before it (``_lost_pid``)
        self._pid: int | None = None
        self._lost_pid: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_conn"] = None
        return state

    # -- the driver connection ------------------------------------------------------------

    def _db(self) -> psycopg.Connection[tuple[Any, ...]]:
        """The driver's connection; opening it takes the consumer's session lock (PQ005 if held).

        After a lost connection the consumer is opened again on the new session. The lost
        session may still be there, holding the consumer (a server that has not noticed a broken
        network yet): that PQ005 is a lost connection still, retried until the server ends it.
        A PQ005 while the lost session is gone means another query opened the consumer during
        the outage: that fails the query, as it would fail at its start.
        """
        if self._conn is None or self._conn.closed:
            conn = _connect(self.opts.dsn, autocommit=True)
            try:
                _scalar(conn, _sql.CONSUMER_OPEN, self._key())
            except ConsumerInUse as exc:
                try:
                    lost = self._lost_pid
                    if lost is not None and _scalar(conn, _sql.BACKEND_ALIVE, {"pid": lost}):
                        raise ConnectionFailed(
                            f"consumer {self.opts.consumer!r} of queue {self.opts.queue!r} is still held by this "
                            f"query's lost session (backend {lost}), which the server has not ended yet"
                        ) from exc
                    if lost is not None:
                        exc.add_note("pgqueue: the query lost its connection to the database, and another "
                                     "session opened the consumer before the query got it back")
                    raise
                finally:
                    conn.close()
            except BaseException:
                conn.close()
                raise
            self._conn, self._pid, self._lost_pid, self._opened = conn, conn.info.backend_pid, None, True
        return self._conn

    def _retry(self, what: str, call: Callable[[], _T]) -> _T:
        """Run a driver call; after a lost connection, run it again from its start on a new one,
        and after a conflict with another transaction (40001, 40P01) on the same one.

        Every driver call is safe to run again: each reads the consumer's state from the server
        first, and what it changes is idempotent. spark_ack up to a claim acknowledged already
        does nothing; a spark_claim that committed before its reply was lost is an open claim
        the next latestOffset finds (spark_pending_seq) and hands out as its offset, as after a
        driver crash, and a claim still running on the lost session is below the claims taken
        after it, so inside the next offset's range. Nothing is claimed twice or left behind.
        """
        retry: _Reconnect | None = None
        conflicts = 0
        while True:
            try:
                result = call()
            except Exception as exc:
                if is_conflict(exc) and conflicts < _CONFLICT_TRIES:
                    # 40001/40P01: the statement rolled back whole, on a connection still good.
                    # Under a REPEATABLE READ or SERIALIZABLE default a claim that met a consumer's
                    # acknowledgement failed the query (a review); run it again, as the workers do
                    conflicts += 1
                    time.sleep(_conflict_wait(conflicts))
                    continue
                if not (self._opened and _lost(exc)):
                    raise
                self._drop()
                if retry is None:
                    retry = _Reconnect(self.opts, f"stream reader of consumer {self.opts.consumer!r} on queue "
                                                  f"{self.opts.queue!r} ({what})")
                retry.failed(exc)
                continue
            if retry is not None:
                retry.worked()
            return result

    def _drop(self) -> None:
        """Let a lost connection go (the server ends its session, which gives up the consumer)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._lost_pid = self._pid
            conn.close()

    def _key(self) -> dict[str, object]:
        return {"queue": self.opts.queue, "consumer": self.opts.consumer}

    def _offset(self, seq: int, start_ms: int | None, origin: int | None) -> dict[str, Any]:
        """An offset: the consumer's claim ``seq``, the starting position ``from`` and the
        ``origin``, the claim the checkpoint's first micro-batch starts after (see
        :meth:`partitions`); the last two are carried from the initial offset on. The queue and
        the consumer say whose claims ``seq`` counts (see :meth:`_seq`)."""
        offset: dict[str, Any] = {"queue": self.opts.queue, "consumer": self.opts.consumer, "seq": int(seq)}
        if start_ms is not None:
            offset["from"] = int(start_ms)
        if origin is not None:
            offset["origin"] = int(origin)
        return offset

    @staticmethod
    def _origin(offset: dict[str, Any]) -> int | None:
        value = offset.get("origin")  # (an offset of a checkpoint written before 0.4 has none)
        return None if value is None else int(value)

    @staticmethod
    def _from(offset: dict[str, Any]) -> int | None:
        """The starting position (epoch ms) an offset carries; None: every deliverable message."""
        value = offset.get("from")
        return None if value is None else int(value)

    def _seq(self, offset: dict[str, Any]) -> int:
        """The claim sequence number of an offset of this query's checkpoint; an offset of another
        queue or consumer is refused before anything uses it.

        Sequence numbers count the claims of one consumer of one queue, and the default consumer
        name (``spark``) is the same on every queue: a checkpoint restarted against another queue
        acknowledged (deleted) that queue's open claims up to its own number, messages no one
        had processed. An offset without a queue (written before offsets named it) is taken, as
        one without an origin is (:meth:`_origin`): a query updated in place keeps running, and
        its next offset names the queue.
        """
        queue = offset.get("queue")
        if queue is not None and queue != self.opts.queue:
            raise InvalidArgument(
                f"the checkpoint belongs to queue {queue!r}, but the query consumes queue {self.opts.queue!r}: "
                "keep the queue of a query, or start a new checkpoint"
            )
        if offset.get("consumer") != self.opts.consumer:
            raise InvalidArgument(
                f"the checkpoint belongs to consumer {offset.get('consumer')!r}, but the query consumes as "
                f"{self.opts.consumer!r}: keep the consumer option of a query, or start a new checkpoint"
            )
        return int(offset["seq"])

    def _position(self) -> tuple[int, int]:
        """The consumer's (acked_seq, next_seq)."""
        with translating():
            row = self._db().execute(_sql.CONSUMER_POSITION, self._key()).fetchone()
        if row is None:  # dropped with its queue while we run
            raise PgQueueError(f"consumer {self.opts.consumer!r} of queue {self.opts.queue!r} is gone: "
                               "was the queue dropped?")
        return int(row[0]), int(row[1])

    def _ack(self, seq: int) -> None:
        if seq > 0:
            _scalar(self._db(), _sql.ACK, {**self._key(), "up_to_seq": seq})

    # -- the offsets ------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Start after what the consumer acknowledged (its open claims are replayed first).

        Spark asks for it only when the checkpoint has no offset yet: a new query. There the
        starting position becomes epoch ms (``latest``: the server's clock now).
        """
        return self._retry("initialOffset", self._initial_offset)

    def _initial_offset(self) -> dict[str, Any]:
        acked, _next = self._position()
        start = self.opts.starting_position
        if start == "earliest":
            return self._offset(acked, None, acked)
        if start == "latest":
            return self._offset(acked, int(_scalar(self._db(), _sql.NOW_MS, {})), acked)
        assert isinstance(start, int)
        return self._offset(acked, start, acked)

    def getDefaultReadLimit(self) -> ReadLimit:
        """At most ``maxMessagesPerBatch`` messages per micro-batch."""
        return ReadMaxRows(self.opts.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the largest message id now: an AvailableNow run claims nothing newer."""
        self._available_now = True
        target = self._retry("prepareForTriggerAvailableNow",
                             lambda: _scalar(self._db(), _sql.MAX_MESSAGE_ID, {"queue": self.opts.queue}))
        self._target = 0 if target is None else int(target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Acknowledge up to ``start`` (committed), re-use open claims, else claim new messages.

        A lost connection runs it again (see :meth:`_retry`): the claims the lost attempt made
        are open claims then, which the new attempt hands out (a smaller micro-batch, the rest
        in the next one).
        """
        return self._retry("latestOffset", lambda: self._latest_offset(start, limit))

    def _latest_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        seq = self._seq(start)
        start_ms = self._from(start)
        conn = self._db()
        _acked, next_seq = self._position()
        if seq >= next_seq:
            raise PgQueueError(
                f"the checkpoint is at claim {seq} of consumer {self.opts.consumer!r} on queue "
                f"{self.opts.queue!r}, but the consumer's last claim is {next_seq - 1}: the queue or its "
                "consumers were dropped and re-created; start the query with a new checkpoint"
            )
        # Spark asks for the next offset only after the batch ending at `start` is in the commit
        # log, so everything up to `start` is processed: acknowledge it now instead of a batch late.
        self._ack(seq)
        pending = _scalar(conn, _sql.PENDING_SEQ, self._key())
        if pending is not None and int(pending) > seq:
            # claims made before a crash that no micro-batch owns yet: deliver them first
            return self._offset(int(pending), start_ms, self._origin(start))
        if isinstance(limit, ReadAllAvailable):
            max_rows = None
        elif isinstance(limit, ReadMaxRows):
            max_rows = int(limit.max_rows)
        else:
            max_rows = self.opts.max_messages_per_batch
        last = self._claim(max_rows, start_ms)
        return start if last is None else self._offset(last, start_ms, self._origin(start))

    def _claim(self, max_rows: int | None, start_ms: int | None) -> int | None:
        conn = self._db()
        bound = self._target
        if bound is None and max_rows is None:
            # "all available" with a producer still running must end: stop at what exists now
            found = _scalar(conn, _sql.MAX_MESSAGE_ID, {"queue": self.opts.queue})
            bound = 0 if found is None else int(found)
        last: int | None = None
        taken = 0
        while max_rows is None or taken < max_rows:
            want = CLAIM_CHUNK if max_rows is None else min(CLAIM_CHUNK, max_rows - taken)
            seq = _scalar(conn, _sql.CLAIM, {**self._key(), "max_messages": want, "max_id": bound,
                                             "from": start_ms})
            if seq is None:
                break
            last = int(seq)
            with translating():
                claims = conn.execute(_sql.CLAIMS, {**self._key(), "after_seq": last - 1,
                                                    "up_to_seq": last}).fetchall()
            got = int(claims[0][1]) if claims else 0
            taken += got
            if got < want:
                break
        return last

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The claims start < seq <= end, split by id into ``numPartitions`` partitions.

        A restart that replays the checkpoint's first micro-batch gets its start from
        :meth:`initialOffset` again, computed from the consumer as it is now: if claims of that
        batch were acknowledged or released behind the query's back since, that start is past
        them. The batch then starts after its ``origin`` instead (carried in ``end``), so that
        those claims are found missing (``failOnDataLoss``) rather than the batch run empty.
        """
        return self._retry("partitions", lambda: self._partitions(start, end))

    def _partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, up_to = self._seq(start), self._seq(end)
        origin = self._origin(end)
        if origin is not None and self._origin(start) == after and after != origin:
            after = origin  # start is an initial offset computed again, not the one the batch had
        if up_to <= after:
            return []
        with translating():
            claims = self._db().execute(_sql.CLAIMS, {**self._key(), "after_seq": after,
                                                      "up_to_seq": up_to}).fetchall()
        missing = sorted(set(range(after + 1, up_to + 1)) - {int(c[0]) for c in claims})
        if missing:
            text = (f"claim(s) {missing[0]}..{missing[-1]} of consumer {self.opts.consumer!r} on queue "
                    f"{self.opts.queue!r} are gone ({len(missing)} of {up_to - after} in this micro-batch): "
                    "they were acknowledged by another query with the same consumer, or released with "
                    "pgqueue.spark_release()")
            if self.opts.fail_on_data_loss:
                raise PgQueueError(text + "; set failOnDataLoss=false to go on without them")
            logger.warning("pgqueue: %s; going on (failOnDataLoss=false)", text)
        if not claims:
            return []
        lo = min(int(c[2]) for c in claims)
        hi = max(int(c[3]) for c in claims)
        return [ClaimRange(self.opts, after, up_to, a, b)
                for a, b in split_range(lo, hi, self.opts.num_partitions)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """Yield the claimed messages of one partition; reading twice gives the same rows."""
        assert isinstance(partition, ClaimRange)
        return _read_claimed(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark processed everything up to ``end``: delete those messages."""
        seq = self._seq(end)
        self._retry("commit", lambda: self._ack(seq))

    def stop(self) -> None:
        """Give up the consumer's session lock and close the connection.

        The lock is given up with spark_consumer_close before the connection closes: the server
        ends a closed session a moment later, and a query started at once (a restart) would find
        the consumer still held (PQ005) meanwhile.
        """
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                _scalar(conn, _sql.CONSUMER_CLOSE, self._key())
            except PgQueueError as exc:  # a lost connection: its session ends, which lets go too
                logger.debug("pgqueue: closing consumer %r failed (%s); closing its connection", self.opts.consumer,
                             exc)
            finally:
                conn.close()


def _read_claimed(p: ClaimRange) -> Iterator[tuple[Any, ...]]:
    """The partition's claimed messages, by claim then id; after a lost connection the read goes on
    from the row after the last one yielded, on a new connection.

    Claimed messages stay as they are until Spark commits the micro-batch (no one else takes or
    changes them), so the rows read after the loss are those the lost read would have sent: the
    task yields every row of the partition once, as without the loss (Spark never sees it).
    """
    opts = p.opts
    retry = _Reconnect(opts, f"read of claims {p.after_seq + 1}..{p.up_to_seq} of consumer {opts.consumer!r} "
                             f"on queue {opts.queue!r} (ids {p.min_id}..{p.max_id})")
    last: tuple[int, int] | None = None  # (claim_seq, id) of the last row yielded
    ordered = True  # the rows came by (claim_seq, id), so "after last" is all that is left
    params: dict[str, object] = {"queue": opts.queue, "consumer": opts.consumer, "after_seq": p.after_seq,
                                 "up_to_seq": p.up_to_seq, "min_id": p.min_id, "max_id": p.max_id}
    while True:
        try:
            with _connect(opts.dsn, autocommit=False) as conn, translating():
                with conn.cursor(name="pgqueue_spark_claimed") as cur:
                    cur.itersize = opts.fetch_size
                    if last is None:
                        cur.execute(_sql.CLAIMED, params)
                    else:
                        cur.execute(_sql.CLAIMED_AFTER, {**params, "after_seq": last[0] - 1,
                                                         "last_seq": last[0], "last_id": last[1]})
                    fresh = True
                    for mid, seq, content, ctype, attempts, dequeue_at, created_at, state, last_error in cur:
                        if fresh:  # (a row, not just a connection: a link that breaks before any is no progress)
                            fresh = False
                            retry.worked()
                        key = (int(seq), int(mid))
                        if last is not None and key <= last:
                            ordered = False
                        last = key if last is None else max(last, key)
                        yield _message_row(opts, mid, "claimed", content, ctype, attempts, dequeue_at,
                                           created_at, None, last_error, None, state, seq)
            retry.worked()
            return
        except Exception as exc:
            if not (ordered and _lost(exc)):
                raise
            retry.failed(exc)


# ---------------------------------------------------------------------------------------
# The data source
# ---------------------------------------------------------------------------------------


def _check_read_schema(schema: StructType, opts: Options) -> None:
    """Refuse a schema given with ``.schema(...)`` that is not the source's own.

    Spark hands a user's schema to the reader instead of asking :meth:`PgQueueDataSource.schema`;
    rows of the fixed schema would then fail every task with DATA_SOURCE_RETURN_SCHEMA_MISMATCH,
    a stream's only after it claimed its first micro-batch. The Kafka source refuses one too.
    """
    fixed = schema_for(opts.payload_type)
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in fixed.fields]:
        raise InvalidArgument(
            f"the pgqueue source has a fixed schema ({fixed.simpleString()}), not {schema.simpleString()}: "
            "drop .schema(...) and select() the columns you need (option payloadType sets the payload "
            "column's type: binary, or string for string and json)"
        )


class PgQueueDataSource(DataSource):
    """The ``pgqueue`` format: ``df.write``, ``spark.read`` and ``spark.readStream``."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("pgqueue")``."""
        return "pgqueue"

    def schema(self) -> StructType:
        """The rows of reads (see :func:`schema_for`); fixed by the options, no database access.

        Spark asks it of batch and streaming reads alike (never of writes), so it takes the options
        of either; :meth:`reader` and :meth:`streamReader` then refuse those of the other.
        """
        return schema_for(parse(self.options, "spark.read", "spark.readStream").payload_type)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A snapshot reader; with option ``filterPushdown`` one that takes filters on ``id``."""
        opts = parse(self.options, "spark.read")
        _check_read_schema(schema, opts)
        return PgQueuePushdownReader(opts) if opts.filter_pushdown else PgQueueBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A claiming stream reader."""
        opts = parse(self.options, "spark.readStream")
        _check_read_schema(schema, opts)
        return PgQueueStreamReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> PgQueueWriter:
        """A writer, after checking the options, the DataFrame's schema and that the queue exists."""
        if overwrite:
            raise InvalidArgument(OVERWRITE_REFUSED.format(how='.mode("append")'))
        opts, plan = self._write_setup(schema, "df.write")
        return PgQueueWriter(opts, plan)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        """A stream writer (exactly once per micro-batch), after the same checks as :meth:`writer`."""
        if overwrite:
            raise InvalidArgument(OVERWRITE_REFUSED.format(how='.outputMode("append")'))
        mode = _get_option(self.options, "commitMode")
        if mode and mode.strip().lower() != "job":
            raise InvalidArgument(f"option commitMode={mode!r} does not apply to writeStream: each "
                                  "micro-batch is published once, in one transaction (as commitMode=job)")
        opts, plan = self._write_setup(schema, "df.writeStream")
        return PgQueueStreamWriter(opts, plan)

    def _write_setup(self, schema: StructType, entry: Entry) -> tuple[Options, WritePlan]:
        opts = parse(self.options, entry)
        plan = write_plan(opts, schema)
        with _connect(opts.dsn, autocommit=True) as conn:
            _scalar(conn, _sql.CHECK_QUEUE, {"queue": opts.queue})
        return opts, plan
