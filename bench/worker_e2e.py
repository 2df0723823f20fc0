"""The worker end to end (issue 13): ``pgqueue worker`` processes against the SQL lease cycle and PgQueuer.

A queue is filled with a backlog of messages and ``worker_processes`` (4) processes of
``pgqueue worker DSN bench bench.noop:handle`` (a handler that does nothing, the default
concurrency of 4 each, durable commits) drain it, as a user would run them. The rate is taken
from the queue's row count, sampled every 0.25 s: messages gone between the sample where 90% of
the backlog is left and the one where 10% is left, over the time between them (start-up and
the tail are left out; a backlog too small for that, as in the smoke profile, gives the whole
drain from launch instead, and says so). The run passes its check when the queue is empty, no
message went to the dead letters, and every process exits 0 on SIGTERM. It runs twice a round:
with that handler, a plain function (the worker runs it on its handler threads), and with
``bench.noop:handle_async``, the same as an ``async def`` (``pgqueue worker`` runs it on its
asyncio worker, as a task on the event loop: no thread, no hand-over between threads).

In the same run, alternated with it, round by round, with pgbench at as many clients as worker
processes: the SQL-level lease cycle (``pgqueue_lease_cycle.sql``: dequeue with a lease, then
``message_complete``), the statement the worker uses (``pgqueue_lease_ack_fetch.sql``: one
``message_complete_and_dequeue`` per message; ``pgqueue_lease_ack_fetch_batch.sql``: the previous
``worker_concurrency`` messages completed and as many leased in one call, the worker's shape with a
no-op handler), the delete-mode dequeue, pgmq's read + delete (one message, and batches of
``worker_concurrency``) when the server has pgmq, and PgQueuer's own throughput setup (bench/peers.py)
on the same server, and its drain strategy on a backlog of the worker's size (the like-for-like run:
a backlog drained with no producer beside it, the rate taken the same way); with
``--pgqueuer-tool``, also PgQueuer's own benchmark program as it is.
Medians over rounds; the report takes the ratios within the run.
"""

from __future__ import annotations

import math
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from bench import db, ops, peers
from bench.rates import drain_rate
from bench.config import Profile

REPO = Path(__file__).resolve().parents[1]
#: The no-op handler of each worker run: a plain function (the worker runs it on its handler
#: threads) and the same as a coroutine (``pgqueue worker`` runs an ``async def`` handler on its
#: asyncio worker, as a task on the event loop).
HANDLERS = {"worker": "bench.noop:handle", "worker_async": "bench.noop:handle_async"}
#: What the worker is measured against at as many pgbench clients as it has processes: the SQL
#: lease cycle, the statement the worker runs (one message a call, and its batch of
#: ``worker_concurrency``), the delete-mode dequeue, and pgmq's read + delete (one message, and
#: batches of ``worker_concurrency``) when the server has pgmq (issue 13's first goal).
SQL_KEYS = ["lease_cycle:pgqueue", "lease_ack_fetch:pgqueue", "lease_ack_fetch_batch:pgqueue", "dequeue:pgqueue",
            "lease_cycle:pgmq", "lease_cycle_batch:pgmq"]
BATCHED = ("lease_ack_fetch_batch:pgqueue", "lease_cycle_batch:pgmq")


def _fill(conn: psycopg.Connection[Any], n: int) -> None:
    conn.execute("TRUNCATE pgqueue.message, pgqueue.queue_size, pgqueue.dead_letter")
    done = 0
    while done < n:
        k = min(50_000, n - done)
        conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill(%s::bytea, "
                      "ARRAY[%s::int]))", [db.PAYLOAD, k])
        done += k
    db.vacuum_analyze(conn, ["pgqueue.message"])


def _count(conn: psycopg.Connection[Any], table: str) -> int:
    row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # our constant table names
    return int(row[0]) if row else -1


def _wait_connected(conn: psycopg.Connection[Any], names: list[str], procs: list[subprocess.Popen[str]], *,
                    timeout: float) -> None:
    """Wait until every worker process still running has been seen connected under its name
    (it connects once its stop handlers are in place), at most ``timeout`` seconds."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = conn.execute("SELECT application_name FROM pg_stat_activity WHERE application_name = ANY(%s)",
                            [names]).fetchall()
        seen.update(r[0] for r in rows)
        if all(name in seen or p.poll() is not None for name, p in zip(names, procs)):
            return
        time.sleep(0.05)


def run_worker(server: db.Server, dbname: str, *, processes: int, concurrency: int, messages: int,
               timeout: float, key: str = "worker") -> dict[str, Any]:
    """Drain a backlog of messages with `pgqueue worker` processes running the no-op handler of
    ``key`` (HANDLERS); the rate and the check."""
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        _fill(conn, messages)
    # each process under a name of its own, so that the stop below waits until every one has
    # connected: a process stopped before its handlers are in place exits -15 (it raced the drain)
    names = [f"bench-worker-{key}-{i}" for i in range(processes)]
    samples: list[tuple[float, int]] = []
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "pgqueue", "worker",
                               make_conninfo(server.dsn(dbname), application_name=name), "bench",
                               HANDLERS[key], "--concurrency", str(concurrency), "--quiet"],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for name in names]
    problems: list[str] = []
    try:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            while True:
                left = _count(conn, "pgqueue.message")
                t = time.perf_counter() - t0
                samples.append((t, left))
                if left == 0:
                    break
                if t > timeout:
                    problems.append(f"{left} of {messages} messages left after {timeout:.0f} s")
                    break
                if any(p.poll() is not None for p in procs):
                    problems.append("a worker process exited before the queue was drained")
                    break
                time.sleep(0.25)
            if not problems:
                _wait_connected(conn, names, procs, timeout=60.0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes, errs = [], []
        for p in procs:
            try:
                _, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                _, err = p.communicate()
            codes.append(p.returncode)
            if err.strip():
                errs.append(err.strip().splitlines()[-1])
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        left = _count(conn, "pgqueue.message")
        dead = _count(conn, "pgqueue.dead_letter")
    if left:
        problems.append(f"{left} messages left in the queue")
    if dead:
        problems.append(f"{dead} messages went to the dead letters")
    if any(c != 0 for c in codes):
        problems.append(f"worker exit statuses {codes}: " + "; ".join(errs[:2]))
    rate, how = drain_rate(samples, messages)
    ok = not problems and rate is not None
    return {"key": key, "ok": ok, "msgs_per_s": rate if ok else None, "how": how, "messages": messages,
            "processes": processes, "concurrency": concurrency, "seconds": samples[-1][0] if samples else None,
            "exit_codes": codes, "problems": problems, "samples": samples}


def run_worker_section(server: db.Server, profile: Profile, log: Callable[[str], None]) -> dict[str, Any]:
    """The worker, the SQL lease cycle at as many clients, and PgQueuer, alternated over rounds."""
    clients = profile.worker_processes
    batch = profile.worker_concurrency
    specs = {k: ops.SPECS[k] for k in SQL_KEYS}
    for k in BATCHED:  # the worker's batch: as many messages a call as it has slots
        specs[k] = replace(specs[k], label=specs[k].label.replace("x4", f"x{batch}"), per_tx=batch,
                           defines={**specs[k].defines, "batch": batch})
    out: dict[str, Any] = {
        "processes": clients, "concurrency": profile.worker_concurrency, "messages": profile.worker_messages,
        "repeats": profile.worker_repeats, "sql_seconds": profile.worker_sql_seconds,
        "sql_transactions": profile.worker_sql_transactions, "pgqueuer_seconds": profile.pgqueuer_seconds,
        "labels": {"worker": f"pgqueue worker, {clients} processes × concurrency {profile.worker_concurrency}, "
                             "no-op handler (a function: on handler threads)",
                   "worker_async": f"pgqueue worker, {clients} processes × concurrency "
                                   f"{profile.worker_concurrency}, no-op async def handler (tasks on the event loop)",
                   **{k: f"{specs[k].label}, pgbench -c {clients}" for k in SQL_KEYS}},
        "pgqueuer": {"available": False}, "runs": [],
    }
    try:
        installed = peers.available()
        out["pgqueuer"] = {"available": True, "version": installed.version, "settings": dict(peers.DEFAULTS)}
        out["labels"]["pgqueuer"] = (f"PgQueuer {installed.version} throughput mode ({peers.DEFAULTS['dequeue']} "
                                     f"consumers × batch {peers.DEFAULTS['dequeue_batch']}, 1 producer × batch "
                                     f"{peers.DEFAULTS['enqueue_batch']}, asyncpg)")
        # the like-for-like run: PgQueuer's drain strategy on a backlog of the worker's size, no producer
        out["labels"]["pgqueuer_drain"] = (f"PgQueuer {installed.version} drain mode ({clients} processes × "
                                           f"{peers.DEFAULTS['dequeue']} consumers × batch "
                                           f"{peers.DEFAULTS['dequeue_batch']}, a backlog of "
                                           f"{profile.worker_messages:,}, asyncpg)")
    except peers.Unavailable as exc:
        out["pgqueuer"] = {"available": False, "reason": str(exc)}
        log(f"  worker: PgQueuer not available: {exc}")
    keys = [*HANDLERS, *SQL_KEYS] + (["pgqueuer", "pgqueuer_drain"] if out["pgqueuer"]["available"] else [])
    if out["pgqueuer"]["available"] and peers.TOOL:
        keys.append("pgqueuer_tool")
        out["labels"]["pgqueuer_tool"] = (f"PgQueuer's own {peers.TOOL.parent.name}/{peers.TOOL.name} (throughput "
                                          "mode, its defaults, asyncpg)")
    est: dict[str, float] = {}
    timeout = max(60.0, profile.worker_messages / 200)
    with server.database("worker") as dbname, server.database("pgqueuer") as pgq_db:
        runnable, unavailable = ops.available_specs(server, dbname, list(specs.values()))
        out["unavailable"] = unavailable
        for name, reason in unavailable.items():
            log(f"  worker: {name} not available: {reason}")
        for spec in runnable:  # the peer's version in its label
            out["labels"][spec.key] = f"{spec.label}, pgbench -c {clients}"
        gone = {s.key for s in specs.values()} - {s.key for s in runnable}
        keys = [k for k in keys if k not in gone]
        out["labels"] = {k: v for k, v in out["labels"].items() if k not in gone}
        specs = {s.key: s for s in runnable}
        if out["pgqueuer"]["available"]:
            try:
                peers.install(server, pgq_db)
            except peers.Unavailable as exc:
                out["pgqueuer"] = {"available": False, "reason": str(exc)}
                keys = [k for k in keys if not k.startswith("pgqueuer")]
                out["labels"] = {k: v for k, v in out["labels"].items() if k in keys}
        for rnd in range(profile.worker_repeats):
            server.admin("CHECKPOINT")
            order = keys[rnd % len(keys):] + keys[:rnd % len(keys)]
            for key in order:
                if key in HANDLERS:
                    r = run_worker(server, dbname, processes=clients, concurrency=profile.worker_concurrency,
                                   messages=profile.worker_messages, timeout=timeout, key=key)
                elif key == "pgqueuer":
                    r = peers.throughput(server, pgq_db, seconds=profile.pgqueuer_seconds)
                    r["key"] = key
                    r["msgs_per_s"] = r.get("rate")
                elif key == "pgqueuer_drain":
                    r = peers.drain(server, pgq_db, messages=profile.worker_messages, processes=clients)
                    r["key"] = key
                    r["msgs_per_s"] = r.get("rate")
                elif key == "pgqueuer_tool" and peers.TOOL:
                    r = peers.own_tool(server, pgq_db, seconds=profile.pgqueuer_seconds, tool=peers.TOOL)
                    r["key"] = key
                    r["msgs_per_s"] = r.get("rate")
                else:
                    secs, txs = profile.worker_sql_seconds, profile.worker_sql_transactions
                    backlog = (max(profile.ops_backlog // 2, math.ceil(1.5 * est.get(key, 0.0) * secs)) if secs
                               else math.ceil(1.2 * clients * txs * specs[key].per_tx) + 100)
                    r = ops.run_one(server, dbname, specs[key], clients=clients, seconds=secs, transactions=txs,
                                    sync_off=False, backlog=backlog)
                r["round"] = rnd
                out["runs"].append(r)
                rate = r.get("msgs_per_s")
                if rate:
                    est[key] = max(est.get(key, 0.0), rate)
                log(f"  worker section: {key:<24} round {rnd + 1}/{profile.worker_repeats}: "
                    + (f"{rate:,.0f} msg/s" if rate else f"FAILED {r.get('error') or r.get('problems')}"))
    out["median"] = {k: (statistics.median(v) if (v := [r["msgs_per_s"] for r in out["runs"]
                                                        if r["key"] == k and r.get("msgs_per_s")]) else None)
                     for k in keys}
    out["ok"] = all(r.get("ok") for r in out["runs"])
    return out
