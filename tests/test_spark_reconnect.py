"""Lost connections in the pgqueue Spark data source (option reconnectTimeout): the stream
reader's driver calls, the reads of its micro-batches, the snapshot read and the stream writer's
publication reconnect and go on, delivering every message exactly as without the loss; after
reconnectTimeout seconds they fail with a clear error. The classes are called as Spark's workers
call them (no JVM), the connections are cut by pg_terminate_backend or by a TCP relay that drops
the server's answer to a chosen statement (the statement committed, its reply lost); the last
test runs a real streaming query whose driver session is terminated twice.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg.conninfo import make_conninfo
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

import pgqueue.spark
from conftest import Relay, Server
from pgqueue.errors import ConnectionFailed, ConsumerInUse
from pgqueue.spark import source
from pgqueue.spark.source import (
    IdRange,
    PgQueueDataSource,
    PgQueueStreamReader,
    PgQueueStreamWriter,
    stream_publish_key,
)
import spark_helpers
from spark_helpers import build_session, fill, one, read_batch, require_spark, role_fixtures, spark_environment

Conn = psycopg.Connection[Any]

role, dsn, owner_dsn, conn = role_fixtures("reconnect")


def stream_reader(dsn: str, **options: str) -> PgQueueStreamReader:
    reader: PgQueueStreamReader = spark_helpers.stream_reader(dsn, **{"reconnectTimeout": "30", **options})
    return reader


def terminate(conn: Conn, pid: int) -> None:
    """End a backend as an administrator (or a failover) does, and wait until it is gone."""
    assert one(conn, "SELECT pg_terminate_backend(%s)", (pid,))
    deadline = time.monotonic() + 10
    while one(conn, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)):
        assert time.monotonic() < deadline, f"backend {pid} did not end"
        time.sleep(0.02)


def driver_pid(reader: PgQueueStreamReader) -> int:
    assert reader._conn is not None and not reader._conn.closed
    return int(reader._conn.info.backend_pid)


def holder(conn: Conn) -> tuple[bool, int | None]:
    """(whether a session holds consumer etl, the pid recorded for it)."""
    row = conn.execute("SELECT c.active, (SELECT k.holder_pid FROM pgqueue.spark_consumer k WHERE k.name = c.consumer) "
                       "FROM pgqueue.spark_consumers('q') c WHERE c.consumer = 'etl'").fetchone()
    assert row is not None
    return bool(row[0]), row[1]


class Cutter(Relay):
    """A TCP relay that, once armed with a trigger, cuts the connection that sends a statement
    holding the trigger when the server's answer to it passes: the statement ran (and, in
    autocommit, committed), its answer is lost."""

    def __init__(self, server: Server) -> None:
        self.trigger: bytes | None = None
        self.times = 0  # how many statements to cut
        self.cut = 0
        self.down = False  # cut every connection at its first bytes: the server is unreachable
        self._pending = False
        self._lock = threading.Lock()
        super().__init__(server)

    def arm(self, trigger: bytes, times: int = 1) -> None:
        with self._lock:
            self.trigger, self.times, self._pending = trigger, times, False

    def passing(self, data: bytes, answers: bool) -> None:
        if self.down:
            raise OSError("the server is down (the test says)")
        with self._lock:
            if self.trigger is None or self.times <= 0:
                return
            if not answers and self.trigger in data:
                self._pending = True
            elif answers and self._pending:
                self._pending = False
                self.times -= 1
                self.cut += 1
                raise OSError("cut by the test")  # the relay shuts both sockets: the answer is lost


@pytest.fixture
def cutter(pg_server: Server) -> Iterator[Cutter]:
    relay = Cutter(pg_server)
    try:
        yield relay
    finally:
        relay.close()


def via(dsn: str, relay: Relay) -> str:
    return make_conninfo(dsn, host="127.0.0.1", port=relay.port)


# ---------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------


def test_driver_calls_reconnect_and_reopen_the_consumer(dsn: str, conn: Conn,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """The stream's session is terminated between every two driver calls: each call reconnects,
    holds the consumer again on its new session (one warning, one 'works again' per outage) and
    the batches are those of an undisturbed run; before, every such call failed the query."""
    caplog.set_level(logging.INFO, logger="pgqueue.spark")
    ids = fill(conn, "q", 9)
    reader = stream_reader(dsn)
    try:
        start = reader.initialOffset()
        terminate(conn, driver_pid(reader))
        end = reader.latestOffset(start, ReadMaxRows(3))
        assert end == {"queue": "q", "consumer": "etl", "seq": 1, "origin": 0}
        terminate(conn, driver_pid(reader))
        assert read_batch(reader, start, end) == ids[:3]
        active, pid = holder(conn)
        assert active and pid == driver_pid(reader), "the consumer is held by the new session"
        terminate(conn, driver_pid(reader))
        end2 = reader.latestOffset(end, ReadMaxRows(3))  # acknowledges batch 0, claims 3 more
        assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE id = ANY (%s)", (ids[:3],)) == 0
        assert read_batch(reader, end, end2) == ids[3:6]
        terminate(conn, driver_pid(reader))
        reader.commit(end2)
        assert one(conn, "SELECT count(*) FROM pgqueue.message") == 3
        terminate(conn, driver_pid(reader))
        reader.prepareForTriggerAvailableNow()
        end3 = reader.latestOffset(end2, ReadAllAvailable())
        assert read_batch(reader, end2, end3) == ids[6:]
        reader.commit(end3)
        assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    finally:
        reader.stop()
    assert holder(conn) == (False, None), "stop() gives the consumer up at once (spark_consumer_close)"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    again = [r for r in caplog.records if r.levelno == logging.INFO and "works again" in r.getMessage()]
    assert len(warnings) == 5 and len(again) == 5, [r.getMessage() for r in caplog.records]
    assert "database connection lost" in warnings[0].getMessage()


def read_the_rest_once(reader: PgQueueStreamReader, end: dict[str, Any], delivered: list[int], ids: list[int],
                       conn: Conn) -> None:
    """Read the micro-batches after ``end`` until none is left and commit: with ``delivered``,
    every message of ``ids`` once, and the queue empty."""
    rest: list[int] = []
    while True:
        nxt = reader.latestOffset(end, ReadMaxRows(100))
        if nxt == end:
            break
        rest += read_batch(reader, end, nxt)
        end = nxt
    reader.commit(end)
    assert sorted(delivered + rest) == ids and len(delivered + rest) == len(ids)
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0


@pytest.mark.parametrize("lost", [1, 2])
def test_a_claim_whose_answer_is_lost_is_handed_out_once(dsn: str, conn: Conn, cutter: Cutter,
                                                         monkeypatch: pytest.MonkeyPatch, lost: int) -> None:
    """The connection breaks after spark_claim committed, before its answer arrived (the first
    claim of a latestOffset, or the second of three): the retried latestOffset finds the open
    claims and hands them out as its offset; the next one claims the rest. Every message is
    delivered once, none stays claimed."""
    monkeypatch.setattr(source, "CLAIM_CHUNK", 4)
    ids = fill(conn, "q", 20)
    reader = stream_reader(via(dsn, cutter))
    real = source._scalar
    claims = 0

    def arming(conn_: Any, query: Any, params: dict[str, object]) -> Any:
        nonlocal claims
        if query is source._sql.CLAIM:
            claims += 1
            if claims == lost:
                cutter.arm(b"spark_claim(")
        return real(conn_, query, params)

    try:
        start = reader.initialOffset()
        monkeypatch.setattr(source, "_scalar", arming)
        end = reader.latestOffset(start, ReadMaxRows(12))
        monkeypatch.setattr(source, "_scalar", real)
        assert cutter.cut == 1
        # the lost claim is in the batch, and nothing was claimed after it
        assert end["seq"] == lost
        delivered = read_batch(reader, start, end)
        assert delivered == ids[:4 * lost]
        read_the_rest_once(reader, end, delivered, ids, conn)
    finally:
        reader.stop()


@pytest.mark.parametrize("refused", [1, 2])
def test_a_claim_refused_as_a_conflict_is_run_again(dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch,
                                                    refused: int) -> None:
    """Under a REPEATABLE READ or SERIALIZABLE default a spark_claim that meets a consumer's
    acknowledgement is refused with 40001 (rolled back whole), and the streaming query failed in
    latestOffset (a review: 219 of 510 claims beside 6 lease consumers). The driver call runs
    again on the same session, as the workers do: here the first claim of a latestOffset is
    refused twice (40001, then 40P01) or the second once, and every message is delivered once."""
    from pgqueue.errors import DeadlockDetected, SerializationFailure

    monkeypatch.setattr(source, "CLAIM_CHUNK", 4)
    ids = fill(conn, "q", 20)
    reader = stream_reader(dsn)
    real = source._scalar
    claims = 0
    raised: list[str] = []
    # the first claim refused twice (its run again too, with 40P01), or the second once
    refusals: dict[int, type[Exception]] = ({1: SerializationFailure, 2: DeadlockDetected} if refused == 1
                                            else {2: SerializationFailure})

    def refusing(conn_: Any, query: Any, params: dict[str, object]) -> Any:
        nonlocal claims
        if query is source._sql.CLAIM:
            claims += 1
            if claims in refusals:  # the statement rolled back: nothing claimed
                kind = refusals[claims]
                raised.append(kind.__name__)
                raise kind("conflict (the test says)", sqlstate="40001" if kind is SerializationFailure else "40P01")
        return real(conn_, query, params)

    try:
        start = reader.initialOffset()
        pid = driver_pid(reader)
        monkeypatch.setattr(source, "_scalar", refusing)
        end = reader.latestOffset(start, ReadMaxRows(12))
        monkeypatch.setattr(source, "_scalar", real)
        assert raised == [kind.__name__ for kind in refusals.values()]
        assert driver_pid(reader) == pid, "the same session: a conflict is not a lost connection"
        delivered = read_batch(reader, start, end)
        # a first claim refused: the run again claims all 12; a second: the first claim, open,
        # is handed out as the offset (as after a lost answer)
        assert delivered == (ids[:12] if refused == 1 else ids[:4])
        read_the_rest_once(reader, end, delivered, ids, conn)
    finally:
        reader.stop()


def test_an_ack_whose_answer_is_lost_is_not_repeated_harmfully(dsn: str, conn: Conn, cutter: Cutter) -> None:
    ids = fill(conn, "q", 6)
    reader = stream_reader(via(dsn, cutter))
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(3))
        assert read_batch(reader, start, end) == ids[:3]
        cutter.arm(b"spark_ack(")
        reader.commit(end)
        assert cutter.cut == 1
        assert one(conn, "SELECT count(*) FROM pgqueue.message") == 3
        cutter.arm(b"spark_ack(")
        end2 = reader.latestOffset(end, ReadMaxRows(3))
        assert read_batch(reader, end, end2) == ids[3:]
    finally:
        reader.stop()


def test_another_query_that_took_the_consumer_during_the_outage_fails_the_query(dsn: str, conn: Conn) -> None:
    fill(conn, "q", 3)
    reader = stream_reader(dsn)
    other = psycopg.connect(dsn, autocommit=True)
    try:
        start = reader.initialOffset()
        terminate(conn, driver_pid(reader))
        other.execute("SELECT pgqueue.spark_consumer_open('q', 'etl')")
        t0 = time.monotonic()
        with pytest.raises(ConsumerInUse, match="in use by another session") as exc:
            reader.latestOffset(start, ReadMaxRows(3))
        # no waiting (reconnectTimeout is 30 s): the lost session is gone (a loaded machine: seconds)
        assert time.monotonic() - t0 < 15, "no waiting: the lost session is gone"
        assert "another session opened the consumer" in "\n".join(getattr(exc.value, "__notes__", []))
    finally:
        other.close()
        reader.stop()


def test_the_lost_session_still_holding_the_consumer_is_waited_for(dsn: str, conn: Conn,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A server that has not noticed the lost connection yet keeps its session, which holds the
    consumer: the reader waits for it to end (here a stand-in session, ended after a second)."""
    caplog.set_level(logging.DEBUG, logger="pgqueue.spark")
    fill(conn, "q", 3)
    reader = stream_reader(dsn)
    lingering = psycopg.connect(dsn, autocommit=True)
    try:
        start = reader.initialOffset()
        terminate(conn, driver_pid(reader))
        lingering.execute("SELECT pgqueue.spark_consumer_open('q', 'etl')")
        reader._pid = lingering.info.backend_pid  # as if it were the reader's lost session
        threading.Timer(1.0, lingering.close).start()
        t0 = time.monotonic()
        end = reader.latestOffset(start, ReadMaxRows(3))
        assert time.monotonic() - t0 >= 0.9
        assert end["seq"] == 1 and holder(conn) == (True, driver_pid(reader))
        assert any("still held by this query's lost session" in r.getMessage() for r in caplog.records)
    finally:
        lingering.close()
        reader.stop()


def test_reconnecting_is_bounded_and_zero_fails_at_once(dsn: str, conn: Conn, cutter: Cutter) -> None:
    fill(conn, "q", 3)
    reader = stream_reader(via(dsn, cutter), reconnectTimeout="2")
    try:
        start = reader.initialOffset()
        cutter.down = True  # no new connection gets through
        terminate(conn, driver_pid(reader))
        t0 = time.monotonic()
        with pytest.raises(ConnectionFailed, match=r"could not be restored within reconnectTimeout=2 s "
                                                   r"\(\d+ attempt\(s\)\); last error"):
            reader.latestOffset(start, ReadMaxRows(3))
        assert 1.9 <= time.monotonic() - t0 < 10
    finally:
        reader.stop()
    # nothing was claimed by the failed call: the claims are where they were
    assert one(conn, "SELECT next_seq FROM pgqueue.spark_consumers('q')") == 1
    # reconnectTimeout=0: the old behaviour, the first loss fails the call
    now = stream_reader(dsn, reconnectTimeout="0")
    try:
        start = now.initialOffset()
        terminate(conn, driver_pid(now))
        with pytest.raises(ConnectionFailed, match="terminating connection"):
            now.latestOffset(start, ReadMaxRows(3))
    finally:
        now.stop()
    # a query that cannot connect at its start fails at once, whatever reconnectTimeout says (30 s;
    # a loaded machine: seconds)
    t0 = time.monotonic()
    with pytest.raises(ConnectionFailed):
        stream_reader(via(dsn, cutter)).initialOffset()
    assert time.monotonic() - t0 < 15


# ---------------------------------------------------------------------------------------
# The executors
# ---------------------------------------------------------------------------------------


def reading_backend(conn: Conn, role: Any, cursor: str = "pgqueue_spark_claimed") -> int:
    """The pid of the executor's read: the session of the role inside a transaction, fetching
    from ``cursor``."""
    deadline = time.monotonic() + 10
    while True:
        row = conn.execute("SELECT pid FROM pg_stat_activity WHERE usename = %s AND state LIKE 'idle in transaction%%' "
                           "AND query LIKE %s", (role.name, f"%{cursor}%")).fetchone()
        if row is not None:
            return int(row[0])
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_micro_batch_read_resumes_after_the_row_it_got_to(dsn: str, conn: Conn, role: Any) -> None:
    """The read of a partition loses its connection twice (after 3 rows, then after 11): it goes
    on from the next row on a new connection; the partition yields every row once, in order, as
    an undisturbed read does."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    ids = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('q', %s)", ([b"x"] * 30,))]
    reader = stream_reader(dsn, fetchSize="2")
    try:
        start = reader.initialOffset()
        first = reader.latestOffset(start, ReadMaxRows(10))
        # a micro-batch of two claims (as after a restart that found an open claim), the
        # second made by hand on the reader's session (which holds the consumer: another
        # session's claim is PQ005)
        assert reader._conn is not None
        end = {**first, "seq": int(one(reader._conn, "SELECT pgqueue.spark_claim('q', 'etl', 20)"))}
        (part,) = reader.partitions(start, end)
        undisturbed = [row[0] for row in pickle.loads(pickle.dumps(reader)).read(part)]
        assert undisturbed == ids
        deadline = time.monotonic() + 10
        while one(conn, "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND state LIKE 'idle in transaction%%'",
                  (role.name,)):  # the undisturbed read's session is gone
            assert time.monotonic() < deadline
            time.sleep(0.02)
        rows = reader.read(pickle.loads(pickle.dumps(part)))
        got = [next(rows)[0] for _ in range(3)]
        terminate(conn, reading_backend(conn, role))
        got += [next(rows)[0] for _ in range(8)]  # 4..11: across the claims' boundary
        terminate(conn, reading_backend(conn, role))
        got += [row[0] for row in rows]
        assert got == undisturbed
        claim_seqs = [row[13] for row in reader.read(part)]
        assert claim_seqs == [1] * 10 + [2] * 20
    finally:
        reader.stop()


def test_a_snapshot_read_retries_until_its_first_row(dsn: str, conn: Conn, cutter: Cutter) -> None:
    ids = fill(conn, "q", 5)
    ds = PgQueueDataSource({"dsn": via(dsn, cutter), "queue": "q", "reconnectTimeout": "30"})
    reader = ds.reader(ds.schema())
    (part,) = reader.partitions()
    assert isinstance(part, IdRange)
    cutter.arm(b"pgqueue_spark_snapshot", times=2)  # the DECLARE's answer, twice
    assert [row[0] for row in reader.read(part)] == ids
    assert cutter.cut == 2


def test_a_snapshot_read_that_lost_its_connection_after_a_row_fails_its_task(dsn: str, conn: Conn,
                                                                            role: Any) -> None:
    """After its first row a snapshot partition does not start again on a new connection (it
    would yield its first rows twice, as part of one task): the task fails, and Spark's retry of
    it is a whole new read."""
    ids = fill(conn, "q", 10)
    ds = PgQueueDataSource({"dsn": dsn, "queue": "q", "reconnectTimeout": "30", "fetchSize": "2"})
    reader = ds.reader(ds.schema())
    (part,) = reader.partitions()
    rows = reader.read(part)
    got = [next(rows)[0] for _ in range(3)]
    terminate(conn, reading_backend(conn, role, "pgqueue_spark_snapshot"))
    with pytest.raises(ConnectionFailed):
        got += [row[0] for row in rows]
    assert got == ids[:3]


# ---------------------------------------------------------------------------------------
# The stream writer's publication
# ---------------------------------------------------------------------------------------


def test_a_stream_publication_whose_answer_is_lost_is_published_once(dsn: str, conn: Conn, cutter: Cutter,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    conn.execute("SELECT pgqueue.queue_create('out')")
    ds = PgQueueDataSource({"dsn": via(dsn, cutter), "queue": "out", "payloadType": "string",
                            "reconnectTimeout": "30"})
    from pyspark.sql.types import StringType, StructField, StructType

    writer = ds.streamWriter(StructType([StructField("payload", StringType())]), False)
    assert isinstance(writer, PgQueueStreamWriter)
    monkeypatch.setattr(source, "_stream_task_identity", lambda: ("query-1", 0, 0, 7))
    batch = pa.RecordBatch.from_pydict({"payload": [f"p{i}" for i in range(5)]})
    message = writer.write(iter([batch]))
    cutter.arm(b"spark_publish(")
    writer.commit([message], 0)
    assert cutter.cut == 1
    assert [r[0] for r in conn.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message ORDER BY id")] == [
        f"p{i}" for i in range(5)]
    assert [r[0] for r in conn.execute("SELECT publish_key FROM pgqueue.spark_publish_log")] == [
        stream_publish_key("query-1", 0)]
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    # the lost attempt committed while the retry ran: the retry finds the staging rows gone (PQ007)
    # and the key published, which is a publication, not an error
    real = writer._publish
    calls = 0

    def racing(query_id: str, batch_id: int, done: list[Any]) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            real(query_id, batch_id, done)  # commits ...
            raise ConnectionFailed("server closed the connection unexpectedly")  # ... its answer is lost
        raise source.StagedRowsMissing("partition 0 attempt 7 of write ... staged 0 row(s), expected 5",
                                       sqlstate="PQ007")

    monkeypatch.setattr(source, "_stream_task_identity", lambda: ("query-1", 1, 0, 7))
    message = writer.write(iter([batch]))
    monkeypatch.setattr(writer, "_publish", racing)
    writer.commit([message], 1)
    assert calls == 2 and one(conn, "SELECT count(*) FROM pgqueue.message") == 10
    # ... but a PQ007 with the key not published is an error still
    def lost_then_missing(query_id: str, batch_id: int, done: list[Any]) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionFailed("server closed the connection unexpectedly")
        raise source.StagedRowsMissing("staged 0 row(s), expected 5", sqlstate="PQ007")

    calls = 0
    monkeypatch.setattr(source, "_stream_task_identity", lambda: ("query-1", 2, 0, 7))
    message = writer.write(iter([batch]))
    monkeypatch.setattr(writer, "_publish", lost_then_missing)
    with pytest.raises(source.StagedRowsMissing):
        writer.commit([message], 2)
    assert calls == 2


# ---------------------------------------------------------------------------------------
# A streaming query in Spark
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    require_spark()
    spark_environment()
    from pyspark.sql import SparkSession

    ours = SparkSession.getActiveSession() is None  # (test_spark.py's session, if it runs first, stays its)
    session = build_session(tmp_path_factory.mktemp("spark"))
    from spark_flaky import FlakyReadSource

    pgqueue.spark.register(session)
    session.dataSource.register(FlakyReadSource)
    try:
        yield session
    finally:
        if ours:
            session.stop()


@pytest.mark.spark
@pytest.mark.parametrize("lose", ["driver", "executor", "both"])
def test_a_streaming_query_rides_out_terminated_sessions(spark: Any, dsn: str, conn: Conn, tmp_path: Path,
                                                         lose: str) -> None:
    """A streaming query (availableNow, micro-batches of 1000) into an id-keyed sink. "driver":
    while micro-batches 1 and 3 are in the sink, the stream's driver session (the consumer's
    holder) is terminated. "executor": the read of micro-batch 0 loses its session twice (after
    its 3rd and 6th rows; twice is one more than Spark's local[2,2] retries a task). The query
    goes on and ends by itself; every message is delivered exactly once (no micro-batch runs
    twice) and acknowledged. Before, the query failed at the first loss of the driver and at the
    second of a partition read."""
    from spark_flaky import FLAKY_READ

    n = 5000
    conn.execute("CREATE TABLE flaky_plan (what text)")
    conn.execute("CREATE TABLE flaky_kills (n bigint)")
    if lose in ("executor", "both"):
        conn.execute("INSERT INTO flaky_plan VALUES ('read@3'), ('read@6')")
    conn.execute("SELECT pgqueue.queue_create('q')")
    ids = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('q', %s)",
                                      ([f"m{i}".encode() for i in range(n)],)).fetchall()]
    conn.execute("CREATE TABLE sink (id bigint PRIMARY KEY, batch_id bigint NOT NULL)")
    conn.execute("CREATE TABLE deliveries (id bigint NOT NULL, batch_id bigint NOT NULL)")
    owner = conn.info.dsn
    terminated = []

    def handle(df: Any, batch_id: int) -> None:
        rows = [(r["id"], batch_id) for r in df.select("id").collect()]
        with psycopg.connect(dsn) as c, c.cursor() as cur:
            cur.executemany("INSERT INTO sink VALUES (%s, %s) ON CONFLICT (id) DO NOTHING", rows)
            cur.executemany("INSERT INTO deliveries VALUES (%s, %s)", rows)
        if batch_id in (1, 3) and lose in ("driver", "both"):
            with psycopg.connect(owner, autocommit=True) as admin:
                (pid,) = admin.execute("SELECT holder_pid FROM pgqueue.spark_consumer WHERE name = 'etl'").fetchone()
                terminate(admin, pid)
                terminated.append(pid)

    query = (spark.readStream.format(FLAKY_READ).option("dsn", dsn).option("consumer", "etl")
             .option("maxMessagesPerBatch", "1000").option("fetchSize", "2").option("reconnectTimeout", "60")
             .load("q").writeStream.foreachBatch(handle).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "availableNow must stop by itself"
    assert query.exception() is None
    assert [r[0] for r in conn.execute("SELECT id FROM sink ORDER BY id")] == ids
    assert one(conn, "SELECT count(*) FROM deliveries") == n, "no message delivered twice"
    assert [r[0] for r in conn.execute("SELECT DISTINCT batch_id FROM deliveries ORDER BY 1")] == [0, 1, 2, 3, 4]
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0, "and every one acknowledged"
    kills = [r[0] for r in conn.execute("SELECT n FROM flaky_kills")]
    assert kills == ([1, 1] if lose != "driver" else []), "each planned loss ended a read"
    assert len(terminated) == (0 if lose == "executor" else 2)
