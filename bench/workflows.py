"""Full workflows driven from Python, checked the way seed 002 checked its strategies.

A fixture of N items is drained by 1, 2, 4, 8 and 16 worker threads, each on its own
connection. Every worker records what it claimed and what it finished; merged, every item
must appear exactly once (delete mode) or be completed exactly once (lease mode), and the
table must be left with nothing unfinished. A run that fails the check reports FAILURE, not
a number. Throughput is N divided by the time from the start signal to the last worker's end.

Like seed 002 (which ran with fsync off), these sessions run with synchronous_commit off, so
that the claiming strategies, not the disk's flush time, are measured.

Strategies: seed 002's naive FOR UPDATE, advisory locks and SKIP LOCKED, each in its
two-transaction version (claim and commit, then mark processed) and its single-transaction
version (claim as processed, commit after processing); pgqueue's lease + complete (the
two-transaction shape) and delete-mode dequeue inside a transaction (the single-transaction
shape); batches of 100 (pgqueue lease and delete mode, seed 003, seed 004); and a fleet of
workers using the Python client, ``pgqueue.Queue``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from bench import db
from bench.check import CheckResult, Recorder, exactly_once

Conn = psycopg.Connection[Any]

LEASE_MS = 30000

# seed 002 -------------------------------------------------------------------------------

S2_NAIVE = ("UPDATE seed002.item SET state = %(state)s WHERE itemid = (SELECT itemid FROM seed002.item "
            "WHERE state = 0 ORDER BY itemid LIMIT 1 FOR UPDATE) RETURNING itemid")
S2_SKIP = ("UPDATE seed002.item SET state = %(state)s WHERE itemid = (SELECT itemid FROM seed002.item "
           "WHERE state = 0 ORDER BY itemid LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING itemid")
S2_ADVISORY = "SELECT itemid, races FROM seed002.claim_advisory(%(state)s::smallint)"
S2_FINISH = "UPDATE seed002.item SET state = 2 WHERE itemid = %(id)s AND state = 1 RETURNING itemid"
S2_FINISH_UNLOCK = ("UPDATE seed002.item SET state = 2 WHERE itemid = %(id)s AND state = 1 "
                    "RETURNING itemid, pg_advisory_unlock(itemid)")


@dataclass
class Worker:
    """What one worker thread recorded."""

    claimed: Recorder
    done: Recorder
    races: int = 0
    error: str | None = None


class Strategy:
    """A way to drain a fixture. Subclasses define fill, step and leftover."""

    name = ""
    label = ""
    two_phase = False  # records "done" separately from "claimed" (lease / two-transaction)

    def fill(self, conn: Conn, n: int) -> list[int]:
        raise NotImplementedError

    def open(self, conn: Conn) -> Any:
        """Per-worker state (e.g. a pgqueue.Queue)."""
        return None

    def step(self, conn: Conn, state: Any, w: Worker) -> bool:
        """Take and finish the next item(s); False when there is nothing left."""
        raise NotImplementedError

    def close(self, conn: Conn, state: Any, w: Worker) -> None:
        pass

    def leftover(self, conn: Conn) -> int:
        """Items the run left unfinished (must be 0)."""
        raise NotImplementedError


class Seed002(Strategy):
    def __init__(self, name: str, label: str, claim: str, single: bool, advisory: bool = False) -> None:
        self.name, self.label, self.claim, self.single, self.advisory = name, label, claim, single, advisory
        self.two_phase = not single

    def fill(self, conn: Conn, n: int) -> list[int]:
        conn.execute("TRUNCATE seed002.item")
        conn.execute("INSERT INTO seed002.item (itemid) SELECT generate_series(1, %s)", [n])
        db.vacuum_analyze(conn, ["seed002.item"])
        return list(range(1, n + 1))

    def open(self, conn: Conn) -> Any:
        return {"held": 0}

    def step(self, conn: Conn, state: Any, w: Worker) -> bool:
        target = 2 if self.single else 1
        if self.single:
            with conn.transaction():
                row = conn.execute(self.claim, {"state": target}, prepare=True).fetchone()
                if row is None or row[0] is None:
                    return False
                # ... the work on the item would happen here, inside the transaction ...
            w.claimed.record(row[0])
            w.done.record(row[0])
            if self.advisory:
                w.races += row[1]
                state["held"] += 1
                if state["held"] >= 16:  # seed 002's batch release of session advisory locks
                    conn.execute("SELECT pg_advisory_unlock_all()")
                    state["held"] = 0
            return True
        row = conn.execute(self.claim, {"state": target}, prepare=True).fetchone()
        if row is None or row[0] is None:
            return False
        if self.advisory:
            w.races += row[1]
        w.claimed.record(row[0])
        # ... the work on the item would happen here, between the two transactions ...
        finish = S2_FINISH_UNLOCK if self.advisory else S2_FINISH
        if conn.execute(finish, {"id": row[0]}, prepare=True).fetchone() is not None:
            w.done.record(row[0])
        return True

    def close(self, conn: Conn, state: Any, w: Worker) -> None:
        if self.advisory:
            conn.execute("SELECT pg_advisory_unlock_all()")

    def leftover(self, conn: Conn) -> int:
        row = conn.execute("SELECT count(*) FROM seed002.item WHERE state <> 2").fetchone()
        return int(row[0]) if row else -1


def _pgqueue_fill(conn: Conn, n: int) -> list[int]:
    conn.execute("TRUNCATE pgqueue.message, pgqueue.queue_size")
    ids: list[int] = []
    while len(ids) < n:
        k = min(50_000, n - len(ids))
        rows = conn.execute("SELECT b.id FROM pgqueue.message_create_batch('bench', "
                            "array_fill(%s::bytea, ARRAY[%s::int])) AS b(id)", [db.PAYLOAD, k]).fetchall()
        ids += [r[0] for r in rows]
    db.vacuum_analyze(conn, ["pgqueue.message"])
    return ids


def _pgqueue_left(conn: Conn) -> int:
    return db.queue_messages(conn, "bench")


class PgqueueLease(Strategy):
    name, label, two_phase = "pgqueue_lease", "pgqueue lease + complete", True

    def fill(self, conn: Conn, n: int) -> list[int]:
        return _pgqueue_fill(conn, n)

    def step(self, conn: Conn, state: Any, w: Worker) -> bool:
        row = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('bench', 1, %s::bigint)",
                           [LEASE_MS], prepare=True).fetchone()
        if row is None:
            return False
        w.claimed.record(row[0])
        ok = conn.execute("SELECT pgqueue.message_complete(%s, %s)", row, prepare=True).fetchone()
        if ok and ok[0]:
            w.done.record(row[0])
        return True

    def leftover(self, conn: Conn) -> int:
        return _pgqueue_left(conn)


class PgqueueDeleteTx(Strategy):
    name, label = "pgqueue_delete_1tx", "pgqueue delete mode, in a transaction"

    def fill(self, conn: Conn, n: int) -> list[int]:
        return _pgqueue_fill(conn, n)

    def step(self, conn: Conn, state: Any, w: Worker) -> bool:
        with conn.transaction():
            row = conn.execute("SELECT id FROM pgqueue.message_dequeue('bench', 1, 0)", prepare=True).fetchone()
            if row is None:
                return False
            # ... the work on the message would happen here, inside the transaction ...
        w.claimed.record(row[0])
        return True

    def leftover(self, conn: Conn) -> int:
        return _pgqueue_left(conn)


class PgqueueBatch(Strategy):
    def __init__(self, lease: bool, size: int = 100) -> None:
        self.lease, self.size, self.two_phase = lease, size, lease
        self.name = f"pgqueue_batch{size}_{'lease' if lease else 'delete'}"
        self.label = (f"pgqueue x{size} lease + complete" if lease
                      else f"pgqueue x{size} delete mode, in a transaction")

    def fill(self, conn: Conn, n: int) -> list[int]:
        return _pgqueue_fill(conn, n)

    def step(self, conn: Conn, state: Any, w: Worker) -> bool:
        if not self.lease:
            with conn.transaction():
                rows = conn.execute("SELECT id FROM pgqueue.message_dequeue('bench', %s::int, 0)",
                                    [self.size], prepare=True).fetchall()
            w.claimed.extend(r[0] for r in rows)
            return bool(rows)
        rows = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('bench', %s::int, %s::bigint)",
                            [self.size, LEASE_MS], prepare=True).fetchall()
        if not rows:
            return False
        w.claimed.extend(r[0] for r in rows)
        done = conn.execute("SELECT u.id FROM unnest(%s::bigint[], %s::int[]) AS u(id, att) "
                            "WHERE pgqueue.message_complete(u.id, u.att)",
                            [[r[0] for r in rows], [r[1] for r in rows]], prepare=True).fetchall()
        w.done.extend(r[0] for r in done)
        return True

    def leftover(self, conn: Conn) -> int:
        return _pgqueue_left(conn)


class PgqueueFleet(Strategy):
    name, label, two_phase = "pgqueue_fleet", "pgqueue.Queue fleet (dequeue lease + complete)", True

    def fill(self, conn: Conn, n: int) -> list[int]:
        return _pgqueue_fill(conn, n)

    def open(self, conn: Conn) -> Any:
        from pgqueue import Queue

        return Queue(conn, "bench")

    def step(self, conn: Conn, state: Any, w: Worker) -> bool:
        msgs = state.dequeue(1, lock_ms=LEASE_MS)
        if not msgs:
            return False
        msg = msgs[0]
        w.claimed.record(msg.id)
        if state.complete(msg):
            w.done.record(msg.id)
        return True

    def leftover(self, conn: Conn) -> int:
        return _pgqueue_left(conn)


class Seed003Batch(Strategy):
    name, label = "seed003_batch100", "seed 003 DELETE ... USING x100, in a transaction"

    def fill(self, conn: Conn, n: int) -> list[int]:
        conn.execute("TRUNCATE seed003.queue_table")
        ids = [r[0] for r in conn.execute(
            "INSERT INTO seed003.queue_table (payload) SELECT %s FROM generate_series(1, %s) RETURNING id",
            [db.PAYLOAD.decode(), n]).fetchall()]
        db.vacuum_analyze(conn, ["seed003.queue_table"])
        return ids

    def step(self, conn: Conn, state: Any, w: Worker) -> bool:
        with conn.transaction():
            rows = conn.execute(
                "DELETE FROM seed003.queue_table USING (SELECT * FROM seed003.queue_table LIMIT 100 "
                "FOR UPDATE SKIP LOCKED) q WHERE q.id = queue_table.id RETURNING queue_table.id",
                prepare=True).fetchall()
        w.claimed.extend(r[0] for r in rows)
        return bool(rows)

    def leftover(self, conn: Conn) -> int:
        row = conn.execute("SELECT count(*) FROM seed003.queue_table").fetchone()
        return int(row[0]) if row else -1


class Seed004Batch(Strategy):
    name, label = "seed004_batch100", "seed 004 DELETE ... IN x100, in a transaction"

    def fill(self, conn: Conn, n: int) -> list[int]:
        conn.execute("TRUNCATE seed004.payloads")
        ids = [r[0] for r in conn.execute(
            "INSERT INTO seed004.payloads (attempts, value) SELECT 0, %s FROM generate_series(1, %s) RETURNING id",
            [db.PAYLOAD, n]).fetchall()]
        db.vacuum_analyze(conn, ["seed004.payloads"])
        return ids

    def step(self, conn: Conn, state: Any, w: Worker) -> bool:
        with conn.transaction():
            rows = conn.execute(
                "DELETE FROM seed004.payloads WHERE id IN (SELECT p1.id FROM seed004.payloads AS p1 "
                "WHERE p1.state = 'enqueued' ORDER BY p1.modified_at ASC FOR UPDATE SKIP LOCKED LIMIT 100) "
                "RETURNING id, value", prepare=True).fetchall()
        w.claimed.extend(r[0] for r in rows)
        return bool(rows)

    def leftover(self, conn: Conn) -> int:
        row = conn.execute("SELECT count(*) FROM seed004.payloads").fetchone()
        return int(row[0]) if row else -1


STRATEGIES: list[Strategy] = [
    Seed002("seed002_naive_2tx", "seed 002 naive FOR UPDATE, two transactions", S2_NAIVE, False),
    Seed002("seed002_naive_1tx", "seed 002 naive FOR UPDATE, one transaction", S2_NAIVE, True),
    Seed002("seed002_advisory_2tx", "seed 002 advisory locks (hold), two transactions", S2_ADVISORY, False, True),
    Seed002("seed002_advisory_1tx", "seed 002 advisory locks (batch release), one transaction", S2_ADVISORY, True,
            True),
    Seed002("seed002_skiplocked_2tx", "seed 002 SKIP LOCKED, two transactions", S2_SKIP, False),
    Seed002("seed002_skiplocked_1tx", "seed 002 SKIP LOCKED, one transaction", S2_SKIP, True),
    PgqueueLease(),
    PgqueueDeleteTx(),
    PgqueueFleet(),
    PgqueueBatch(lease=True),
    PgqueueBatch(lease=False),
    Seed003Batch(),
    Seed004Batch(),
]


def drain(server: db.Server, dbname: str, strategy: Strategy, *, items: int, workers: int,
          fault: str | None = None) -> dict[str, Any]:
    """Fill a fixture of items, drain it with workers threads, check exactly-once; return the result."""
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        expected = strategy.fill(conn, items)
    # fault="duplicate": every worker records its first finished item twice (a broken consumer)
    logs = [Worker(Recorder(None if strategy.two_phase else fault), Recorder(fault if strategy.two_phase else None))
            for _ in range(workers)]
    conns = [psycopg.connect(server.dsn(dbname, sync_off=True), autocommit=True) for _ in range(workers)]
    start = threading.Barrier(workers + 1)
    ends = [0.0] * workers

    def body(i: int) -> None:
        w, conn = logs[i], conns[i]
        try:
            state = strategy.open(conn)
            start.wait()
            while strategy.step(conn, state, w):
                pass
            strategy.close(conn, state, w)
        except Exception as exc:  # reported as a failed run
            w.error = f"{type(exc).__name__}: {exc}"
            start.abort()
        finally:
            ends[i] = time.perf_counter()

    threads = [threading.Thread(target=body, args=(i,), name=f"bench-{strategy.name}-{i}") for i in range(workers)]
    for t in threads:
        t.start()
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = max(ends) - t0
    for c in conns:
        c.close()
    with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
        left = strategy.leftover(conn)

    checks: list[CheckResult] = [exactly_once(expected, [w.claimed for w in logs], what="items delivered")]
    if strategy.two_phase:
        checks.append(exactly_once(expected, [w.done for w in logs], what="items completed"))
    errors = [w.error for w in logs if w.error]
    ok = all(c.ok for c in checks) and left == 0 and not errors
    problems = [c.summary() for c in checks if not c.ok]
    if left:
        problems.append(f"{left} items left unfinished in the table")
    problems += errors
    return {
        "strategy": strategy.name, "workers": workers, "items": items, "elapsed": elapsed, "ok": ok,
        "items_per_s": items / elapsed if ok and elapsed > 0 else None,
        "races": sum(w.races for w in logs), "checks": [c.as_dict() for c in checks],
        "problems": problems,
    }


def run_workflows(server: db.Server, profile: Any, log: Callable[[str], None],
                  fault: str | None = None) -> dict[str, Any]:
    """Every strategy at every worker count (round-robin over strategies), repeated."""
    runs: list[dict[str, Any]] = []
    with server.database("workflows") as dbname:
        for rnd in range(profile.wf_repeats):
            for workers in profile.wf_workers:
                order = STRATEGIES[rnd % len(STRATEGIES):] + STRATEGIES[:rnd % len(STRATEGIES)]
                for strategy in order:
                    r = drain(server, dbname, strategy, items=profile.wf_items, workers=workers, fault=fault)
                    r["round"] = rnd
                    runs.append(r)
                    log(f"  {strategy.name:<24} w={workers:<3} "
                        + (f"{r['items_per_s']:,.0f} items/s" if r["ok"] else "; ".join(r["problems"])))
    best: dict[str, dict[str, float | None]] = {}
    for s in STRATEGIES:
        best[s.name] = {}
        for workers in profile.wf_workers:
            these = [r for r in runs if r["strategy"] == s.name and r["workers"] == workers]
            if any(not r["ok"] for r in these):
                best[s.name][str(workers)] = None  # a failed check: no number
            else:
                best[s.name][str(workers)] = max(r["items_per_s"] for r in these)
    return {"items": profile.wf_items, "workers": list(profile.wf_workers), "repeats": profile.wf_repeats,
            "labels": {s.name: s.label for s in STRATEGIES}, "runs": runs, "best": best,
            "ok": all(r["ok"] for r in runs)}
