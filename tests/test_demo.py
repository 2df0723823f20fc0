"""`pgqueue demo`: a short run on the embedded server and on the test database, and the
exactly-once check catching what it must catch."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pgqueue import Queue
from pgqueue.client import list_queues
from pgqueue.cli import main
from pgqueue.demo import Tally, check
from pgqueue.message import Message, to_datetime
from pgqueue.worker import Result

PGQUEUE = Path(sys.executable).with_name("pgqueue")


def test_demo_on_the_embedded_server() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    proc = subprocess.run([str(PGQUEUE), "demo", "--messages", "200", "--rate", "400"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "throwaway PostgreSQL" in out
    for line in ("throughput", "latency", "retries", "dead letters"):
        assert f"  {line}" in out, out
    assert "exactly once  OK" in out, out
    assert "Stopped the throwaway server" in out
    assert "Traceback" not in proc.stderr


def test_demo_on_a_given_database_cleans_up(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    status = main(["demo", "--dsn", dsn, "--messages", "300", "--rate", "0", "--seed", "7",
                   "--workers", "2", "--concurrency", "4", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "exactly once  OK" in out
    assert "throwaway" not in out
    assert [q.queue for q in list_queues(dsn)] == ["default"]  # the demo's queue is gone


def _result(queue: str, msg_id: int, kind: str, outcome: str) -> Result:
    msg = Message(id=msg_id, queue=queue, payload={"kind": kind, "due": 0.0}, attempts=1, state=None,
                  dequeue_at=to_datetime(0), created_at=to_datetime(0), locked_until=to_datetime(1), content=b"", content_type=None)
    return Result(msg, outcome, True)  # type: ignore[arg-type]


def test_the_check_catches_duplicates_losses_and_leftovers(dsn: str) -> None:
    queue = Queue(dsn, "demo_check")
    queue.create()
    twice, lost, poison = queue.enqueue_many(["a", "b", "c"])
    tally = Tally()
    for msg_id, kind in ((twice, "immediate"), (lost, "immediate"), (poison, "poison")):
        tally.enqueued(msg_id, kind)
    tally.record(_result(queue.name, twice, "immediate", "completed"))
    tally.record(_result(queue.name, twice, "immediate", "completed"))
    tally.record(_result(queue.name, 999999, "immediate", "completed"))
    problems = check(queue, tally, Counter(immediate=2, poison=1))
    text = "\n".join(problems)
    assert f"message {twice}: completed 2x" in text
    assert f"message {lost}: completed 0x" in text
    assert f"poison message {poison}: dead-lettered 0x" in text
    assert "message 999999 was processed but never enqueued" in text
    assert "left in the queue: 3 ready" in text
    assert "dead letters (0) are not the poison messages (1)" in text


def test_the_check_passes_when_all_is_accounted_for(dsn: str) -> None:
    queue = Queue(dsn, "demo_check")
    queue.create(max_attempts=1)
    done, poison = queue.enqueue_many(["a", "b"])
    tally = Tally()
    tally.enqueued(done, "immediate")
    tally.enqueued(poison, "poison")
    for msg in queue.dequeue(2):
        if msg.id == done:
            assert queue.complete(msg)
            tally.record(_result(queue.name, done, "immediate", "completed"))
        else:
            assert queue.fail(msg, "poison")
            tally.record(_result(queue.name, poison, "poison", "dead"))
    assert check(queue, tally, Counter(immediate=1, poison=1)) == []
