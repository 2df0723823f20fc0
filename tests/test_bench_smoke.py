"""The benchmark suite's CI smoke: every benchmark runs for a moment and still checks correctness.

Benchmarks are not timed tests: nothing here asserts a number. It asserts that
``python -m bench --smoke`` runs every section to the end and exits 0 with a report, and that
a deliberately broken consumer (one that records a message twice) makes seed 002's
exactly-once check report FAILURE and the suite exit non-zero.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from conftest import Server

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.check import Recorder, exactly_once  # noqa: E402
from bench.config import SECTIONS  # noqa: E402


def _bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_smoke_runs_every_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "report" / "benchmarks.md"
    args = ["--smoke", "--out", str(out)]
    external = os.environ.get("PGQUEUE_TEST_DSN")
    if external:  # the suite's own server otherwise: the path `pgqueue bench --smoke` takes
        args += ["--dsn", external]
    proc = _bench(*args)
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()
    assert "## FAILURE" not in text
    for heading in ("Targets 1-4", "Throughput against clients", "The worker end to end", "Workflows", "Target 5",
                    "Target 6", "Target 7", "Held snapshots", "Target 8", "Target 9",
                    "Message groups and the rate limit"):
        assert heading in text
    results = json.loads(out.with_suffix(".json").read_text())
    assert set(SECTIONS) <= set(results)
    # --render rebuilds the same page from a run's JSON (the repository keeps the page, not the JSON)
    again = tmp_path / "again" / "benchmarks.md"
    rendered = _bench("--render", str(out.with_suffix(".json")), "--out", str(again), timeout=120)
    assert rendered.returncode == 0, rendered.stderr[-4000:]
    assert again.read_text() == text
    assert not results["errors"]
    assert results["workflows"]["ok"]
    assert all(r["ok"] for r in results["churn"].values())
    # the ladders of the profile section, and the churn run with a lowered autovacuum_naptime
    ladders = results["profile"]["ladders"]
    assert set(ladders) == {"create", "dequeue"}
    assert all(step["us"] > 0 for steps in ladders.values() for step in steps)
    assert "piece by piece" in text
    if not external:  # the naptime variant runs only on the suite's own server
        assert results["churn"]["pgqueue_naptime10"]["autovacuum_naptime"] == "10s"
        assert list(results["churn"]) == ["pgqueue", "pgqueue_naptime10", "seed001"]
        assert results["churn"]["seed001"]["autovacuum_naptime"] == "1min"  # reset after the variant's run
    _check_held(results["held"], text)
    _check_peers(results, text)
    _check_groups(results["groups"])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    for png in ("throughput_vs_clients", "worker_end_to_end", "workflows", "dequeue_cost_vs_depth", "churn_throughput", "held_xmin",
                "held_snapshots"):
        assert (out.parent / "img" / f"{png}.png").stat().st_size > 10_000


def _check_peers(results: dict[str, Any], text: str) -> None:
    """Issue 13: the curves ran create, dequeue and the lease cycle for pgqueue and the seeds at every
    client count, and each peer either ran (pgmq, PgQ through pgbench; PgQueuer in its throughput
    mode) or is reported as not available with the reason; the worker section measured `pgqueue
    worker` (with a plain-function and an async def handler), the SQL lease cycle and (when
    installed) PgQueuer in the same run."""
    from bench.ops import CURVE_KEYS, CURVE_PGQUEUER

    cur = results["curves"]
    clients = [str(c) for c in cur["clients"]]
    peers = {"enqueue:pgmq": "pgmq", "enqueue:pgq": "pgq", "dequeue:pgmq": "pgmq", "lease_cycle:pgmq": "pgmq",
             CURVE_PGQUEUER: "pgqueuer"}
    for key in [*CURVE_KEYS, CURVE_PGQUEUER]:
        if key in cur["labels"]:
            assert all(cur["median"][key][c] > 0 for c in clients), key
        else:
            design = peers[key]  # only a peer may be missing, and the report says why
            assert cur["unavailable"][design], key
            assert f"{design}: not available on this server: {cur['unavailable'][design]}" in text
    wk = results["worker"]
    assert wk["ok"], [r for r in wk["runs"] if not r.get("ok")]
    assert wk["median"]["worker"] > 0 and wk["median"]["lease_cycle:pgqueue"] > 0
    assert wk["median"]["lease_ack_fetch:pgqueue"] > 0
    assert wk["median"]["lease_ack_fetch_batch:pgqueue"] > 0 and wk["median"]["dequeue:pgqueue"] > 0
    for key in ("lease_cycle:pgmq", "lease_cycle_batch:pgmq"):  # pgmq's lease mode, or why not
        if key in wk["labels"]:
            assert wk["median"][key] > 0, key
        else:
            assert f"pgmq: not available on this server: {wk['unavailable']['pgmq']}" in text
    assert ("lease mode as the worker runs it, end to end (the worker) vs pgmq read + delete" in text
            and "lease mode as the worker runs it, at the SQL level" in text
            and "vs pgqueue's delete-mode dequeue" in text)
    assert wk["median"]["worker_async"] > 0 and "with an async def no-op handler" in text
    for key in ("worker", "worker_async"):  # the handler on threads, and as a coroutine
        worker_runs = [r for r in wk["runs"] if r["key"] == key]
        assert worker_runs and all(r["exit_codes"] == [0] * wk["processes"] for r in worker_runs), key
    if wk["pgqueuer"]["available"]:
        assert wk["median"]["pgqueuer"] > 0
        assert "worker vs PgQueuer's throughput mode on the same server" in text
        # the like-for-like run: PgQueuer's drain mode on a backlog of the worker's size, as many processes
        assert wk["median"]["pgqueuer_drain"] > 0 and "worker vs PgQueuer's drain mode" in text
        assert all(r["processes"] == wk["processes"] for r in wk["runs"] if r["key"] == "pgqueuer_drain")
    else:
        assert f"PgQueuer: not available on this server: {wk['pgqueuer']['reason']}" in text
    assert "worker vs the SQL lease cycle" in text


def _check_groups(gr: dict[str, Any]) -> None:
    """Issue 14's section measured both queues in both modes without emptying them, served every
    small group, timed both sizes of each axis and counted the rate-limited deliveries."""
    tp = gr["throughput"]
    assert {(r["mode"], r["queue"]) for r in tp["runs"] if r["ok"] and r["tps"] > 0} == {
        (m, q) for m in ("delete", "lease") for q in ("plain", "grouped")}
    assert all(r["left"] > 0 for r in tp["runs"])
    fa = gr["fairness"]
    assert fa["served"] == fa["small"] and fa["last_first"] is not None
    for axis in ("messages", "groups"):
        assert gr["flat"][axis]["small"]["median_ms"] > 0 and gr["flat"][axis]["large"]["buffers"] > 0
    assert gr["rate"]["ok"] and gr["rate"]["delivered"] > 0


def test_pgqueuer_missing_is_reported_not_failed(tmp_path: Path, pg_server: Server) -> None:
    """A Python that cannot import pgqueuer (here: the suite's own without its site-packages) makes
    PgQueuer "not available" in the worker section; the worker and the SQL lease cycle still run."""
    python = tmp_path / "python-without-pgqueuer"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    out = tmp_path / "benchmarks.md"
    proc = _bench("--smoke", "--only", "worker", "--pgqueuer-python", str(python), "--dsn", pg_server.admin_dsn,
                  "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = out.read_text()
    wk = json.loads(out.with_suffix(".json").read_text())["worker"]
    assert not wk["pgqueuer"]["available"] and "cannot be imported" in wk["pgqueuer"]["reason"]
    assert f"PgQueuer: not available on this server: {wk['pgqueuer']['reason']}" in text
    assert wk["ok"] and wk["median"]["worker"] > 0 and "pgqueuer" not in wk["median"]
    assert "## FAILURE" not in text


def _check_held(held: dict[str, Any], text: str) -> None:
    """The held-snapshot section produced its numbers: for pgqueue's two consumers and seed 001
    (and each peer the server has) every case ran, held the horizon back, and gave a free-running
    rate, a slowest-window ratio, a recovery (possibly 'not within the run') and the growth during
    the hold (the control case "0" over the same seconds, nothing held); a peer the server lacks
    says why."""
    from bench.churn import HELD_DESIGNS, HOLD_CASES

    assert list(held["designs"]) == HELD_DESIGNS
    for name, entry in held["designs"].items():
        if not entry["available"]:
            assert name not in ("pgqueue_delete", "pgqueue", "seed001")
            assert entry["reason"] and f"not available on this server: {entry['reason']}" in text
            continue
        assert list(entry["runs"]) == list(HOLD_CASES), name
        for case, r in entry["runs"].items():
            where = f"{name} ({case})"
            assert r["ok"], (where, r["problems"])
            assert r["hold_case"] == case and "start" in r["hold"] and "end" in r["hold"], where
            assert r["held_baseline"] > 0 and r["held_min_ratio"] is not None, where
            assert "recovery_s" in r, where
            assert r["held_produced"] > 0 and r["held_growth_bytes"] is not None, where
            assert r["bytes_per_message"] > 0, where
            held_age = [s["xmin_age"] or 0 for s in r["samples"] if r["hold"]["start"] < s["t"] <= r["hold"]["end"]]
            free_age = [s["xmin_age"] or 0 for s in r["samples"] if s["t"] <= r["hold"]["start"]]
            if case == "0":  # the control holds nothing: its horizon stays younger than case (a)'s
                a = entry["runs"]["a"]
                a_age = [s["xmin_age"] or 0 for s in a["samples"] if a["hold"]["start"] < s["t"] <= a["hold"]["end"]]
                assert held_age and max(held_age) < max(a_age), where
                continue
            assert held_age and max(held_age) > max(free_age or [0]), where  # the horizon was held back
    for case in HOLD_CASES:
        assert f"### ({case}) " in text


def test_held_twin(tmp_path: Path, pg_server: Server) -> None:
    """--held-twin runs the same load beside each held case in a second database: both loads pass
    the exactly-once check, the twin's per-second rates and its ratios are recorded and the report
    shows them."""
    out = tmp_path / "benchmarks.md"
    proc = _bench("--smoke", "--only", "held", "--held-designs", "pgqueue_delete", "--held-cases", "a", "0",
                  "--held-twin", "--dsn", pg_server.admin_dsn, "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(out.with_suffix(".json").read_text())
    assert results["held"]["twin"] is True
    for case in ("a", "0"):
        r = results["held"]["designs"]["pgqueue_delete"]["runs"][case]
        assert r["ok"] and r["twin_check"]["ok"], r["problems"]
        assert sum(r["twin_deq_per_s"]) > 0 and r["twin_baseline_ratio"] > 0
        assert r["twin_min_ratio"] is not None and r["twin_mean_ratio"] is not None
    text = out.read_text()
    assert "vs the twin" in text and "against its twin" in text


def test_twin_analysis() -> None:
    """The twin statistic: a slowdown of the machine, which both loads see, leaves it at 1.0; a
    slowdown of the held load alone shows in full; recovery counts from the end of the hold."""
    from bench.churn import _twin_analysis

    hold = {"start": 10, "end": 19}
    twin = [1000] * 10 + [500] * 10 + [1000] * 10   # the machine at half speed during the hold
    both = _twin_analysis([2 * x for x in twin], twin, hold, smooth=5)
    assert both["twin_baseline_ratio"] == 2.0
    assert both["twin_min_ratio"] == 1.0 and both["twin_mean_ratio"] == 1.0 and both["twin_recovery_s"] == 0
    alone = [1000] * 10 + [700] * 10 + [800] * 3 + [1000] * 7
    held = _twin_analysis(alone, [1000] * 30, hold, smooth=5)
    assert held["twin_min_ratio"] == 0.7 and abs(held["twin_mean_ratio"] - 0.7) < 1e-9
    assert held["twin_recovery_s"] == 1  # 800, 800, 1000, 1000, 1000 from second 21: 0.92


def test_held_backlog_flags_a_run_that_ran_dry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lowest backlog from the hold's start to 5 s after it: zero there means the consumers
    waited for the producers (the rate measured was theirs), and the report says so; an empty
    backlog outside that span does not count."""
    from bench import report
    from bench.churn import _held_backlog

    hold = {"start": 10.0, "end": 20.0}
    samples = [{"t": float(t), "backlog": b} for t, b in
               [(5, 900), (10, 500), (15, 200), (20, 100), (25, 50), (26, 0), (40, 0)]]
    assert _held_backlog(samples, hold, 1000) == {"held_backlog_min": 50, "held_backlog_dry": False}
    # under 2% of the starting backlog: a consumer that caught up with its producers (PgQ's, a
    # tick or two behind them) waits for them as much as one that found nothing
    assert _held_backlog(samples, hold, 5000) == {"held_backlog_min": 50, "held_backlog_dry": True}
    samples[4]["backlog"] = 0
    assert _held_backlog(samples, hold, 1000) == {"held_backlog_min": 0, "held_backlog_dry": True}
    assert _held_backlog(samples, {"start": 10.0}, 1000) == {}

    monkeypatch.setattr(report.plots, "held_snapshots", lambda *args, **kwargs: None)

    def rendered(backlog_min: int) -> str:
        run = {"ok": True, "held_baseline": 100.0, "held_min": 95.0, "held_min_ratio": 0.95, "held_smooth": 5,
               "held_mean_ratio": 1.0, "recovery_s": 0, "after_minute_ratio": 1.0, "held_growth_bytes": 0,
               "held_produced": 10, "held_backlog_min": backlog_min, "check": {"summary": "OK"}}
        held = {"clients": 3, "backlog": 1000, "slack": 100, "before": 10, "hold": 10, "after": 10,
                "cases": {"a": "a case"},
                "designs": {"d": {"label": "d", "available": True, "producers": 1, "consumers": 2,
                                  "runs": {"a": run}}}}
        lines: list[str] = []
        report._held(lines.append, {"held": held}, Path("/nonexistent"), Path("/nonexistent/b.md"))
        return "\n".join(lines)

    assert "the backlog ran out" in rendered(0)
    assert "the backlog ran out" not in rendered(7)


def test_pgqueuer_runs_on_uvloop_when_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """PgQueuer's own benchmark program (tools/benchmark.py) and CLI run on uvloop, which PgQueuer
    pulls in: the suite's runner of its throughput and drain modes does the same when it can."""
    import asyncio
    import types

    from bench import pgqueuer_run

    calls: list[str] = []
    fake = types.ModuleType("uvloop")

    def run(coro: Any) -> Any:
        calls.append("uvloop")
        return asyncio.run(coro)

    fake.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "uvloop", fake)

    async def job() -> dict[str, Any]:
        return {"jobs": 1}

    assert pgqueuer_run._run_loop(job()) == ({"jobs": 1}, "uvloop") and calls == ["uvloop"]
    monkeypatch.setitem(sys.modules, "uvloop", None)  # not importable: asyncio's own loop
    assert pgqueuer_run._run_loop(job()) == ({"jobs": 1}, "asyncio")


def test_worker_bounds_report_the_like_for_like_rows_beside_the_graded_ones() -> None:
    """Issue 13 grades the worker against pgmq's read + delete one message a call and against
    PgQueuer's throughput mode (the issue's own definitions). The worker takes its concurrency's
    worth of messages a call and drains a backlog: pgmq driven the same way (read n, delete n) and
    PgQueuer's drain mode are reported beside each graded row, so a bound met against single calls
    is never read as a lead over the peer used in batches."""
    from bench import report

    med = {"worker": 6000.0, "worker_async": 5600.0, "lease_cycle:pgqueue": 2200.0,
           "lease_ack_fetch:pgqueue": 2600.0, "lease_ack_fetch_batch:pgqueue": 9000.0, "dequeue:pgqueue": 4300.0,
           "lease_cycle:pgmq": 2100.0, "lease_cycle_batch:pgmq": 7200.0, "pgqueuer": 2500.0,
           "pgqueuer_drain": 5000.0}
    wk = {"median": med, "labels": {k: k for k in med}, "processes": 4, "unavailable": {},
          "pgqueuer": {"available": True}}
    rows = {what: (measured, bound, verdict) for _, what, measured, bound, verdict in report._worker_rows(wk)}
    single = [v for what, v in rows.items() if "pgmq one message a call" in what]
    assert [v[:2] for v in single] == [("2.86×", "≥ 2.0×"), ("4.29×", "≥ 2.0×"), ("2.67×", "≥ 2.0×")]
    batched = [v for what, v in rows.items() if "pgmq read + delete in batches of as many" in what]
    assert [v[:2] for v in batched] == [("0.83×", "(reported)"), ("1.25×", "(reported)"), ("0.78×", "(reported)")]
    drain = [v for what, v in rows.items() if "PgQueuer's drain mode" in what]
    assert drain == [("1.20×", "(reported)", "")]
    assert rows["worker vs PgQueuer's throughput mode on the same server (4 processes)"][:2] == ("2.40×", "≥ 1.5×")


def test_ops_bound_of_an_absent_peer_is_listed_not_dropped() -> None:
    """A peer the server lacks leaves its bounds in the summary as not available, not out of it."""
    from bench import report
    from bench.ops import SPECS

    keys = [k for k in SPECS if not k.endswith(":pgmq")]
    ops = {"clients": 4, "labels": {k: k for k in keys}, "unavailable": {"pgmq": "extension \"pgmq\" is not available"},
           "passes": {"durable": {"median": {k: 100.0 for k in keys}}}}
    rows = [r for r in report.summary_rows({"ops": ops}) if "pgmq" in r[1]]
    assert len(rows) == 3 and all(r[2] == "n/a" and r[4] == "not available on this server" for r in rows)


def test_held_bounds_not_graded_when_the_backlog_ran_out() -> None:
    """A held case whose backlog ran out measured the producers' rate: its rate bounds say so
    instead of PASS."""
    from bench import report

    run = {"ok": True, "held_min_ratio": 0.97, "held_smooth": 5, "recovery_s": 0, "held_growth_bytes": 0,
           "held_produced": 10, "bytes_per_message": 100.0, "held_backlog_min": 0}
    held = {"designs": {"pgqueue_delete": {"label": "pgqueue (delete mode)", "runs": {"a": run}}}}
    verdicts = {what: verdict for _, what, _, _, verdict in report._held_rows(held)}
    rate_rows = [v for what, v in verdicts.items() if "growth" not in what]
    assert rate_rows and all("backlog ran out" in v for v in rate_rows)
    run["held_backlog_min"] = 5
    verdicts = {what: verdict for _, what, _, _, verdict in report._held_rows(held)}
    assert all(v == "PASS" for v in verdicts.values())


def test_churn_bounds_not_graded_when_the_backlog_ran_out() -> None:
    """A churn run (targets 6 and 7) whose backlog ran out measured the producers' rate from then
    on (its log says THE BACKLOG RAN OUT): the report said PASS or MISS on it as on any run; its
    rate bounds now say why they are not graded, as the held section's do."""
    from bench import report

    def rows(backlog_min: int) -> dict[str, str]:
        run = {"ok": True, "seconds": 300, "window": 15, "label": "pgqueue", "min_max_ratio": 0.97,
               "size_growth": 1.0, "backlog_min": backlog_min}
        hx = {"ok": True, "recovery_s": 0, "held_min_ratio": 0.9, "backlog_min": backlog_min}
        seed = {**run, "label": "seed 001"}
        results = {"churn": {"pgqueue": run, "pgqueue_naptime10": {**run, "label": "naptime"}, "seed001": seed},
                   "held_xmin": hx}
        return {what: verdict for _, what, _, _, verdict in report.summary_rows(results)}

    dry = rows(0)
    rate_rows = [what for what in dry if "slowest" in what or "recovery" in what]
    assert len(rate_rows) == 5  # pgqueue, the naptime variant, seed 001 (reference), target 7's two
    assert all("backlog ran out" in dry[what] for what in rate_rows)
    assert all("backlog ran out" not in v for what, v in dry.items() if "size" in what)
    fed = rows(500)
    assert not any("backlog ran out" in v for v in fed.values())
    assert [fed[what] for what in rate_rows] == ["PASS", "PASS", "", "PASS", "PASS"]


def test_churn_bounds_not_graded_when_the_backlog_sampled_a_few_messages() -> None:
    """The monitor samples the backlog once a second: a run whose consumers finished what the
    producers made sampled a few messages, not zero (seed 001's smoke run: 2, 43, 2 of 500), and
    churn_dry (zero only) graded it as any run. It now counts as run out under the held section's
    share (DRY_SHARE of the starting backlog); a healthy run and an old run's JSON are graded."""
    from bench import churn, report

    def verdict(**fields: Any) -> str:
        run = {"ok": True, "seconds": 300, "window": 15, "label": "pgqueue", "min_max_ratio": 0.97,
               "size_growth": 1.0, **fields}
        rows = {what: v for _, what, _, _, v in report.summary_rows({"churn": {"pgqueue": run}})}
        return next(v for what, v in rows.items() if "slowest" in what)

    assert verdict(backlog=500, backlog_min=2) == report.CHURN_DRY
    assert verdict(backlog=100_000, backlog_min=int(churn.DRY_SHARE * 100_000)) == report.CHURN_DRY
    assert verdict(backlog=500, backlog_min=400) == "PASS"
    assert verdict(backlog=100_000, backlog_min=90_000) == "PASS"
    assert verdict(backlog=500) == "PASS"  # saved before backlog_min was recorded
    assert verdict() == "PASS"

def test_documented_run_times_and_sections() -> None:
    """--help said the smoke ran "under a minute" (it takes 4-6: bench/config.py, bench/README.md);
    the report's Reproduce block gave the full run's time without the held section's, and
    docs/benchmarks.md's listed the sections of an old suite (no worker, held or groups)."""
    from bench import report
    from bench.cli import _parse

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        _parse(["--help"])
    helptext = " ".join(out.getvalue().split())  # argparse wraps lines
    assert "under a minute" not in helptext and "a few minutes" in helptext
    lines: list[str] = []
    report._machine(lines.append, {"meta": {
        "machine": {"cpu": "?", "nproc": 2, "mem_gb": 1.0, "kernel": "?"}, "settings": {}, "pgbench_version": "?",
        "python": "?", "extension_version": "?", "git": "?", "reloptions": "?", "load_start": 0.0,
        "load_end": 0.0, "embedded": True, "command_full": ".venv/bin/python -m bench",
        "json": "bench/results/benchmarks.json"}})
    block = "\n".join(lines)
    assert "held section" in block and " ".join(SECTIONS) in block
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    reproduce = docs.split("### Reproduce", 1)[1].split("```", 2)[1]
    assert f"# one or more sections: {' '.join(SECTIONS)}\n" in reproduce
    assert "held section" in reproduce


def test_naptime_variant_puts_back_the_servers_own_setting(pg_server: Server) -> None:
    """The churn design pgqueue_naptime10 lowers autovacuum_naptime with ALTER SYSTEM for its run;
    afterwards it RESET the setting, which dropped a value the server's owner had set with ALTER
    SYSTEM (``--dsn ... --churn-designs pgqueue_naptime10``): now that value is set back."""
    import psycopg

    from bench import churn, db

    def auto_conf(conn: psycopg.Connection[Any]) -> str | None:
        row = conn.execute("SELECT setting FROM pg_file_settings WHERE name = 'autovacuum_naptime' "
                           "AND sourcefile LIKE '%postgresql.auto.conf' ORDER BY seqno DESC LIMIT 1").fetchone()
        return None if row is None else str(row[0])

    srv = db.Server(pg_server.admin_dsn)
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        before = auto_conf(conn)  # an external PGQUEUE_TEST_DSN server's own, put back below
        conn.execute("ALTER SYSTEM SET autovacuum_naptime = '30s'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        srv.build_template()
        r = churn.run_churn(srv, "pgqueue_naptime10", seconds=1, window=1, producers=1, consumers=1, backlog=50,
                            slack=50, log=lambda msg: None)
        assert r["ok"] and r["autovacuum_naptime"] == "10s", r["problems"]
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
            assert auto_conf(conn) == "30s"
    finally:
        srv.drop_template()
        _put_naptime_back(pg_server, before)


def _put_naptime_back(pg_server: Server, before: str | None) -> None:
    """Give the test server its postgresql.auto.conf value of autovacuum_naptime back."""
    import psycopg

    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        if before is None:
            conn.execute("ALTER SYSTEM RESET autovacuum_naptime")
        else:
            conn.execute(sql.SQL("ALTER SYSTEM SET autovacuum_naptime = {}").format(sql.Literal(before)))
        conn.execute("SELECT pg_reload_conf()")


def _stub_server_and_sections(monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[str]], list[bool]]:
    """Stub the suite's server and sections: returns the churn designs each run asked for, and a
    list that gets an entry each time a server was started."""
    from contextlib import contextmanager

    from bench import cli, db

    designs: list[list[str]] = []
    started: list[bool] = []

    class Stub:
        def build_template(self) -> None:
            pass

        def settings(self, names: list[str]) -> dict[str, str]:
            return {}

        def message_reloptions(self) -> str:
            return "(none)"

        def extension_version(self) -> str:
            return "?"

    @contextmanager
    def server(dsn: str | None, settings: dict[str, str]) -> Any:
        started.append(True)
        yield Stub()

    def run_section(section: str, srv: Any, profile: Any, fault: Any, churn_designs: list[str], *rest: Any) -> Any:
        designs.append(churn_designs)
        return {}

    monkeypatch.setattr(db, "server", server)
    monkeypatch.setattr(cli, "_run_section", run_section)
    return designs, started


def test_set_naptime_leaves_the_naptime_variant_out(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`--set autovacuum_naptime=...` puts the setting on the suite's own server's command line,
    which ALTER SYSTEM cannot override: the churn section's default pgqueue_naptime10 then failed
    after 5 s and took the whole section (pgqueue's finished run too) with it. Now the default
    leaves that design out, and asked for by name it fails at once, saying why, writing nothing."""
    from bench import cli
    from bench.churn import _alter_naptime

    designs, _ = _stub_server_and_sections(monkeypatch)
    out = str(tmp_path / "benchmarks.md")
    assert cli.main(["--smoke", "--only", "churn", "--out", out]) == 0
    assert cli.main(["--smoke", "--only", "churn", "--set", "autovacuum_naptime=30s", "--out", out]) == 0
    assert designs == [["pgqueue", "pgqueue_naptime10", "seed001"], ["pgqueue", "seed001"]]

    executed: list[str] = []

    class Conn:  # a server whose autovacuum_naptime is on its command line
        def execute(self, query: Any, params: Any = None) -> Any:
            executed.append(query if isinstance(query, str) else repr(query))
            row = ("command line", "30", "s") if "pg_settings" in executed[-1] else ("30s",)
            return type("Cursor", (), {"fetchone": lambda self: row})()

    with pytest.raises(RuntimeError, match="command line"):
        _alter_naptime(Conn(), "10s")  # type: ignore[arg-type]
    assert not any("ALTER SYSTEM" in q for q in executed), executed


def test_set_naptime_spelled_otherwise_or_with_the_variant_asked_for(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """The server takes a setting's name in any case and with - for _ (``-c AUTOVACUUM-NAPTIME=30s``):
    `--set Autovacuum_Naptime=30s` kept pgqueue_naptime10 in the churn section's defaults, where it
    failed and took the section with it. And `--churn-designs ... pgqueue_naptime10` beside `--set
    autovacuum_naptime=...` cannot run: a usage error at once, not a section lost after the rest."""
    from bench import cli

    designs, started = _stub_server_and_sections(monkeypatch)
    out = str(tmp_path / "benchmarks.md")
    for setting in (["--set", "Autovacuum_Naptime=30s"], ["--set=autovacuum-naptime=30s"]):
        assert cli.main(["--smoke", "--only", "churn", *setting, "--out", out]) == 0
    assert designs == [["pgqueue", "seed001"], ["pgqueue", "seed001"]]
    started.clear()
    assert cli.main(["--smoke", "--only", "churn", "--set", "autovacuum_naptime=30s", "--churn-designs",
                     "pgqueue", "pgqueue_naptime10", "--out", out]) == 2
    assert not started


def test_naptime_variant_refuses_what_it_could_not_put_back(pg_server: Server) -> None:
    """PostgreSQL 15 lets a role that is no superuser ALTER SYSTEM a setting it was granted, without
    reading pg_file_settings: the naptime variant then took "nothing set" for the server's own value
    and RESET it afterwards, dropping the owner's. Now it refuses before changing anything, as it
    does for a value in postgresql.auto.conf that ALTER SYSTEM could not write back."""
    import psycopg
    from psycopg.conninfo import make_conninfo

    from bench import churn

    role = f"bench_napper_{os.getpid()}"
    ident = sql.Identifier(role)
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD 'napper'").format(ident))
        conn.execute(sql.SQL("GRANT ALTER SYSTEM ON PARAMETER autovacuum_naptime TO {}").format(ident))
    try:
        with psycopg.connect(make_conninfo(pg_server.admin_dsn, user=role, password="napper", dbname="postgres"),
                             autocommit=True) as conn:
            with pytest.raises(RuntimeError, match="pg_file_settings"):
                churn._naptime_before(conn)
    finally:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("REVOKE ALTER SYSTEM ON PARAMETER autovacuum_naptime FROM {}").format(ident))
            conn.execute(sql.SQL("DROP ROLE {}").format(ident))

    class Conn:  # postgresql.auto.conf edited by hand: a value ALTER SYSTEM refuses
        def execute(self, query: Any, params: Any = None) -> Any:
            return type("Cursor", (), {"fetchone": lambda self: ("abc", "setting could not be applied")})()

    with pytest.raises(RuntimeError, match="abc"):
        churn._naptime_before(Conn())  # type: ignore[arg-type]


def test_naptime_variant_puts_back_the_setting_when_interrupted(monkeypatch: pytest.MonkeyPatch,
                                                                pg_server: Server) -> None:
    """A Ctrl-C or SIGTERM (KeyboardInterrupt, bench.cli) that landed after the ALTER SYSTEM but
    before the run's own try (reading the value in effect, closing the set-up connection) left the
    server at 10 s: nothing put the setting back."""
    import psycopg

    from bench import churn, db

    def auto_conf() -> str | None:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
            row = conn.execute("SELECT setting FROM pg_file_settings WHERE name = 'autovacuum_naptime' AND "
                               "sourcefile LIKE '%postgresql.auto.conf' ORDER BY seqno DESC LIMIT 1").fetchone()
            return None if row is None else str(row[0])

    naptime, seen = churn._naptime, []

    def interrupted(conn: Any) -> str:  # the wait after the SET sees 10s; the next reading is interrupted
        value = naptime(conn)
        if value == "10s":
            seen.append(value)
            if len(seen) == 2:
                raise KeyboardInterrupt
        return value

    monkeypatch.setattr(churn, "_naptime", interrupted)
    srv = db.Server(pg_server.admin_dsn)
    before = auto_conf()
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET autovacuum_naptime = '30s'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        srv.build_template()
        with pytest.raises(KeyboardInterrupt):
            churn.run_churn(srv, "pgqueue_naptime10", seconds=1, window=1, producers=1, consumers=1, backlog=50,
                            slack=50, log=lambda msg: None)
        assert len(seen) == 2 and auto_conf() == "30s"
    finally:
        srv.drop_template()
        _put_naptime_back(pg_server, before)


def test_render_of_json_that_is_not_the_suites_results_is_one_line(tmp_path: Path) -> None:
    """`--render bench/results/spark.json` (bench.spark's results, the one JSON file in
    bench/results/ in git) or any JSON without the suite's "meta" ended in a KeyError traceback,
    exit 1 (the status of a failed benchmark), not the usage error of a file that is not there."""
    for i, text in enumerate([(REPO / "bench" / "results" / "spark.json").read_text(), "[]", '{"churn": {}}']):
        path = tmp_path / f"other{i}.json"
        path.write_text(text)
        proc = _bench("--render", str(path), "--out", str(tmp_path / "out.md"), timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert len(proc.stderr.strip().splitlines()) == 1 and str(path) in proc.stderr, proc.stderr
    readme = " ".join((REPO / "bench" / "README.md").read_text().split())
    assert "1 otherwise, 2 for a usage error" in readme  # it said 0 or 1, nothing else

def test_broken_consumer_is_reported_as_failure(tmp_path: Path, pg_server: Server) -> None:
    out = tmp_path / "benchmarks.md"
    proc = _bench("--smoke", "--only", "workflows", "churn", "--inject-fault", "duplicate",
                  "--dsn", pg_server.admin_dsn, "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-4000:]
    text = out.read_text()
    assert "## FAILURE" in text
    results = json.loads(out.with_suffix(".json").read_text())
    runs = results["workflows"]["runs"]
    assert runs and not any(r["ok"] for r in runs)
    assert all(r["items_per_s"] is None for r in runs)  # a failed check gives no number
    assert all(any(c["duplicates"] for c in r["checks"]) for r in runs)
    assert not any(r["ok"] for r in results["churn"].values())


def test_exactly_once_check() -> None:
    good = [Recorder(), Recorder()]
    good[0].extend([1, 3])
    good[1].extend([2])
    assert exactly_once([1, 2, 3], good).ok

    twice = [Recorder("duplicate"), Recorder()]
    twice[0].extend([1, 3])
    twice[1].extend([2])
    bad = exactly_once([1, 2, 3], twice)
    assert not bad.ok and bad.duplicates == 1 and bad.summary().startswith("FAILURE")

    lost = [Recorder()]
    lost[0].extend([1])
    assert exactly_once([1, 2], lost).missing == 1
    assert exactly_once([1, 2], lost, remaining=[2]).ok          # still queued: fine
    assert not exactly_once([1, 2], lost, remaining=[1, 2]).ok    # delivered and still queued


@pytest.mark.parametrize("section", SECTIONS)
def test_every_section_is_documented_in_help(section: str) -> None:
    """--help lists every section --only takes (argparse's choices alone prove nothing: the list
    the help prints is --only's help text)."""
    import contextlib
    import io

    from bench.cli import _parse

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        _parse(["--help"])
    helptext = " ".join(out.getvalue().split())  # argparse wraps lines
    listed = helptext.split("run only these sections: ", 1)[1].split(" --", 1)[0]
    assert section in listed.split(", ")


def test_spark_section_is_the_render_of_its_results() -> None:
    """docs/benchmarks.md's Spark section, the streaming subsection included (issue 17), is what
    bench/report.py renders from bench/results/spark.json: a re-render gives the same text."""
    from bench import report

    data = json.loads((REPO / "bench" / "results" / "spark.json").read_text())
    lines: list[str] = []
    report._spark(lines.append)
    text = "\n".join(lines)
    assert "### Spark: streaming write and read throughput" in text
    for r in data["stream"]["results"]:
        assert f"| {r['rows']:,} | {r['partitions']} | {r['mode']} | {r['seconds']:.2f} |" in text
    assert text.strip() in (REPO / "docs" / "benchmarks.md").read_text()


def test_pgq_backlog_comes_in_ticker_sized_batches(pg_server: Server) -> None:
    """The held section's PgQ design enqueues its backlog in ticks of the queue's
    ticker_max_count, so its consumer reads batches of that size (one tick after the whole
    backlog made one batch of all of it, and the held rows measured PgQ's producers)."""
    import psycopg

    from bench.churn import Unavailable, _Pgq
    from conftest import admin_execute, drop_database

    admin_execute(pg_server, "CREATE DATABASE bench_pgq_batches")
    try:
        with psycopg.connect(pg_server.dsn("bench_pgq_batches"), autocommit=True) as conn:
            design = _Pgq()
            try:
                design.prepare(conn)
            except Unavailable as exc:  # the suite runs a peer only where the server has it
                pytest.skip(str(exc))
            design.setup(conn, 1200)
            step = conn.execute("SELECT queue_ticker_max_count FROM pgq.queue WHERE queue_name = 'churn'").fetchone()
            assert step is not None and 0 < step[0] < 1200
            sizes, tokens = [], []
            while (got := design.consume_many(conn)) is not None:
                sizes.append(len(got))
                tokens.extend(got)
            assert sorted(tokens) == list(range(1200))  # every event once, in batches no larger than a tick
            assert max(sizes) == step[0] and len(sizes) == -(-1200 // step[0])
    finally:
        drop_database(pg_server, "bench_pgq_batches")


def test_sigterm_stops_the_suite_and_its_server() -> None:
    """SIGTERM (`kill`, `timeout`) ended `python -m bench` at once and left the suite's own
    server running, orphaned (a new user's first hour, session 41): now it stops as Ctrl-C does,
    its server with it, and says that no report was written."""
    # the suite's server runs as the postgres user when the tests run as root: a directory it
    # may enter (pytest's tmp_path is private to root)
    tmp_path = Path(tempfile.mkdtemp(prefix="bench-sigterm-"))
    tmp_path.chmod(0o1777)
    try:
        _sigterm_the_suite(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _sigterm_the_suite(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "bench", "--smoke", "--only", "held"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    head = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the server is up and the section runs
            head.append(line)
            if "section held" in line:
                break
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    rest = "".join(head) + rest
    assert proc.returncode == 130, rest
    assert "interrupted: no report written" in rest
    # the forked clients notice the server is gone (in a moment; a loaded machine: seconds)
    deadline = time.monotonic() + 30
    while (left := _processes_run_from(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == [], f"processes still running from {tmp_path}: {left}"
    assert not any(p.name.startswith("pgqueue-bench-smoke-") for p in tmp_path.iterdir())


def _processes_run_from(tmp_path: Path) -> list[str]:
    """The pids of the server (its directory) and the suite's forked clients (their environment)."""
    left = []
    for proc_dir in Path("/proc").glob("[0-9]*"):
        try:
            if str(tmp_path).encode() in (proc_dir / "cmdline").read_bytes() + (proc_dir / "environ").read_bytes():
                left.append(proc_dir.name)
        except OSError:  # the process ended meanwhile, or is not ours to read
            pass
    return left


def test_nohup_keeps_sighup_ignored_and_old_runs_render_their_dry_backlog() -> None:
    """(Review of session 41.) Under nohup SIGHUP is ignored: the suite's handler for SIGTERM
    and SIGHUP took that over, and closing the terminal stopped a run meant to outlive it. And a
    run saved before the 2% rule renders with it (its JSON has the minimum and the backlog)."""
    from bench.churn import held_dry
    from bench.cli import _stop_on_signals

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        restore = _stop_on_signals()
        try:
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
        finally:
            restore()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)
    assert held_dry({"backlog": 200_000, "held_backlog_min": 250})
    assert not held_dry({"backlog": 200_000, "held_backlog_min": 25_000})
    assert held_dry({"held_backlog_min": 0}) and not held_dry({"held_backlog_min": 5})
    assert not held_dry({"backlog": 1_000, "held_backlog_min": 50, "held_backlog_dry": False})
    assert not held_dry({"backlog": 500_000})  # saved before the minimum was recorded: not run out


def test_render_of_a_missing_or_broken_file_is_one_line(tmp_path: Path) -> None:
    """`--render` of saved results that are not there (or not JSON) says so in one line, exit 2."""
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for path in (tmp_path / "missing.json", broken):
        proc = _bench("--render", str(path), "--out", str(tmp_path / "out.md"), timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and str(path) in proc.stderr, proc.stderr


def test_worker_run_stops_its_processes_only_once_each_has_connected(pg_server: Server, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A backlog drained before every `pgqueue worker` process has started (here the first
    process to start sleeps 3 s before Python imports anything of ours): the run waits until each
    has connected, and so has its stop handlers in place, before it sends SIGTERM, and every
    process exits 0. (Stopped during its start, a process exited -15 and failed the CI smoke.)"""
    from bench import db, worker_e2e

    (tmp_path / "sitecustomize.py").write_text(
        "import os, time\n"
        f"marker = {str(tmp_path / 'slow')!r}\n"
        "try:\n"
        "    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))\n"
        "except FileExistsError:\n"
        "    pass\n"
        "else:\n"
        "    time.sleep(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    srv = db.Server(pg_server.admin_dsn)
    srv.build_template()
    try:
        with srv.database("worker") as dbname:
            r = worker_e2e.run_worker(srv, dbname, processes=2, concurrency=1, messages=1, timeout=60)
            assert (tmp_path / "slow").exists()
            assert r["exit_codes"] == [0, 0], r["problems"]
            assert r["ok"], r["problems"]
    finally:
        srv.drop_template()


def test_ack_fetch_specs_retry_a_deadlock_and_count_it(pg_server: Server, tmp_path: Path) -> None:
    """Acknowledge-and-fetch can rarely deadlock (docs/guarantees.md) and the worker runs such a
    round again: the ops specs of it ran once and failed the quick and full ops section now and
    then. Now they run with pgbench --max-tries, the result counts what was retried, and the
    report says so; a transaction that fails every try still fails the run."""
    import psycopg

    from bench import db, ops, report
    from conftest import admin_execute, drop_database

    retrying = {s.key for s in ops.CONSUME + ops.PRODUCE if s.max_tries > 1}
    assert retrying == {"lease_ack_fetch:pgqueue", "lease_ack_fetch_batch:pgqueue"}
    srv = db.Server(pg_server.admin_dsn)
    assert "--max-tries" not in db._pgbench_argv(srv, "postgres", "x.sql", 2, 1, 0, None, False)[0]
    argv = db._pgbench_argv(srv, "postgres", "x.sql", 2, 1, 0, None, False, 5)[0]
    assert argv[argv.index("--max-tries") + 1] == "5"

    admin_execute(pg_server, "CREATE DATABASE bench_retries")
    try:
        with psycopg.connect(pg_server.dsn("bench_retries"), autocommit=True) as conn:
            # every third call is a deadlock victim (a sequence is not rolled back with it)
            conn.execute("CREATE SEQUENCE flaky_calls")
            conn.execute("CREATE FUNCTION flaky(always boolean) RETURNS integer LANGUAGE plpgsql AS $$ "
                         "BEGIN IF always OR nextval('flaky_calls') % 3 = 0 THEN "
                         "RAISE EXCEPTION 'a deadlock' USING ERRCODE = '40P01'; END IF; RETURN 1; END $$")
        script = tmp_path / "flaky.sql"
        script.write_text("SELECT flaky(:always);\n")
        once = db.pgbench(srv, "bench_retries", str(script), clients=1, transactions=30,
                          defines={"always": "false"})
        assert not once.ok and once.failed == 10 and once.retried == 0
        with psycopg.connect(pg_server.dsn("bench_retries"), autocommit=True) as conn:
            conn.execute("ALTER SEQUENCE flaky_calls RESTART")
        tried = db.pgbench(srv, "bench_retries", str(script), clients=1, transactions=30,
                           defines={"always": "false"}, max_tries=3)
        # 30 transactions took calls 1-44, of which 3, 6, ..., 42 failed: each retried once
        assert tried.ok and tried.failed == 0 and tried.transactions == 30 and tried.retried == 14
        never = db.pgbench(srv, "bench_retries", str(script), clients=1, transactions=3,
                           defines={"always": "true"}, max_tries=3)
        assert not never.ok and never.transactions == 0
        # a peer's spec, relabelled with its extension's version, keeps its tries (plpgsql
        # stands in for a peer's extension: the server always has it)
        peer = ops.Design("fakepeer", "", "", None, "plpgsql")
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(ops.DESIGNS, "fakepeer", peer)
            got, missing = ops.available_specs(srv, "bench_retries", [
                ops.Spec("x:fakepeer", "fake (peer)", "fakepeer", "x.sql", False, max_tries=3)])
        assert missing == {} and [(g.label, g.max_tries) for g in got] == [("fake 1.0 (peer)", 3)]
    finally:
        drop_database(pg_server, "bench_retries")

    run = {"key": "lease_ack_fetch_batch:pgqueue", "max_tries": 5, "retried": tried.retried,
           "transactions": tried.transactions}
    plain = {"key": "dequeue:pgqueue", "max_tries": 1, "retried": 0, "transactions": 1000}
    lines: list[str] = []
    report._retried(lines.append, {"passes": {"durable": {"runs": [run, plain]}},
                                   "labels": {"lease_ack_fetch_batch:pgqueue": "ack-fetch x4"}})
    assert "14 of 30 transactions were retried (ack-fetch x4)" in "\n".join(lines)
    assert "up to 5 tries" in "\n".join(lines)
    quiet: list[str] = []
    report._retried(quiet.append, {"passes": {"durable": {"runs": [plain]}}, "labels": {}})
    assert quiet == []
