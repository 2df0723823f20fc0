"""pgqueue's benchmark suite: reference implementations of the public designs pgqueue learned
from (sql/; seed 000 to seed 004, listed with their articles in docs/design.md), pgbench scripts
(pgbench/), a Python driver for full workflows with seed 002's exactly-once check, depth,
churn, held-xmin, latency and queue_stats benchmarks, and the report (bench/results/ by default;
docs/benchmarks.md when --out names it).

Run ``.venv/bin/python -m bench --help`` from the repository root.
"""
