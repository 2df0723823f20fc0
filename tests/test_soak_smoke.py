"""A short run of the soak (tests/soak.py) in CI, and proof that its checker catches what it
claims to catch. The real soak is a documented command, not a CI test:

    .venv/bin/python tests/soak.py --minutes 10
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

import soak
from soak import COMMITTED, ROLLED_BACK, UNKNOWN, Event, Row

SOAK = Path(__file__).resolve().with_name("soak.py")


def test_a_short_soak_passes(dsn: str, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    proc = subprocess.run(
        [sys.executable, str(SOAK), "--seconds", "10", "--clients", "8", "--dsn", dsn,
         "--log-dir", str(logs), "--keep", "--seed", "1"],
        capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: no message lost" in proc.stdout, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr

    # premise: the run did every kind of operation, and some of each outcome
    meta, client_logs = soak.load_logs(logs)
    assert len(client_logs) == 8
    ops = {ev.op for log in client_logs for ev in log}
    assert ops >= {"create", "lease", "take", "complete", "heartbeat", "defer", "fail", "requeue", "purge"}, ops
    assert {ev.outcome for log in client_logs for ev in log} >= {COMMITTED, ROLLED_BACK}
    assert any(ev.op == "complete" and ev.result is False for log in client_logs for ev in log), \
        "premise: some lease ran out and a stale token was refused"

    # the saved logs check clean against the database (the --check-logs command) ...
    assert soak.check_saved(dsn, logs) == []
    check = subprocess.run([sys.executable, str(SOAK), "--dsn", dsn, "--check-logs", str(logs)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert check.returncode == 0 and check.stdout.strip().endswith("OK"), check.stdout + check.stderr

    # ... and a log with a duplicate does not: another client "also took" a message in delete mode
    with psycopg.connect(dsn, autocommit=True) as conn:
        final = soak.read_final(conn, meta["run"])
    take = next(ev for log in client_logs for ev in log if ev.op == "take" and ev.outcome == COMMITTED and ev.items)
    tampered = copy.deepcopy(client_logs)
    tampered[(client_logs.index(next(log for log in client_logs if take in log)) + 1) % 8].append(take)
    problems = soak.check(tampered, final)
    assert any("removed more than once" in p and take.items[0][0] in p for p in problems), problems

    # ... nor does a log that forgets a completion: that message is lost
    done = next(ev for log in client_logs for ev in log if ev.op == "complete" and ev.result)
    forgetful = [[ev for ev in log if ev is not done] for log in client_logs]
    problems = soak.check(forgetful, final)
    assert any("lost" in p and done.items[0][0] in p for p in problems), problems


# -- the checker on hand-made logs: each rule fires, and unknown outcomes are tolerated ----------


def ev(op: str, t: float, outcome: str, *items: tuple[str, int, int, str | None], result: bool | None = None) -> Event:
    return Event(op, t, t + 0.001, outcome, "q", list(items), result=result)


def live(tag: str, msg_id: int = 1, table: str = "message") -> dict[str, list[Row]]:
    return {tag: [Row(table, "q", msg_id, 0, None)]}


def test_check_accepts_consistent_logs() -> None:
    logs = [
        [ev("create", 1, COMMITTED, ("a", 1, 0, None), ("b", 2, 0, None), ("c", 3, 0, None)),
         ev("create", 1, ROLLED_BACK, ("never", 4, 0, None)),
         ev("create", 1, UNKNOWN, ("maybe", 5, 0, None))],
        [ev("lease", 2, COMMITTED, ("a", 1, 1, None)), ev("complete", 3, COMMITTED, ("a", 1, 1, None), result=True),
         ev("take", 4, COMMITTED, ("b", 2, 1, None))],
        [ev("lease", 2, COMMITTED, ("c", 3, 1, None)),
         ev("complete", 5, COMMITTED, ("c", 3, 1, None), result=False)],  # stale: c is still live
    ]
    assert soak.check(logs, live("c", 3)) == []
    # a message whose removal's outcome is unknown may be there or not
    logs[2].append(ev("complete", 6, UNKNOWN, ("c", 3, 1, None)))
    assert soak.check(logs, live("c", 3)) == []
    assert soak.check(logs, {}) == []


CASES: list[tuple[str, list[list[Event]], dict[str, list[Row]], str]] = [
    ("lost",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None))]], {}, "a: lost"),
    ("taken twice in delete mode",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None)), ev("take", 2, COMMITTED, ("a", 1, 1, None))],
      [ev("take", 2, COMMITTED, ("a", 1, 1, None))]], {}, "removed more than once"),
    ("completed twice",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None)), ev("lease", 2, COMMITTED, ("a", 1, 1, None)),
       ev("complete", 3, COMMITTED, ("a", 1, 1, None), result=True)],
      [ev("lease", 4, COMMITTED, ("a", 1, 2, None)), ev("complete", 5, COMMITTED, ("a", 1, 2, None), result=True)]],
     {}, "removed more than once"),
    ("one lease delivery handed out twice",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None)), ev("lease", 2, COMMITTED, ("a", 1, 1, None))],
      [ev("lease", 2, COMMITTED, ("a", 1, 1, None))]], live("a"), "handed out 2 times"),
    ("delivered after it was taken",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None)), ev("take", 2, COMMITTED, ("a", 1, 1, None))],
      [ev("lease", 3, ROLLED_BACK, ("a", 1, 2, None))]], {}, "delivered again after"),
    ("completed but still there",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None)), ev("lease", 2, COMMITTED, ("a", 1, 1, None)),
       ev("complete", 3, COMMITTED, ("a", 1, 1, None), result=True)]], live("a"), "still in message"),
    ("purged but still dead",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None)), ev("purge", 3, COMMITTED, ("a", 1, 1, None))]],
     live("a", table="dead_letter"), "still in dead_letter"),
    ("rolled-back create in the table",
     [[ev("create", 1, ROLLED_BACK, ("a", 1, 0, None))]], live("a"), "phantom"),
    ("rolled-back create delivered",
     [[ev("create", 1, ROLLED_BACK, ("a", 1, 0, None)), ev("take", 2, COMMITTED, ("a", 1, 1, None))]], {}, "phantom"),
    ("never created",
     [[]], live("ghost"), "phantom"),
    ("two rows",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None))]],
     {"a": [Row("message", "q", 1, 0, None), Row("dead_letter", "q", 9, 1, None)]}, "duplicated in the tables"),
    ("completed with a token never received",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None)), ev("complete", 3, COMMITTED, ("a", 1, 7, None), result=True)]],
     {}, "never received"),
    ("someone else's checkpoint",
     [[ev("create", 1, COMMITTED, ("a", 1, 0, None)), ev("lease", 2, COMMITTED, ("a", 1, 1, "b|checkpoint 1"))]],
     live("a"), "checkpoint state of another message"),
]


def test_check_reports_each_broken_promise() -> None:
    for name, logs, final, expected in CASES:
        problems = soak.check(logs, final)
        assert any(expected in p for p in problems), (name, problems)


def test_stats_check_compares_queue_stats_with_the_messages(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT pgqueue.queue_create('q')")
    conn.execute("SELECT pgqueue.message_create('q', 'run:0:1')")
    truth = soak.read_final(conn, "run")
    assert soak.stats_problems(conn, ["q"], truth) == []
    problems = soak.stats_problems(conn, ["q"], {})  # the logs account for no live message
    assert problems and "1 live" in problems[0], problems
