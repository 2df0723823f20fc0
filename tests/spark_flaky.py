"""A pgqueue data source whose first attempt of write task 0 fails right after its transaction
committed, as a task does whose executor is lost after the write. Spark's executors import this
module by name (tests/ is on their PYTHONPATH), so it stays importable on its own."""

from __future__ import annotations

from typing import Any

import psycopg
from pyspark import TaskContext

from pgqueue.spark.source import PgQueueCommit, PgQueueDataSource, PgQueueWriter

#: The format name of the failing source.
FLAKY = "pgqueue_flaky"


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
