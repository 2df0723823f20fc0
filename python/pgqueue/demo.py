"""``pgqueue demo``: producers and workers on a realistic mix of messages, then a report.

This is the first thing to run, and an example of the API to read. What happens:

1. Without ``--dsn`` (or ``PGQUEUE_DSN``) a throwaway PostgreSQL server is started and the
   extension is installed in it (``CREATE EXTENSION pgqueue``).
2. A queue is created with notifications on (idle workers wake up at once), a short lease
   (heartbeats keep it while a handler runs) and ``max_attempts=3`` (then dead letters).
3. Producer threads enqueue messages at a steady rate, like an application would::

       queue.enqueue(job, delay=1.5)        # scheduled
       queue.enqueue(job, priority=5)       # ahead of everything else

4. Workers run :func:`handle` on them, ``concurrency`` at a time each. In production each
   worker is a process of its own (``pgqueue worker DSN QUEUE module:function``); here they
   are threads so that one process can watch every outcome.
5. The report, of what this run measured: how fast the producers sent and how long the last
   messages took to settle after that, latency from due to completed, how long the slow
   handlers held their leases, retries, dead letters, and the check that every message was
   completed exactly once, or dead-lettered exactly once.

The queue is dropped at the end, and the throwaway server stopped and its directory deleted;
Ctrl-C does the same at any point (the exit status is then 130).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import random
import secrets
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TextIO

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout

from pgqueue import _connect, _core
from pgqueue._worker_core import _SIGNALS
from pgqueue.client import Queue
from pgqueue.compat import check_server, server_pgqueue
from pgqueue.errors import ConnectionFailed
from pgqueue.message import DeadLetter, Message, QueueStats
from pgqueue.worker import Result, Worker

__all__ = ["add_arguments", "run_demo", "run_from_args", "DemoOptions", "handle"]

# What the demo sends, with how often (weights out of 100). Every kind is handled by handle().
MIX: dict[str, int] = {
    "immediate": 62,  # deliver now
    "scheduled": 15,  # deliver in 0.5-2 s
    "priority": 10,  # jump the queue
    "flaky": 8,  # the handler fails on the first attempt, then succeeds (retry with back-off)
    "slow": 1,  # the handler takes longer than the lease: heartbeats must keep it
    "poison": 4,  # the handler always fails: dead-lettered after max_attempts
}

LEASE_MS = 1000  # short, so that "slow" messages need their heartbeats
MAX_ATTEMPTS = 3
RETRY_BASE_MS = 250  # first retry after 125-250 ms, the next after 250-500 ms
#: The seeds a run picks from when it is given none (said in its report: --seed N repeats it).
SEED_RANGE = 1_000_000


#: The most messages a run sends, and the lowest rate it takes (besides 0, as fast as possible).
MAX_MESSAGES = 10_000_000
MIN_RATE = 0.001
#: The most handlers a worker, and handlers in all (workers x concurrency): threads.
MAX_THREADS = 10_000
#: The most workers and producers: each holds connections (3 a worker, 1 a producer), and the
#: throwaway server is sized for them all (--workers 10000 asked it for 30,000 and more, a review).
MAX_WORKERS = 200
MAX_PRODUCERS = 100
#: The range of each whole-number option, and what it is, for the command line's checks and
#: :class:`DemoOptions`' alike (run_demo(DemoOptions(workers=10000)) went unchecked, a review).
LIMITS: dict[str, tuple[int, int, str]] = {
    "messages": (1, MAX_MESSAGES, f"a number of messages from 1 to {MAX_MESSAGES:,}"),
    "producers": (1, MAX_PRODUCERS, f"a number of producers from 1 to {MAX_PRODUCERS}"),
    "workers": (1, MAX_WORKERS, f"a number of workers from 1 to {MAX_WORKERS}"),
    "concurrency": (1, MAX_THREADS, f"a positive integer up to {MAX_THREADS:,}"),
    "dashboard": (0, 65535, "a port number 0-65535"),
}
RATE_TEXT = f"0 (as fast as they can) or a rate of at least {MIN_RATE:g} msg/s"


def _rate_ok(rate: float) -> bool:
    return rate == 0 or MIN_RATE <= rate < float("inf")


@dataclass(frozen=True)
class DemoOptions:
    """The knobs of the demo (the command-line options of ``pgqueue demo``), within the same
    limits (:data:`LIMITS`): ValueError otherwise, TypeError for a value of the wrong type."""

    messages: int = 4000
    rate: float = 400.0  # messages per second, all producers together; 0 = as fast as possible
    producers: int = 2
    workers: int = 3
    concurrency: int = 8
    dsn: str | None = None
    seed: int | None = None
    progress: bool | None = None  # a progress bar; None = if the output is a terminal
    dashboard: int | None = None  # serve `pgqueue dashboard` on this port while the demo runs

    def __post_init__(self) -> None:
        for name, (low, high, what) in LIMITS.items():
            value = getattr(self, name)
            if value is None and name == "dashboard":
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"DemoOptions.{name}: expected {what}, got {value!r}")
            if not low <= value <= high:
                raise ValueError(f"DemoOptions.{name}: expected {what}, got {value!r}")
        if not isinstance(self.rate, (int, float)) or isinstance(self.rate, bool):
            raise TypeError(f"DemoOptions.rate: expected {RATE_TEXT}, got {self.rate!r}")
        if not _rate_ok(self.rate):
            raise ValueError(f"DemoOptions.rate: expected {RATE_TEXT}, got {self.rate!r}")
        if self.workers * self.concurrency > MAX_THREADS:
            raise ValueError(f"DemoOptions: workers {self.workers:,} x concurrency {self.concurrency:,} is "
                             f"{self.workers * self.concurrency:,} handler threads, more than {MAX_THREADS:,}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise TypeError(f"DemoOptions.seed: expected an integer or None, got {self.seed!r}")


# -----------------------------------------------------------------------------------------
# The handler: what a worker runs for each message
# -----------------------------------------------------------------------------------------


class TransientError(Exception):
    """A failure worth retrying (a flaky downstream service)."""


class PoisonMessage(Exception):
    """A message that can never be processed."""


def handle(msg: Message) -> None:
    """Process one demo job: pretend to work for a while, and fail where the job says so.

    Returning completes the message; raising fails it, and the queue retries it after a
    back-off or, after ``max_attempts``, moves it to the dead letters.
    """
    job: dict[str, Any] = msg.payload  # type: ignore[assignment]  # the demo enqueues dicts
    time.sleep(job["work_ms"] / 1000)
    if job["kind"] == "poison":
        raise PoisonMessage(f"job {job['n']} cannot be processed")
    if job["kind"] == "flaky" and msg.attempts == 1:
        raise TransientError(f"job {job['n']}: downstream service unavailable, try again")


# -----------------------------------------------------------------------------------------
# The producers
# -----------------------------------------------------------------------------------------


def make_jobs(count: int, rng: random.Random) -> list[dict[str, Any]]:
    """Return ``count`` demo jobs (the message payloads, less their due time)."""
    kinds = rng.choices(list(MIX), weights=list(MIX.values()), k=count)
    jobs = []
    for n, kind in enumerate(kinds):
        work_ms = rng.uniform(1500, 2500) if kind == "slow" else min(rng.expovariate(1 / 4), 40)
        job: dict[str, Any] = {"n": n, "kind": kind, "work_ms": round(work_ms, 2)}
        if kind == "scheduled":
            job["delay"] = round(rng.uniform(0.5, 2.0), 3)
        if kind == "priority":
            job["priority"] = rng.randint(0, 9)
        jobs.append(job)
    return jobs


def produce(queue: Queue, jobs: Sequence[dict[str, Any]], start: float, rate: float,
            tally: Tally, stop: threading.Event) -> None:
    """Enqueue jobs at their turn of a steady ``rate`` (messages/s), recording their ids."""
    for job in jobs:
        if stop.is_set():
            return
        if rate > 0:
            turn = start + job["n"] / rate
            # in steps of an hour at most: Event.wait raises OverflowError past threading.TIMEOUT_MAX
            while not stop.is_set() and turn > time.monotonic():
                stop.wait(min(turn - time.monotonic(), 3600.0))
            if stop.is_set():
                return
        delay = job.get("delay")
        # When the message is due: the clock its end-to-end latency is measured from.
        payload = {**job, "due": time.time() + (delay or 0)}
        msg_id = queue.enqueue(payload, delay=delay, priority=job.get("priority"))
        tally.enqueued(msg_id, job["kind"])


# -----------------------------------------------------------------------------------------
# Keeping score
# -----------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Everything the producers and workers report, for the progress bar and the check."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    kinds: dict[int, str] = field(default_factory=dict)  # message id -> kind, once enqueued
    completed: Counter[int] = field(default_factory=Counter)  # id -> completes the DB accepted
    dead: Counter[int] = field(default_factory=Counter)  # id -> times dead-lettered
    stale: int = 0  # acknowledgements refused: the lease had been lost
    retries: int = 0
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    durations: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # handler run times
    peak_ready: int = 0  # the most messages ready and waiting at once, sampled twice a second
    first_enqueue: float | None = None
    last_enqueue: float | None = None
    last_settle: float | None = None
    #: When the wait for the last messages gave up on them (seconds from the start), else None
    #: (:data:`GIVE_UP_AFTER_S`).
    gave_up_after: float | None = None

    def enqueued(self, msg_id: int, kind: str) -> None:
        with self.lock:
            self.kinds[msg_id] = kind
            self.last_enqueue = time.monotonic()
            if self.first_enqueue is None:
                self.first_enqueue = self.last_enqueue

    def record(self, result: Result) -> None:
        """The workers' ``on_result`` hook: called once per delivery of a message."""
        msg = result.message
        now = time.time()
        with self.lock:
            if not result.acknowledged:
                self.stale += 1
            elif result.outcome == "completed":
                self.completed[msg.id] += 1
                job: dict[str, Any] = msg.payload  # type: ignore[assignment]
                self.latency[job["kind"]].append(now - job["due"])
                self.durations[job["kind"]].append(result.duration)
            elif result.outcome == "retried":
                self.retries += 1
            elif result.outcome == "dead":
                self.dead[msg.id] += 1
            if result.acknowledged and result.outcome in ("completed", "dead"):
                self.last_settle = time.monotonic()

    @property
    def settled(self) -> int:
        """Messages that reached an end: completed or dead-lettered."""
        with self.lock:
            return sum(self.completed.values()) + sum(self.dead.values())


# -----------------------------------------------------------------------------------------
# The run
# -----------------------------------------------------------------------------------------


#: The connections a :class:`Worker` holds while it runs: its loop's, its heartbeats' and its
#: LISTEN's (measured: its start-up check's is closed before the loop opens its own).
WORKER_CONNECTIONS = 3
#: The dashboard's (--dashboard): its pool's 4, its sampler's and a check's.
DASHBOARD_CONNECTIONS = 6
#: Slots the throwaway server has beyond what the demo needs (psql, a worker reconnecting).
CONNECTION_MARGIN = 20


def _connection_parts(options: DemoOptions) -> list[tuple[int, str]]:
    """The connections the demo holds at once, each part with what it is for: the workers',
    the producers' pool, its own (creating, checking and dropping the queue) and the dashboard's."""
    parts = [(options.workers * WORKER_CONNECTIONS, f"for {_count(options.workers, 'worker')}"),
             (options.producers, f"for {_count(options.producers, 'producer')}"),
             (1, "its own")]
    if options.dashboard is not None:
        parts.append((DASHBOARD_CONNECTIONS, "the dashboard's"))
    return parts


def connections_needed(options: DemoOptions) -> int:
    """Return how many connections the demo holds at once (:func:`_connection_parts`)."""
    return sum(n for n, _what in _connection_parts(options))


def _count(n: int, thing: str, things: str | None = None) -> str:
    """Return "1 thing" or "N things" (it printed "1 messages", "1 producers", a review)."""
    return f"{n:,} {thing if n == 1 else things or thing + 's'}"


@contextmanager
def database(dsn: str | None, out: TextIO, connections: Sequence[tuple[int, str]] = ()) -> Iterator[str]:
    """Yield the DSN of a database with the extension: ``dsn``, or a throwaway server's with
    room for ``connections`` (:func:`_connection_parts`; its max_connections: `--workers 100`
    ran out of the 200 it had, and the workers that could not connect were seen only as slow
    heartbeats, a review)."""
    if dsn is not None:
        _install_extension(dsn, out, connections)
        yield dsn
        return
    from pgqueue.cli import UserError, _one_line
    from pgqueue.embedded import FAST_SETTINGS, EmbeddedPostgres, EmbeddedUnavailable, check_available

    own = "or run the demo on your own database with --dsn DSN"
    try:
        check_available()
    except EmbeddedUnavailable as exc:
        raise UserError(f"{exc}; {own}") from exc
    print(f"Starting a throwaway PostgreSQL server in a temporary directory under {tempfile.gettempdir()} "
          "(use --dsn or PGQUEUE_DSN for your own)...", file=out, flush=True)
    slots = max(int(FAST_SETTINGS["max_connections"]), sum(n for n, _what in connections) + CONNECTION_MARGIN)
    server = EmbeddedPostgres(settings={"max_connections": str(slots)})
    try:
        server.start()
    except RuntimeError as exc:  # no initdb on this machine, or it failed
        if _disk_full(exc):
            raise UserError(_disk_full_text(own)) from exc
        raise UserError(f"cannot start a throwaway PostgreSQL: {_one_line(str(exc))}; {own}") from exc
    except KeyboardInterrupt:
        # Ctrl-C (SIGTERM, SIGHUP) during the start, which stopped what it had started and
        # deleted the directory: say so, as after a run (it said only "Interrupted.": a review)
        left = server.left
        if left is None:
            print("Stopped the throwaway server's start and deleted its directory.", file=out, flush=True)
        else:
            print(f"Could not delete the throwaway server's directory: {left} left behind.", file=out, flush=True)
        raise
    base_dir = server.base_dir
    try:
        with server as pg:
            _install_extension(pg.dsn(), out)
            yield pg.dsn()
    except Exception as exc:
        if _disk_full(exc):
            raise UserError(_disk_full_text(own)) from exc
        raise
    finally:
        # On Ctrl-C too: the server is stopped and its directory deleted all the same (a second
        # Ctrl-C is acted on after that: EmbeddedPostgres.stop). Stopped here again (a no-op
        # once stopped) in case a signal ended the with's exit before its stop began.
        try:
            server.stop()
        finally:
            left = server.left
            if left is None:
                print(f"Stopped the throwaway server and deleted {base_dir}.", file=out, flush=True)
            else:
                # quoted for the shell: under a $TMPDIR with a space, "rm -rf /tmp/my tmp/pgqueue-..."
                # run as printed, deletes /tmp/my, not the directory (a review)
                print(f"Could not delete the throwaway server's directory: {left} left behind "
                      f"(rm -rf {shlex.quote(base_dir)} deletes it).", file=out, flush=True)


#: What the throwaway server needs in the temporary directory: the cluster from initdb and its
#: WAL; measured on a tmpfs, a run of 4,000 or 10,000 messages peaked at 70 MB, 30,000 at 100 MB.
THROWAWAY_DISK_MB = 100


def _disk_full(exc: BaseException) -> bool:
    """Tell whether exc (or what it wraps) is the server running out of disk space."""
    while exc is not None:
        if getattr(exc, "sqlstate", None) == "53100" or "No space left on device" in str(exc):
            return True
        exc = exc.__cause__  # type: ignore[assignment]
    return False


def _disk_full_text(own: str) -> str:
    return (f"the throwaway PostgreSQL ran out of disk space in {tempfile.gettempdir()} (it needs about "
            f"{THROWAWAY_DISK_MB} MB there, more for runs of many more messages): set TMPDIR to a directory with more room, {own}")


def _install_extension(dsn: str, out: TextIO, connections: Sequence[tuple[int, str]] = ()) -> None:
    """Install pgqueue in a database that has none, as `pgqueue install` does: the extension
    when the server has its files, else the plain SQL install (a managed PostgreSQL, where no
    files can be placed: the demo asked for `make install` there), and say so; and say when
    the server has fewer free connections than the demo needs (:func:`_check_connections`)."""
    from pgqueue import installer
    from pgqueue.cli import UserError, _one_line, connect

    # (the commands' connect: a 10 s connect_timeout unless the DSN or $PGCONNECT_TIMEOUT sets one,
    # where a server that accepted the connection and never answered kept the demo waiting for ever)
    with connect(dsn, check=False) as conn:
        if server_pgqueue(conn) is None:
            try:
                installer.install(conn, report=lambda line: print(f"{line}.", file=out))
            except installer.InstallError as exc:
                raise UserError(str(exc)) from exc
            except psycopg.errors.InsufficientPrivilege as exc:
                raise UserError(f"{_one_line(exc.diag.message_primary or str(exc))}: connect as a role with "
                                "CREATE on the database (its owner, say) for the demo to install pgqueue there, "
                                "or install it first with `pgqueue install`") from exc
        check_server(conn)
        _check_connections(conn, connections, out)


def _check_connections(conn: psycopg.Connection[Any], connections: Sequence[tuple[int, str]], out: TextIO) -> None:
    """Say so up front when the server (--dsn: its limit is the user's, not the demo's) has
    fewer connections free than the demo needs (``connections``: :func:`_connection_parts`):
    the workers that cannot connect wait and try again, and the run shows it only as slow
    progress (the report counts the failures)."""
    needed = sum(n for n, _what in connections)
    # (PostgreSQL 16's reserved_connections keeps slots for the members of
    # pg_use_reserved_connections: a role that is neither that nor a superuser cannot use them
    # either; NULL on older servers, which have neither)
    row = conn.execute(
        "SELECT current_setting('max_connections')::int, current_setting('superuser_reserved_connections')::int, "
        "coalesce(current_setting('reserved_connections', true)::int, 0), "
        "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int, "
        "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user), "
        "CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = 'pg_use_reserved_connections') "
        "THEN pg_has_role('pg_use_reserved_connections', 'member') ELSE false END").fetchone()
    conn.rollback()
    if row is None:
        return
    limit, reserved, kept, used, superuser, may_use_kept = row
    if superuser:
        reserved = kept = 0
    elif may_use_kept:
        kept = 0
    free = limit - used - reserved - kept + 1  # + this connection, closed before the run
    if needed > free:
        # each part with its count, the dashboard's included (they did not add up to the total, a review)
        parts = ", ".join(f"{n:,} {what}" for n, what in connections)
        print(f"Warning: the demo needs about {needed:,} connections to the database ({parts}; {WORKER_CONNECTIONS} "
              f"a worker) and the server has {max(free, 0):,} free (max_connections {limit:,}, "
              f"{used:,} in use): workers that cannot connect wait and retry. Lower --workers or "
              "--producers, or raise the server's max_connections.", file=out, flush=True)


def run_demo(options: DemoOptions, out: TextIO | None = None) -> int:
    """Run the demo and print its report; return 0 if every message was accounted for, else 1."""
    out = out or sys.stdout
    # What --dashboard needs, and its port, before anything is started: without Flask it was
    # refused once the throwaway server had been started and stopped for nothing (a review).
    _dashboard_module(options.dashboard)
    _check_port(options.dashboard)
    if options.seed is None:
        # A seed of its own, said in the report, so that a run that failed can be repeated with
        # the same mix: without --seed it was never said, and could not be (a review).
        options = replace(options, seed=secrets.randbelow(SEED_RANGE))
    jobs = make_jobs(options.messages, random.Random(options.seed))
    # The workers log every failure; the flaky and poison jobs fail on purpose and the
    # report counts them, so keep the screen for the progress bar: their warnings go to
    # `trouble`, which keeps those about the database (connections failing) for the report.
    # psycopg (and the producers' pool) warns of each connection lost, as all are at once when
    # Ctrl-C stops the throwaway server.
    trouble = _Trouble()
    workers_log, psycopg_log = logging.getLogger("pgqueue"), logging.getLogger("psycopg")
    saved = workers_log.level, workers_log.propagate, psycopg_log.level
    workers_log.setLevel(logging.WARNING)
    workers_log.propagate = False
    workers_log.addHandler(trouble)
    psycopg_log.setLevel(logging.ERROR)
    try:
        with _Sigint() as sigint:
            try:
                with database(options.dsn, out, _connection_parts(options)) as dsn, \
                        Queue(dsn, f"demo_{os.getpid()}_{secrets.token_hex(3)}") as queue, \
                        dashboard(dsn, options.dashboard, out):
                    # The create too: a Ctrl-C as it returned left the queue behind (--dsn).
                    created = False
                    try:
                        queue.create(lock_ms=LEASE_MS, max_attempts=MAX_ATTEMPTS, retry_base_ms=RETRY_BASE_MS,
                                     retry_cap_ms=4 * RETRY_BASE_MS, notify=True)
                        created = True
                        tally, elapsed = run_workload(queue, dsn, jobs, options, out, sigint)
                        status = report(queue, jobs, tally, elapsed, options, out, trouble)
                        if options.dashboard is not None:
                            _linger(out)
                    except BaseException as exc:
                        if created or isinstance(exc, KeyboardInterrupt):  # (a create refused made nothing)
                            _drop(queue, options.dsn, out, sigint, stopping=True)
                        raise
                    _drop(queue, options.dsn, out, sigint)
                    return status
            except _Interrupted:  # said so already
                raise
            except (Exception, KeyboardInterrupt) as exc:
                if not isinstance(exc, KeyboardInterrupt) and not sigint.seen:
                    raise
                print("Interrupted.", file=out, flush=True)
                raise KeyboardInterrupt from exc
    finally:
        workers_log.removeHandler(trouble)
        workers_log.setLevel(saved[0])
        workers_log.propagate = saved[1]
        psycopg_log.setLevel(saved[2])


class _Trouble(logging.Handler):
    """Keep the workers' warnings about the database (a connection refused or lost: the server
    out of connection slots, say) for the report, which says how many and the first; drop those
    about a message (the flaky and poison jobs fail on purpose, and the report counts them).
    Errors are passed on to the root logger, as they were shown before."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            logging.getLogger().handle(record)
        text = record.getMessage()
        if text.startswith("message ") or record.levelno >= logging.ERROR:
            return
        self.count += 1
        if self.first is None:  # less the worker's note on how it logs the retries
            self.first = text.splitlines()[0].split(" (until it works again")[0] if text else text


class _Interrupted(KeyboardInterrupt):
    """A Ctrl-C whose report is printed already."""


class _Sigint:
    """Remember a Ctrl-C (SIGINT) on the main thread, which raises KeyboardInterrupt as usual;
    SIGTERM and SIGHUP do the same, so that `kill`, `timeout` or a closed terminal stop the demo
    as Ctrl-C does, its throwaway server included (by default they ended the process at once and
    left the server running).

    The throwaway server and its initdb run in sessions of their own (pgqueue.embedded), so a
    Ctrl-C on the terminal does not reach them; should an error from their end (initdb killed,
    a connection terminated) reach the main thread before the KeyboardInterrupt, the demo
    reports the Ctrl-C all the same.
    """

    SIGNALS = _SIGNALS  # SIGINT, SIGTERM and SIGHUP where there is one (not on Windows)

    def __init__(self) -> None:
        self.seen = False
        self.held = 0  # the signals held while the workers stopped (run_workload): _drop counts them
        self._previous: dict[int, Any] = {}
        self._on_hold: Callable[[], None] | None = None

    def __enter__(self) -> _Sigint:
        if threading.current_thread() is threading.main_thread():  # signal handlers live there
            for sig in self.SIGNALS:
                if signal.getsignal(sig) is signal.SIG_IGN:  # nohup, or `cmd &` in a script: stays so
                    continue
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.seen = True
        if self._on_hold is not None:
            self._on_hold()  # (which may raise KeyboardInterrupt all the same)
            return
        raise KeyboardInterrupt

    @contextmanager
    def holding(self, on_signal: Callable[[], None]) -> Iterator[None]:
        """For the block, a signal calls ``on_signal`` instead of raising KeyboardInterrupt
        (on the main thread, where the handlers are; elsewhere nothing is held)."""
        previous, self._on_hold = self._on_hold, on_signal
        try:
            yield
        finally:
            self._on_hold = previous

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def _drop(queue: Queue, dsn: str | None, out: TextIO, sigint: _Sigint, stopping: bool = False) -> None:
    """Drop the demo's queue, with its messages and dead letters, and say so.

    With ``dsn`` (--dsn: the user's database) a Ctrl-C (SIGTERM, SIGHUP) during the drop is
    held until it is done, and acted on then unless the demo is ``stopping`` already: a second
    Ctrl-C there cancelled the drop and left the queue behind, unsaid (a review). Another one
    gives up the drop (it waits for the work in flight on its lock stripe, other queues' too),
    and the demo says how to drop the queue, as it does whenever the drop fails.
    """
    if dsn is None:
        try:
            dropped = queue.drop()
        except (psycopg.OperationalError, ConnectionFailed):
            # the throwaway server is gone (stopped by a signal of its own, or it failed): the
            # queue goes with the server's directory
            return
        if dropped:
            print(f"Dropped queue {queue.name}.", file=out, flush=True)
        return
    held = sigint.held if stopping else 0  # (a Ctrl-C held while the workers stopped is the second)

    def on_signal() -> None:
        nonlocal held
        held += 1
        if held > 1:
            raise KeyboardInterrupt
        print(f"Dropping queue {queue.name} first (Ctrl-C again leaves it behind)...", file=out, flush=True)

    try:
        with sigint.holding(on_signal):
            dropped = queue.drop()
    except BaseException as exc:
        from pgqueue.cli import _one_line

        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else _one_line(str(exc)) or type(exc).__name__
        print(f"Could not drop queue {queue.name} ({why}): it is left behind, with its messages and dead letters; "
              f"{_drop_command(dsn, queue.name)} drops it.", file=out, flush=True)
        if isinstance(exc, KeyboardInterrupt):
            raise _Interrupted from exc  # said so
        raise
    if dropped:  # (not, when a Ctrl-C came before it was created)
        print(f"Dropped queue {queue.name}.", file=out, flush=True)
    if held and not stopping:
        raise KeyboardInterrupt


def _drop_command(dsn: str, name: str) -> str:
    """The command that drops queue ``name`` of the database at ``dsn``, its password left out."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:  # (it connected with it: not expected)
        return f"`pgqueue queue drop --dsn DSN {shlex.quote(name)}`"
    password = params.pop("password", None)
    command = f"`pgqueue queue drop --dsn {shlex.quote(make_conninfo('', **params))} {shlex.quote(name)}`"
    return command + (" (with the DSN's password, left out here)" if password else "")


@contextmanager
def dashboard(dsn: str, port: int | None, out: TextIO) -> Iterator[None]:
    """Serve ``pgqueue dashboard`` on ``port`` (127.0.0.1) for the block, if a port is given."""
    if port is None:
        yield
        return
    from pgqueue.cli import UserError

    served = _dashboard_module(port)
    try:
        server = served.start(served.Options(dsn=dsn, sample_interval=1.0), port=port)
    except OSError as exc:
        raise UserError(_port_text(port, exc)) from exc
    print(f"Dashboard: {server.url} (sampled every second)", file=out, flush=True)
    try:
        yield
    finally:
        server.stop()


def _dashboard_module(port: int | None) -> Any:
    """Return :mod:`pgqueue.dashboard` if ``port`` asks for the dashboard (else None); refuse
    --dashboard where it cannot be imported (Flask, the ``dashboard`` extra, is missing)."""
    if port is None:
        return None
    from pgqueue.cli import UserError

    try:
        import pgqueue.dashboard
    except ImportError as exc:
        raise UserError(f"--dashboard needs Flask ({exc}), the pgqueue-sql[dashboard] extra: pip install 'flask>=3.0,<4' "
                        "(from a clone of pgqueue: pip install './python[dashboard]')") from exc
    return pgqueue.dashboard


def _check_port(port: int | None) -> None:
    """Refuse a --dashboard port that is taken, before anything is started.

    Werkzeug, on a port in use, prints two lines of its own and exits, so that the error
    would not be ours; the dashboard listens the same way (SO_REUSEADDR) a moment later.
    """
    if not port:  # none, or 0: any free port
        return
    from pgqueue.cli import UserError

    try:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))
    except OSError as exc:
        raise UserError(_port_text(port, exc)) from exc


def _port_text(port: int, exc: OSError) -> str:
    return (f"--dashboard: cannot listen on 127.0.0.1:{port}: {exc.strerror or exc} "
            "(another program has it? pick another port: --dashboard PORT)")


def _linger(out: TextIO) -> None:
    """Keep the dashboard (and the queue, with its dead letters) until Ctrl-C."""
    try:  # the print too: a Ctrl-C as soon as the line shows is the expected end
        print("\nThe dashboard stays up, with the demo's queue and its dead letters: Ctrl-C to stop.",
              file=out, flush=True)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print(file=out)


class _Threads:
    """Threads whose exceptions are kept, to be raised on the main thread."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def start(self, name: str, target: Callable[[], object]) -> None:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                self.errors.append(exc)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def check(self) -> None:
        if self.errors:
            raise self.errors[0]

    def join(self) -> None:
        for thread in self.threads:
            thread.join()


#: How long the producers' connections may take to open (a module constant, for the tests).
PRODUCERS_CONNECT_S = 30.0

#: How long the wait for the last messages goes on with nothing sent, completed or
#: dead-lettered (once the producers' schedule is over) before it gives up on them: the slowest
#: job takes 2.5 s, a retry 0.75 s more. A module constant so that tests can shorten it.
GIVE_UP_AFTER_S = 60.0


def run_workload(queue: Queue, dsn: str, jobs: list[dict[str, Any]], options: DemoOptions,
                 out: TextIO, sigint: _Sigint | None = None) -> tuple[Tally, float]:
    """Run the producers and workers until every job is done; return the tally and the time taken.
    Interrupted, it stops them with the signals held (``sigint``), as README promises a second
    Ctrl-C: one raised in the workers' join, which left them running while the queue was dropped
    and used up a press of the drop's count (a review)."""
    tally = Tally()
    if options.rate > 0:
        # the sending, then the slowest job (2.5 s) after a retry or two (0.75 s of back-off)
        rate, took = f"at {options.rate:g} msg/s", f"about {len(jobs) / options.rate + 4:,.0f} s"
    else:
        rate = "as fast as it can" if options.producers == 1 else "as fast as they can"
        took = "a few seconds a thousand messages"
    send = "sends" if options.producers == 1 else "send"
    process = "processes" if options.workers * options.concurrency == 1 else "process"
    print(f"Queue {queue.name}: {_count(options.producers, 'producer')} {send} {_count(len(jobs), 'message')} {rate}; "
          f"{_count(options.workers, 'worker')} x {_count(options.concurrency, 'handler')} {process} them ({took}; Ctrl-C stops "
          "and cleans up).", file=out, flush=True)

    # Each worker has a Queue of its own (and opens its own connections from its DSN).
    workers = [Worker(Queue(dsn, queue.name), handle, concurrency=options.concurrency,
                      on_result=tally.record, shutdown_grace=5.0)
               for _ in range(options.workers)]
    # The producers share a pool: each enqueue borrows a connection and commits.
    pool: ConnectionPool[Any] = ConnectionPool(dsn, min_size=options.producers, kwargs=_core.utf8(dsn),
                                               configure=_connect.fit_for_pooler,  # (as pgqueue._connect)
                                               max_size=options.producers, open=True)
    producer_queue = Queue(pool, queue.name)
    stop_producing = threading.Event()
    worker_threads, producer_threads = _Threads(), _Threads()
    start = time.monotonic()
    interrupted = True
    try:
        # The producers' connections before the workers': on a server short of connection slots
        # the workers that cannot connect wait and try again (and the report counts it), where
        # the producers would give up after 30 s.
        try:
            pool.wait(timeout=PRODUCERS_CONNECT_S)
        except PoolTimeout as exc:  # it said "cannot connect to the database: pool initialization incomplete"
            from pgqueue.cli import UserError

            raise UserError(f"the producers could not open their {_count(options.producers, 'connection')} to the "
                            f"database in {PRODUCERS_CONNECT_S:g} s (the server short of free connections? lower "
                            "--producers, or raise its max_connections)") from exc
        for i, worker in enumerate(workers):
            worker_threads.start(f"demo-worker-{i}", worker.run)
        for i in range(options.producers):
            share = jobs[i::options.producers]
            producer_threads.start(f"demo-producer-{i}", partial(
                produce, producer_queue, share, start, options.rate, tally, stop_producing))
        # Until every message is settled: completed, or dead-lettered by a worker or by the
        # database itself (a message whose last lease ran out, which no worker reports: the
        # wait went on to its deadline for those, a review). Given up only after a stretch of
        # GIVE_UP_AFTER_S with nothing sent or settled once the producers' schedule is over:
        # a deadline of the schedule + 60 s cut a long --rate 0 run off, its backlog taken
        # for lost.
        sending_until = start + (len(jobs) / options.rate if options.rate > 0 else 0.0)
        next_sample, db_dead = 0.0, 0
        seen: tuple[int, ...] = ()
        last_progress = start
        with Progress(len(jobs), out, options.progress) as progress:
            while True:
                producer_threads.check()
                worker_threads.check()
                progress.update(tally)
                now = time.monotonic()
                if now >= next_sample:
                    stats = queue.stats()
                    tally.peak_ready = max(tally.peak_ready, stats.ready)
                    db_dead = stats.dead
                    next_sample = time.monotonic() + 0.5
                with tally.lock:
                    state = (len(tally.kinds), sum(tally.completed.values()), sum(tally.dead.values()), db_dead)
                if state[1] + max(state[2], db_dead) >= len(jobs):
                    break
                if state != seen:
                    seen, last_progress = state, now
                elif now - max(last_progress, sending_until) > GIVE_UP_AFTER_S:
                    tally.gave_up_after = now - start
                    break
                time.sleep(0.1)
            progress.update(tally)
        interrupted = False
    except KeyboardInterrupt as exc:
        # the seed too: an interrupted run is one to repeat (run_demo gives every run one)
        seed = "" if options.seed is None else f" (seed {options.seed}: `--seed {options.seed} --messages {len(jobs)}`)"
        print(f"Interrupted with {tally.settled:,} of {_count(len(jobs), 'message')} settled{seed}: stopping the "
              "producers and workers.", file=out, flush=True)
        raise _Interrupted from exc
    finally:
        def held() -> None:
            assert sigint is not None
            sigint.held += 1

        with sigint.holding(held) if interrupted and sigint is not None else nullcontext():
            stop_producing.set()
            producer_threads.join()
            for worker in workers:
                worker.stop(now=interrupted)
            worker_threads.join()
            pool.close()
    end = tally.last_settle or time.monotonic()
    return tally, end - (tally.first_enqueue or start)


class Progress:
    """A progress bar on a terminal; a line every two seconds otherwise."""

    def __init__(self, total: int, out: TextIO, bar: bool | None) -> None:
        self.total = total
        self.out = out
        self.bar = out.isatty() if bar is None else bar
        self.start = time.monotonic()
        self.last_line = self.start
        self.text = ""

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.out.write("\n" if self.bar else f"  {self.text}\n")
        self.out.flush()

    def update(self, tally: Tally) -> None:
        with tally.lock:
            dead = sum(tally.dead.values())
            done = sum(tally.completed.values()) + dead
            sent, retries = len(tally.kinds), tally.retries
        now = time.monotonic()
        self.text = (f"{done:,}/{self.total:,} done  sent {sent:,}  retries {retries:,}  "
                     f"dead {dead:,}  {now - self.start:4.1f} s")
        if self.bar:
            # Within the terminal's width, less a column: a line that wraps is not redrawn by
            # "\r" (it goes back to the start of the wrapped part), and on an 80-column terminal
            # the default run's bar (98 columns) wrote a new line ten times a second (a review).
            # The bar shrinks first, then the text is cut.
            columns = shutil.get_terminal_size().columns - 1
            percent = 100 * done // max(self.total, 1)
            line = f"] {percent:3d}%  {self.text}"
            width = max(10, min(30, columns - 1 - len(line)))
            filled = width * done // max(self.total, 1)
            line = f"[{'#' * filled}{'.' * (width - filled)}{line}"[:max(columns, 1)]
            self.out.write(f"\r{line}")
            self.out.flush()
        elif now - self.last_line >= 2.0:
            self.out.write(f"  {self.text}\n")
            self.out.flush()
            self.last_line = now


def percentile(values: Sequence[float], p: float) -> float:
    """Return the p-th percentile (0-100) of values, nearest-rank: the least value that at
    least p percent of them are at most.

    (It rounded p / 100 x n + 0.5, which Python rounds half to even: a rank too high whenever
    p / 100 x n was an odd whole number, so that the p99 of 100 latencies was their maximum and
    the p50 of 2 the greater, a review.)
    """
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p * len(ordered) / 100)))
    return ordered[rank - 1]


def _ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.1f} ms" if ms < 100 else f"{ms:,.0f} ms"


def check(queue: Queue, tally: Tally, expected_kinds: Counter[str], trouble: str | None = None,
          dead_letters: dict[int, DeadLetter] | None = None, stats: QueueStats | None = None) -> list[str]:
    """Return what is wrong: every message completed once, or dead-lettered once if poison.

    When the wait gave up (:attr:`Tally.gave_up_after`), the messages with no end yet are one
    problem, said as such, not each a message lost. ``trouble``: what the workers logged about
    the database (connections failing), the likelier cause of a lease run out than slow heartbeats.
    ``dead_letters`` (:func:`_dead_letters`) and ``stats``: the queue's, read here if not given.
    """
    problems = []
    sent = sum(expected_kinds.values())
    if len(tally.kinds) != sent:
        never = sent - len(tally.kinds)
        problems.append(f"{_count(never, 'message')} {'was' if never == 1 else 'were'} never enqueued")
    poison = {i for i, k in tally.kinds.items() if k == "poison"}
    if dead_letters is None:
        dead_letters = _dead_letters(queue, tally)
    unsettled = {i for i in tally.kinds
                 if not tally.completed[i] and not tally.dead[i] and i not in dead_letters}
    if stats is None:
        stats = queue.stats()
    if tally.gave_up_after is not None:
        problems.append(f"stopped waiting after {tally.gave_up_after:,.0f} s with {len(unsettled):,} unsettled "
                        f"(none sent or settled in the last {GIVE_UP_AFTER_S:g} s; in the queue: {stats.ready} ready, "
                        f"{stats.scheduled} scheduled, {stats.leased} leased): not counted as lost")
        poison -= unsettled
    for msg_id, kind in tally.kinds.items():
        if tally.gave_up_after is not None and msg_id in unsettled:
            continue
        completed, dead = tally.completed[msg_id], tally.dead[msg_id]
        if kind == "poison":
            # dead-lettered once by a worker, or by the database alone: a worker whose last lease
            # of it ran out (an overloaded machine) had its fail refused, and the next take
            # dead-lettered it (the end a poison message must reach, reached once)
            by_database = not dead and not completed and msg_id in dead_letters
            if (dead != 1 or completed) and not by_database:
                problems.append(f"poison message {msg_id}: dead-lettered {dead}x, completed {completed}x")
        elif completed != 1 or dead:
            problem = f"{kind} message {msg_id}: completed {completed}x, dead-lettered {dead}x"
            letter = dead_letters.get(msg_id)
            if not completed and not dead and letter is not None:
                # no handler ended it: the database dead-lettered it when its last lease ran out
                cause = (f"the workers' connections to the database failed ({trouble})" if trouble
                         else "too many workers x handlers for this machine?")
                problem += (f" by a worker, but dead-lettered by the database after attempt {letter.attempts} "
                            f"({letter.last_error}): its heartbeats fell behind ({cause})")
            problems.append(problem)
    for msg_id in (tally.completed.keys() | tally.dead.keys()) - tally.kinds.keys():
        problems.append(f"message {msg_id} was processed but never enqueued")
    # The database must agree: nothing left, and the dead letters are exactly the poison ones.
    if tally.gave_up_after is None and (stats.ready or stats.scheduled or stats.leased):
        problems.append(f"left in the queue: {stats.ready} ready, {stats.scheduled} scheduled, "
                        f"{stats.leased} leased")
    if dead_letters.keys() != poison:
        problems.append(f"the dead letters ({len(dead_letters)}) are not the poison messages ({len(poison)})")
    return problems


def _dead_letters(queue: Queue, tally: Tally) -> dict[int, DeadLetter]:
    """The queue's dead letters by id (enough of them for every poison message sent and more)."""
    poison = sum(1 for kind in tally.kinds.values() if kind == "poison")
    return {d.id: d for d in queue.dead_letters(limit=max(1000, 2 * poison))}


FENCING_LEASE_MS = 200


def fencing(queue: Queue) -> str | None:
    """A worker stalls past its lease and another takes the message over: return what went
    wrong, or None if the database refused the stalled worker's complete (its attempt number is
    a fencing token that no longer matches) and accepted the new holder's."""
    queue.enqueue({"kind": "fencing"})
    stalled = queue.dequeue(1, lock_ms=FENCING_LEASE_MS)
    if not stalled:
        return "fencing: the message was not delivered"
    taken: list[Message] = []
    deadline = time.monotonic() + 5.0
    while not taken and time.monotonic() < deadline:
        time.sleep(FENCING_LEASE_MS / 1000)  # a GC pause, a partition: no heartbeat
        taken = queue.dequeue(1)
    if not taken:
        return "fencing: the message was not delivered again after its lease ran out"
    if queue.complete(stalled[0]):
        return "fencing: the stalled worker's complete was accepted after another took the message"
    if not queue.complete(taken[0]):
        return "fencing: the new holder's complete was refused"
    return None


#: The most problems the report lists (it says how many more).
PROBLEMS_LISTED = 20


def _per_second(count: int, seconds: float) -> str:
    """Return ": N msg/s", or "" when too few messages or too short a time make it meaningless
    (one message sent read "1,000,000,000 msg/s")."""
    return f": {count / seconds:,.0f} msg/s" if count >= 2 and seconds >= 0.01 else ""


def report(queue: Queue, jobs: Sequence[dict[str, Any]], tally: Tally, elapsed: float,
           options: DemoOptions, out: TextIO, trouble: _Trouble | None = None) -> int:
    """Print the summary and the exactly-once check; return the exit status."""
    kinds = Counter(job["kind"] for job in jobs)
    troubled = f"{_count(trouble.count, 'failure')} logged" if trouble is not None and trouble.count else None
    # The dead letters and the stats read once, for the check and the report (read twice, a review).
    letters, stats = _dead_letters(queue, tally), queue.stats()
    problems = check(queue, tally, kinds, troubled, letters, stats)
    completed = sum(tally.completed.values())
    dead = sum(tally.dead.values())
    all_latencies = [v for values in tally.latency.values() for v in values]

    sent = len(tally.kinds)
    sending = (tally.last_enqueue or 0.0) - (tally.first_enqueue or 0.0)
    they = "it" if options.producers == 1 else "they"
    offered = f"as fast as {they} could" if options.rate <= 0 else f"offered {options.rate:g} msg/s"
    drained = (tally.last_settle or 0.0) - (tally.last_enqueue or 0.0)
    workers = _count(options.workers, "worker")
    w = out.write
    w("\nSummary (measured in this run)\n")
    if options.seed is not None:  # (run_demo picks one when none is given)
        # pasted back as they are (the mix depends on the number of messages too)
        w(f"  seed          {options.seed}: `--seed {options.seed} --messages {len(jobs)}` repeats this run's mix "
          "of messages\n")
    w(f"  sent          {_count(sent, 'message')} in {sending:.1f} s by {_count(options.producers, 'producer')}"
      f"{_per_second(sent, sending)}, one transaction each ({offered})\n")
    if options.rate > 0 and (tally.last_settle is None or drained < 0):
        # None settled, or none after the last send (the wait gave up on the last ones): the
        # time from the last send to the last settle is not a drain time; it read "the last
        # -4521.3 s after the last was sent" (a monotonic clock's reading, negated), a review.
        w(f"  settled       {completed + dead:,} by {workers} x {options.concurrency}, none after "
          "the last was sent\n")
    elif options.rate > 0:
        w(f"  settled       {completed + dead:,} by {workers} x {options.concurrency}, the last "
          f"{drained:.1f} s after the last was sent (slow jobs and retries; --rate 0 measures throughput)\n")
    else:
        w(f"  settled       {completed + dead:,} by {workers} x {options.concurrency} in {elapsed:.1f} s "
          f"from the first send{_per_second(completed + dead, elapsed)} (retry back-offs and the "
          "slow jobs' 2 s included)\n")
    if all_latencies:
        w(f"  latency       p50 {_ms(percentile(all_latencies, 50))}, "
          f"p99 {_ms(percentile(all_latencies, 99))} (from due to completed)\n")
    notes = {
        "scheduled": "from the time it was due, not sent",
        "priority": f"ahead of a backlog of at most {tally.peak_ready:,} ready (sampled)",
        "flaky": "a failure, then a retry after its back-off",
    }
    durations = tally.durations.get("slow", [])
    if durations:
        kept = "heartbeats kept it" if not tally.stale else "see lost leases"
        notes["slow"] = f"handlers ran up to {max(durations):.1f} s on a {LEASE_MS / 1000:g} s lease: {kept}"
    # Each kind's row counts what was settled of it, "N of M" when not all (it counted what was
    # sent, and said "dead-lettered" of poison messages that were not, a review).
    # A poison message the database dead-lettered itself (its last lease ran out) is settled too.
    settled, dead_of, by_database = Counter[str](), Counter[str](), Counter[str]()
    for msg_id, kind in tally.kinds.items():
        done, dead_here = tally.completed[msg_id] > 0, tally.dead[msg_id] > 0
        db = kind == "poison" and not done and not dead_here and msg_id in letters
        if done or dead_here or db:
            settled[kind] += 1
        if dead_here or db:
            dead_of[kind] += 1
        if db:
            by_database[kind] += 1
    for kind in MIX:
        if not kinds[kind]:
            continue
        count = f"{settled[kind]:,}" if settled[kind] == kinds[kind] else f"{settled[kind]:,} of {kinds[kind]:,}"
        values = tally.latency.get(kind, [])
        if kind == "poison":
            note = (f"dead-lettered after {MAX_ATTEMPTS} attempts each" if dead_of[kind] == settled[kind]
                    else f"{dead_of[kind]:,} dead-lettered after {MAX_ATTEMPTS} attempts each")
            if by_database[kind]:
                note += f" ({by_database[kind]:,} by the database: the last lease ran out, see lost leases)"
            w(f"    {kind:<10} {count:>6}  {note if dead_of[kind] else 'none dead-lettered'}\n")
        elif values:
            note = f"  {notes[kind]}" if kind in notes else ""
            w(f"    {kind:<10} {count:>6}  p50 {_ms(percentile(values, 50)):>9}  "
              f"p99 {_ms(percentile(values, 99)):>9}{note}\n")
        else:
            w(f"    {kind:<10} {count:>6}  none completed\n")
    w(f"  retries       {tally.retries:,} (each flaky job once, each poison job "
      f"{MAX_ATTEMPTS - 1} times before it is dead-lettered)\n")
    db_dead = stats.dead
    by_db = f" (the queue holds {db_dead:,}: the database dead-lettered {db_dead - dead:,} itself)" if db_dead > dead else ""
    w(f"  dead letters  {dead:,}{by_db}\n")
    w(f"  lost leases   {_count(tally.stale, 'acknowledgement')} refused because the lease had run out "
      "(the message went to another delivery)\n")
    if trouble is not None and trouble.count:
        limit = ("the server's max_connections is yours (--dsn): lower --workers or raise it" if options.dsn is not None
                 else "is the machine out of connections or memory?")
        w(f"  connections   {_count(trouble.count, 'failure')} logged by the workers (about {connections_needed(options):,} "
          f"connections needed: {limit}); the first: {trouble.first}\n")
    fenced = fencing(queue)
    if fenced is not None:
        problems.append(fenced)
    else:
        w(f"  fencing       a worker stalled past its {FENCING_LEASE_MS / 1000:g} s lease and another took the "
          "message: the stalled one's complete was refused, the new holder's accepted\n")
    if problems:
        w(f"  exactly once  FAILED: {_count(len(problems), 'problem')}\n")
        for problem in problems[:PROBLEMS_LISTED]:
            w(f"    - {problem}\n")
        if len(problems) > PROBLEMS_LISTED:
            w(f"    - and {len(problems) - PROBLEMS_LISTED:,} more\n")
        return 1
    by_db_note = f" ({by_database['poison']:,} of them by the database)" if by_database["poison"] else ""
    w(f"  exactly once  OK: {completed:,} completed once each, {dead + by_database['poison']:,} dead-lettered once "
      f"each{by_db_note}, none lost, none twice\n")
    return 0


# -----------------------------------------------------------------------------------------
# Command line
# -----------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``pgqueue demo`` to its parser (--dsn is added by the CLI)."""
    from pgqueue.cli import _int_range, _number, _port

    d = DemoOptions()
    # Bounded: the jobs are made before the first is sent (10,000,000 take a few GB), and a rate
    # below the least made the producers' wait overflow (--rate 1e-10: OverflowError).
    messages = _int_range(*LIMITS["messages"])
    rate = _number(float, _rate_ok, RATE_TEXT)
    parser.add_argument("--messages", "-n", type=messages, default=d.messages, metavar="N",
                        help=f"how many messages to send (default {d.messages:,}, at most {MAX_MESSAGES:,})")
    parser.add_argument("--rate", type=rate, default=d.rate, metavar="R",
                        help=f"messages per second the producers send (default {d.rate:g}, at least {MIN_RATE:g}; "
                             "0 = as fast as they can, a throughput test)")
    # Bounded too: every producer, worker and handler is a thread of this process (a --concurrency
    # of 10^20 started threads until the system refused one, then aborted: exit 134, a review).
    # The workers and producers, to what a machine's PostgreSQL serves: their connections.
    threads = _int_range(*LIMITS["concurrency"])
    producers = _int_range(*LIMITS["producers"])
    workers = _int_range(*LIMITS["workers"])
    parser.add_argument("--producers", type=producers, default=d.producers, metavar="N",
                        help=f"producer threads, a connection each (default {d.producers}, at most {MAX_PRODUCERS})")
    parser.add_argument("--workers", type=workers, default=d.workers, metavar="N",
                        help=f"workers, {WORKER_CONNECTIONS} connections each (default {d.workers}, at most {MAX_WORKERS})")
    parser.add_argument("--concurrency", type=threads, default=d.concurrency, metavar="N",
                        help=f"handlers per worker (default {d.concurrency}; workers x concurrency at most "
                             f"{MAX_THREADS:,})")
    seed = _number(int, lambda v: True, "an integer")  # (ASCII digits, as every number option)
    parser.add_argument("--seed", type=seed, help="random seed, to repeat a run's mix")
    parser.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                        help="no progress bar, even on a terminal")
    parser.add_argument("--dashboard", type=_port, nargs="?", const=8080, metavar="PORT",
                        help="serve `pgqueue dashboard` on 127.0.0.1:PORT (default 8080) while the demo runs, "
                             "and keep it up after the report until Ctrl-C")


def run_from_args(args: argparse.Namespace) -> int:
    """Run ``pgqueue demo`` with parsed arguments."""
    from pgqueue.cli import DSN_ENV, UsageError

    if args.workers * args.concurrency > MAX_THREADS:
        raise UsageError(f"pgqueue demo: error: --workers {args.workers:,} x --concurrency {args.concurrency:,} is "
                         f"{args.workers * args.concurrency:,} handler threads, more than {MAX_THREADS:,} "
                         "(see `pgqueue demo --help`)")
    dsn = getattr(args, "dsn", None) or os.environ.get(DSN_ENV) or None
    options = DemoOptions(messages=args.messages, rate=args.rate, producers=args.producers,
                          workers=args.workers, concurrency=args.concurrency, dsn=dsn,
                          seed=args.seed, progress=args.progress, dashboard=args.dashboard)
    return run_demo(options)
