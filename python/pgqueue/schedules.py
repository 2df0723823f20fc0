"""Periodic messages kept in the database: create, list, drop and run schedules.

A schedule enqueues its payload on its queue at every slot of an interval or of a cron
expression (five fields, UTC). :func:`run_schedules` (SQL ``pgqueue.schedule_run()``) enqueues
the slots that are due, each exactly once however many schedulers call it at once; run it
every second or so from one or more processes (``pgqueue scheduler``, :class:`Scheduler`), or
from pg_cron::

    SELECT cron.schedule('pgqueue-schedules', '10 seconds', 'SELECT pgqueue.schedule_run()');

Missed slots (no scheduler ran for a while) follow the schedule's ``missed`` policy: ``latest``
enqueues one message for all of them, ``all`` one per slot. Example::

    create_schedule(conn, "nightly-report", "reports", {"kind": "daily"}, cron="0 3 * * *")
    create_schedule(conn, "heartbeat", "ops", "ping", every=timedelta(minutes=1))
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from pgqueue import _connect, _core
from pgqueue._core import Delay, When
from pgqueue._lease import Outage
from pgqueue._worker_core import (
    Stopped,
    _shut_down,
    _worker_conninfo,
    check_flag,
    check_startup_timeout,
    connect_unless_stopped,
    require_writable,
    stop_signals,
    wait_for_database,
)
from pgqueue.client import ConnectionSource, _run_once
from pgqueue.compat import check_server
from pgqueue.errors import PgQueueError, printable, quoted, translating
from pgqueue.message import ScheduledMessage, ScheduleEntry

__all__ = ["Scheduler", "create_schedule", "drop_schedule", "list_schedules", "run_schedules"]

log = logging.getLogger("pgqueue.scheduler")


def create_schedule(conn: ConnectionSource, name: str, queue: str, payload: object, *, every: Delay | None = None,
                    cron: str | None = None, missed: str = "latest", start_at: When | None = None,
                    task: str | None = None) -> int:
    """Create a periodic message and return the schedule's id.

    Parameters:
        conn: a connection string (opened and closed here), a connection or a pool.
        name: the schedule's name (unique, 1 to 200 characters).
        queue: the queue to enqueue on.
        payload: what to enqueue each time (encoded as by ``Queue.enqueue``).
        every: an interval (``timedelta`` or seconds, at least 1 s); slots count from ``start_at``.
        cron: a five-field cron expression in UTC (``"*/15 * * * *"``); give ``every`` or ``cron``.
        missed: ``"latest"`` (one message for all missed slots) or ``"all"`` (one per slot).
        start_at: the first slot (interval) or the time from which the first match is taken
            (cron: a match at ``start_at`` itself counts); default now. An aware ``datetime``
            (a naive one is taken as UTC, not as local time) or epoch milliseconds. Slots
            before now are missed ones (``missed`` says what the first run enqueues).
        task: the task the messages name (see :class:`pgqueue.Tasks`).

    Raises:
        QueueNotFound, InvalidArgument (a bad interval, cron expression or policy),
        PgQueueError with SQLSTATE 42710 (a schedule of that name exists).
    """
    return _run_once(conn, _core.schedule_create(name, queue, payload, every=every, cron=cron, missed=missed,
                                                 start_at=start_at, task=task))


def drop_schedule(conn: ConnectionSource, name: str) -> bool:
    """Drop a schedule; False if there was none."""
    return _run_once(conn, _core.schedule_drop(name))


def list_schedules(conn: ConnectionSource) -> list[ScheduleEntry]:
    """Return every schedule, by name."""
    return _run_once(conn, _core.schedule_list())


def run_schedules(conn: ConnectionSource, limit: int = 1000, *,
                  on_held: Callable[[str], None] | None = None) -> list[ScheduledMessage]:
    """Enqueue the due slots of every schedule (each once, whoever else runs them); return them.

    Parameters:
        conn: a connection string (opened and closed here), a connection or a pool.
        limit: at most this many messages (1 to 100000).
        on_held: called with the text of each notice of a schedule held back by its capped
            queue (full, or its admission held by an open transaction: a producer's or another
            scheduler's run): SQLSTATE PQ003, ``schedule "NAME" is held: its queue "QUEUE" is
            full ...`` or ``schedule "NAME" is held: an open transaction holds the admission of
            its queue "QUEUE" ...``. Its slot stays due for a later run.
    """
    if on_held is None:
        return _run_once(conn, _core.schedule_run(limit))
    if not callable(on_held):  # (5 was taken, then raised inside psycopg's notice handling)
        raise TypeError(f"on_held must be callable or None, got {type(on_held).__name__}")
    hook = on_held

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        if diag.sqlstate == "PQ003" and diag.message_primary:
            hook(diag.message_primary)

    if isinstance(conn, str):
        with translating():
            own = _connect.connect(conn, autocommit=True)
        try:
            own.add_notice_handler(on_notice)
            return _run_once(own, _core.schedule_run(limit))
        finally:
            own.close()
    if isinstance(conn, ConnectionPool):
        with translating(), conn.connection() as lent:  # (a closed pool's PoolClosed: ConnectionFailed, a review)
            return run_schedules(lent, limit, on_held=on_held)
    if not isinstance(conn, psycopg.Connection):
        return _run_once(conn, _core.schedule_run(limit))  # (its TypeError)
    conn.add_notice_handler(on_notice)
    try:
        return _run_once(conn, _core.schedule_run(limit))
    finally:
        conn.remove_notice_handler(on_notice)


_HELD = re.compile(r'^schedule "(.*)" is held: ', re.DOTALL)  # (a name may hold a newline)

#: Seconds after :meth:`Scheduler.stop` at which a run the database has not answered is given up.
STUCK_RUN = 2.0


def _held_name(notice: str) -> str:
    """The schedule's name in a held notice (the whole text if it is not of that form)."""
    found = _HELD.match(notice)
    return found.group(1) if found else notice


class Scheduler:
    """Run :func:`run_schedules` every ``interval`` seconds (more than 0, at most 1e9; else
    ValueError; not a number: TypeError) until :meth:`stop` (or SIGINT/SIGTERM/SIGHUP when :meth:`run` is on the main
    thread; one ignored when it starts, as SIGHUP under nohup, stays ignored; the previous
    handlers come back when it returns).

    Several schedulers may run against one database: each slot is still enqueued once.
    It keeps one connection (``application_name`` pgqueue-scheduler, ``connect_timeout`` 10 s
    unless the DSN sets them), opened again after a failed run.

    At start :meth:`run` waits for a database that cannot be reached yet or is read-only (a
    server starting up, a failover) as the worker does: tried again after 0.1 s, doubling up to
    30 s, one warning when it starts (repeated every 60 s) and one line when it connects, for
    ``startup_timeout`` seconds (None, the default: until it works or the scheduler is stopped;
    0: no wait; a bound, a server or a check that does not answer included). What no retry mends
    (authentication refused, no such database, an option value libpq refuses, pgqueue missing or
    of another version) is raised at once. :meth:`stop` gives up a start-up check the database
    does not answer :data:`STUCK_RUN` seconds later, as it gives up a run.
    """

    def __init__(self, dsn: str, *, interval: float = 1.0, handle_signals: bool = True,
                 startup_timeout: float | None = None) -> None:
        # (a dsn of 5 was an AttributeError, an interval of "1" a raw "'<' not supported"
        # TypeError, and True was taken as 1 s: a review)
        if not isinstance(dsn, str):
            raise TypeError(f"dsn must be a conninfo string, got {type(dsn).__name__}")
        if not isinstance(interval, (int, float)) or isinstance(interval, bool):
            raise TypeError(f"interval must be a number of seconds, got {type(interval).__name__}")
        check_flag("handle_signals", handle_signals)
        if not 0 < interval <= 1e9:  # (a longer wait overflows the clock: OverflowError in run())
            raise ValueError(f"interval must be > 0 and at most 1e9 seconds, got {quoted(interval)}")
        check_startup_timeout(startup_timeout)
        self._startup_timeout = startup_timeout
        self._dsn = _worker_conninfo(dsn, "pgqueue-scheduler")
        self._interval = interval
        self._handle_signals = handle_signals
        self._stop = threading.Event()
        self._calling: psycopg.Connection[Any] | None = None  # the connection of the run in flight
        self._watchdog: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._started = False
        self._run_thread: int | None = None  # the thread of run(), while it runs
        self.enqueued = 0

    def stop(self) -> None:
        """Stop after the run in progress (thread-safe); a connection attempt or a wait for the
        database ends at once. A run the database does not answer (a server or network that
        hangs) is given up :data:`STUCK_RUN` seconds later. Called on the thread of :meth:`run`
        (a signal handler of the caller's, with ``handle_signals=False``) the stop is made from a
        thread of its own, a moment later: the handler runs between two bytecodes of that thread,
        maybe inside the stop event's lock, which setting it there would wait for for good (a
        review; the scheduler's own handler does the same)."""
        if threading.get_ident() == self._run_thread:
            threading.Thread(target=self._stop_now, name="pgqueue-scheduler-stop", daemon=True).start()
            return
        self._stop_now()

    def _stop_now(self) -> None:
        self._stop.set()
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._give_up_stuck_run, name="pgqueue-scheduler-stop",
                                              daemon=True)
            self._watchdog.start()

    def _give_up_stuck_run(self) -> None:
        time.sleep(STUCK_RUN)
        conn = self._calling
        if conn is not None:
            log.warning("stopping: the database has not answered the run in flight for %g s; giving it up",
                        STUCK_RUN)
            _shut_down(conn)

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        """The start-up check: the database's pgqueue is this client's version, and it takes
        writes; a check the database does not answer is the stop's to give up, as a run is."""
        self._calling = conn
        try:
            if self._stop.is_set():
                raise Stopped()  # (the watchdog may have looked before this check began)
            check_server(conn)
            require_writable(conn)
        finally:
            self._calling = None

    def run(self) -> None:
        """Wait for the database (see the class docstring), then run the schedules until
        stopped; database errors are retried every ``interval``, logged as a warning once (again
        when the error changes) and with one line when the schedules run again, but a role's
        missing privilege (42501), which it raises. Returns without running anything when
        stopped while it waits for the database at start, or before.

        Raises:
            RuntimeError: it ran already (a scheduler runs once, as a worker does: create a new
                one; a second run of a stopped one returned at once, doing nothing).
        """
        with self._start_lock:
            if self._started:
                raise RuntimeError("a Scheduler runs once; create a new one")
            self._started = True
        self._run_thread = threading.get_ident()
        try:
            self._run()
        finally:
            self._run_thread = None

    def _run(self) -> None:
        saved: dict[signal.Signals, Any] = {}
        if self._handle_signals and threading.current_thread() is threading.main_thread():

            def on_signal(signum: int, frame: FrameType | None) -> None:
                # Between two bytecodes of the main thread, maybe inside a lock that stop() takes
                # (the stop event's, which the loop's wait holds for a moment each round: set
                # there, the scheduler hung for good): act from a thread, as the worker does.
                threading.Thread(target=self.stop, name="pgqueue-scheduler-signal", daemon=True).start()

            saved = {sig: signal.signal(sig, on_signal) for sig in stop_signals()}
        failed = 0  # tries in a row that failed: an outage is logged once, and its end
        last_error = ""
        held: dict[str, str] = {}  # the schedules their capped queue holds back: name -> notice
        conn: psycopg.Connection[Any] | None = None
        try:
            outage = Outage(log, "database connection")
            try:
                conn = wait_for_database(self._dsn, self._check, stop=self._stop, timeout=self._startup_timeout,
                                         outage=outage)
            except Stopped:
                log.info("stopped while waiting for the database: not started")
                return
            outage.worked()
            while not self._stop.is_set():
                notices: list[str] = []
                try:
                    try:
                        conn, done = self._run_once(conn, notices)
                    except Stopped:
                        break
                except PgQueueError as exc:
                    conn = None  # (closed by _run_once: a new one for the next run)
                    if self._stop.is_set():
                        break  # (a run given up by the stop: nothing to retry)
                    if exc.sqlstate == "42501":
                        raise  # a role without EXECUTE on schedule_run (docs/grants.sql): no retry mends it
                    failed += 1
                    error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    if failed == 1 or error != last_error:
                        log.warning("running the schedules failed: %s; retrying every %gs", error, self._interval)
                    else:
                        log.debug("running the schedules failed again (%d tries): %s", failed, error)
                    last_error = error
                else:
                    if failed:
                        log.info("running the schedules works again (after %d failed tries)", failed)
                        failed, last_error = 0, ""
                    self.enqueued += len(done)
                    for m in done:
                        log.info("schedule %s: message %d for %s", printable(m.schedule), m.message_id,
                                 m.slot.isoformat())
                    held = self._note_held(held, notices, {m.schedule for m in done})
                self._stop.wait(self._interval)
        finally:
            if conn is not None:
                conn.close()
            for sig, previous in saved.items():
                signal.signal(sig, previous)

    def _run_once(self, conn: psycopg.Connection[Any] | None,
                  notices: list[str]) -> tuple[psycopg.Connection[Any], list[ScheduledMessage]]:
        """Run the schedules once, on ``conn`` or a new connection; return the connection and the
        messages enqueued. A connection kept from the run before that the server has closed
        meanwhile (idle_session_timeout shorter than the interval, a restart, a pooler's idle
        limit) is replaced and the run made again at once: it failed, a warning logged, and the
        schedules waited a whole interval for the next try, every other run with such a timeout
        (a review). Raises Stopped if the scheduler stops while connecting."""
        again = conn is not None  # (once, and only for a connection kept from the run before)
        while True:
            if conn is None:
                conn = connect_unless_stopped(self._dsn, self._stop)
            self._calling = conn
            try:
                return conn, run_schedules(conn, on_held=notices.append)
            except BaseException as exc:
                closed_meanwhile = again and isinstance(exc, PgQueueError) and conn.broken
                conn.close()  # (the caller's next run, or the try below, connects anew)
                if not closed_meanwhile or self._stop.is_set():
                    raise
                log.debug("the connection kept from the last run was closed (%s): connecting again", exc)
                conn, again = None, False
                notices.clear()
            finally:
                self._calling = None

    @staticmethod
    def _note_held(held: dict[str, str], notices: list[str], fired: set[str]) -> dict[str, str]:
        """Log a schedule held back by its capped queue once (one warning when it is first
        held, again if the notice changes) and once when it fires again; return who is held now."""
        now: dict[str, str] = {}
        for notice in notices:
            name = _held_name(notice)
            now[name] = notice
            if held.get(name) != notice:
                log.warning("%s; its slots wait for a later run (logged once while it lasts)", printable(notice))
        for name in held.keys() - now.keys():
            if name in fired:
                log.info("schedule %s is no longer held: it enqueues again", printable(name))
        return now
