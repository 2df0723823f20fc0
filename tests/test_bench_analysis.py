"""The benchmark suite's analysis, report and command line on made-up numbers (no server): a
review's defects of the queue_stats phases, the held section's failures, the churn's threads,
pgbench's failed transactions, the held statistics' labels, the default report path and the
DSN in the recorded command line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import churn, cli, db, latency, report  # noqa: E402


class _FakeServer:
    """What the code under test asks of a db.Server, without a server."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def dsn(self, dbname: str, *, sync_off: bool = False) -> str:
        return f"dbname={dbname}"

    @contextmanager
    def database(self, prefix: str) -> Iterator[str]:
        name = f"{prefix}_{len(self.created)}"
        self.created.append(name)
        yield name


class _FakeConn:
    """A connection whose statements answer from `answer` (a function of the SQL text)."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = answer or (lambda query: None)
        self.isolation_level: Any = None

    def __enter__(self) -> _FakeConn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, query: Any, params: Any = None, **kw: Any) -> Any:
        row = self.answer(str(query))
        return type("Cursor", (), {"fetchone": lambda self: row, "fetchall": lambda self: [row] if row else [],
                                   "__iter__": lambda self: iter([])})()

    def commit(self) -> None:
        return None

    def rollback(self) -> None:
        return None


# -- 1: queue_stats beside load ------------------------------------------------------------

def test_stats_phases_rotate_and_each_runs_on_a_fixture_built_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The phases none / every_1s / back_to_back ran in that order every round on one fixture
    that was never reset: the first phase ate its expired leases, and the later ones measured
    other work. Now the order rotates every round and every phase gets a fixture of its own."""
    srv = _FakeServer()
    events: list[tuple[str, str]] = []
    monkeypatch.setattr(latency.psycopg, "connect", lambda *a, **kw: _FakeConn())
    monkeypatch.setattr(latency, "_build_stats", lambda conn, n: events.append(("build", str(n))) or {})

    def phase(server: Any, dbname: str, profile: Any, mode: str) -> dict[str, Any]:
        events.append((mode, dbname))
        return {"mode": mode, "ok": True, "error": "", "produce_tps": 100.0, "consume_tps": 90.0,
                "stats_calls": 1, "stats_median_ms": 1.0}

    monkeypatch.setattr(latency, "_stats_phase", phase)
    profile = type("Profile", (), {"stats_repeats": 3, "stats_messages": 1000})()
    out = latency._stats_phases(srv, profile, lambda msg: None)  # type: ignore[arg-type]
    modes = [e[0] for e in events if e[0] != "build"]
    assert modes == ["none", "every_1s", "back_to_back", "every_1s", "back_to_back", "none",
                     "back_to_back", "none", "every_1s"]
    # a build before every phase, in the database the phase then runs in, each its own
    assert [e[0] for e in events[::2]] == ["build"] * 9
    assert [e[1] for e in events[1::2]] == srv.created and len(set(srv.created)) == 9
    assert [p["round"] for p in out["phases"]] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    lines: list[str] = []
    report._stats(lines.append, {"stats": {"messages": 1000, "parts": {"ready": 700}, "median_ms": 1.0,
                                           "max_ms": 1.0, "call_ms": [1.0], "explain_ms": 1.0, "buffers": 1,
                                           "all_queues_ms": 1.0, **out}})
    text = "\n".join(lines)
    assert "phases alternate" not in text and "rotates every round" in text and "built afresh" in text
    assert "phases alternate" not in (latency.__doc__ or "")


def test_stats_phase_counts_the_messages_consumers_removed() -> None:
    """pgbench's tps counted a delete-mode poll that found nothing as work: the consumers' rate is
    the messages removed from the table (what was there, plus what the producers made, less what
    is left), and more removed than dequeues is a broken count."""
    def res(tx: int, elapsed: float) -> db.PgbenchResult:
        return db.PgbenchResult(transactions=tx, tps=tx / elapsed, failed=0, elapsed=elapsed, latency_ms=1.0, ok=True)

    p = latency._phase_result("none", res(50, 2.0), res(400, 4.0), before=1000, after=850)
    assert p["ok"] and p["removed"] == 200 and p["consume_tps"] == 50.0 and p["consume_pgbench_tps"] == 100.0
    bad = latency._phase_result("none", res(50, 2.0), res(100, 4.0), before=1000, after=850)
    assert not bad["ok"] and "200 messages removed" in bad["error"]


# -- 2: one design's failure in the held section ----------------------------------------------

def test_held_keeps_the_finished_runs_when_a_peers_setup_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception other than Unavailable in one design's run (a peer's create, the
    --held-twin-sql file) ended the whole held section: pgqueue's finished runs were lost. Now that
    case fails with the traceback's tail, the peer says "setup failed", and the others run."""
    calls: list[tuple[str, str]] = []

    def run_churn(server: Any, name: str, **kw: Any) -> dict[str, Any]:
        calls.append((name, kw["hold_case"]))
        if name == "pgmq_pop":
            raise psycopg.errors.UndefinedFunction("function pgmq.create(unknown) does not exist")
        return {"ok": True, "problems": [], "hold_case": kw["hold_case"], "held_baseline": 100.0, "held_min": 95.0,
                "held_min_ratio": 0.95, "held_smooth": 5, "held_mean_ratio": 1.0, "recovery_s": 0,
                "after_minute_ratio": 1.0, "held_growth_bytes": 0, "held_produced": 10, "bytes_per_message": 1.0,
                "check": {"summary": "OK"}}

    monkeypatch.setattr(churn, "run_churn", run_churn)
    held = churn.run_held(None, before=1, hold=1, after=1, producers=1, consumers=1,  # type: ignore[arg-type]
                          backlog=10, slack=10, designs=["pgmq_pop", "pgqueue"], cases=["a", "0"],
                          log=lambda msg: None)
    assert calls == [("pgmq_pop", "a"), ("pgmq_pop", "0"), ("pgqueue", "a"), ("pgqueue", "0")]
    assert all(r["ok"] for r in held["designs"]["pgqueue"]["runs"].values())
    peer = held["designs"]["pgmq_pop"]
    assert peer["available"] and "UndefinedFunction" in peer["setup_failed"]
    assert [r["ok"] for r in peer["runs"].values()] == [False, False]
    assert "pgmq.create(unknown) does not exist" in peer["runs"]["a"]["problems"][0]
    fails = report.failures({"held": held})
    assert len(fails) == 2 and all(f.startswith("held pgmq_pop") for f in fails)
    monkeypatch.setattr(report.plots, "held_snapshots", lambda *args, **kwargs: None)
    lines: list[str] = []
    report._held(lines.append, {"held": held}, Path("/nonexistent"), Path("/nonexistent/b.md"))
    text = "\n".join(lines)
    assert f"- {peer['label']}: setup failed: " in text and "| FAILURE: run failed: " in text


# -- 3, 5: the churn's threads, and a hold with nothing to measure it against ------------------

class _CountingDesign(churn._Design):
    """A design without a server: a backlog of tokens taken one a millisecond, counted in shared
    memory (the consumer is a forked process), so seed 002's check passes."""

    table = "fake"
    label = "fake"

    def __init__(self, backlog: int) -> None:
        self.backlog = backlog
        self.taken = churn._MP.Value("q", 0)

    def consume(self, conn: Any) -> int | None:
        with self.taken.get_lock():
            token = self.taken.value
            if token >= self.backlog:
                return None
            self.taken.value += 1
        time.sleep(0.001)
        return int(token)

    def remaining(self, conn: Any) -> list[int]:
        return list(range(self.taken.value, self.backlog))


def _run(monkeypatch: pytest.MonkeyPatch, fail_on: str, **kw: Any) -> dict[str, Any]:
    def answer(query: str) -> Any:
        if fail_on in query:
            raise psycopg.errors.UndefinedColumn(f"planted failure of {fail_on}")
        return ("150000",) if "server_version_num" in query else None

    monkeypatch.setattr(churn.psycopg, "connect", lambda *a, **k: _FakeConn(answer))
    design = _CountingDesign(100_000)
    return churn._run(_FakeServer(), "fake", design, "fake", seconds=3, window=1,  # type: ignore[arg-type]
                      producers=0, consumers=1, backlog=100_000, slack=0, main_table="fake", fault=None,
                      log=lambda msg: None, **kw)


def test_an_exception_in_the_monitor_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The once-a-second monitor's exception (PostgreSQL 17 has no checkpoints_timed in
    pg_stat_bgwriter) was printed by the thread and lost: the run passed on no samples."""
    r = _run(monkeypatch, "pg_total_relation_size", hold=None, hold_case=None)
    assert not r["ok"] and any(p.startswith("monitor: UndefinedColumn: planted") for p in r["problems"])
    assert report.failures({"churn": {"fake": r}}) == [f"churn fake: {'; '.join(r['problems'])}"]


def test_an_exception_in_the_holder_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The holder's exception was lost and its "held_error" read by nothing: the report said MISS
    (not within the run) and "slowest None s" for a hold that never happened."""
    r = _run(monkeypatch, "bench_held_other", hold=(1.0, 2.0), hold_case="a")
    assert not r["ok"]
    assert any(p.startswith("holder (a): UndefinedColumn: planted") for p in r["problems"]), r["problems"]
    assert "the snapshot was not held" in r["problems"]
    held = {"designs": {"pgqueue": {"label": "pgqueue", "runs": {"a": r}}}}
    assert [row[4] for row in report._held_rows(held)] == ["FAILURE"]


def test_monitor_reads_checkpoints_where_the_server_keeps_them() -> None:
    assert "pg_stat_bgwriter" in churn.checkpoints_sql(150007)
    assert "pg_stat_checkpointer" in churn.checkpoints_sql(170000)


def test_a_zero_baseline_is_an_error_not_a_recovery() -> None:
    """With no messages finished before the hold, `rolling[i] >= 0.9 * 0` held at once: "back to
    >= 0.9x after the hold: 0 s PASS" beside an n/a slowest window."""
    hold = {"start": 5.0, "end": 9.0}
    for deq, start in (([0] * 5 + [100] * 15, 5.0), ([100] * 20, 0.0)):  # a zero baseline; none at all
        got = churn._held_analysis(deq, {**hold, "start": start}, 5, threshold=0.9, smooth=5)
        assert "held_error" in got and "recovery_s" not in got, got
    assert "held_error" not in churn._held_analysis([100] * 20, hold, 5, threshold=0.9, smooth=5)


# -- 6: target 7's labels ------------------------------------------------------------------

def test_target7_labels_say_the_window_and_the_span_the_run_had() -> None:
    """The smoke profile's window is 1 s and the quick profile has 39 s after the hold: the report
    said "slowest 5 s" and "the minute after" for both."""
    deq = [100] * 20 + [50] * 40 + [100] * 39  # the quick profile: 20 + 40 s, 40 s after (39 counted)
    got = churn._held_analysis(deq, {"start": 20.0, "end": 59.9}, 1)
    assert got["held_smooth"] == 1 and got["after_span_s"] == 39
    hx = {"ok": True, "recovery_s": 0, "held_min_ratio": 0.5, "backlog_min": 500, "backlog": 500, **got}
    whats = [row[1] for row in report.summary_rows({"held_xmin": hx})]
    assert "held xmin: slowest 1 s while held, vs baseline (proposed bound)" in whats
    assert "held xmin: mean rate in the 39 s after the snapshot ends, vs baseline" in whats
    full = {**hx, "held_smooth": 5, "after_span_s": 60}
    whats = [row[1] for row in report.summary_rows({"held_xmin": full})]
    assert any("slowest 5 s" in w for w in whats) and any("in the minute after" in w for w in whats)


# -- 4: pgbench's failed transactions ------------------------------------------------------------

def test_pgbench_run_with_failed_transactions_is_not_ok() -> None:
    """pgbench 15 counts deadlocks and serialization failures as failed transactions and exits 0:
    the count was parsed and used by nothing."""
    out = ("number of transactions actually processed: 97\nnumber of failed transactions: 3 (3.000%)\n"
           "latency average = 1.000 ms\ntps = 970.0 (without initial connection time)\n")

    def parsed(text: str) -> db.PgbenchResult:
        proc = subprocess.Popen([sys.executable, "-c", f"print({text!r}, end='')"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        return db.parse_pgbench(proc)

    bad = parsed(out)
    assert bad.failed == 3 and not bad.ok and "3 failed transactions" in bad.error
    good = parsed(out.replace("failed transactions: 3 (3.000%)", "failed transactions: 0 (0.000%)"))
    assert good.ok and good.failed == 0 and good.error == ""


# -- 7, 8, 9: the command line ----------------------------------------------------------------

class _CliServer:
    def build_template(self) -> None:
        return None

    def settings(self, names: Any) -> dict[str, str]:
        return {"server_version": "15"}

    def message_reloptions(self) -> str:
        return "(none)"

    def extension_version(self) -> str:
        return "?"


def _cli_fakes(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    started: list[Any] = []

    @contextmanager
    def server(dsn: str | None, settings: dict[str, str]) -> Iterator[_CliServer]:
        started.append(dsn)
        yield _CliServer()

    monkeypatch.setattr(cli.db, "server", server)
    monkeypatch.setattr(cli, "_run_section", lambda section, *args: started.append(args) or None)
    return started


def test_held_twin_sql_is_read_once_before_the_server_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """--held-twin-sql was read inside every section's try, after the server had started: a typo
    failed every section, exit 1. Now a file that cannot be read is a usage error (exit 2, one
    line) before anything starts, and the text is read once."""
    started = _cli_fakes(monkeypatch)
    missing = tmp_path / "no-such.sql"
    assert cli.main(["--only", "held", "latency", "--held-twin-sql", str(missing), "--out",
                     str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert not started and len(err.splitlines()) == 1 and str(missing) in err
    sql_file = tmp_path / "twin.sql"
    sql_file.write_text("SELECT 1;")
    assert cli.main(["--only", "held", "--held-twin-sql", str(sql_file), "--out", str(tmp_path / "r.md")]) == 0
    assert started[1][-2:] == (True, "SELECT 1;")


def test_default_report_is_not_the_committed_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/benchmarks.md keeps sections written by hand: a run without --out overwrote it. The
    default is now a file of its own under bench/results/, its JSON beside it; the page is
    written only when --out names it (its JSON then under bench/results/, as before)."""
    seen: list[tuple[Path, Path]] = []
    monkeypatch.setattr(cli, "_run", lambda *args: seen.append((args[9], args[10])) or 0)
    assert cli.main(["--only", "ops"]) == 0
    out, json_out = seen[-1]
    assert out.parent == REPO / "bench" / "results" and out.name.startswith("benchmarks-") and out.suffix == ".md"
    assert json_out == out.with_suffix(".json") and out != REPO / "docs" / "benchmarks.md"
    assert cli.main(["--only", "ops", "--out", str(REPO / "docs" / "benchmarks.md")]) == 0
    assert seen[-1] == (REPO / "docs" / "benchmarks.md", REPO / "bench" / "results" / "benchmarks.json")
    readme = " ".join((REPO / "bench" / "README.md").read_text().split())
    assert "bench/results/benchmarks-<UTC time>.md" in readme and "--out docs/benchmarks.md" in readme


def test_recorded_command_masks_the_dsn_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The report and its JSON recorded the command line as typed, a --dsn's password with it."""
    _cli_fakes(monkeypatch)
    out = tmp_path / "r.md"
    assert cli.main(["--only", "ops", "--dsn", "host=db user=u password=s3cret", "--out", str(out)]) == 0
    saved = json.loads(out.with_suffix(".json").read_text())
    assert saved["meta"]["command"] == f"python -m bench --only ops --dsn host=db user=u password=*** --out {out}"
    assert "s3cret" not in out.read_text() and "s3cret" not in out.with_suffix(".json").read_text()
    assert cli.masked_argv(["--dsn=postgresql://u:p%40ss@h:5432/db?password=x&sslmode=require", "--ds",
                            "password='a b' host=h", "--set", "password_encryption=md5"]) == [
        "--dsn=postgresql://u:***@h:5432/db?password=***&sslmode=require", "--ds", "password=*** host=h",
        "--set", "password_encryption=md5"]


# -- 10: what the README says is checked --------------------------------------------------------

def test_readme_says_which_sections_check_their_messages() -> None:
    """bench/README.md said every run that moves messages checks them; ops, curves, groups and
    stats had no such check."""
    readme = " ".join((REPO / "bench" / "README.md").read_text().split())
    assert "Every run that moves messages checks them" not in readme
    assert "The pgbench runs (`ops`, `curves`, `stats`, `groups`) have no such check" in readme


def test_a_measured_zero_is_a_miss_not_na() -> None:
    """A run that delivered nothing graded "n/a" (the ratio of a 0 was None), not a miss (a review):
    the queue_stats target and the groups ratio, which both divide a measured rate."""
    from bench import groups, report
    assert report._verdict(report._ratio(0.0, 1000.0), 0.85).startswith("MISS")
    assert report._ratio(None, 1000.0) is None and report._ratio(5.0, 0.0) is None
    st = {"messages": 100000, "median_ms": 120.0,
          "phases": [{"mode": m, "ok": True, "error": "", "round": 0} for m in ("none", "every_1s", "back_to_back")],
          "median": {"none": {"produce_tps": 5000.0, "consume_tps": 4000.0},
                     "every_1s": {"produce_tps": 5000.0, "consume_tps": 0.0},
                     "back_to_back": {"produce_tps": 5000.0, "consume_tps": 0.0}}}
    graded = [r for r in report.summary_rows({"stats": st}) if r[0] == "9" and r[1].startswith("consumers")
              and r[3].startswith("≥")]
    assert graded and all(r[4].startswith("MISS") for r in graded), graded
    runs = [{"mode": m, "queue": q, "ok": True, "tps": 0.0 if q == "grouped" else 9000.0}
            for m in ("delete", "lease") for q in ("plain", "grouped")]
    assert groups._ratios(runs) == {"delete": 0.0, "lease": 0.0}
    assert groups._ratios([r for r in runs if r["queue"] == "plain"]) == {"delete": None, "lease": None}


# -- a second review: the twin's backlog, failed depths and rounds, labels, rounding ------------

class _TwinDesign(_CountingDesign):
    """The held load takes a token every 2 ms; its twin (database "twin") takes its own backlog
    without a pause, so that only the twin's runs out."""

    def __init__(self, backlog: int) -> None:
        super().__init__(backlog)
        self.twin_taken = churn._MP.Value("q", 0)

    def _taken(self, conn: Any) -> Any:
        return self.twin_taken if conn.dsn == "dbname=twin" else self.taken

    def consume(self, conn: Any) -> int | None:
        taken = self._taken(conn)
        with taken.get_lock():
            token = taken.value
            if token >= self.backlog:
                return None
            taken.value += 1
        if taken is self.taken:
            time.sleep(0.002)
        return int(token)

    def remaining(self, conn: Any) -> list[int]:
        return list(range(self._taken(conn).value, self.backlog))


def test_twin_rows_not_graded_when_the_twins_backlog_ran_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """--held-twin grades the held load's rate against its twin's, but only the held load's
    backlog was sampled: a twin run dry had its producers' rate, which pushed the ratio up to a
    PASS. The monitor now samples the twin's backlog too, and the row against the twin says the
    backlog ran out when the twin's did over the same seconds."""
    def connect(dsn: str, *args: Any, **kw: Any) -> _FakeConn:
        conn = _FakeConn(lambda query: ("150000",) if "server_version_num" in query
                         else (0, 0, 0, 0, 0, 0, 0, False, 0) if "pg_total_relation_size" in query else None)
        conn.dsn = dsn  # type: ignore[attr-defined]
        return conn

    monkeypatch.setattr(churn.psycopg, "connect", connect)
    r = churn._run(_FakeServer(), "fake", _TwinDesign(2000), "fake", seconds=3, window=1,  # type: ignore[arg-type]
                   producers=0, consumers=1, backlog=2000, slack=0, hold=(1.0, 2.0), hold_case="0",
                   main_table="fake", fault=None, log=lambda msg: None, twin_dbname="twin")
    assert r["ok"], r["problems"]
    assert r["samples"] and all("twin_backlog" in s for s in r["samples"])
    assert r["twin_backlog_dry"] and r["twin_backlog_min"] <= 40
    assert not r["held_backlog_dry"] and r["held_backlog_min"] > 40

    run = {"ok": True, "held_min_ratio": 0.97, "held_smooth": 5, "recovery_s": 0, "held_growth_bytes": 0,
           "held_produced": 10, "bytes_per_message": 100.0, "backlog": 2000, "twin_min_ratio": 0.97,
           **{k: r[k] for k in ("held_backlog_min", "held_backlog_dry", "twin_backlog_min", "twin_backlog_dry")}}
    held = {"designs": {"pgqueue": {"label": "pgqueue", "runs": {"a": run}}}}
    verdicts = {what: verdict for _, what, _, _, verdict in report._held_rows(held)}
    twin_rows = [v for what, v in verdicts.items() if "against its twin" in what]
    assert twin_rows == ["n/a (the backlog ran out: the producers' rate)"]
    assert all(v == "PASS" for what, v in verdicts.items() if "against its twin" not in what)
    run["twin_backlog_dry"] = False
    assert all(verdict == "PASS" for *_, verdict in report._held_rows(held))

    monkeypatch.setattr(report.plots, "held_snapshots", lambda *args, **kwargs: None)
    run.update(twin_backlog_dry=True, twin_deq_per_s=[], twin_baseline=100.0, check={"summary": "OK"},
               twin_check={"summary": "OK"})
    page = {"clients": 2, "backlog": 2000, "slack": 0, "before": 1, "hold": 1, "after": 1, "twin": True,
            "cases": {"a": "a case"}, "designs": {"pgqueue": {"label": "pgqueue", "available": True,
                                                             "producers": 0, "consumers": 1, "runs": {"a": run}}}}
    lines: list[str] = []
    report._held(lines.append, {"held": page}, Path("/nonexistent"), Path("/nonexistent/b.md"))
    assert "the twin's backlog ran out" in "\n".join(lines)


def _depth_results(empty: int) -> dict[str, Any]:
    def level(ms: float, buffers: int, empty: int = 0) -> dict[str, Any]:
        return {"latency_ms": ms, "buffers": buffers, "empty": empty, "breakdown": []}

    return {"levels": [1000, 10000, 1000000], "labels": {"ready": "ready backlog", "future": "future-scheduled"},
            "samples": 5, "extra": [],
            "shapes": {"ready": {"1000": level(1.0, 20), "10000": level(1.2, 20), "1000000": level(1.1, 21, empty)},
                       "future": {"1000": level(1.0, 20), "10000": level(1.1, 20), "1000000": level(1.0, 20)}}}


def test_a_depth_whose_dequeues_found_nothing_prints_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A depth whose dequeues found no message is a failure (failures(), exit 1), but target 5
    graded its numbers PASS and the depth table printed them."""
    dep = _depth_results(empty=3)
    assert report.failures({"depth": dep}) == ["depth ready 1000000: 3 dequeues found no message"]
    rows = {what.split(": ", 1)[1]: (measured, verdict)
            for _, what, measured, _, verdict in report.summary_rows({"depth": dep})}
    assert rows["ready backlog"] == ("FAILURE", "FAILURE")
    assert rows["future-scheduled"] == ("latency 1.10×, buffers 1.00×", "PASS")
    monkeypatch.setattr(report.plots, "depth", lambda *args, **kwargs: None)
    lines: list[str] = []
    report._depth(lines.append, {"depth": dep}, Path("/nonexistent"), Path("/nonexistent/b.md"))
    ready = next(line for line in lines if line.startswith("| ready backlog |"))
    assert ready == "| ready backlog | 1.000 / 20 | 1.200 / 20 | FAILURE | FAILURE |"
    assert "FAILURE" not in next(line for line in lines if line.startswith("| future-scheduled |"))


def test_target5_label_says_the_worst_depth_not_the_deepest() -> None:
    """Target 5's value is the highest ratio over every depth (here the middle one's latency),
    but the label said "dequeue cost at <deepest> vs <first>"."""
    rows = [(what, measured) for _, what, measured, _, _ in report.summary_rows({"depth": _depth_results(0)})]
    assert rows[0] == ("dequeue cost, worst ratio of the depths up to 1,000,000 vs 1,000: future-scheduled",
                       "latency 1.10×, buffers 1.00×")
    assert rows[1][0].startswith("dequeue cost, worst ratio of the depths up to 1,000,000 vs 1,000: ready")
    assert rows[1][1] == "latency 1.20×, buffers 1.05×"  # 1.2 is the 10,000 level's, not the deepest's


def _worker_results(failed_key: str | None) -> dict[str, Any]:
    keys = {"worker": 6000.0, "lease_cycle:pgqueue": 2000.0, "dequeue:pgqueue": 4000.0}
    runs = [{"key": k, "round": rnd, "ok": not (k == failed_key and rnd == 1),
             "msgs_per_s": None if k == failed_key and rnd == 1 else v} for k, v in keys.items() for rnd in range(3)]
    return {"median": keys, "labels": {k: k for k in keys}, "runs": runs, "processes": 4, "concurrency": 4,
            "messages": 1000, "sql_seconds": 5, "sql_transactions": None, "pgqueuer_seconds": 5, "repeats": 3,
            "pgqueuer": {"available": True}, "unavailable": {}}


def test_a_failed_round_prints_failure_not_the_median_of_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ops or worker key with a failed round (failures() lists it, exit 1) still got a median of
    its other rounds in the summary and the tables: it now prints FAILURE, as a failed check does."""
    runs = [{"key": k, "round": rnd, "clients": 4, "ok": not (k == "dequeue:pgqueue" and rnd == 1), "error": "x",
             "msgs_per_s": 1000.0} for k in ("lease_cycle:pgqueue", "dequeue:pgqueue") for rnd in range(3)]
    ops = {"clients": 4, "labels": {"lease_cycle:pgqueue": "lease", "dequeue:pgqueue": "dequeue"}, "unavailable": {},
           "seconds": 5, "transactions": None, "repeats": 3,
           "passes": {"durable": {"runs": runs, "median": {"lease_cycle:pgqueue": 700.0, "dequeue:pgqueue": 1000.0}}}}
    assert report.failures({"ops": ops}) == ["ops dequeue:pgqueue (4 clients): x"]
    assert [(r[2], r[4]) for r in report.summary_rows({"ops": ops})] == [("FAILURE", "FAILURE")]
    lines: list[str] = []
    report._ops(lines.append, {"ops": ops}, Path("/nonexistent"), Path("/nonexistent/b.md"))
    assert "| dequeue | FAILURE |" in lines and "| lease | 700 |" in lines

    wk = _worker_results("lease_cycle:pgqueue")
    rows = {what.split(" (4 processes)")[0]: (measured, verdict) for _, what, measured, _, verdict
            in report._worker_rows(wk)}
    assert rows[report.WORKER_TARGETS[0][0]] == ("FAILURE", "FAILURE")
    assert rows[report.WORKER_TARGETS[-3][0]] == ("1.50×", "PASS")  # the worker vs the delete mode
    monkeypatch.setattr(report.plots, "worker", lambda *args, **kwargs: None)
    lines = []
    report._worker(lines.append, {"worker": wk}, Path("/nonexistent"), Path("/nonexistent/b.md"))
    assert "| lease_cycle:pgqueue | FAILURE | 2,000, FAILURE, 2,000 | FAILURE |" in lines
    assert "| dequeue:pgqueue | 4,000 | 4,000, 4,000, 4,000 | 1.50× |" in lines


def test_ratio_labels_read_the_way_the_ratio_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14's flat cost is the large queue's time over the small one's, but its label read
    "small against large"; the worker table's "vs the worker" column holds the worker over the
    row. The labels now say so, in the report and in docs/benchmarks.md's quoted rows."""
    def size(messages: int, groups: int, ms: float, buffers: int) -> dict[str, Any]:
        return {"messages": messages, "groups": groups, "median_ms": ms, "buffers": buffers}

    gr = {"throughput": {"ratio": {"delete": 0.9, "lease": 0.9}, "groups": 10000, "clients": 4},
          "fairness": {"big": 1000000, "small": 1000, "per_group": 10, "last_first": 1001, "bound": 2000},
          "flat": {"messages": {"small": size(1000, 1000, 0.436, 35), "large": size(1000000, 1000, 0.477, 53),
                                "ratio_ms": 0.477 / 0.436},
                   "groups": {"small": size(100000, 10, 0.510, 58), "large": size(100000, 100000, 0.466, 38),
                              "ratio_ms": 0.466 / 0.510}},
          "rate": {"rate": 500, "seconds": 60.0, "error": 0.0007}}
    flat = [(what, measured) for _, what, measured, _, _ in report._groups_rows(gr) if "dequeue time" in what]
    assert flat == [("dequeue time, 1,000,000 against 1,000 messages", "1.09×"),
                    ("dequeue time, 100,000 against 10 groups", "0.91×")]
    docs = (REPO / "docs" / "benchmarks.md").read_text()
    assert "| dequeue time, 1,000,000 against 1,000 messages (1,000 groups) | 1.09× (53 against 35 buffers) |" in docs
    assert "| dequeue time, 100,000 against 10 groups (100,000 messages) | 0.91× (38 against 58 buffers) |" in docs

    monkeypatch.setattr(report.plots, "worker", lambda *args, **kwargs: None)
    lines: list[str] = []
    report._worker(lines.append, {"worker": _worker_results(None)}, Path("/nonexistent"), Path("/nonexistent/b.md"))
    assert "| what | msg/s (median) | each round | the worker vs this |" in lines
    assert "| lease_cycle:pgqueue | 2,000 | 2,000, 2,000, 2,000 | 3.00× |" in lines  # 6,000 / 2,000
    assert "vs the worker |" not in docs and "| what | msg/s (median) | each round | the worker vs this |" in docs


def test_a_value_that_rounds_to_its_bound_is_printed_as_missed() -> None:
    """Values print with 2 decimals and are graded unrounded: 0.897 against ≥ 0.9 read "0.90×"
    beside "MISS (0% short)". Such a value now prints with the decimals that show the miss, and
    the shortfall with one decimal."""
    assert report._verdict(0.897, 0.9) == "MISS (0.3% short)"
    assert report._verdict(1.503, 1.5, at_least=False) == "MISS (0.2% over)"
    assert report._shown(0.897, 0.9) == "0.897" and report._shown(0.95, 0.9) == "0.95"
    assert report._shown(0.8999, 0.9) == "0.8999" and report._shown(0.9, 0.9) == "0.90"
    assert report._shown(1.503, 1.5, at_least=False) == "1.503" and report._shown(None, 0.9) == "n/a"
    ops = {"clients": 4, "labels": {"lease_cycle:pgqueue": "lease", "dequeue:pgqueue": "dequeue"},
           "passes": {"durable": {"median": {"lease_cycle:pgqueue": 598.2, "dequeue:pgqueue": 1000.0}}}}
    assert [(r[2], r[4]) for r in report.summary_rows({"ops": ops})] == [("0.598×", "MISS (0.3% short)")]
    run = {"ok": True, "held_min_ratio": 0.897, "held_smooth": 5, "recovery_s": 0, "held_growth_bytes": 0,
           "held_produced": 10, "bytes_per_message": 100.0, "held_backlog_min": 500, "backlog": 1000}
    rows = report._held_rows({"designs": {"pgqueue": {"label": "pgqueue", "runs": {"a": run}}}})
    assert (rows[0][2], rows[0][4]) == ("0.897×", "MISS (0.3% short)")
    dep = _depth_results(0)
    dep["shapes"]["ready"]["10000"]["latency_ms"] = 1.503
    measured, verdict = next((m, v) for _, what, m, _, v in report.summary_rows({"depth": dep}) if "ready" in what)
    assert (measured, verdict) == ("latency 1.503×, buffers 1.05×", "MISS (0.2% over)")
