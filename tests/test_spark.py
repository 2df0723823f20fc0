"""pgqueue.spark in Spark local mode (local[2,2]: two threads, a failed task is tried again)
against the test server: enqueue a DataFrame (task and job mode, with a task that fails after
its write committed), read snapshots, and drain a queue with Structured Streaming into an
id-keyed sink, across a failed micro-batch and a restart from the checkpoint.

These tests fail (never skip) when pyspark or Java is missing."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgqueue import Queue, codec
from helpers import database_in
from spark_helpers import build_session, one, require_spark, role_fixtures, spark_environment

pytestmark = pytest.mark.spark

Conn = psycopg.Connection[Any]
N = 10_000


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    require_spark()
    spark_environment()
    session = build_session(tmp_path_factory.mktemp("spark"))
    import pgqueue.spark
    from spark_flaky import FlakySource, FlakyStreamSource

    pgqueue.spark.register(session)
    session.dataSource.register(FlakySource)
    session.dataSource.register(FlakyStreamSource)
    try:
        yield session
    finally:
        session.stop()


role, dsn, owner_dsn, conn = role_fixtures("jvm")


def queue_payloads(conn: Conn, queue: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT convert_from(m.content, 'UTF8') FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
        "WHERE q.name = %s ORDER BY m.id", (queue,)).fetchall()]


def work_items(spark: Any, n: int = N, partitions: int = 4) -> Any:
    """n JSON payloads {"i": 0..n-1} in `partitions` partitions of n/partitions rows each."""
    return spark.range(0, n, 1, partitions).selectExpr("to_json(named_struct('i', id)) AS payload")


def write(df: Any, dsn: str, queue: str, fmt: str = "pgqueue", **options: str) -> None:
    w = df.write.format(fmt).option("dsn", dsn).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save(queue)


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------


def test_write_task_mode(spark: Any, dsn: str, conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('jobs')")
    write(work_items(spark), dsn, "jobs", payloadType="json")
    got = queue_payloads(conn, "jobs")
    assert sorted(got, key=lambda p: int(p[5:-1])) == [f'{{"i":{i}}}' for i in range(N)]
    assert one(conn, "SELECT count(DISTINCT content_type) FROM pgqueue.message") == 1
    with Queue(dsn, "jobs") as queue:
        (msg,) = queue.dequeue(1, lock_ms=0)
        assert isinstance(msg.payload, dict) and set(msg.payload) == {"i"}


def test_write_job_mode_exactly_once_despite_a_failed_task(spark: Any, dsn: str, conn: Conn) -> None:
    from spark_flaky import FLAKY

    conn.execute("SELECT pgqueue.queue_create('jobs')")
    write(work_items(spark), dsn, "jobs", fmt=FLAKY, payloadType="json", commitMode="job")
    assert conn.execute("SELECT partition, attempt, rows FROM flaky_log").fetchall() == [(0, 0, N // 4)], \
        "premise: the first attempt of partition 0 staged its rows, committed, then failed"
    got = queue_payloads(conn, "jobs")
    assert len(got) == N and len(set(got)) == N
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_publish_log") == 0, "the publication is forgotten"


def test_write_task_mode_duplicates_the_retried_partition(spark: Any, dsn: str, conn: Conn) -> None:
    """What task mode gives when a task fails after its transaction committed: that partition
    twice (at-least-once per partition), every other row once."""
    from spark_flaky import FLAKY

    conn.execute("SELECT pgqueue.queue_create('jobs')")
    write(work_items(spark), dsn, "jobs", fmt=FLAKY, payloadType="json")
    ((_, _, rows),) = conn.execute("SELECT partition, attempt, rows FROM flaky_log").fetchall()
    got = queue_payloads(conn, "jobs")
    assert len(got) == N + rows
    assert len(set(got)) == N
    twice = one(conn, "SELECT count(*) FROM (SELECT content FROM pgqueue.message GROUP BY content "
                      "HAVING count(*) = 2) d")
    assert twice == rows == N // 4


def test_keyed_rows_survive_a_retried_task_once(spark: Any, dsn: str, conn: Conn) -> None:
    """Issue 14: with keyColumn, the partition that task mode writes twice (its task failed after
    the commit) adds nothing: each key's message is still live, so the retry maps onto it."""
    from spark_flaky import FLAKY

    conn.execute("SELECT pgqueue.queue_create('jobs')")
    write(work_items(spark).selectExpr("payload", "CAST(get_json_object(payload, '$.i') AS BIGINT) AS k"),
          dsn, "jobs", fmt=FLAKY, payloadType="json", keyColumn="k")
    ((_, _, rows),) = conn.execute("SELECT partition, attempt, rows FROM flaky_log").fetchall()
    assert rows == N // 4, "premise: partition 0 was written, then its task failed and ran again"
    got = queue_payloads(conn, "jobs")
    assert len(got) == N and len(set(got)) == N, "each row once"
    assert one(conn, "SELECT count(DISTINCT idem_key) FROM pgqueue.message") == N


def test_group_column_fills_a_grouped_queue_in_order(spark: Any, dsn: str, conn: Conn, tmp_path: Path) -> None:
    """Job mode and writeStream into a queue with message groups (limit 1): each group's messages
    come out one at a time, in the order of the write (a group's rows in one partition, sorted)."""
    conn.execute("SELECT pgqueue.queue_create('grp', p_group_concurrency => 1)")
    df = (spark.range(0, 400, 1, 4).selectExpr("CAST(id AS STRING) AS payload", "CAST(id % 8 AS STRING) AS tenant")
          .repartition(2, "tenant").sortWithinPartitions("tenant", "payload"))
    write(df, dsn, "grp", commitMode="job", groupColumn="tenant")
    conn.execute("SELECT pgqueue.queue_create('in')")
    conn.execute("SELECT pgqueue.message_create_batch('in', %s, p_content_type => 'text/plain')",
                 ([str(400 + i).encode() for i in range(400)],))
    query = (spark.readStream.format("pgqueue").option("dsn", dsn).option("payloadType", "string").load("in")
             .selectExpr("payload", "CAST(CAST(payload AS INT) % 8 AS STRING) AS tenant")
             .writeStream.format("pgqueue").option("dsn", dsn).option("groupColumn", "tenant")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start("grp"))
    assert query.awaitTermination(120) and query.exception() is None
    assert one(conn, "SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
                     "WHERE q.name = 'grp' AND m.group_key IS NOT NULL") == 800
    seen: dict[str, list[int]] = {}
    with Queue(dsn, "grp") as queue:
        while batch := queue.dequeue(100, lock_ms=60_000):
            tenants = [m.payload for m in batch]
            assert len({int(t) % 8 for t in tenants}) == len(tenants), "one message per group in flight"
            for m in batch:
                seen.setdefault(str(int(m.payload) % 8), []).append(int(m.payload))
                queue.complete(m)
    assert sorted(seen) == [str(t) for t in range(8)]
    for tenant, values in seen.items():
        assert len(values) == 100, tenant
        assert values[:50] == sorted(values[:50], key=str), "the batch write's order (payloads sorted as text)"
        assert all(v < 400 for v in values[:50]) and all(v >= 400 for v in values[50:]), "then the stream's"
    with pytest.raises(Exception, match="has message groups, which Spark streams do not read yet"):
        stream(spark, dsn, "grp", tmp_path / "ck2", lambda df, batch_id: None).awaitTermination(60)


def test_bad_rows_and_columns_publish_nothing(spark: Any, dsn: str, conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('jobs')")
    # a NULL payload in one partition: the job fails with the row named, nothing is published
    df = spark.range(0, 1000, 1, 4).selectExpr("CASE WHEN id = 900 THEN NULL ELSE CAST(id AS STRING) END AS payload")
    with pytest.raises(Exception, match=r"payload column 'payload' is NULL in row 151 of partition 3"):
        write(df, dsn, "jobs", commitMode="job")
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    # task mode, one partition: its transaction rolls back
    with pytest.raises(Exception, match="is NULL"):
        write(df.coalesce(1), dsn, "jobs")
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    # a bad column type, an extra column, a missing queue: refused before any task runs
    for bad, text in [
        (spark.range(3).selectExpr("current_date() AS payload"), "payload column 'payload' has type date"),
        (spark.range(3).selectExpr("CAST(id AS STRING) AS payload", "id"), "'id' that the pgqueue sink would drop"),
        (spark.range(3).selectExpr("CAST(id AS STRING) AS body"), "no payload column 'payload'"),
        (spark.range(3).selectExpr("CAST(id AS STRING) AS payload", "current_date() AS k"),
         "key column 'k' has type date, but it must be a string or an integer"),
    ]:
        with pytest.raises(Exception, match=text):
            write(bad, dsn, "jobs", commitMode="job", **({"keyColumn": "k"} if "key column" in text else {}))
    # an empty key fails its task with the row named; job mode publishes nothing
    with pytest.raises(Exception, match=r"key column 'k' must be NULL \(none\) or 1 to 200 characters, got 0"):
        write(spark.range(0, 100, 1, 2).selectExpr("CAST(id AS STRING) AS payload",
                                                   "CASE WHEN id = 70 THEN '' ELSE CAST(id AS STRING) END AS k"),
              dsn, "jobs", commitMode="job", keyColumn="k")
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    with pytest.raises(Exception, match='queue "nope" does not exist'):
        write(spark.range(3).selectExpr("CAST(id AS STRING) AS payload"), dsn, "nope")
    with pytest.raises(Exception, match="only appends: overwrite would delete messages"):
        spark.range(3).selectExpr("CAST(id AS STRING) AS payload").write.format("pgqueue") \
            .option("dsn", dsn).mode("overwrite").save("jobs")
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0


def test_save_without_a_mode_is_refused_by_spark_before_the_source_is_asked(spark: Any, role: Any, dsn: str,
                                                                           conn: Conn) -> None:
    """Issue 17: what `.save()` without a mode gives, and why the source cannot change it. Spark's
    DataFrameWriter (saveCommand, 4.3) throws UNSUPPORTED_DATA_SOURCE_SAVE_MODE for ErrorIfExists
    and Ignore on every table that supports batch writes, a Python data source's included, before
    it asks the source for a writer; the Python API's writer(schema, overwrite) only ever learns
    append or overwrite. The spy source notes every call: none for the refused modes."""
    from spark_flaky import SPY, SpySource

    spark.dataSource.register(SpySource)
    conn.execute("CREATE TABLE spy_log (what text)")
    conn.execute(f"GRANT INSERT ON spy_log TO {role.name}")
    conn.execute("SELECT pgqueue.queue_create('jobs')")
    df = spark.range(3).selectExpr("CAST(id AS STRING) AS payload")
    for mode, shown in ((None, "ErrorIfExists"), ("errorifexists", "ErrorIfExists"), ("ignore", "Ignore")):
        w = df.write.format(SPY).option("dsn", dsn)
        if mode is not None:
            w = w.mode(mode)
        with pytest.raises(Exception) as failed:
            w.save("jobs")
        text = str(failed.value)
        assert "[UNSUPPORTED_DATA_SOURCE_SAVE_MODE]" in text, text
        assert (f'The data source "{SPY}" cannot be written in the "{shown}" mode. Please use either the '
                '"Append" or "Overwrite" mode instead.') in text, text
        assert "SQLSTATE: 0A000" in text, text
        assert "writer(" not in " ".join(r[0] for r in conn.execute("SELECT what FROM spy_log").fetchall()), \
            "Spark refused before asking the source for a writer"
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    df.write.format(SPY).option("dsn", dsn).mode("append").save("jobs")
    assert [r[0] for r in conn.execute("SELECT what FROM spy_log WHERE what LIKE 'writer%'")] == [
        "writer(overwrite=False)"], "append reaches the source"
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 3


def test_payload_types_and_schedule_columns_round_trip(spark: Any, dsn: str, conn: Conn) -> None:
    """What Spark writes, Queue.dequeue() decodes (pgqueue.codec), with due times and priorities."""
    conn.execute("SELECT pgqueue.queue_create('mixed')")
    one_row = spark.range(1)
    write(one_row.selectExpr("unhex('00726177') AS payload"), dsn, "mixed")
    write(one_row.selectExpr("'h\u00e9llo' AS payload"), dsn, "mixed")
    write(one_row.selectExpr("named_struct('n', 1, 'tags', array('a')) AS payload", "5 AS p"), dsn, "mixed",
          priorityColumn="p")
    write(one_row.selectExpr("'later' AS payload", "3600.0D AS d"), dsn, "mixed", delayColumn="d")
    with Queue(dsn, "mixed") as queue:
        got = queue.dequeue(10, lock_ms=0)
    assert [m.payload for m in got] == [{"n": 1, "tags": ["a"]}, b"\x00raw", "h\u00e9llo"]
    assert [m.content_type for m in got] == [codec.JSON, None, codec.TEXT]
    assert one(conn, "SELECT dequeue_at - pgqueue.now_ms() BETWEEN 3500000 AND 3600000 FROM pgqueue.message")


# ---------------------------------------------------------------------------------------
# Snapshot reads
# ---------------------------------------------------------------------------------------


def test_snapshot_read_counts_and_changes_nothing(spark: Any, dsn: str, conn: Conn) -> None:
    from helpers import snapshot

    conn.execute("SELECT pgqueue.queue_create('jobs', p_max_attempts => 1)")
    conn.execute("SELECT pgqueue.message_create_batch('jobs', %s)", ([f"m{i}".encode() for i in range(N)],))
    conn.execute("SELECT pgqueue.message_create('jobs', 'later', pgqueue.now_ms() + 3600000)")
    conn.execute("SELECT pgqueue.message_dequeue('jobs', 10, 600000)")  # leased
    dead = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 3, 600000)").fetchall()
    for msg_id, token in dead:
        conn.execute("SELECT pgqueue.message_fail(%s, %s, 'boom')", (msg_id, token))
    conn.execute("SELECT pgqueue.spark_claim('jobs', 'etl', 100)")
    before = snapshot(conn)
    df = (spark.read.format("pgqueue").option("dsn", dsn).option("numPartitions", 3)
          .option("includeDead", "true").option("payloadType", "string").load("jobs"))
    assert df.rdd.getNumPartitions() == 3
    counts = dict(df.groupBy("status").count().collect())
    assert counts == {"ready": N - 113, "scheduled": 1, "leased": 10, "claimed": 100, "dead": 3}
    assert dict(df.groupBy("status").count().collect()) == counts, "reading twice gives the same"
    assert df.filter("status = 'dead'").select("last_error").distinct().collect()[0][0] == "boom"
    assert df.filter("payload = 'm42'").count() == 1
    live = spark.read.format("pgqueue").option("dsn", dsn).load("jobs")
    assert live.count() == N + 1 - 3
    assert [r[0] for r in df.filter("dequeue_at > current_timestamp()").select("payload").collect()] == ["later"]
    assert df.filter("created_at > current_timestamp() - INTERVAL 1 HOUR").count() == N + 1
    first = one(conn, "SELECT min(id) FROM pgqueue.message")
    pushed = (spark.read.format("pgqueue").option("dsn", dsn).option("filterPushdown", "true")
              .option("payloadType", "string").load("jobs"))
    window = pushed.filter(f"id >= {first} AND id < {first + 100} AND status <> 'ready'")
    assert dict(window.groupBy("status").count().collect()) == {"leased": 10, "claimed": 87}
    later = pushed.filter("status IN ('scheduled', 'leased') AND dequeue_at > current_timestamp()")
    assert [r.payload for r in later.collect()] == ["later"]
    assert snapshot(conn) == before, "a snapshot read changes nothing"


# ---------------------------------------------------------------------------------------
# Streaming reads
# ---------------------------------------------------------------------------------------


def sink_table(conn: Conn) -> None:
    conn.execute("CREATE TABLE sink (id bigint PRIMARY KEY, payload text NOT NULL, batch_id bigint NOT NULL)")
    conn.execute("CREATE TABLE deliveries (id bigint NOT NULL, batch_id bigint NOT NULL)")


def to_sink(dsn: str, fail_once_at: int | None = None) -> tuple[Callable[[Any, int], None], list[tuple[int, int]]]:
    """A foreachBatch function writing into the id-keyed sink table (a replayed row is ignored),
    noting every delivery; it raises once, after writing, at batch `fail_once_at`."""
    batches: list[tuple[int, int]] = []

    def handle(df: Any, batch_id: int) -> None:
        rows = [(r["id"], r["payload"], batch_id) for r in df.select("id", "payload").collect()]
        batches.append((batch_id, len(rows)))
        with psycopg.connect(dsn) as c, c.cursor() as cur:
            cur.executemany("INSERT INTO sink VALUES (%s, %s, %s) ON CONFLICT (id) DO NOTHING", rows)
            cur.executemany("INSERT INTO deliveries VALUES (%s, %s)", [(r[0], batch_id) for r in rows])
        if batch_id == fail_once_at and sum(1 for b, _ in batches if b == batch_id) == 1:
            raise RuntimeError("injected failure of the sink after it wrote")

    return handle, batches


def stream(spark: Any, dsn: str, queue: str, checkpoint: Path, handle: Callable[[Any, int], None],
           **options: str) -> Any:
    reader = spark.readStream.format("pgqueue").option("dsn", dsn).option("payloadType", "string")
    for k, v in options.items():
        reader = reader.option(k, v)
    return (reader.load(queue).writeStream.foreachBatch(handle)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())


def test_stream_available_now_drains_once(spark: Any, dsn: str, conn: Conn, tmp_path: Path) -> None:
    conn.execute("SELECT pgqueue.queue_create('jobs')")
    ids = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('jobs', %s)",
                                      ([f"m{i}".encode() for i in range(N)],)).fetchall()]
    sink_table(conn)
    handle, batches = to_sink(dsn)
    query = stream(spark, dsn, "jobs", tmp_path / "ck", handle, consumer="etl", maxMessagesPerTrigger="3000",
                   minPartitions="2")  # the Kafka source's names
    assert query.awaitTermination(120), "availableNow must stop by itself"
    assert query.exception() is None
    assert [n for _, n in batches] == [3000, 3000, 3000, 1000]
    assert [r[0] for r in conn.execute("SELECT id FROM sink ORDER BY id").fetchall()] == ids
    assert one(conn, "SELECT count(*) FROM deliveries") == N, "every message delivered once"
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0, "and acknowledged"
    assert conn.execute("SELECT acked_seq, claims FROM pgqueue.spark_consumers('jobs')").fetchall() == [(4, 0)]
    # a second run finds nothing
    handle2, batches2 = to_sink(dsn)
    again = stream(spark, dsn, "jobs", tmp_path / "ck", handle2, consumer="etl", maxMessagesPerBatch="3000")
    assert again.awaitTermination(60)
    assert batches2 == []


def test_stream_failure_and_restart_lose_and_duplicate_nothing(spark: Any, dsn: str, conn: Conn,
                                                                tmp_path: Path) -> None:
    conn.execute("SELECT pgqueue.queue_create('jobs')")
    ids = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('jobs', %s)",
                                      ([f"m{i}".encode() for i in range(N)],)).fetchall()]
    sink_table(conn)
    ck = tmp_path / "ck"
    handle, batches = to_sink(dsn, fail_once_at=1)
    query = stream(spark, dsn, "jobs", ck, handle, consumer="etl", maxMessagesPerBatch="4000")
    with pytest.raises(Exception, match="injected failure of the sink"):
        query.awaitTermination(120)
    assert batches == [(0, 4000), (1, 4000)]
    # batch 1 is not acknowledged: its messages are still claimed, invisible to message_dequeue
    failed = [r[0] for r in conn.execute("SELECT id FROM deliveries WHERE batch_id = 1 ORDER BY id").fetchall()]
    assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE claim_id IS NOT NULL") == 4000
    assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE id = ANY (%s) AND claim_id IS NOT NULL",
               (failed,)) == 4000
    with psycopg.connect(dsn, autocommit=True) as other:
        handed = [r[0] for r in other.execute("SELECT id FROM pgqueue.message_dequeue('jobs', 10000, 60000)")]
        assert len(handed) == N - 8000 and not set(handed) & set(failed)
        for msg_id in handed:  # give them back
            other.execute("SELECT pgqueue.message_defer(%s, 1, NULL)", (msg_id,))
    # restart from the checkpoint: batch 1 is replayed with the same messages, then the rest
    handle2, batches2 = to_sink(dsn)
    query = stream(spark, dsn, "jobs", ck, handle2, consumer="etl", maxMessagesPerBatch="4000")
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert batches2 == [(1, 4000), (2, 2000)]
    replayed = [r[0] for r in conn.execute("SELECT id FROM deliveries WHERE batch_id = 1 ORDER BY id").fetchall()]
    assert replayed == sorted(failed * 2), "the replayed micro-batch holds exactly the same messages"
    assert [r[0] for r in conn.execute("SELECT id FROM sink ORDER BY id").fetchall()] == ids
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0


def test_stream_from_a_starting_position_leaves_older_messages(spark: Any, dsn: str, conn: Conn,
                                                               tmp_path: Path) -> None:
    """Issue 17: startingPosition (here a timestamp) reads only what was created since; the older
    messages stay in the queue, unclaimed, for other consumers."""
    import datetime as dt

    conn.execute("SELECT pgqueue.queue_create('jobs')")
    old = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('jobs', %s)", ([b"old"] * 100,))]
    conn.execute("UPDATE pgqueue.message SET created_at = created_at - 3600000")
    new = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('jobs', %s)", ([b"new"] * 50,))]
    sink_table(conn)
    handle, _batches = to_sink(dsn)
    when = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=30)).isoformat()
    query = stream(spark, dsn, "jobs", tmp_path / "ck", handle, startingPosition=when)
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert [r[0] for r in conn.execute("SELECT id FROM sink ORDER BY id")] == new
    assert [r[0] for r in conn.execute("SELECT id FROM pgqueue.message WHERE claim_id IS NULL ORDER BY id")] == old
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == len(old)


def test_abandoned_claims_can_be_released(spark: Any, dsn: str, conn: Conn, tmp_path: Path) -> None:
    """A query that failed and never comes back leaves its claim; release gives the messages back."""
    import pgqueue.spark

    conn.execute("SELECT pgqueue.queue_create('jobs')")
    conn.execute("SELECT pgqueue.message_create_batch('jobs', %s)", ([b"x"] * 50,))
    sink_table(conn)
    handle, _ = to_sink(dsn, fail_once_at=0)
    query = stream(spark, dsn, "jobs", tmp_path / "ck", handle, consumer="gone")
    with pytest.raises(Exception, match="injected failure"):
        query.awaitTermination(120)
    with Queue(dsn, "jobs") as queue:
        assert queue.dequeue(10, lock_ms=0) == []
        assert pgqueue.spark.release(dsn, "jobs", "gone") == 50
        assert len(queue.dequeue(100, lock_ms=0)) == 50


def test_reads_of_a_sql_ascii_database_give_texts(spark: Any, pg_server: Any, role: Any, tmp_path: Path) -> None:
    """initdb under the C locale makes SQL_ASCII databases, where psycopg returns text columns as
    bytes unless the connection asks for UTF8 (as the Python client's do): spark.read with
    payloadType string failed in decode_payload, binary read status "b'ready'", and a stream
    claimed and acknowledged rows whose texts were "b'...'"."""
    import pgqueue.spark

    texts = ["héllo wörld", "naïve €", "plain"]
    with database_in(pg_server, "SQL_ASCII") as name:
        role.grant(pg_server, name)
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as owner:
            owner.execute("SELECT pgqueue.queue_create('qa')")
            ids = [one(owner, "SELECT pgqueue.message_create('qa', %s::bytea, p_content_type => "
                       "'text/plain; charset=utf-8')", (t.encode(),)) for t in texts]
        dsn = pg_server.dsn(name, user=role.name)
        # a connection string that sets its own client_encoding keeps it; texts are still str
        for source in (dsn, f"{dsn} client_encoding=SQL_ASCII"):
            rows = (spark.read.format("pgqueue").option("dsn", source).option("payloadType", "string").load("qa")
                    .select("id", "queue", "status", "payload", "content_type").orderBy("id").collect())
            assert [tuple(r) for r in rows] == [(i, "qa", "ready", t, "text/plain; charset=utf-8")
                                                for i, t in zip(ids, texts, strict=True)]
            binary = spark.read.format("pgqueue").option("dsn", source).load("qa").orderBy("id").collect()
            assert [(r["status"], bytes(r["payload"])) for r in binary] == [("ready", t.encode()) for t in texts]
        delivered: list[tuple[Any, ...]] = []
        query = (spark.readStream.format("pgqueue").option("dsn", dsn).option("payloadType", "string")
                 .option("consumer", "etl").load("qa").select("id", "status", "payload", "content_type")
                 .writeStream.foreachBatch(lambda df, _: delivered.extend(tuple(r) for r in df.collect()))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        assert query.exception() is None
        assert sorted(delivered) == [(i, "claimed", t, "text/plain; charset=utf-8")
                                     for i, t in zip(ids, texts, strict=True)]
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as owner:
            assert one(owner, "SELECT count(*) FROM pgqueue.message") == 0, "acknowledged"
        assert pgqueue.spark.release(dsn, "qa", "etl") == 0  # its connection too
        # a text that is not UTF-8 (another client's Latin-1; SQL_ASCII takes any byte): a UTF8
        # connection is refused it by the server; a DSN that sets client_encoding SQL_ASCII reads
        # it, as an escape (README)
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as owner:
            latin1 = one(owner, r"SELECT pgqueue.message_create('qa', 'x'::bytea, NULL, E'application/x-caf\351')")
        dsn = f"{dsn} client_encoding=SQL_ASCII"
        rows = spark.read.format("pgqueue").option("dsn", dsn).load("qa").select("id", "content_type").collect()
        assert [tuple(r) for r in rows] == [(latin1, "application/x-caf\\xe9")]
        delivered.clear()
        query = (spark.readStream.format("pgqueue").option("dsn", dsn).option("consumer", "etl").load("qa")
                 .select("id", "content_type")
                 .writeStream.foreachBatch(lambda df, _: delivered.extend(tuple(r) for r in df.collect()))
                 .option("checkpointLocation", str(tmp_path / "ck2")).trigger(availableNow=True).start())
        assert query.awaitTermination(120)
        assert query.exception() is None
        assert delivered == [(latin1, "application/x-caf\\xe9")]


# ---------------------------------------------------------------------------------------
# Streaming writes
# ---------------------------------------------------------------------------------------


def queue_to_queue(spark: Any, dsn: str, checkpoint: Path, fmt: str = "pgqueue", batch: int = 3000) -> Any:
    """Stream queue "in" (upper-cased) into queue "out", availableNow, 2 partitions each way."""
    return (spark.readStream.format("pgqueue").option("dsn", dsn).option("payloadType", "string")
            .option("consumer", "copy").option("maxMessagesPerBatch", str(batch)).option("numPartitions", "2")
            .load("in").selectExpr("upper(payload) AS payload").repartition(2)
            .writeStream.format(fmt).option("dsn", dsn).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start("out"))


def test_stream_sink_exactly_once_across_a_failed_task_and_a_crash_after_publishing(
        spark: Any, dsn: str, conn: Conn, tmp_path: Path) -> None:
    from spark_flaky import FLAKY_STREAM

    conn.execute("SELECT pgqueue.queue_create('in')")
    conn.execute("SELECT pgqueue.queue_create('out')")
    conn.execute("SELECT pgqueue.message_create_batch('in', %s, p_content_type => 'text/plain')",
                 ([f"m{i}".encode() for i in range(N)],))
    conn.execute("CREATE TABLE flaky_plan (what text)")
    conn.execute("INSERT INTO flaky_plan VALUES ('task'), ('commit')")
    ck = tmp_path / "ck"
    query = queue_to_queue(spark, dsn, ck, fmt=FLAKY_STREAM)
    with pytest.raises(Exception, match="injected crash after the publication of micro-batch 1"):
        query.awaitTermination(180)
    assert one(conn, "SELECT count(*) FROM flaky_plan") == 0, "premise: both failures happened"
    # micro-batches 0 and 1 are published (batch 0 once, despite its failed task); batch 1 is
    # not in Spark's commit log, so the source did not acknowledge it and Spark will run it again
    assert len(queue_payloads(conn, "out")) == 6000
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    assert one(conn, "SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
                     "WHERE q.name = 'in' AND m.claim_id IS NOT NULL") == 3000
    # restart from the checkpoint (the same query id): batch 1 is replayed and skipped by the sink
    query = queue_to_queue(spark, dsn, ck, fmt=FLAKY_STREAM)
    assert query.awaitTermination(180)
    assert query.exception() is None
    got = queue_payloads(conn, "out")
    assert len(got) == N, "exactly N messages: none lost, none published twice"
    assert set(got) == {f"M{i}" for i in range(N)}
    assert queue_payloads(conn, "in") == []
    keys = [r[0] for r in conn.execute("SELECT publish_key FROM pgqueue.spark_publish_log").fetchall()]
    assert keys == [f"stream:{query.id}:3"], "the sink remembers only the query's last micro-batch"
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    with Queue(dsn, "out") as out:
        (msg,) = out.dequeue(1, lock_ms=0)
        assert isinstance(msg.payload, str) and msg.payload.startswith("M"), "text in, text out"


def test_stream_sink_refuses_what_it_cannot_do(spark: Any, dsn: str, conn: Conn, tmp_path: Path) -> None:
    conn.execute("SELECT pgqueue.queue_create('in')")
    conn.execute("SELECT pgqueue.queue_create('out')")
    src = spark.readStream.format("pgqueue").option("dsn", dsn).option("payloadType", "string").load("in")
    for make, path, text in [
        (lambda: src.select("payload").writeStream.format("pgqueue").option("dsn", dsn)
         .option("commitMode", "task"), "out", "does not apply to writeStream"),
        (lambda: src.writeStream.format("pgqueue").option("dsn", dsn), "out",
         "'id'.* that the pgqueue sink would drop"),
        (lambda: src.select("payload").writeStream.format("pgqueue").option("dsn", dsn), "nope",
         'queue "nope" does not exist'),
        (lambda: src.select("payload").writeStream.format("pgqueue").option("dsn", dsn)
         .option("queue", "nope"), "out", "option queue='nope' and the path 'out' .* name different queues"),
        (lambda: src.select("payload").writeStream.format("pgqueue").option("dsn", dsn)
         .option("includeDead", "true"), "out", r"option\(s\) includeDead do not apply to df.writeStream"),
    ]:
        with pytest.raises(Exception, match=text):
            q = make().option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start(path)
            q.awaitTermination(60)
            raise AssertionError(f"the query ran: {q.exception()}")


def test_passwords_stay_out_of_plans_and_user_schemas_are_refused_before_claiming(spark: Any, dsn: str, conn: Conn,
                                                                                 tmp_path: Path) -> None:
    """Spark prints a stream's options in explain() (and the UI), redacting only a value or key
    that matches spark.redaction.regex: "password=..." is hidden, a URI's user:password@ was not
    (it showed in clear); it is refused now. A schema given to a stream used to fail its tasks
    only after the first micro-batch was claimed; it is refused before anything is claimed."""
    from psycopg.conninfo import conninfo_to_dict

    conn.execute("SELECT pgqueue.queue_create('jobs')")
    conn.execute("SELECT pgqueue.message_create_batch('jobs', %s)", ([b"a", b"b"],))
    params = conninfo_to_dict(dsn)
    said = spark.readStream.format("pgqueue").option("dsn", f"{dsn} password=hunter2x").load("jobs")
    plan = said._jdf.queryExecution().toString()
    assert "dsn=*********(redacted)" in plan and "hunter2x" not in plan, plan
    uri = f"postgresql://{params['user']}:hunter2x@{params['host']}:{params['port']}/{params['dbname']}"
    with pytest.raises(Exception, match="option dsn has a password in its URI") as refused:
        spark.readStream.format("pgqueue").option("dsn", uri).load("jobs").explain(True)
    assert "hunter2x" not in str(refused.value)
    user_schema = (spark.readStream.format("pgqueue").option("dsn", dsn).schema("id BIGINT, payload BINARY")
                   .load("jobs").writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
                   .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="the pgqueue source has a fixed schema"):
        user_schema.awaitTermination(60)
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_consumer") == 0, "nothing claimed"


# ---------------------------------------------------------------------------------------
# The example pipeline and the benchmark (smoke runs on the shared session)
# ---------------------------------------------------------------------------------------


def test_example_pipeline(spark: Any, dsn: str, owner_dsn: str) -> None:
    import spark_pipeline  # examples/ is on the path of the driver and of the executors

    summary = spark_pipeline.run_pipeline(spark, dsn, items=3000, partitions=2, batch=1000, admin_dsn=owner_dsn)
    assert summary.ok, summary
    assert summary.micro_batches == 3


def test_benchmark_smoke(spark: Any, dsn: str, owner_dsn: str) -> None:
    repo = str(Path(__file__).resolve().parents[1])
    if repo not in sys.path:  # the benchmark lives in the repository's bench/, not in the package
        sys.path.insert(0, repo)
    from bench.spark import measure

    results = measure(spark, dsn, 2000, [1, 2], mode="job", admin_dsn=owner_dsn)
    assert [(r.rows, r.partitions) for r in results] == [(2000, 1), (2000, 2)]
    assert all(r.per_second > 0 for r in results)
    from bench.spark import measure_stream

    streamed = measure_stream(spark, dsn, 2000, [2], batch=1000, admin_dsn=owner_dsn)
    assert [(r.mode, r.rows, r.partitions) for r in streamed] == [("stream-write", 2000, 2), ("stream-read", 2000, 2)]


def test_exactly_once_example_across_a_driver_kill(spark: Any, dsn: str, owner_dsn: str) -> None:
    """examples/spark_exactly_once.py: queue -> transform -> queue in a separate driver process,
    SIGKILLed once output arrives and restarted from its checkpoint: every order exactly once."""
    import spark_exactly_once

    outcome = spark_exactly_once.demonstrate(dsn, items=6000, batch=1000, admin_dsn=owner_dsn, timeout=400)
    assert 0 < outcome.out_at_kill < outcome.items, f"premise: killed part-way ({outcome})"
    assert outcome.ok, outcome


def test_exactly_once_example_refuses_a_run_that_cannot_show_a_crash(capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """With --items under two --batch, every result is published before the kill lands (the
    first micro-batch is the whole input): the example said MISMATCH (exit 1) of a run where
    exactly-once held (a review). It refuses such a run; a kill after everything was published
    says that nothing was shown, not MISMATCH."""
    from spark_helpers import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    import spark_exactly_once

    with pytest.raises(SystemExit) as exited:
        spark_exactly_once.main(["--items", "1000"])
    assert exited.value.code == 2
    assert "--items must be at least twice --batch" in capsys.readouterr().err
    after_all = spark_exactly_once.Outcome(items=10, out_at_kill=10, out=10, distinct_orders=10, left_on_input=0)
    assert not after_all.killed_part_way and not after_all.ok
    part_way = spark_exactly_once.Outcome(items=10, out_at_kill=4, out=10, distinct_orders=10, left_on_input=0)
    assert part_way.ok


def test_exactly_once_example_gives_up_a_consumer_another_session_keeps(owner_dsn: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The example waited without a deadline for the killed driver's session to let go of the
    consumer: a session that kept it (another run of the query) held the example for good. Past
    its deadline it says which consumer is held and stops."""
    import time

    from spark_helpers import EXAMPLES

    monkeypatch.syspath_prepend(str(EXAMPLES))
    import spark_exactly_once

    with psycopg.connect(owner_dsn, autocommit=True) as holder, psycopg.connect(owner_dsn, autocommit=True) as conn:
        holder.execute("SELECT pgqueue.queue_create(%s)", (spark_exactly_once.IN,))
        holder.execute("SELECT pgqueue.spark_consumer_open(%s, %s)", (spark_exactly_once.IN, spark_exactly_once.CONSUMER))
        started = time.monotonic()
        with pytest.raises(RuntimeError, match='another session still holds the consumer of queue "eo_in"'):
            spark_exactly_once.wait_for_release(conn, time.monotonic() + 0.5)
        assert 0.5 <= time.monotonic() - started < 5
        holder.execute("SELECT pgqueue.spark_consumer_close(%s, %s)", (spark_exactly_once.IN, spark_exactly_once.CONSUMER))
        spark_exactly_once.wait_for_release(conn, time.monotonic() + 0.5)  # released: returns


def test_job_mode_publication_whose_reply_is_lost_is_not_reported_failed(spark: Any, dsn: str, conn: Conn) -> None:
    """The connection breaks after the server committed spark_publish, before its reply arrives
    (a network cut, a proxy or pooler restart): the DataFrame is in the queue, so the job must
    not fail (a failed job promises nothing was published, and the user's retry would enqueue
    everything twice). The driver publishes again under the same key to learn the outcome."""
    from pgqueue.errors import ConnectionFailed
    from pgqueue.spark import _sql, source

    class LostReplyWriter(source.PgQueueWriter):
        def commit(self, messages: Any) -> None:
            real, lost = source._scalar, []

            def lossy(c: Any, query: Any, params: Any) -> Any:
                result = real(c, query, params)
                if query is _sql.PUBLISH and not lost:
                    lost.append(result)
                    c.close()
                    raise ConnectionFailed("consuming input failed: server closed the connection unexpectedly")
                return result

            source._scalar = lossy
            try:
                super().commit(messages)
            finally:
                source._scalar = real

    class LostReplySource(source.PgQueueDataSource):
        @classmethod
        def name(cls) -> str:
            return "pgqueue_lost_reply"

        def writer(self, schema: Any, overwrite: bool) -> Any:
            base = super().writer(schema, overwrite)
            lossy = LostReplyWriter(base.opts, base.plan)
            lossy.write_id = base.write_id
            return lossy

    spark.dataSource.register(LostReplySource)
    conn.execute("SELECT pgqueue.queue_create('jobs')")
    write(work_items(spark, 2000, 2), dsn, "jobs", fmt="pgqueue_lost_reply", payloadType="json", commitMode="job")
    got = queue_payloads(conn, "jobs")
    assert len(got) == 2000 and len(set(got)) == 2000
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_publish_log") == 0, \
        "the retry found the key published, then forgot it"
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
