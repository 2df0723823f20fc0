"""Which options each entry point of the pgqueue data source takes: an option that the entry point
would ignore is refused like a typo, and so is a queue option that names another queue than the
path. Checked where Spark hands the options over (PgQueueDataSource.schema, reader, streamReader,
writer, streamWriter) and in the parser; no JVM and no database (a source that got past its
options would connect, which fails here)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from pgqueue.errors import InvalidArgument
from pgqueue.spark import source
from pgqueue.spark._options import ACCEPTS, parse
from pgqueue.spark.source import PgQueueDataSource

if TYPE_CHECKING:
    from pgqueue.spark._options import Entry

ENTRIES: tuple[Entry, ...] = ("spark.read", "spark.readStream", "df.write", "df.writeStream")
PAYLOAD = StructType([StructField("payload", StringType())])


@pytest.fixture(autouse=True)
def no_database(monkeypatch: pytest.MonkeyPatch) -> None:
    def connect(dsn: str, *, autocommit: bool) -> Any:
        raise AssertionError("the source connected: it took the options")

    monkeypatch.setattr(source, "_connect", connect)


def start(entry: Entry, options: dict[str, str]) -> Any:
    """What Spark calls on the driver for ``entry``, with ``options`` (and a dsn)."""
    ds = PgQueueDataSource({"dsn": "dbname=x", **options})
    if entry == "spark.read":
        return ds.reader(ds.schema())
    if entry == "spark.readStream":
        return ds.streamReader(ds.schema())
    if entry == "df.write":
        return ds.writer(PAYLOAD, False)
    return ds.streamWriter(PAYLOAD, False)


#: (entry point, an option it ignored before: it belongs to other entry points, value)
IGNORED: list[tuple[Entry, str, str]] = [
    # the review's findings
    ("spark.read", "startingPosition", "latest"),
    ("spark.read", "consumer", "etl"),
    ("spark.read", "maxMessagesPerTrigger", "10"),
    ("df.write", "includeDead", "true"),
    ("df.write", "filterPushdown", "true"),
    ("df.write", "numPartitions", "4"),
    # the same kind
    ("spark.read", "maxMessagesPerBatch", "10"),
    ("spark.read", "failOnDataLoss", "false"),
    ("spark.read", "checkpointLocation", "/tmp/ck"),
    ("spark.read", "batchSize", "10"),
    ("spark.read", "commitMode", "job"),
    ("spark.readStream", "includeDead", "true"),
    ("spark.readStream", "filterPushdown", "true"),
    ("spark.readStream", "keyColumn", "k"),
    ("spark.readStream", "checkpointLocation", "/tmp/ck"),
    ("df.write", "minPartitions", "4"),
    ("df.write", "consumer", "etl"),
    ("df.write", "fetchSize", "10"),
    ("df.write", "startingPosition", "latest"),
    ("df.write", "checkpointLocation", "/tmp/ck"),
    ("df.write", "reconnectTimeout", "60"),  # df.write does not reconnect (a task's retry is Spark's)
    ("df.writeStream", "includeDead", "true"),
    ("df.writeStream", "numPartitions", "4"),
    ("df.writeStream", "maxMessagesPerTrigger", "10"),
    ("df.writeStream", "fetchSize", "10"),
]


@pytest.mark.parametrize(("entry", "name", "value"), IGNORED, ids=[f"{e}-{n}" for e, n, _ in IGNORED])
def test_an_entry_point_refuses_an_option_it_would_ignore(entry: Entry, name: str, value: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        start(entry, {"path": "jobs", name.lower(): value})  # Spark passes the names in lower case
    text = str(refused.value)
    said, _, listed = text.partition(" takes: ")
    assert f"option(s) {name} do not apply to " in said and entry in said, text
    assert listed.split(", ")[:4] == ["dsn", "conninfo", "queue", "path"], text


def test_the_refusal_names_the_option_the_entry_point_and_what_it_takes() -> None:
    with pytest.raises(InvalidArgument) as refused:
        parse({"dsn": "x", "path": "jobs", "Consumer": "etl"}, "spark.read")
    assert str(refused.value) == (
        "option(s) consumer do not apply to spark.read (they would be ignored); spark.read of the pgqueue "
        "data source takes: dsn, conninfo, queue, path, payloadType, numPartitions, minPartitions, fetchSize, "
        "includeDead, filterPushdown, reconnectTimeout")
    with pytest.raises(InvalidArgument, match=r"^unknown option\(s\) numPartitons for df.write; df.write of the "
                       "pgqueue data source takes: dsn, "):
        parse({"dsn": "x", "path": "jobs", "numPartitons": "2"}, "df.write")
    # Spark asks schema() of both kinds of read: it takes what either takes, and nothing else
    with pytest.raises(InvalidArgument, match=r"^option\(s\) batchSize do not apply to spark.read or "
                       r"spark.readStream \(they would be ignored\)"):
        PgQueueDataSource({"dsn": "x", "path": "jobs", "batchSize": "5"}).schema()
    PgQueueDataSource({"dsn": "x", "path": "jobs", "consumer": "etl", "includeDead": "true"}).schema()


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_queue_option_must_name_the_queue_of_the_path(entry: Entry) -> None:
    with pytest.raises(InvalidArgument, match="option queue='a' and the path 'b' of load.* name different queues"):
        start(entry, {"queue": "a", "path": "b"})
    with pytest.raises(InvalidArgument, match="options dsn and conninfo are the same setting: give one"):
        start(entry, {"conninfo": "dbname=y", "path": "b"})
    assert parse({"dsn": "x", "queue": "a", "path": "a"}, entry).queue == "a"
    assert parse({"dsn": "x", "conninfo": "x", "path": "a"}, entry).dsn == "x"
    assert parse({"dsn": "x", "queue": "a"}, entry).queue == "a"
    assert parse({"dsn": "x", "path": "b"}, entry).queue == "b"


def test_the_entry_points_are_the_four_of_the_source() -> None:
    assert tuple(ACCEPTS) == ENTRIES


def test_every_documented_option_is_taken_where_it_is_documented() -> None:
    """README "Spark", python/pgqueue/spark/__init__.py, examples/ and bench/spark.py."""
    read = start("spark.read", {"path": "jobs", "numPartitions": "4", "includeDead": "true", "payloadType": "string",
                                "filterPushdown": "true", "fetchSize": "100", "conninfo": "dbname=x"})
    assert (read.opts.num_partitions, read.opts.include_dead, read.opts.payload_type) == (4, True, "string")
    assert start("spark.read", {"path": "jobs", "minPartitions": "3"}).opts.num_partitions == 3
    stream = start("spark.readStream", {"queue": "jobs", "consumer": "etl", "maxMessagesPerTrigger": "10000",
                                        "minPartitions": "2", "payloadType": "json", "fetchSize": "100",
                                        "startingPosition": "latest", "failOnDataLoss": "false"})
    assert (stream.opts.queue, stream.opts.consumer, stream.opts.max_messages_per_batch) == ("jobs", "etl", 10000)
    assert start("spark.readStream", {"path": "jobs", "maxMessagesPerBatch": "5", "numPartitions": "2"}).opts \
        .max_messages_per_batch == 5
    columns = {"payloadColumn": "body", "dequeueAtColumn": "at", "delayColumn": "d", "priorityColumn": "p",
               "groupColumn": "g", "keyColumn": "k"}
    write = parse({"dsn": "x", "path": "jobs", "commitMode": "job", "payloadType": "json", "batchSize": "100",
                   **columns}, "df.write")
    assert (write.commit_mode, write.batch_size, write.key_column) == ("job", 100, "k")
    sink = parse({"dsn": "x", "path": "jobs", "checkpointLocation": "/tmp/ck", "commitMode": "job",
                  "payloadType": "json", "batchSize": "100", **columns}, "df.writeStream")
    assert (sink.queue, sink.group_column) == ("jobs", "g")
    # reconnectTimeout: seconds, 0 (no reconnect) to a day; the reads and writeStream take it
    assert parse({"dsn": "x", "path": "jobs"}, "spark.readStream").reconnect_timeout == 300
    for entry in ("spark.read", "spark.readStream", "df.writeStream"):
        assert parse({"dsn": "x", "path": "jobs", "reconnectTimeout": "0"}, entry).reconnect_timeout == 0
        assert parse({"dsn": "x", "path": "jobs", "ReconnectTimeout": "86400"}, entry).reconnect_timeout == 86400
    for bad in ("-1", "86401", "1.5", "soon"):
        with pytest.raises(InvalidArgument, match="option reconnectTimeout must be"):
            parse({"dsn": "x", "path": "jobs", "reconnectTimeout": bad}, "spark.readStream")


#: (entry point, option): every option of every entry point that has a default (all but the
#: connection string, the queue and Spark's own checkpointLocation). Only a missing option takes
#: the default.
EMPTY: list[tuple[Entry, str]] = [
    (entry, name) for entry in ENTRIES for name in ACCEPTS[entry]
    if name not in ("dsn", "conninfo", "queue", "path", "checkpointLocation")
]


@pytest.mark.parametrize(("entry", "name"), EMPTY, ids=[f"{e}-{n}" for e, n in EMPTY])
def test_an_option_given_empty_is_refused_not_taken_as_its_default(entry: Entry, name: str) -> None:
    """``.option("consumer", os.environ.get("CONSUMER", ""))``: an empty value is refused as a bad
    value is (InvalidArgument, naming the option and the value), not silently the default: the
    shared consumer "spark" could take over another pipeline's claims, commitMode became task,
    startingPosition earliest, a group or key column was dropped."""
    message = f"option {name} must not be empty, got '' (leave the option out to take its default)"
    for key in (name, name.lower()):  # Spark passes the names in lower case
        with pytest.raises(InvalidArgument) as refused:
            start(entry, {"path": "jobs", key: ""})
        assert str(refused.value) == message
        with pytest.raises(InvalidArgument) as refused:
            parse({"dsn": "x", "path": "jobs", key: ""}, entry)
        assert str(refused.value) == message
    if entry in ("spark.read", "spark.readStream"):  # the schema Spark asks of both kinds of read
        with pytest.raises(InvalidArgument, match=f"^option {name} must not be empty"):
            PgQueueDataSource({"dsn": "x", "path": "jobs", name.lower(): ""}).schema()


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_empty_connection_string_or_queue_is_refused_even_beside_its_alias(entry: Entry) -> None:
    """dsn="" beside conninfo, or queue="" beside the path, took the other before."""
    for options, name in [({"dsn": "", "conninfo": "dbname=x", "path": "jobs"}, "dsn"),
                          ({"conninfo": "", "dsn": "dbname=x", "path": "jobs"}, "conninfo"),
                          ({"dsn": "dbname=x", "queue": "", "path": "jobs"}, "queue"),
                          ({"dsn": "dbname=x", "path": ""}, "path")]:
        with pytest.raises(InvalidArgument) as refused:
            parse(options, entry)
        assert str(refused.value) == f"option {name} must not be empty, got ''"


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_blank_connection_string_and_names_ending_in_a_newline_are_refused(entry: Entry) -> None:
    """A dsn of " " or a newline (a file read for it holding just that) was taken and connected to
    libpq's defaults, whatever database the environment names, as an empty one would; a queue
    or consumer name ending in a newline passed the client's check ($ matches before a final
    newline) and was refused only by the server once the query ran (a review)."""
    for options, words in [({"dsn": " ", "path": "jobs"}, "option dsn must not be blank, got ' '"),
                           ({"conninfo": "\n", "path": "jobs"}, "option conninfo must not be blank, got '\\n'"),
                           ({"dsn": "\t \n", "path": "jobs"}, "option dsn must not be blank"),
                           ({"dsn": "dbname=x", "path": "jobs\n"}, "invalid queue name 'jobs\\n'")]:
        with pytest.raises(InvalidArgument, match="^" + re.escape(words)):
            parse(options, entry)
    if entry == "spark.readStream":
        with pytest.raises(InvalidArgument, match=r"^invalid consumer name 'etl\\n'"):
            parse({"dsn": "dbname=x", "path": "jobs", "consumer": "etl\n"}, entry)
    assert parse({"dsn": " dbname=x ", "path": "jobs"}, entry).dsn == " dbname=x "  # only blanks


def test_a_missing_option_still_takes_its_default_and_blanks_stay_refused() -> None:
    stream = parse({"dsn": "x", "path": "jobs"}, "spark.readStream")
    assert (stream.consumer, stream.starting_position, stream.max_messages_per_batch) == ("spark", "earliest", 100_000)
    write = parse({"dsn": "x", "path": "jobs"}, "df.write")
    assert (write.commit_mode, write.payload_column, write.group_column, write.key_column) == \
        ("task", "payload", None, None)
    with pytest.raises(InvalidArgument, match=r"^invalid consumer name '  '"):
        parse({"dsn": "x", "path": "jobs", "consumer": "  "}, "spark.readStream")
    with pytest.raises(InvalidArgument, match=r"^option commitMode must be one of task, job, got '  '"):
        parse({"dsn": "x", "path": "jobs", "commitMode": "  "}, "df.write")
    # blanks were earliest too
    with pytest.raises(InvalidArgument, match=r"^option startingPosition must be earliest, latest, .* got '  '"):
        parse({"dsn": "x", "path": "jobs", "startingPosition": "  "}, "spark.readStream")
    # Spark's own checkpointLocation is Spark's to check
    assert parse({"dsn": "x", "path": "jobs", "checkpointLocation": ""}, "df.writeStream").queue == "jobs"


def test_the_limits_of_names_and_numbers_are_the_documented_ones() -> None:
    """A consumer name of 100 characters is taken and one of 101 refused (the server's limit, said
    before anything connects); batchSize 0 is refused (a chunk of 0 rows never ends a partition);
    the defaults: a snapshot without the dead letters or pushdown, in one partition, 5000 rows per
    fetch and per call."""
    base = {"dsn": "x", "path": "jobs"}
    longest = "c" * 100
    assert parse({**base, "consumer": longest}, "spark.readStream").consumer == longest
    with pytest.raises(InvalidArgument, match=r"^invalid consumer name 'c{101}': 1 to 100 characters"):
        parse({**base, "consumer": longest + "c"}, "spark.readStream")
    assert parse({**base, "batchSize": "1"}, "df.write").batch_size == 1
    assert parse({**base, "batchSize": "100000"}, "df.write").batch_size == 100_000
    for bad in ("0", "100001"):
        with pytest.raises(InvalidArgument, match=f"^option batchSize must be between 1 and 100000, got {bad}$"):
            parse({**base, "batchSize": bad}, "df.write")
    read = parse(base, "spark.read")
    assert (read.include_dead, read.filter_pushdown, read.num_partitions, read.fetch_size) == (False, False, 1, 5_000)
    assert parse(base, "df.write").batch_size == 5_000
