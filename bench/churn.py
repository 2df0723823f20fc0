"""Targets 6 and 7: producers and consumers at full speed together for minutes.

Producer and consumer processes (each on its own connection, synchronous_commit off so that the
disk's flush time does not hide what dead tuples do) run for a fixed time against one queue
that starts with a backlog. Producers hold back (1 ms naps) while the backlog is more than a
slack above its starting size, so the live set stays bounded and any growth of the table is
bloat; consumers nap 1 ms after an empty dequeue, as a polling worker would. Every message
carries a token; consumers record the tokens they finished and the run ends with seed 002's
check: every token produced is finished exactly once or still in the queue, never both.

Recorded each second: messages finished and enqueued, the table's size with its indexes (and
heap alone), dead and live tuples, autovacuum runs, whether a vacuum of the table is running,
the server's checkpoints so far, the database's buffer accesses so far, the oldest snapshot's age. Reported per
window (15 s): the dequeue rate, and the slowest window against the fastest.

pgqueue runs the lease cycle (dequeue with a lease, then message_complete: two statements,
an UPDATE and a DELETE per message); seed 001 runs its message_create / message_dequeue.
The design "pgqueue_naptime10" is the same pgqueue run with the server's autovacuum_naptime
lowered to 10 s for its duration (ALTER SYSTEM + pg_reload_conf(), set back to what ALTER SYSTEM
had set before, or reset, afterwards; it needs a superuser, as on the suite's own server, and a
server whose autovacuum_naptime is not given on its command line, which ALTER SYSTEM cannot
override): the setting docs/performance.md recommends for a
busy queue, since dead index entries pile up between two autovacuum visits.

The held-xmin variant opens a REPEATABLE READ transaction, takes its snapshot, and holds it
for a while in the middle of the run (in the same database, where it stops vacuum from
removing anything deleted after it began).

The held-snapshot section (``run_held``, issue 12) runs the same churn for every design of
``HELD_DESIGNS`` and each of three ways of holding the xmin horizon back (``HOLD_CASES``): a
REPEATABLE READ snapshot that read another table, an idle-in-transaction session that has an
xid, and a REPEATABLE READ snapshot that read the design's own queue table (and so keeps its
ACCESS SHARE lock, as pg_dump does). The peers are measured with their own APIs: PgQ (Debian's
postgresql-15-pgq3: insert_event, a ticker thread calling pgq.ticker() every 100 ms and
pgqd's maintenance operations every 5 s, next_batch / get_batch_events / finish_batch) and
pgmq (pop, and read + delete). A peer whose ``CREATE EXTENSION`` fails on the server is
reported as not available, with the server's reason.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
import traceback
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.synchronize import Event as _Event
from typing import Any

import psycopg
from psycopg import sql

from bench import db
from bench.check import CheckResult, Recorder, exactly_once

PAD = db.PAYLOAD[:64]
#: the client processes are forked: they inherit the design and the load's shared arrays
_MP = multiprocessing.get_context("fork")
TOKEN_BASE = 10**12


def _content(token: int) -> bytes:
    return b"%020d " % token + PAD


def _token(content: bytes) -> int:
    return int(bytes(content[:20]))


class Unavailable(Exception):
    """The design cannot run on this server (its extension is missing); the message says why."""


class _Design:
    table = ""
    #: schemas whose tables (with their indexes and TOAST) make up the design's footprint
    schemas: tuple[str, ...] = ()
    #: nap after an empty dequeue (seconds)
    idle_nap = 0.001
    #: PgQ delivers every event to every registered consumer: one consumer reads the batches
    single_consumer = False

    def prepare(self, conn: psycopg.Connection[Any]) -> str | None:
        """Install what the design needs in a fresh database; return its version (None: ours)."""
        return None

    def setup(self, conn: psycopg.Connection[Any], backlog: int) -> None:
        raise NotImplementedError

    def hold_table(self, conn: psycopg.Connection[Any]) -> str:
        """The queue table a REPEATABLE READ reader reads in hold case (c) (a trusted SQL name)."""
        return self.table

    def consume_many(self, conn: psycopg.Connection[Any]) -> list[int] | None:
        """Take and finish what one call of the design's API gives (see consume)."""
        token = self.consume(conn)
        return None if token is None else [token]

    def background(self, dsn: str, stop: _Event, errors: list[str]) -> list[threading.Thread]:
        """Threads the design needs beside producers and consumers (PgQ's ticker)."""
        return []

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
    schemas = ("pgqueue",)
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
    schemas = ("seed001",)
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


def _create_extension(conn: psycopg.Connection[Any], name: str) -> str:
    """CREATE EXTENSION name; its version, or Unavailable with the server's reason."""
    try:
        conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name)))
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Unavailable(f"CREATE EXTENSION {name} failed: {reason}") from exc
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = %s", [name]).fetchone()
    return str(row[0]) if row else "?"


class _Pgq(_Design):
    """PgQ (Debian's postgresql-15-pgq3) through its own API.

    Producers call pgq.insert_event; one consumer (PgQ gives every registered consumer every
    event, so consumers do not share work) loops next_batch / get_batch_events / finish_batch,
    each call in its own transaction; a background thread plays pgqd: pgq.ticker() every 100 ms
    and the maintenance operations pgq.maint_operations() lists every 5 s (table rotation with
    the queue's default period). Each event's ev_data is the message's text.
    """

    table = "pgq.event_template"
    schemas = ("pgq",)
    label = "PgQ (insert_event; next_batch / get_batch_events / finish_batch)"
    idle_nap = 0.02
    single_consumer = True

    def prepare(self, conn: psycopg.Connection[Any]) -> str | None:
        return _create_extension(conn, "pgq")

    def setup(self, conn: psycopg.Connection[Any], backlog: int) -> None:
        conn.execute("SELECT pgq.create_queue('churn')")
        conn.execute("SELECT pgq.register_consumer('churn', 'bench')")
        # The backlog in ticks of the queue's ticker_max_count, as pgqd's ticker cuts a stream of
        # events: one tick after the whole backlog made it one batch, which the consumer took
        # at once and then ran one tick behind the producers (a run measured them, not it).
        row = conn.execute("SELECT queue_ticker_max_count FROM pgq.queue WHERE queue_name = 'churn'").fetchone()
        step = max(1, int(row[0])) if row else 500
        for first in range(0, backlog, step):
            conn.execute("SELECT count(pgq.insert_event('churn', 'm', convert_from(convert_to(lpad(g::text, 20, '0') "
                         "|| ' ', 'UTF8') || %s::bytea, 'UTF8'))) FROM generate_series(%s::bigint, %s::bigint) g",
                         [PAD, first, min(first + step, backlog) - 1])
            conn.execute("SELECT pgq.force_tick('churn')")
            conn.execute("SELECT pgq.ticker('churn')")
        # the events live in the parent's child tables (rotated): VACUUM of the parent alone would
        # leave them without statistics until autovacuum comes round, and get_batch_events' plan
        # with them, so the whole (fresh, small) database is vacuumed and analyzed
        conn.execute("VACUUM (ANALYZE)")

    def hold_table(self, conn: psycopg.Connection[Any]) -> str:
        row = conn.execute("SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = 'churn'").fetchone()
        if row is None:
            raise RuntimeError("PgQ queue 'churn' not found")
        return str(row[0])  # the parent of the rotated event tables: a read covers all of them

    def produce(self, conn: psycopg.Connection[Any], content: bytes) -> None:
        conn.execute("SELECT pgq.insert_event('churn', 'm', %s)", [content.decode()], prepare=True)

    def consume_many(self, conn: psycopg.Connection[Any]) -> list[int] | None:
        row = conn.execute("SELECT pgq.next_batch('churn', 'bench')", prepare=True).fetchone()
        if row is None or row[0] is None:
            return None
        batch = row[0]
        tokens = [_token(r[0].encode()) for r in conn.execute(
            "SELECT ev_data FROM pgq.get_batch_events(%s)", [batch], prepare=True)]
        conn.execute("SELECT pgq.finish_batch(%s)", [batch], prepare=True)
        return tokens

    def remaining(self, conn: psycopg.Connection[Any]) -> list[int]:
        # the events the consumer has not finished: every producer has stopped, so one more
        # tick closes the last batch, and the consumer's own API reads what is left
        conn.execute("SELECT pgq.force_tick('churn')")
        conn.execute("SELECT pgq.ticker('churn')")
        out: list[int] = []
        while True:
            got = self.consume_many(conn)
            if got is None:
                return out
            out.extend(got)

    def background(self, dsn: str, stop: _Event, errors: list[str]) -> list[threading.Thread]:
        def ticker() -> None:
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    nxt_maint = time.perf_counter() + 5.0
                    while not stop.wait(0.1):
                        conn.execute("SELECT pgq.ticker()")
                        if time.perf_counter() >= nxt_maint:
                            nxt_maint += 5.0
                            for func, arg in conn.execute("SELECT func_name, func_arg FROM pgq.maint_operations()"
                                                          ).fetchall():
                                call = sql.SQL("SELECT {}({})").format(
                                    sql.Identifier(*str(func).split(".")),
                                    sql.SQL("") if arg is None else sql.Literal(arg))
                                for _ in range(10):  # "1 if it wants to be called again"
                                    again = conn.execute(call).fetchone()
                                    if not again or again[0] != 1:
                                        break
            except psycopg.Error as exc:  # a failed tick or maintenance call: the run reports it
                errors.append(f"PgQ ticker: {type(exc).__name__}: {exc}")
                stop.set()

        return [threading.Thread(target=ticker)]


class _PgmqPop(_Design):
    """pgmq (when the server has it: CREATE EXTENSION pgmq) through its own API: pgmq.send, and
    pgmq.pop (read and delete in one call). Each message is {"c": <the message's text>}."""

    table = "pgmq.q_churn"
    schemas = ("pgmq",)
    label = "pgmq (pop)"

    def prepare(self, conn: psycopg.Connection[Any]) -> str | None:
        return _create_extension(conn, "pgmq")

    def setup(self, conn: psycopg.Connection[Any], backlog: int) -> None:
        conn.execute("SELECT pgmq.create('churn')")
        conn.execute("SELECT count(*) FROM pgmq.send_batch('churn', ARRAY(SELECT jsonb_build_object('c', "
                     "convert_from(convert_to(lpad(g::text, 20, '0') || ' ', 'UTF8') || %s::bytea, 'UTF8')) "
                     "FROM generate_series(0, %s - 1) g))", [PAD, backlog])
        db.vacuum_analyze(conn, [self.table])

    def produce(self, conn: psycopg.Connection[Any], content: bytes) -> None:
        conn.execute("SELECT pgmq.send('churn', jsonb_build_object('c', %s::text))", [content.decode()], prepare=True)

    def consume(self, conn: psycopg.Connection[Any]) -> int | None:
        row = conn.execute("SELECT message->>'c' FROM pgmq.pop('churn')", prepare=True).fetchone()
        return None if row is None else _token(str(row[0]).encode())

    def remaining(self, conn: psycopg.Connection[Any]) -> list[int]:
        return [_token(str(r[0]).encode()) for r in conn.execute("SELECT message->>'c' FROM pgmq.q_churn")]


class _PgmqReadDelete(_PgmqPop):
    """pgmq's lease mode: pgmq.read with a 30 s visibility timeout, then pgmq.delete (two
    transactions per message, as pgqueue's lease + complete)."""

    label = "pgmq (read + delete)"

    def consume(self, conn: psycopg.Connection[Any]) -> int | None:
        row = conn.execute("SELECT msg_id, message->>'c' FROM pgmq.read('churn', 30, 1)", prepare=True).fetchone()
        if row is None:
            return None
        done = conn.execute("SELECT pgmq.delete('churn', %s::bigint)", [row[0]], prepare=True).fetchone()
        return _token(str(row[1]).encode()) if done and done[0] else -1


DESIGNS: dict[str, _Design] = {"pgqueue": _Pgqueue(), "pgqueue_naptime10": _PgqueueNaptime(), "seed001": _Seed001(),
                               "pgqueue_delete": _PgqueueDelete(), "pgq": _Pgq(), "pgmq_pop": _PgmqPop(),
                               "pgmq_read_delete": _PgmqReadDelete()}

#: The designs of the held-snapshot section, in the order they run.
HELD_DESIGNS = ["pgqueue_delete", "pgqueue", "seed001", "pgmq_pop", "pgmq_read_delete", "pgq"]

#: The three ways of holding the xmin horizon back (issue 12).
HOLD_CASES: dict[str, str] = {
    "a": "REPEATABLE READ session that read another table",
    "b": "idle in transaction with an xid (SELECT txid_current())",
    "c": "REPEATABLE READ session that read the queue's own table (keeps its ACCESS SHARE lock)",
    "0": "nothing held (the control: the same statistics over the same seconds of a run without a hold)",
}

#: Cases run only when asked for (``--held-cases``), not by default.
EXTRA_HOLD_CASES: dict[str, str] = {
    "r": "idle in transaction with an xid, ended by a ROLLBACK (as idle_in_transaction_session_timeout ends it)",
}


def _alter_naptime(conn: psycopg.Connection[Any], value: str | None, *, wait: bool = True) -> None:
    """ALTER SYSTEM SET autovacuum_naptime = value (RESET when None) and reload; after a SET (with
    wait), wait until this session sees the new value (the reload is asynchronous). A value given
    on the server's command line (the suite's own server's ``--set``) outranks ALTER SYSTEM: then
    nothing is written, and the error says why."""
    if value is not None and wait:
        row = conn.execute("SELECT source, setting, unit FROM pg_settings WHERE name = 'autovacuum_naptime'"
                           ).fetchone()
        if row and row[0] not in ("default", "configuration file"):
            raise RuntimeError(f"autovacuum_naptime is {row[1]}{row[2] or ''} from the server's {row[0]}, which "
                               f"ALTER SYSTEM cannot override: no run with autovacuum_naptime {value} here")
    if value is None:
        conn.execute("ALTER SYSTEM RESET autovacuum_naptime")
    else:
        conn.execute(sql.SQL("ALTER SYSTEM SET autovacuum_naptime = {}").format(sql.Literal(value)))
    conn.execute("SELECT pg_reload_conf()")
    for _ in range(50):
        if value is None or not wait or _naptime(conn) == value:
            return
        time.sleep(0.1)
    raise RuntimeError(f"autovacuum_naptime is {_naptime(conn)}, not {value}, after pg_reload_conf()")


def _naptime_before(conn: psycopg.Connection[Any]) -> str | None:
    """What ALTER SYSTEM had set autovacuum_naptime to before a run changes it (postgresql.auto.conf),
    to be set back afterwards; None when it had set nothing (RESET afterwards). A RESET in every
    case dropped a user's own ALTER SYSTEM value of a --dsn server.

    Raises RuntimeError, before anything is changed, when that cannot be put back: pg_file_settings
    is not readable (PostgreSQL 15 lets a role that is no superuser ALTER SYSTEM a setting it was
    granted, without pg_file_settings: a RESET afterwards dropped the owner's value), or the file's
    value is one ALTER SYSTEM refuses (an edit by hand: "setting could not be applied")."""
    try:
        row = conn.execute("SELECT setting, error FROM pg_file_settings WHERE name = 'autovacuum_naptime' "
                           "AND sourcefile LIKE '%postgresql.auto.conf' ORDER BY seqno DESC LIMIT 1").fetchone()
    except psycopg.Error as exc:
        raise RuntimeError(f"cannot read pg_file_settings ({str(exc).strip()}), so could not put back the "
                           "server's own autovacuum_naptime after the run: no run with it changed") from exc
    if row and row[1]:
        raise RuntimeError(f"postgresql.auto.conf sets autovacuum_naptime to {row[0]!r} ({row[1]}), which ALTER "
                           "SYSTEM could not put back after the run: no run with it changed")
    return str(row[0]) if row else None


def _naptime(conn: psycopg.Connection[Any]) -> str:
    return str(conn.execute("SHOW autovacuum_naptime").fetchone()[0])  # type: ignore[index]


def _design_bytes(conn: psycopg.Connection[Any], design: _Design) -> int:
    """pg_total_relation_size of every table of the design's schemas (indexes and TOAST included)."""
    row = conn.execute("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                       "JOIN pg_namespace n ON n.oid = c.relnamespace "
                       "WHERE n.nspname = ANY(%s) AND c.relkind IN ('r', 'p')", [list(design.schemas)]).fetchone()
    return int(row[0]) if row else 0


@contextmanager
def _maybe_twin(server: db.Server, design: _Design, design_name: str, backlog: int,
                twin: bool, twin_sql: str | None = None) -> Iterator[str | None]:
    """A second database set up like the run's own (the twin of _twin_analysis), or None. twin_sql
    (if any) runs in it once the design is installed, before its queue is filled: a build to
    compare, e.g. a function replaced (an A/B of two builds under the same machine noise)."""
    if not twin:
        yield None
        return
    with server.database(f"twin_{design_name}") as dbname:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
            design.prepare(conn)
            if twin_sql:
                conn.execute(twin_sql.encode())
            design.setup(conn, backlog)
        yield dbname


def run_churn(server: db.Server, design_name: str, *, seconds: int, window: int, producers: int,
              consumers: int, backlog: int, slack: int, hold: tuple[float, float] | None = None,
              hold_case: str | None = None, fault: str | None = None, log: Any = print,
              twin: bool = False, twin_sql: str | None = None) -> dict[str, Any]:
    """Run one churn; hold = (start, end) seconds into the run for the held-xmin variant, held the
    way hold_case says (a key of HOLD_CASES; None: a REPEATABLE READ snapshot of pgqueue.queue).
    twin: run the same design and load at the same time in a second database, which the hold
    does not hold back (see _twin_analysis); twin_sql: SQL run in the twin's database first.

    Raises Unavailable when the design's extension cannot be created on the server.
    """
    design = DESIGNS[design_name]
    naptime: str | None = getattr(design, "naptime", None)
    with server.database(f"churn_{design_name}") as dbname, _maybe_twin(server, design, design_name, backlog,
                                                                          twin, twin_sql) as twin_db:
        altered, restore = False, None
        try:  # from the ALTER SYSTEM on, whatever ends the run (an error, Ctrl-C, SIGTERM) puts it back
            with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
                version = design.prepare(conn)
                bytes_empty = _design_bytes(conn, design) if design.schemas else 0
                design.setup(conn, backlog)
                bytes_loaded = _design_bytes(conn, design) if design.schemas else 0
                main_table = design.hold_table(conn)
                if hold_case == "a":
                    conn.execute("CREATE TABLE bench_held_other AS SELECT g FROM generate_series(1, 100) g")
                if naptime:
                    restore = _naptime_before(conn)
                    altered = True
                    _alter_naptime(conn, naptime)
                in_effect = _naptime(conn)
            result = _run(server, dbname, design, design_name, seconds=seconds, window=window,
                          producers=producers, consumers=consumers, backlog=backlog, slack=slack, hold=hold,
                          hold_case=hold_case, main_table=main_table, fault=fault, log=log,
                          twin_dbname=twin_db)
        finally:
            if altered:
                with psycopg.connect(server.dsn(dbname), autocommit=True) as conn:
                    _alter_naptime(conn, restore, wait=False)
        result["autovacuum_naptime"] = in_effect
        if version:
            result["version"] = version
        if design.schemas:
            result["bytes_per_message"] = (bytes_loaded - bytes_empty) / backlog if backlog else None
        return result


class _Load:
    """Producer and consumer processes on one database: what they produced and finished, per second.

    Each producer and consumer is a process of its own (forked, with its own connection), so that
    the clients do not share one interpreter lock: with threads the control case's slowest 5-s
    window was about 0.85x its free-running rate with nothing held (docs/performance.md, "The held
    cases with C clients"), noise as large as the effects measured. The processes count into
    shared arrays (per second, and what each produced, finished and lost, which the producers'
    cap reads) and send their tokens back through a pipe at the end, for seed 002's check.
    """

    def __init__(self, server: db.Server, dbname: str, design: _Design, *, seconds: int, producers: int,
                 consumers: int, backlog: int, slack: int, fault: str | None, stop: _Event,
                 errors: list[str], name: str = "") -> None:
        self.dbname, self.design, self.backlog, self.cap = dbname, design, backlog, backlog + slack
        self.dsn = server.dsn(dbname, sync_off=True)
        self.stop, self.errors, self.name, self.fault = stop, errors, name, fault
        self.producers, self.consumers = producers, consumers
        self.slots = seconds + 5
        n = producers + consumers
        # per second, worker by worker (producers first); produced / finished / lost per worker
        self.bins = _MP.Array("q", n * self.slots, lock=False)
        self.counts = _MP.Array("q", n + consumers, lock=False)
        self.produced: list[array[int]] = [array("q") for _ in range(producers)]
        self.recorders = [Recorder(fault) for _ in range(consumers)]
        self.procs: list[Any] = []
        self.pipes: list[Any] = []
        self.t0 = 0.0

    def backlog_now(self) -> int:
        c, p, n = self.counts, self.producers, self.producers + self.consumers
        return int(self.backlog + sum(c[:p]) - sum(c[p:n]) - sum(c[n:]))

    def _connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.dsn, autocommit=True)
        time.sleep(max(0.0, self.t0 - time.perf_counter()))  # all start together
        return conn

    def _producer(self, i: int, out: Any) -> None:
        tokens, error = array("q"), None
        seq, base, row = 0, (i + 1) * TOKEN_BASE, i * self.slots
        try:
            with self._connect() as conn:
                while not self.stop.is_set():
                    if self.backlog_now() > self.cap:
                        time.sleep(0.001)
                        continue
                    token = base + seq
                    self.design.produce(conn, _content(token))
                    tokens.append(token)
                    self.counts[i] += 1
                    seq += 1
                    sec = int(time.perf_counter() - self.t0)
                    if 0 <= sec < self.slots:
                        self.bins[row + sec] += 1
        except Exception as exc:
            error = f"{self.name}producer {i}: {type(exc).__name__}: {exc}"
            self.stop.set()
        out.send((tokens.tobytes(), error))

    def _consumer(self, i: int, out: Any) -> None:
        rec, error = Recorder(self.fault), None
        k = self.producers + i
        row, lost = k * self.slots, self.producers + self.consumers + i
        try:
            with self._connect() as conn:
                while not self.stop.is_set():
                    tokens = self.design.consume_many(conn)
                    if tokens is None:
                        time.sleep(self.design.idle_nap)
                        continue
                    done = 0
                    for token in tokens:
                        if token < 0:
                            self.counts[lost] += 1
                        else:
                            rec.record(token)
                            done += 1
                    self.counts[k] += done
                    sec = int(time.perf_counter() - self.t0)
                    if 0 <= sec < self.slots:
                        self.bins[row + sec] += done
        except Exception as exc:
            error = f"{self.name}consumer {i}: {type(exc).__name__}: {exc}"
            self.stop.set()
        out.send((rec.items.tobytes(), error))

    def start(self) -> None:
        """Fork the producers and consumers; they connect and start at self.t0."""
        for target, n in ((self._producer, self.producers), (self._consumer, self.consumers)):
            for i in range(n):
                recv, send = _MP.Pipe(duplex=False)
                proc = _MP.Process(target=target, args=(i, send), daemon=True)
                proc.start()
                send.close()
                self.procs.append(proc)
                self.pipes.append(recv)

    def finish(self) -> None:
        """Collect what every process sent (after stop is set) and wait for them to exit."""
        for k, (proc, pipe) in enumerate(zip(self.procs, self.pipes)):
            try:
                data, error = pipe.recv()
            except EOFError:
                data, error = b"", f"{self.name}client process {k} ended with exit code {proc.exitcode}"
            proc.join()
            pipe.close()
            if error:
                self.errors.append(error)
            if k < self.producers:
                self.produced[k].frombytes(data)
            else:
                self.recorders[k - self.producers].items.frombytes(data)

    def check(self, server: db.Server) -> tuple[CheckResult, list[str]]:
        """Seed 002's check on this load, and the problems found (none: exactly once)."""
        with psycopg.connect(server.dsn(self.dbname), autocommit=True) as conn:
            remaining = self.design.remaining(conn)
        expected = list(range(self.backlog))
        for p in self.produced:
            expected.extend(p)
        check = exactly_once(expected, self.recorders, what="messages finished", remaining=remaining)
        problems = [] if check.ok else [self.name + check.summary()]
        lost = sum(self.counts[self.producers + self.consumers:])
        if lost:
            problems.append(f"{self.name}{lost} messages taken but not finished (lease lost)")
        return check, problems

    def per_second(self, seconds: int) -> tuple[list[int], list[int]]:
        b, s, p, n = self.bins, self.slots, self.producers, self.producers + self.consumers
        return ([sum(b[k * s + sec] for k in range(p, n)) for sec in range(seconds)],
                [sum(b[k * s + sec] for k in range(p)) for sec in range(seconds)])


def _run(server: db.Server, dbname: str, design: _Design, design_name: str, *, seconds: int, window: int,
         producers: int, consumers: int, backlog: int, slack: int, hold: tuple[float, float] | None,
         hold_case: str | None, main_table: str, fault: str | None, log: Any,
         twin_dbname: str | None = None) -> dict[str, Any]:
    stop = _MP.Event()  # shared with the client processes (and the threads of this one)
    errors: list[str] = []
    samples: list[dict[str, Any]] = []
    load = _Load(server, dbname, design, seconds=seconds, producers=producers, consumers=consumers,
                 backlog=backlog, slack=slack, fault=fault, stop=stop, errors=errors)
    twin = (_Load(server, twin_dbname, design, seconds=seconds, producers=producers, consumers=consumers,
                  backlog=backlog, slack=slack, fault=fault, stop=stop, errors=errors, name="twin ")
            if twin_dbname else None)
    t0 = time.perf_counter() + 1.0  # time for the client processes to fork and connect
    load.t0 = t0
    if twin:
        twin.t0 = t0
    backlog_now = load.backlog_now
    twin_backlog_now = twin.backlog_now if twin else None

    def monitor() -> None:
        try:
            _monitor()
        except Exception as exc:  # a thread's exception was printed and lost: the run reports it
            errors.append(f"monitor: {type(exc).__name__}: {exc}")
            stop.set()

    def _monitor() -> None:
        with psycopg.connect(server.dsn(dbname), autocommit=True) as mconn:
            version = int(mconn.execute("SHOW server_version_num").fetchone()[0])  # type: ignore[index]
            nxt = t0
            while not stop.is_set():
                nxt += 1.0
                time.sleep(max(0.0, nxt - time.perf_counter()))
                row = mconn.execute(
                    "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid), s.n_dead_tup, s.n_live_tup, "
                    "s.autovacuum_count, (SELECT greatest(max(age(backend_xmin)), max(age(backend_xid))) "
                    "FROM pg_stat_activity WHERE datname = current_database()), "
                    f"({checkpoints_sql(version)}), "
                    "EXISTS (SELECT FROM pg_stat_progress_vacuum v WHERE v.relid = c.oid), "
                    "(SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()) "
                    "FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid "
                    "WHERE c.oid = %s::regclass", [main_table]).fetchone()
                if row:
                    sample = {"t": round(time.perf_counter() - t0, 2), "total_bytes": row[0],
                              "heap_bytes": row[1], "dead": row[2], "live": row[3],
                              "autovacuums": row[4], "xmin_age": row[5], "checkpoints": row[6],
                              "vacuuming": row[7], "blocks": row[8], "backlog": backlog_now()}
                    if twin_backlog_now:  # the twin's too: a twin run dry gives its producers' rate
                        sample["twin_backlog"] = twin_backlog_now()
                    if design.schemas:
                        sample["design_bytes"] = _design_bytes(mconn, design)
                    samples.append(sample)

    holder_state: dict[str, Any] = {}

    def holder() -> None:
        try:
            _holder()
        except Exception as exc:  # the hold did not happen: a FAILURE, not a MISS on numbers without it
            errors.append(f"holder ({hold_case or 'held_xmin'}): {type(exc).__name__}: {exc}")
            stop.set()

    def _holder() -> None:
        assert hold is not None
        if stop.wait(max(0.0, t0 + hold[0] - time.perf_counter())):
            return
        if hold_case == "0":  # the control: the same seconds, nothing held
            holder_state["start"] = time.perf_counter() - t0
            stop.wait(max(0.0, t0 + hold[1] - time.perf_counter()))
            holder_state["end"] = time.perf_counter() - t0
            return
        with psycopg.connect(server.dsn(dbname)) as hconn:
            if hold_case in (None, "a", "c"):
                hconn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            if hold_case is None:
                hconn.execute("SELECT count(*) FROM pgqueue.queue")  # takes the snapshot
            elif hold_case == "a":
                hconn.execute("SELECT count(*) FROM bench_held_other")
            elif hold_case in ("b", "r"):
                hconn.execute("SELECT txid_current()")  # READ COMMITTED: no snapshot kept, an xid
            elif hold_case == "c":
                hconn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(main_table)))  # our own name
            else:
                raise ValueError(hold_case)
            holder_state["start"] = time.perf_counter() - t0
            stop.wait(max(0.0, t0 + hold[1] - time.perf_counter()))
            if hold_case == "r":
                hconn.rollback()
            else:
                hconn.commit()
            holder_state["end"] = time.perf_counter() - t0

    loads = [load] + ([twin] if twin else [])
    aux = [threading.Thread(target=monitor)] + design.background(server.dsn(dbname, sync_off=True), stop, errors)
    if twin_dbname:
        aux += design.background(server.dsn(twin_dbname, sync_off=True), stop, errors)
    if hold:
        aux.append(threading.Thread(target=holder))
    try:
        for ld in loads:
            ld.start()
        for t in aux:
            t.start()
        end = t0 + seconds
        while time.perf_counter() < end and not stop.is_set():
            time.sleep(min(1.0, max(0.0, end - time.perf_counter())))
    except BaseException:  # Ctrl-C, SIGTERM (bench.cli): the threads end at once, not at the run's planned end
        stop.set()
        raise
    stop.set()
    for ld in loads:
        ld.finish()
    for t in aux:
        t.join()
    check, problems = load.check(server)
    twin_check, twin_problems = twin.check(server) if twin else (None, [])
    problems += twin_problems + errors

    deq_s, enq_s = load.per_second(seconds)
    windows = [sum(deq_s[i * window:(i + 1) * window]) / window for i in range(seconds // window)]
    result: dict[str, Any] = {
        "design": design_name, "label": getattr(design, "label", design_name), "seconds": seconds,
        "window": window, "producers": producers, "consumers": consumers, "backlog": backlog, "cap": load.cap,
        "deq_per_s": deq_s, "enq_per_s": enq_s, "windows": windows, "samples": samples,
        "check": check.as_dict(), "ok": not problems, "problems": problems,
        "finished": sum(deq_s), "mean_rate": sum(deq_s) / seconds if seconds else 0,
    }
    if windows and max(windows) > 0:
        result["min_max_ratio"] = min(windows) / max(windows)
    backlogs = [s["backlog"] for s in samples]
    if backlogs and hold_case is None:  # (a held case looks at its hold's seconds: _held_backlog)
        # zero: consumers waited for the producers, and the rate was theirs from then on
        result["backlog_min"] = min(backlogs)
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
        if hold_case is None:
            result.update(_held_analysis(deq_s, holder_state, window))
        else:
            result["hold_case"] = hold_case
            smooth = min(5, max(1, int(hold[1] - hold[0])))
            result.update(_held_analysis(deq_s, holder_state, window, threshold=0.9, smooth=smooth))
            result.update(_held_growth(samples, enq_s, holder_state))
            result.update(_held_buffers(samples, holder_state))
            result.update(_held_backlog(samples, holder_state, backlog))
            if twin and twin_check:
                twin_deq, twin_enq = twin.per_second(seconds)
                result.update(twin_deq_per_s=twin_deq, twin_enq_per_s=twin_enq, twin_check=twin_check.as_dict())
                result.update(_twin_analysis(deq_s, twin_deq, holder_state, smooth=smooth))
                result.update(_held_backlog(samples, holder_state, backlog, key="twin_backlog", prefix="twin"))
        if result.get("held_error"):  # no hold, or no rate to hold it against: nothing to grade
            problems.append(result["held_error"])
            result["ok"] = False
    log(f"  churn {design_name}: {result['mean_rate']:,.0f} msg/s mean, windows "
        f"{min(windows or [0]):,.0f}..{max(windows or [0]):,.0f}/s, "
        + ("check OK" if not problems else "FAILURE: " + "; ".join(problems))
        + ("; THE BACKLOG RAN OUT (a larger backlog is needed)" if churn_dry(result) else ""))
    return result


def _held_analysis(deq_s: list[int], hold: dict[str, Any], window: int, *, threshold: float = 0.8,
                   smooth: int | None = None) -> dict[str, Any]:
    """Degradation during the held snapshot and recovery after it, from the per-second rates.

    Baseline: the median per-second rate before the hold (its first 5 s left out as warm-up).
    Slowest window: the lowest mean of `smooth` consecutive seconds inside the hold. Recovery:
    seconds from the end of the hold to the start of the first such window after it whose mean
    is at least threshold x the baseline.
    """
    if "start" not in hold or "end" not in hold:
        return {"held_error": "the snapshot was not held"}
    start, end = int(hold["start"]), int(hold["end"]) + 1
    baseline = _baseline(deq_s, start)
    if not baseline:  # at 0, every window after the hold was "back to 0.9x" of it at once: a PASS
        return {"held_error": f"no free-running rate before the hold (baseline {baseline}): nothing to "
                              "measure the hold against"}
    if smooth is None:
        smooth = 5 if window >= 5 else 1
    rolling = [sum(deq_s[i:i + smooth]) / smooth for i in range(len(deq_s) - smooth + 1)]
    during = rolling[start:max(start + 1, end - smooth + 1)]
    recovery = None
    for i in range(end, len(rolling)):
        if rolling[i] >= threshold * baseline:
            recovery = i - end
            break
    return {
        "held_smooth": smooth, "held_threshold": threshold,
        "held_baseline": baseline, "held_min": min(during) if during else None,
        "held_min_ratio": (min(during) / baseline) if during and baseline else None,
        "held_mean_ratio": (statistics.mean(deq_s[start:end]) / baseline) if baseline else None,
        "recovery_s": recovery, "after_s": len(deq_s) - end,
        # the seconds the "minute after" covers: fewer than 60 when the run ends sooner (quick: 39)
        "after_span_s": len(deq_s[end:end + 60]),
        "after_minute_ratio": (statistics.mean(deq_s[end:end + 60]) / baseline)
        if baseline and deq_s[end:end + 60] else None,
    }


def checkpoints_sql(server_version_num: int) -> str:
    """The server's checkpoints so far: PostgreSQL 17 moved them from pg_stat_bgwriter (whose
    columns it dropped, so the monitor's every query failed) to pg_stat_checkpointer."""
    if server_version_num >= 170000:
        return "SELECT num_timed + num_requested FROM pg_stat_checkpointer"
    return "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"


def _baseline(deq_s: list[int], start: int) -> float | None:
    """The free-running rate: the median per-second rate before the hold, its first 5 s left out
    as warm-up (all of it if it is shorter); None without a second before the hold."""
    before = deq_s[:start]
    if not before:
        return None
    return statistics.median(before[min(5, len(before) - 1):] or before)


def _twin_analysis(deq_s: list[int], twin_s: list[int], hold: dict[str, Any], *, smooth: int,
                   threshold: float = 0.9) -> dict[str, Any]:
    """The held run's rate against its twin's, second by second: the same design and load in
    another database of the same server, where the hold keeps nothing from vacuum (a transaction's
    snapshot holds back the horizon of its own database only) but the machine is the same. The
    twin shares the two cores, so a second in which the machine is slow is slow for both, and
    the ratio of the two rates shows what the hold does without the machine's own noise.

    Baseline: the two loads' ratio over the seconds before the hold (its first 5 s left out as
    warm-up). Slowest window: the lowest ratio of `smooth` consecutive seconds inside the hold
    (sums of both), over the baseline. Recovery: seconds from the end of the hold to the first
    such window at least threshold x the baseline.
    """
    if "start" not in hold or "end" not in hold:
        return {}
    start, end = int(hold["start"]), int(hold["end"]) + 1
    w0 = min(5, max(0, start - 1))  # the seconds _baseline uses
    if start <= w0 or not sum(twin_s[w0:start]):
        return {}
    base = sum(deq_s[w0:start]) / sum(twin_s[w0:start])
    if not base:
        return {}

    def ratio(i: int) -> float | None:
        t = sum(twin_s[i:i + smooth])
        return sum(deq_s[i:i + smooth]) / t / base if t else None

    during = [r for r in (ratio(i) for i in range(start, max(start + 1, end - smooth + 1))) if r is not None]
    recovery = None
    for i in range(end, len(deq_s) - smooth + 1):
        r = ratio(i)
        if r is not None and r >= threshold:
            recovery = i - end
            break
    twin_during = sum(twin_s[start:end])
    return {"twin_baseline": _baseline(twin_s, start), "twin_baseline_ratio": base, "twin_min_ratio": min(during) if during else None,
            "twin_mean_ratio": (sum(deq_s[start:end]) / twin_during / base) if twin_during else None,
            "twin_recovery_s": recovery}


def _held_growth(samples: list[dict[str, Any]], enq_s: list[int], hold: dict[str, Any]) -> dict[str, Any]:
    """The design's tables + indexes at the start and the end of the hold (the nearest samples of
    the once-a-second monitor) and the messages produced in between."""
    if "start" not in hold or "end" not in hold:
        return {}
    sized = [s for s in samples if "design_bytes" in s]
    if not sized:
        return {}
    start, end = float(hold["start"]), float(hold["end"])
    first = min(sized, key=lambda s: abs(s["t"] - start))
    last = min(sized, key=lambda s: abs(s["t"] - end))
    produced = sum(enq_s[int(first["t"]):int(last["t"])])
    return {"held_bytes_start": first["design_bytes"], "held_bytes_end": last["design_bytes"],
            "held_growth_bytes": last["design_bytes"] - first["design_bytes"], "held_produced": produced,
            "held_growth_window": [first["t"], last["t"]]}


#: A backlog under this share of the run's starting one counts as run out (held_backlog_dry)
DRY_SHARE = 0.02


def _held_backlog(samples: list[dict[str, Any]], hold: dict[str, Any], backlog: int, *, key: str = "backlog",
                  prefix: str = "held") -> dict[str, Any]:
    """The lowest backlog from the start of the hold to 5 s after it (the once-a-second monitor's
    count: produced less finished), and whether it ran out: reached zero, or fell under
    DRY_SHARE of the run's starting backlog. Then the consumers were waiting for the producers,
    and the rate measured theirs: the run's backlog was too small for its length, or (PgQ, whose
    one consumer reads batches of a tick's events) the consumer drew the backlog down faster than
    the producers fill it and then ran a tick or two behind them. The twin's (key twin_backlog,
    prefix twin) over the same seconds: a twin run dry has its producers' rate, which makes the
    held load's rate against it look better than it is."""
    if "start" not in hold or "end" not in hold:
        return {}
    seen = [s[key] for s in samples if key in s and hold["start"] <= s["t"] <= hold["end"] + 5]
    if not seen:
        return {}
    return {f"{prefix}_backlog_min": min(seen), f"{prefix}_backlog_dry": min(seen) <= DRY_SHARE * backlog}


def held_dry(r: dict[str, Any]) -> bool:
    """Whether a held run's backlog ran out (older runs' JSON has the minimum and the run's
    starting backlog, not the flag)."""
    if "held_backlog_dry" in r:
        return bool(r["held_backlog_dry"])
    low = r.get("held_backlog_min")
    if low is None:  # saved before the minimum was recorded: nothing says it ran out
        return False
    return bool(low <= 0 or low <= DRY_SHARE * r.get("backlog", 0))


def twin_dry(r: dict[str, Any]) -> bool:
    """Whether a held run's twin ran its backlog out (_held_backlog over the same seconds as the
    held load's; runs saved before the twin's backlog was sampled count as not run out)."""
    return bool(r.get("twin_backlog_dry"))


def churn_dry(r: dict[str, Any]) -> bool:
    """Whether a churn run (sections churn, held_xmin) ran its backlog out: its lowest backlog, of
    the once-a-second monitor's, reached zero or fell under DRY_SHARE of the starting one, as
    held_dry counts (between two samples a backlog of a few messages was gone: seed 001's smoke
    run sampled 2, 43, 2 of 500 while its consumers finished what the producers made). A run
    saved without the minimum counts as not run out."""
    if r.get("backlog_min") is None:
        return False
    return bool(r["backlog_min"] <= DRY_SHARE * r.get("backlog", 0))


def _held_buffers(samples: list[dict[str, Any]], hold: dict[str, Any]) -> dict[str, Any]:
    """The database's buffer accesses (blks_hit + blks_read) per second, from the once-a-second
    monitor: the median before the hold and the highest second during it. A second of several
    times the median is a walk over the hold's dead entries (docs/performance.md, "The 1-s
    stalls under a hold")."""
    if "start" not in hold or "end" not in hold:
        return {}
    rates = [(b["t"], (b["blocks"] - a["blocks"]) / (b["t"] - a["t"]))
             for a, b in zip(samples, samples[1:])
             if b["t"] > a["t"] and a.get("blocks") is not None and b.get("blocks") is not None]
    before = [r for t, r in rates if t <= hold["start"]]
    during = [r for t, r in rates if hold["start"] < t <= hold["end"] + 1]
    if not before or not during:
        return {}
    return {"held_blocks_before": statistics.median(before), "held_blocks_peak": max(during)}


def run_held(server: db.Server, *, before: int, hold: int, after: int, producers: int, consumers: int,
             backlog: int, slack: int, designs: list[str] | None = None, cases: list[str] | None = None,
             fault: str | None = None, log: Any = print, twin: bool = False,
             twin_sql: str | None = None) -> dict[str, Any]:
    """Issue 12's held-snapshot cases: for every design and case (keys of HOLD_CASES, default all),
    a churn of before + hold + after seconds (each in a fresh database) with the xmin horizon held
    back from `before` to `before + hold`; case "0" holds nothing, so that its statistics show
    what the same seconds give without a hold (how much of a slowest window is the run's own
    noise and drift).

    Every design runs with producers + consumers client sessions in all (PgQ: one consumer, the
    rest producers). A design whose extension is missing is reported with the reason, not run.
    """
    out: dict[str, Any] = {"before": before, "hold": hold, "after": after, "clients": producers + consumers,
                           "backlog": backlog, "slack": slack, "twin": twin,
                           "twin_sql": twin_sql,
                           "cases": {c: d for c, d in {**HOLD_CASES, **EXTRA_HOLD_CASES}.items()
                                     if (c in HOLD_CASES if cases is None else c in cases)},
                           "designs": {}}
    for name in designs or HELD_DESIGNS:
        design = DESIGNS[name]
        entry: dict[str, Any] = {"label": getattr(design, "label", name), "available": True, "runs": {}}
        out["designs"][name] = entry
        n_cons = 1 if design.single_consumer else consumers
        n_prod = producers + consumers - n_cons
        entry.update(producers=n_prod, consumers=n_cons)
        for case in out["cases"]:
            try:
                r = run_churn(server, name, seconds=before + hold + after, window=5, producers=n_prod,
                              consumers=n_cons, backlog=backlog, slack=slack, hold=(before, before + hold),
                              hold_case=case, fault=fault, log=log, twin=twin, twin_sql=twin_sql)
            except Unavailable as exc:
                entry.update(available=False, reason=str(exc))
                log(f"  held {name}: not available on this server: {exc}")
                break
            except Exception:  # this case failed (e.g. a peer's set-up, the --held-twin-sql file): the
                # others still run, and the runs done so far are kept (an exception here lost them all)
                tail = " | ".join(line.strip() for line in traceback.format_exc().strip().splitlines()[-3:])
                entry["runs"][case] = {"ok": False, "hold_case": case, "problems": [f"run failed: {tail}"]}
                if name not in ("pgqueue", "pgqueue_delete"):  # a peer: the report says its set-up failed
                    entry.setdefault("setup_failed", tail)
                log(f"  held {name} ({case}): FAILURE: {tail}")
                continue
            entry["runs"][case] = r
            if r.get("version"):
                entry["version"] = r["version"]
            log(f"  held {name} ({case}): baseline {r.get('held_baseline') or 0:,.0f}/s, slowest "
                f"{r.get('held_smooth')} s {r.get('held_min_ratio') or 0:.2f}x, recovery "
                f"{r.get('recovery_s')} s, growth {(r.get('held_growth_bytes') or 0) / 2**20:.1f} MiB for "
                f"{r.get('held_produced', 0):,} messages produced"
                + (f"; against its twin: slowest {r.get('twin_min_ratio') or 0:.2f}x, mean "
                   f"{r.get('twin_mean_ratio') or 0:.2f}x, recovery {r.get('twin_recovery_s')} s" if twin else "")
                + ("; THE BACKLOG RAN OUT (the producers' rate)" if held_dry(r) else "")
                + ("; THE TWIN'S BACKLOG RAN OUT (its producers' rate)" if twin_dry(r) else ""))
    return out
