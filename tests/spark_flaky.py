"""pgqueue data sources that fail on purpose: the first attempt of write task 0 fails right after
its transaction committed, as a task does whose executor is lost after the write; the stream
writer fails where the table flaky_plan says (a task, or the driver after a publication).
Spark's executors import this module by name (tests/ is on their PYTHONPATH), so it stays
importable on its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
from pyspark import TaskContext

from pgqueue.spark.source import (
    PgQueueCommit,
    PgQueueDataSource,
    PgQueueStreamCommit,
    PgQueueStreamReader,
    PgQueueStreamWriter,
    PgQueueWriter,
)

#: The format name of the failing source.
FLAKY = "pgqueue_flaky"
#: The format name of the failing stream sink.
FLAKY_STREAM = "pgqueue_flaky_stream"


class FlakyWriter(PgQueueWriter):
    """Writes as usual, then fails attempt 0 of partition 0, noting in flaky_log what it wrote."""

    def write(self, iterator: Any) -> PgQueueCommit:
        result = super().write(iterator)
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
            with psycopg.connect(self.opts.dsn, autocommit=True) as conn:
                conn.execute("CREATE TABLE IF NOT EXISTS flaky_log (partition int, attempt int, rows int)")
                conn.execute("INSERT INTO flaky_log VALUES (%s, %s, %s)",
                             (ctx.partitionId(), ctx.attemptNumber(), result.rows))
            raise RuntimeError("injected failure after the write committed")
        return result


class FlakySource(PgQueueDataSource):
    """The pgqueue source with a FlakyWriter, under the format name pgqueue_flaky."""

    @classmethod
    def name(cls) -> str:
        return FLAKY

    def writer(self, schema: Any, overwrite: bool) -> PgQueueWriter:
        base = super().writer(schema, overwrite)
        flaky = FlakyWriter(base.opts, base.plan)
        flaky.write_id = base.write_id
        return flaky


class FlakyStreamWriter(PgQueueStreamWriter):
    """The stream writer failing where the table flaky_plan says, once per row of it.

    ``task``: attempt 0 of partition 0 of micro-batch 0 fails right after its staging committed.
    ``commit``: the driver fails right after publishing micro-batch 1, before Spark records it
    in the checkpoint's commit log (as a driver that crashes there).
    """

    def write(self, iterator: Any) -> PgQueueStreamCommit:
        result = super().write(iterator)
        ctx = TaskContext.get()
        if (ctx is not None and result.batch_id == 0 and ctx.partitionId() == 0 and ctx.attemptNumber() == 0
                and _planned(self.opts.dsn, "task")):
            raise RuntimeError("injected failure after the staging committed")
        return result

    def commit(self, messages: list[Any], batchId: int) -> None:  # noqa: N803
        super().commit(messages, batchId)
        if batchId == 1 and _planned(self.opts.dsn, "commit"):
            raise RuntimeError("injected crash after the publication of micro-batch 1")


def _planned(dsn: str, what: str) -> bool:
    """Take the planned failure ``what`` out of flaky_plan; True if it was there."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS flaky_plan (what text)")
        cur = conn.execute("DELETE FROM flaky_plan WHERE what = %s", (what,))
        return cur.rowcount > 0


class FlakyStreamSource(PgQueueDataSource):
    """The pgqueue source with a FlakyStreamWriter, under the format name pgqueue_flaky_stream."""

    @classmethod
    def name(cls) -> str:
        return FLAKY_STREAM

    def streamWriter(self, schema: Any, overwrite: bool) -> PgQueueStreamWriter:  # noqa: N802
        base = super().streamWriter(schema, overwrite)
        assert isinstance(base, PgQueueStreamWriter)
        return FlakyStreamWriter(base.opts, base.plan)


#: The format name of the source that notes every call Spark makes into it.
SPY = "pgqueue_spy"


class SpySource(PgQueueDataSource):
    """The pgqueue source noting in the table spy_log each method Spark calls (then doing it)."""

    @classmethod
    def name(cls) -> str:
        return SPY

    def _note(self, what: str) -> None:
        with psycopg.connect(self.options["dsn"], autocommit=True) as conn:
            conn.execute("INSERT INTO spy_log VALUES (%s)", (what,))

    def schema(self) -> Any:
        self._note("schema")
        return super().schema()

    def writer(self, schema: Any, overwrite: bool) -> PgQueueWriter:
        self._note(f"writer(overwrite={overwrite})")
        return super().writer(schema, overwrite)


#: The format name of the stream source whose partition reads lose their connection.
FLAKY_READ = "pgqueue_flaky_read"


class FlakyReadStreamReader(PgQueueStreamReader):
    """The stream reader whose partition read, after its 3rd or its 6th row, terminates the
    backends reading claims (its own: run it with one partition) when flaky_plan has a row
    'read@3' or 'read@6' (taken out), noting in flaky_kills how many it ended."""

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        for i, row in enumerate(super().read(partition)):
            yield row
            if i in (2, 5) and _planned(self.opts.dsn, f"read@{i + 1}"):
                with psycopg.connect(self.opts.dsn, autocommit=True) as conn:
                    killed = conn.execute(
                        "SELECT count(*) FILTER (WHERE pg_terminate_backend(a.pid)) FROM pg_stat_activity a "
                        "WHERE a.usename = current_user AND a.pid <> pg_backend_pid() "
                        "AND a.query LIKE '%%pgqueue_spark_claimed%%' AND a.state LIKE 'idle in transaction%%'"
                    ).fetchone()
                    conn.execute("CREATE TABLE IF NOT EXISTS flaky_kills (n bigint)")
                    conn.execute("INSERT INTO flaky_kills VALUES (%s)", (killed[0] if killed else 0,))


class FlakyReadSource(PgQueueDataSource):
    """The pgqueue source with a FlakyReadStreamReader, under the format name pgqueue_flaky_read."""

    @classmethod
    def name(cls) -> str:
        return FLAKY_READ

    def streamReader(self, schema: Any) -> PgQueueStreamReader:  # noqa: N802
        base = super().streamReader(schema)
        assert isinstance(base, PgQueueStreamReader)
        return FlakyReadStreamReader(base.opts)
