"""The benchmark profiles (how long, how big) and the server configuration.

Three profiles: ``full`` (the numbers in docs/benchmarks.md, about 50 minutes, plus about 12
minutes per available design in the held-snapshot section), ``quick`` (the
same benchmarks shortened, for a noisy or busy machine, about 15 minutes) and ``smoke`` (every
benchmark for a moment on tiny fixtures, every correctness check still run: 6.0 minutes with
pgmq and PgQ installed on a busy machine, 4.4 of them the held section's 6 designs × 4 cases).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

#: Settings of the server the suite starts when no --dsn is given. Durable defaults (fsync,
#: synchronous_commit, full_page_writes on) so that the headline numbers are what a default
#: installation gives; sections that are about CPU or bloat rather than the disk switch
#: synchronous_commit off for their own sessions and say so. WAL is sized so that no
#: checkpoint is forced by volume during a run; autovacuum keeps its defaults.
BENCH_SETTINGS: dict[str, str] = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "shared_buffers": "1GB",
    "max_connections": "100",
    "max_wal_size": "8GB",
    "min_wal_size": "1GB",
    "checkpoint_timeout": "30min",
    "maintenance_work_mem": "256MB",
    "log_min_messages": "warning",
}

#: Server settings shown in the report (whatever server the run used).
REPORTED_SETTINGS = [
    "server_version", "fsync", "synchronous_commit", "full_page_writes", "wal_sync_method",
    "shared_buffers", "work_mem", "maintenance_work_mem", "max_connections", "max_wal_size",
    "checkpoint_timeout", "effective_cache_size", "jit", "autovacuum", "autovacuum_naptime",
    "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_threshold",
    "autovacuum_vacuum_insert_scale_factor", "autovacuum_vacuum_cost_limit",
    "autovacuum_vacuum_cost_delay", "default_transaction_isolation",
]

#: Session options for the sections measured with synchronous_commit off.
SYNC_OFF = "-c synchronous_commit=off"


@dataclass(frozen=True)
class Profile:
    """How long and how big each benchmark is."""

    name: str
    # single operations with pgbench (targets 1-4)
    ops_clients: int = 15
    ops_seconds: int = 6            # -T per run; 0 = use ops_transactions (-t) instead
    ops_transactions: int = 0
    ops_repeats: int = 3
    ops_passes: tuple[str, ...] = ("durable", "sync_off")
    ops_backlog: int = 150_000       # minimum ready messages before a dequeue run
    ops_batch_backlog: int = 400_000
    curve_clients: tuple[int, ...] = (1, 4, 15, 32)
    curve_seconds: int = 4
    curve_transactions: int = 0
    curve_repeats: int = 1
    # the worker end to end (issue 13): `pgqueue worker` processes draining a backlog, the SQL
    # lease cycle at as many pgbench clients, and PgQueuer's throughput mode (seconds per run)
    worker_processes: int = 4
    worker_concurrency: int = 4
    worker_messages: int = 100_000
    worker_repeats: int = 3
    worker_sql_seconds: int = 6
    worker_sql_transactions: int = 0
    pgqueuer_seconds: float = 10.0
    # Python workflows (seed 002's method)
    wf_items: int = 5000
    wf_workers: tuple[int, ...] = (1, 2, 4, 8, 16)
    wf_repeats: int = 1
    # depth (target 5)
    depth_levels: tuple[int, ...] = (1_000, 10_000, 100_000, 1_000_000)
    depth_samples: int = 1000
    depth_warmup: int = 5
    depth_max_seconds: float = 5.0
    # churn (targets 6, 7)
    churn_seconds: int = 300
    churn_window: int = 15
    churn_producers: int = 2
    churn_consumers: int = 4
    churn_backlog: int = 100_000  # consumer processes outrun the producers: it must last the run
    churn_slack: int = 10_000
    held_before: int = 60
    held_hold: int = 120
    held_after: int = 120
    # held snapshots, issue 12's cases a-c for every design (the section "held")
    snap_before: int = 30
    snap_hold: int = 120
    snap_after: int = 30
    snap_producers: int = 5
    snap_consumers: int = 10
    # delete-mode consumers outrun the producers: it must last the run (500,000 ran out in every
    # case of session 84's full run, its consumers at 6,600-7,400 a second, the producers 2,800-3,400)
    snap_backlog: int = 1_000_000
    snap_slack: int = 10_000
    # latency (target 8) and queue_stats (target 9)
    latency_messages: int = 300
    latency_interval: float = 0.02
    stats_messages: int = 1_000_000
    stats_calls: int = 7
    stats_seconds: int = 8
    stats_transactions: int = 0
    stats_repeats: int = 2
    stats_clients: int = 4
    # message groups and the rate limit (issue 14, bench/groups.py)
    groups_messages: int = 150_000       # per queue, throughput runs
    groups_count: int = 10_000
    groups_clients: int = 4
    groups_seconds: int = 5
    groups_transactions: int = 0
    groups_repeats: int = 3
    groups_big: int = 1_000_000          # fairness: the one big group
    groups_small: int = 1000             # fairness: groups of 10
    groups_flat_messages: int = 1_000_000
    groups_flat_groups: int = 100_000
    groups_flat_groups_messages: int = 100_000
    groups_flat_calls: int = 500
    groups_rate: int = 500
    groups_rate_seconds: int = 60

    def with_overrides(self, **kw: Any) -> Profile:
        """Return a copy with the given fields replaced (None values are ignored)."""
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


PROFILES: dict[str, Profile] = {
    "full": Profile(name="full"),
    "quick": Profile(
        name="quick", ops_seconds=3, ops_repeats=2, ops_backlog=80_000, ops_batch_backlog=200_000,
        curve_seconds=2, worker_messages=30_000, worker_repeats=2, worker_sql_seconds=3, pgqueuer_seconds=5.0,
        wf_items=2000, wf_workers=(1, 4, 16), depth_samples=300,
        churn_seconds=60, held_before=20, held_hold=40, held_after=40, churn_window=5,
        snap_before=15, snap_hold=30, snap_after=20, snap_backlog=400_000,
        latency_messages=150, stats_messages=1_000_000, stats_seconds=4, stats_repeats=1,
        groups_messages=60_000, groups_seconds=3, groups_repeats=2, groups_big=200_000,
        groups_flat_messages=200_000, groups_rate_seconds=20,
    ),
    "smoke": Profile(
        name="smoke", ops_clients=4, ops_seconds=0, ops_transactions=25, ops_repeats=1,
        ops_passes=("durable",), ops_backlog=3000, ops_batch_backlog=20_000,
        curve_clients=(1, 4), curve_seconds=0, curve_transactions=20,
        worker_processes=2, worker_messages=300, worker_repeats=1, worker_sql_seconds=0, worker_sql_transactions=20,
        pgqueuer_seconds=0.5,
        wf_items=200, wf_workers=(1, 4), depth_levels=(100, 1000), depth_samples=5,
        depth_warmup=1, depth_max_seconds=1.0, churn_seconds=3, churn_window=1,
        churn_producers=1, churn_consumers=2, churn_backlog=500, churn_slack=500,
        held_before=1, held_hold=2, held_after=1, latency_messages=20, latency_interval=0.01,
        snap_before=2, snap_hold=3, snap_after=4, snap_producers=1, snap_consumers=2, snap_backlog=500,
        snap_slack=500,
        stats_messages=10_000, stats_calls=3, stats_seconds=0, stats_transactions=50,
        stats_repeats=1, stats_clients=2,
        groups_messages=3000, groups_count=100, groups_clients=2, groups_seconds=0, groups_transactions=20,
        groups_repeats=1, groups_big=2000, groups_small=50, groups_flat_messages=3000, groups_flat_groups=500,
        groups_flat_groups_messages=1000, groups_flat_calls=20, groups_rate=100, groups_rate_seconds=2,
    ),
}

#: The benchmark sections, in the order they run.
SECTIONS = ["ops", "profile", "curves", "worker", "workflows", "depth", "churn", "held_xmin", "held", "latency", "stats", "groups"]


@dataclass
class RunOptions:
    """What the command line asked for."""

    profile: Profile
    sections: list[str]
    dsn: str | None
    out: str
    json_out: str
    inject_fault: str | None = None
    settings: dict[str, str] = field(default_factory=dict)
