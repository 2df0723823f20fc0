"""Helpers of the Spark tests: the environment of Spark's workers, the check that pyspark and
Java are there, and the local SparkSession. Nothing here imports pyspark at import time."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parent
EXAMPLES = TESTS.parent / "examples"


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
             .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark
