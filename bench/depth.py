"""Target 5: the cost of one dequeue against the depth of a pathological backlog.

For each shape a fresh database gets a backlog built with INSERT ... SELECT generate_series
straight into the extension's tables, grown through the depths (1k, 10k, 100k, 1M), with
VACUUM (ANALYZE) after each step. At each depth a new session dequeues (delete mode, one
message) from the queue "depth" (dead-lettering on: max_attempts 5):

* latency: the client's wall time of ``SELECT * FROM pgqueue.message_dequeue('depth', 1, 0)``
  over many calls (median and 90th percentile; a few warm-up calls are discarded);
* buffers: shared buffers hit + read of the same call under EXPLAIN (ANALYZE, BUFFERS), which
  include those of the statements nested in the function (median of three);
* where the buffers go: one call under auto_explain with nested statements (when the server
  lets us LOAD it), statement by statement.

Shapes (the first five are the issue's; the last two are the pathologies found on the way):

* future: messages scheduled an hour ahead, in the same queue;
* leased: messages under a lease that runs out in an hour;
* dead: dead letters of the same queue;
* other_queue: ready messages of another queue;
* ready: the ready backlog itself;
* expired_leases: leases that ran out (a crashed worker fleet), attempts below max_attempts;
* dead_tuples: messages taken in delete mode whose rows are deleted but not yet vacuumed
  (autovacuum off for the table, ANALYZE only), at the head of the ready index;
* dead_leases: messages that were leased and completed, not yet vacuumed, whose lease time
  has passed: their entries sit in the range of the leased index that every dequeue probes
  for expired leases. These two are the churn pathology.

Outside the "ready" and "expired_leases" shapes, the measured messages are a small batch of
ready messages added at each depth.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import psycopg

from bench import db

SHAPES = ["future", "leased", "dead", "other_queue", "ready", "expired_leases", "dead_tuples", "dead_leases"]
EXTRA_SHAPES = {"expired_leases", "dead_tuples", "dead_leases"}
SHAPE_LABELS = {
    "future": "future-scheduled",
    "leased": "leased (lease running)",
    "dead": "dead letters",
    "other_queue": "other queue's backlog",
    "ready": "ready backlog",
    "expired_leases": "expired leases (extra)",
    "dead_tuples": "deleted, not yet vacuumed (extra)",
    "dead_leases": "completed leases, not yet vacuumed (extra)",
}

DEQUEUE = "SELECT * FROM pgqueue.message_dequeue('depth', 1, 0)"

_INSERT_MSG = (
    "INSERT INTO pgqueue.message (queue_id, dequeue_at, locked_until, attempts, created_at, content) "
    "SELECT %(qid)s, {dequeue_at}, {locked_until}, %(attempts)s, %(now)s, %(payload)s "
    "FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g")


def _grow(conn: psycopg.Connection[Any], shape: str, lo: int, hi: int, ids: dict[str, int], now: int) -> None:
    """Add rows lo..hi of a shape's pathological backlog."""
    p = {"qid": ids["depth"], "lo": lo, "hi": hi, "now": now, "payload": db.PAYLOAD, "attempts": 0}
    if shape == "future":
        conn.execute(_INSERT_MSG.format(dequeue_at="%(now)s + 3600000 + g", locked_until="NULL"), p)
    elif shape == "leased":
        conn.execute(_INSERT_MSG.format(dequeue_at="%(now)s - 7200000", locked_until="%(now)s + 3600000 + g"),
                     {**p, "attempts": 1})
    elif shape == "expired_leases":
        conn.execute(_INSERT_MSG.format(dequeue_at="%(now)s - 7200000", locked_until="%(now)s - 3600000 - g"),
                     {**p, "attempts": 1})
    elif shape == "other_queue":
        conn.execute(_INSERT_MSG.format(dequeue_at="%(now)s - 7200000 + g", locked_until="NULL"),
                     {**p, "qid": ids["depth_other"]})
    elif shape == "ready":
        conn.execute(_INSERT_MSG.format(dequeue_at="%(now)s - 7200000 + g", locked_until="NULL"), p)
    elif shape == "dead":
        conn.execute(
            "INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, attempts, created_at, dead_at, content, "
            "last_error) SELECT nextval('pgqueue.message_id_seq'), %(qid)s, %(now)s - 7200000, 5, %(now)s, "
            "%(now)s - g, %(payload)s, 'failed' FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) g", p)
    elif shape == "dead_leases":
        conn.execute(_INSERT_MSG.format(dequeue_at="%(now)s - 7200000", locked_until="%(now)s - 3600000 - g"),
                     {**p, "attempts": 1})
        conn.execute("DELETE FROM pgqueue.message WHERE queue_id = %(qid)s AND locked_until IS NOT NULL", p)
    elif shape == "dead_tuples":
        # far ahead of every ready message, so every probe of the ready index meets them first
        conn.execute(_INSERT_MSG.format(dequeue_at="%(now)s - 10000000000 + g", locked_until="NULL"), p)
        conn.execute("DELETE FROM pgqueue.message WHERE queue_id = %(qid)s AND dequeue_at < %(now)s - 9000000000",
                     p)
    else:
        raise ValueError(shape)


def _add_ready(conn: psycopg.Connection[Any], qid: int, n: int, now: int) -> None:
    conn.execute(_INSERT_MSG.format(dequeue_at="%(now)s - 3600000", locked_until="NULL"),
                 {"qid": qid, "lo": 1, "hi": n, "now": now, "payload": db.PAYLOAD, "attempts": 0})


def _top_buffers(plan: dict[str, Any]) -> int:
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


def _breakdown(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """One dequeue under auto_explain, as [{statement, buffers, ms}] for the statements nested in it."""
    notes: list[str] = []
    try:
        conn.execute("LOAD 'auto_explain'")
        for stmt in ("SET auto_explain.log_min_duration = 0", "SET auto_explain.log_analyze = on",
                     "SET auto_explain.log_buffers = on", "SET auto_explain.log_nested_statements = on",
                     "SET auto_explain.log_format = json", "SET auto_explain.log_level = notice"):
            conn.execute(stmt)
    except psycopg.Error:
        return []
    conn.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
    conn.execute(DEQUEUE).fetchall()
    conn.execute("SET auto_explain.log_min_duration = -1")
    out = []
    for note in notes:
        head, _, body = note.partition("plan:")
        try:
            doc = json.loads(body)
        except ValueError:
            continue
        text = " ".join(str(doc.get("Query Text", "")).split())
        ms = float(head.replace("duration:", "").replace("ms", "").strip() or 0)
        out.append({"statement": text[:160], "buffers": _top_buffers(doc.get("Plan", {})), "ms": ms})
    return out[:-1]  # the last one is the call itself (it ends after the statements nested in it)


def _build(server: db.Server, dbname: str, shape: str, level: int, ready: int) -> None:
    """Give a fresh database the backlog of one shape at one depth, plus ready messages to take."""
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('depth', p_max_attempts => 5)")
        conn.execute("SELECT pgqueue.queue_create('depth_other', p_max_attempts => 5)")
        ids: dict[str, int] = dict(conn.execute("SELECT name, id FROM pgqueue.queue").fetchall())
        now = int(conn.execute("SELECT pgqueue.now_ms()").fetchone()[0])  # type: ignore[index]
        if shape in ("dead_tuples", "dead_leases"):
            conn.execute("ALTER TABLE pgqueue.message SET (autovacuum_enabled = off)")
        if shape in ("ready", "expired_leases"):
            _grow(conn, shape, 1, level + ready, ids, now)
        else:
            _grow(conn, shape, 1, level, ids, now)
            if shape != "expired_leases":
                _add_ready(conn, ids["depth"], ready, now)
        if shape in ("dead_tuples", "dead_leases"):
            conn.execute("ANALYZE pgqueue.message")
        else:
            db.vacuum_analyze(conn, ["pgqueue.message", "pgqueue.dead_letter"])


def measure(server: db.Server, dbnames: list[str], *, samples: int, warmup: int,
            max_seconds: float) -> list[dict[str, Any]]:
    """Measure one dequeue's latency and buffers at each depth (one database per depth).

    The depths are sampled in turn (one dequeue at each, round and round) so that noise from
    the machine hits every depth alike. Sessions have synchronous_commit off, so that the
    commit's WAL flush, the same at every depth, does not drown the dequeue's own work.
    """
    conns = [psycopg.connect(server.dsn(name, sync_off=True), autocommit=True) for name in dbnames]
    try:
        empty = [0] * len(conns)
        for i, conn in enumerate(conns):
            for _ in range(warmup):
                if not conn.execute(DEQUEUE, prepare=True).fetchall():
                    empty[i] += 1
        times: list[list[float]] = [[] for _ in conns]
        deadline = time.perf_counter() + max_seconds * len(conns)
        while len(times[0]) < samples and (len(times[0]) < 3 or time.perf_counter() < deadline):
            for i, conn in enumerate(conns):
                t = time.perf_counter()
                rows = conn.execute(DEQUEUE, prepare=True).fetchall()
                times[i].append((time.perf_counter() - t) * 1000)
                if not rows:
                    empty[i] += 1
        out = []
        for i, conn in enumerate(conns):
            bufs, execs = [], []
            for _ in range(3):
                doc = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + DEQUEUE).fetchone()[0][0]  # type: ignore[index]
                bufs.append(_top_buffers(doc["Plan"]))
                execs.append(float(doc["Execution Time"]))
            ts = sorted(times[i])
            out.append({
                "latency_ms": statistics.median(ts), "latency_p90_ms": ts[int(0.9 * (len(ts) - 1))],
                "samples": len(ts), "buffers": statistics.median(bufs), "exec_ms": statistics.median(execs),
                "empty": empty[i], "breakdown": _breakdown(conn),
            })
        return out
    finally:
        for conn in conns:
            conn.close()


def run_depth(server: db.Server, profile: Any, log: Any) -> dict[str, Any]:
    levels = list(profile.depth_levels)
    ready = profile.depth_warmup + profile.depth_samples + 10
    out: dict[str, Any] = {"levels": levels, "labels": SHAPE_LABELS, "extra": sorted(EXTRA_SHAPES),
                           "samples": profile.depth_samples, "shapes": {}}
    for shape in SHAPES:
        names = [server.create_db("depth") for _ in levels]
        try:
            for name, level in zip(names, levels):
                _build(server, name, shape, level, ready)
            results = measure(server, names, samples=profile.depth_samples, warmup=profile.depth_warmup,
                              max_seconds=profile.depth_max_seconds)
        finally:
            for name in names:
                server.drop_db(name)
        out["shapes"][shape] = {str(level): r for level, r in zip(levels, results)}
        for level, r in zip(levels, results):
            log(f"  depth {shape:<15} {level:>9,}: {r['latency_ms']:.3f} ms, {r['buffers']:.0f} buffers"
                + (f" ({r['empty']} empty dequeues!)" if r["empty"] else ""))
    return out
