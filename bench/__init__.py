"""pgqueue's benchmark suite: reference designs of the seeds (sql/), pgbench scripts
(pgbench/), a Python driver for full workflows with seed 002's exactly-once check, depth,
churn, held-xmin, latency and queue_stats benchmarks, and the report (docs/benchmarks.md).

Run ``.venv/bin/python -m bench --help`` from the repository root.
"""
