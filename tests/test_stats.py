"""queue_stats is cheap enough to poll beside full load: each count is exact up to 10,000 and
estimated from a block sample of the table above that; queue_stats_exact counts everything.
Checked on a queue whose states are all above the bound, beside other queues, against
queue_stats_exact. What polling costs beside load is measured by the benchmark (docs/benchmarks.md,
target 9)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from pgqueue import AsyncQueue, Queue, QueueStats


CAP = 10_000
STATES = ("ready", "scheduled", "leased", "dead")


def _fill(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Queue q: 60,000 ready messages, 3,000 expired leases, 25,000 scheduled, 15,000 live
    leases, 12,000 dead letters; queue small: a few of each; queue other: 40,000 ready. Returns
    q's true counts."""
    conn.execute("SELECT pgqueue.queue_create('q'), pgqueue.queue_create('small'), pgqueue.queue_create('other')")
    rows = """
        INSERT INTO pgqueue.message (queue_id, dequeue_at, locked_until, attempts, created_at, content)
        SELECT (SELECT id FROM pgqueue.queue WHERE name = %s), {due}, {lease}, 1, t.now_ms,
               convert_to(repeat('x', 100) || g, 'UTF8')
          FROM generate_series(1, %s) g, (SELECT pgqueue.now_ms() AS now_ms) t"""
    for queue, n, due, lease in (
            ("q", 60_000, "t.now_ms - 600000 + g", "NULL"),
            ("q", 3_000, "t.now_ms - 900000 + g", "t.now_ms - 60000 + g"),
            ("q", 25_000, "t.now_ms + 86400000 + g", "NULL"),
            ("q", 15_000, "t.now_ms - 86400000 + g", "t.now_ms + 3600000 + g"),
            ("small", 7, "t.now_ms - 600000 + g", "NULL"),
            ("small", 2, "t.now_ms + 86400000 + g", "NULL"),
            ("small", 3, "t.now_ms - 86400000 + g", "t.now_ms + 3600000 + g"),
            ("other", 40_000, "t.now_ms - 600000 + g", "NULL")):
        conn.execute(rows.format(due=due, lease=lease), (queue, n))  # type: ignore[arg-type]
    for queue, n in (("q", 12_000), ("small", 4)):
        conn.execute("""
            INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, content, attempts, created_at, dead_at, last_error)
            SELECT nextval('pgqueue.message_id_seq'), (SELECT id FROM pgqueue.queue WHERE name = %s),
                   0, '\\x00', 1, 0, 0, 'x' FROM generate_series(1, %s)""", (queue, n))
    conn.execute("VACUUM ANALYZE pgqueue.message")
    conn.execute("VACUUM ANALYZE pgqueue.dead_letter")
    return {"ready": 63_000, "scheduled": 25_000, "leased": 15_000, "dead": 12_000}


def _stats(conn: psycopg.Connection[Any], function: str, queue: str) -> dict[str, int]:
    row = conn.execute(f"SELECT ready, scheduled, leased, dead FROM pgqueue.{function}(%s)", (queue,)).fetchone()
    assert row is not None
    return dict(zip(STATES, (int(v) for v in row)))


def test_counts_are_exact_up_to_the_bound_and_estimated_above(conn: psycopg.Connection[Any]) -> None:
    true = _fill(conn)
    assert _stats(conn, "queue_stats_exact", "q") == true
    assert _stats(conn, "queue_stats", "small") == _stats(conn, "queue_stats_exact", "small") == {
        "ready": 7, "scheduled": 2, "leased": 3, "dead": 4}
    for _ in range(3):  # a new sample each call
        est = _stats(conn, "queue_stats", "q")
        for state, n in true.items():
            assert est[state] > CAP, (state, est)
            assert abs(est[state] - n) <= 0.3 * n, (state, est[state], n)
    # every queue at once, in name order, the same way
    rows = conn.execute("SELECT queue, ready FROM pgqueue.queue_stats()").fetchall()
    assert [r[0] for r in rows] == ["default", "other", "q", "small"]
    assert rows[3][1] == 7 and abs(rows[1][1] - 40_000) <= 10_000
    oldest = conn.execute("SELECT (SELECT oldest_ready_age_ms FROM pgqueue.queue_stats('q')) "
                          "- (SELECT oldest_ready_age_ms FROM pgqueue.queue_stats_exact('q'))").fetchone()
    assert oldest is not None and abs(oldest[0]) < 5_000  # the same probe, a moment apart


def test_the_clients_ask_for_either(conn: psycopg.Connection[Any], dsn: str) -> None:
    _fill(conn)
    with Queue(dsn, "q") as q:
        exact = q.stats(exact=True)
        assert (exact.ready, exact.scheduled, exact.leased, exact.dead) == (63_000, 25_000, 15_000, 12_000)
        est = q.stats()
        assert est.ready > CAP and abs(est.ready - 63_000) <= 0.3 * 63_000

    async def both() -> tuple[QueueStats, QueueStats]:
        async with AsyncQueue(dsn, "small") as a:
            return await a.stats(), await a.stats(exact=True)

    est_small, exact_small = asyncio.run(both())
    counts = [(s.ready, s.scheduled, s.leased, s.dead) for s in (est_small, exact_small)]
    assert counts == [(7, 2, 3, 4)] * 2
