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

Last, two cost ladders, measured inside the server (a DO block that calls the step and commits,
many times, synchronous_commit off; no round trip, no client). For message_create: seed 001's
whole message_create, then PL/pgSQL functions that add pgqueue's work one piece at a time (the
INSERT alone into pgqueue.message, + the queue look-up by name, + the queue's lock stripe,
+ the re-check), then pgqueue.message_create itself. For the delete-mode dequeue: seed 001's
message_dequeue, then the ready-index probe and DELETE alone on pgqueue.message, + the message's
columns returned as message_dequeue returns them, + its SET clauses, + the queue look-up and
lock stripe, + the expired-lease probe, + the counters, then pgqueue.message_dequeue (what is
left: the session hints and the take's own function). The dequeue steps all run with
plan_cache_mode = force_generic_plan, as message_dequeue does, each from a fresh, vacuumed
backlog. Each ladder shows which part of the gap to seed 001 each piece costs.
"""

from __future__ import annotations

import json
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


#: The ladders: (key, label, statement run in the loop; v_p is the payload, v_q the queue id). The
#: bench_ladder functions are created in the profile database only (LADDER_SQL); they are not
#: part of pgqueue. Dequeue steps start from a fresh, vacuumed backlog of their own table.
LADDER_CREATE: list[tuple[str, str, str]] = [
    ("raw", "raw INSERT (primary key only)", "INSERT INTO bench_raw.message (content) VALUES (v_p)"),
    ("seed001", "seed 001 message_create", "PERFORM seed001.message_create(v_p, NULL)"),
    ("insert", "PL/pgSQL: the INSERT into pgqueue.message alone (queue id given)",
     "PERFORM bench_ladder.insert_only(v_q, v_p)"),
    ("lookup", "+ find the queue by name", "PERFORM bench_ladder.lookup_insert('bench', v_p)"),
    ("lock", "+ the queue's lock stripe (pgqueue._queue_lock)", "PERFORM bench_ladder.lookup_lock_insert('bench', v_p)"),
    ("recheck", "+ the INSERT re-checks the queue after the lock (WHERE EXISTS)",
     "PERFORM bench_ladder.lookup_lock_recheck_insert('bench', v_p)"),
    ("pgqueue", "pgqueue.message_create (+ NULL and notify checks, capped-queue branch, pinned search_path)",
     "PERFORM pgqueue.message_create('bench', v_p)"),
]
LADDER_DEQUEUE: list[tuple[str, str, str]] = [
    ("seed001", "seed 001 message_dequeue", "PERFORM seed001.message_dequeue()"),
    ("probe", "PL/pgSQL: the ready-index probe and the DELETE alone on pgqueue.message (queue id given)",
     "PERFORM bench_ladder.dq_probe_delete(v_q)"),
    ("returning", "+ the message's columns returned (RETURNS TABLE, RETURN QUERY DELETE ... RETURNING)",
     "PERFORM bench_ladder.dq_returning(v_q)"),
    ("pinned", "+ message_dequeue's SET clauses (search_path, plan_cache_mode)",
     "PERFORM bench_ladder.dq_pinned(v_q)"),
    ("lookup_lock", "+ find the queue by name and take its lock stripe (pgqueue._queue_lock)",
     "PERFORM bench_ladder.dq_lookup_lock('bench')"),
    ("expired", "+ the expired-lease probe (both probes under one LIMIT, ids gathered in an array)",
     "PERFORM bench_ladder.dq_expired('bench')"),
    ("counters", "+ the delivered and expired counters (queue_counters) in the DELETE",
     "PERFORM bench_ladder.dq_counters('bench')"),
    ("pgqueue", "pgqueue.message_dequeue (+ the session hints, the take in a function of its own, argument "
     "checks, the dead-letter, rate-limit and group branches)",
     "PERFORM pgqueue.message_dequeue('bench', 1, 0)"),
]
LADDERS = {"create": LADDER_CREATE, "dequeue": LADDER_DEQUEUE}

LADDER_SQL = """
CREATE SCHEMA IF NOT EXISTS bench_ladder;
CREATE OR REPLACE FUNCTION bench_ladder.insert_only(p_queue_id integer, p_content bytea) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE v_now bigint := pgqueue.to_epoch(now()); v_id bigint;
BEGIN
    INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
    VALUES (p_queue_id, v_now, v_now, p_content, NULL) RETURNING id INTO v_id;
    RETURN v_id;
END $$;
CREATE OR REPLACE FUNCTION bench_ladder.lookup_insert(p_queue text, p_content bytea) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE v_now bigint := pgqueue.to_epoch(now()); v_id bigint; v_queue_id integer;
BEGIN
    SELECT q.id INTO v_queue_id FROM pgqueue.queue q WHERE q.name = p_queue;
    INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
    VALUES (v_queue_id, v_now, v_now, p_content, NULL) RETURNING id INTO v_id;
    RETURN v_id;
END $$;
CREATE OR REPLACE FUNCTION bench_ladder.lookup_lock_insert(p_queue text, p_content bytea) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE v_now bigint := pgqueue.to_epoch(now()); v_id bigint; v_queue_id integer; v_locked boolean;
BEGIN
    SELECT q.id, pgqueue._queue_lock(q.id) INTO v_queue_id, v_locked
      FROM pgqueue.queue q WHERE q.name = p_queue;
    INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
    VALUES (v_queue_id, v_now, v_now, p_content, NULL) RETURNING id INTO v_id;
    RETURN v_id;
END $$;
CREATE OR REPLACE FUNCTION bench_ladder.lookup_lock_recheck_insert(p_queue text, p_content bytea) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE v_now bigint := pgqueue.to_epoch(now()); v_id bigint; v_queue_id integer; v_locked boolean;
BEGIN
    SELECT q.id, pgqueue._queue_lock(q.id) INTO v_queue_id, v_locked
      FROM pgqueue.queue q WHERE q.name = p_queue;
    INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
    SELECT v_queue_id, v_now, v_now, p_content, NULL
     WHERE EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = v_queue_id AND q.max_size IS NULL)
    RETURNING id INTO v_id;
    RETURN v_id;
END $$;
"""


# The dequeue ladder's functions, built from the same pieces so that each step differs from the
# one before by the piece its label names (from "returning" on they return what message_dequeue
# returns, from a DELETE ... RETURNING as message_dequeue's).
_DQ_RETURNS = ("RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,\n"
               "               content_type text, created_at bigint, locked_until bigint)")
_DQ_PIN = "SET search_path = pg_catalog, pg_temp SET plan_cache_mode = force_generic_plan"
_DQ_LOOKUP = """    SELECT q.id, q.max_attempts, pgqueue._queue_lock(q.id) INTO v_queue_id, v_max_attempts, v_locked
      FROM pgqueue.queue q WHERE q.name = p_queue;
"""
_DQ_PROBE = """    SELECT m.id INTO v_id FROM pgqueue.message m
     WHERE m.queue_id = v_queue_id AND m.locked_until IS NULL AND m.dequeue_at <= v_now
     ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED;
"""
_DQ_TAKE = """    SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
           array_agg(c.id) FILTER (WHERE c.dead)
      INTO v_ids, v_dead
      FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                  coalesce(m.attempts >= v_max_attempts, false) AS dead
                             FROM pgqueue.message m
                            WHERE m.queue_id = v_queue_id AND m.locked_until IS NOT NULL
                              AND m.locked_until <= v_now
                            ORDER BY m.locked_until, m.id LIMIT 1 FOR UPDATE SKIP LOCKED) e
            UNION ALL
            SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false
                             FROM pgqueue.message m
                            WHERE m.queue_id = v_queue_id AND m.locked_until IS NULL
                              AND m.dequeue_at <= v_now
                            ORDER BY m.dequeue_at, m.id LIMIT 1 FOR UPDATE SKIP LOCKED) r
            LIMIT 1) c;
    v_id := v_ids[1];
"""
_DQ_COUNT = """
       AND nextval(pgqueue._count_seq(v_queue_id, 1)) > 0
       AND (m.locked_until IS NULL OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)"""


def _dq_function(name: str, *, returning: bool, pinned: bool, lookup: bool, take: bool, count: bool) -> str:
    arg = "p_queue text" if lookup else "p_queue_id integer"
    setup = "" if lookup else "v_queue_id := p_queue_id;\n"
    delete = f"DELETE FROM pgqueue.message m WHERE m.id = v_id{_DQ_COUNT if count else ''}"
    if returning:
        delete = (f"RETURN QUERY {delete}\n    RETURNING m.id, m.content, m.attempts + 1, m.dequeue_at, m.state, "
                  "m.content_type, m.created_at, NULL::bigint;")
    else:
        delete += ";\n    RETURN v_id;"
    return f"""CREATE OR REPLACE FUNCTION bench_ladder.{name}({arg})
{_DQ_RETURNS if returning else "RETURNS bigint"}
LANGUAGE plpgsql VOLATILE {_DQ_PIN if pinned else "SET plan_cache_mode = force_generic_plan"} AS $$
#variable_conflict use_column
DECLARE v_now bigint := pgqueue.now_ms(); v_id bigint; v_ids bigint[]; v_dead bigint[]; v_queue_id integer;
        v_max_attempts integer; v_locked boolean;
BEGIN
    {setup}{_DQ_LOOKUP if lookup else ""}{_DQ_TAKE if take else _DQ_PROBE}    {delete}
END $$;
"""


LADDER_SQL += "".join([
    _dq_function("dq_probe_delete", returning=False, pinned=False, lookup=False, take=False, count=False),
    _dq_function("dq_returning", returning=True, pinned=False, lookup=False, take=False, count=False),
    _dq_function("dq_pinned", returning=True, pinned=True, lookup=False, take=False, count=False),
    _dq_function("dq_lookup_lock", returning=True, pinned=True, lookup=True, take=False, count=False),
    _dq_function("dq_expired", returning=True, pinned=True, lookup=True, take=True, count=False),
    _dq_function("dq_counters", returning=True, pinned=True, lookup=True, take=True, count=True),
])


def _backlog(conn: psycopg.Connection[Any], n: int) -> None:
    """n ready messages in the 'bench' queue and in seed 001's table, vacuumed."""
    conn.execute("TRUNCATE pgqueue.message, seed001.message, bench_raw.message")
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('bench', "
                 "array_fill(%s::bytea, ARRAY[%s]), 0)", [P, n])
    conn.execute("INSERT INTO seed001.message (content, dequeue_after) SELECT %s, 0 FROM generate_series(1, %s)",
                 [P, n])
    db.vacuum_analyze(conn, ["pgqueue.message", "seed001.message"])


def _ladder(conn: psycopg.Connection[Any], calls: int, rounds: int) -> dict[str, dict[str, float]]:
    """Server-side µs per call of each step of each ladder, best round (steps rotated each round)."""
    conn.execute(LADDER_SQL)
    queue_id = conn.execute("SELECT id FROM pgqueue.queue WHERE name = 'bench'").fetchone()[0]  # type: ignore[index]
    times: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in LADDERS}
    notes: list[str] = []
    conn.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
    for rnd in range(rounds):
        for name, ladder in LADDERS.items():
            order = ladder[rnd % len(ladder):] + ladder[:rnd % len(ladder)]
            for key, _label, stmt in order:
                if name == "dequeue":
                    _backlog(conn, calls + 100)
                else:
                    conn.execute("TRUNCATE pgqueue.message, seed001.message, bench_raw.message")
                notes.clear()
                # the loop commits after every call (a DO block run outside a transaction may)
                conn.execute(f"""
                    DO $ladder$
                    DECLARE v_p bytea := '{PAYLOAD_TEXT}'::bytea; v_q integer := {int(queue_id)}; t0 timestamptz;
                    BEGIN
                        t0 := clock_timestamp();
                        FOR i IN 1..{int(calls)} LOOP
                            {stmt};
                            COMMIT;
                        END LOOP;
                        RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - t0) * 1e6 / {int(calls)};
                    END $ladder$""")
                times[name][key].append(float(notes[-1]))
    conn.execute("TRUNCATE pgqueue.message, seed001.message, bench_raw.message")
    return {name: {key: min(v) for key, v in t.items()} for name, t in times.items()}


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
        with psycopg.connect(server.dsn(dbname, sync_off=True), autocommit=True) as conn:
            ladder = _ladder(conn, calls * 20, rounds)
    best = {m: {k: min(v) for k, v in per_call[m].items()} for m in PLAN_MODES}
    for key in keys:
        log(f"  profile {key:<18} {best['auto'][key]:8.1f} µs/call "
            f"({best['force_generic_plan'][key]:.1f} with generic plans)")
    for name, steps in LADDERS.items():
        for key, label, _stmt in steps:
            log(f"  ladder {name:<8} {key:<12} {ladder[name][key]:8.1f} µs/call  {label}")
    return {"calls": calls, "rounds": rounds, "labels": {k: v[0] for k, v in CALLS.items()},
            "per_call_us": best["auto"], "per_call_generic_us": best["force_generic_plan"],
            "breakdown": breakdown, "ladder_calls": calls * 20,
            "ladders": {name: [{"key": k, "label": lbl, "us": ladder[name][k]} for k, lbl, _s in steps]
                        for name, steps in LADDERS.items()}}
