"""Helpers shared by the invariant tests: table snapshots, SQLSTATE capture, and reading the
plans of the statements that run inside pgqueue's functions (auto_explain)."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

Row = tuple[Any, ...]

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def server_pg_config() -> str:
    """Return the path of the server's pg_config, as scripts/find-pg-config finds it."""
    out = subprocess.run([str(REPO / "scripts" / "find-pg-config")], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@functools.cache
def pg_bindir() -> Path:
    """Return the directory of the server's programs (pg_ctl, pg_dump, pgbench): pg_config --bindir."""
    out = subprocess.run([server_pg_config(), "--bindir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())

#: The sequences a snapshot leaves out: row ids, which a refused INSERT takes before it fails
#: (a gap in ids is harmless), as tests/pgtap/20_errors.sql's state_now does.
ID_SEQUENCES = ("message_id_seq", "queue_id_seq", "schedule_id_seq", "spark_claim_id_seq", "spark_consumer_id_seq")


def snapshot(conn: psycopg.Connection[Any]) -> dict[str, list[Row]]:
    """Return the full contents of every table of schema pgqueue (each ordered by its rows),
    and under ``"sequences"`` the last value of each of its sequences but the id sequences:
    what a rollback does not undo (the counters of queue_counters, the lock stripes, the rate
    limits' and the capped queues' state). It named four tables and no sequence: a stale call
    that counted itself or wrote an idempotency key changed nothing it compared (a review)."""
    out: dict[str, list[Row]] = {}
    tables = conn.execute("SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace "
                          "AND c.relkind IN ('r', 'p') ORDER BY 1").fetchall()
    for (name,) in tables:
        out[f"pgqueue.{name}"] = conn.execute(
            sql.SQL("SELECT t.* FROM pgqueue.{} t ORDER BY t").format(sql.Identifier(name))).fetchall()
    out["sequences"] = conn.execute(
        "SELECT c.relname, pg_catalog.pg_sequence_last_value(c.oid) FROM pg_catalog.pg_class c "
        "WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'S' AND c.relname <> ALL (%s) ORDER BY 1",
        (list(ID_SEQUENCES),)).fetchall()
    return out


def moved_sequences(before: dict[str, list[Row]], after: dict[str, list[Row]]) -> dict[str, int]:
    """How far each sequence of two snapshots moved (only those that did; a sequence never
    called reads NULL, as 0 here)."""
    old, new = dict(before["sequences"]), dict(after["sequences"])
    return {k: (new.get(k) or 0) - (old.get(k) or 0) for k in sorted(old.keys() | new.keys())
            if new.get(k) != old.get(k)}


def assert_only_counted(conn: psycopg.Connection[Any], before: dict[str, list[Row]], queue: str,
                        counters: Sequence[str]) -> None:
    """Every table as in the snapshot ``before``, and of the sequences only ``queue``'s counters
    of ``counters`` (``enqueued``, ``delivered``...) moved, by one each: a call that rolled back
    stays counted (README, section Queues: sequences are not transactional)."""
    after = snapshot(conn)
    [[stripe]] = conn.execute("SELECT id & 63 FROM pgqueue.queue WHERE name = %s", (queue,)).fetchall()
    assert moved_sequences(before, after) == {f"counter_{c}_{stripe}": 1 for c in counters}
    assert {**after, "sequences": None} == {**before, "sequences": None}


def wait_for_lock_waiters(admin: psycopg.Connection[Any], n: int) -> None:
    """Until ``n`` sessions of the database wait on a lock (10 s at most, else fail)."""
    for _ in range(500):
        if admin.execute("SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE datname = current_database() "
                         "AND wait_event_type = 'Lock'").fetchone() == (n,):
            return
        time.sleep(0.02)
    raise AssertionError(f"not {n} waiting")


def commit_once_blocking(dsn: str, holder: psycopg.Connection[Any], waited: list[bool]) -> None:
    """Commit ``holder``'s transaction once another session waits for one of its locks (seen in
    ``pg_blocking_pids``; 20 s at most), appending True to ``waited`` if one did: run on a thread
    of its own, it makes a statement that waits for a row ``holder`` changed fail with 40001 at
    REPEATABLE READ, deterministically."""
    with psycopg.connect(dsn, autocommit=True) as watch:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            row = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE %s = ANY (pg_blocking_pids(pid))",
                                (holder.info.backend_pid,)).fetchone()
            if row is not None and row[0] > 0:
                waited.append(True)
                break
            time.sleep(0.02)
    holder.commit()


#: The context PostgreSQL gives a wait for the locker of a newer version of a row: under READ
#: COMMITTED a FOR UPDATE SKIP LOCKED whose row's updater commits while it looks at the row
#: locks the row's newer versions too, waiting for their lockers whatever SKIP LOCKED says
#: (heap_lock_updated_tuple), so two takes can deadlock through the rows alone (docs/locking.md).
UPDATE_CHAIN_WAIT = "while locking updated version"


def deadlock_kind(exc: psycopg.errors.DeadlockDetected) -> str:
    """Tell a deadlock through PostgreSQL's update-chain wait ("update chain") from one through
    the locks pgqueue takes in an order of its own ("lock order": its lock stripes, group
    locks and rows as its statements lock them)."""
    return "update chain" if UPDATE_CHAIN_WAIT in (exc.diag.context or "") else "lock order"


def sqlstate_of(conn: psycopg.Connection[Any], query: str, params: Sequence[Any] | None = None) -> str | None:
    """Run a statement and return the SQLSTATE it failed with, or None if it succeeded."""
    try:
        conn.execute(query, params)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def message_row(conn: psycopg.Connection[Any], msg_id: int) -> Row | None:
    """The full row of a live message, or None."""
    return conn.execute("SELECT m.* FROM pgqueue.message m WHERE m.id = %s", (msg_id,)).fetchone()


# --------------------------------------------------------------------------------------------
# Plans of nested statements
# --------------------------------------------------------------------------------------------

AUTO_EXPLAIN = (
    "LOAD 'auto_explain'",
    "SET auto_explain.log_min_duration = 0",
    "SET auto_explain.log_analyze = on",
    "SET auto_explain.log_buffers = on",
    "SET auto_explain.log_timing = off",
    "SET auto_explain.log_nested_statements = on",
    "SET auto_explain.log_format = 'json'",
    "SET auto_explain.log_level = 'notice'",
    "SET client_min_messages = notice",
)

#: Marks the statement the test sends, so that it is told apart from the nested ones.
TOP_MARKER = "/* pgqueue-test top-level */"

SCAN_NODES = {"Seq Scan", "Sample Scan", "Tid Scan", "Tid Range Scan", "Bitmap Heap Scan"}
INDEX_NODES = {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}
SORT_NODES = {"Sort", "Incremental Sort"}
#: Children that are a node's input (InitPlans and SubPlans are not, e.g. a CTE).
INPUT_RELATIONSHIPS = {"Outer", "Inner", "Member", "Subquery", None}


@dataclass
class Statement:
    """One statement auto_explain reported: its text and its JSON plan."""

    text: str
    plan: dict[str, Any]

    @property
    def buffers(self) -> int:
        """Shared buffers hit + read by the whole statement."""
        return int(self.plan.get("Shared Hit Blocks", 0)) + int(self.plan.get("Shared Read Blocks", 0))


@dataclass
class Call:
    """One call of a top-level statement: its rows, the top-level plan and the nested ones."""

    rows: list[Row]
    top: Statement
    nested: list[Statement] = field(default_factory=list)

    @property
    def nested_buffers(self) -> int:
        """Shared buffers (hit + read) of the nested statements, summed."""
        return sum(s.buffers for s in self.nested)


class PlanCapture:
    """Capture auto_explain's plans of every statement run on a connection (nested included)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self._notices: list[str] = []
        conn.add_notice_handler(self._on_notice)
        for stmt in AUTO_EXPLAIN:
            conn.execute(stmt)
        self._notices.clear()

    def _on_notice(self, diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary:
            self._notices.append(diag.message_primary)

    def run(self, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *,
            prepare: bool | None = None) -> Call:
        """Run one statement and return its rows with the plans auto_explain logged for it
        (``prepare``: as psycopg's; a prepared statement is planned as ``plan_cache_mode`` says,
        where an EXPLAIN with parameters plans with their values, a custom plan)."""
        self._notices.clear()
        rows = self.conn.execute(f"{TOP_MARKER} {query}", params, prepare=prepare).fetchall()  # type: ignore[arg-type]
        statements = [parse_auto_explain(n) for n in self._notices]
        plans = [s for s in statements if s is not None]
        tops = [s for s in plans if TOP_MARKER in s.text]
        assert len(tops) == 1, f"expected one top-level plan, got {len(tops)}: {self._notices!r}"
        return Call(rows=rows, top=tops[0], nested=[s for s in plans if TOP_MARKER not in s.text])


def parse_auto_explain(message: str) -> Statement | None:
    """Parse one auto_explain notice ("duration: ... plan:\\n{json}"); None for other notices."""
    head, sep, body = message.partition("plan:\n")
    if not sep or not head.startswith("duration:"):
        return None
    doc = json.loads(body)
    return Statement(text=doc.get("Query Text", ""), plan=doc["Plan"])


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of a plan tree, the root first."""
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


def walk_input(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The nodes that feed a node's output: its subtree without InitPlans and SubPlans."""
    for child in node.get("Plans", []):
        if child.get("Parent Relationship") in INPUT_RELATIONSHIPS:
            yield child
            yield from walk_input(child)


def _touches(node: dict[str, Any], relation: str, indexes: set[str]) -> bool:
    return node.get("Relation Name") == relation or node.get("Index Name") in indexes


def _describe(node: dict[str, Any]) -> str:
    bits = [node["Node Type"]]
    if "Index Name" in node:
        bits.append(f"using {node['Index Name']}")
    if "Relation Name" in node:
        bits.append(f"on {node['Relation Name']}")
    return " ".join(bits)


def index_names(conn: psycopg.Connection[Any], table: str = "pgqueue.message") -> set[str]:
    """Names of the indexes on a table."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = %s::regclass", (table,)).fetchall()
    return {r[0] for r in rows}


def plan_violations(statements: Sequence[Statement], message_indexes: set[str], *,
                    required_indexes: Sequence[str] = ("message_ready_idx",),
                    untouched: Sequence[str] = ("dead_letter",),
                    small_table: bool = False,
                    max_filtered: int = 1000) -> list[str]:
    """Everything in these plans that is not a bounded index probe of pgqueue.message.

    Always reported: each of required_indexes that no statement used for an index scan, and any
    read of a relation in untouched (writing to it is fine). Unless small_table (a table of a
    few pages, which the planner may rightly scan), also: a Seq/Sample/Tid/Bitmap scan of
    pgqueue.message; an index scan of it without an index condition (a full-index walk) or one
    that filtered out more than max_filtered rows; a Sort whose input scans pgqueue.message (a
    Sort over a CTE's handed-out rows is fine).
    """
    problems: list[str] = []
    used: set[str] = set()
    for st in statements:
        where = " ".join(st.text.split())[:140]
        for node in walk(st.plan):
            kind = node["Node Type"]
            if node.get("Relation Name") in untouched and kind != "ModifyTable":
                problems.append(f"{_describe(node)} in: {where}")
            if kind in INDEX_NODES and node.get("Index Name") in message_indexes:
                used.add(node["Index Name"])
            if small_table:
                continue
            if kind in SCAN_NODES and node.get("Relation Name") == "message":
                problems.append(f"{_describe(node)} in: {where}")
            if kind in INDEX_NODES and node.get("Index Name") in message_indexes:
                if kind == "Bitmap Index Scan":
                    problems.append(f"{_describe(node)} in: {where}")
                elif "Index Cond" not in node:
                    problems.append(f"{_describe(node)} without an index condition in: {where}")
                removed = int(node.get("Rows Removed by Filter", 0)) + int(node.get("Rows Removed by Index Recheck", 0))
                if removed > max_filtered:
                    problems.append(f"{_describe(node)} filtered out {removed} rows in: {where}")
            if kind in SORT_NODES:
                scanned = [n for n in walk_input(node) if _touches(n, "message", message_indexes)]
                if scanned:
                    problems.append(f"{kind} over {_describe(scanned[0])} in: {where}")
    for idx in required_indexes:
        if idx not in used:
            problems.append(f"no index scan using {idx} in any statement")
    return problems


def default_signals(*ignored: signal.Signals) -> None:
    """In the child: SIGINT, SIGTERM and SIGHUP at their defaults, as in a terminal's job or a
    service manager's unit (a test run under nohup, or as `cmd &` from a script, has SIGHUP or
    SIGINT ignored, which the child would inherit and rightly keep so), but the ``ignored`` ones
    (``preexec_fn=lambda: default_signals(signal.SIGHUP)``: as under nohup)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)


@contextmanager
def command(argv: Sequence[str], *, cwd: Path | None = None,
            ignored: Sequence[signal.Signals] = ()) -> Iterator[subprocess.Popen[str]]:
    """Run ``argv`` with its output piped, in a session of its own with SIGINT, SIGTERM and
    SIGHUP at their defaults but the ``ignored`` ones (:func:`default_signals`); kill it if the
    test leaves it running."""
    proc = subprocess.Popen(list(argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: default_signals(*ignored))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextmanager
def database_in(server: Any, encoding: str) -> Iterator[str]:
    """A database of that encoding (C locale; initdb under the C locale makes SQL_ASCII ones)
    with pgqueue, dropped after the block (one left by an interrupted run is dropped first)."""
    from conftest import drop_database

    name = f"enc_{encoding.lower()}_{os.getpid()}"
    with psycopg.connect(server.admin_dsn, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name} ENCODING '{encoding}' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
    try:
        with psycopg.connect(server.dsn(name), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgqueue")
        yield name
    finally:
        drop_database(server, name)


def processes_from(path: str) -> list[str]:
    """The pids of the running processes whose command line names ``path``."""
    left = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if path.encode() in cmdline.read_bytes():
                left.append(cmdline.parent.name)
        except OSError:  # the process ended meanwhile
            pass
    return left


def stderr_or_fail(proc: subprocess.Popen[str], timeout: float, ran_on: str) -> str:
    """The stderr of ``proc`` once it has ended within ``timeout`` s; else kill it and fail the
    test with ``ran_on`` and what it wrote."""
    import pytest

    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"{ran_on}: {err}")
    return str(err)


class BusyQueue:
    """Two producers and two consumers of queue ``busy`` (which the caller creates), each on a
    thread and a connection of its own, calling only the API every release has: the load under
    which the upgrade tests update a database. ``errors`` counts the database's refusals by
    (SQLSTATE, message); ``died`` holds what ended a thread otherwise (a thread's exception was
    only a warning of pytest's)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.stop = threading.Event()
        self.errors: Counter[tuple[str | None, str]] = Counter()
        self.done: Counter[str] = Counter()
        self.died: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(producer,)) for producer in (True, True, False, False)]

    def _run(self, producer: bool) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    try:
                        if producer:
                            conn.execute("SELECT pgqueue.message_create('busy', 'x')")
                            self.done["created"] += 1
                        else:
                            for lease in conn.execute(
                                    "SELECT id, attempts FROM pgqueue.message_dequeue('busy', 5)").fetchall():
                                conn.execute("SELECT pgqueue.message_complete(%s, %s)", lease)
                                self.done["completed"] += 1
                    except psycopg.errors.QueryCanceled:
                        raise
                    except psycopg.Error as exc:
                        self.errors[(exc.sqlstate, (exc.diag.message_primary or "")[:120])] += 1
        except BaseException as exc:
            self.died.append(exc)

    def worked_since(self, since: Counter[str] | None = None, timeout: float = 30) -> bool:
        """Until producers and consumers have each done more than ``since`` (nothing: anything),
        ``timeout`` seconds at most (a loaded machine may not run them for a while)."""
        since = since or Counter()
        deadline = time.monotonic() + timeout
        while not self.died:
            if self.done["created"] > since["created"] and self.done["completed"] > since["completed"]:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return False

    def __enter__(self) -> BusyQueue:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


@contextmanager
def scheduler_running(dsn: str, **options: Any) -> Iterator[Any]:
    """A :class:`pgqueue.schedules.Scheduler` (no signal handlers) running on a thread for the
    block, stopped after it."""
    from pgqueue.schedules import Scheduler

    scheduler = Scheduler(dsn, handle_signals=False, **options)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        yield scheduler
    finally:
        scheduler.stop()
        thread.join(10)


#: Source of an Event whose first wait() delivers SIGTERM while the waiting thread holds the
#: event's lock (Event.wait takes it for a moment before and after it sleeps: where a real signal
#: may land; signal.raise_signal runs the Python handler before it returns), for the scripts of
#: subprocesses that stop a scheduler or a worker there (it needs ``import signal, threading``).
SIGNALLED_INSIDE_THE_LOCK = """
class SignalledInsideTheLock(threading.Event):
    sent = False

    def wait(self, timeout=None):
        if not self.sent:
            self.sent = True
            with self._cond:
                signal.raise_signal(signal.SIGTERM)
        return super().wait(timeout)
"""
