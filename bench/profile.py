"""Where the time of one call goes: the cost of each operation in a single session.

No concurrency here: one session (synchronous_commit off, so the disk is out of the picture)
calls each operation many times, in rounds with the order rotated, and the median time per
call is its CPU cost plus one round trip. Then a few calls run under auto_explain (loaded
in the session, nested statements on, timing off, buffers on), and the statements inside
the functions are summed per call: what is left of the call's total is PL/pgSQL and
function-call overhead (assignments, argument checks, SET search_path, plan cache).
The same calls also run in a session with plan_cache_mode = force_generic_plan: the
difference is the time spent re-planning statements on every call (the plan cache keeps
choosing custom plans when a generic plan looks worse). This is evidence for the
single-operation targets (1-3), not a target itself.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from typing import Any

import psycopg

from bench import db
from bench.ops import DESIGNS, PAYLOAD_TEXT, prepare

P = db.PAYLOAD

CALLS: dict[str, tuple[str, str, Any]] = {
    # key: (label, statement, parameters)
    "select1": ("SELECT 1", "SELECT 1", None),
    "enqueue:raw": ("raw INSERT", "INSERT INTO bench_raw.message (content) VALUES (%s)", [P]),
    "enqueue:seed000": ("seed 000 INSERT", "INSERT INTO seed000.queue (element_identifier, time_inserted, payload) "
                        "VALUES (gen_random_uuid(), current_timestamp, %s::json)", [PAYLOAD_TEXT]),
    "enqueue:seed001": ("seed 001 message_create", "SELECT seed001.message_create(%s, NULL)", [P]),
    "enqueue:seed004": ("seed 004 INSERT", "INSERT INTO seed004.payloads (attempts, value) VALUES (0, %s)", [P]),
    "enqueue:pgqueue": ("pgqueue message_create", "SELECT pgqueue.message_create('bench', %s)", [P]),
    "dequeue:seed000": ("seed 000 DELETE ... SKIP LOCKED",
                        "DELETE FROM seed000.queue pse WHERE pse.element_identifier = (SELECT "
                        "pse_inner.element_identifier FROM seed000.queue pse_inner ORDER BY pse_inner.time_inserted "
                        "ASC FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING pse.element_identifier, pse.time_inserted, "
                        "pse.payload", None),
    "dequeue:seed001": ("seed 001 message_dequeue", "SELECT seed001.message_dequeue()", None),
    "dequeue:seed004": ("seed 004 DELETE ... IN", "DELETE FROM seed004.payloads WHERE id IN (SELECT p1.id FROM "
                        "seed004.payloads AS p1 WHERE p1.state = 'enqueued' ORDER BY p1.modified_at ASC FOR UPDATE "
                        "SKIP LOCKED LIMIT 1) RETURNING value", None),
    "dequeue:pgqueue": ("pgqueue message_dequeue (delete mode)",
                        "SELECT * FROM pgqueue.message_dequeue('bench', 1, 0)", None),
    "lease:pgqueue": ("pgqueue message_dequeue with a lease",
                      "SELECT * FROM pgqueue.message_dequeue('bench', 1, 30000)", None),
    "complete:pgqueue": ("pgqueue message_complete", "SELECT pgqueue.message_complete(%s, %s)", "lease"),
}

BREAKDOWN = ["enqueue:pgqueue", "dequeue:pgqueue", "lease:pgqueue", "complete:pgqueue", "enqueue:seed001",
             "dequeue:seed001"]


def _fill(conn: psycopg.Connection[Any], calls: int) -> None:
    for name in ("pgqueue", "seed000", "seed001", "seed004", "raw"):
        n = calls * (3 if name == "pgqueue" else 1) * 4
        prepare(conn, DESIGNS[name], n if DESIGNS[name].fill else 0)


def _time(conn: psycopg.Connection[Any], key: str, n: int, leased: list[tuple[int, int]]) -> float:
    _label, stmt, params = CALLS[key]
    t = time.perf_counter()
    for _ in range(n):
        cur = conn.execute(stmt, leased.pop() if params == "lease" else params, prepare=True)
        rows = cur.fetchall() if cur.description else []
        if key == "lease:pgqueue":
            leased.append((rows[0][0], rows[0][2]))
    return (time.perf_counter() - t) / n * 1e6


def _auto_explain(conn: psycopg.Connection[Any]) -> list[str]:
    """Load auto_explain in the session, plans sent to the client as notices; return their list."""
    notes: list[str] = []
    conn.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
    for stmt in ("LOAD 'auto_explain'", "SET auto_explain.log_analyze = on", "SET auto_explain.log_timing = off",
                 "SET auto_explain.log_buffers = on", "SET auto_explain.log_nested_statements = on",
                 "SET auto_explain.log_format = json", "SET auto_explain.log_level = notice"):
        conn.execute(stmt)
    return notes


def _breakdown(conn: psycopg.Connection[Any], notes: list[str], key: str, n: int,
               leased: list[tuple[int, int]]) -> dict[str, Any]:
    conn.execute("SET auto_explain.log_min_duration = 0")
    _label, stmt, params = CALLS[key]
    agg: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    top_ms = 0.0
    for _ in range(n):
        notes.clear()
        args = leased.pop() if params == "lease" else params
        cur = conn.execute(stmt, args, prepare=True)
        rows = cur.fetchall() if cur.description else []
        if key == "lease:pgqueue":
            leased.append((rows[0][0], rows[0][2]))
        parsed = []
        for note in notes:
            head, _, body = note.partition("plan:")
            try:
                doc = json.loads(body)
            except ValueError:
                continue
            ms = float(head.replace("duration:", "").replace("ms", "").strip() or 0)
            plan = doc.get("Plan", {})
            parsed.append((" ".join(str(doc.get("Query Text", "")).split()), ms,
                           int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))))
        if not parsed:
            continue
        top_ms += parsed[-1][1]  # the statement itself ends last; the nested ones before it
        for text, ms, bufs in parsed[:-1]:
            a = agg[text[:200]]
            a[0] += 1
            a[1] += ms
            a[2] += bufs
    conn.execute("SET auto_explain.log_min_duration = -1")
    stmts: list[dict[str, Any]] = sorted(
        ({"statement": k, "per_call": v[0] / n, "ms": v[1] / n, "buffers": v[2] / n} for k, v in agg.items()),
        key=lambda s: -float(s["ms"]))
    total = top_ms / n
    nested = sum(float(s["ms"]) for s in stmts)
    return {"calls": n, "total_ms": total, "nested_ms": nested, "overhead_ms": max(0.0, total - nested),
            "statements": stmts}


PLAN_MODES = ["auto", "force_generic_plan"]


def run_profile(server: db.Server, profile: Any, log: Any) -> dict[str, Any]:
    """Per-call cost of each operation (best round: the least disturbed by the machine), in a
    session with the default plan_cache_mode and in one forcing generic plans (how much of a
    call is re-planning its statements), then the nested-statement breakdown."""
    calls = 300 if profile.name != "smoke" else 20
    rounds = 8 if profile.name == "full" else (4 if profile.name == "quick" else 1)
    per_call: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in PLAN_MODES}
    keys = list(CALLS)
    with server.database("profile") as dbname:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            _fill(conn, calls * (rounds + 2))
        conns = {m: psycopg.connect(server.dsn(dbname, sync_off=True), autocommit=True) for m in PLAN_MODES}
        leased: dict[str, list[tuple[int, int]]] = {m: [] for m in PLAN_MODES}
        try:
            for mode, conn in conns.items():
                conn.execute(f"SET plan_cache_mode = {mode}")
                for key in keys:  # warm up every statement (plan caches)
                    if key != "complete:pgqueue":
                        _time(conn, key, 10, leased[mode])
            for rnd in range(rounds):
                order = keys[rnd % len(keys):] + keys[:rnd % len(keys)]
                for key in order:
                    for mode, conn in conns.items():
                        if key == "complete:pgqueue" and len(leased[mode]) < calls:
                            _time(conn, "lease:pgqueue", calls - len(leased[mode]), leased[mode])
                        per_call[mode][key].append(_time(conn, key, calls, leased[mode]))
        finally:
            for conn in conns.values():
                conn.close()
        breakdown = {}
        n = max(10, calls // 5)
        with psycopg.connect(server.dsn(dbname, sync_off=True), autocommit=True) as conn:
            lease_list: list[tuple[int, int]] = []
            _time(conn, "lease:pgqueue", n, lease_list)
            try:
                notes = _auto_explain(conn)
            except psycopg.Error as exc:
                log(f"  profile: no breakdown, auto_explain could not be loaded: {exc}")
            else:
                for key in BREAKDOWN:
                    breakdown[key] = _breakdown(conn, notes, key, n, lease_list)
    best = {m: {k: min(v) for k, v in per_call[m].items()} for m in PLAN_MODES}
    for key in keys:
        log(f"  profile {key:<18} {best['auto'][key]:8.1f} µs/call "
            f"({best['force_generic_plan'][key]:.1f} with generic plans)")
    return {"calls": calls, "rounds": rounds, "labels": {k: v[0] for k, v in CALLS.items()},
            "per_call_us": best["auto"], "per_call_generic_us": best["force_generic_plan"],
            "breakdown": breakdown}
