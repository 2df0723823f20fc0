"""A Spark pipeline around pgqueue: enqueue work items from a DataFrame, process them with a
Structured Streaming job, write the results back to PostgreSQL.

    .venv/bin/python examples/spark_pipeline.py                      # a throwaway PostgreSQL
    .venv/bin/python examples/spark_pipeline.py --dsn "dbname=app"   # a database with the extension
    .venv/bin/python examples/spark_pipeline.py --items 100000 --partitions 4

1. A DataFrame of orders (id, amount, currency) is enqueued on the queue "example_orders" in one go
   (commitMode=job: all of it or nothing, exactly once even if Spark retries a task).
2. A streaming query consumes "example_orders" (claims acknowledged when a micro-batch commits),
   converts each amount to EUR, and upserts the results into the table example_order_totals from the
   executors, keyed by the message id: a replayed micro-batch changes nothing, so the results
   are exactly once. trigger(availableNow=True) drains the queue and stops.
3. The script prints what it did and checks that every order got exactly one result.

The same queue could be served by pgqueue workers (``pgqueue worker``) instead of, or next to,
the streaming job: claimed messages are never handed to them, and vice versa.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg

RATES = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17, "CHF": 1.04}

RESULTS_DDL = """
CREATE TABLE example_order_totals (
    message_id bigint PRIMARY KEY,
    order_id   bigint NOT NULL,
    amount_eur numeric(12, 2) NOT NULL,
    batch_id   bigint NOT NULL
)"""


@contextmanager
def database(dsn: str | None) -> Iterator[str]:
    """The given database, or a throwaway server with a database that has the extension."""
    if dsn:
        yield dsn
        return
    from pgqueue.embedded import EmbeddedPostgres

    with EmbeddedPostgres() as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE pipeline")
        target = pg.dsn("pipeline")
        with psycopg.connect(target, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgqueue")
        print(f"throwaway PostgreSQL: {target}")
        yield target


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors run this interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("pgqueue-pipeline")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def enqueue_orders(spark: Any, dsn: str, items: int, partitions: int) -> None:
    from pyspark.sql import functions as F

    currencies = F.element_at(F.array(*[F.lit(c) for c in RATES]), (F.col("id") % len(RATES) + 1).cast("int"))
    orders = (spark.range(1, items + 1, 1, partitions)
              .select(F.col("id").alias("order_id"), ((F.col("id") * 37) % 10_000 / 100).alias("amount"),
                      currencies.alias("currency")))
    (orders.select(F.to_json(F.struct("order_id", "amount", "currency")).alias("payload"))
     .write.format("pgqueue").option("dsn", dsn).option("payloadType", "json")
     .option("commitMode", "job").mode("append").save("example_orders"))


def upsert_results(dsn: str) -> Any:
    """A foreachBatch function: convert on the executors, upsert keyed by message id."""

    def handle(batch: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        rate = F.create_map(*[x for c, r in RATES.items() for x in (F.lit(c), F.lit(r))])
        orders = batch.select(
            F.col("id").alias("message_id"),
            F.from_json("payload", "order_id long, amount double, currency string").alias("o"))
        totals = orders.select("message_id", "o.order_id",
                               F.round(F.col("o.amount") * rate[F.col("o.currency")], 2).alias("amount_eur"))

        def write_partition(rows: Iterator[Any]) -> None:
            import psycopg

            with psycopg.connect(dsn) as conn, conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO example_order_totals VALUES (%s, %s, %s, %s) ON CONFLICT (message_id) DO NOTHING",
                    [(r.message_id, r.order_id, r.amount_eur, batch_id) for r in rows])

        totals.foreachPartition(write_partition)

    return handle


@dataclass(frozen=True)
class Summary:
    """What a run did."""

    enqueued: int
    micro_batches: int
    results: int
    orders: int
    total_eur: Any
    left_on_queue: int

    @property
    def ok(self) -> bool:
        """Every order got exactly one result and the queue is empty."""
        return self.results == self.orders == self.enqueued and self.left_on_queue == 0


def run_pipeline(spark: Any, dsn: str, *, items: int, partitions: int, batch: int,
                 admin_dsn: str | None = None) -> Summary:
    """Enqueue `items` orders, process them with a streaming job, and summarise the results.

    Spark connects with `dsn` (the pgqueue_spark role of docs/grants.sql is enough); the queue
    and the results table are made afresh with `admin_dsn` (default: `dsn`).
    """
    import pgqueue.spark

    pgqueue.spark.register(spark)
    with psycopg.connect(admin_dsn or dsn, autocommit=True) as conn:
        # start afresh: the example's queue and results table only
        conn.execute("SELECT pgqueue.queue_drop('example_orders')")
        conn.execute("SELECT pgqueue.queue_create('example_orders')")
        conn.execute("DROP TABLE IF EXISTS example_order_totals")
        conn.execute(RESULTS_DDL)

    started = time.perf_counter()
    enqueue_orders(spark, dsn, items, partitions)
    print(f"enqueued {items} orders in {time.perf_counter() - started:.1f} s")

    peek = spark.read.format("pgqueue").option("dsn", dsn).option("payloadType", "string").load("example_orders")
    print("queue before processing:", dict(peek.groupBy("status").count().collect()))

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as checkpoint:
        query = (spark.readStream.format("pgqueue").option("dsn", dsn).option("consumer", "totals")
                 .option("payloadType", "string").option("maxMessagesPerBatch", batch)
                 .option("numPartitions", partitions).load("example_orders")
                 .writeStream.foreachBatch(upsert_results(dsn))
                 .option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {query.exception()}")
        batches = sum(1 for p in query.recentProgress if p["numInputRows"])
    print(f"processed the queue in {batches} micro-batch(es), {time.perf_counter() - started:.1f} s")

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*), count(DISTINCT order_id), sum(amount_eur) FROM example_order_totals"
                           ).fetchone()
        left = conn.execute("SELECT ready + scheduled + leased FROM pgqueue.queue_stats('example_orders')").fetchone()
    assert row is not None and left is not None
    summary = Summary(items, batches, int(row[0]), int(row[1]), row[2], int(left[0]))
    print(f"results: {summary.results} rows for {summary.orders} orders, EUR {summary.total_eur}; "
          f"messages left on the queue: {summary.left_on_queue}")
    print("OK: every order processed exactly once" if summary.ok else "MISMATCH")
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dsn", help="database with the pgqueue extension (default: a throwaway server)")
    parser.add_argument("--items", type=int, default=10_000, help="orders to enqueue (default 10000)")
    parser.add_argument("--partitions", type=int, default=2, help="Spark partitions (default 2)")
    parser.add_argument("--batch", type=int, default=4_000, help="messages per micro-batch (default 4000)")
    args = parser.parse_args()

    spark = spark_session()
    try:
        with database(args.dsn) as dsn:
            summary = run_pipeline(spark, dsn, items=args.items, partitions=args.partitions, batch=args.batch)
    finally:
        spark.stop()
    return 0 if summary.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
