"""queue_stats is cheap enough to poll beside full load: each count is exact up to 10,000 and
estimated from a block sample of the table above that; queue_stats_exact counts everything.
Checked on a queue whose states are all above the bound, beside other queues, against
queue_stats_exact. What polling costs beside load is measured by the benchmark (docs/benchmarks.md,
target 9)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import psycopg
import pytest

from helpers import SCAN_NODES, PlanCapture, walk
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


def test_one_sample_serves_every_queue_above_the_bound(conn: psycopg.Connection[Any]) -> None:
    """q and other are both above the bound: queue_stats() estimates both from one block sample
    of pgqueue.message (a sample each cost a scrape of k large queues k times 16 MB)."""
    _fill(conn)
    plans: list[str] = []
    conn.add_notice_handler(lambda diag: plans.append(diag.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute("SET auto_explain.log_min_duration = 0")
    conn.execute("SET auto_explain.log_nested_statements = on")
    conn.execute("SET auto_explain.log_level = notice")
    rows = {r[0]: r[1] for r in conn.execute("SELECT queue, ready FROM pgqueue.queue_stats()")}
    conn.execute("SET auto_explain.log_min_duration = -1")
    assert rows["q"] > CAP and rows["other"] > CAP
    assert sum(p.count("Sample Scan on message") for p in plans) == 1, plans
    assert sum(p.count("Sample Scan on dead_letter") for p in plans) == 1, plans


def test_a_scrape_of_many_queues_counts_dead_letters_through_the_index(conn: psycopg.Connection[Any]) -> None:
    """300 queues, one of them holding 20,000 small dead letters: each queue's count of its dead
    letters is an index probe. (In the loop's statement, a generic plan after five queues, it
    was a scan of the whole table for each queue: 297 of them made a scrape 220 ms instead of
    10, a review.) The table is read whole only for the sample, and for the big queue's own
    count, which stops at the bound."""
    conn.execute("SELECT count(pgqueue.queue_create('q' || g)) FROM generate_series(1, 300) g")
    conn.execute("""
        INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, content, attempts, created_at, dead_at)
        SELECT nextval('pgqueue.message_id_seq'), (SELECT id FROM pgqueue.queue WHERE name = 'q1'),
               0, '\\x00', 1, 0, g FROM generate_series(1, 20000) g""")
    conn.execute("VACUUM ANALYZE pgqueue.dead_letter")
    capture = PlanCapture(conn)
    call = capture.run("SELECT sum(dead) FROM pgqueue.queue_stats()")
    assert call.rows[0][0] > CAP
    scans = Counter(node["Relation Name"] for statement in call.nested for node in walk(statement.plan)
                    if node["Node Type"] in SCAN_NODES)
    assert scans["dead_letter"] <= 2, scans


def _age(conn: psycopg.Connection[Any], function: str, queue: str) -> int:
    row = conn.execute(f"SELECT oldest_ready_age_ms FROM pgqueue.{function}(%s)", (queue,)).fetchone()
    assert row is not None and row[0] is not None, (function, queue, row)
    return int(row[0])


def test_oldest_ready_age_is_the_longest_wait_not_the_next_message(conn: psycopg.Connection[Any]) -> None:
    """The age that an alert on a stuck queue reads: neither a fresh prioritised (or past-dated)
    message at the head nor a backlog of them hides the message that has waited ten minutes
    behind them, and leases that ran out ten minutes ago with nobody to take them back count
    from then (they are ready: queue_stats counts them so)."""
    minute = 60_000
    conn.execute("SELECT pgqueue.queue_create('prio'), pgqueue.queue_create('many'), "
                 "pgqueue.queue_create('past'), pgqueue.queue_create('lost')")
    old = """INSERT INTO pgqueue.message (queue_id, dequeue_at, locked_until, attempts, created_at, content)
             SELECT q.id, t.now - %(due)s, t.now - %(lease)s, 1, t.now - %(due)s, '\\x00'
               FROM pgqueue.queue q, (SELECT pgqueue.now_ms() AS now) t WHERE q.name = %(queue)s"""
    for queue in ("prio", "many", "past"):
        conn.execute(old, {"due": 10 * minute, "lease": None, "queue": queue})
    # two leases that ran out ten minutes ago, and nothing else
    for _ in range(2):
        conn.execute(old, {"due": 15 * minute, "lease": 10 * minute, "queue": "lost"})
    conn.execute("SELECT pgqueue.message_create('prio', 'x'::bytea, pgqueue.priority_dequeue_at(5))")
    conn.execute("SELECT pgqueue.message_create('past', 'x'::bytea, 1000)")  # due in 1970: ahead of all
    # more prioritised messages than the walk reads at once (1,000): it goes on past them
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('many', array_fill('x'::bytea, ARRAY[1500]), "
                 "p_dequeue_at => pgqueue.priority_dequeue_at(1))")
    for queue in ("prio", "many", "past", "lost"):
        for function in ("queue_stats", "queue_stats_exact"):
            age = _age(conn, function, queue)
            assert 10 * minute <= age < 11 * minute, (function, queue, age)
    assert conn.execute("SELECT ready, leased FROM pgqueue.queue_stats('lost')").fetchone() == (2, 0)


def test_a_drop_that_rolls_back_keeps_the_queues_counters(conn: psycopg.Connection[Any]) -> None:
    """queue_create resets the counters of the stripe it takes (setval, which a rollback does not
    undo): it took the stripe a queue_drop of its own transaction had freed, and when that
    transaction rolled back the dropped queue came back with its counters at zero. A stripe
    freed in the transaction is not taken there (a savepoint's drop that rolls back frees
    nothing); with every other stripe in use the new queue shares one."""
    def totals(name: str) -> tuple[Any, ...]:
        row = conn.execute("SELECT enqueued, delivered, shared FROM pgqueue.queue_counters(%s)", (name,)).fetchone()
        assert row is not None
        return tuple(row)

    for i in range(62):  # with default: 63 queues, one stripe free
        conn.execute("SELECT pgqueue.queue_create(%s)", (f"q{i}",))
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('q7', array_fill('x'::bytea, ARRAY[50]))")
    conn.execute("SELECT count(*) FROM pgqueue.message_dequeue('q7', 20, 0)")
    assert totals("q7") == (50, 20, False)
    stripe = conn.execute("SELECT id & 63 FROM pgqueue.queue WHERE name = 'q7'").fetchone()
    with pytest.raises(psycopg.errors.RaiseException):
        with conn.transaction():  # drop and create again with other settings, then roll back
            conn.execute("SELECT pgqueue.queue_drop('q7')")
            conn.execute("SELECT pgqueue.queue_create('q7', p_lock_ms => 5000)")
            conn.execute("SELECT pgqueue.queue_create('other')")
            # neither took q7's stripe: the last free one and a shared one
            taken = conn.execute("SELECT id & 63 FROM pgqueue.queue WHERE name IN ('q7', 'other')").fetchall()
            assert stripe not in taken
            assert sorted(r[0] for r in conn.execute(
                "SELECT shared FROM pgqueue.queue_counters() WHERE queue IN ('q7', 'other')")) == [False, True]
            conn.execute("DO $$ BEGIN RAISE EXCEPTION 'roll back'; END $$")
    assert totals("q7") == (50, 20, False)
    # a drop undone by its savepoint frees nothing: the stripe is still q7's, and a drop that
    # commits frees it for a later transaction, where the new queue starts from zero
    with conn.transaction():
        with pytest.raises(psycopg.errors.RaiseException):
            with conn.transaction():
                conn.execute("SELECT pgqueue.queue_drop('q7')")
                conn.execute("DO $$ BEGIN RAISE EXCEPTION 'roll back'; END $$")
        assert conn.execute("SELECT current_setting('pgqueue.dropped_stripes', true)").fetchone() in (("",), (None,))
    assert totals("q7") == (50, 20, False)
    conn.execute("SELECT pgqueue.queue_drop('q7')")
    conn.execute("SELECT pgqueue.queue_create('fresh')")
    assert conn.execute("SELECT id & 63 FROM pgqueue.queue WHERE name = 'fresh'").fetchone() == stripe
    assert totals("fresh") == (0, 0, False)
    # with every stripe in use, a queue created in the transaction that drops another does not
    # land on the freed stripe (whose counters, the dropped queue's, would be its alone)
    for i in range(62, 64):
        conn.execute("SELECT pgqueue.queue_create(%s)", (f"q{i}",))
    assert conn.execute("SELECT count(DISTINCT id & 63) FROM pgqueue.queue").fetchone() == (64,)
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('fresh', array_fill('x'::bytea, ARRAY[50]))")
    fresh = conn.execute("SELECT id & 63 FROM pgqueue.queue WHERE name = 'fresh'").fetchone()
    assert fresh is not None
    conn.execute("SELECT setval('pgqueue.queue_id_seq', (SELECT max(id) FROM pgqueue.queue) / 64 * 64 + 64 + %s - 1)",
                 (fresh[0],))  # the next id's stripe is fresh's
    with conn.transaction():
        conn.execute("SELECT pgqueue.queue_drop('fresh')")
        conn.execute("SELECT pgqueue.queue_create('brand_new')")
    assert conn.execute("SELECT id & 63 FROM pgqueue.queue WHERE name = 'brand_new'").fetchone() != fresh
    assert totals("brand_new")[:2] != (50, 0)
