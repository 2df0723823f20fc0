"""Targets 6 and 7: producers and consumers at full speed together for minutes.

Producer and consumer threads (each on its own connection, synchronous_commit off so that the
disk's flush time does not hide what dead tuples do) run for a fixed time against one queue
that starts with a backlog. Producers hold back (1 ms naps) while the backlog is more than a
slack above its starting size, so the live set stays bounded and any growth of the table is
bloat; consumers nap 1 ms after an empty dequeue, as a polling worker would. Every message
carries a token; consumers record the tokens they finished and the run ends with seed 002's
check: every token produced is finished exactly once or still in the queue, never both.

Recorded each second: messages finished and enqueued, the table's size with its indexes (and
heap alone), dead and live tuples, autovacuum runs, the oldest snapshot's age. Reported per
window (15 s): the dequeue rate, and the slowest window against the fastest.

pgqueue runs the lease cycle (dequeue with a lease, then message_complete: two statements,
an UPDATE and a DELETE per message); seed 001 runs its message_create / message_dequeue.
The design "pgqueue_naptime10" is the same pgqueue run with the server's autovacuum_naptime
lowered to 10 s for its duration (ALTER SYSTEM + pg_reload_conf(), reset afterwards; it needs
a superuser, as on the suite's own server): the setting docs/performance.md recommends for a
busy queue, since dead index entries pile up between two autovacuum visits.

The held-xmin variant opens a REPEATABLE READ transaction, takes its snapshot, and holds it
for a while in the middle of the run (in the same database, where it stops vacuum from
removing anything deleted after it began).
"""

from __future__ import annotations

import statistics
import threading
import time
from array import array
from typing import Any

import psycopg
from psycopg import sql

from bench import db
from bench.check import Recorder, exactly_once

PAD = db.PAYLOAD[:64]
TOKEN_BASE = 10**12


def _content(token: int) -> bytes:
    return b"%020d " % token + PAD


def _token(content: bytes) -> int:
    return int(bytes(content[:20]))


class _Design:
    table = ""

    def setup(self, conn: psycopg.Connection[Any], backlog: int) -> None:
        raise NotImplementedError

    def produce(self, conn: psycopg.Connection[Any], content: bytes) -> None:
        raise NotImplementedError

    def consume(self, conn: psycopg.Connection[Any]) -> int | None:
        """Take and finish one message; return its token, or None if there was none.

        Returns -1 when a message was taken but could not be finished (lost lease).
        """
        raise NotImplementedError

    def remaining(self, conn: psycopg.Connection[Any]) -> list[int]:
        raise NotImplementedError


class _Pgqueue(_Design):
    table = "pgqueue.message"
    label = "pgqueue (lease + complete)"

    def setup(self, conn: psycopg.Connection[Any], backlog: int) -> None:
        conn.execute("SELECT pgqueue.queue_create('churn', p_max_attempts => 5)")
        conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('churn', ARRAY("
                     "SELECT convert_to(lpad(g::text, 20, '0') || ' ', 'UTF8') || %s::bytea "
                     "FROM generate_series(0, %s - 1) g))", [PAD, backlog])
        db.vacuum_analyze(conn, ["pgqueue.message"])

    def produce(self, conn: psycopg.Connection[Any], content: bytes) -> None:
        conn.execute("SELECT pgqueue.message_create('churn', %s)", [content], prepare=True)

    def consume(self, conn: psycopg.Connection[Any]) -> int | None:
        row = conn.execute("SELECT id, attempts, content FROM pgqueue.message_dequeue('churn', 1, 30000)",
                           prepare=True).fetchone()
        if row is None:
            return None
        done = conn.execute("SELECT pgqueue.message_complete(%s, %s)", [row[0], row[1]], prepare=True).fetchone()
        return _token(row[2]) if done and done[0] else -1

    def remaining(self, conn: psycopg.Connection[Any]) -> list[int]:
        return [_token(r[0]) for r in conn.execute(
            "SELECT m.content FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
            "WHERE q.name = 'churn'")]


class _PgqueueNaptime(_Pgqueue):
    label = "pgqueue (lease + complete), autovacuum_naptime 10 s"
    naptime = "10s"


class _PgqueueDelete(_Pgqueue):
    label = "pgqueue (delete mode)"

    def consume(self, conn: psycopg.Connection[Any]) -> int | None:
        row = conn.execute("SELECT content FROM pgqueue.message_dequeue('churn', 1, 0)", prepare=True).fetchone()
        return None if row is None else _token(row[0])


class _Seed001(_Design):
    table = "seed001.message"
    label = "seed 001 (message_dequeue, delete)"

    def setup(self, conn: psycopg.Connection[Any], backlog: int) -> None:
        conn.execute("INSERT INTO seed001.message (content, dequeue_after) "
                     "SELECT convert_to(lpad(g::text, 20, '0') || ' ', 'UTF8') || %s::bytea, "
                     "seed001.to_epoch(now()) FROM generate_series(0, %s - 1) g", [PAD, backlog])
        db.vacuum_analyze(conn, ["seed001.message"])

    def produce(self, conn: psycopg.Connection[Any], content: bytes) -> None:
        conn.execute("SELECT seed001.message_create(%s, NULL)", [content], prepare=True)

    def consume(self, conn: psycopg.Connection[Any]) -> int | None:
        row = conn.execute("SELECT seed001.message_dequeue()", prepare=True).fetchone()
        if row is None or row[0] is None:
            return None
        return _token(row[0])

    def remaining(self, conn: psycopg.Connection[Any]) -> list[int]:
        return [_token(r[0]) for r in conn.execute("SELECT content FROM seed001.message")]


DESIGNS: dict[str, _Design] = {"pgqueue": _Pgqueue(), "pgqueue_naptime10": _PgqueueNaptime(), "seed001": _Seed001(),
                               "pgqueue_delete": _PgqueueDelete()}


def _alter_naptime(conn: psycopg.Connection[Any], value: str | None) -> None:
    """ALTER SYSTEM SET autovacuum_naptime = value (RESET when None) and reload; after a SET, wait
    until this session sees the new value (the reload is asynchronous)."""
    if value is None:
        conn.execute("ALTER SYSTEM RESET autovacuum_naptime")
    else:
        conn.execute(sql.SQL("ALTER SYSTEM SET autovacuum_naptime = {}").format(sql.Literal(value)))
    conn.execute("SELECT pg_reload_conf()")
    for _ in range(50):
        if value is None or _naptime(conn) == value:
            return
        time.sleep(0.1)
    raise RuntimeError(f"autovacuum_naptime is {_naptime(conn)}, not {value}, after pg_reload_conf()")


def _naptime(conn: psycopg.Connection[Any]) -> str:
    return str(conn.execute("SHOW autovacuum_naptime").fetchone()[0])  # type: ignore[index]


def run_churn(server: db.Server, design_name: str, *, seconds: int, window: int, producers: int,
              consumers: int, backlog: int, slack: int, hold: tuple[float, float] | None = None,
              fault: str | None = None, log: Any = print) -> dict[str, Any]:
    """Run one churn; hold = (start, end) seconds into the run for the held-xmin variant."""
    design = DESIGNS[design_name]
    naptime: str | None = getattr(design, "naptime", None)
    with server.database(f"churn_{design_name}") as dbname:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            design.setup(conn, backlog)
            if naptime:
                _alter_naptime(conn, naptime)
            in_effect = _naptime(conn)
        try:
            result = _run(server, dbname, design, design_name, seconds=seconds, window=window,
                          producers=producers, consumers=consumers, backlog=backlog, slack=slack, hold=hold,
                          fault=fault, log=log)
        finally:
            if naptime:
                with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
                    _alter_naptime(conn, None)
        result["autovacuum_naptime"] = in_effect
        return result


def _run(server: db.Server, dbname: str, design: _Design, design_name: str, *, seconds: int, window: int,
         producers: int, consumers: int, backlog: int, slack: int, hold: tuple[float, float] | None,
         fault: str | None, log: Any) -> dict[str, Any]:
    stop = threading.Event()
    slots = seconds + 5
    enq = [array("l", [0] * slots) for _ in range(producers)]
    deq = [array("l", [0] * slots) for _ in range(consumers)]
    produced = [array("q") for _ in range(producers)]
    recorders = [Recorder(fault) for _ in range(consumers)]
    lost = [0] * consumers
    errors: list[str] = []
    samples: list[dict[str, Any]] = []
    cap = backlog + slack
    conns_p = [psycopg.connect(server.dsn(dbname, sync_off=True), autocommit=True) for _ in range(producers)]
    conns_c = [psycopg.connect(server.dsn(dbname, sync_off=True), autocommit=True) for _ in range(consumers)]
    t0 = time.perf_counter() + 0.2

    def backlog_now() -> int:
        return backlog + sum(len(p) for p in produced) - sum(len(r) for r in recorders) - sum(lost)

    def producer(i: int) -> None:
        conn, seq, bins = conns_p[i], 0, enq[i]
        base = (i + 1) * TOKEN_BASE
        try:
            while not stop.is_set():
                if backlog_now() > cap:
                    time.sleep(0.001)
                    continue
                token = base + seq
                design.produce(conn, _content(token))
                produced[i].append(token)
                seq += 1
                sec = int(time.perf_counter() - t0)
                if 0 <= sec < slots:
                    bins[sec] += 1
        except Exception as exc:
            errors.append(f"producer {i}: {type(exc).__name__}: {exc}")
            stop.set()

    def consumer(i: int) -> None:
        conn, bins, rec = conns_c[i], deq[i], recorders[i]
        try:
            while not stop.is_set():
                token = design.consume(conn)
                if token is None:
                    time.sleep(0.001)
                    continue
                if token < 0:
                    lost[i] += 1
                    continue
                rec.record(token)
                sec = int(time.perf_counter() - t0)
                if 0 <= sec < slots:
                    bins[sec] += 1
        except Exception as exc:
            errors.append(f"consumer {i}: {type(exc).__name__}: {exc}")
            stop.set()

    def monitor() -> None:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as mconn:
            nxt = t0
            while not stop.is_set():
                nxt += 1.0
                time.sleep(max(0.0, nxt - time.perf_counter()))
                row = mconn.execute(
                    "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid), s.n_dead_tup, s.n_live_tup, "
                    "s.autovacuum_count, (SELECT max(age(backend_xmin)) FROM pg_stat_activity "
                    "WHERE datname = current_database()) "
                    "FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid "
                    "WHERE c.oid = %s::regclass", [design.table]).fetchone()
                if row:
                    samples.append({"t": round(time.perf_counter() - t0, 2), "total_bytes": row[0],
                                    "heap_bytes": row[1], "dead": row[2], "live": row[3],
                                    "autovacuums": row[4], "xmin_age": row[5], "backlog": backlog_now()})

    holder_state: dict[str, Any] = {}

    def holder() -> None:
        assert hold is not None
        time.sleep(max(0.0, t0 + hold[0] - time.perf_counter()))
        if stop.is_set():
            return
        with psycopg.connect(server.dsn(dbname)) as hconn:
            hconn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            hconn.execute("SELECT count(*) FROM pgqueue.queue")  # takes the snapshot
            holder_state["start"] = time.perf_counter() - t0
            stop.wait(max(0.0, t0 + hold[1] - time.perf_counter()))
            hconn.commit()
            holder_state["end"] = time.perf_counter() - t0

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(producers)]
    threads += [threading.Thread(target=consumer, args=(i,)) for i in range(consumers)]
    aux = [threading.Thread(target=monitor)]
    if hold:
        aux.append(threading.Thread(target=holder))
    for t in threads + aux:
        t.start()
    end = t0 + seconds
    while time.perf_counter() < end and not stop.is_set():
        time.sleep(min(1.0, max(0.0, end - time.perf_counter())))
    stop.set()
    for t in threads + aux:
        t.join()
    for c in conns_p + conns_c:
        c.close()
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        remaining = design.remaining(conn)

    expected = list(range(backlog))
    for p in produced:
        expected.extend(p)
    check = exactly_once(expected, recorders, what="messages finished", remaining=remaining)
    problems = [] if check.ok else [check.summary()]
    if sum(lost):
        problems.append(f"{sum(lost)} messages taken but not finished (lease lost)")
    problems += errors

    deq_s = [sum(b[s] for b in deq) for s in range(seconds)]
    enq_s = [sum(b[s] for b in enq) for s in range(seconds)]
    windows = [sum(deq_s[i * window:(i + 1) * window]) / window for i in range(seconds // window)]
    result: dict[str, Any] = {
        "design": design_name, "label": getattr(design, "label", design_name), "seconds": seconds,
        "window": window, "producers": producers, "consumers": consumers, "backlog": backlog, "cap": cap,
        "deq_per_s": deq_s, "enq_per_s": enq_s, "windows": windows, "samples": samples,
        "check": check.as_dict(), "ok": not problems, "problems": problems,
        "finished": sum(deq_s), "mean_rate": sum(deq_s) / seconds if seconds else 0,
    }
    if windows and max(windows) > 0:
        result["min_max_ratio"] = min(windows) / max(windows)
    sizes = [(s["t"], s["total_bytes"]) for s in samples]
    if len(sizes) >= 2:
        half = seconds / 2
        first = [b for t, b in sizes if t <= half] or [sizes[0][1]]
        second = [b for t, b in sizes if t > half] or [sizes[-1][1]]
        result.update(size_first_half_peak=max(first), size_second_half_peak=max(second),
                      size_start=sizes[0][1], size_end=sizes[-1][1],
                      size_growth=max(second) / max(first) if max(first) else None)
    if hold:
        result["hold"] = {"planned": list(hold), **holder_state}
        result.update(_held_analysis(deq_s, holder_state, window))
    log(f"  churn {design_name}: {result['mean_rate']:,.0f} msg/s mean, windows "
        f"{min(windows or [0]):,.0f}..{max(windows or [0]):,.0f}/s, "
        + ("check OK" if not problems else "FAILURE: " + "; ".join(problems)))
    return result


def _held_analysis(deq_s: list[int], hold: dict[str, Any], window: int) -> dict[str, Any]:
    """Degradation during the held snapshot and recovery after it, from the per-second rates."""
    if "start" not in hold or "end" not in hold:
        return {"held_error": "the snapshot was not held"}
    start, end = int(hold["start"]), int(hold["end"]) + 1
    before = deq_s[:start]
    if not before:
        return {}
    baseline = statistics.median(before[min(5, len(before) - 1):] or before)
    smooth = 5 if window >= 5 else 1
    rolling = [sum(deq_s[i:i + smooth]) / smooth for i in range(len(deq_s) - smooth + 1)]
    during = rolling[start:max(start + 1, end - smooth + 1)]
    recovery = None
    for i in range(end, len(rolling)):
        if rolling[i] >= 0.8 * baseline:
            recovery = i - end
            break
    return {
        "held_baseline": baseline, "held_min": min(during) if during else None,
        "held_min_ratio": (min(during) / baseline) if during and baseline else None,
        "held_mean_ratio": (statistics.mean(deq_s[start:end]) / baseline) if baseline else None,
        "recovery_s": recovery, "after_s": len(deq_s) - end,
        "after_minute_ratio": (statistics.mean(deq_s[end:end + 60]) / baseline)
        if baseline and deq_s[end:end + 60] else None,
    }
