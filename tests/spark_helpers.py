"""Helpers of the Spark tests: the environment of Spark's workers, the check that pyspark and
Java are there, the local SparkSession, and the least-privilege role (docs/grants.sql's
pgqueue_spark recipe) the tests connect the data source as. Nothing here imports pyspark at
import time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"
GRANTS = TESTS.parent / "docs" / "grants.sql"


def spark_environment() -> None:
    """Point Spark's Python workers at this interpreter, tests/ and examples/; stay on loopback."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(TESTS), str(EXAMPLES), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    if str(EXAMPLES) not in sys.path:
        sys.path.append(str(EXAMPLES))


def require_spark() -> None:
    """Fail (never skip) when pyspark or Java is missing: the README's test command installs them."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        pytest.fail(f"the Spark tests need pyspark and pyarrow ({exc}): run scripts/test.sh, which installs "
                    "python/requirements-spark.txt, or pip install -r python/requirements-spark.txt")
    java_home = os.environ.get("JAVA_HOME")
    if not (shutil.which("java") or (java_home and (Path(java_home) / "bin" / "java").exists())):
        pytest.fail("the Spark tests need Java 17+: apt-get install openjdk-17-jre-headless (scripts/bootstrap.sh does)")


def build_session(tmp: Path) -> Any:
    """A local SparkSession: 2 threads, up to 2 attempts per task, no UI, loopback only."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder
             .master("local[2,2]")
             .appName("pgqueue-tests")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.default.parallelism", "2")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
             .config("spark.local.dir", str(tmp / "local"))
             .config("spark.python.worker.reuse", "true")
             .config("spark.sql.python.filterPushdown.enabled", "true")
             .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@dataclass(frozen=True)
class SparkRole:
    """The role the Spark tests give the data source: docs/grants.sql's pgqueue_spark recipe."""

    name: str
    others: tuple[str, str, str]  # producer, consumer, admin of the rest of the recipe (unused)

    def grant(self, server: Any, dbname: str) -> None:
        """Run docs/grants.sql in `dbname` with this role as -v spark (and the others as the rest).

        Test scaffolding only: the role may also create tables in public and use the tables the
        owner creates there (sinks, logs), which the recipe has nothing to do with.
        """
        producer, consumer, admin = self.others
        proc = subprocess.run(
            ["psql", "-X", "-q", "-d", dbname, "-f", str(GRANTS), "-v", f"producer={producer}",
             "-v", f"consumer={consumer}", "-v", f"admin={admin}", "-v", f"spark={self.name}"],
            env=server.libpq_env(), capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        import psycopg
        from psycopg import sql

        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            conn.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(self.name)))
            conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO {}")
                         .format(sql.Identifier(self.name)))


@contextmanager
def spark_role(server: Any, tag: str) -> Iterator[SparkRole]:
    """Create a LOGIN role for the data source (and NOLOGIN stand-ins for the recipe's other roles)."""
    import psycopg
    from psycopg import sql

    suffix = f"{tag}_{os.getpid()}"
    role = SparkRole(f"pgqueue_spark_{suffix}", (f"pqs_producer_{suffix}", f"pqs_consumer_{suffix}",
                                                   f"pqs_admin_{suffix}"))
    with psycopg.connect(server.admin_dsn, autocommit=True) as conn:
        for name, login in [(role.name, "LOGIN"), *((o, "NOLOGIN") for o in role.others)]:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE ROLE {} " + login).format(sql.Identifier(name)))
    try:
        yield role
    finally:
        with psycopg.connect(server.admin_dsn, autocommit=True) as conn:
            for name in (role.name, *role.others):
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def role_fixtures(tag: str) -> tuple[Any, Any, Any, Any]:
    """The fixtures ``role, dsn, owner_dsn, conn`` of a Spark test module (assign them there).

    ``dsn`` is what the data source connects with: the pgqueue_spark role of docs/grants.sql,
    granted in each test's fresh database; ``owner_dsn`` and ``conn`` (autocommit) are the
    extension owner's, for creating queues and checking results.
    """
    import psycopg

    @pytest.fixture(scope="module")
    def role(pg_server: Any) -> Iterator[SparkRole]:
        with spark_role(pg_server, tag) as r:
            yield r

    @pytest.fixture
    def dsn(pg_server: Any, dbname: str, role: SparkRole) -> str:
        role.grant(pg_server, dbname)
        return str(pg_server.dsn(dbname, user=role.name))

    @pytest.fixture
    def owner_dsn(pg_server: Any, dbname: str) -> str:
        return str(pg_server.dsn(dbname))

    @pytest.fixture
    def conn(owner_dsn: str, dsn: str) -> Iterator[Any]:
        with psycopg.connect(owner_dsn, autocommit=True) as c:
            yield c

    return role, dsn, owner_dsn, conn


def one(conn: Any, query: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> Any:
    """The first column of the first row of a query (which must return one)."""
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def fill(conn: Any, queue: str, n: int) -> list[int]:
    """Create the queue if need be and enqueue n messages m0 .. m<n-1>; their ids."""
    conn.execute("SELECT pgqueue.queue_create(%s, p_if_not_exists => true)", (queue,))
    return [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch(%s, %s)",
                                       (queue, [f"m{i}".encode() for i in range(n)])).fetchall()]


def stream_reader(dsn: str, **options: str) -> Any:
    """A stream reader of queue q for consumer etl, as the driver worker makes it."""
    from pgqueue.spark.source import PgQueueDataSource, PgQueueStreamReader

    ds = PgQueueDataSource({"dsn": dsn, "queue": "q", "consumer": "etl", **options})
    reader = ds.streamReader(ds.schema())
    assert isinstance(reader, PgQueueStreamReader)
    return reader


def read_batch(reader: Any, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
    """Plan on the driver, read on 'executors' (fresh unpickled readers)."""
    import pickle

    from pgqueue.spark.source import ClaimRange

    out = []
    for p in reader.partitions(start, end):
        assert isinstance(p, ClaimRange)
        executor = pickle.loads(pickle.dumps(reader))
        out += [row[0] for row in executor.read(pickle.loads(pickle.dumps(p)))]
    return sorted(out)
