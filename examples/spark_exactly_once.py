"""Exactly once, end to end: a streaming query reads queue "eo_in", transforms each message and
writes the result into queue "eo_out", and its driver is killed (SIGKILL, the whole process
group: Python driver, JVM, Python workers) in the middle of the stream and started again from
its checkpoint. Every input message ends up in "eo_out" exactly once.

    .venv/bin/python examples/spark_exactly_once.py                    # a throwaway PostgreSQL
    .venv/bin/python examples/spark_exactly_once.py --dsn "dbname=app" --items 50000

Why it holds:

* the source (``spark.readStream.format("pgqueue")``) claims a micro-batch's messages before
  Spark records the batch's offset, and deletes them only after Spark has recorded the batch
  as done: after a crash the restarted query runs the unfinished batch again with the same
  messages;
* the sink (``writeStream.format("pgqueue")``) publishes a micro-batch in one transaction under
  the key (query id, batch id) and skips a key published before: the batch that runs again
  after a crash adds nothing if its first run had already published it.

``run`` is the streaming query alone (what gets killed); ``main`` sets up, runs it as a
subprocess, kills it once messages have started to arrive, restarts it, and checks.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from spark_pipeline import database  # examples/ is on the path: this file's folder

IN, OUT, CONSUMER = "eo_in", "eo_out", "eo"


def _count(conn: psycopg.Connection[Any], queue: str) -> int:
    row = conn.execute("SELECT ready + scheduled + leased FROM pgqueue.queue_stats(%s)", (queue,)).fetchone()
    assert row is not None
    return int(row[0])


def setup(admin_dsn: str, items: int) -> None:
    """Create both queues afresh and enqueue `items` JSON orders {"order": i, "amount": i % 100}."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        for queue in (IN, OUT):
            conn.execute("SELECT pgqueue.queue_drop(%s)", (queue,))
            conn.execute("SELECT pgqueue.queue_create(%s)", (queue,))
        conn.execute(
            "SELECT count(*) FROM pgqueue.message_create_batch(%s, (SELECT array_agg(convert_to("
            "json_build_object('order', i, 'amount', i %% 100)::text, 'UTF8') ORDER BY i) "
            "FROM generate_series(0, %s - 1) AS i), p_content_type => 'application/json')", (IN, items))


def run(dsn: str, checkpoint: str, batch: int) -> None:
    """The streaming query: eo_in -> add a 20% tax -> eo_out, until eo_in is drained."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import pgqueue.spark

    spark = (SparkSession.builder.master("local[2]").appName("pgqueue-exactly-once")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    pgqueue.spark.register(spark)
    orders = (spark.readStream.format("pgqueue").option("dsn", dsn).option("consumer", CONSUMER)
              .option("payloadType", "string").option("maxMessagesPerBatch", batch).option("numPartitions", 2)
              .load(IN)
              .selectExpr("from_json(payload, 'order BIGINT, amount BIGINT') AS o"))
    taxed = orders.selectExpr("to_json(named_struct('order', o.order, 'gross', o.amount * 1.2)) AS payload")
    query = (taxed.writeStream.format("pgqueue").option("dsn", dsn).option("payloadType", "json")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(OUT))
    query.awaitTermination()
    spark.stop()
    if query.exception() is not None:
        raise SystemExit(f"the streaming query failed: {query.exception()}")


@dataclass(frozen=True)
class Outcome:
    """What the demonstration saw."""

    items: int
    out_at_kill: int
    out: int
    distinct_orders: int
    left_on_input: int

    @property
    def killed_part_way(self) -> bool:
        """The kill came with some results published and some not: else nothing was shown."""
        return 0 < self.out_at_kill < self.items

    @property
    def ok(self) -> bool:
        """Killed part-way, and afterwards every order in eo_out exactly once, eo_in empty."""
        return self.killed_part_way and self.out == self.distinct_orders == self.items and self.left_on_input == 0


def _start(dsn: str, checkpoint: str, batch: int) -> subprocess.Popen[bytes]:
    # a driver of its own: not the JVM of a SparkSession this process may have (PySpark
    # connects to the gateway named in the environment instead of starting one)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY")}
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "run", "--dsn", dsn,
                             "--checkpoint", checkpoint, "--batch", str(batch)],
                            env=env, start_new_session=True)  # its own process group: killed as a whole


def wait_for_release(conn: psycopg.Connection[Any], deadline: float) -> None:
    """Wait until no session holds the consumer of eo_in (the killed driver's goes with its
    process); RuntimeError past ``deadline`` (time.monotonic()): the wait had none, and a session
    that kept the consumer (another run of the query, say) held the example for good."""
    while conn.execute("SELECT bool_or(active) FROM pgqueue.spark_consumers(%s)", (IN,)).fetchone() == (True,):
        if time.monotonic() > deadline:
            raise RuntimeError(f'another session still holds the consumer of queue "{IN}": stop the query that '
                               "runs on it (pgqueue.spark_consumers names it) and run the example again")
        time.sleep(0.1)


def demonstrate(dsn: str, *, items: int, batch: int, admin_dsn: str | None = None,
                timeout: float = 600) -> Outcome:
    """Set up, run the query in a subprocess, SIGKILL it once output arrives, restart, check."""
    setup(admin_dsn or dsn, items)
    with tempfile.TemporaryDirectory() as checkpoint, psycopg.connect(admin_dsn or dsn, autocommit=True) as conn:
        proc = _start(dsn, checkpoint, batch)
        deadline = time.monotonic() + timeout
        try:
            while _count(conn, OUT) == 0:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the query ended (exit {proc.returncode}) or stalled before any output")
                time.sleep(0.05)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out_at_kill = _count(conn, OUT)
        print(f"killed the driver with {out_at_kill} of {items} results published", flush=True)
        # the killed driver's session (which held the consumer) goes away with its process
        wait_for_release(conn, deadline)
        proc = _start(dsn, checkpoint, batch)
        try:
            status = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the restarted query did not end within the timeout ({timeout:g} s in all)") from None
        finally:
            if proc.poll() is None:  # (not left running after the timeout)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if status != 0:
            raise RuntimeError(f"the restarted query failed (exit {status})")
        out, distinct = conn.execute(
            "SELECT count(*), count(DISTINCT convert_from(m.content, 'UTF8')::json ->> 'order') "
            "FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id WHERE q.name = %s", (OUT,)).fetchone() \
            or (0, 0)
        outcome = Outcome(items, out_at_kill, int(out), int(distinct), _count(conn, IN))
    print(f"after the restart: {outcome.out} results for {outcome.distinct_orders} distinct orders "
          f"({items} enqueued), {outcome.left_on_input} left on {IN}")
    if outcome.ok:
        print("OK: exactly once across the crash")
    elif not outcome.killed_part_way and outcome.out == outcome.distinct_orders == items:
        print("NOT SHOWN: the kill came once every result was published (use more --items or a smaller --batch)")
    else:
        print("MISMATCH")
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=("demo", "run"), default="demo",
                        help="demo (default): the whole demonstration; run: the streaming query alone")
    parser.add_argument("--dsn", help="database with the pgqueue extension (default: a throwaway server)")
    parser.add_argument("--checkpoint", help="run: the query's checkpoint directory")
    parser.add_argument("--items", type=int, default=20_000, help="orders to enqueue (default 20000)")
    parser.add_argument("--batch", type=int, default=2_000, help="messages per micro-batch (default 2000)")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be at least 1")
    if args.command == "demo" and args.items < 2 * args.batch:
        # the driver is killed once the first micro-batch's results are in: with fewer than two
        # batches of orders, every result is in by then, and the crash shows nothing
        parser.error(f"--items must be at least twice --batch ({args.batch}): the driver is killed after the "
                     "first micro-batch, which must not be the last")
    if args.command == "run":
        if not (args.dsn and args.checkpoint):
            parser.error("run needs --dsn and --checkpoint")
        run(args.dsn, args.checkpoint, args.batch)
        return 0
    with database(args.dsn) as dsn:
        return 0 if demonstrate(dsn, items=args.items, batch=args.batch).ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
