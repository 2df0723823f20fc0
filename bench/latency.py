"""Target 8 (wake-up latency with LISTEN/NOTIFY) and target 9 (queue_stats on a deep queue).

Latency: a queue created with p_notify => true; an idle worker holds one connection that
LISTENs on the queue's channel and another that dequeues (with a lease, then completes). A producer enqueues one message
at a time with random gaps (the worker is idle each time); the latency of a message is from
just before the producer's message_create call to the moment the worker's dequeue has
returned it: the enqueue's commit, the notification, the wake-up and the dequeue. Measured
with durable commits (the server's settings) and with synchronous_commit off.

queue_stats: a queue of 1M messages (ready, scheduled, leased, expired leases, and dead
letters beside), vacuumed; queue_stats('stats') is timed (client wall time) and explained.
Then producers and consumers (pgbench, synchronous_commit off) run on the same queue while
nothing, a 1 Hz monitor, or a back-to-back loop calls queue_stats; the order of the three phases
rotates every round, and each phase runs on a queue built afresh the same way (the consumers
take the expired leases and ready messages, the producers add messages: a phase on the queue
the one before left measured other work). The consumers' rate is messages removed from the
table, not pgbench's transactions.
"""

from __future__ import annotations

import random
import statistics
import threading
import time
from typing import Any

import psycopg

from bench import db


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def _wakeup_run(server: db.Server, dbname: str, *, messages: int, interval: float,
                sync_off: bool) -> dict[str, Any]:
    sent: dict[int, float] = {}
    got: dict[int, float] = {}
    woke: dict[int, float] = {}  # when the notification that led to the message arrived
    dup = 0
    ready = threading.Event()
    done = threading.Event()
    errors: list[str] = []

    def worker() -> None:
        nonlocal dup
        try:
            with psycopg.connect(server.dsn(dbname, sync_off=sync_off), autocommit=True) as listen, \
                    psycopg.connect(server.dsn(dbname, sync_off=sync_off), autocommit=True) as work:
                listen.execute('LISTEN "pgqueue.latency"')
                ready.set()
                while not done.is_set():
                    for _n in listen.notifies(timeout=0.2, stop_after=1):
                        t_wake = time.perf_counter()
                        while True:
                            rows = work.execute("SELECT id, attempts, content FROM "
                                                "pgqueue.message_dequeue('latency', 10, 30000)", prepare=True).fetchall()
                            t = time.perf_counter()
                            if not rows:
                                break
                            for mid, attempts, content in rows:
                                token = int(bytes(content))
                                if token in got:
                                    dup += 1
                                got[token] = t
                                woke[token] = t_wake
                                work.execute("SELECT pgqueue.message_complete(%s, %s)", [mid, attempts],
                                             prepare=True)
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            ready.set()

    th = threading.Thread(target=worker)
    th.start()
    ready.wait(10)
    rng = random.Random(8)
    with psycopg.connect(server.dsn(dbname, sync_off=sync_off), autocommit=True) as prod:
        for token in range(messages):
            time.sleep(interval * (0.5 + rng.random()))
            t = time.perf_counter()
            sent[token] = t
            prod.execute("SELECT pgqueue.message_create('latency', %s)", [str(token).encode()], prepare=True)
        deadline = time.perf_counter() + 5
        while len(got) < messages and time.perf_counter() < deadline and not errors:
            time.sleep(0.01)
    done.set()
    th.join()
    lat = [(got[k] - sent[k]) * 1000 for k in sent if k in got]
    to_wake = [(woke[k] - sent[k]) * 1000 for k in sent if k in woke]
    to_take = [(got[k] - woke[k]) * 1000 for k in sent if k in woke]
    ok = not errors and len(got) == messages and dup == 0
    problems = errors[:]
    if len(got) != messages:
        problems.append(f"{messages - len(got)} of {messages} messages never received")
    if dup:
        problems.append(f"{dup} messages received twice")
    return {"sync_off": sync_off, "messages": messages, "received": len(got), "ok": ok, "problems": problems,
            "p50_ms": _percentile(lat, 0.5), "p90_ms": _percentile(lat, 0.9), "p99_ms": _percentile(lat, 0.99),
            "max_ms": max(lat) if lat else None, "latencies_ms": lat,
            "notify_p50_ms": _percentile(to_wake, 0.5), "notify_p99_ms": _percentile(to_wake, 0.99),
            "dequeue_p50_ms": _percentile(to_take, 0.5), "dequeue_p99_ms": _percentile(to_take, 0.99)}


def run_latency(server: db.Server, profile: Any, log: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": []}
    with server.database("latency") as dbname:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            conn.execute("SELECT pgqueue.queue_create('latency', p_max_attempts => 5, p_notify => true)")
        for sync_off in (False, True):
            r = _wakeup_run(server, dbname, messages=profile.latency_messages, interval=profile.latency_interval,
                            sync_off=sync_off)
            out["runs"].append(r)
            log(f"  wake-up latency ({'synchronous_commit off' if sync_off else 'durable'}): "
                f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms" + ("" if r["ok"] else f" FAILURE {r['problems']}"))
    return out


# ---------------------------------------------------------------------------------------
# queue_stats
# ---------------------------------------------------------------------------------------

STATS_CALL = "SELECT * FROM pgqueue.queue_stats('stats')"


def _build_stats(conn: psycopg.Connection[Any], n: int) -> dict[str, int]:
    """A queue 'stats' of n messages: 70% ready, 15% scheduled, 10% leased, 5% expired leases;
    plus n/20 dead letters."""
    conn.execute("SELECT pgqueue.queue_create('stats', p_max_attempts => 5)")
    qid = conn.execute("SELECT id FROM pgqueue.queue WHERE name = 'stats'").fetchone()[0]  # type: ignore[index]
    now = int(conn.execute("SELECT pgqueue.now_ms()").fetchone()[0])  # type: ignore[index]
    parts = {"ready": int(n * 0.70), "scheduled": int(n * 0.15), "leased": int(n * 0.10)}
    parts["expired"] = n - sum(parts.values())
    shapes = {
        "ready": ("%(now)s - 3600000 + g / 100", "NULL", 0),
        "scheduled": ("%(now)s + 3600000 + g", "NULL", 0),
        "leased": ("%(now)s - 7200000", "%(now)s + 3600000 + g", 1),
        "expired": ("%(now)s - 7200000", "%(now)s - 3600000 - g", 1),
    }
    for name, count in parts.items():
        dequeue_at, locked_until, attempts = shapes[name]
        conn.execute(
            f"INSERT INTO pgqueue.message (queue_id, dequeue_at, locked_until, attempts, created_at, content) "
            f"SELECT %(qid)s, {dequeue_at}, {locked_until}, %(attempts)s, %(now)s, %(payload)s "
            f"FROM generate_series(1::bigint, %(n)s::bigint) g",
            {"qid": qid, "now": now, "attempts": attempts, "payload": db.PAYLOAD, "n": count})
    conn.execute(
        "INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, attempts, created_at, dead_at, content, last_error) "
        "SELECT nextval('pgqueue.message_id_seq'), %(qid)s, %(now)s, 5, %(now)s, %(now)s - g, %(payload)s, 'x' "
        "FROM generate_series(1::bigint, %(n)s::bigint) g", {"qid": qid, "now": now, "payload": db.PAYLOAD,
                                                             "n": n // 20})
    db.vacuum_analyze(conn, ["pgqueue.message", "pgqueue.dead_letter"])
    return parts


def run_stats(server: db.Server, profile: Any, log: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": profile.stats_messages}
    with server.database("stats") as dbname:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            out["parts"] = _build_stats(conn, profile.stats_messages)
            times = []
            for _ in range(profile.stats_calls):
                t = time.perf_counter()
                row = conn.execute(STATS_CALL).fetchone()
                times.append((time.perf_counter() - t) * 1000)
            out["stats_row"] = [str(v) for v in (row or [])]
            doc = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + STATS_CALL).fetchone()[0][0]  # type: ignore[index]
            out["explain_ms"] = float(doc["Execution Time"])
            out["buffers"] = int(doc["Plan"].get("Shared Hit Blocks", 0)) + int(doc["Plan"].get("Shared Read Blocks", 0))
            t = time.perf_counter()
            conn.execute("SELECT * FROM pgqueue.queue_stats()").fetchall()
            out["all_queues_ms"] = (time.perf_counter() - t) * 1000
        out["call_ms"] = times
        out["median_ms"] = statistics.median(times)
        out["max_ms"] = max(times)
        log(f"  queue_stats on {profile.stats_messages:,} messages: median {out['median_ms']:.1f} ms, "
            f"max {out['max_ms']:.1f} ms, {out['buffers']} buffers")
    return out | _stats_phases(server, profile, log)


STATS_MODES = ("none", "every_1s", "back_to_back")


def _stats_phases(server: db.Server, profile: Any, log: Any) -> dict[str, Any]:
    """Producers and consumers on the same queue, with and without a stats caller beside them.

    The order of the modes rotates every round (the machine's drift does not fall on one mode),
    and every phase gets a database of its own with the queue built as _build_stats builds it:
    the consumers eat the expired leases and the ready messages, so the phases that came after
    the first on one fixture measured other work (with the monitor beside them, consumers ran
    1.22x as fast as without it)."""
    phases: list[dict[str, Any]] = []
    for rnd in range(profile.stats_repeats):
        shift = rnd % len(STATS_MODES)
        for mode in STATS_MODES[shift:] + STATS_MODES[:shift]:
            with server.database("stats") as dbname:
                with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
                    _build_stats(conn, profile.stats_messages)
                phases.append(_stats_phase(server, dbname, profile, mode) | {"round": rnd})
            p = phases[-1]
            log(f"  stats beside load ({mode}): produce {p['produce_tps']:,.0f}/s, "
                f"consume {p['consume_tps']:,.0f} msg/s, {p['stats_calls']} stats calls"
                + ("" if p["ok"] else f" FAILURE {p['error']}"))
    med: dict[str, dict[str, float]] = {}
    for mode in STATS_MODES:
        these = [p for p in phases if p["mode"] == mode and p["ok"]]
        med[mode] = {k: statistics.median([p[k] for p in these]) if these else 0.0
                     for k in ("produce_tps", "consume_tps")}
    return {"phases": phases, "median": med}


def _stats_phase(server: db.Server, dbname: str, profile: Any, mode: str) -> dict[str, Any]:
    clients = profile.stats_clients
    kw = {"clients": clients, "seconds": profile.stats_seconds, "transactions": profile.stats_transactions,
          "sync_off": True, "defines": {"queue": "stats"}}
    stop = threading.Event()
    calls: list[float] = []

    def caller() -> None:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            while not stop.is_set():
                t = time.perf_counter()
                conn.execute(STATS_CALL).fetchall()
                calls.append((time.perf_counter() - t) * 1000)
                if mode == "every_1s":
                    stop.wait(max(0.0, 1.0 - (time.perf_counter() - t)))

    th = threading.Thread(target=caller) if mode != "none" else None
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        before = db.queue_messages(conn, "stats")
    prod = db.pgbench_popen(server, dbname, "pgqueue_create.sql", **kw)
    cons = db.pgbench_popen(server, dbname, "pgqueue_dequeue.sql", **kw)
    if th:
        th.start()
    rp, rc = db.parse_pgbench(prod), db.parse_pgbench(cons)
    stop.set()
    if th:
        th.join()
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        after = db.queue_messages(conn, "stats")
    return _phase_result(mode, rp, rc, before, after) | {
        "stats_calls": len(calls), "stats_median_ms": statistics.median(calls) if calls else None}


def _phase_result(mode: str, rp: db.PgbenchResult, rc: db.PgbenchResult, before: int,
                  after: int) -> dict[str, Any]:
    """A phase's rates: the producers' transactions (one message each) a second, and the messages
    the consumers removed from the table a second (pgbench's tps counted a delete-mode poll that
    found nothing as work). A consumer transaction removes one message at most: more removed than
    transactions, or fewer than none, is a broken count, and the phase fails."""
    removed = before + rp.transactions - after
    error = rp.error or rc.error
    if not error and not 0 <= removed <= rc.transactions:
        error = (f"{removed:,} messages removed ({before:,} + {rp.transactions:,} created - {after:,} left) "
                 f"by {rc.transactions:,} dequeues of one message each")
    return {"mode": mode, "ok": not error, "error": error, "produce_tps": rp.tps,
            "consume_tps": removed / rc.elapsed if rc.elapsed > 0 else 0.0, "consume_pgbench_tps": rc.tps,
            "removed": removed}
