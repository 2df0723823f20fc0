"""The pgqueue.spark reader and writer classes called directly, as Spark's workers call them,
against the real server but without a JVM: options, encoding, the job-mode protocol across task
attempts, the stream reader's offsets across a driver crash, AvailableNow, data loss."""

from __future__ import annotations

import datetime as dt
import json
import logging
import pickle
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    DateType,
    DayTimeIntervalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

import pgqueue.spark
from pgqueue import Queue, codec
from pgqueue.errors import ConnectionFailed, DeadlockDetected, InvalidArgument, PgQueueError, SerializationFailure
from pgqueue.spark import _encode, _sql, source
from pgqueue.spark._encode import WritePlan, decode_payload, encode_batch
from pgqueue.spark._options import Entry, parse
from pgqueue.spark.source import (
    IdRange,
    PgQueueBatchReader,
    PgQueueCommit,
    PgQueueDataSource,
    PgQueueStreamReader,
    PgQueueWriter,
    split_range,
    write_plan,
)
from spark_helpers import SparkRole, fill, one, read_batch, role_fixtures, stream_reader

Conn = psycopg.Connection[Any]


role, dsn, owner_dsn, conn = role_fixtures("classes")


# ---------------------------------------------------------------------------------------
# Options and schemas
# ---------------------------------------------------------------------------------------


def test_options() -> None:
    opts = parse({"DSN": "dbname=x", "path": "jobs", "commitmode": "JOB"}, "df.write")
    assert (opts.queue, opts.commit_mode, opts.payload_type) == ("jobs", "job", "auto")
    assert "dbname" not in repr(opts), "the connection string (it may hold a password) stays out of logs"
    assert parse({"DSN": "dbname=x", "path": "jobs", "NumPartitions": "4"}, "spark.read").num_partitions == 4
    assert parse({"conninfo": "x", "queue": "q"}, "spark.read").payload_type == "binary"
    bad: list[tuple[dict[str, str], str, Entry]] = [
        ({"queue": "q"}, "dsn", "df.write"),
        ({"dsn": "x"}, "name the queue", "df.write"),
        ({"dsn": "x", "queue": "q", "numPartitons": "2"}, "unknown option", "spark.read"),
        ({"dsn": "x", "queue": "q", "numPartitions": "0"}, "between 1", "spark.read"),
        ({"dsn": "x", "queue": "q", "batchSize": "many"}, "integer", "df.write"),
        ({"dsn": "x", "queue": "q", "commitMode": "stage"}, "one of task, job", "df.write"),
        ({"dsn": "x", "queue": "q", "includeDead": "maybe"}, "true or false", "spark.read"),
        ({"dsn": "x", "queue": "bad name"}, "invalid queue name", "df.write"),
        ({"dsn": "x", "queue": "q", "consumer": "-x"}, "invalid consumer name", "spark.readStream"),
    ]
    for options, text, entry in bad:
        with pytest.raises(InvalidArgument, match=text):
            parse(options, entry)
    with pytest.raises(InvalidArgument, match="payloadType"):
        parse({"dsn": "x", "queue": "q", "payloadType": "auto"}, "spark.read")
    # the Kafka source's names for the same settings
    kafka = parse({"dsn": "x", "queue": "q", "maxMessagesPerTrigger": "500", "minPartitions": "3"}, "spark.readStream")
    assert (kafka.max_messages_per_batch, kafka.num_partitions) == (500, 3)
    same = parse({"dsn": "x", "queue": "q", "maxMessagesPerTrigger": "500", "maxMessagesPerBatch": "500"}, "spark.readStream")
    assert same.max_messages_per_batch == 500
    with pytest.raises(InvalidArgument, match="numPartitions and minPartitions are the same setting"):
        parse({"dsn": "x", "queue": "q", "numPartitions": "2", "minPartitions": "3"}, "spark.read")
    with pytest.raises(InvalidArgument, match="maxMessagesPerTrigger must be between 1"):
        parse({"dsn": "x", "queue": "q", "maxMessagesPerTrigger": "0"}, "spark.readStream")
    # startingPosition: earliest, latest, a timestamp with a zone or epoch ms
    base = {"dsn": "x", "queue": "q"}
    assert parse(base, "spark.readStream").starting_position == "earliest"
    assert parse({**base, "startingPosition": "LATEST"}, "spark.readStream").starting_position == "latest"
    assert parse({**base, "startingPosition": "1700000000000"}, "spark.readStream").starting_position == 1700000000000
    assert parse({**base, "startingPosition": "2026-11-23T10:00:00Z"}, "spark.readStream").starting_position == 1795428000000
    assert parse({**base, "startingPosition": "2026-11-23T11:00:00.5+01:00"}, "spark.readStream").starting_position \
        == 1795428000500
    for bad in ("2026-11-23T10:00:00", "yesterday", "99999999999999999999"):
        with pytest.raises(InvalidArgument, match="startingPosition must be earliest, latest, a timestamp with a time zone"):
            parse({**base, "startingPosition": bad}, "spark.readStream")


def test_write_plans() -> None:
    opts = parse({"dsn": "x", "queue": "q"}, "df.write")

    def plan(*fields: StructField, **options: str) -> WritePlan:
        o = parse({"dsn": "x", "queue": "q", **options}, "df.write")
        return write_plan(o, StructType(list(fields)))

    payload_b = StructField("payload", BinaryType())
    payload_s = StructField("payload", StringType())
    assert plan(payload_b).payload_kind == "binary"
    assert plan(payload_s).payload_kind == "text"
    assert plan(payload_s, payloadType="json").payload_kind == "json_text"
    assert plan(StructField("payload", MapType(StringType(), LongType()))).payload_kind == "json_value"
    p = plan(StructField("body", StringType()), StructField("at", TimestampType()), StructField("d", DayTimeIntervalType()),
             StructField("prio", IntegerType()), payloadColumn="body", dequeueAtColumn="at", delayColumn="d",
             priorityColumn="prio")
    assert (p.dequeue_at_kind, p.delay_kind, p.priority_column) == ("timestamp", "interval", "prio")
    p = plan(payload_s, StructField("tenant", StringType()), StructField("order_id", LongType()),
             groupColumn="tenant", keyColumn="order_id")
    assert (p.group_column, p.key_column, p.scheduled) == ("tenant", "order_id", False)
    errors = [
        (lambda: write_plan(opts, StructType([StructField("x", StringType())])), "no payload column 'payload'"),
        (lambda: plan(StructField("payload", DateType())), "has type date"),
        (lambda: plan(payload_s, StructField("extra", LongType())), "'extra' that the pgqueue sink would drop"),
        (lambda: plan(payload_b, payloadType="string"), "must be string"),
        (lambda: plan(payload_s, payloadType="binary"), "must be binary"),
        (lambda: plan(payload_s, StructField("p", StringType()), priorityColumn="p"), "must be an integer"),
        (lambda: plan(payload_s, StructField("t", StringType()), dequeueAtColumn="t"), "timestamp or an integer"),
        (lambda: plan(payload_s, delayColumn="missing"), "no delay column"),
        (lambda: plan(payload_s, StructField("g", DateType()), groupColumn="g"),
         "group column 'g' has type date, but it must be a string or an integer"),
        (lambda: plan(payload_s, StructField("k", BinaryType()), keyColumn="k"),
         "key column 'k' has type binary, but it must be a string or an integer"),
        (lambda: plan(payload_s, keyColumn="missing"), "no key column 'missing'"),
        (lambda: plan(payload_s, StructField("g", StringType()), groupColumn="g", keyColumn="g"),
         "must be different columns"),
        (lambda: plan(payload_s, StructField("g", StringType())), "groupColumn or keyColumn"),
    ]
    for make, text in errors:
        with pytest.raises(InvalidArgument, match=text):
            make()


def test_json_payloads_holding_a_type_json_cannot_hold_are_refused_on_the_driver() -> None:
    """A VARIANT (also a GEOMETRY / GEOGRAPHY) inside a struct, array or map was written as Spark's
    internal {"value", "metadata"} base64 (the top-level VARIANT is refused), and a year-month
    INTERVAL inside one failed the task with pyarrow's ``KeyError: 21``, naming neither column
    nor row (a review). The write is refused before any task, naming the column, the field and
    its type; a day-time INTERVAL inside one is written as its seconds."""
    from pyspark.sql.types import (
        ArrayType,
        CalendarIntervalType,
        GeometryType,
        VariantType,
        YearMonthIntervalType,
    )

    opts = parse({"dsn": "x", "queue": "q"}, "df.write")
    cases: list[tuple[Any, str]] = [
        (StructType([StructField("id", IntegerType()), StructField("v", VariantType())]),
         r"struct<id:int,v:variant>, which holds variant at payload\.v: .*\(to_json\(payload\) AS payload "
         r"with payloadType=json"),
        (ArrayType(VariantType()), r"which holds variant at payload\[\]"),
        (MapType(StringType(), VariantType()), r"which holds variant at payload\{\}"),
        (StructType([StructField("ym", YearMonthIntervalType())]),
         r"which holds interval year to month at payload\.ym: .*\(cast it to an integer \(months\)"),
        (ArrayType(StructType([StructField("g", GeometryType(0))])), r"which holds geometry\(0\) at payload\[\]\.g"),
        (MapType(StructType([StructField("c", CalendarIntervalType())]), LongType()),
         r"which holds interval at payload\{key\}\.c"),
    ]
    for payload_type in ("auto", "json"):
        for data_type, text in cases:
            with pytest.raises(InvalidArgument, match=r"^payload column 'payload' has type .*" + text):
                write_plan(parse({"dsn": "x", "queue": "q", "payloadType": payload_type}, "df.write"),
                           StructType([StructField("payload", data_type)]))
    seconds = StructType([StructField("payload", ArrayType(StructType([StructField("d", DayTimeIntervalType())])))])
    assert write_plan(opts, seconds).payload_kind == "json_value"
    batch = pa.record_batch({"payload": pa.array([[{"d": dt.timedelta(days=1, seconds=1.5)}]],
                                                  pa.list_(pa.struct([("d", pa.duration("us"))])))})
    assert encode_batch(write_plan(opts, seconds), batch, partition=0, first_row=0).contents == [b'[{"d":86401.5}]']


def test_data_source_checks_before_any_task(dsn: str) -> None:
    ds = PgQueueDataSource({"dsn": dsn, "path": "default"})
    assert ds.schema().fieldNames()[:4] == ["id", "queue", "status", "payload"]
    schema = StructType([StructField("payload", StringType())])
    with pytest.raises(InvalidArgument, match="only appends: overwrite would delete messages"):
        ds.writer(schema, True)
    with pytest.raises(PgQueueError, match='queue "nope" does not exist'):
        PgQueueDataSource({"dsn": dsn, "path": "nope"}).writer(schema, False)
    assert isinstance(ds.writer(schema, False), PgQueueWriter)


def test_a_read_schema_other_than_the_sources_is_refused_before_anything_is_claimed(dsn: str, conn: Conn) -> None:
    """`.schema(...)` on a read hands Spark's reader the user's schema instead of the source's:
    every task then failed with DATA_SOURCE_RETURN_SCHEMA_MISMATCH (16 columns for 2), a stream
    only after it had claimed its first micro-batch. Refused up front, as the Kafka source does."""
    fill(conn, "q", 3)
    ds = PgQueueDataSource({"dsn": dsn, "queue": "q"})
    mine = StructType([StructField("id", LongType()), StructField("payload", BinaryType())])
    for make in (ds.reader, ds.streamReader):
        with pytest.raises(InvalidArgument, match=r"the pgqueue source has a fixed schema \(struct<id:bigint,"
                                                  r"queue:string.*not struct<id:bigint,payload:binary>: drop "
                                                  r"\.schema\(\.\.\.\)"):
            make(mine)
    as_string = PgQueueDataSource({"dsn": dsn, "queue": "q", "payloadType": "string"})
    with pytest.raises(InvalidArgument, match="payloadType sets the payload column's type"):
        as_string.streamReader(pgqueue.spark.schema_for("binary"))
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_consumer") == 0, "nothing opened, nothing claimed"
    assert isinstance(ds.reader(ds.schema()), PgQueueBatchReader)
    assert isinstance(as_string.streamReader(as_string.schema()), PgQueueStreamReader)


def test_a_password_in_the_dsn_shows_nowhere() -> None:
    """Spark prints option values in plans (a stream's explain(), the UI) unless the key or the
    value matches spark.redaction.regex (secret|password|token|access.?key): a URI's
    user:password@ matches none, so it was shown in clear (test_spark.py shows Spark doing so).
    And libpq quotes a malformed URI whole in its error, which Spark prints with the traceback."""
    uri = "postgresql://etl:hunter2x@db.example/app"
    for name in ("dsn", "conninfo"):
        for entry in ("spark.read", "spark.readStream", "df.write", "df.writeStream"):
            with pytest.raises(InvalidArgument, match=f"option {name} has a password in its URI") as refused:
                parse({name: uri, "queue": "q"}, entry)  # type: ignore[arg-type]
            assert "hunter2x" not in str(refused.value)
    # what Spark redacts is taken: the password said as such, in a URI's query or key=value
    assert parse({"dsn": "postgresql://etl@db.example/app?password=hunter2x", "queue": "q"}, "spark.read")
    assert parse({"dsn": "host=db.example password=hunter2x", "queue": "q"}, "spark.read")
    assert parse({"dsn": "postgresql://db.example:5432/app", "queue": "q"}, "spark.read")
    assert parse({"dsn": "postgresql://[::1]:5432/app", "queue": "q"}, "spark.read")
    assert parse({"dsn": "postgresql://etl:@db.example/app", "queue": "q"}, "spark.read"), "an empty password"
    # an error quoting the connection string masks its password, and keeps no cause that has it
    for bad in ("postgresql://etl@[db/app?password=hunter2x", "postgresql://etl@db:x/app?password=hunter2x",
                "host=db password=hunter2x sslmode"):
        with pytest.raises(PgQueueError) as failed:
            PgQueueDataSource({"dsn": bad, "queue": "q"}).writer(StructType([StructField("payload", StringType())]),
                                                                 False)
        chain = [failed.value, *([failed.value.__cause__] if failed.value.__cause__ else [])]
        assert all("hunter2x" not in str(e) for e in chain), [str(e) for e in chain]
    with pytest.raises(PgQueueError, match=r"in IPv6 host address in URI: \(not shown\)"):
        PgQueueStreamReader(parse({"dsn": "postgresql://etl@[db/app?password=hunter2x", "queue": "q"},
                                  "spark.readStream")).initialOffset()


# ---------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------


def test_encoding_follows_the_codec(dsn: str) -> None:
    """What the writer stores, Queue.dequeue() decodes into the value the DataFrame held."""
    struct_type = pa.struct([("n", pa.int64()), ("tags", pa.list_(pa.string())),
                             ("attrs", pa.map_(pa.string(), pa.float64())), ("price", pa.decimal128(10, 2)),
                             ("when", pa.timestamp("us", tz="UTC")), ("raw", pa.binary())])
    values = [{"n": 1, "tags": ["a", "b"], "attrs": [("x", 1.5)], "price": Decimal("9.99"),
               "when": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc), "raw": b"\x00\x01"}]
    cases: list[tuple[str, Any, pa.DataType, object]] = [
        ("binary", [b"\x00\xffraw"], pa.binary(), b"\x00\xffraw"),
        ("text", ["h\u00e9llo"], pa.string(), "h\u00e9llo"),
        ("json_text", ['{"a": [1, 2]}'], pa.string(), {"a": [1, 2]}),
        ("json_value", values, struct_type,
         {"n": 1, "tags": ["a", "b"], "attrs": {"x": 1.5}, "price": 9.99,
          "when": "2024-01-02T03:04:05+00:00", "raw": "AAE="}),
        ("json_value", [7], pa.int32(), 7),
    ]
    with Queue(dsn, "default") as queue:
        for kind, data, typ, expected in cases:
            batch = pa.record_batch({"payload": pa.array(data, typ)})
            chunk = encode_batch(WritePlan("payload", kind), batch, partition=0, first_row=0)
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("SELECT pgqueue.message_create_batch('default', %s, p_content_type => %s)",
                          (chunk.contents, chunk.content_type))
            (msg,) = queue.dequeue(1, lock_ms=0)
            assert msg.payload == expected, kind
            assert msg.content_type == codec.encode(expected)[1]


def test_json_numbers_as_spark_writes_them() -> None:
    """Decimals are written exactly (a float rounded 12345678901234567.123456789 to
    1.2345678901234568e+16), a FLOAT as its shortest decimal (0.1, not 0.10000000149011612),
    boolean map keys as true / false: as Spark's ``to_json`` writes them."""
    typ = pa.struct([("amount", pa.decimal128(38, 9)), ("small", pa.decimal128(38, 28)), ("whole", pa.decimal128(10, 2)),
                     ("f", pa.float32()), ("m", pa.map_(pa.bool_(), pa.int32())), ("s", pa.string())])
    row = {"amount": Decimal("12345678901234567.123456789"), "small": Decimal("0.1000000000000000000000000001"),
           "whole": Decimal("9.00"), "f": 0.1, "m": [(True, 1), (False, 0)], "s": "a\"b\u00e9"}
    batch = pa.record_batch({"payload": pa.array([row, None], typ)})
    chunk = encode_batch(WritePlan("payload", "json_value"), batch.slice(0, 1), partition=0, first_row=0)
    assert chunk.contents == ['{"amount":12345678901234567.123456789,"small":0.1000000000000000000000000001,'
                              '"whole":9,"f":0.1,"m":{"true":1,"false":0},"s":"a\\"b\u00e9"}'.encode()]
    plain = pa.record_batch({"payload": pa.array([[1.5, 2.25]], pa.list_(pa.float32()))})
    assert encode_batch(WritePlan("payload", "json_value"), plain, partition=0, first_row=0).contents == [b"[1.5,2.25]"]


def _json_of(values: list[Any], arrow_type: pa.DataType) -> list[bytes]:
    batch = pa.record_batch({"payload": pa.array(values, arrow_type)})
    return encode_batch(WritePlan("payload", "json_value"), batch, partition=0, first_row=0).contents


def test_json_dates_and_timestamps_past_what_a_python_datetime_holds() -> None:
    """pyarrow made Python dates and datetimes of the dates and timestamps inside a JSON payload,
    which stop at years 1 and 9999: a timestamp near either that the session time zone moves past
    it, and any DATE or TIMESTAMP past 9999-12-31 (Spark holds them, and its to_json writes them),
    failed the task with a bare ``OverflowError: date value out of range`` (a review). They are
    written from their integers: the year as to_json writes it (+10000, 0000, -0001), the rest as
    before (offsets to the second, as to_json writes them too)."""
    utc = dt.timezone.utc

    def ts(tz: str | None, *values: dt.datetime) -> list[bytes]:
        micros = [(v - dt.datetime(1970, 1, 1, tzinfo=utc)) // dt.timedelta(microseconds=1) for v in values]
        return _json_of([micros], pa.list_(pa.timestamp("us", tz=tz)))

    first, last = dt.datetime(1, 1, 1, tzinfo=utc), dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=utc)
    assert ts("America/New_York", first, last) == [b'["0000-12-31T19:03:58-04:56:02","9999-12-31T18:59:59-05:00"]']
    assert ts("Asia/Tokyo", first, last) == [b'["0001-01-01T09:18:59+09:18:59","+10000-01-01T08:59:59+09:00"]']
    day = 86_400_000_000
    last_us = (last - dt.datetime(1970, 1, 1, tzinfo=utc)) // dt.timedelta(microseconds=1)
    first_us = (first - dt.datetime(1970, 1, 1, tzinfo=utc)) // dt.timedelta(microseconds=1)
    far = pa.struct([("d", pa.date32()), ("t", pa.timestamp("us", tz="UTC")), ("n", pa.timestamp("us")),
                     ("m", pa.map_(pa.date32(), pa.timestamp("us", tz="America/New_York")))])
    row = {"d": 2932897, "t": last_us + 2 * day, "n": last_us + 2 * day + 500_000,
           "m": [(-719163, first_us - 400 * day)]}
    assert _json_of([row], far) == [b'{"d":"+10000-01-01","t":"+10000-01-02T23:59:59+00:00",'
                                    b'"n":"+10000-01-02T23:59:59.500000",'
                                    b'"m":{"0000-12-31":"-0001-11-27T19:03:58-04:56:02"}}']
    dates = [-719163, -719163 - 366, -719162 - 366 * 1000, 2932896 + 366 * 100_000, 2**31 - 1, -(2**31)]
    assert _json_of([dates], pa.list_(pa.date32())) == [
        b'["0000-12-31","-0001-12-31","-1002-12-05","+110207-05-25","+5881580-07-11","-5877641-06-23"]']
    extreme = pa.list_(pa.timestamp("us", tz="Europe/Paris"))
    assert _json_of([[-(2**63), 2**63 - 1]], extreme) == [
        b'["-290308-12-21T20:08:26.224192+00:09:21","+294247-01-10T05:00:54.775807+01:00"]']
    # in range, exactly what Python's isoformat() of pyarrow's values wrote before
    rng = random.Random(7)
    lo, hi = first_us + day, last_us - day
    micros = [rng.randrange(lo, hi) for _ in range(3000)] + [rng.randrange(lo, hi) // 10**6 * 10**6 for _ in range(300)]
    for tz in (None, "UTC", "America/New_York", "Asia/Tokyo", "+05:30", "-03:00", "Australia/Lord_Howe"):
        for unit, div in (("us", 1), ("ms", 1000), ("s", 10**6)):
            typ = pa.timestamp(unit, tz=tz)
            values = pa.array([m // div for m in micros], typ)
            assert _json_of([values.to_pylist()], pa.list_(typ)) == [json.dumps(
                [v.isoformat() for v in values.to_pylist()], separators=(",", ":")).encode()], (tz, unit)
    days = list(range(-719162, 2932897, 97))
    for typ in (pa.date32(), pa.date64()):
        values = pa.array(days, pa.date32()).cast(typ)
        assert _json_of([values.to_pylist()], pa.list_(typ)) == [json.dumps(
            [v.isoformat() for v in values.to_pylist()], separators=(",", ":")).encode()]


def test_map_keys_as_spark_writes_them() -> None:
    """Array and struct map keys were written as Python's repr ({"[1, 2]":"x"}, {"{'k': 1}":"x"}),
    DOUBLE keys in Python's spelling (1e+16, nan, inf); the spellings of Spark's to_json are
    checked against Spark in test_spark_encode_review.py."""
    cases: list[tuple[pa.DataType, list[Any], bytes]] = [
        (pa.map_(pa.list_(pa.int32()), pa.string()), [([1, 2], "x"), ([], "e")], b'{"[1,2]":"x","[]":"e"}'),
        (pa.map_(pa.list_(pa.string()), pa.string()), [(["a", None, 'q"'], "x")], b'{"[a,null,q\\"]":"x"}'),
        (pa.map_(pa.struct([("k", pa.int32())]), pa.string()), [({"k": 1}, "x")], b'{"[1]":"x"}'),
        (pa.map_(pa.struct([("k", pa.string()), ("j", pa.list_(pa.float64())), ("b", pa.bool_())]), pa.int8()),
         [({"k": "a", "j": [1.5, 1e16], "b": True}, 1)], b'{"[a,[1.5,1.0E16],true]":1}'),
        (pa.map_(pa.float64(), pa.string()),
         [(1e16, "a"), (float("nan"), "b"), (float("inf"), "c"), (float("-inf"), "d"), (1.0, "e"), (1e7, "f"),
          (1e-4, "g"), (0.001, "h"), (123456789.125, "i"), (-2.5, "j")],
         b'{"1.0E16":"a","NaN":"b","Infinity":"c","-Infinity":"d","1.0":"e","1.0E7":"f","1.0E-4":"g",'
         b'"0.001":"h","1.23456789125E8":"i","-2.5":"j"}'),
        (pa.map_(pa.float32(), pa.string()), [(0.1, "a"), (1e10, "b"), (1.5, "c")], b'{"0.1":"a","1.0E10":"b","1.5":"c"}'),
    ]
    for typ, value, expected in cases:
        assert _json_of([value], typ) == [expected], typ


def test_map_keys_written_as_one_name_are_refused() -> None:
    """Array and struct map keys are written without quoting, as Spark's to_json writes them, so
    two keys can come out as one JSON name: ["a,b"] and ["a","b"] are both [a,b], ["null"] and
    [NULL] both [null], structs ("1,2", "3") and ("1", "2,3") both [1,2,3]. The object kept the
    last entry and the message went out without the other (a review); the task fails instead,
    naming the column and the row, as the client refuses a dict whose keys JSON writes alike."""
    cases: list[tuple[pa.DataType, list[Any]]] = [
        (pa.map_(pa.list_(pa.string()), pa.int32()), [(["a,b"], 1), (["a", "b"], 2)]),
        (pa.map_(pa.list_(pa.string()), pa.int32()), [(["null"], 1), ([None], 2)]),
        (pa.map_(pa.struct([("x", pa.string()), ("y", pa.string())]), pa.int32()),
         [({"x": "1,2", "y": "3"}, 1), ({"x": "1", "y": "2,3"}, 2)]),
    ]
    for typ, value in cases:
        batch = pa.record_batch({"payload": pa.array([[], value], typ)})  # (the second row's map)
        with pytest.raises(InvalidArgument, match=r"in row 9 of partition 2: two keys of a map are both written as"):
            encode_batch(WritePlan("payload", "json_value"), batch, partition=2, first_row=7)
    distinct = [(["a", "b"], 1), (["a,b"], 2)]  # (the same keys in another map of its own each: no conflict)
    assert _json_of([distinct[:1], distinct[1:]], pa.map_(pa.list_(pa.string()), pa.int32())) == \
        [b'{"[a,b]":1}', b'{"[a,b]":2}']


def test_json_text_that_only_python_reads_is_refused() -> None:
    """NaN, Infinity and -Infinity are not JSON (Python's json.loads takes them; PostgreSQL's json
    type and other clients do not): a payloadType json column holding them fails its task."""
    for text in ("NaN", "Infinity", "-Infinity", '{"a": NaN}'):
        batch = pa.record_batch({"payload": pa.array([text])})
        with pytest.raises(InvalidArgument, match="is not a JSON value"):
            encode_batch(WritePlan("payload", "json_text"), batch, partition=0, first_row=0)


def test_encoding_errors_name_the_row() -> None:
    batch = pa.record_batch({"payload": pa.array(["a", None], pa.string())})
    with pytest.raises(InvalidArgument, match="is NULL in row 12 of partition 3"):
        encode_batch(WritePlan("payload", "text"), batch, partition=3, first_row=10)
    batch = pa.record_batch({"payload": pa.array(["{}", "{nope"], pa.string())})
    with pytest.raises(InvalidArgument, match="not valid JSON in row 2"):
        encode_batch(WritePlan("payload", "json_text"), batch, partition=0, first_row=0)
    batch = pa.record_batch({"payload": pa.array([float("nan")], pa.float64())})
    with pytest.raises(InvalidArgument, match="cannot be written as JSON"):
        encode_batch(WritePlan("payload", "json_value"), batch, partition=0, first_row=0)
    both = pa.record_batch({"payload": pa.array(["a"]), "d": pa.array([1.0]), "p": pa.array([1])})
    with pytest.raises(InvalidArgument, match="sets both 'd' and 'p'"):
        encode_batch(WritePlan("payload", "text", delay_column="d", delay_kind="seconds", priority_column="p"),
                     both, partition=0, first_row=0)
    neg = pa.record_batch({"payload": pa.array(["a"]), "d": pa.array([-1.0])})
    with pytest.raises(InvalidArgument, match="finite, >= 0"):
        encode_batch(WritePlan("payload", "text", delay_column="d", delay_kind="seconds"), neg, partition=0, first_row=0)
    # a due time before 1970 was written as it was: pgqueue read it as a priority above any
    # priorityColumn can give (a review of the Spark source, session 43)
    early = pa.record_batch({"payload": pa.array(["a", "b"]),
                             "at": pa.array([dt.datetime(2030, 1, 1), dt.datetime(1, 1, 1)], pa.timestamp("us", "UTC")),
                             "ms": pa.array([0, -1], pa.int64())})
    with pytest.raises(InvalidArgument, match=r"'at' is before 1970 \(-62135596800000 epoch ms\) in row 2"):
        encode_batch(WritePlan("payload", "text", dequeue_at_column="at", dequeue_at_kind="timestamp"), early,
                     partition=0, first_row=0)
    with pytest.raises(InvalidArgument, match=r"'ms' is before 1970 \(-1 epoch ms\) in row 2"):
        encode_batch(WritePlan("payload", "text", dequeue_at_column="ms", dequeue_at_kind="epoch_ms"), early,
                     partition=0, first_row=0)
    deep = pa.record_batch({"payload": pa.array(["[" * 5000 + "]" * 5000])})
    with pytest.raises(InvalidArgument, match="in row 1 of partition 0 is JSON nested too deeply"):
        encode_batch(WritePlan("payload", "json_text"), deep, partition=0, first_row=0)


def test_group_and_key_columns() -> None:
    batch = pa.record_batch({"payload": pa.array(["a", "b", "c"]), "g": pa.array(["t1", None, "t2"]),
                             "k": pa.array([7, 8, None], pa.int64())})
    chunk = encode_batch(WritePlan("payload", "text", group_column="g", key_column="k"), batch,
                         partition=0, first_row=0)
    assert (chunk.groups, chunk.keys, chunk.dequeue_ats) == (["t1", None, "t2"], ["7", "8", None], None)
    assert [(c.groups, c.keys) for c in chunk.slices(2)] == [(["t1", None], ["7", "8"]), (["t2"], [None])]
    assert encode_batch(WritePlan("payload", "text"), batch, partition=0, first_row=0).groups is None
    for bad, length in (("", 0), ("x" * 201, 201)):
        batch = pa.record_batch({"payload": pa.array(["a", "b"]), "g": pa.array(["ok", bad])})
        with pytest.raises(InvalidArgument, match=f"group column 'g' must be NULL \\(none\\) or 1 to 200 "
                                                  f"characters, got {length} in row 6 of partition 2"):
            encode_batch(WritePlan("payload", "text", group_column="g"), batch, partition=2, first_row=4)


def test_schedule_columns() -> None:
    when = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    batch = pa.record_batch({
        "payload": pa.array(["a", "b", "c", "d"]),
        "at": pa.array([when, None, None, None], pa.timestamp("us", tz="UTC")),
        "delay": pa.array([None, dt.timedelta(seconds=1.5), None, None], pa.duration("us")),
        "prio": pa.array([None, None, 7, None], pa.int32()),
    })
    plan = WritePlan("payload", "text", dequeue_at_column="at", dequeue_at_kind="timestamp",
                     delay_column="delay", delay_kind="interval", priority_column="prio")
    chunk = encode_batch(plan, batch, partition=0, first_row=0)
    assert chunk.dequeue_ats == [1893456000000, None, -8, None]
    assert chunk.delays_ms == [None, 1500, None, None]
    assert [len(c) for c in chunk.slices(3)] == [3, 1]


def test_schedule_and_key_values_at_their_limits() -> None:
    """Priorities 0 and MAX_PRIORITY (2**31 - 1) are taken and 2**31 refused; a group or key of 200
    characters is taken; a delay is rounded to the nearest millisecond (1.005 s is 1004.99... in
    floating point: 1005 ms) and a due time floored to its millisecond."""
    at = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=1500)
    batch = pa.record_batch({
        "payload": pa.array(["a", "b", "c", "d"]),
        "p": pa.array([0, _encode.MAX_PRIORITY, None, None], pa.int64()),
        "d": pa.array([None, None, 1.005, None]),
        "at": pa.array([None, None, None, at], pa.timestamp("us", tz="UTC")),
        "g": pa.array(["g" * 200] * 4), "k": pa.array(["k" * 200] * 4),
    })
    plan = WritePlan("payload", "text", priority_column="p", delay_column="d", delay_kind="seconds",
                     dequeue_at_column="at", dequeue_at_kind="timestamp", group_column="g", key_column="k")
    chunk = encode_batch(plan, batch, partition=0, first_row=0)
    assert chunk.dequeue_ats == [-1, -(2**31), None, 1893456000001]
    assert chunk.delays_ms == [None, None, 1005, None]
    assert chunk.groups == ["g" * 200] * 4 and chunk.keys == ["k" * 200] * 4
    over = pa.record_batch({"payload": pa.array(["a"]), "p": pa.array([2**31], pa.int64())})
    with pytest.raises(InvalidArgument, match="priority column 'p' must be from 0 to 2147483647, got 2147483648 "
                                              "in row 1 of partition 0"):
        encode_batch(WritePlan("payload", "text", priority_column="p"), over, partition=0, first_row=0)


def test_strings_that_are_not_utf8_or_hold_nul_fail_naming_the_column_and_row() -> None:
    """Spark's STRING may hold any bytes (CAST(unhex('ff') AS STRING), a file read with another
    charset). Arrow hands them over unchecked and decoding them raised a bare UnicodeDecodeError
    naming neither column nor row; a NUL in a group or key failed in the server, as "PostgreSQL
    text fields cannot contain NUL (0x00) bytes"."""
    bad = pa.array([b"ok", b"ok", b"\xffbad"], pa.binary()).view(pa.string())
    cases: list[tuple[str, WritePlan, dict[str, Any]]] = [
        ("payload column 'payload'", WritePlan("payload", "text"), {"payload": bad}),
        ("payload column 'payload'", WritePlan("payload", "json_text"), {"payload": bad}),
        ("payload column 'payload'", WritePlan("payload", "json_value"),
         {"payload": pa.StructArray.from_arrays([bad], ["name"])}),
        ("key column 'k'", WritePlan("payload", "text", key_column="k"), {"payload": pa.array(["a"] * 3), "k": bad}),
        ("group column 'g'", WritePlan("payload", "text", group_column="g"), {"payload": pa.array(["a"] * 3), "g": bad}),
    ]
    for what, plan, columns in cases:
        with pytest.raises(InvalidArgument, match=f"{what} holds a string that is not valid UTF-8 in row 13 of "
                                                  "partition 2 \\(invalid start byte at byte 0\\)"):
            encode_batch(plan, pa.record_batch(columns), partition=2, first_row=10)
    nul = pa.array(["a", "b\x00c"])
    for name in ("key", "group"):
        plan = WritePlan("payload", "text", **{f"{name}_column": "c"})
        with pytest.raises(InvalidArgument, match=f"{name} column 'c' holds a NUL character \\(U\\+0000\\) in row 2 "
                                                  "of partition 0"):
            encode_batch(plan, pa.record_batch({"payload": pa.array(["a", "b"]), "c": nul}), partition=0, first_row=0)
    text = encode_batch(WritePlan("payload", "text"), pa.record_batch({"payload": nul}), partition=0, first_row=0)
    assert text.contents == [b"a", b"b\x00c"], "a payload is bytes: NUL is content like any other"


def test_large_payloads_go_in_calls_of_bounded_size(dsn: str, conn: Conn, as_task: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A call's contents are one array value, which PostgreSQL caps at 1 GB: 400 payloads of
    3 MB in one batchSize chunk failed their task with "sending query and params failed: cannot
    allocate memory for output buffer" (a ConnectionFailed, though the server was fine). Calls
    are now cut at MAX_CALL_BYTES too, the contents go in binary (half the bytes of hex text), and
    a payload over what a value holds fails naming its row."""
    chunk = encode_batch(WritePlan("payload", "binary"),
                         pa.record_batch({"payload": pa.array([b"x" * n for n in (4, 4, 9, 1, 1, 1)])}),
                         partition=0, first_row=0)
    assert [[len(c) for c in part.contents] for part in chunk.slices(5, max_bytes=8)] == [[4, 4], [9], [1, 1, 1]]
    assert [len(part) for part in chunk.slices(2)] == [2, 2, 2], "batchSize still bounds the rows"
    conn.execute("SELECT pgqueue.queue_create('q')")
    monkeypatch.setattr(_encode, "MAX_CALL_BYTES", 10)
    as_task(0, 0)
    assert writer(dsn).write(batches([f"r{i:02}" for i in range(25)], 25)) == PgQueueCommit(0, 0, 25)
    assert payloads(conn) == [f"r{i:02}" for i in range(25)]
    monkeypatch.setattr(_encode, "MAX_CONTENT_BYTES", 5)
    with pytest.raises(InvalidArgument, match=r"payload column 'payload' is 6 bytes in row 2 of partition 0: a "
                                              r"message holds at most 5 bytes \(read as text, a value is twice its size"):
        writer(dsn, commitMode="job").write(batches(["small", "large!"], 2))
    assert len(payloads(conn)) == 25 and one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0


def test_decode_payload() -> None:
    assert decode_payload(b"\xff", None, "binary") == b"\xff"
    assert decode_payload(b"\xff", None, "string") is None
    assert decode_payload("h\u00e9".encode(), codec.TEXT, "string") == "h\u00e9"
    assert decode_payload(b'{"a":1}', codec.JSON, "json") == '{"a":1}'
    assert decode_payload(b"hi", codec.TEXT, "json") == '"hi"'
    assert decode_payload(b"hi", None, "json") is None
    # string decodes whatever the content type says; json only JSON and text/* (README, a review)
    assert decode_payload(b"abc", "image/png", "string") == "abc"
    assert decode_payload(b"abc", None, "string") == "abc"
    assert decode_payload(b"abc", "image/png", "json") is None
    assert decode_payload("h\u00e9".encode("latin-1"), "text/plain; charset=latin-1", "string") == "h\u00e9"


def test_json_reads_take_every_json_media_type_without_its_byte_order_mark() -> None:
    """payloadType json gives a structured-syntax +json type's content as JSON (not NULL), and
    leaves out a leading byte-order mark, which is not part of the JSON (pgqueue.codec.decode);
    payloadType string keeps the text as it is."""
    assert decode_payload(b'{"a":1}', "application/cloudevents+json", "json") == '{"a":1}'
    assert decode_payload(b'[1]', "application/ld+json; charset=utf-8", "json") == "[1]"
    bom = b'\xef\xbb\xbf{"a":1}'
    assert decode_payload(bom, codec.JSON, "json") == '{"a":1}'
    assert decode_payload(bom, codec.JSON, "string") == '\ufeff{"a":1}'


@pytest.mark.parametrize("content_type", ["text/plain; charset=undefined", "application/json; charset=undefined",
                                          "text/plain; charset=nope", "text/plain; charset=punycode",
                                          "text/plain; charset=base64"])
def test_content_a_charset_cannot_decode_reads_as_null(content_type: str) -> None:
    """Content that cannot be decoded is NULL for payloadType string and json whatever the reason.
    ``charset=undefined`` (Python's "undefined" codec: a plain UnicodeError, not a
    UnicodeDecodeError) failed every read of the queue instead, and a stream replayed the
    micro-batch holding it forever (a review); so did punycode on bytes it cannot read."""
    for payload_type in ("string", "json"):
        assert decode_payload(b"hi-x", content_type, payload_type) is None, (content_type, payload_type)
    assert decode_payload(b"hi-x", content_type, "binary") == b"hi-x"


@pytest.mark.parametrize(("content", "charset"), [(b"+2AA-", "utf-7"), (b"\\ud800", "unicode_escape"),
                                                  (b"\\udfff", "raw_unicode_escape")])
def test_content_a_charset_decodes_into_a_lone_surrogate_reads_as_null(content: bytes, charset: str) -> None:
    """Valid UTF-7 ``+2AA-`` decodes into a lone surrogate ('\\ud800'; unicode_escape and
    raw_unicode_escape decode ``\\ud800`` so), which has no UTF-8 form: Spark failed the read task
    encoding the row, and a stream replayed the micro-batch forever (a review). It reads as NULL,
    as content a charset cannot decode; the rest of such a charset still reads."""
    for media_type in ("text/plain", "application/json"):
        for payload_type in ("string", "json"):
            assert decode_payload(content, f"{media_type}; charset={charset}", payload_type) is None, \
                (media_type, payload_type)
    assert decode_payload(content, f"text/plain; charset={charset}", "binary") == content
    assert decode_payload(b"h+AOk-", "text/plain; charset=utf-7", "string") == "h\u00e9"
    assert decode_payload(b"h+AOk-", "text/plain; charset=utf-7", "json") == '"h\u00e9"'


# ---------------------------------------------------------------------------------------
# The writer, as Spark's tasks and driver call it
# ---------------------------------------------------------------------------------------


def batches(values: list[str], size: int) -> Iterator[pa.RecordBatch]:
    for i in range(0, len(values), size):
        yield pa.record_batch({"payload": pa.array(values[i:i + size], pa.string())})


@pytest.fixture
def as_task(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Pretend to be Spark task (partition, attempt id)."""

    def set_task(partition: int, attempt: int) -> None:
        monkeypatch.setattr(source, "_task_identity", lambda: (partition, attempt))

    return set_task


def payloads(conn: Conn, queue: str = "q") -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT convert_from(m.content, 'UTF8') FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
        "WHERE q.name = %s ORDER BY m.id", (queue,)).fetchall()]


def writer(dsn: str, **options: str) -> PgQueueWriter:
    ds = PgQueueDataSource({"dsn": dsn, "queue": "q", **options})
    return ds.writer(StructType([StructField("payload", StringType())]), False)


def test_task_mode_writes_each_partition_in_chunks(dsn: str, conn: Conn, as_task: Any) -> None:
    conn.execute("SELECT pgqueue.queue_create('q')")
    w = pickle.loads(pickle.dumps(writer(dsn, batchSize="3")))
    as_task(0, 0)
    msg = w.write(batches([f"r{i}" for i in range(10)], 4))
    assert msg == PgQueueCommit(0, 0, 10)
    assert payloads(conn) == [f"r{i}" for i in range(10)]
    # a NULL payload fails the task and leaves nothing of its partition
    as_task(1, 1)
    with pytest.raises(InvalidArgument, match="NULL in row 5 of partition 1"):
        w.write(iter([pa.record_batch({"payload": pa.array(["a", "b", "c", "d", None])})]))
    assert len(payloads(conn)) == 10
    assert w.write(iter([])) == PgQueueCommit(1, 1, 0)
    w.commit([msg])  # nothing to do in task mode
    assert len(payloads(conn)) == 10


def test_a_bad_row_past_the_first_arrow_batch_is_named_by_its_row_in_the_partition(dsn: str, conn: Conn,
                                                                                  as_task: Any) -> None:
    """Spark hands a partition over in Arrow batches: the row an error names counts from the
    partition's start (empty batches included), not from its batch's; the partition's earlier
    batches, sent already, are rolled back."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    as_task(2, 1)
    parts = [pa.record_batch({"payload": pa.array(values, pa.string())}) for values in (["a", "b", "c"], [], ["d", None])]
    with pytest.raises(InvalidArgument, match="is NULL in row 5 of partition 2:"):
        writer(dsn).write(iter(parts))
    assert payloads(conn) == []


def test_job_mode_publishes_winning_attempts_once(dsn: str, conn: Conn, as_task: Any) -> None:
    conn.execute("SELECT pgqueue.queue_create('q')")
    driver = writer(dsn, commitMode="job", batchSize="2")
    task = pickle.loads(pickle.dumps(driver))  # what an executor gets
    as_task(0, 100)
    lost = task.write(batches(["p0-first-0", "p0-first-1", "p0-first-2"], 2))  # committed, then the task died
    as_task(0, 101)
    won0 = task.write(batches(["p0-0", "p0-1", "p0-2"], 2))
    as_task(1, 102)
    won1 = task.write(batches(["p1-0"], 2))
    assert lost.rows == won0.rows == 3
    assert payloads(conn) == [], "nothing is visible before the job commits"
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 7
    driver.commit([won1, won0])
    assert payloads(conn) == ["p0-0", "p0-1", "p0-2", "p1-0"]
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_publish_log") == 0, "the publication is forgotten"
    # a replayed commit (Spark commits a job once) publishes nothing more: its staging is gone
    with pytest.raises(PgQueueError, match="staged 0 row"):
        driver.commit([won1, won0])
    assert len(payloads(conn)) == 4
    # a failed job: abort discards the staging, nothing is published
    other = writer(dsn, commitMode="job")
    as_task(0, 200)
    done = other.write(batches(["never"], 5))
    other.abort([done, None])
    assert len(payloads(conn)) == 4
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    # a commit without every task's result refuses
    third = writer(dsn, commitMode="job")
    with pytest.raises(PgQueueError, match="refusing to publish"):
        third.commit([done, None])


def test_job_mode_publish_failure_discards_staging(dsn: str, conn: Conn, as_task: Any) -> None:
    conn.execute("SELECT pgqueue.queue_create('q', p_max_size => 2)")
    w = writer(dsn, commitMode="job")
    as_task(0, 1)
    msg = w.write(batches(["a", "b", "c"], 3))
    with pytest.raises(PgQueueError, match="is full"):
        w.commit([msg])
    assert payloads(conn) == []
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0


def lossy_publish(monkeypatch: pytest.MonkeyPatch, *, lose: int, run_lost: bool = True,
                  after: Callable[[Any], None] | None = None) -> list[Any]:
    """Make the writer's spark_publish calls run on the server but lose the reply of the first
    `lose` of them (the connection breaks after the commit; with run_lost False, before the server
    ran them: they answer "not run"); `after(conn)` runs after each call whose reply arrives.
    Returns what the server answered to each call, in order."""
    real, answers = source._scalar, []

    def scalar(c: Any, query: Any, params: dict[str, object]) -> Any:
        if query is _sql.PUBLISH and not run_lost and len(answers) < lose:
            answers.append("not run")
            c.close()
            raise ConnectionFailed("server closed the connection unexpectedly")
        result = real(c, query, params)
        if query is not _sql.PUBLISH:
            return result
        answers.append(result)
        if len(answers) <= lose:
            c.close()
            raise ConnectionFailed("consuming input failed: server closed the connection unexpectedly")
        if after is not None:
            after(c)
        return result

    monkeypatch.setattr(source, "_scalar", scalar)
    return answers


def publish_keys(conn: Conn) -> list[str]:
    return [r[0] for r in conn.execute("SELECT publish_key FROM pgqueue.spark_publish_log ORDER BY 1")]


def test_job_mode_forgets_its_publication_once_the_outcome_is_known(
        dsn: str, conn: Conn, role: SparkRole, as_task: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """spark_publish_log keeps a job-mode write's key only while commit() may publish it again
    (after a lost connection): once spark_publish has answered, the row goes (else the log grew by
    a row per DataFrame write), but for a retry that published (the first attempt may still be
    running); a failure to delete it leaves it and a warning, not a failed job; an unknown
    outcome leaves it for the user to look up."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    caplog.set_level(logging.INFO, logger="pgqueue.spark")

    def job(*values: str) -> tuple[PgQueueWriter, PgQueueCommit]:
        w = writer(dsn, commitMode="job")
        as_task(0, 1)
        return w, w.write(batches(list(values), 5))

    # (a) published: no row of the write stays
    w, msg = job("a")
    w.commit([msg])
    assert payloads(conn) == ["a"]
    assert publish_keys(conn) == []
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "the Spark role may delete its row"
    # (b) the reply of the publish is lost after its commit: the retry answers NULL (published
    # before, under the row the first attempt left), then that row goes; enqueued once
    w, msg = job("b0", "b1")
    with monkeypatch.context() as m:
        answers = lossy_publish(m, lose=1)
        w.commit([msg])
    assert answers == [2, None], "premise: the first attempt published, the retry found its key"
    assert payloads(conn) == ["a", "b0", "b1"]
    assert publish_keys(conn) == []
    assert f"the connection broke after write {w.write_id} was published" in caplog.text
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    # (b') the connection breaks before the first attempt ran: the retry publishes, and keeps its
    # row (a first attempt still running on the server must find the key taken)
    w, msg = job("b2")
    with monkeypatch.context() as m:
        answers = lossy_publish(m, lose=1, run_lost=False)
        w.commit([msg])
    assert answers == ["not run", 1]
    assert payloads(conn) == ["a", "b0", "b1", "b2"]
    assert publish_keys(conn) == [w.write_id]
    conn.execute("DELETE FROM pgqueue.spark_publish_log")
    # (c) the delete fails (no DELETE right; the connection breaks): the job succeeds, the row
    # stays, a warning names the key
    conn.execute(sql.SQL("REVOKE DELETE ON pgqueue.spark_publish_log FROM {}").format(sql.Identifier(role.name)))
    try:
        w, msg = job("c")
        caplog.clear()
        w.commit([msg])
    finally:
        conn.execute(sql.SQL("GRANT DELETE ON pgqueue.spark_publish_log TO {}").format(sql.Identifier(role.name)))
    assert payloads(conn) == ["a", "b0", "b1", "b2", "c"]
    assert publish_keys(conn) == [w.write_id]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and f"publish key {w.write_id} is no longer needed" in warned[0].getMessage()
    assert "permission denied" in warned[0].getMessage()
    conn.execute("DELETE FROM pgqueue.spark_publish_log")

    def cut(c: Any) -> None:  # the server ends the publish's connection once it has answered
        assert one(conn, "SELECT pg_terminate_backend(%s, 10000)", (c.info.backend_pid,))

    w, msg = job("c2")
    caplog.clear()
    with monkeypatch.context() as m:
        answers = lossy_publish(m, lose=0, after=cut)
        w.commit([msg])
    assert answers == [1]
    assert payloads(conn) == ["a", "b0", "b1", "b2", "c", "c2"]
    assert publish_keys(conn) == [w.write_id]
    assert f"publish key {w.write_id} is no longer needed" in caplog.text
    conn.execute("DELETE FROM pgqueue.spark_publish_log")
    # (d) both attempts lose their reply (the first committed): the outcome is unknown to the
    # driver, so the job fails and the row stays, where the error's note says to look
    w, msg = job("d")
    with monkeypatch.context() as m:
        answers = lossy_publish(m, lose=2)
        with pytest.raises(ConnectionFailed) as failed:
            w.commit([msg])
    assert answers == [1, None]
    assert f"look for publish key {w.write_id} in pgqueue.spark_publish_log" in "".join(failed.value.__notes__)
    assert publish_keys(conn) == [w.write_id]
    assert payloads(conn) == ["a", "b0", "b1", "b2", "c", "c2", "d"], "published once"


def test_groups_and_keys_in_task_and_job_mode(dsn: str, conn: Conn, as_task: Any) -> None:
    """Issue 14: groupColumn and keyColumn mean message_create_batch's p_groups and p_keys."""
    conn.execute("SELECT pgqueue.queue_create('q', p_group_concurrency => 1)")
    schema = StructType([StructField("payload", StringType()), StructField("tenant", StringType()),
                         StructField("id", LongType())])

    def rows(values: list[tuple[str, str | None, int | None]]) -> Iterator[pa.RecordBatch]:
        p, g, k = zip(*values, strict=True)
        yield pa.record_batch({"payload": pa.array(p), "tenant": pa.array(g, pa.string()),
                               "id": pa.array(k, pa.int64())})

    for mode in ("task", "job"):
        conn.execute("DELETE FROM pgqueue.message")
        ds = PgQueueDataSource({"dsn": dsn, "queue": "q", "groupColumn": "tenant", "keyColumn": "id",
                                "commitMode": mode, "batchSize": "2"})
        w = pickle.loads(pickle.dumps(ds.writer(schema, False)))
        data = [("a1", "a", 1), ("b1", "b", 2), ("a2", "a", 3), ("a2 again", "a", 3), ("none", None, None)]
        as_task(0, 1)
        first = w.write(rows(data))
        as_task(0, 2)  # a retried task (task mode: enqueued again; job mode: the loser)
        second = w.write(rows(data))
        w.commit([second])
        assert first.rows == second.rows == 5
        got = conn.execute("SELECT convert_from(content, 'UTF8'), group_key, idem_key FROM pgqueue.message "
                           "ORDER BY id").fetchall()
        want = [("a1", "a", "1"), ("b1", "b", "2"), ("a2", "a", "3"), ("none", None, None)]
        # the keyed rows are there once, whatever Spark retried; an unkeyed row as often as it was written
        assert got == (want + [("none", None, None)] if mode == "task" else want), mode
        with Queue(dsn, "q") as queue:
            assert sorted(m.payload for m in queue.dequeue(10, lock_ms=60_000)) == sorted(
                ["a1", "b1", "none"] + (["none"] if mode == "task" else [])), "one of each group at a time"
    # the group of a queue without groups is refused at the write, and nothing is published
    conn.execute("SELECT pgqueue.queue_create('plain')")
    ds = PgQueueDataSource({"dsn": dsn, "queue": "plain", "groupColumn": "tenant", "keyColumn": "id",
                            "commitMode": "job"})
    w = ds.writer(schema, False)
    as_task(0, 1)
    done = w.write(rows([("x", "a", 1)]))
    with pytest.raises(PgQueueError, match='queue "plain" has no message groups'):
        w.commit([done])
    assert payloads(conn, "plain") == []
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    assert one(conn, "SELECT enqueued FROM pgqueue.queue_counters('plain')") == 0  # the refusal counted nothing


def test_schedule_columns_in_task_and_job_mode(dsn: str, conn: Conn, as_task: Any) -> None:
    """A due time, a delay and a priority become the same dequeue_at whether the rows are enqueued
    (task mode: message_create_batch) or staged and published (job mode, and every writeStream:
    spark_stage, spark_publish); a delay as long as the options take saturates at the last due
    time instead of overflowing a bigint."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    schema = StructType([StructField("payload", StringType()), StructField("at", LongType()),
                         StructField("d", DoubleType()), StructField("p", IntegerType())])
    longest = 9223372036854774.0  # seconds: the largest double whose milliseconds a bigint holds
    assert longest * 1000 <= _encode.MAX_DELAY_MS
    batch = pa.record_batch({"payload": pa.array(["at", "hour", "longest", "prio", "now"]),
                             "at": pa.array([1893456000000, None, None, None, None], pa.int64()),
                             "d": pa.array([None, 3600.0, longest, None, None], pa.float64()),
                             "p": pa.array([None, None, None, 7, None], pa.int32())})
    for attempt, mode in enumerate(("task", "job")):
        conn.execute("DELETE FROM pgqueue.message")
        ds = PgQueueDataSource({"dsn": dsn, "queue": "q", "dequeueAtColumn": "at", "delayColumn": "d",
                                "priorityColumn": "p", "commitMode": mode})
        w = ds.writer(schema, False)
        as_task(0, attempt)
        w.commit([w.write(iter([batch]))])
        now = one(conn, "SELECT pgqueue.now_ms()")
        due = dict(conn.execute("SELECT convert_from(content, 'UTF8'), dequeue_at FROM pgqueue.message").fetchall())
        assert (due["at"], due["longest"], due["prio"]) == (1893456000000, 2**63 - 1, -8), mode
        assert now + 3_540_000 < due["hour"] <= now + 3_600_000, mode
        assert now - 60_000 < due["now"] <= now, mode


def test_a_job_mode_publication_refused_with_40001_for_a_kept_key_runs_again(
        dsn: str, owner_dsn: str, conn: Conn, as_task: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyed row whose insert waited while the key's message left within the window fails the
    publication with 40001 (pgqueue._message_insert); the writer publishes again, which finds the
    key kept: the job succeeds, nothing is inserted for that row, the rest is published (a review:
    the job failed and its staging was discarded)."""
    conn.execute("SELECT pgqueue.queue_create('kw', p_key_window_ms => 3600000)")
    schema = StructType([StructField("payload", StringType()), StructField("id", StringType())])
    ds = PgQueueDataSource({"dsn": dsn, "queue": "kw", "keyColumn": "id", "commitMode": "job"})
    w = ds.writer(schema, False)
    as_task(0, 1)
    done = w.write(iter([pa.record_batch({"payload": pa.array(["keyed", "plain"]),
                                          "id": pa.array(["k", None], pa.string())})]))
    real, refusals = source._scalar, []

    def scalar(c: Any, query: Any, params: dict[str, object]) -> Any:
        try:
            return real(c, query, params)
        except SerializationFailure:
            refusals.append(query is _sql.PUBLISH)
            raise

    monkeypatch.setattr(source, "_scalar", scalar)
    with psycopg.connect(owner_dsn) as holder:
        # a producer's open transaction creates the key: the publication's insert waits for it ...
        kid = one(holder, "SELECT pgqueue.message_create('kw', 'first', p_key => 'k')")
        pid = one(holder, "SELECT pg_backend_pid()")
        outcome: list[BaseException | None] = []
        thread = threading.Thread(target=lambda: outcome.append(_run(lambda: w.commit([done]))))
        thread.start()
        deadline = time.monotonic() + 30
        while not one(conn, "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                            "WHERE NOT l.granted AND a.query LIKE %s AND %s = ANY (pg_blocking_pids(a.pid))",
                      ("%spark_publish%", pid)):
            assert time.monotonic() < deadline, "the publication never waited for the key's producer"
            time.sleep(0.02)
        # ... which cancels its message (the key is kept for the window) and commits
        holder.execute("SELECT pgqueue.message_cancel('kw', ARRAY[%s]::bigint[])", (kid,))
        holder.commit()
        thread.join(60)
    assert outcome == [None], outcome
    assert refusals == [True], "the first publication was refused with 40001 and the second went through"
    assert payloads(conn, "kw") == ["plain"]
    assert one(conn, "SELECT count(*) FROM pgqueue.message_key WHERE idem_key = 'k'") == 1
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0


def _run(call: Callable[[], object]) -> BaseException | None:
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
        return exc
    return None


# ---------------------------------------------------------------------------------------
# The batch reader
# ---------------------------------------------------------------------------------------


def test_split_range() -> None:
    assert split_range(1, 10, 3) == [(1, 4), (5, 7), (8, 10)]
    assert split_range(5, 6, 4) == [(5, 5), (6, 6)]
    assert split_range(3, 2, 2) == []


def own_reader(ds: PgQueueDataSource) -> Any:
    """The batch reader Spark asks for a load() without .schema(...): given the source's schema."""
    return ds.reader(ds.schema())


def test_batch_reader_partitions_and_reads(dsn: str, conn: Conn) -> None:
    ids = fill(conn, "q", 10)
    fill(conn, "other", 5)
    reader = own_reader(PgQueueDataSource({"dsn": dsn, "path": "q", "numPartitions": "3", "payloadType": "string"}))
    assert isinstance(reader, PgQueueBatchReader)
    parts = reader.partitions()
    assert len(parts) == 3 and all(isinstance(p, IdRange) for p in parts)
    rows = [r for p in parts for r in pickle.loads(pickle.dumps(reader)).read(p)]
    assert [r[0] for r in rows] == ids
    assert {r[1:4] for r in rows} == {("q", "ready", r[3]) for r in rows}
    assert rows[0][3] == "m0"
    assert list(reader.read(InputPartition(None))) == []
    conn.execute("SELECT pgqueue.queue_create('empty')")
    empty = own_reader(PgQueueDataSource({"dsn": dsn, "path": "empty"}))
    assert [r for p in empty.partitions() for r in empty.read(p)] == []


# ---------------------------------------------------------------------------------------
# The stream reader, as the driver worker and the executors call it
# ---------------------------------------------------------------------------------------


def test_stream_offsets_claims_and_acks(dsn: str, conn: Conn) -> None:
    ids = fill(conn, "q", 10)
    reader = stream_reader(dsn, numPartitions="2")
    try:
        start = reader.initialOffset()
        assert start == {"queue": "q", "consumer": "etl", "seq": 0, "origin": 0}
        assert reader.getDefaultReadLimit() == ReadMaxRows(100_000)
        end = reader.latestOffset(start, ReadMaxRows(4))
        assert end == {"queue": "q", "consumer": "etl", "seq": 1, "origin": 0}
        assert len(reader.partitions(start, end)) == 2
        assert read_batch(reader, start, end) == ids[:4]
        assert read_batch(reader, start, end) == ids[:4], "reading again gives the same rows"
        # claimed messages are invisible to ordinary consumers
        assert [r[0] for r in conn.execute("SELECT id FROM pgqueue.message_dequeue('q', 2, 60000)")] == ids[4:6]
        # the next batch: the previous one is acknowledged, the leased two are not claimable
        end2 = reader.latestOffset(end, ReadMaxRows(100))
        assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE id = ANY (%s)", (ids[:4],)) == 0
        assert read_batch(reader, end, end2) == ids[6:]
        reader.commit(end2)
        assert one(conn, "SELECT count(*) FROM pgqueue.message") == 2
        assert reader.latestOffset(end2, ReadMaxRows(100)) is end2, "no new data: start as it is"
        assert reader.partitions(end2, end2) == []
        assert "_conn" in pickle.loads(pickle.dumps(reader)).__dict__
        assert pickle.loads(pickle.dumps(reader))._conn is None, "a live connection is never pickled"
    finally:
        reader.stop()


def test_stream_replays_after_a_driver_crash(dsn: str, conn: Conn) -> None:
    """Claims made by a driver that died are replayed by the next one: nothing is lost."""
    ids = fill(conn, "q", 9)
    first = stream_reader(dsn)
    start = first.initialOffset()
    end = first.latestOffset(start, ReadMaxRows(3))
    assert read_batch(first, start, end) == ids[:3]
    end2 = first.latestOffset(end, ReadMaxRows(3))  # acks batch 0; claims 3 more; then crash
    first.stop()
    # the restarted query re-runs the batch of its offset log (end -> end2) ...
    second = stream_reader(dsn)
    try:
        assert read_batch(second, end, end2) == ids[3:6]
        # ... or, had the offset log not been written, finds the open claim again
        assert second.latestOffset(end, ReadMaxRows(3)) == end2
        end3 = second.latestOffset(end2, ReadMaxRows(100))
        assert read_batch(second, end2, end3) == ids[6:]
        second.commit(end3)
        assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    finally:
        second.stop()


def test_starting_position_is_fixed_at_the_first_start(dsn: str, conn: Conn) -> None:
    """Issue 17: startingPosition latest / a timestamp; the checkpoint's offsets keep it."""
    old = fill(conn, "q", 3)
    conn.execute("UPDATE pgqueue.message SET created_at = created_at - 60000")

    def reader(consumer: str, position: str) -> PgQueueStreamReader:
        return PgQueueStreamReader(parse({"dsn": dsn, "queue": "q", "consumer": consumer,
                                          "startingPosition": position}, "spark.readStream"))

    def claimed(r: PgQueueStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
        return sorted(row[0] for p in r.partitions(start, end) for row in r.read(p))

    first = reader("late", "latest")
    start = first.initialOffset()
    assert start["seq"] == 0 and start["from"] >= one(conn, "SELECT max(created_at) FROM pgqueue.message")
    assert first.latestOffset(start, ReadAllAvailable()) == start, "nothing enqueued since the start"
    new = fill(conn, "q", 2)
    end = first.latestOffset(start, ReadMaxRows(10))
    assert end == {"queue": "q", "consumer": "late", "seq": 1, "from": start["from"], "origin": 0}
    assert claimed(first, start, end) == new
    first.commit(end)
    first.stop()
    # a restart from the checkpoint (offsets given back by Spark) keeps the first start's position,
    # whatever the option says now
    again = reader("late", "earliest")
    more = fill(conn, "q", 1)
    after = again.latestOffset(end, ReadMaxRows(10))
    assert after == {"queue": "q", "consumer": "late", "seq": 2, "from": start["from"], "origin": 0}
    assert claimed(again, end, after) == more
    again.commit(after)
    again.stop()
    # the older messages were left for other consumers
    assert [r[0] for r in conn.execute("SELECT id FROM pgqueue.message ORDER BY id")] == old
    # a timestamp (ISO 8601 with a zone), and earliest (an offset without "from")
    when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=30)
    stamp = reader("stamp", when.isoformat())
    s0 = stamp.initialOffset()
    assert s0["from"] == (when - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(milliseconds=1)
    assert stamp.latestOffset(s0, ReadMaxRows(10)) == s0, "the old messages are older than 30 s"
    stamp.stop()
    first_ever = reader("all", "earliest")
    e0 = first_ever.initialOffset()
    assert e0 == {"queue": "q", "consumer": "all", "seq": 0, "origin": 0}
    e1 = first_ever.latestOffset(e0, ReadMaxRows(10))
    assert e1 == {"queue": "q", "consumer": "all", "seq": 1, "origin": 0}
    assert claimed(first_ever, e0, e1) == old
    first_ever.stop()


def test_one_query_per_consumer(dsn: str, conn: Conn) -> None:
    fill(conn, "q", 3)
    first = stream_reader(dsn)
    try:
        first.initialOffset()
        second = stream_reader(dsn)
        with pytest.raises(PgQueueError, match="in use by another session") as exc:
            second.initialOffset()
        assert exc.value.sqlstate == "PQ005"
        with pytest.raises(PgQueueError, match="in use"):
            pgqueue.spark.release(dsn, "q", "etl")
    finally:
        first.stop()
    assert stream_reader(dsn).initialOffset() == {"queue": "q", "consumer": "etl", "seq": 0, "origin": 0}


def test_available_now_stops_at_what_exists(dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "CLAIM_CHUNK", 4)
    ids = fill(conn, "q", 10)
    reader = stream_reader(dsn)
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        later = fill(conn, "q", 5)
        end = reader.latestOffset(start, ReadAllAvailable())  # three claims of at most 4
        assert end["seq"] == 3
        assert read_batch(reader, start, end) == ids
        assert reader.latestOffset(end, ReadAllAvailable()) == end, "the target is reached"
        assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE id = ANY (%s) AND claim_id IS NULL",
                   (later,)) == 5
    finally:
        reader.stop()


def test_available_now_on_an_empty_queue_claims_nothing_enqueued_after_the_start(dsn: str, conn: Conn) -> None:
    """An availableNow query started on an empty queue has nothing to do: messages enqueued
    after its start are left for the next run (it must stop, however busy the producers are)."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    reader = stream_reader(dsn)
    try:
        start = reader.initialOffset()
        reader.prepareForTriggerAvailableNow()
        fill(conn, "q", 3)
        assert reader.latestOffset(start, ReadMaxRows(10)) == start
        assert reader.latestOffset(start, ReadAllAvailable()) == start
    finally:
        reader.stop()
    assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE claim_id IS NULL") == 3


def test_data_loss_is_reported(dsn: str, conn: Conn) -> None:
    ids = fill(conn, "q", 6)
    reader = stream_reader(dsn)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(3))
    reader.stop()  # the query is gone; an administrator releases its claims
    assert pgqueue.spark.release(dsn, "q", "etl") == 3
    again = stream_reader(dsn)
    try:
        with pytest.raises(PgQueueError, match="claim.s. 1..1 .* are gone"):
            again.partitions(start, end)
    finally:
        again.stop()
    lenient = stream_reader(dsn, failOnDataLoss="false")
    try:
        assert lenient.partitions(start, end) == []
        end2 = lenient.latestOffset(end, ReadMaxRows(10))
        assert read_batch(lenient, end, end2) == ids
    finally:
        lenient.stop()


def test_data_loss_in_the_first_micro_batch_is_reported(dsn: str, conn: Conn) -> None:
    """A restart replays the checkpoint's first micro-batch from an initial offset that Spark asks
    for again, computed from the consumer as it is then: claims of that batch acknowledged behind
    the query's back (another query under the same consumer, with a new checkpoint) put it past
    them. The batch starts after its origin instead, so the loss is reported (before, the batch
    ran empty and the query went on); an offset of a checkpoint without an origin is read as
    before."""
    fill(conn, "q", 6)
    crashed = stream_reader(dsn)
    start = crashed.initialOffset()
    end = crashed.latestOffset(start, ReadMaxRows(3))  # batch 0: claim 1, then the query dies
    crashed.stop()
    other = stream_reader(dsn)  # a new checkpoint, the same consumer: it replays claim 1 and acks it
    try:
        o_start = other.initialOffset()
        o_end = other.latestOffset(o_start, ReadMaxRows(10))
        assert o_end["seq"] == 1 and len(read_batch(other, o_start, o_end)) == 3
        other.commit(o_end)
    finally:
        other.stop()
    restarted = stream_reader(dsn)
    try:
        again = restarted.initialOffset()  # what Spark asks for to replay batch 0
        assert again["seq"] == 1 and end["origin"] == 0
        with pytest.raises(PgQueueError, match="claim.s. 1..1 .* are gone"):
            restarted.partitions(again, end)
        # an offset without an origin (a checkpoint of an older version): as before, empty
        assert restarted.partitions({"consumer": "etl", "seq": 1}, {"consumer": "etl", "seq": 1}) == []
    finally:
        restarted.stop()


def test_checkpoint_of_another_consumer_or_ahead(dsn: str, conn: Conn) -> None:
    fill(conn, "q", 2)
    reader = stream_reader(dsn)
    try:
        with pytest.raises(InvalidArgument, match="belongs to consumer 'other'"):
            reader.latestOffset({"consumer": "other", "seq": 0}, ReadMaxRows(1))
        with pytest.raises(PgQueueError, match="start the query with a new checkpoint"):
            reader.latestOffset({"consumer": "etl", "seq": 7}, ReadMaxRows(1))
        # one claim ahead (the consumer's next claim would be 1): refused in words that say what to
        # do, not by spark_ack's 22023 "cannot acknowledge claim 1"
        with pytest.raises(PgQueueError, match="the checkpoint is at claim 1 of consumer 'etl' on queue 'q', but "
                                               "the consumer's last claim is 0"):
            reader.latestOffset({"queue": "q", "consumer": "etl", "seq": 1}, ReadMaxRows(1))
        assert one(conn, "SELECT acked_seq FROM pgqueue.spark_consumers('q')") == 0
    finally:
        reader.stop()


def test_checkpoint_of_another_queue_is_refused_before_it_acknowledges(dsn: str, conn: Conn) -> None:
    """Offsets name their queue. Before, a checkpoint restarted against another queue (the default
    consumer name, spark, is the same on every queue) acknowledged that queue's open claims up to
    its own sequence number: it deleted messages no one had processed (a review). Now each driver
    call refuses such an offset, as one of another consumer, before it changes anything; an
    offset without a queue (a checkpoint written before offsets named it) is still taken."""

    def three_batches(reader: PgQueueStreamReader) -> dict[str, Any]:
        """Run micro-batches 0..2 of two messages each: claims 1 and 2 acknowledged, 3 open."""
        offset = reader.initialOffset()
        for _ in range(3):
            offset = reader.latestOffset(offset, ReadMaxRows(2))
        reader.stop()
        return offset

    def on_other() -> PgQueueStreamReader:
        return PgQueueStreamReader(parse({"dsn": dsn, "queue": "other", "consumer": "etl"}, "spark.readStream"))

    others = fill(conn, "other", 6)
    three_batches(on_other())  # queue other: its micro-batch 2 (claim 3) failed, to be replayed
    fill(conn, "q", 6)
    end = three_batches(stream_reader(dsn))  # queue q's checkpoint, at claim 3
    assert end["seq"] == 3
    # q's checkpoint pointed at queue other by mistake
    wrong = on_other()
    try:
        for call in (lambda: wrong.latestOffset(end, ReadMaxRows(2)), lambda: wrong.partitions(end, end),
                     lambda: wrong.commit(end)):
            with pytest.raises(InvalidArgument, match="the checkpoint belongs to queue 'q', but the query "
                                                      "consumes queue 'other'"):
                call()
        assert [r[0] for r in conn.execute(
            "SELECT m.id FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = 'other' "
            "ORDER BY m.id")] == others[4:], "claim 3 of queue other was not acknowledged"
        assert one(conn, "SELECT acked_seq FROM pgqueue.spark_consumers('other')") == 2
        # an offset of an older checkpoint of queue other, without a queue, is taken as before
        legacy = {"consumer": "etl", "seq": 2}
        resumed = wrong.latestOffset(legacy, ReadMaxRows(2))
        assert (resumed["queue"], resumed["seq"]) == ("other", 3), "its open claim, naming the queue now"
        assert read_batch(wrong, legacy, resumed) == others[4:]
    finally:
        wrong.stop()


def test_stream_rows_match_the_schema(dsn: str, conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('q')")
    Queue(conn, "q").enqueue({"k": "v"})
    reader = stream_reader(dsn, payloadType="json")
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(10))
        (p,) = reader.partitions(start, end)
        (row,) = list(reader.read(p))
        schema = pgqueue.spark.schema_for("json")
        assert len(row) == len(schema.fields)
        named = dict(zip(schema.fieldNames(), row))
        assert (named["status"], named["payload"], named["content_type"], named["attempts"], named["claim_seq"]) == (
            "claimed", '{"k":"v"}', codec.JSON, 1, 1)
    finally:
        reader.stop()


def test_unique_write_ids() -> None:
    a = PgQueueWriter(parse({"dsn": "x", "queue": "q"}, "df.write"), WritePlan("payload", "text"))
    b = PgQueueWriter(parse({"dsn": "x", "queue": "q"}, "df.write"), WritePlan("payload", "text"))
    assert a.write_id != b.write_id and uuid.UUID(a.write_id)


def test_import_pgqueue_never_imports_pyspark() -> None:
    import subprocess
    import sys

    code = ("import sys, pgqueue, pgqueue.client, pgqueue.codec; "
            "assert not [m for m in sys.modules if m.startswith(('pyspark', 'pyarrow', 'py4j'))], sorted(sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_auto_registration_shim(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    # python/ holds the shim; it is packaged only if pyproject's packages include pyspark_pgqueue*
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "python"))
    import pyspark_pgqueue

    assert pyspark_pgqueue.DefaultSource is PgQueueDataSource
    assert PgQueueDataSource.name() == "pgqueue"


# ---------------------------------------------------------------------------------------
# The stream writer, as Spark's tasks and driver call it
# ---------------------------------------------------------------------------------------


def test_stream_writer_publishes_each_micro_batch_once(dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgqueue.spark.source import PgQueueStreamCommit, PgQueueStreamWriter, stream_publish_key

    conn.execute("SELECT pgqueue.queue_create('q')")
    ds = PgQueueDataSource({"dsn": dsn, "queue": "q", "checkpointLocation": "/tmp/ck"})
    schema = StructType([StructField("payload", StringType())])
    driver = ds.streamWriter(schema, False)
    assert isinstance(driver, PgQueueStreamWriter)
    task = pickle.loads(pickle.dumps(driver))
    with pytest.raises(PgQueueError, match="only inside a Spark streaming query"):
        task.write(batches(["x"], 1))

    def as_stream_task(batch: int, partition: int, attempt: int) -> None:
        monkeypatch.setattr(source, "_stream_task_identity", lambda: ("qid", batch, partition, attempt))

    as_stream_task(0, 0, 1)
    lost = task.write(batches(["a0", "a1"], 1))  # staged, then the task died
    as_stream_task(0, 0, 2)
    won0 = task.write(batches(["a0", "a1"], 1))
    as_stream_task(0, 1, 3)
    won1 = task.write(batches(["b0"], 1))
    assert lost == PgQueueStreamCommit("qid", 0, 0, 1, 2)
    assert payloads(conn) == []
    driver.commit([won0, won1], 0)
    assert payloads(conn) == ["a0", "a1", "b0"]
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    # a re-run of batch 0 (a restart before Spark logged it) stages again and publishes nothing
    as_stream_task(0, 0, 7)
    again = task.write(batches(["a0", "a1"], 2))
    driver.commit([again, won1], 0)
    assert payloads(conn) == ["a0", "a1", "b0"]
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    # batch 1: empty, nothing published or remembered; batch 2 forgets batch 0's key
    as_stream_task(1, 0, 8)
    driver.commit([task.write(iter([]))], 1)
    as_stream_task(2, 0, 9)
    driver.commit([task.write(batches(["c0"], 1))], 2)
    assert payloads(conn) == ["a0", "a1", "b0", "c0"]
    assert [r[0] for r in conn.execute("SELECT publish_key FROM pgqueue.spark_publish_log")] == [
        stream_publish_key("qid", 2)]
    # an aborted batch leaves nothing staged; a commit missing a task's result, or with another
    # batch's result, refuses
    as_stream_task(3, 0, 10)
    failed = task.write(batches(["d0"], 1))
    driver.abort([failed, None], 3)
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    with pytest.raises(PgQueueError, match="reported no result"):
        driver.commit([failed, None], 3)
    with pytest.raises(PgQueueError, match="other queries or batches"):
        driver.commit([failed], 4)
    assert payloads(conn) == ["a0", "a1", "b0", "c0"]


def test_a_micro_batch_run_again_by_a_new_driver_stages_under_attempts_of_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver that crashed after its tasks staged micro-batch 4 leaves their rows; a new driver
    (restarted from the checkpoint) runs the batch again, and Spark numbers its task attempts from
    0 again: the attempt a task stages under mixes in the run (Spark's job group, new at every
    start), so the new run's rows never mix with the crashed run's under one attempt number."""
    import pyspark

    class Task:
        def __init__(self, run: str, attempt: int) -> None:
            self.props = {"sql.streaming.queryId": "qid", "streaming.sql.batchId": "4", "spark.jobGroup.id": run}
            self.attempt = attempt

        def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - Spark's name
            return self.props.get(key)

        def taskAttemptId(self) -> int:  # noqa: N802 - Spark's name
            return self.attempt

        def partitionId(self) -> int:  # noqa: N802 - Spark's name
            return 1

    def identity(run: str, attempt: int) -> tuple[str, int, int, int]:
        monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: Task(run, attempt)))
        return source._stream_task_identity()

    crashed, again = identity("run-1", 3), identity("run-2", 3)
    assert crashed[:3] == again[:3] == ("qid", 4, 1)
    assert crashed[3] != again[3], "the same task attempt id of another run is another attempt"
    assert identity("run-1", 3) == crashed and identity("run-1", 4)[3] != crashed[3]


@pytest.mark.parametrize("refusal", [SerializationFailure, DeadlockDetected])
def test_a_stream_publication_refused_with_40001_or_40p01_runs_again_spaced(
        refusal: type[PgQueueError], dsn: str, conn: Conn, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream's micro-batch publication goes through _publish_call as the job mode's does:
    refused with 40001 or 40P01 (rolled back whole), it runs again, up to _PUBLISH_TRIES times,
    waiting _PUBLISH_WAIT then twice that; the last refusal propagates and the staging stays for
    Spark's re-run of the batch."""
    from pgqueue.spark.source import PgQueueStreamWriter

    conn.execute("SELECT pgqueue.queue_create('q')")
    ds = PgQueueDataSource({"dsn": dsn, "queue": "q", "checkpointLocation": "/tmp/ck"})
    driver = ds.streamWriter(StructType([StructField("payload", StringType())]), False)
    assert isinstance(driver, PgQueueStreamWriter)
    task = pickle.loads(pickle.dumps(driver))
    real, runs, waits = source._scalar, [], []
    refuse = [2]  # the first two publications are refused

    def scalar(c: Any, query: Any, params: dict[str, object]) -> Any:
        if query is _sql.PUBLISH:
            runs.append(query)
            if refuse[0] > 0:
                refuse[0] -= 1
                raise refusal("refused for the test", sqlstate="40001" if refusal is SerializationFailure else "40P01")
        return real(c, query, params)

    monkeypatch.setattr(source, "_scalar", scalar)
    # (source.time is the time module: only this thread's waits are the publication's; another
    # thread's sleep, e.g. a loop left by an earlier test, sleeps for real. Patched for every
    # thread, such a loop of sleep(1) spun and filled waits: CI, session 81)
    caller, real_sleep = threading.current_thread(), time.sleep

    def sleep(seconds: float) -> None:
        if threading.current_thread() is caller:
            waits.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(source.time, "sleep", sleep)
    monkeypatch.setattr(source, "_stream_task_identity", lambda: ("qid", 0, 0, 1))
    driver.commit([task.write(batches(["a", "b"], 1))], 0)
    assert (len(runs), waits) == (3, [source._PUBLISH_WAIT, 2 * source._PUBLISH_WAIT])
    assert payloads(conn) == ["a", "b"]
    # refused every time: the refusal propagates after _PUBLISH_TRIES runs, nothing is published
    # and the batch's staging stays (Spark runs the batch again)
    runs.clear()
    refuse[0] = 10
    monkeypatch.setattr(source, "_stream_task_identity", lambda: ("qid", 1, 0, 2))
    with pytest.raises(refusal):
        driver.commit([task.write(batches(["c"], 1))], 1)
    assert len(runs) == source._PUBLISH_TRIES
    assert payloads(conn) == ["a", "b"]
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 1


def test_stream_writer_checks_before_any_task(dsn: str, conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('q')")
    schema = StructType([StructField("payload", StringType())])
    ds = PgQueueDataSource({"dsn": dsn, "queue": "q"})
    with pytest.raises(InvalidArgument, match=r"only appends: overwrite would delete messages .*outputMode"):
        ds.streamWriter(schema, True)
    with pytest.raises(InvalidArgument, match="commitMode='task' does not apply to writeStream"):
        PgQueueDataSource({"dsn": dsn, "queue": "q", "commitMode": "task"}).streamWriter(schema, False)
    assert PgQueueDataSource({"dsn": dsn, "queue": "q", "commitMode": "job"}).streamWriter(schema, False)
    with pytest.raises(InvalidArgument, match="would drop"):
        ds.streamWriter(StructType([*schema.fields, StructField("id", LongType())]), False)


def test_times_are_timestamps_with_epoch_ms_alongside(dsn: str, conn: Conn) -> None:
    """Times read as aware UTC datetimes (Spark TIMESTAMP), as the Python client gives them;
    a priority message has dequeue_at NULL and its priority; the epoch ms stay alongside."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    conn.execute("SELECT pgqueue.message_create('q', 'at', 1893456000123)")           # 2030-01-01
    conn.execute("SELECT pgqueue.message_create('q', 'prio', pgqueue.priority_dequeue_at(7))")
    conn.execute("SELECT pgqueue.message_create('q', 'never', 9223372036854775807)")  # past year 9999
    reader = own_reader(PgQueueDataSource({"dsn": dsn, "path": "q", "payloadType": "string"}))
    schema = pgqueue.spark.schema_for("string")
    rows = {r[3]: dict(zip(schema.fieldNames(), r)) for p in reader.partitions() for r in reader.read(p)}
    utc = dt.timezone.utc
    at = rows["at"]
    assert at["dequeue_at"] == dt.datetime(2030, 1, 1, 0, 0, 0, 123000, tzinfo=utc)
    assert (at["priority"], at["dequeue_at_ms"], at["status"]) == (None, 1893456000123, "scheduled")
    assert at["created_at"] == dt.datetime(1970, 1, 1, tzinfo=utc) + dt.timedelta(milliseconds=at["created_at_ms"])
    assert abs(at["created_at"] - dt.datetime.now(utc)) < dt.timedelta(minutes=5)
    assert (rows["prio"]["dequeue_at"], rows["prio"]["priority"], rows["prio"]["dequeue_at_ms"]) == (None, 7, -8)
    assert rows["never"]["dequeue_at"] == dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=utc)
    assert rows["never"]["dequeue_at_ms"] == 2**63 - 1
    assert schema["dequeue_at"].dataType == TimestampType() and schema["dequeue_at_ms"].dataType == LongType()


def test_id_filters_are_pushed_down_and_bound_the_rows_read(dsn: str, conn: Conn) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    from pgqueue.spark.source import PgQueuePushdownReader

    ids = fill(conn, "q", 100)
    plain = own_reader(PgQueueDataSource({"dsn": dsn, "path": "q"}))
    assert type(plain) is PgQueueBatchReader, "no pushFilters unless asked: Spark refuses it while its switch is off"

    def rows_read(*filters: Any) -> tuple[list[Any], list[int]]:
        reader = own_reader(PgQueueDataSource({"dsn": dsn, "path": "q", "filterPushdown": "true",
                                               "numPartitions": "3"}))
        assert isinstance(reader, PgQueuePushdownReader)
        left = list(reader.pushFilters(list(filters)))
        executor = pickle.loads(pickle.dumps(reader))
        return left, [r[0] for p in reader.partitions() for r in executor.read(p)]

    payload = EqualTo(("payload",), b"m95")
    left, got = rows_read(GreaterThan(("id",), ids[89]), payload)
    assert left == [payload] and got == ids[90:], "id > x: only the 10 rows above x are read"
    left, got = rows_read(GreaterThanOrEqual(("id",), ids[10]), LessThan(("id",), ids[20]))
    assert left == [] and got == ids[10:20]
    left, got = rows_read(LessThanOrEqual(("id",), ids[4]), EqualTo(("id",), ids[3]))
    assert left == [] and got == [ids[3]]
    in_ids = In(("id",), (ids[50], ids[52]))
    left, got = rows_read(in_ids)
    assert left == [in_ids] and got == ids[50:53], "IN bounds the range; Spark keeps only the listed ids"
    odd = GreaterThan(("id",), 2.5)
    left, got = rows_read(odd)
    assert left == [odd] and got == ids, "a filter it cannot bound exactly stays with Spark"
    assert rows_read(GreaterThan(("id",), ids[-1]))[1] == []


def test_several_id_filters_only_narrow_the_range_read(dsn: str, conn: Conn) -> None:
    """Spark pushes every conjunct of a filter: a comparison taken over is not checked by Spark
    again, so of two lower (upper) bounds the tighter one holds, whichever comes first, and an IN
    list (left to Spark) does not widen a comparison's bound."""
    from pyspark.sql.datasource import GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    ids = fill(conn, "q", 20)

    def rows_read(*filters: Any) -> tuple[list[Any], list[int]]:
        reader = own_reader(PgQueueDataSource({"dsn": dsn, "path": "q", "filterPushdown": "true"}))
        left = list(reader.pushFilters(list(filters)))
        return left, [r[0] for p in reader.partitions() for r in reader.read(p)]

    above, at_least = GreaterThan(("id",), ids[2]), GreaterThanOrEqual(("id",), ids[10])
    assert rows_read(above, at_least) == rows_read(at_least, above) == ([], ids[10:])
    below, at_most = LessThan(("id",), ids[15]), LessThanOrEqual(("id",), ids[5])
    assert rows_read(below, at_most) == rows_read(at_most, below) == ([], ids[:6])
    listed = In(("id",), (ids[3], ids[8]))
    assert rows_read(listed, GreaterThan(("id",), ids[5])) == ([listed], ids[6:9])
    assert rows_read(listed, LessThan(("id",), ids[5])) == ([listed], ids[3:5])


def test_status_and_time_filters_are_evaluated_by_the_server(dsn: str, conn: Conn) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual

    ids = fill(conn, "q", 20)
    conn.execute("UPDATE pgqueue.message SET dequeue_at = 1893456000000 + id - %s WHERE id > %s",
                 (ids[10], ids[9]))  # ids[10:] scheduled in 2030, 1 ms apart
    conn.execute("SELECT pgqueue.message_dequeue('q', 3, 600000)")  # ids[0:3] leased
    utc = dt.timezone.utc
    t2030 = dt.datetime(2030, 1, 1, tzinfo=utc)

    def rows_read(*filters: Any) -> tuple[list[Any], list[int]]:
        reader = own_reader(PgQueueDataSource({"dsn": dsn, "path": "q", "filterPushdown": "true"}))
        left = list(reader.pushFilters(list(filters)))
        return left, [r[0] for p in reader.partitions() for r in pickle.loads(pickle.dumps(reader)).read(p)]

    assert rows_read(EqualTo(("status",), "leased")) == ([], ids[:3])
    assert rows_read(In(("status",), ["scheduled", "leased"]), EqualTo(("status",), "leased")) == ([], ids[:3])
    assert rows_read(In(("status",), ["ready", None]))[1] == ids[3:10]
    # integer epoch ms: exact, taken over
    assert rows_read(GreaterThanOrEqual(("dequeue_at_ms",), 1893456000005)) == ([], ids[15:])
    assert rows_read(LessThan(("dequeue_at_ms",), 1893456000002), GreaterThan(("dequeue_at_ms",), 1893456000000)) \
        == ([], [ids[11]])
    # timestamps: bounded to the ms around them (a superset), and handed back for Spark to apply exactly
    after = GreaterThan(("dequeue_at",), t2030 + dt.timedelta(microseconds=4500))
    assert rows_read(after) == ([after], ids[14:])
    upto = LessThanOrEqual(("dequeue_at",), t2030 + dt.timedelta(milliseconds=1))
    assert rows_read(upto) == ([upto], ids[:12]), "now-due messages are earlier than 2030"
    made = GreaterThan(("created_at",), dt.datetime.now(utc) + dt.timedelta(hours=1))
    assert rows_read(made) == ([made], [])
    naive = GreaterThan(("created_at",), dt.datetime(2000, 1, 1))
    huge = GreaterThan(("created_at_ms",), 2**63 - 1)
    assert rows_read(naive, huge) == ([naive, huge], ids), "what it cannot bound stays with Spark"


def test_time_filters_at_the_limits_of_a_timestamp_keep_the_rows_spark_keeps(dsn: str, conn: Conn) -> None:
    """A due time past year 9999 (a saturated delay: 2**63 - 1 ms) reads as the last instant a
    TIMESTAMP holds, 9999-12-31 23:59:59.999, and passes Spark's ``dequeue_at <=`` or ``=`` that
    instant; the server compared the raw epoch ms and dropped it (a review). A bound at a limit
    now leaves that side to Spark; one inside the range still bounds the server's rows."""
    from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual

    utc = dt.timezone.utc
    last_ms = 253402300799999  # 9999-12-31 23:59:59.999
    conn.execute("SELECT pgqueue.queue_create('q')")
    far, near, soon = (one(conn, "SELECT pgqueue.message_create('q', 'x'::bytea, p_dequeue_at => %s)", (at,))
                       for at in (2**63 - 1, last_ms, 1893456000000))
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=utc)
    first = dt.datetime(1, 1, 1, tzinfo=utc)

    def rows_read(*filters: Any) -> tuple[list[Any], list[int], dict[str, Any]]:
        reader = own_reader(PgQueueDataSource({"dsn": dsn, "path": "q", "filterPushdown": "true"}))
        left = list(reader.pushFilters(list(filters)))
        got = sorted(r[0] for p in reader.partitions() for r in pickle.loads(pickle.dumps(reader)).read(p))
        return left, got, reader.where

    plain = own_reader(PgQueueDataSource({"dsn": dsn, "path": "q"}))
    rows = {r[0]: r for p in plain.partitions() for r in plain.read(p)}
    assert rows[far][6] == rows[near][6] == last, "both show the last instant"
    for f in (EqualTo(("dequeue_at",), last), LessThanOrEqual(("dequeue_at",), last),
              LessThan(("dequeue_at",), last + dt.timedelta(microseconds=1))):
        left, got, where = rows_read(f)
        assert left == [f] and {far, near} <= set(got), f"{f}: every row Spark keeps is read"
        assert "dequeue_at_hi" not in where
    left, got, where = rows_read(GreaterThanOrEqual(("dequeue_at",), last))
    assert got == [far, near] and where == {"dequeue_at_lo": last_ms}, "a lower bound there still bounds"
    left, got, where = rows_read(LessThan(("dequeue_at",), last - dt.timedelta(milliseconds=1)))
    assert got == [soon] and where == {"dequeue_at_hi": last_ms - 1}, "a bound inside the range still bounds"
    left, got, where = rows_read(GreaterThan(("created_at",), first), LessThanOrEqual(("created_at",), last))
    assert got == [far, near, soon] and where == {}, "both limits: nothing for the server"
