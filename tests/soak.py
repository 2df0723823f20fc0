#!/usr/bin/env python
"""Soak pgqueue: many clients doing random operations, then an invariant checker.

    .venv/bin/python tests/soak.py --minutes 10            # a throwaway server, 8 clients
    .venv/bin/python tests/soak.py --seconds 10 --dsn 'dbname=app'   # an existing database

Each client has its own connection and a log of what it did and how each call ended:
``committed`` (its COMMIT, or the autocommit statement, returned), ``rolled_back`` (it failed
or rolled back before COMMIT was sent: nothing happened) or ``unknown`` (the connection died
while COMMIT was in flight). Messages are told apart by their content, a unique tag per
created message, so that a dead letter requeued under a new id is still the same message.

Afterwards :func:`check` merges the logs with the tables and reports every broken promise:

* lost: a message whose create committed is neither live, nor dead, nor removed by a
  committed (or possibly committed) complete, delete-mode delivery or purge;
* phantom: a message nobody committed (rolled back, never created) is in a table or was
  delivered;
* duplicated: a tag in two rows; two committed removals of one message (completed twice,
  delivered twice in delete mode, completed and delivered, ...); one lease delivery (id,
  attempts) handed out twice; any delivery that started after the message's removal had
  committed;
* fencing: a complete returned true for a delivery the client never received;
* checkpoint state handed to the wrong message;
* queue_stats differs from the tables (see :func:`stats_problems`).

The exit status is 0 when no problem was found. The crash test (tests/test_faults.py) drives
the same :class:`Client` through a server crash and checks with the same :func:`check`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

Conn = psycopg.Connection[Any]

#: The queues of a soak: plain leases; retries with dead letters; a capped queue (PQ003).
QUEUES: dict[str, dict[str, Any]] = {
    "soak_plain": {"p_lock_ms": 2000},
    "soak_retry": {"p_lock_ms": 300, "p_max_attempts": 3, "p_retry_base_ms": 10, "p_retry_cap_ms": 100},
    "soak_capped": {"p_lock_ms": 500, "p_max_attempts": 2, "p_max_size": 150,
                    "p_retry_base_ms": 10, "p_retry_cap_ms": 50},
}

#: Weights of the operations of a soak client (every operation, mixed).
MIXED: dict[str, int] = {
    "create": 12, "create_batch": 6, "lease": 16, "take": 8, "complete": 14, "heartbeat": 4,
    "defer": 4, "fail": 5, "abandon": 2, "requeue": 3, "purge": 2, "stats": 1,
}

#: SQLSTATEs a soak client expects: queue full (capped queue).
EXPECTED_ERRORS = {"PQ003"}

COMMITTED, ROLLED_BACK, UNKNOWN = "committed", "rolled_back", "unknown"


def setup_queues(conn: Conn, suffix: str) -> list[str]:
    """Create the soak's queues, named with suffix so that every run starts empty; return their names."""
    names = []
    for base, options in QUEUES.items():
        name = f"{base}_{suffix}"
        args = ", ".join(f"{k} => %({k})s" for k in options)  # keys are constants of this module
        conn.execute(f"SELECT pgqueue.queue_create(%(q)s, {args})", {"q": name, **options})
        names.append(name)
    return names


class ConnectionLost(Exception):
    """The client's connection is gone; the client stops."""


@dataclass
class Event:
    """One operation of one client, with monotonic start and end times.

    items: (tag, id, attempts, state) of each message the operation received or acted on.
    outcome: committed / rolled_back / unknown. result: what a single call returned (True/False).
    """

    op: str
    t0: float
    t1: float
    outcome: str
    queue: str | None = None
    items: list[tuple[str, int, int, str | None]] = field(default_factory=list)
    result: bool | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != []}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Event:
        items = [(t, i, a, s) for t, i, a, s in doc.pop("items", [])]
        return cls(items=items, **doc)


class Client:
    """A client with its own connection doing random operations and logging them.

    profile maps operation names (MIXED) to weights. A client stops at the deadline, when stop
    is set, or when its connection is lost (the operation in flight is logged as unknown if its
    COMMIT was sent, else as rolled back).
    """

    def __init__(self, dsn: str, run: str, number: int, queues: Sequence[str], *,
                 profile: dict[str, int] | None = None, seed: int = 0,
                 lease_ms: tuple[int, int] = (100, 2000)) -> None:
        self.dsn = dsn
        self.run = run
        self.number = number
        self.profile = profile or MIXED
        self.queues = list(queues)
        self.rng = random.Random(f"{seed}:{number}")
        self.lease_ms = lease_ms
        self.log: list[Event] = []
        self.problems: list[str] = []
        self.hand: list[tuple[str, str, int, int]] = []  # (queue, tag, id, attempts) leased to us
        self.serial = 0
        self.conn: Conn | None = None
        self.ops = [getattr(self, f"op_{name}") for name in self.profile]
        self.weights = list(self.profile.values())

    # -- plumbing -------------------------------------------------------------------------

    def new_tag(self) -> str:
        self.serial += 1
        return f"{self.run}:{self.number}:{self.serial}"

    def _lost(self, exc: psycopg.Error) -> bool:
        """Whether the connection is gone (not merely this statement failed, e.g. a deadlock)."""
        if self.conn is None or self.conn.broken or self.conn.closed:
            return True
        return (exc.sqlstate or "").startswith(("08", "57P"))  # connection exception, shutdown

    def transaction(self, op: str, queue: str | None, body: Any, *, rollback: bool = False) -> Event:
        """Run body(conn) between BEGIN and COMMIT (or ROLLBACK) and log how it ended."""
        assert self.conn is not None
        conn = self.conn
        t0 = time.monotonic()
        items: list[tuple[str, int, int, str | None]] = []
        try:
            conn.execute("BEGIN")
            items = body(conn)
        except psycopg.Error as exc:
            event = Event(op, t0, time.monotonic(), ROLLED_BACK, queue, items, error=exc.sqlstate or type(exc).__name__)
            self.log.append(event)
            if self._lost(exc):
                raise ConnectionLost from exc
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error as exc2:
                raise ConnectionLost from exc2
            self._unexpected(event, exc)
            return event
        if rollback:
            event = Event(op, t0, time.monotonic(), ROLLED_BACK, queue, items, error="deliberate")
            self.log.append(event)
            try:
                conn.execute("ROLLBACK")
            except psycopg.Error as exc:
                raise ConnectionLost from exc
            return event
        try:
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            lost = self._lost(exc)
            event = Event(op, t0, time.monotonic(), UNKNOWN if lost else ROLLED_BACK, queue, items,
                          error=exc.sqlstate or type(exc).__name__)
            self.log.append(event)
            if lost:
                raise ConnectionLost from exc
            self._unexpected(event, exc)
            return event
        event = Event(op, t0, time.monotonic(), COMMITTED, queue, items)
        self.log.append(event)
        return event

    def call(self, op: str, queue: str, item: tuple[str, int, int, str | None], query: str,
             params: Sequence[Any]) -> Event:
        """One autocommit call that returns a boolean; its return means it committed."""
        assert self.conn is not None
        t0 = time.monotonic()
        try:
            row = self.conn.execute(query, params).fetchone()
        except psycopg.Error as exc:
            lost = self._lost(exc)
            event = Event(op, t0, time.monotonic(), UNKNOWN if lost else ROLLED_BACK, queue, [item],
                          error=exc.sqlstate or type(exc).__name__)
            self.log.append(event)
            if lost:
                raise ConnectionLost from exc
            self._unexpected(event, exc)
            return event
        assert row is not None
        event = Event(op, t0, time.monotonic(), COMMITTED, queue, [item], result=bool(row[0]))
        self.log.append(event)
        return event

    def _unexpected(self, event: Event, exc: psycopg.Error) -> None:
        if exc.sqlstate not in EXPECTED_ERRORS:
            self.problems.append(f"client {self.number}: {event.op} on {event.queue} failed: "
                                 f"{exc.sqlstate} {str(exc).strip()[:200]}")

    def run_until(self, deadline: float, stop: threading.Event | None = None) -> None:
        """Do random operations until the deadline (or stop, or a lost connection)."""
        try:
            self.conn = psycopg.connect(self.dsn, autocommit=True,
                                        options="-c statement_timeout=60000",
                                        application_name=f"pgqueue-soak-{self.number}")
        except psycopg.OperationalError as exc:
            self.problems.append(f"client {self.number}: cannot connect: {exc}")
            return
        try:
            while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
                op = self.rng.choices(self.ops, self.weights)[0]
                op()
        except ConnectionLost:
            self.problems.append(f"client {self.number}: connection lost")
        except Exception as exc:  # a bug of the client or a broken promise: report, do not hang
            self.problems.append(f"client {self.number}: {type(exc).__name__}: {exc}")
        finally:
            try:
                self.conn.close()
            except psycopg.Error:
                pass

    # -- operations -----------------------------------------------------------------------

    def pick_queue(self) -> str:
        return self.rng.choice(self.queues)

    def op_create(self) -> None:
        queue = self.pick_queue()
        tag = self.new_tag()
        roll = self.rng.random()
        if roll < 0.1:  # scheduled a little later
            when = "pgqueue.now_ms() + %s" % self.rng.randint(1, 300)
        elif roll < 0.2:
            when = "pgqueue.priority_dequeue_at(%s)" % self.rng.randint(0, 5)
        else:
            when = "NULL"

        def body(conn: Conn) -> list[tuple[str, int, int, str | None]]:
            row = conn.execute(f"SELECT pgqueue.message_create(%s, %s, {when})", (queue, tag.encode())).fetchone()
            assert row is not None
            return [(tag, row[0], 0, None)]

        self.transaction("create", queue, body, rollback=self.rng.random() < 0.05)

    def op_create_batch(self) -> None:
        queue = self.pick_queue()
        tags = [self.new_tag() for _ in range(self.rng.randint(1, 6))]

        def body(conn: Conn) -> list[tuple[str, int, int, str | None]]:
            ids = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch(%s, %s)",
                                              (queue, [t.encode() for t in tags])).fetchall()]
            return [(t, i, 0, None) for t, i in zip(tags, ids)]

        self.transaction("create", queue, body, rollback=self.rng.random() < 0.05)

    def op_lease(self) -> None:
        queue = self.pick_queue()
        limit = self.rng.randint(1, 5)
        lease = self.rng.randint(*self.lease_ms)

        def body(conn: Conn) -> list[tuple[str, int, int, str | None]]:
            rows = conn.execute("SELECT id, attempts, content, state FROM pgqueue.message_dequeue(%s, %s, %s)",
                                (queue, limit, lease)).fetchall()
            return [(bytes(c).decode(), i, a, None if s is None else bytes(s).decode()) for i, a, c, s in rows]

        event = self.transaction("lease", queue, body, rollback=self.rng.random() < 0.03)
        if event.outcome == COMMITTED:
            self.hand.extend((queue, tag, i, a) for tag, i, a, _ in event.items)

    def op_take(self) -> None:
        queue = self.pick_queue()
        limit = self.rng.randint(1, 5)

        def body(conn: Conn) -> list[tuple[str, int, int, str | None]]:
            rows = conn.execute("SELECT id, attempts, content, state FROM pgqueue.message_dequeue(%s, %s, 0)",
                                (queue, limit)).fetchall()
            return [(bytes(c).decode(), i, a, None if s is None else bytes(s).decode()) for i, a, c, s in rows]

        self.transaction("take", queue, body, rollback=self.rng.random() < 0.1)

    def _from_hand(self) -> tuple[str, str, int, int] | None:
        if not self.hand:
            return None
        return self.hand.pop(self.rng.randrange(len(self.hand)))

    def op_complete(self) -> None:
        held = self._from_hand()
        if held is not None:
            queue, tag, msg_id, token = held
            self.call("complete", queue, (tag, msg_id, token, None),
                      "SELECT pgqueue.message_complete(%s, %s)", (msg_id, token))

    def op_heartbeat(self) -> None:
        held = self._from_hand()
        if held is not None:
            queue, tag, msg_id, token = held
            event = self.call("heartbeat", queue, (tag, msg_id, token, None),
                              "SELECT pgqueue.message_heartbeat(%s, %s, %s)",
                              (msg_id, token, self.rng.randint(*self.lease_ms)))
            if event.result:
                self.hand.append(held)

    def op_defer(self) -> None:
        held = self._from_hand()
        if held is not None:
            queue, tag, msg_id, token = held
            state = f"{tag}|checkpoint {token}"
            self.call("defer", queue, (tag, msg_id, token, state),
                      "SELECT pgqueue.message_defer(%s, %s, pgqueue.now_ms() + %s, %s)",
                      (msg_id, token, self.rng.randint(0, 200), state.encode()))

    def op_fail(self) -> None:
        held = self._from_hand()
        if held is not None:
            queue, tag, msg_id, token = held
            self.call("fail", queue, (tag, msg_id, token, None),
                      "SELECT pgqueue.message_fail(%s, %s, %s)", (msg_id, token, f"soak failure {token}"))

    def op_abandon(self) -> None:
        self._from_hand()  # like a worker that died: the lease runs out

    def _dead_letter_op(self, op: str, function: str) -> None:
        queue = self.pick_queue()
        limit = self.rng.randint(1, 10)

        def body(conn: Conn) -> list[tuple[str, int, int, str | None]]:
            # lock the dead letters first, so that we know exactly which ones the call moved
            rows = conn.execute(
                "SELECT d.id, d.attempts, d.content FROM pgqueue.dead_letter d "
                "JOIN pgqueue.queue q ON q.id = d.queue_id WHERE q.name = %s "
                "ORDER BY d.id LIMIT %s FOR UPDATE OF d SKIP LOCKED", (queue, limit)).fetchall()
            items = [(bytes(c).decode(), i, a, None) for i, a, c in rows]
            row = conn.execute(f"SELECT pgqueue.{function}(%s, %s)", (queue, [i for i, _, _ in rows])).fetchone()
            assert row is not None
            if row[0] != len(rows):
                self.problems.append(f"client {self.number}: {function} moved {row[0]} of the "
                                     f"{len(rows)} dead letters it was given")
            return items

        self.transaction(op, queue, body, rollback=self.rng.random() < 0.05)

    def op_requeue(self) -> None:
        self._dead_letter_op("requeue", "dead_letter_requeue")

    def op_purge(self) -> None:
        self._dead_letter_op("purge", "dead_letter_purge")

    def op_stats(self) -> None:
        assert self.conn is not None
        try:
            self.conn.execute("SELECT * FROM pgqueue.queue_stats()").fetchall()
        except psycopg.Error as exc:
            if self._lost(exc):
                raise ConnectionLost from exc
            self.problems.append(f"client {self.number}: queue_stats failed: {exc.sqlstate} {exc}")


# --------------------------------------------------------------------------------------------
# The final state and the checker
# --------------------------------------------------------------------------------------------


@dataclass
class Row:
    """A message or dead letter found in the tables at the end."""

    table: str  # "message" or "dead_letter"
    queue: str
    id: int
    attempts: int
    state: str | None


def read_final(conn: Conn, run: str) -> dict[str, list[Row]]:
    """Every live message and dead letter of this run, by tag."""
    prefix = f"{run}:".encode()
    out: dict[str, list[Row]] = defaultdict(list)
    for table in ("message", "dead_letter"):
        rows = conn.execute(
            f"SELECT q.name, t.id, t.attempts, t.content, t.state FROM pgqueue.{table} t "  # constant names
            "LEFT JOIN pgqueue.queue q ON q.id = t.queue_id "
            "WHERE substring(t.content FROM 1 FOR %s) = %s", (len(prefix), prefix)).fetchall()
        for queue, msg_id, attempts, content, state in rows:
            out[bytes(content).decode()].append(
                Row(table, queue, msg_id, attempts, None if state is None else bytes(state).decode()))
    return dict(out)


TERMINAL_OPS = {"take", "purge"}  # and complete with result True


def check(logs: Sequence[Sequence[Event]], final: dict[str, list[Row]]) -> list[str]:
    """Merge the clients' logs with the final tables; return every broken promise (empty: fine)."""
    problems: list[str] = []
    created: dict[str, str] = {}                                  # tag -> best outcome of its create
    terminals: dict[str, list[tuple[str, float, int]]] = defaultdict(list)  # committed removals
    maybe_removed: set[str] = set()                               # removals of unknown outcome
    deliveries: dict[str, list[tuple[str, float, int]]] = defaultdict(list)  # (op, t0, client) received
    lease_pairs: Counter[tuple[int, int]] = Counter()
    leased_by: dict[int, set[tuple[int, int]]] = defaultdict(set)
    rank = {ROLLED_BACK: 0, UNKNOWN: 1, COMMITTED: 2}

    for client, log in enumerate(logs):
        for ev in log:
            if ev.op == "create":
                for tag, *_ in ev.items:
                    if tag in created:
                        problems.append(f"{tag}: created twice (a client bug)")
                    created[tag] = max(created.get(tag, ROLLED_BACK), ev.outcome, key=rank.__getitem__)
            elif ev.op in ("lease", "take"):
                for tag, msg_id, attempts, state in ev.items:
                    deliveries[tag].append((ev.op, ev.t0, client))
                    if state is not None and not state.startswith(f"{tag}|"):
                        problems.append(f"{tag}: delivered with the checkpoint state of another message: {state!r}")
                    if ev.op == "lease" and ev.outcome == COMMITTED:
                        lease_pairs[(msg_id, attempts)] += 1
                        leased_by[client].add((msg_id, attempts))
                    if ev.op == "take" and ev.outcome == COMMITTED:
                        terminals[tag].append(("delivered in delete mode", ev.t1, client))
                    elif ev.op == "take" and ev.outcome == UNKNOWN:
                        maybe_removed.add(tag)
            elif ev.op == "complete":
                tag, msg_id, attempts, _ = ev.items[0]
                if ev.outcome == COMMITTED and ev.result:
                    terminals[tag].append(("completed", ev.t1, client))
                    if (msg_id, attempts) not in leased_by[client]:
                        problems.append(f"{tag}: client {client} completed delivery ({msg_id}, {attempts}) "
                                        "that it never received")
                elif ev.outcome == UNKNOWN:
                    maybe_removed.add(tag)
            elif ev.op == "purge":
                for tag, *_ in ev.items:
                    if ev.outcome == COMMITTED:
                        terminals[tag].append(("purged", ev.t1, client))
                    elif ev.outcome == UNKNOWN:
                        maybe_removed.add(tag)

    for (msg_id, attempts), n in lease_pairs.items():
        if n > 1:
            problems.append(f"message id {msg_id}: lease delivery with attempts {attempts} handed out {n} times")

    tags = set(created) | set(final) | set(deliveries) | set(terminals)
    for tag in sorted(tags):
        outcome = created.get(tag)
        rows = final.get(tag, [])
        if len(rows) > 1:
            problems.append(f"{tag}: duplicated in the tables: {rows}")
        if outcome is None or outcome == ROLLED_BACK:
            if rows or deliveries.get(tag):
                problems.append(f"{tag}: phantom (create {outcome or 'never logged'}) but "
                                f"{'in ' + rows[0].table if rows else 'delivered'}")
            continue
        removed = terminals.get(tag, [])
        if len(removed) > 1:
            problems.append(f"{tag}: removed more than once: " + ", ".join(
                f"{what} by client {c}" for what, _, c in removed))
        if removed and rows:
            problems.append(f"{tag}: {removed[0][0]} (committed) but still in {rows[0].table}")
        if removed:
            done_at = min(t for _, t, _ in removed)
            late = [(op, c) for op, t0, c in deliveries.get(tag, []) if t0 > done_at]
            if late:
                problems.append(f"{tag}: delivered again after it was {removed[0][0]}: {late}")
        if not rows and not removed and tag not in maybe_removed and outcome == COMMITTED:
            problems.append(f"{tag}: lost (its create committed, it is in no table, nobody removed it)")
    return problems


def stats_problems(conn: Conn, queues: Iterable[str], final: dict[str, list[Row]] | None = None) -> list[str]:
    """Compare queue_stats with direct counts of the tables (and with final, if given: the
    queues must then hold nothing but final's messages).

    One REPEATABLE READ snapshot; ready/scheduled/leased depend on the clock, so the direct
    counts are taken at now_ms() just before and just after queue_stats: each count must lie
    between them (ready only grows with time, scheduled and leased only shrink).
    """
    problems: list[str] = []
    count_sql = """
        SELECT count(*) FILTER (WHERE (m.locked_until IS NULL AND m.dequeue_at <= %(t)s)
                                   OR (m.locked_until IS NOT NULL AND m.locked_until <= %(t)s)),
               count(*) FILTER (WHERE m.locked_until IS NULL AND m.dequeue_at > %(t)s),
               count(*) FILTER (WHERE m.locked_until IS NOT NULL AND m.locked_until > %(t)s),
               (SELECT count(*) FROM pgqueue.dead_letter d JOIN pgqueue.queue q ON q.id = d.queue_id
                 WHERE q.name = %(q)s)
          FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
         WHERE q.name = %(q)s"""
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with conn.transaction():
        if idle:  # else the caller's transaction (and its snapshots) it is
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        for queue in queues:
            t0 = conn.execute("SELECT pgqueue.now_ms()").fetchone()[0]  # type: ignore[index]
            stats = conn.execute("SELECT ready, scheduled, leased, dead FROM pgqueue.queue_stats(%s)",
                                 (queue,)).fetchone()
            t1 = conn.execute("SELECT pgqueue.now_ms()").fetchone()[0]  # type: ignore[index]
            before = conn.execute(count_sql, {"t": t0, "q": queue}).fetchone()
            after = conn.execute(count_sql, {"t": t1, "q": queue}).fetchone()
            assert stats is not None and before is not None and after is not None
            ready, scheduled, leased, dead = stats
            ok = (before[0] <= ready <= after[0] and before[1] >= scheduled >= after[1]
                  and before[2] >= leased >= after[2] and dead == before[3]
                  and ready + scheduled + leased == sum(before[:3]))
            if not ok:
                problems.append(f"{queue}: queue_stats {stats} but the tables say {before} .. {after}")
            if final is not None:
                live = sum(1 for rows in final.values() for r in rows if r.queue == queue and r.table == "message")
                dead_tags = sum(1 for rows in final.values() for r in rows if r.queue == queue and r.table == "dead_letter")
                if (live, dead_tags) != (ready + scheduled + leased, dead):
                    problems.append(f"{queue}: queue_stats says {ready + scheduled + leased} live and {dead} dead, "
                                    f"this run's messages are {live} live and {dead_tags} dead")
    return problems


def write_logs(log_dir: Path, meta: dict[str, Any], logs: Sequence[Sequence[Event]]) -> None:
    """Write run.json (run, seed, queues) and one client-N.jsonl per client."""
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "run.json").write_text(json.dumps(meta))
    for n, log in enumerate(logs):
        with open(log_dir / f"client-{n}.jsonl", "w") as fh:
            for ev in log:
                fh.write(json.dumps(ev.to_json()) + "\n")


def load_logs(log_dir: Path) -> tuple[dict[str, Any], list[list[Event]]]:
    """Read back what write_logs wrote."""
    meta = json.loads((log_dir / "run.json").read_text())
    logs = []
    n = 0
    while (path := log_dir / f"client-{n}.jsonl").exists():
        logs.append([Event.from_json(json.loads(line)) for line in path.read_text().splitlines()])
        n += 1
    return meta, logs


def check_saved(dsn: str, log_dir: Path) -> list[str]:
    """Check saved logs against the database they ran on (its queues must still be there)."""
    meta, logs = load_logs(log_dir)
    with psycopg.connect(dsn, autocommit=True) as conn:
        final = read_final(conn, meta["run"])
        return check(logs, final) + stats_problems(conn, meta["queues"], final)


# --------------------------------------------------------------------------------------------
# Running a soak
# --------------------------------------------------------------------------------------------


@dataclass
class Report:
    """What a soak did and what it found."""

    seconds: float
    ops: Counter[str]
    outcomes: Counter[str]
    messages: int
    final: dict[str, int]
    problems: list[str]

    def summary(self) -> str:
        total = sum(self.ops.values())
        lines = [
            f"soak: {total} operations in {self.seconds:.1f} s ({total / max(self.seconds, 1e-9):.0f}/s), "
            f"{self.messages} messages created",
            "  operations: " + ", ".join(f"{k} {v}" for k, v in sorted(self.ops.items())),
            "  outcomes:   " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())),
            "  at the end: " + ", ".join(f"{k} {v}" for k, v in sorted(self.final.items())),
        ]
        if self.problems:
            lines.append(f"FAILED: {len(self.problems)} problem(s)")
            lines += [f"  {p}" for p in self.problems[:50]]
        else:
            lines.append("OK: no message lost, none duplicated, queue_stats equal to the tables")
        return "\n".join(lines)


def soak(dsn: str, seconds: float, *, clients: int = 8, seed: int | None = None,
         log_dir: Path | None = None, drop: bool = False) -> Report:
    """Run a soak against a database that has the extension; return its report.

    The soak's queues are new (named soak_*_<random>); drop removes them afterwards if the
    check passed (kept otherwise, for a post-mortem).
    """
    seed = random.randrange(1 << 30) if seed is None else seed
    suffix = f"{random.randrange(1 << 32):08x}"
    run = f"soak-{seed}-{suffix}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        queues = setup_queues(conn, suffix)
    workers = [Client(dsn, run, n, queues, seed=seed) for n in range(clients)]
    start = time.monotonic()
    deadline = start + seconds
    threads = [threading.Thread(target=w.run_until, args=(deadline,), name=f"soak-{w.number}") for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - start
    logs = [w.log for w in workers]
    with psycopg.connect(dsn, autocommit=True) as conn:
        final = read_final(conn, run)
        problems = [p for w in workers for p in w.problems]
        problems += check(logs, final)
        problems += stats_problems(conn, queues, final)
        if not problems and drop:
            for queue in queues:
                conn.execute("SELECT pgqueue.queue_drop(%s)", (queue,))
    if log_dir is not None:
        write_logs(log_dir, {"run": run, "seed": seed, "queues": queues}, logs)
    ops = Counter(ev.op for log in logs for ev in log)
    outcomes = Counter(ev.outcome for log in logs for ev in log)
    messages = sum(len(ev.items) for log in logs for ev in log if ev.op == "create" and ev.outcome == COMMITTED)
    states = Counter(r.table for rows in final.values() for r in rows)
    return Report(took, ops, outcomes, messages, dict(states), problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    parser.add_argument("--seconds", type=float, help="how long to run, in seconds (overrides --minutes)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    parser.add_argument("--dsn", help="a database with the extension (default: a throwaway server)")
    parser.add_argument("--seed", type=int, help="random seed (default: random, printed)")
    parser.add_argument("--log-dir", type=Path, help="write each client's log there (JSON lines)")
    parser.add_argument("--keep", action="store_true", help="with --dsn: keep the soak's queues even if it passed")
    parser.add_argument("--check-logs", type=Path, metavar="DIR",
                        help="with --dsn: only check the logs a run wrote with --log-dir (and --keep)")
    args = parser.parse_args(argv)
    if args.check_logs is not None:
        if not args.dsn:
            parser.error("--check-logs needs --dsn")
        problems = check_saved(args.dsn, args.check_logs)
        for p in problems:
            print(p)
        print(f"FAILED: {len(problems)} problem(s)" if problems else "OK")
        return 1 if problems else 0
    seconds = args.seconds if args.seconds is not None else args.minutes * 60
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"soak: {args.clients} clients for {seconds:.0f} s, seed {seed}", flush=True)
    if args.dsn:
        report = soak(args.dsn, seconds, clients=args.clients, seed=seed, log_dir=args.log_dir,
                      drop=not args.keep)
    else:
        from pgqueue.embedded import EmbeddedPostgres

        with EmbeddedPostgres() as pg:
            with psycopg.connect(pg.dsn(), autocommit=True) as conn:
                conn.execute("CREATE DATABASE soak")
            with psycopg.connect(pg.dsn("soak"), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pgqueue")
            report = soak(pg.dsn("soak"), seconds, clients=args.clients, seed=seed, log_dir=args.log_dir)
    print(report.summary(), flush=True)
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
