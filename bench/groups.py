"""Issue 14: message groups (throughput, fairness, flat cost) and the rate limit.

Every fixture goes through the extension's public functions (``queue_create``,
``message_create_batch`` with ``p_groups``), in a fresh database:

* throughput: a queue without groups and one whose messages are spread over 10,000 groups
  (``group_concurrency`` 1), the same number of messages each; pgbench clients take one message a
  call in delete mode (``pgqueue_dequeue.sql``) and in the lease cycle (``pgqueue_lease_cycle.sql``),
  the two queues alternating, each run topped up to the same number of ready messages and after
  a VACUUM of the table; a run that empties its queue is an error, not a number;
* fairness: one group of ``groups_big`` messages enqueued first, then 1,000 groups of 10; one
  consumer takes a message at a time (lease, then complete); where in the order of deliveries
  each small group gets its first message;
* flat cost: the client's time of one delete-mode ``message_dequeue`` (median over many calls, one
  session, the small and the large queue called in turn so that both see the same load on the
  machine) and its shared buffers (EXPLAIN ANALYZE, median of three), at 1,000 against
  ``groups_flat_messages`` messages (1,000 groups), and at 10 against 100,000 groups (100,000
  messages);
* rate limit: ``p_rate_limit`` messages a second, pgbench clients asking for 10 at a time as fast
  as they can; delivered against the limit times the elapsed time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from bench import config, db

DEQUEUE = "SELECT id FROM pgqueue.message_dequeue(%s, 1, 0)"
BATCH = 10_000
SMALL_GROUPS = 1000


def _load(conn: psycopg.Connection[Any], queue: str, n: int, groups: int | None, prefix: str = "g") -> None:
    """Enqueue n messages into queue, in batches, spread round-robin over `groups` groups (None: none)."""
    for lo in range(0, n, BATCH):
        k = min(BATCH, n - lo)
        if groups is None:
            conn.execute("SELECT count(*) FROM pgqueue.message_create_batch(%s, array_fill('\\x01'::bytea, ARRAY[%s]))",
                         (queue, k))
        else:
            conn.execute(
                "SELECT count(*) FROM pgqueue.message_create_batch(%s, array_fill('\\x01'::bytea, ARRAY[%s]), "
                "p_groups => ARRAY(SELECT %s || ((%s + i) %% %s) FROM generate_series(0, %s - 1) i))",
                (queue, k, prefix, lo, groups, k))


def _ready(conn: psycopg.Connection[Any], queue: str) -> int:
    row = conn.execute("SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
                       "WHERE q.name = %s AND m.locked_until IS NULL", (queue,)).fetchone()
    return int(row[0]) if row else 0


def _ratios(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Grouped over plain, the medians of each mode's ok runs: None (n/a) when either queue has no
    ok run (those runs are failures of their own), 0 when the grouped queue delivered nothing (a
    miss: it graded "n/a", a review)."""
    ratio: dict[str, float | None] = {}
    for mode in ("delete", "lease"):
        med = {q: [r["tps"] for r in runs if r["mode"] == mode and r["queue"] == q and r["ok"]]
               for q in ("plain", "grouped")}
        plain = statistics.median(med["plain"]) if med["plain"] else None
        ratio[mode] = statistics.median(med["grouped"]) / plain if plain and med["grouped"] else None
    return ratio


def _throughput(srv: db.Server, profile: config.Profile, log: Callable[[str], None]) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    n = profile.groups_messages
    for mode, script in (("delete", "pgqueue_dequeue.sql"), ("lease", "pgqueue_lease_cycle.sql")):
        with srv.database("groups") as name, psycopg.connect(srv.dsn(name), autocommit=True) as conn:
            conn.execute("SELECT pgqueue.queue_create('plain')")
            conn.execute("SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)")
            _load(conn, "plain", n, None)
            _load(conn, "grouped", n, profile.groups_count)
            for rnd in range(profile.groups_repeats):
                for queue in ("plain", "grouped") if rnd % 2 == 0 else ("grouped", "plain"):
                    # each run starts with n ready messages or more: a fast round must not empty
                    # the queue of the next
                    short = n - _ready(conn, queue)
                    if short > 0:
                        _load(conn, queue, short, None if queue == "plain" else profile.groups_count)
                    conn.execute("VACUUM (ANALYZE) pgqueue.message")
                    before = db.queue_messages(conn, queue)
                    r = db.pgbench(srv, name, script, clients=profile.groups_clients, seconds=profile.groups_seconds,
                                   transactions=profile.groups_transactions, defines={"queue": queue}, sync_off=True)
                    left, removed = _ready(conn, queue), before - db.queue_messages(conn, queue)
                    # the rate is messages removed from the table, as ops.run_one counts it: pgbench's
                    # tps counts a delete-mode poll that found nothing as work; and a transaction
                    # takes one message at most, so more removed than transactions is a broken count
                    error = r.error or ("" if left > 0 else "the queue ran empty: the run measured empty polls") or (
                        f"{removed:,} messages removed by {r.transactions:,} transactions of one message each"
                        if removed > r.transactions else "")
                    rate = removed / r.elapsed if r.elapsed > 0 else 0.0
                    runs.append({"mode": mode, "queue": queue, "round": rnd, "tps": rate if not error else None,
                                 "pgbench_tps": r.tps, "removed": removed, "transactions": r.transactions,
                                 "left": left, "ok": not error, "error": error})
                    log(f"groups throughput {mode} {queue} round {rnd + 1}: {rate:,.0f} msg/s ({left:,} left)"
                        + (f" ERROR {error}" if error else ""))
    return {"runs": runs, "ratio": _ratios(runs), "messages": n, "groups": profile.groups_count,
            "clients": profile.groups_clients, "seconds": profile.groups_seconds}


def _fairness(srv: db.Server, profile: config.Profile, log: Callable[[str], None]) -> dict[str, Any]:
    big, small, per = profile.groups_big, profile.groups_small, 10
    with srv.database("groups") as name, psycopg.connect(srv.dsn(name, sync_off=True), autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('fair', p_group_concurrency => 1)")
        t0 = time.perf_counter()
        for lo in range(0, big, BATCH):
            conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('fair', "
                         "array_fill('\\x01'::bytea, ARRAY[%s]), p_groups => array_fill('big'::text, ARRAY[%s]))",
                         (min(BATCH, big - lo),) * 2)
        load_s = time.perf_counter() - t0
        _load(conn, "fair", small * per, small, prefix="small")
        log(f"groups fairness: {big:,} messages of one group enqueued in {load_s:.1f} s, then {small} groups of {per}")
        first: dict[str, int] = {}
        big_in_first = 0
        deliveries = 0
        limit = 3 * small + 1000
        while len(first) < small and deliveries < limit:
            row = conn.execute("SELECT d.id, d.attempts, m.group_key FROM pgqueue.message_dequeue('fair', 1, 30000) d "
                               "JOIN pgqueue.message m ON m.id = d.id").fetchone()
            if row is None:
                break
            deliveries += 1
            conn.execute("SELECT pgqueue.message_complete(%s, %s)", (row[0], row[1]))
            if row[2] == "big":
                big_in_first += deliveries <= 2 * small
            else:
                first.setdefault(row[2], deliveries)
    last_first = max(first.values()) if len(first) == small else None
    log(f"groups fairness: every small group served by delivery {last_first}")
    return {"big": big, "small": small, "per_group": per, "served": len(first), "last_first": last_first,
            "bound": 2 * small, "big_in_first": big_in_first, "deliveries": deliveries, "load_s": load_s}


def _buffers(conn: psycopg.Connection[Any], queue: str) -> int:
    """Shared buffers of one delete-mode dequeue (EXPLAIN ANALYZE, with its nested statements)."""
    plan = conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM pgqueue.message_dequeue({}, 1, 0)")
                        .format(sql.Literal(queue))).fetchone()
    node = plan[0][0]["Plan"] if plan else {}
    return int(node.get("Shared Hit Blocks", 0)) + int(node.get("Shared Read Blocks", 0))


def _flat(srv: db.Server, profile: config.Profile, log: Callable[[str], None]) -> dict[str, Any]:
    """Each axis: a small and a large queue, loaded and vacuumed, then dequeued alternately (one
    call from each in turn, so that both see the same load on the machine)."""
    big = profile.groups_flat_messages
    axes = {"messages": [("small", 1000, 1000), ("large", big, 1000)],
            "groups": [("small", profile.groups_flat_groups_messages, 10),
                       ("large", profile.groups_flat_groups_messages, profile.groups_flat_groups)]}
    out: dict[str, dict[str, Any]] = {}
    with srv.database("groups") as name, psycopg.connect(srv.dsn(name, sync_off=True), autocommit=True) as conn:
        for axis, cases in axes.items():
            for size, n, groups in cases:
                conn.execute("SELECT pgqueue.queue_create(%s, p_group_concurrency => 1)", (f"{axis}_{size}",))
                _load(conn, f"{axis}_{size}", n, groups)
            conn.execute("VACUUM (ANALYZE) pgqueue.message")
            times: dict[str, list[float]] = {"small": [], "large": []}
            calls = min(profile.groups_flat_calls, min(n for _, n, _ in cases) // 2)
            for i in range(calls + 5):
                for size, _, _ in cases:
                    t0 = time.perf_counter()
                    conn.execute(DEQUEUE, (f"{axis}_{size}",)).fetchall()
                    if i >= 5:  # warm-up calls are not counted
                        times[size].append((time.perf_counter() - t0) * 1000)
            per: dict[str, Any] = {}
            for size, n, groups in cases:
                bufs = statistics.median(_buffers(conn, f"{axis}_{size}") for _ in range(3))
                per[size] = {"messages": n, "groups": groups, "median_ms": statistics.median(times[size]),
                             "buffers": int(bufs)}
                log(f"groups flat {axis} {size}: {n:,} messages, {groups:,} groups: "
                    f"{per[size]['median_ms']:.3f} ms, {int(bufs)} buffers")
            per["ratio_ms"] = per["large"]["median_ms"] / per["small"]["median_ms"]
            per["ratio_buffers"] = per["large"]["buffers"] / max(per["small"]["buffers"], 1)
            out[axis] = per
    return out


def _rate(srv: db.Server, profile: config.Profile, log: Callable[[str], None]) -> dict[str, Any]:
    rate, seconds = profile.groups_rate, profile.groups_rate_seconds
    n = int(rate * seconds * 1.5) + 1000
    with srv.database("groups") as name, psycopg.connect(srv.dsn(name), autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('rl', p_rate_limit => %s)", (rate,))
        _load(conn, "rl", n, None)
        r = db.pgbench(srv, name, "pgqueue_dequeue_batch.sql", clients=4, seconds=seconds,
                       defines={"queue": "rl", "batch": 10}, sync_off=True)
        delivered = n - _ready(conn, "rl")
    expected = rate * r.elapsed if r.ok else None
    error = r.error or ("" if delivered < n else "the queue ran empty")
    log(f"groups rate limit {rate}/s for {r.elapsed:.1f} s: {delivered:,} delivered ({r.tps:,.0f} calls/s)")
    return {"rate": rate, "seconds": r.elapsed, "delivered": delivered, "expected": expected, "calls_per_s": r.tps,
            "error": (delivered / expected - 1) if expected and not error else None, "ok": not error,
            "problem": error}


def run_groups(srv: db.Server, profile: config.Profile, log: Callable[[str], None]) -> dict[str, Any]:
    return {"throughput": _throughput(srv, profile, log), "fairness": _fairness(srv, profile, log),
            "flat": _flat(srv, profile, log), "rate": _rate(srv, profile, log)}
