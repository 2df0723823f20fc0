"""Single operations with pgbench (targets 1-4) and throughput against clients.

Every design runs the same pgbench script shape (one operation per transaction, prepared
protocol) in the same database. Before each run the design's tables are emptied, a dequeue
run gets a fresh backlog of ready messages of the same size for every design, and the
tables are vacuumed and analysed. Designs are alternated round-robin (the order rotates every
round) and the whole round is repeated, so drift hits all designs alike; a design's number
is the median over rounds, and each ratio is taken within the same run.

Messages per second are counted in the table: rows added (producers) or removed (consumers)
divided by pgbench's measured time. A dequeue run that empties its backlog would count empty
polls as work, so it is re-run with a larger backlog.

The peers run beside them through their own SQL APIs when the server has them (issue 13):
pgmq (``CREATE EXTENSION pgmq``: send, pop, read + delete) and PgQ (Debian's
postgresql-15-pgq3: insert_event; PgQ has no per-message dequeue). A peer whose extension
cannot be created is left out and reported as not available, with the server's reason. The
curves also run PgQueuer (bench/peers.py), which has no SQL API, in its own throughput mode
with as many consumers as clients.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from psycopg import sql

from bench import db
from bench.config import Profile

PAYLOAD_TEXT = db.PAYLOAD.decode()


@dataclass(frozen=True)
class Design:
    """Where a design keeps its messages, and how to fill it with a backlog of ready ones."""

    name: str
    truncate: str
    table: str
    fill: str | None  # SQL with %(n)s and %(payload)s (text); None: cannot hold a backlog
    extension: str | None = None  # a peer's extension, created in the section's database
    setup: tuple[str, ...] = ()   # then these statements (the peer's queue "bench")


DESIGNS: dict[str, Design] = {
    "pgqueue": Design(
        "pgqueue", "TRUNCATE pgqueue.message, pgqueue.queue_size", "pgqueue.message",
        "SELECT count(*) FROM pgqueue.message_create_batch('bench', "
        "array_fill(convert_to(%(payload)s, 'UTF8'), ARRAY[%(n)s::int]))"),
    "seed000": Design(
        "seed000", "TRUNCATE seed000.queue", "seed000.queue",
        "INSERT INTO seed000.queue (element_identifier, time_inserted, payload) "
        "SELECT gen_random_uuid(), localtimestamp - make_interval(secs => (%(n)s - g) / 1000.0), "
        "%(payload)s::json FROM generate_series(1, %(n)s) g"),
    "seed001": Design(
        "seed001", "TRUNCATE seed001.message", "seed001.message",
        "INSERT INTO seed001.message (content, dequeue_after) "
        "SELECT convert_to(%(payload)s, 'UTF8'), seed001.to_epoch(now()) - %(n)s + g "
        "FROM generate_series(1, %(n)s) g"),
    "seed003": Design(
        "seed003", "TRUNCATE seed003.queue_table", "seed003.queue_table",
        "INSERT INTO seed003.queue_table (payload) SELECT %(payload)s FROM generate_series(1, %(n)s)"),
    "seed004": Design(
        "seed004", "TRUNCATE seed004.payloads", "seed004.payloads",
        "INSERT INTO seed004.payloads (attempts, value) "
        "SELECT 0, convert_to(%(payload)s, 'UTF8') FROM generate_series(1, %(n)s)"),
    "raw": Design("raw", "TRUNCATE bench_raw.message", "bench_raw.message", None),
    "pgmq": Design(
        "pgmq", "TRUNCATE pgmq.q_bench", "pgmq.q_bench",
        "SELECT count(*) FROM pgmq.send_batch('bench', array_fill(%(payload)s::jsonb, ARRAY[%(n)s::int]))",
        "pgmq", ("SELECT pgmq.create('bench')",)),
    # PgQ's events live in the queue's rotating child tables of pgq.event_template
    "pgq": Design("pgq", "TRUNCATE pgq.event_template", "pgq.event_template", None, "pgq",
                  ("SELECT pgq.create_queue('bench')",)),
    "none": Design("none", "", "", None),
}


@dataclass(frozen=True)
class Spec:
    """One pgbench configuration: an operation of a design."""

    key: str            # e.g. "enqueue:pgqueue"
    label: str          # shown in tables and plots
    design: str         # a DESIGNS key
    script: str         # file in bench/pgbench
    consumes: bool      # True: needs a backlog, counts rows removed
    per_tx: int = 1     # messages per transaction (nominal)
    defines: Mapping[str, object] = field(default_factory=dict)
    max_tries: int = 1  # > 1: a deadlock or serialization failure is retried (pgbench --max-tries)


# Acknowledge-and-fetch can rarely deadlock (40P01; docs/guarantees.md: PostgreSQL locks an
# updated row's newer version without SKIP LOCKED's policy), and `pgqueue worker` runs such a
# round again: so do these specs, and the report counts the transactions retried.
ACK_FETCH_TRIES = 5


Q = {"queue": "bench"}

PRODUCE = [
    Spec("enqueue:pgqueue", "pgqueue message_create", "pgqueue", "pgqueue_create.sql", False, defines=Q),
    Spec("enqueue:pgqueue_notify", "pgqueue message_create (queue with notify)", "pgqueue",
         "pgqueue_create.sql", False, defines={"queue": "bench_notify"}),
    Spec("enqueue:pgqueue_capped", "pgqueue message_create (queue with max_size)", "pgqueue",
         "pgqueue_create.sql", False, defines={"queue": "bench_capped"}),
    Spec("enqueue:seed000", "seed 000 INSERT", "seed000", "seed000_enqueue.sql", False),
    Spec("enqueue:seed001", "seed 001 message_create", "seed001", "seed001_create.sql", False),
    Spec("enqueue:seed004", "seed 004 INSERT", "seed004", "seed004_enqueue.sql", False),
    Spec("enqueue:raw", "raw INSERT (primary key only)", "raw", "raw_insert.sql", False),
    Spec("enqueue:select1", "SELECT 1", "none", "select1.sql", False),
    Spec("enqueue:pgmq", "pgmq send (peer)", "pgmq", "pgmq_send.sql", False),
    Spec("enqueue:pgq", "PgQ insert_event (peer)", "pgq", "pgq_insert_event.sql", False),
    Spec("enqueue_batch:pgqueue", "pgqueue message_create_batch x1000", "pgqueue",
         "pgqueue_create_batch.sql", False, 1000, {"queue": "bench", "batch": 1000}),
    Spec("enqueue_batch:seed004", "seed 004 INSERT ... unnest x1000", "seed004",
         "seed004_enqueue_batch.sql", False, 1000, {"batch": 1000}),
]

CONSUME = [
    Spec("dequeue:pgqueue", "pgqueue message_dequeue (delete mode)", "pgqueue", "pgqueue_dequeue.sql", True,
         defines=Q),
    Spec("dequeue:seed000", "seed 000 DELETE ... SKIP LOCKED", "seed000", "seed000_dequeue.sql", True),
    Spec("dequeue:seed001", "seed 001 message_dequeue", "seed001", "seed001_dequeue.sql", True),
    Spec("dequeue:seed004", "seed 004 DELETE ... IN (SKIP LOCKED)", "seed004", "seed004_dequeue.sql", True),
    Spec("lease_cycle:pgqueue", "pgqueue lease + message_complete", "pgqueue", "pgqueue_lease_cycle.sql", True,
         defines=Q),
    Spec("lease_ack_fetch:pgqueue", "pgqueue message_complete_and_dequeue (lease, one call a message)", "pgqueue",
         "pgqueue_lease_ack_fetch.sql", True, defines={"queue": "bench", "aid": 0, "atok": 0},
         max_tries=ACK_FETCH_TRIES),
    # the worker's shape at the SQL level (bench/worker_e2e.py sets :batch to its concurrency)
    Spec("lease_ack_fetch_batch:pgqueue", "pgqueue message_complete_and_dequeue x4 (lease, as the worker runs it)",
         "pgqueue", "pgqueue_lease_ack_fetch_batch.sql", True, 4,
         {"queue": "bench", "aids": "{}", "atoks": "{}", "batch": 4}, max_tries=ACK_FETCH_TRIES),
    Spec("dequeue:pgmq", "pgmq pop (peer, delete on read)", "pgmq", "pgmq_pop.sql", True),
    Spec("lease_cycle:pgmq", "pgmq read + delete (peer, 30 s visibility timeout)", "pgmq", "pgmq_read_delete.sql",
         True),
    Spec("lease_cycle_batch:pgmq", "pgmq read x4 + delete of those (peer, 30 s visibility timeout)", "pgmq",
         "pgmq_read_delete_batch.sql", True, 4, {"batch": 4}),
    Spec("dequeue_batch:pgqueue", "pgqueue message_dequeue x100 (delete mode)", "pgqueue",
         "pgqueue_dequeue_batch.sql", True, 100, {"queue": "bench", "batch": 100}),
    Spec("dequeue_batch:seed003", "seed 003 DELETE ... USING x100", "seed003", "seed003_dequeue_batch.sql", True,
         100, {"batch": 100}),
    Spec("dequeue_batch:seed004", "seed 004 DELETE ... IN x100", "seed004", "seed004_dequeue_batch.sql", True,
         100, {"batch": 100}),
]

SPECS = {s.key: s for s in PRODUCE + CONSUME}

#: The designs drawn in the throughput-against-clients plot (create, delete-mode dequeue, the
#: lease cycle), peers included; PgQueuer's curve is CURVE_PGQUEUER.
CURVE_KEYS = ["enqueue:pgqueue", "enqueue:seed000", "enqueue:seed001", "enqueue:seed004", "enqueue:raw",
              "enqueue:pgmq", "enqueue:pgq",
              "dequeue:pgqueue", "dequeue:seed000", "dequeue:seed001", "dequeue:seed004", "dequeue:pgmq",
              "lease_cycle:pgqueue", "lease_ack_fetch:pgqueue", "lease_cycle:pgmq"]
CURVE_PGQUEUER = "lease_cycle:pgqueuer"


def available_specs(server: db.Server, dbname: str, specs: list[Spec]) -> tuple[list[Spec], dict[str, str]]:
    """Create the peers' extensions and queues in the database; return the specs that can run,
    the labels with the peer's version, and {design: reason} for the peers the server lacks."""
    from bench.churn import Unavailable, _create_extension

    unavailable: dict[str, str] = {}
    versions: dict[str, str] = {}
    for name in dict.fromkeys(s.design for s in specs):
        design = DESIGNS[name]
        if not design.extension:
            continue
        try:
            with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
                versions[name] = _create_extension(conn, design.extension)
                for stmt in design.setup:
                    conn.execute(sql.SQL(stmt))  # type: ignore[arg-type,unused-ignore]  # our constants
        except (Unavailable, psycopg.Error) as exc:
            unavailable[name] = str(exc).strip().splitlines()[0]
    ok = [s if s.design not in versions else replace(s, label=s.label.replace(" (peer", f" {versions[s.design]} (peer", 1))
          for s in specs if s.design not in unavailable]
    return ok, unavailable


def _count(conn: psycopg.Connection[Any], design: Design) -> int:
    if not design.table:
        return 0
    row = conn.execute(f"SELECT count(*) FROM {design.table}").fetchone()
    return int(row[0]) if row else 0


def prepare(conn: psycopg.Connection[Any], design: Design, backlog: int) -> int:
    """Empty the design's tables, fill a backlog of ready messages, VACUUM (ANALYZE); return the count."""
    if not design.truncate:
        return 0
    conn.execute(design.truncate)
    if backlog and design.fill:
        chunk = 100_000
        done = 0
        while done < backlog:
            n = min(chunk, backlog - done)
            conn.execute(design.fill, {"n": n, "payload": PAYLOAD_TEXT})
            done += n
    db.vacuum_analyze(conn, [design.table])
    return _count(conn, design)


def run_one(server: db.Server, dbname: str, spec: Spec, *, clients: int, seconds: int, transactions: int,
            sync_off: bool, backlog: int) -> dict[str, Any]:
    """Run one spec once (re-running with a bigger backlog if a consumer drained it)."""
    design = DESIGNS[spec.design]
    if not spec.consumes:
        backlog = 0
    out: dict[str, Any] = {}
    for _attempt in range(3):
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            before = prepare(conn, design, backlog)
        res = db.pgbench(server, dbname, spec.script, clients=clients, seconds=seconds,
                         transactions=transactions, defines=spec.defines, sync_off=sync_off,
                         max_tries=spec.max_tries)
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            after = _count(conn, design)
        out = {
            "key": spec.key, "clients": clients, "sync_off": sync_off, "ok": res.ok, "error": res.error,
            "max_tries": spec.max_tries, "retried": res.retried,
            "tps": res.tps, "transactions": res.transactions, "elapsed": res.elapsed,
            "latency_ms": res.latency_ms, "backlog": before, "rows_after": after, "drained": False,
        }
        if not res.ok:
            out["msgs_per_s"] = None
            if spec.consumes and after == 0:  # e.g. \gset found no row: the backlog ran out
                backlog = max(backlog * 3, 1000)
                continue
            return out
        if spec.design == "none":
            moved = res.transactions
        else:
            moved = before - after if spec.consumes else after - before
        out["moved"] = moved
        out["msgs_per_s"] = moved / res.elapsed if res.elapsed > 0 else None
        if spec.consumes and after == 0:
            backlog = max(backlog * 3, 1000)
            continue
        return out
    out.update(ok=False, error="backlog drained three times", msgs_per_s=None, drained=True)
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def round_robin(server: db.Server, dbname: str, specs: list[Spec], *, clients: int, seconds: int,
                transactions: int, repeats: int, sync_off: bool, profile: Profile,
                log: Any) -> dict[str, Any]:
    """Run specs round-robin (order rotated each round), repeats times; medians per spec.

    Within a round every single-message consumer gets the same backlog, and so does every
    batch consumer: enough for 1.5 times the fastest rate seen so far over the run time.
    """
    runs: list[dict[str, Any]] = []
    est: dict[str, float] = {}
    for rnd in range(repeats):
        server.admin("CHECKPOINT")
        backlogs = {}
        for batch in (False, True):
            floor = profile.ops_batch_backlog if batch else profile.ops_backlog
            rates = [est.get(s.key, 0.0) for s in specs if s.consumes and (s.per_tx > 1) == batch]
            per_tx = max([s.per_tx for s in specs if s.consumes and (s.per_tx > 1) == batch] or [1])
            if seconds:
                backlogs[batch] = max(floor, math.ceil(1.5 * max(rates or [0.0]) * seconds))
            else:
                backlogs[batch] = math.ceil(1.2 * clients * transactions * per_tx) + 100
        order = specs[rnd % len(specs):] + specs[:rnd % len(specs)]
        for spec in order:
            r = run_one(server, dbname, spec, clients=clients, seconds=seconds, transactions=transactions,
                        sync_off=sync_off, backlog=backlogs[spec.per_tx > 1])
            r["round"] = rnd
            runs.append(r)
            rate = r.get("msgs_per_s")
            if rate:
                est[spec.key] = max(est.get(spec.key, 0.0), rate)
            log(f"  {spec.key:<26} c={clients:<3} round {rnd + 1}/{repeats}: "
                + (f"{rate:,.0f} msg/s" if rate else f"FAILED {r.get('error')}"))
    median = {s.key: _median([r["msgs_per_s"] for r in runs if r["key"] == s.key and r.get("msgs_per_s")])
              for s in specs}
    return {"runs": runs, "median": median}


def run_ops(server: db.Server, profile: Profile, log: Any) -> dict[str, Any]:
    """Targets 1-4: every spec at ops_clients clients, in each durability pass."""
    out: dict[str, Any] = {"clients": profile.ops_clients, "seconds": profile.ops_seconds,
                           "transactions": profile.ops_transactions, "repeats": profile.ops_repeats, "passes": {}}
    with server.database("ops") as dbname:
        specs, unavailable = available_specs(server, dbname, PRODUCE + CONSUME)
        produce, consume = [s for s in specs if not s.consumes], [s for s in specs if s.consumes]
        out["labels"] = {s.key: s.label for s in specs}
        out["unavailable"] = unavailable
        for design, reason in unavailable.items():
            log(f"ops: {design} not available on this server: {reason}")
        for pass_name in profile.ops_passes:
            sync_off = pass_name == "sync_off"
            log(f"ops: {pass_name} pass, {profile.ops_clients} clients")
            groups = {}
            for group_name, specs in (("produce", produce), ("consume", consume)):
                groups[group_name] = round_robin(
                    server, dbname, specs, clients=profile.ops_clients, seconds=profile.ops_seconds,
                    transactions=profile.ops_transactions, repeats=profile.ops_repeats, sync_off=sync_off,
                    profile=profile, log=log)
            runs = groups["produce"]["runs"] + groups["consume"]["runs"]
            median = {**groups["produce"]["median"], **groups["consume"]["median"]}
            out["passes"][pass_name] = {"runs": runs, "median": median}
    return out


def run_curves(server: db.Server, profile: Profile, log: Any) -> dict[str, Any]:
    """Throughput against clients for the main designs (durable settings)."""
    from bench import peers

    out: dict[str, Any] = {"clients": list(profile.curve_clients), "seconds": profile.curve_seconds,
                           "transactions": profile.curve_transactions, "repeats": profile.curve_repeats,
                           "runs": []}
    pgqueuer_seconds = float(profile.curve_seconds or profile.pgqueuer_seconds)
    with server.database("curves") as dbname, server.database("curves_pgqueuer") as pgq_db:
        specs, unavailable = available_specs(server, dbname, [SPECS[k] for k in CURVE_KEYS])
        out["labels"] = {s.key: s.label for s in specs}
        try:
            installed = peers.available()
            peers.install(server, pgq_db)
            out["labels"][CURVE_PGQUEUER] = (
                f"PgQueuer {installed.version} throughput mode (peer; N consumers × batch "
                f"{peers.DEFAULTS['dequeue_batch']}, 1 producer)")
        except peers.Unavailable as exc:
            unavailable["pgqueuer"] = str(exc)
        out["unavailable"] = unavailable
        out["median"] = {k: {} for k in out["labels"]}
        for design, reason in unavailable.items():
            log(f"curves: {design} not available on this server: {reason}")
        for clients in profile.curve_clients:
            log(f"curves: {clients} clients")
            res = round_robin(server, dbname, specs, clients=clients, seconds=profile.curve_seconds,
                              transactions=profile.curve_transactions, repeats=profile.curve_repeats,
                              sync_off=False, profile=profile, log=log)
            out["runs"] += res["runs"]
            for key, value in res["median"].items():
                out["median"][key][str(clients)] = value
            if CURVE_PGQUEUER in out["labels"]:
                rates = []
                for rnd in range(profile.curve_repeats):
                    r = peers.throughput(server, pgq_db, seconds=pgqueuer_seconds, dequeue=clients)
                    r.update(key=CURVE_PGQUEUER, clients=clients, round=rnd, msgs_per_s=r.get("rate"))
                    out["runs"].append(r)
                    if r.get("rate"):
                        rates.append(r["rate"])
                    log(f"  {CURVE_PGQUEUER:<26} c={clients:<3} round {rnd + 1}/{profile.curve_repeats}: "
                        + (f"{r['rate']:,.0f} msg/s" if r.get("rate") else f"FAILED {r.get('error')}"))
                out["median"][CURVE_PGQUEUER][str(clients)] = _median(rates)
    out["pgqueuer_seconds"] = pgqueuer_seconds
    return out
