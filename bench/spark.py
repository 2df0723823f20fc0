"""Measure enqueue throughput from Spark: N rows written into a queue with 1 and with 2 partitions;
with ``--stream``, Structured Streaming's write and read throughput instead.

Run it from the repository's root (a throwaway PostgreSQL is started when no DSN is given)::

    python -m bench.spark --rows 1000000
    python -m bench.spark --rows 200000 --mode job --dsn "host=... dbname=..."
    python -m bench.spark --stream --rows 1000000 --json bench/results/spark.json

``--stream``: *write* drains N rows from a Parquet directory (``readStream.parquet``,
availableNow, 100,000 rows per micro-batch) into a queue with ``writeStream.format("pgqueue")``
(staged by the tasks, published once per micro-batch by the driver); *read* drains that queue
with ``readStream.format("pgqueue")`` (claims, reads, acknowledges; 100,000 messages per
micro-batch) into a sink that only counts. Each is timed from ``start()`` to the end of the
query, so query start-up is included.

After an untimed warm-up write, each run writes the same DataFrame (cached and counted first, so
that generating the rows is not timed) into an empty queue with ``df.write.format("pgqueue")`` and prints messages per second.
The payload is a ~60-byte JSON object (``payloadType=json``, a string column made by ``to_json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

__all__ = ["Result", "measure", "measure_stream", "main"]


@dataclass(frozen=True)
class Result:
    """One timed write."""

    rows: int
    partitions: int
    mode: str
    seconds: float

    @property
    def per_second(self) -> float:
        """Messages enqueued per second."""
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


def measure(spark: Any, dsn: str, rows: int, partitions: Sequence[int], *, mode: str = "task",
            batch_size: int = 5000, queue: str = "spark_bench", admin_dsn: str | None = None) -> list[Result]:
    """Write ``rows`` messages once per partition count and return the timings.

    The queue is dropped and created again (with ``admin_dsn``, default ``dsn``) before each
    write, so each starts empty, and dropped at the end. Raises AssertionError if a write did
    not enqueue exactly ``rows``.
    """
    from pgqueue.spark import register

    register(spark)
    results = []
    with psycopg.connect(admin_dsn or dsn, autocommit=True) as conn:
        for p in partitions:
            conn.execute("SELECT pgqueue.queue_drop(%s)", (queue,))
            conn.execute("SELECT pgqueue.queue_create(%s)", (queue,))
            conn.execute("VACUUM ANALYZE pgqueue.message")
            df = (spark.range(0, rows, 1, p)
                  .selectExpr("to_json(named_struct('task', id, 'kind', 'resize', 'size', 640)) AS payload")
                  .cache())
            df.count()
            started = time.perf_counter()
            (df.write.format("pgqueue").option("dsn", dsn).option("payloadType", "json")
             .option("commitMode", mode).option("batchSize", batch_size).mode("append").save(queue))
            elapsed = time.perf_counter() - started
            df.unpersist()
            row = conn.execute("SELECT ready FROM pgqueue.queue_stats_exact(%s)", (queue,)).fetchone()  # exact above 10,000
            assert row is not None and row[0] == rows, f"expected {rows} messages, found {row}"
            results.append(Result(rows, p, mode, elapsed))
        conn.execute("SELECT pgqueue.queue_drop(%s)", (queue,))
    return results


def measure_stream(spark: Any, dsn: str, rows: int, partitions: Sequence[int], *, batch: int = 100_000,
                   queue: str = "spark_bench", admin_dsn: str | None = None) -> list[Result]:
    """Stream ``rows`` messages into a queue and out of it once per partition count.

    Returns one Result per (direction, partition count), mode ``stream-write`` or
    ``stream-read``. Raises AssertionError if a query did not move exactly ``rows``.
    """
    from pgqueue.spark import register

    register(spark)
    results = []
    with tempfile.TemporaryDirectory(prefix="pgqueue-bench-") as tmp, \
            psycopg.connect(admin_dsn or dsn, autocommit=True) as conn:
        source = os.path.join(tmp, "source")
        (spark.range(0, rows, 1, 4)
         .selectExpr("to_json(named_struct('task', id, 'kind', 'resize', 'size', 640)) AS payload")
         .write.parquet(source))
        schema = spark.read.parquet(source).schema
        for p in partitions:
            conn.execute("SELECT pgqueue.queue_drop(%s)", (queue,))
            conn.execute("SELECT pgqueue.queue_create(%s)", (queue,))
            conn.execute("VACUUM ANALYZE pgqueue.message")
            per_file = max(1, 4 * batch // rows)  # about `batch` rows per micro-batch
            started = time.perf_counter()
            query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", per_file).parquet(source)
                     .repartition(p).writeStream.format("pgqueue").option("dsn", dsn)
                     .option("payloadType", "json").option("checkpointLocation", os.path.join(tmp, f"w{p}"))
                     .trigger(availableNow=True).start(queue))
            query.awaitTermination()
            results.append(Result(rows, p, "stream-write", time.perf_counter() - started))
            assert query.exception() is None, query.exception()
            row = conn.execute("SELECT ready FROM pgqueue.queue_stats_exact(%s)", (queue,)).fetchone()  # exact above 10,000
            assert row is not None and row[0] == rows, f"expected {rows} messages, found {row}"

            counted: list[int] = []
            started = time.perf_counter()
            query = (spark.readStream.format("pgqueue").option("dsn", dsn).option("consumer", f"bench{p}")
                     .option("maxMessagesPerTrigger", batch).option("numPartitions", p).load(queue)
                     .writeStream.foreachBatch(lambda df, _id: counted.append(df.count()))
                     .option("checkpointLocation", os.path.join(tmp, f"r{p}"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            results.append(Result(rows, p, "stream-read", time.perf_counter() - started))
            assert query.exception() is None, query.exception()
            assert sum(counted) == rows, f"read {sum(counted)} of {rows}"
        conn.execute("SELECT pgqueue.queue_drop(%s)", (queue,))
    return results


@contextmanager
def _database(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    from pgqueue.embedded import EmbeddedPostgres

    with EmbeddedPostgres() as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        target = pg.dsn("bench")
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgqueue")
        yield target


def _session(cores: int) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("pgqueue-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.memory", "2g")
             .config("spark.local.dir", tempfile.mkdtemp(prefix="pgqueue-bench-"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark from the command line and print one line per partition count."""
    parser = argparse.ArgumentParser(prog="python -m bench.spark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="messages per write (default 1000000)")
    parser.add_argument("--partitions", default="1,2", help="comma-separated partition counts (default 1,2)")
    parser.add_argument("--mode", choices=("task", "job"), default="task", help="commitMode (default task)")
    parser.add_argument("--batch-size", type=int, default=5000, help="rows per SQL call (default 5000)")
    parser.add_argument("--cores", type=int, default=2, help="Spark local threads (default 2)")
    parser.add_argument("--dsn", help="database with the extension (default: a throwaway server)")
    parser.add_argument("--json", metavar="PATH",
                        help="also save the results as JSON (bench/results/spark.json is rendered into "
                             "the report of `pgqueue bench`)")
    parser.add_argument("--stream", action="store_true",
                        help="measure writeStream and readStream instead (saved under \"stream\" in --json)")
    parser.add_argument("--warmup", type=int, default=20_000,
                        help="rows of an untimed first write per partition count, which starts Spark's "
                             "Python workers (default 20000; 0: none)")
    args = parser.parse_args(argv)
    partitions = [int(p) for p in args.partitions.split(",")]
    spark = _session(args.cores)
    try:
        with _database(args.dsn) as dsn:
            if args.stream:
                if args.warmup:
                    measure_stream(spark, dsn, args.warmup, partitions[:1])
                results = measure_stream(spark, dsn, args.rows, partitions)
            else:
                if args.warmup:
                    measure(spark, dsn, args.warmup, partitions, mode=args.mode, batch_size=args.batch_size)
                results = measure(spark, dsn, args.rows, partitions, mode=args.mode, batch_size=args.batch_size)
    finally:
        spark.stop()
    print(f"{'rows':>10} {'partitions':>10} {'mode':>5} {'seconds':>8} {'messages/s':>11}")
    for r in results:
        print(f"{r.rows:>10} {r.partitions:>10} {r.mode:>5} {r.seconds:>8.2f} {r.per_second:>11,.0f}")
    if args.json:
        saved = {
            "command": "python -m bench.spark " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_end": os.getloadavg()[0],
            "cpus": os.cpu_count(),
            "results": [{"rows": r.rows, "partitions": r.partitions, "mode": r.mode,
                         "seconds": r.seconds, "per_second": r.per_second} for r in results],
        }
        if args.stream:  # beside the batch numbers of the same file, which stay as they are
            previous = {}
            if os.path.exists(args.json):
                with open(args.json) as f:
                    previous = json.load(f)
            saved = {**previous, "stream": saved}
        with open(args.json, "w") as f:
            json.dump(saved, f, indent=2)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
