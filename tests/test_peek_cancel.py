"""Peek and cancel (issue 16): message_peek is two bounded index probes (EXPLAIN of every
nested statement, and a control without the ready index that the same check catches); the
sync and async clients and the command line over message_peek and message_cancel."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import psycopg
import pytest

from helpers import PlanCapture, index_names, plan_violations
from pgqueue import AsyncQueue, Pending, Queue, errors
from pgqueue.cli import main
from pgqueue.message import to_datetime

N = 30_000  # rows a peek must not pay for


def _fill(conn: psycopg.Connection[Any]) -> None:
    """Queue q: 500 ready messages and 3 expired leases, beside N live leases of q, N scheduled
    messages far behind them, and a backlog of N in another queue."""
    conn.execute("SELECT pgqueue.queue_create('q'), pgqueue.queue_create('other')")
    rows = """
        INSERT INTO pgqueue.message (queue_id, dequeue_at, locked_until, attempts, created_at, content)
        SELECT (SELECT id FROM pgqueue.queue WHERE name = %s), {due}, {lease}, {attempts}, t.now_ms,
               convert_to(repeat('x', 200) || g, 'UTF8')
          FROM generate_series(1, %s) g, (SELECT pgqueue.now_ms() AS now_ms) t"""
    for queue, n, due, lease, attempts in (
            ("q", 500, "t.now_ms - 600000 + g", "NULL", "0"),
            ("q", 3, "t.now_ms - 900000 + g", "t.now_ms - 60000 + g", "1"),
            ("q", N, "t.now_ms - 86400000 + g", "t.now_ms + 3600000 + g", "1"),
            ("q", N, "t.now_ms + 86400000 + g", "NULL", "0"),
            ("other", N, "t.now_ms - 86400000 + g", "NULL", "0")):
        conn.execute(rows.format(due=due, lease=lease, attempts=attempts), (queue, n))  # type: ignore[arg-type]
    conn.execute("VACUUM ANALYZE pgqueue.message")


def _peek_problems(dsn: str) -> tuple[list[str], int]:
    """Peek 7 times (custom plans, then the generic one) with the plans of every nested statement;
    return the plan problems and the worst shared buffers of a warm call."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        indexes = index_names(conn)
        capture = PlanCapture(conn)
        calls = [capture.run("SELECT id, attempts FROM pgqueue.message_peek(%s, %s)", ("q", 10)) for _ in range(7)]
    problems = []
    for i, call in enumerate(calls, 1):
        assert [r[1] for r in call.rows] == [1, 1, 1] + [0] * 7  # the expired leases, then ready ones
        problems += [f"call {i}: {p}" for p in plan_violations(
            call.nested, indexes, required_indexes=["message_leased_idx", "message_ready_idx"])]
    return problems, max(c.nested_buffers for c in calls[1:])


@pytest.mark.slow
def test_peek_is_two_index_probes(conn: psycopg.Connection[Any], dsn: str) -> None:
    _fill(conn)
    problems, buffers = _peek_problems(dsn)
    assert not problems, "\n".join(problems)
    assert buffers < 100, buffers  # a handful of index and heap pages; a scan reads thousands
    # the control: without the ready index the same checks fail
    conn.execute("DROP INDEX pgqueue.message_ready_idx")
    conn.execute("ANALYZE pgqueue.message")
    problems, buffers = _peek_problems(dsn)
    assert any("no index scan using message_ready_idx" in p for p in problems), problems
    assert buffers > 1000, buffers


def test_peek_and_cancel(dsn: str) -> None:
    queue = Queue(dsn, "jobs")
    queue.create(max_attempts=5)
    ready, later, prio, leased = (queue.enqueue("ready"), queue.enqueue({"n": 1}, delay=3600),
                                  queue.enqueue(b"\x00", priority=2), queue.enqueue("leased", priority=9))
    [held] = queue.dequeue(1, lock_ms=60000)
    assert held.id == leased
    peeked = queue.peek()
    assert [p.id for p in peeked] == [prio, ready, later]  # the live lease is not shown
    assert all(isinstance(p, Pending) and p.attempts == 0 and p.expired_at is None for p in peeked)
    assert [p.payload for p in peeked] == [b"\x00", "ready", {"n": 1}]
    assert (peeked[0].priority, peeked[0].dequeue_at) == (2, None)
    assert peeked[2].dequeue_at is not None and peeked[2].dequeue_at > peeked[1].created_at
    assert [p.id for p in queue.peek(1)] == [prio]
    assert queue.stats().leased == 1 and queue.stats().ready == 2  # peek took nothing
    with pytest.raises(errors.InvalidArgument):
        queue.peek(0)
    with pytest.raises(errors.InvalidArgument):
        queue.complete(peeked[0])  # type: ignore[arg-type]  # a peeked message is not leased

    removed = queue.cancel([later, leased, ready, 10**12])
    assert [(p.id, p.payload) for p in removed] == [(ready, "ready"), (later, {"n": 1})]
    assert queue.cancel([ready]) == []
    assert queue.complete(held)  # the lease was not cancelled
    assert [p.id for p in queue.peek()] == [prio]
    with pytest.raises(errors.QueueNotFound):
        Queue(dsn, "nope").cancel([1])
    with pytest.raises(errors.QueueNotFound):
        Queue(dsn, "nope").peek()
    with pytest.raises(errors.InvalidArgument):
        queue.cancel("12")  # type: ignore[arg-type]
    queue.close()


def test_ids_given_as_a_generator_are_used(dsn: str) -> None:
    """cancel, requeue_dead and purge_dead read ids given as a generator once. Before, the type
    check consumed the generator and an empty list went to the server: nothing was done."""
    queue = Queue(dsn, "jobs")
    queue.create(max_attempts=1)
    ids = queue.enqueue_many(["a", "b", "c", "d"])
    removed = queue.cancel(i for i in ids[:1])  # type: ignore[arg-type]
    assert [p.id for p in removed] == ids[:1]
    for msg in queue.dequeue(3):
        assert queue.fail(msg, "dead")
    assert queue.requeue_dead(i for i in ids[1:2]) == 1  # type: ignore[arg-type]
    assert queue.purge_dead(i for i in ids[2:3]) == 1  # type: ignore[arg-type]
    assert [d.id for d in queue.dead_letters()] == ids[3:]
    queue.close()


def test_peek_shows_an_expired_lease_first_with_its_error(dsn: str) -> None:
    queue = Queue(dsn, "jobs")
    queue.create(retry_base_ms=0, retry_cap_ms=0)
    first = queue.enqueue("a")
    queue.enqueue("b")
    [msg] = queue.dequeue(1, lock_ms=1)
    assert queue.fail(msg, "boom", delay=3600)  # back, due in an hour, with its error
    [again] = queue.dequeue(1, lock_ms=1)  # b, whose lease runs out at once
    time.sleep(0.01)
    peeked = queue.peek()
    assert [p.id for p in peeked] == [again.id, first]
    assert peeked[0].expired_at is not None and peeked[0].expired_at <= to_datetime(
        int(time.time() * 1000) + 1000)
    assert (peeked[1].last_error, peeked[1].attempts) == ("boom", 1)
    queue.close()


def test_async_peek_and_cancel(dsn: str) -> None:
    async def go() -> None:
        async with AsyncQueue(dsn, "jobs") as q:
            await q.create()
            ids = await q.enqueue_many(["a", "b", "c"])
            assert [p.id for p in await q.peek(2)] == ids[:2]
            assert [p.payload for p in await q.cancel([ids[1], ids[2]])] == ["b", "c"]
            assert [p.id for p in await q.peek()] == ids[:1]
            with pytest.raises(errors.QueueNotFound):
                await AsyncQueue(dsn, "nope").peek()

    asyncio.run(go())


def test_cli_peek_and_cancel(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    queue = Queue(dsn, "jobs")
    queue.create()
    a, b = queue.enqueue({"to": "x"}), queue.enqueue("later", delay=60)
    assert main(["peek", "jobs", "--dsn", dsn]) == 0
    out, _ = capsys.readouterr()
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["id"], r.get("payload")) for r in records] == [(a, {"to": "x"}), (b, "later")]
    assert "dequeue_at" in records[1] and queue.stats().ready == 1
    assert main(["cancel", "jobs", str(b), "--dsn", dsn]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["id"] == b and "cancelled 1 message(s)" in err
    assert main(["cancel", "jobs", str(a), str(b), "--dsn", dsn]) == 1  # b is gone already
    out, err = capsys.readouterr()
    assert json.loads(out)["id"] == a
    assert len(err.strip().splitlines()) == 1 and "cancelled 1 of 2" in err and str(b) in err
    assert main(["peek", "jobs", "--dsn", dsn]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "no message waiting" in err
    assert main(["peek", "nope", "--dsn", dsn]) == 1
    _, err = capsys.readouterr()
    assert 'queue "nope" does not exist' in err and "Traceback" not in err
