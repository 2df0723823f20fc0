"""pgqueue.spark's encoding and decoding of payloads in Spark local mode, against what Spark itself
does (a review): content a charset decodes into a lone surrogate reads as NULL, dates and
timestamps past what a Python datetime holds are written, and map keys are spelled as Spark's
``to_json`` spells them.

These tests fail (never skip) when pyspark or Java is missing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import pgqueue.spark
from spark_helpers import build_session, require_spark, role_fixtures, spark_environment

pytestmark = pytest.mark.spark

Conn = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    require_spark()
    spark_environment()
    from pyspark.sql import SparkSession

    ours = SparkSession.getActiveSession() is None  # (another module's session, if it runs first, stays its)
    session = build_session(tmp_path_factory.mktemp("spark"))
    pgqueue.spark.register(session)
    try:
        yield session
    finally:
        if ours:
            session.stop()


role, dsn, owner_dsn, conn = role_fixtures("enc")


def write(df: Any, dsn: str, queue: str) -> None:
    df.write.format("pgqueue").option("dsn", dsn).mode("append").save(queue)


def contents(conn: Conn, queue: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT convert_from(m.content, 'UTF8') FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
        "WHERE q.name = %s ORDER BY m.id", (queue,)).fetchall()]


def test_content_a_charset_decodes_into_a_lone_surrogate_reads_as_null(spark: Any, dsn: str, conn: Conn) -> None:
    """Valid UTF-7 ``+2AA-`` decodes into '\\ud800', which Spark cannot encode to UTF-8: the read
    task failed (UnicodeEncodeError: surrogates not allowed), and a stream replayed the
    micro-batch holding the message forever. It reads as NULL, and the read goes on."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    ok = conn.execute("SELECT pgqueue.message_create('q', convert_to('ok', 'UTF8'), "
                      "p_content_type => 'text/plain; charset=utf-8')").fetchone()
    bad = conn.execute("SELECT pgqueue.message_create('q', '\\x2b3241412d'::bytea, "
                       "p_content_type => 'text/plain; charset=utf-7')").fetchone()
    assert ok is not None and bad is not None
    for payload_type, text in (("string", "ok"), ("json", '"ok"')):
        rows = (spark.read.format("pgqueue").option("dsn", dsn).option("payloadType", payload_type).load("q")
                .select("id", "payload", "content_type").orderBy("id").collect())
        assert [tuple(r) for r in rows] == [(ok[0], text, "text/plain; charset=utf-8"),
                                            (bad[0], None, "text/plain; charset=utf-7")], payload_type


def test_dates_and_timestamps_past_what_a_python_datetime_holds(spark: Any, dsn: str, conn: Conn) -> None:
    """A timestamp near year 1 or 9999 that the session time zone moves past it, and any DATE or
    TIMESTAMP past 9999-12-31, failed the write task with a bare ``OverflowError: date value out of
    range`` naming no column or row. Written now: a date exactly as to_json writes it, a timestamp
    with to_json's year and offset and isoformat()'s rest, as in-range ones are."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    zone = spark.conf.get("spark.sql.session.timeZone")
    try:
        for tz in ("America/New_York", "Asia/Tokyo"):
            spark.conf.set("spark.sql.session.timeZone", tz)
            write(spark.sql("SELECT array(TIMESTAMP'0001-01-01 00:00:00+00:00', TIMESTAMP'9999-12-31 23:59:59+00:00') "
                            "AS payload"), dsn, "q")
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)
    dates = ("date_add(DATE'9999-12-31', 1)", "date_add(DATE'0001-01-01', -1)", "date_add(DATE'0001-01-01', -367)",
             "date_add(DATE'9999-12-31', 36600000)", "DATE'2024-02-29'")
    struct = "named_struct(" + ", ".join(f"'d{i}', {d}" for i, d in enumerate(dates)) + ")"
    write(spark.sql(f"SELECT {struct} AS payload"), dsn, "q")
    write(spark.sql("SELECT named_struct('t', TIMESTAMP'9999-12-31 23:59:59Z' + INTERVAL 2 DAYS, "
                    "'n', TIMESTAMP_NTZ'0001-01-01 00:00:00' - INTERVAL 2 DAYS, "
                    "'m', map(date_add(DATE'9999-12-31', 1), timestamp_micros(-9223372036854775808))) AS payload"),
          dsn, "q")
    new_york, tokyo, written_dates, times = contents(conn, "q")
    assert new_york == '["0000-12-31T19:03:58-04:56:02","9999-12-31T18:59:59-05:00"]'
    assert tokyo == '["0001-01-01T09:18:59+09:18:59","+10000-01-01T08:59:59+09:00"]'
    assert written_dates == spark.sql(f"SELECT to_json({struct})").first()[0]
    assert written_dates == ('{"d0":"+10000-01-01","d1":"0000-12-31","d2":"-0001-12-31","d3":"+110207-05-25",'
                             '"d4":"2024-02-29"}')
    assert times == ('{"t":"+10000-01-02T23:59:59+00:00","n":"0000-12-30T00:00:00",'
                     '"m":{"+10000-01-01":"-290308-12-21T19:59:05.224192+00:00"}}')
    assert spark.sql("SELECT to_json(named_struct('t', timestamp_micros(-9223372036854775808)))").first()[0] == \
        '{"t":"-290308-12-21T19:59:05.224Z"}', "the same instant, as Spark's to_json writes it"


def test_map_keys_as_spark_writes_them(spark: Any, dsn: str, conn: Conn) -> None:
    """Array and struct map keys were written as Python's repr ({"[1, 2]":"x"}, {"{'k': 1}":"x"}),
    DOUBLE and FLOAT keys in Python's spelling (1e+16, nan, inf). They are written as Spark's
    to_json writes them (its keys' Java text)."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    maps = [
        "map(array(1, 2), 'x', array(), 'e')", "map(array('a', NULL, 'q\"'), 'x')", "map(array(array(1), array(2)), 'x')",
        "map(named_struct('k', 1), 'x')", "map(named_struct('k', 'a', 'j', array(1.5D, 1e16D), 'b', true), 'x')",
        "map(named_struct('k', CAST(NULL AS INT)), 'x')",
        "map(1e16D, 'a', double('NaN'), 'b', double('Infinity'), 'c', double('-Infinity'), 'd', 1.0D, 'e', "
        "1e7D, 'f', 1e-4D, 'g', 0.001D, 'h', 123456789.125D, 'i', -2.5D, 'j', 9999999.0D, 'k', 1.7976931348623157e308D, 'l')",
        "map(float(0.1), 'a', float(1e10), 'b', float('NaN'), 'c', 1.5F, 'd', float(3.4028235e38), 'e')",
        "map(true, 1, false, 0)", "map(CAST(7 AS TINYINT), 'x', 9223372036854775807L, 'y')",
        "map(CAST(9.5 AS DECIMAL(10, 2)), 'x')", "map('k\\u00e9', 'x')",
    ]
    struct = "named_struct(" + ", ".join(f"'m{i}', {m}" for i, m in enumerate(maps)) + ")"
    write(spark.sql(f"SELECT {struct} AS payload"), dsn, "q")
    expected = spark.sql(f"SELECT to_json({struct})").first()[0]
    assert '"[1,2]":"x"' in expected and '"1.0E16":"a"' in expected, expected
    assert contents(conn, "q") == [expected]
