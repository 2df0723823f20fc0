"""The worker's logic, shared by :class:`pgqueue.Worker` (threads) and :class:`pgqueue.AsyncWorker` (asyncio).

procrastinate's shape: lease messages in batches, run at most ``concurrency`` handlers at once,
renew their leases while they run (:mod:`pgqueue._lease`), complete the messages whose handlers
returned together, in the statement of the next fetch when one is due
(``message_complete_and_dequeue``), fail those whose handlers raised, wake on LISTEN or poll,
reconnect after the doubling :class:`Backoff`, and on stop let running handlers finish within
``shutdown_grace`` before giving the rest back with a defer.

:class:`WorkerCore` holds that logic once, without I/O: each step that talks to the database
is a generator (a :data:`Step`) that yields the :class:`~pgqueue._core.Call` it needs run and
receives its result (or has the call's error thrown into it), and yields a :class:`Wait` where it
waits for handlers, notifications or time; the loop itself and the shutdown are such steps. Each
worker drives them its own way, as psycopg drives its own generators with a sync or an async
``wait``:

- :class:`pgqueue.Worker` (``worker.py``) runs plain functions. Its loop runs on the thread that
  called ``run()`` and makes its calls over a sync psycopg connection; the handlers run on a
  bounded pool of threads that hand their returns back through a queue the loop waits on;
  heartbeats and LISTEN have a thread and a connection each. No event loop: in
  ``bench/experiments/worker_cpu/`` this used half the CPU a message of the asyncio worker
  running the same plain-function handlers on threads.
- :class:`pgqueue.AsyncWorker` (``async_worker.py``) awaits coroutine handlers as tasks on the
  caller's event loop, over psycopg's asyncio connections.

Both have one connection for the loop's calls and one for heartbeats, each opened again at its
next call after a loss (the loop's once :class:`Backoff`'s wait has passed), and one for LISTEN
when the queue's ``notify`` is on.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import re
import random
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pgqueue import _connect, _core
from pgqueue._core import Call, error_text
from pgqueue._lease import Outage, _first_line, is_conflict
from pgqueue.client import _execute
from pgqueue.compat import check_server
from pgqueue.errors import ConnectionFailed, PgQueueError, quoted, translating
from pgqueue.message import Message, QueueSettings
from pgqueue.tasks import Tasks, is_coroutine_callable

log = logging.getLogger("pgqueue.worker")

T = TypeVar("T")

#: A handler takes a message; its return value is ignored, an exception fails the message.
Handler = Callable[[Message], object]

#: A handler timeout: seconds for every message, or a function of the message (None: no limit).
Timeout = float | Callable[[Message], float | None]

@dataclass(frozen=True)
class Wait:
    """What a step yields to wait: until woken (a handler's end, a notification, stop) or
    ``timeout`` seconds; the handlers run meanwhile."""

    timeout: float


#: A step of the worker's logic: yields the calls it needs run (receiving their results) and
#: the waits it needs, and returns its own result (see the module docstring).
Step = Generator["Call[Any] | Wait", Any, T]


class HandlerTimeout(Exception):
    """The error a timed-out delivery is failed with (the handler was still running)."""


#: What became of a delivery: completed; failed and to be retried; failed for the last time
#: (dead-lettered); or released (given back unprocessed at shutdown).
Outcome = Literal["completed", "retried", "dead", "released"]

_RECONNECT_MIN = 0.1
_RECONNECT_MAX = 30.0
#: What a lost or refused connection raises: psycopg itself, or the client's translation.
_CONNECTION_ERRORS = (psycopg.OperationalError, ConnectionFailed)
#: Any database error.
_DATABASE_ERRORS = (psycopg.Error, PgQueueError)
#: The signals that stop a worker or a scheduler gracefully (and the `pgqueue` commands that
#: serve): Ctrl-C, a service manager's stop, a closed terminal or ssh session (Windows has no SIGHUP).
_SIGNALS = (signal.SIGINT, signal.SIGTERM) + ((signal.SIGHUP,) if hasattr(signal, "SIGHUP") else ())
#: After the shutdown grace, how long the loop's database call may still run before the worker
#: gives it up (a server that hangs, a network that drops every packet): run() must return.
_STUCK_CALL = 2.0
#: At the end of the shutdown grace, how long a handler the worker has stopped waiting for (a
#: cancelled coroutine) may take to end before its message is given back all the same and its
#: late end ignored: a handler that swallows the cancellation, or cleans up at length, does not
#: hold run(). Another stop(now=True) (a second SIGINT or SIGTERM) ends this wait at once.
_GIVE_UP = 2.0
#: ... and how long when a stop(now=True) (a second signal) cancelled it.
_GIVE_UP_URGED = 0.1


class NotStarted(BaseException):
    """Raised by :class:`CommandSignals` for a stop signal that came before the command had
    anything to stop: the command ends at once, exit status 0."""

    def __init__(self, sig: signal.Signals) -> None:
        super().__init__(sig.name)
        self.sig = sig


class CommandSignals:
    """The `pgqueue worker` and `pgqueue scheduler` commands' handler of a stop signal from
    their start to their exit but while a run has its own (a run replaces it, as it replaces the
    default action, and puts it back when it returns). A signal that comes before the run has
    taken the signals over is not lost (it was ignored, and the command ran on): until there is
    something to stop it raises :class:`NotStarted` (the command ends, exit 0); then it goes to
    ``stop`` (the worker's or scheduler's stop: its run returns without starting, or stops as
    soon as it runs);
    once ``over`` (the run has returned, the command ends: exit 0), it is ignored. In a process
    forked before the run (a multiprocessing pool the handler's module makes at import), which is
    not the command, the signal does what it did before: the default action (SIGINT: a
    KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.stop: Callable[[signal.Signals], None] | None = None
        self.over = False
        self._pid = os.getpid()

    def __call__(self, signum: int, frame: object) -> None:
        if os.getpid() != self._pid:  # (it went on as the command: "stopped ... before it started", exit 0)
            if signum == signal.SIGINT:
                signal.signal(signum, signal.default_int_handler)
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)
            return
        if self.over:
            return
        sig = signal.Signals(signum)
        if self.stop is None:
            self.over = True  # (one NotStarted: a second signal while the command ends is ignored)
            raise NotStarted(sig)
        self.stop(sig)


def stop_signals() -> list[signal.Signals]:
    """The stop signals (:data:`_SIGNALS`) to handle: those not ignored now. One ignored when
    the program started stays ignored: SIGHUP under nohup, SIGINT in `cmd &` from a script, a
    SIGTERM its parent ignored. SIGHUP only while it has the default action (it would end the
    process) or the command's :class:`CommandSignals`: an application's own SIGHUP handler (a
    reload, say) stays its own."""
    hup = getattr(signal, "SIGHUP", None)
    return [sig for sig in _SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN
            and (sig != hup or signal.getsignal(sig) is signal.SIG_DFL
                 or isinstance(signal.getsignal(sig), CommandSignals))]


def is_connection_error(exc: BaseException) -> bool:
    """Tell whether a database error means the connection is lost or refused, or the server
    read-only (a standby after a failover: :func:`is_read_only`), then wait and try again on a
    new connection, rather than a refusal of the call (a dropped queue: stop with it)."""
    return (isinstance(exc, _CONNECTION_ERRORS) or isinstance(exc.__cause__, psycopg.OperationalError)
            or is_read_only(exc))


def _shut_down(conn: Any) -> None:
    """Shut a connection's socket down from any thread, so that a call waiting on it fails at once
    with a lost connection (its owner closes the connection as after any loss)."""
    try:
        dup = socket.socket(fileno=os.dup(conn.pgconn.socket))
    except (AttributeError, OSError, psycopg.Error):  # no connection, or closed already
        return
    with dup:
        try:
            dup.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _failure(exc: BaseException) -> str:
    """Say what a retried error is: a lost connection, a read-only server, or a call the server
    refused for now (a lock or statement timeout, a cancel, a serialization failure)."""
    if is_read_only(exc):
        return "the database is read-only"
    lost = isinstance(exc, ConnectionFailed) or (isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None)
    return "database connection lost" if lost else "database call failed"


#: SQLSTATE read_only_sql_transaction: a write on a hot standby (a failover has left the worker
#: on the old primary, now a standby) or with default_transaction_read_only on.
READ_ONLY = "25006"


#: How many conflicts in a row (:func:`pgqueue._lease.is_conflict`) the loop runs its round
#: again (after a short random wait, up to _CONFLICT_WAIT_MAX) before it warns and waits as after
#: a lost connection (the Backoff).
_CONFLICTS_IN_A_ROW = 50
_CONFLICT_WAIT_MAX = 0.1
#: How long the shutdown's acknowledgement runs a call that conflicted again, in all (seconds).
_SHUTDOWN_CONFLICTS_FOR = 5.0


def _conflict_wait(in_a_row: int) -> float:
    """Seconds to wait before a call that conflicted ``in_a_row`` times runs again: random (the
    workers that lost the race for the same rows do not race again at once), growing with the
    conflicts in a row, at most _CONFLICT_WAIT_MAX."""
    return random.uniform(0.0, min(_CONFLICT_WAIT_MAX, 0.001 * 2 ** min(in_a_row, 10)))


def is_read_only(exc: BaseException) -> bool:
    """Tell whether a database error is a write refused by a read-only server or session (25006):
    an outage for a worker (wait, and try again on a new connection), not a refusal of the call."""
    for e in (exc, exc.__cause__):
        if e is not None and getattr(e, "sqlstate", None) == READ_ONLY:
            return True
    return False


#: What a server that is there but cannot take the worker yet answers a connection with (its
#: FATAL's text: libpq does not pass the SQLSTATE of a refused connection on): starting up, in
#: recovery or shutting down (57P03), no connection slot free (53300), shut down or terminated
#: by an administrator (57P01, 57P02), out of processes or memory, an authentication that timed out.
_COMING = ("the database system is starting up", "the database system is shutting down",
           "the database system is in recovery mode", "the database system is not yet accepting connections",
           "the database system is not accepting connections", "consistent recovery state has not been yet reached",
           "too many clients", "too many connections", "remaining connection slots are reserved",
           "terminating connection due to",  # administrator command, a conflict with recovery...
           "could not fork new process", "out of memory", "canceling authentication due to timeout")

#: What libpq says, without a server's FATAL, about a connection no retry mends: a password it
#: has not got or that the server refused, a certificate, a server that is not PostgreSQL.
_REFUSED = ("fe_sendauth", "password", "authentication", "certificate", "channel binding",
            "does not support ssl", "invalid response to ssl negotiation", "server does not support",
            "unsupported", "require_auth")

#: SQLSTATEs of an error (during the start-up check) that mean the server cannot serve yet: every
#: 08 (connection exception) and these: too many connections, the server ending the session.
_OUTAGE_SQLSTATES = frozenset({"53300", "53000", "57P01", "57P02", "57P03", "57P05", READ_ONLY})


#: libpq's text for an error the server answered a connection attempt with: ``failed: `` then the
#: severity, a colon, *two* spaces (libpq's own format, whatever the language: the severity word
#: itself is translated on a server whose lc_messages is not English) and the server's message.
_SERVER_ANSWER = re.compile(r"failed: ([^\s:][^:\n]{0,40}):  ([^\n]*)")

#: Where connect_unless_stopped records its verdict on a failed attempt (from libpq's raw text,
#: which the translated error no longer has: its whitespace is collapsed).
_VERDICT = "_pgqueue_retry_at_start"


def _connect_verdict(raw: str) -> bool | None:
    """Judge a failed connection attempt by libpq's raw error text: False when no retry mends it,
    True when one does, None when the text rules of :func:`retry_at_start` decide.

    A server that answered (an ErrorResponse, in any language: :data:`_SERVER_ANSWER`) refused the
    login: retried only when every answer is one of :data:`_COMING` (their English text: a server
    whose messages are in another language has every refusal final, even "starting up"). An
    option value libpq refuses before it connects (``connection is bad: invalid sslmode value``,
    ``invalid integer value "5x" for connection option "port"``) is final."""
    answers = [m.group(2).lower() for m in _SERVER_ANSWER.finditer(raw)]
    if answers:
        return all(any(words in answer for words in _COMING) for answer in answers)
    if _client_side(raw):
        return False
    return None


def _client_side(text: str) -> bool:
    """libpq refused the connection string's values before connecting: psycopg says "connection
    is bad" (PQconnectStart failed) with no server named ("connection to server ... failed").
    A host name libpq could not resolve (a host of a service file: psycopg resolves the ones it
    is given itself) is not: it may resolve once its container is up."""
    return (text.startswith("connection is bad: ") and "connection to server" not in text
            and "could not translate host name" not in text)


def retry_at_start(exc: BaseException) -> bool:
    """Tell whether an error met while starting (connecting, checking the database) is one the
    server's coming back mends: wait and try again. Else (authentication refused, no such database
    or role, a bad connection string or option value, pgqueue missing or of another version, a
    missing privilege) the start fails at once.

    A connection refused, a socket that is not there, a timeout, a host name that does not resolve
    (yet: a container not started), a connection that broke: retried. A server that refuses the
    login is retried only when it says, in English, that it cannot take the connection yet
    (starting up, recovering, shutting down, out of connection slots); any other refusal, and
    every refusal of a server whose messages are in another language, is final.
    """
    if is_read_only(exc):
        return True
    verdict = getattr(exc, _VERDICT, None)
    if verdict is not None:
        return bool(verdict)
    sqlstate = getattr(exc, "sqlstate", None)
    if sqlstate is not None:
        return sqlstate.startswith("08") or sqlstate in _OUTAGE_SQLSTATES
    if not (isinstance(exc, ConnectionFailed) or isinstance(exc, psycopg.OperationalError)
            or isinstance(exc.__cause__, psycopg.OperationalError)):
        return False  # a bad connection string (ProgrammingError), pgqueue missing or mismatched
    for raw in (exc, exc.__cause__):
        if isinstance(raw, psycopg.Error):
            verdict = _connect_verdict(str(raw))
            if verdict is not None:
                return verdict
    text = " ".join(str(exc).split()).lower()
    if _client_side(text):
        return False
    if "fatal:" in text:  # the server answered, and refused the login
        return any(words in text for words in _COMING)
    return not any(words in text for words in _REFUSED)


class Stopped(Exception):
    """The start was given up: the worker (or scheduler) was stopped while it connected or waited."""


class StoppedConnecting(ConnectionFailed):
    """The loop's connection attempt (after a loss) was given up for a stop: the loop ends, as
    after a lost connection, without announcing an outage."""

    def __init__(self) -> None:
        super().__init__("stopped while connecting to the database")


#: The connect_timeout of an attempt connect_unless_stopped makes when the conninfo sets none (0,
#: or a negative one: libpq's "wait forever"): an attempt abandoned for a stop ends by then, its
#: thread and socket with it.
_ATTEMPT_CAP = 30


def _attempt_timeout(dsn: str, deadline: float | None) -> int | None:
    """The connect_timeout of one attempt: the conninfo's (or $PGCONNECT_TIMEOUT's), :data:`_ATTEMPT_CAP`
    for none, at most the seconds left until ``deadline`` (at least 2: libpq's minimum). None
    leaves a value psycopg refuses to psycopg (it reports it)."""
    try:
        given = conninfo_to_dict(dsn).get("connect_timeout", os.environ.get("PGCONNECT_TIMEOUT"))
        seconds = int(str(given).strip()) if given is not None and str(given).strip() else 0
    except (ValueError, psycopg.Error):  # (psycopg.connect reports it)
        return None
    if seconds <= 0:
        seconds = _ATTEMPT_CAP
    if deadline is not None:
        seconds = min(seconds, max(2, math.ceil(deadline - time.monotonic())))
    return seconds


class OutOfTime(ConnectionFailed):
    """A connection attempt given up at the start-up deadline (``startup_timeout``)."""

    def __init__(self, what: str = "connection timeout expired") -> None:
        super().__init__(what)


def connect_unless_stopped(dsn: str, stop: threading.Event, deadline: float | None = None) -> psycopg.Connection[Any]:
    """Open an autocommit connection, or raise :class:`Stopped` as soon as ``stop`` is set
    (:class:`OutOfTime` at ``deadline``, a ``time.monotonic()``, if given).

    libpq's connection attempt cannot be interrupted (it takes up to connect_timeout against a
    server that does not answer): it runs on a thread of its own, abandoned if the stop comes first
    (it then closes the connection it gets, if any); its connect_timeout is capped
    (:func:`_attempt_timeout`), so that thread always ends. Raises a :class:`PgQueueError`
    otherwise, marked with libpq's verdict for :func:`retry_at_start` (:func:`_connect_verdict`)."""
    done = threading.Event()
    lock = threading.Lock()
    got: list[psycopg.Connection[Any] | BaseException] = []
    abandoned = False
    options: dict[str, Any] = {}
    seconds = _attempt_timeout(dsn, deadline)
    if seconds is not None:
        options["connect_timeout"] = seconds

    def attempt() -> None:
        result: psycopg.Connection[Any] | BaseException
        verdict: bool | None = None
        try:
            try:
                result = _connect.connect(dsn, autocommit=True, **options)
            except psycopg.Error as raw:
                verdict = _connect_verdict(str(raw))  # (libpq's text, before its translation)
                with translating():
                    raise
        except BaseException as exc:  # (handed to the waiting thread)
            if verdict is not None:
                setattr(exc, _VERDICT, verdict)
            result = exc
        with lock:
            late = abandoned
            if not late:
                got.append(result)
        if late and isinstance(result, psycopg.Connection):
            result.close()
        done.set()

    if stop.is_set():
        raise Stopped()
    threading.Thread(target=attempt, name="pgqueue-connect", daemon=True).start()
    while not done.wait(0.02) and not stop.is_set():
        if deadline is not None and time.monotonic() >= deadline:
            break
    with lock:
        if not got:  # stopped (or out of time) first
            abandoned = True
            if stop.is_set():
                raise Stopped()
            raise OutOfTime()
    result = got[0]
    if isinstance(result, BaseException):
        raise result
    return result


def require_writable(conn: psycopg.Connection[Any]) -> None:
    """Raise a :class:`PgQueueError` with SQLSTATE 25006 if the connection cannot write: a hot
    standby (in recovery), or a session read-only by default (default_transaction_read_only)."""
    with translating():
        row = conn.execute("SELECT pg_catalog.pg_is_in_recovery(), "
                           "pg_catalog.current_setting('transaction_read_only')::boolean").fetchone()
    assert row is not None
    if row[0]:
        raise PgQueueError("the database is read-only (a hot standby: the server is in recovery)",
                           sqlstate=READ_ONLY)
    if row[1]:
        raise PgQueueError("the database is read-only (default_transaction_read_only is on for this session)",
                           sqlstate=READ_ONLY)


def check_flag(name: str, value: object) -> None:
    """Raise TypeError for an option that must be True or False ("no" was taken as true)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}")


def check_startup_timeout(startup_timeout: float | None) -> None:
    """Raise TypeError for a start-up timeout that is not None nor a number, ValueError for one
    that is not 0 to 1e9 seconds ("5" was a raw "'<=' not supported" TypeError: a review)."""
    if startup_timeout is not None and (not isinstance(startup_timeout, (int, float))
                                        or isinstance(startup_timeout, bool)):
        raise TypeError(f"startup_timeout must be None or a number of seconds, got {type(startup_timeout).__name__}")
    if startup_timeout is not None and not 0 <= startup_timeout <= 1e9:
        raise ValueError(f"startup_timeout must be None (wait forever) or 0 to 1e9 seconds, got {quoted(startup_timeout)}")


#: While the start waits, its warning is repeated (with the time waited) this often, in seconds.
_REPEAT_WARNING = 60.0


def warn_if_listening_through_a_pooler(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], queue: str,
                                       poll_max: float) -> bool:
    """Log once (the caller keeps the answer) that a LISTEN connection goes through a pooler,
    whose transaction mode passes no notification on (PgBouncer lends the server connection
    that listened to other clients, and drops what arrives on it meanwhile): the worker then
    finds new messages by polling alone, with no other sign of it (a review)."""
    if not _connect.behind_pooler(conn):
        return False
    log.warning("the LISTEN connection of queue %r goes through a connection pooler (its backend pid is not its "
                "server process's): NOTIFY wake-ups reach it only if the pooler runs in session mode; in "
                "transaction mode the worker finds new messages by polling alone, at most %g s apart (README, "
                "\"Behind a connection pooler\")", queue, poll_max)
    return True


def wait_for_database(dsn: str, check: Callable[[psycopg.Connection[Any]], None], *, stop: threading.Event,
                      timeout: float | None, outage: Outage) -> psycopg.Connection[Any]:
    """Connect, check that the database can be used (``check``, which must also check that it
    takes writes: :func:`require_writable`) and return the connection (the caller closes it),
    trying again while the server cannot be reached or is read-only (see :func:`retry_at_start`):
    after :class:`Backoff`'s waits (0.1 s doubling to 30 s), with one warning when it starts
    failing (``outage``: its end is the caller's to log), the retries at DEBUG and the warning
    repeated every :data:`_REPEAT_WARNING` seconds with the time waited.

    Raises :class:`Stopped` as soon as ``stop`` is set (during a connection attempt or a wait);
    what no retry mends at once; and, once ``timeout`` seconds (None: no limit) have passed, the
    last error, saying how long it waited (``timeout`` 0: the first one, without a retry or a
    warning). ``timeout`` bounds everything: a connection attempt is given up at the deadline
    (its connect_timeout capped to the time left), and so is a check the database does not
    answer (its connection shut down).
    """
    backoff = Backoff()
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    bound = deadline if timeout else None  # (0: one attempt, as long as its connect_timeout)
    warned: float | None = None
    last: BaseException | None = None  # the failure before this attempt's
    at_deadline = False  # this attempt began when the last wait ended at the deadline
    while True:
        try:
            conn = connect_unless_stopped(dsn, stop, bound)
            _checked(conn, check, bound)
            return conn
        except _DATABASE_ERRORS as exc:
            if stop.is_set():
                raise Stopped() from exc
            if not retry_at_start(exc):
                raise
            now = time.monotonic()
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                if not timeout:
                    raise
                # An attempt begun as the last wait ended at the deadline has next to no time:
                # its OutOfTime says less than the failure before it (a read-only server's start
                # gave up with "got no answer in time", a review). One that had time and ran out
                # of it (a check that waits on a lock) is reported as it is (a second review).
                raise _gave_up(last if at_deadline and isinstance(exc, OutOfTime) and last is not None else exc,
                               now - started) from exc
            last = exc
            wait = backoff.next()
            then = f"trying again in {wait:g}s"
            outage.failed(_start_failure(exc), then)
            if warned is None:
                warned = now
            elif now - warned >= _REPEAT_WARNING:
                warned = now
                outage._log.warning("still waiting for the database after %.0f s: %s; %s", now - started,
                                    _start_failure(exc), then)
        at_deadline = left is not None and wait >= left
        if stop.wait(wait if left is None else min(wait, left)):
            raise Stopped()


def _checked(conn: psycopg.Connection[Any], check: Callable[[psycopg.Connection[Any]], None],
             deadline: float | None) -> None:
    """Run the start-up check on a new connection (closed if it fails), giving it up at
    ``deadline``: its connection is shut down, and :class:`OutOfTime` raised."""
    fired = threading.Event()

    def give_up() -> None:
        fired.set()
        _shut_down(conn)

    timer = None
    if deadline is not None:
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), give_up)
        timer.daemon = True
        timer.start()
    try:
        check(conn)
        if fired.is_set():
            raise OutOfTime("the start-up check of the database got no answer in time")
    except BaseException as exc:
        conn.close()
        if fired.is_set() and not isinstance(exc, OutOfTime):
            raise OutOfTime("the start-up check of the database got no answer in time") from exc
        raise
    finally:
        if timer is not None:
            timer.cancel()


def _start_failure(exc: BaseException) -> str:
    """The warning's text for a start that will be tried again."""
    text = _first_line(exc)
    if not is_read_only(exc):
        return f"the database cannot be reached yet: {text}"
    return text if text.startswith("the database is read-only") else f"the database is read-only: {text}"


def _gave_up(exc: BaseException, waited: float) -> PgQueueError:
    """The error a start that ran out of time raises: the last one, saying how long it waited."""
    cls = type(exc) if isinstance(exc, PgQueueError) and not isinstance(exc, OutOfTime) else ConnectionFailed
    message = exc.message if isinstance(exc, PgQueueError) else _first_line(exc)
    return cls(f"{message} (still failing after {waited:.1f} s of retries: gave up)",
               sqlstate=getattr(exc, "sqlstate", None), hint=getattr(exc, "hint", None),
               detail=getattr(exc, "detail", None))


class Backoff:
    """The wait before trying a lost database again: 0.1 s, doubling up to 30 s while it stays
    away, from 0.1 s again after :meth:`reset` (once a call works)."""

    def __init__(self) -> None:
        self._next = _RECONNECT_MIN

    def next(self) -> float:
        """Return the wait before the next attempt, and double the one after it."""
        wait, self._next = self._next, min(self._next * 2, _RECONNECT_MAX)
        return wait

    def reset(self) -> None:
        self._next = _RECONNECT_MIN


@dataclass(frozen=True)
class Result:
    """What became of one delivery of a message, passed to the ``on_result`` hook.

    ``acknowledged`` is what the database answered: False means the worker no longer held
    the message (its lease ran out and it was delivered again), so the outcome was not
    recorded and the message will be (or was) handled by another delivery.
    """

    message: Message
    outcome: Outcome
    acknowledged: bool
    error: BaseException | None = None
    duration: float = 0.0


def _describe(exc: BaseException) -> str:
    """Return the one-line error text stored with a failed message (the client's own)."""
    return error_text(exc)


def is_async_handler(handler: object) -> bool | None:
    """Tell whether a handler is a coroutine function (True), the :class:`AsyncWorker`'s kind,
    or a plain one (False), the :class:`Worker`'s; None for a :class:`Tasks` registry with
    nothing registered (it dead-letters every message: either worker runs it).

    An object whose ``__call__`` is a coroutine function counts as one, and so does a registry of
    coroutine functions or one whose only handler is a coroutine-function default.
    """
    if isinstance(handler, Tasks):
        if handler.is_async or handler.names:
            return handler.is_async
        default = handler._default  # no task registered: the default, if any, decides
        return None if default is None else bool(is_async_handler(default))
    return is_coroutine_callable(handler)


#: What a handler may raise that stops the worker as well (the message is failed first): the
#: process is asked to end, and the worker's run() raises it once the worker is shut down.
_FATAL = (KeyboardInterrupt, SystemExit)


#: The longest lease a worker takes, in milliseconds (a year, as the extension's lock_ms).
_MAX_LEASE_MS = 31_536_000_000


def _check_types(*, concurrency: object, batch_size: object, lock_ms: object, poll_min: object, poll_max: object,
                 shutdown_grace: object, timeout: object) -> None:
    """Raise TypeError for worker options of the wrong kind, before their ranges are compared: a
    str was a raw "'<' not supported" TypeError, a float concurrency failed in run(), and a
    timeout of "x" or a handler of None were taken and every message went to the dead letters
    (a review)."""
    for name, value, optional in (("concurrency", concurrency, False), ("batch_size", batch_size, True),
                                  ("lock_ms", lock_ms, True)):
        if not (value is None and optional) and (not isinstance(value, int) or isinstance(value, bool)):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    for name, value in (("poll_min", poll_min), ("poll_max", poll_max), ("shutdown_grace", shutdown_grace)):
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if timeout is not None and not callable(timeout) and (
            not isinstance(timeout, (int, float)) or isinstance(timeout, bool)):
        raise TypeError(f"timeout must be seconds or a function of the message, got {type(timeout).__name__}")


def check_options(*, concurrency: int, batch_size: int | None, lock_ms: int | None, poll_min: float,
                  poll_max: float, shutdown_grace: float, timeout: Timeout | None) -> None:
    """Raise TypeError for worker options of the wrong kind, ValueError for those out of range."""
    _check_types(concurrency=concurrency, batch_size=batch_size, lock_ms=lock_ms, poll_min=poll_min,
                 poll_max=poll_max, shutdown_grace=shutdown_grace, timeout=timeout)
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {quoted(concurrency)}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {quoted(batch_size)}")
    if lock_ms is not None and not 1 <= lock_ms <= _MAX_LEASE_MS:
        # (2**63 was taken: a traceback in the heartbeats' thread, then "bigint out of range")
        raise ValueError(f"lock_ms must be from 1 to {_MAX_LEASE_MS} (a year), got {quoted(lock_ms)}")
    if not 0 < poll_min <= poll_max:
        raise ValueError(f"need 0 < poll_min <= poll_max, got {quoted(poll_min)} and {quoted(poll_max)}")
    if shutdown_grace < 0:
        raise ValueError(f"shutdown_grace must be >= 0, got {quoted(shutdown_grace)}")
    if isinstance(timeout, (int, float)) and not 0 < timeout < math.inf:
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {quoted(timeout)}")


def _where(dsn: str) -> tuple[str, str]:
    """The database and the server a conninfo names, for the start log when the start-up check
    recorded none (it records what the connection reached): what the conninfo says, else libpq's
    environment (PGDATABASE, PGHOST, PGPORT), else libpq's defaults."""
    given = conninfo_to_dict(dsn)
    dbname = str(given.get("dbname") or os.environ.get("PGDATABASE") or given.get("user")
                 or os.environ.get("PGUSER") or "?")
    host = str(given.get("host") or given.get("hostaddr") or os.environ.get("PGHOST") or "the default socket")
    port = given.get("port") or os.environ.get("PGPORT")
    return dbname, f"{host}:{port}" if port else host


#: Seconds a connection attempt of a worker may take (libpq's connect_timeout), unless the
#: conninfo sets one: a stop is never kept waiting long by a server that does not answer.
_CONNECT_TIMEOUT = 10


#: libpq's TCP settings of a worker's (and the scheduler's) connections, each unless the conninfo
#: sets it: a network path that dies without closing the connection (a failover whose old host
#: is gone, a firewall's or NAT's entry dropped) is noticed within about a minute, an idle
#: connection by keepalives (30 s, then 3 probes 10 s apart), one with data in flight by
#: tcp_user_timeout (ms). Without them a call waited for the kernel's own: about 15 minutes
#: with data in flight, over 2 hours idle (a LISTEN connection, a long handler's heartbeat
#: connection), the worker stuck meanwhile (a review). Unix sockets ignore them.
_TCP_SETTINGS: dict[str, int] = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                                 "keepalives_count": 3, "tcp_user_timeout": 60_000}


def _worker_conninfo(dsn: str, application_name: str = "pgqueue-worker") -> str:
    """Add application_name (pgqueue-worker), connect_timeout=10 and the keepalives and
    tcp_user_timeout of :data:`_TCP_SETTINGS` to a conninfo that does not set them (nor
    $PGCONNECT_TIMEOUT the timeout)."""
    given = conninfo_to_dict(dsn)
    extra: dict[str, Any] = {}
    if "application_name" not in given:
        extra["application_name"] = application_name
    if "connect_timeout" not in given and not os.environ.get("PGCONNECT_TIMEOUT"):
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    if given.get("keepalives") not in ("0", 0):  # (keepalives=0: the DSN turned them off)
        extra.update({k: v for k, v in _TCP_SETTINGS.items() if k not in given})
    elif "tcp_user_timeout" not in given:
        extra["tcp_user_timeout"] = _TCP_SETTINGS["tcp_user_timeout"]
    return make_conninfo(dsn, **extra) if extra else dsn


#: A delivery's token, (id, attempts): what the worker keys the deliveries in hand by. A message
#: whose lease ran out while the worker held it and that its own fetch leases again is taken over
#: by the delivery in hand (WorkerCore._adopt), which is keyed anew.
Key = tuple[int, int]


def _key(msg: Message) -> Key:
    return msg.id, msg.attempts


def _one_per_message(deliveries: list[Delivery]) -> tuple[list[Delivery], list[Delivery]]:
    """Split deliveries into a first of each message and the rest (later deliveries of a message
    already in the first list): a batch acknowledgement names stale messages by id only, so two
    deliveries of one message never go in one."""
    first: list[Delivery] = []
    rest: list[Delivery] = []
    seen: set[int] = set()
    for d in deliveries:
        (rest if d.message.id in seen else first).append(d)
        seen.add(d.message.id)
    return first, rest


@dataclass(eq=False)
class Delivery:
    """A message in hand, from dequeue until it is acknowledged or given back. ``handle`` is
    the worker's own handle on the running handler (an asyncio task, a thread's job). Each
    dequeue makes one, settled with its own message's token (id, attempts)."""

    message: Message
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    error: BaseException | None = None
    released: bool = False  # stopped at shutdown: give it back
    handle: Any = None
    in_doubt: bool = False  # a call settling it was interrupted: committed or not, unknown

    @property
    def key(self) -> Key:
        return _key(self.message)


class WorkerCore:
    """Lease, run, heartbeat, acknowledge, shut down: the logic both workers share (see the
    module docstring). A worker provides :meth:`_start` (run the handlers of new messages) and
    :meth:`_wake_up` (make its loop look again), drives the steps, and enters its loop."""

    #: The thread of run() while it runs (set by the worker as run() starts).
    _loop_thread: int | None
    #: Whether :meth:`stop` on that thread acts from a thread of its own: a Worker's (its run()
    #: waits on the stop event's lock at start-up); an AsyncWorker's loop waits on none.
    _stop_from_a_thread_on_run: bool = False

    def __init__(
        self,
        name: str,
        conninfo: str,
        handler: Handler,
        *,
        concurrency: int,
        batch_size: int | None,
        lock_ms: int | None,
        listen: bool,
        poll_min: float,
        poll_max: float,
        shutdown_grace: float,
        on_result: Callable[[Result], None] | None,
        timeout: Timeout | None,
        handle_signals: bool,
        startup_timeout: float | None = None,
    ) -> None:
        check_startup_timeout(startup_timeout)
        if not isinstance(conninfo, str):  # the workers' dsn= (5 was an AttributeError in the parser)
            raise TypeError(f"dsn must be a conninfo string or None, got {type(conninfo).__name__}")
        if not callable(handler):  # (None was taken: every message failed, then dead-lettered)
            raise TypeError(f"the handler must be callable, got {type(handler).__name__}")
        check_options(concurrency=concurrency, batch_size=batch_size, lock_ms=lock_ms, poll_min=poll_min,
                      poll_max=poll_max, shutdown_grace=shutdown_grace, timeout=timeout)
        # (listen="no" was taken as true, and an on_result of 5 failed after every message: a review)
        check_flag("listen", listen)
        check_flag("handle_signals", handle_signals)
        if on_result is not None and not callable(on_result):
            raise TypeError(f"on_result must be callable or None, got {type(on_result).__name__}")
        self._name = name
        self._dsn = _worker_conninfo(conninfo)
        self._handler = handler
        self._concurrency = concurrency
        self._batch_size = min(batch_size or concurrency, concurrency, 10000)
        self._lock_ms = lock_ms
        self._listen = listen
        self._poll_min = poll_min
        self._poll_max = poll_max
        self._shutdown_grace = shutdown_grace
        self._on_result = on_result
        self._timeout = timeout
        self._handle_signals = handle_signals
        self._startup_timeout = startup_timeout

        self._started = False
        # Re-entrant: stop() takes it (the watchdog's start), and a signal handler of the
        # caller's may call stop() on a thread that holds it (an AsyncWorker's run() on the
        # loop's thread, inside its claim): a plain lock hung the worker for good (a review)
        self._start_lock = threading.RLock()
        self._signalled = False
        self._stopping = False
        self._stop_event = threading.Event()  # set with _stopping: ends the start-up wait at once
        self._aborting = False
        self._urged = 0  # how many stop(now=True) calls: one during the shutdown's last wait ends it
        self._stop_by: float | None = None  # monotonic end of the shutdown grace, once stopped
        self._call_since: float | None = None  # monotonic start of the loop's call in flight
        self._checking: Any = None  # the start-up check's connection while it runs
        self._reached: tuple[str, str] | None = None  # the database and server the check reached
        self._settings: QueueSettings | None = None  # the queue's, as the check read them
        self._gave_up = False  # the watchdog shut the call in flight down
        self._watchdog: threading.Thread | None = None
        self._ended = threading.Event()  # run() is over (the worker's _run sets it)
        self._notified = False
        self._in_hand: dict[Key, Delivery] = {}  # by token: two deliveries of one message are two
        self._finished: list[Delivery] = []
        self._lease_ms = lock_ms or 30000
        self._grouped = False  # the queue has message groups (read with its settings at start)
        self._reconnect = Backoff()
        self._outage = Outage(log, "database connection")  # the loop's: one warning per outage
        self._recovering = False  # a call failed: settle and renew before the next fetch
        self._conflicts = 0  # conflicts in a row (is_conflict), run again at once up to _CONFLICTS_IN_A_ROW
        self._fatal: BaseException | None = None  # a handler's KeyboardInterrupt or SystemExit

    @property
    def queue_name(self) -> str:
        """The name of the queue this worker consumes."""
        return self._name

    @property
    def in_flight(self) -> int:
        """How many deliveries the worker holds right now (handlers running or to be acknowledged)."""
        return len(self._in_hand)

    def stop(self, *, now: bool = False) -> None:
        """Ask the worker to stop: fetch no more, let in-flight handlers finish (up to
        ``shutdown_grace``), give back the rest; ``run()`` then returns. Callable from any
        thread, before or while the worker runs.

        Called on the thread of a :class:`~pgqueue.Worker`'s ``run()`` while it runs (a signal
        handler of the caller's, with ``handle_signals=False``), the stop is made from a thread
        of its own, a moment later: the handler runs between two bytecodes of that thread, maybe
        inside the lock of the stop event that the start-up's wait for the database holds, which
        setting the event there would wait for for good (a review; the worker's own handlers act
        from a thread too).

        Parameters:
            now: skip (what is left of) the grace period: give back at once what is in hand.
        """
        if self._stop_from_a_thread_on_run and threading.get_ident() == self._loop_thread \
                and not self._ended.is_set():
            threading.Thread(target=self._stop_now, kwargs={"now": now}, name="pgqueue-worker-stop",
                             daemon=True).start()
            return
        self._stop_now(now=now)

    def _stop_now(self, *, now: bool = False) -> None:
        """:meth:`stop`, made at once on the calling thread (the worker's own calls)."""
        self._stopping = True
        self._stop_event.set()
        self._aborting = self._aborting or now
        if now:
            self._urged += 1
        by = time.monotonic() + (0.0 if now else self._shutdown_grace)
        self._stop_by = by if self._stop_by is None else min(self._stop_by, by)
        self._watch_stop()
        self._wake_up()

    def _watch_stop(self) -> None:
        """Once stopped, make sure run() returns even if the database hangs: a thread gives up
        the loop's call that still runs :data:`_STUCK_CALL` seconds after the grace."""
        with self._start_lock:
            if self._watchdog is not None or not self._started or self._ended.is_set():
                return
            watchdog = threading.Thread(target=self._watch, name="pgqueue-stop-watch", daemon=True)
            self._watchdog = watchdog
        watchdog.start()

    def _watch(self) -> None:
        while not self._ended.wait(0.1):
            since, by = self._call_since, self._stop_by
            now = time.monotonic()
            if since is not None and by is not None and now >= max(by, since) + _STUCK_CALL:
                log.warning("stopping: the database has not answered for %.1f s; giving up the call in flight "
                            "(what cannot be given back returns when its lease runs out)", now - since)
                self._call_since = None
                self._gave_up = True
                checking = self._checking  # the start-up check is the loop's call until the loop runs
                _shut_down(checking if checking is not None else self._loop_connection())

    def _loop_connection(self) -> Any:
        """The psycopg connection of the loop's calls, if it has one open (any thread)."""
        raise NotImplementedError

    def _wake_up(self) -> None:
        """Make the worker's loop look again (from any thread)."""
        raise NotImplementedError

    def _start(self, messages: list[Message]) -> None:
        """Start the handler of each newly leased message."""
        raise NotImplementedError

    def _abandon(self, d: Delivery) -> None:
        """At the end of the shutdown grace: stop waiting for a running handler; its message is
        given back (``d.released``) once the worker has let it go (a delivery with no handle,
        whose handler was never started, at once)."""
        raise NotImplementedError

    def _claim_run(self, what: str) -> None:
        with self._start_lock:
            if self._started:
                raise RuntimeError(f"{what} runs once; create a new one")
            self._started = True

    def _on_signal(self, sig: signal.Signals) -> None:
        # A SIGHUP never hurries the stop: a closed terminal often sends two (the shell's, then
        # the kernel's hang-up) and systemd's SendSIGHUP follows its SIGTERM with one; only a
        # SIGINT or SIGTERM after the first signal gives back what is in hand at once.
        if self._signalled and sig == getattr(signal, "SIGHUP", None):
            log.info("%s again: in-flight handlers still finish (SIGINT or SIGTERM stops at once)", sig.name)
            return
        again, self._signalled = self._signalled, True
        if again:
            log.warning("%s again: giving back the messages in hand now", sig.name)
        else:
            log.info("%s: stopping; in-flight handlers get %gs to finish (%s to stop at once)", sig.name,
                     self._shutdown_grace,
                     "send SIGINT or SIGTERM" if sig == getattr(signal, "SIGHUP", None) else "send it again")
        self._stop_now(now=again)

    def _check_server(self) -> bool:
        """Wait for the database, then check its pgqueue version, once: reconnections reach the
        same database.

        A server that cannot be reached yet (refused, no socket, a timeout, starting up, out of
        connection slots...) or is read-only (a hot standby) is tried again after the
        :class:`Backoff`'s waits, logged once (the loop's outage: one warning, one line when it
        connects), for ``startup_timeout`` seconds (None: until it works or the worker is
        stopped). Returns False when the worker was stopped meanwhile: at once while it connects
        or waits; a check the server accepted and then does not answer is given up by stop()'s
        watchdog as it gives up the loop's calls. run() then returns without starting. Raises what
        no retry mends (authentication, no such database, pgqueue missing or of another version)
        at once, and the last error once ``startup_timeout`` has passed."""

        def check(conn: psycopg.Connection[Any]) -> None:
            self._checking = conn
            self._call_since = time.monotonic()
            if self._stopping:
                self._watch_stop()  # stop() came before run(): no watchdog was started then
            try:
                check_server(conn)
                require_writable(conn)  # (a read-only server is waited for; under the stop's watchdog)
                # the queue's settings (_configure): an unknown queue ends the start here, before
                # anything is logged
                self._settings = _execute(conn, _core.settings(self._name))
                # for the start log: what libpq reached (a service file, PGHOSTADDR, one host
                # of several), which the conninfo alone does not say
                self._reached = (conn.info.dbname, f"{conn.info.host}:{conn.info.port}")
            finally:
                self._call_since = None
                self._checking = None

        try:
            conn = wait_for_database(self._dsn, check, stop=self._stop_event, timeout=self._startup_timeout,
                                     outage=self._outage)
        except Stopped:
            self._ended.set()  # run() ends here, and the stop watchdog (if any) with it
            if self._gave_up:
                log.warning("stopped before the start-up check of the database was answered: not started")
            else:
                log.info("stopped while waiting for the database: not started")
            return False
        except BaseException:
            self._ended.set()
            raise
        conn.close()
        self._outage.worked()  # "database connection works again", after a wait
        return True

    def _started_log(self, settings_notify: bool, how: str) -> None:
        """Log the start; turn LISTEN off for a queue whose notify is off."""
        if self._listen and not settings_notify:
            # No NOTIFY would ever come: do not hold a LISTEN connection for nothing.
            self._listen = False
            log.info("queue %r has notify off: polling only, no LISTEN (for instant wake-ups turn it on "
                     "with `pgqueue queue alter %s --notify`, then restart the worker: a running worker "
                     "does not start listening)", self._name, self._name)
        dbname, server = self._reached or _where(self._dsn)
        log.info("worker started: queue %r in database %s on %s, concurrency %d (%s), lease %d ms",
                 self._name, dbname, server, self._concurrency, how, self._lease_ms)

    # -- the steps: each yields the calls it needs run ------------------------------------------

    def _configure(self) -> Step[bool]:
        """Read the queue's settings; return its ``notify``.

        The lease (``lock_ms``, else the queue's) is fixed here: every dequeue and heartbeat
        asks for that length, the one the heartbeats' interval is a third of. A queue's lock_ms
        changed later takes effect when the worker restarts (passing None instead would lease
        for the queue's lock_ms of the moment, and a lowered one would run out between beats).
        """
        settings = self._settings  # read by the start-up check
        if settings is None:
            settings = yield _core.settings(self._name)
        self._lease_ms = self._lock_ms or settings.lock_ms
        # (whether a queue has groups is fixed when it is made: queue_alter changes the limit only)
        self._grouped = settings.group_concurrency is not None
        return bool(settings.notify)

    def _complete_and_fetch(self) -> Step[tuple[int, int | None]]:
        """Complete the finished deliveries whose handler returned and lease messages for the
        slots free after that, in one statement (``message_complete_and_dequeue``). Returns
        (wanted, got); got is None when there was nothing to complete or no slot to fill. An
        error propagates (a database error, or a KeyboardInterrupt or cancellation that lands
        while the call is in flight), the deliveries kept to be acknowledged again (see
        :meth:`_put_back`)."""
        done, _ = _one_per_message([d for d in self._finished if d.error is None and not d.released])
        done = done[:_core.MAX_BATCH]  # the most one call takes: the rest wait for the next round
        want = min(self._concurrency - len(self._in_hand) + len(done), self._batch_size)
        if not done or want <= 0:
            return 0, None
        self._notified = False
        taken = {id(d) for d in done}
        self._finished = [d for d in self._finished if id(d) not in taken]
        try:
            messages, lost = yield _core.complete_and_dequeue(self._name, [d.message for d in done], want,
                                                              lock_ms=self._lease_ms)
        except BaseException as exc:
            self._put_back(done, done, exc)
            raise
        # (the call's take leaves the acknowledged messages out: a finished delivery whose
        # lease ran out and that nobody took is completed, not taken back by its own call)
        results = self._completed(done, lost)
        # the new messages in hand before the callers' on_result runs (a KeyboardInterrupt there
        # would leave them leased, untracked, until their lease ran out)
        self._take_in(messages)
        for result in results:
            self._report(result)
        return want, len(messages)

    def _fetch(self, want: int) -> Step[int]:
        """Lease up to ``want`` messages and start their handlers."""
        messages = yield _core.dequeue(self._name, want, lock_ms=self._lease_ms)
        self._take_in(messages)
        return len(messages)

    def _take_in(self, messages: list[Message]) -> None:
        """Start the handlers of newly leased messages, or, if the worker was stopped while the
        call that leased them ran, give them back unstarted (the shutdown settles them)."""
        if not self._stopping:
            self._start(messages)
            return
        for msg in self._adopt(messages):
            d = Delivery(msg)
            d.released = True
            self._hold(d)
            self._finish(d)

    def _until_due(self, sleep: float) -> Step[float]:
        """Shorten ``sleep`` to end when the queue's next scheduled message is due (by the
        server's clock, which due times are kept in)."""
        due_in = yield _core.next_due_in(self._name)
        if due_in is None:
            return sleep
        # Due but not delivered to us: another consumer holds it right now. Back off.
        return sleep if due_in <= 0 else min(sleep, due_in + 0.002)

    def _after_round(self, want: int, got: int | None, delay: float) -> Step[tuple[float, float]]:
        """After a round that called the database: (the poll delay after the next, the sleep now)."""
        self._reconnect.reset()
        self._outage.worked()
        if got == want:
            return self._poll_min, 0.0  # there may be more: fetch again as soon as a slot is free
        if got:
            delay = self._poll_min
        sleep, delay = delay, min(delay * 2, self._poll_max)
        sleep = yield from self._until_due(sleep)
        return delay, sleep

    def _put_back(self, unsettled: list[Delivery], in_flight: list[Delivery], exc: BaseException) -> None:
        """Keep deliveries whose settling call failed or was interrupted to settle again: at the
        next round, or by the shutdown (after a KeyboardInterrupt or a cancellation too: else
        they would stay leased until their leases ran out). ``in_flight``: those of the call
        that was under way, which the server may have committed all the same, unless ``exc``,
        what ended it, is a conflict (40001, 40P01: rolled back whole, and an acknowledgement
        sent again that is refused as stale says the lease ran out, not that the call
        committed)."""
        if not is_conflict(exc):
            for d in in_flight:
                d.in_doubt = True
        self._finished = unsettled + self._finished

    def _settle(self) -> Step[bool]:
        """Acknowledge the finished deliveries; True if one went back on the queue. An error
        propagates after what was settled is reported, the rest kept to settle again (see
        :meth:`_put_back`)."""
        if not self._finished:
            return False
        batch, self._finished = self._finished, []
        requeued = False
        done = [d for d in batch if d.error is None and not d.released]
        results: list[Result] = []
        error: BaseException | None = None
        in_flight: list[Delivery] = []
        try:
            while done:  # in turns when a message has two deliveries here (see _one_per_message)
                in_flight, done = _one_per_message(done)
                # at most MAX_BATCH a call (a worker of more than 10,000 handlers, or timed-out
                # handlers still running beside them, can finish more in one round)
                in_flight, done = in_flight[:_core.MAX_BATCH], in_flight[_core.MAX_BATCH:] + done
                lost = yield _core.complete_many([d.message for d in in_flight])
                results += self._completed(in_flight, lost)
            for d in batch:
                in_flight = [d]
                if d.released:
                    results.append((yield from self._release(d)))
                    requeued = True
                elif d.error is not None:
                    results.append((yield from self._fail(d)))
                    requeued = requeued or results[-1].outcome == "retried"
        except BaseException as exc:
            self._put_back([d for d in batch if self._in_hand.get(d.key) is d], in_flight, exc)
            error = exc
        for result in results:
            self._report(result)
        if error is not None:
            raise error
        return requeued

    def _fail(self, d: Delivery) -> Step[Result]:
        assert d.error is not None
        msg = d.message
        if _core.rejections(d.error):  # a Reject, or a group of them: no retry can fix it, dead-letter it now
            reason = _core.rejection_text(d.error)
            ok = yield _core.reject(msg, reason)
            self._let_go(d)
            if ok:
                log.warning("message %d rejected: %s; moved to the dead letters", msg.id, reason)
            else:
                self._lost_log(d, f"rejected: {reason}")
            return Result(msg, "dead", ok, d.error, self._took(d))
        # retried or dead, as the server decided with the queue's max_attempts of the moment (a
        # queue_alter may have changed it since the worker started)
        ok, last = yield _core.fail_reporting(msg, _describe(d.error))
        self._let_go(d)
        if ok:
            log.warning("message %d failed (attempt %d): %s; %s", msg.id, msg.attempts, _describe(d.error),
                        "moved to the dead letters" if last else "will be retried")
        else:
            self._lost_log(d, f"failed: {_describe(d.error)}")
        log.debug("message %d: handler traceback", msg.id, exc_info=d.error)
        return Result(msg, "dead" if last else "retried", ok, d.error, self._took(d))

    def _release(self, d: Delivery) -> Step[Result]:
        """Give a message back unprocessed, due now (its attempts count stays)."""
        ok = yield _core.defer(d.message)
        self._let_go(d)
        if ok:
            log.info("message %d given back (its handler had not finished)", d.message.id)
        else:
            self._lost_log(d, "given back")
        return Result(d.message, "released", ok, None, self._took(d))

    def _loop_until_stopped(self) -> Step[None]:
        delay = self._poll_min  # the next sleep if the queue is empty
        next_poll = 0.0  # monotonic time of the next dequeue, when there is a free slot
        retry_at = 0.0  # after a lost connection: no call before then (a notification included)
        self._notified = True
        while not self._stopping:
            if time.monotonic() < retry_at:
                yield Wait(retry_at - time.monotonic())
                continue
            # Acknowledge and fetch in one statement when both are due (one transaction per
            # message in lease mode); failures and releases are settled alone.
            want, got = 0, None
            try:
                if self._recovering:
                    yield from self._recover()
                # (no fetch once stopping: a stop that came during the settling below, say). On
                # a queue with groups an acknowledgement hands its group's turn to the next
                # message, which the same call takes: so a finished delivery is acknowledged with
                # a fetch at once, not at the next poll (on a queue of few busy groups the worker
                # took one message a poll: 18 a second on one group of limit 1, a review)
                if not self._stopping and (self._notified or time.monotonic() >= next_poll
                                           or (self._grouped and self._finished)):
                    want, got = yield from self._complete_and_fetch()
                if (yield from self._settle()):
                    next_poll = 0.0  # a retry may be due soon: look again
                free = self._concurrency - len(self._in_hand)
                if got is None and free > 0 and not self._stopping and (self._notified or time.monotonic() >= next_poll):
                    self._notified = False
                    want = min(free, self._batch_size)
                    got = yield from self._fetch(want)
                if got is not None:
                    delay, sleep = yield from self._after_round(want, got, delay)
                    next_poll = time.monotonic() + sleep
                self._conflicts = 0  # a round that worked
            except _DATABASE_ERRORS as exc:
                if is_conflict(exc) and self._conflicts < _CONFLICTS_IN_A_ROW and not self._gave_up:
                    # Rolled back whole (nothing acknowledged or taken): the round runs again,
                    # settling and renewing first, on the same connection, after a random wait
                    # that grows with the conflicts in a row (workers that all lost the race for
                    # the same head rows, at REPEATABLE READ, raced again at once: up to 21 in a
                    # row in a test of three workers)
                    self._conflicts += 1
                    self._recovering = True
                    next_poll = 0.0
                    retry_at = time.monotonic() + _conflict_wait(self._conflicts)
                    log.debug("database call conflicted with another transaction (%s, %d in a row): %s; "
                              "running it again", getattr(exc, "sqlstate", None), self._conflicts, _first_line(exc))
                    continue
                self._conflicts = 0
                if not is_connection_error(exc):
                    raise  # the queue was dropped, or a bug: stop with it
                wait = self._reconnect.next()
                self._recovering = True
                # once stopping, the loop ends here: nothing to reconnect (a call the stop's
                # watchdog gave up was announced by it)
                if not self._gave_up and not isinstance(exc, StoppedConnecting):
                    self._outage.failed(f"{_failure(exc)}: {_first_line(exc)}",
                                        "stopping" if self._stopping else f"reconnecting in {wait:g}s")
                retry_at = next_poll = time.monotonic() + wait
            free = self._concurrency - len(self._in_hand)
            yield Wait(max(0.0, next_poll - time.monotonic()) if free > 0 else 1.0)

    def _recover(self) -> Step[None]:
        """The first round after a failed call, before any fetch: acknowledge the deliveries that
        finished meanwhile and renew the leases of the handlers still running, on the loop's
        connection. A lease that ran out during an outage still belongs to this worker until
        another delivery takes it (fencing is by delivery); a fetch first (the take runs first in
        ``message_complete_and_dequeue``, and leaves out only the messages it acknowledges) would
        take the running handlers' messages again and run them twice."""
        yield from self._settle()
        held = self._held()  # one call for all (a chunk of MAX_BATCH each)
        for start in range(0, len(held), _core.MAX_BATCH):
            yield self._beat(held[start:start + _core.MAX_BATCH])  # a lost one: the heartbeats report it
        self._recovering = False

    def _drain(self) -> Step[None]:
        """Let running handlers finish within shutdown_grace, stop waiting for the rest (a
        coroutine is cancelled, a thread runs on unwatched) and give their messages back."""
        running = self._running()
        interrupted: list[BaseException] = []  # a cancellation or KeyboardInterrupt during the waits
        if running and not self._aborting:
            deadline = self._stop_by or time.monotonic() + self._shutdown_grace  # the grace runs from stop()
            log.info("waiting up to %.3gs for %d in-flight message(s)", max(0.0, deadline - time.monotonic()),
                     len(running))
            while not self._aborting and time.monotonic() < deadline:
                if all(d.finished is not None for d in running):
                    break
                yield from self._drain_step(self._settle_quietly(), interrupted)
                yield from self._drain_wait(min(0.5, max(0.0, deadline - time.monotonic())), interrupted)
        for d in running:
            if d.finished is None:
                self._abandon(d)
        # A cancelled task ends soon (a thread's delivery is finished by its _abandon). One that
        # does not (its handler swallows the cancellation, or cleans up at length) is given up
        # after _GIVE_UP seconds, or at once on another stop(now=True): its message is given back
        # and whatever the task does later is ignored (_finish finishes a delivery once). When a
        # stop(now=True) (a second signal) is what ended the grace, it is given up at once too,
        # after a moment for the tasks that end on their cancellation (a review).
        urged, until = self._urged, time.monotonic() + (_GIVE_UP if not self._aborting else _GIVE_UP_URGED)
        while any(d.finished is None for d in running):
            if self._urged != urged or time.monotonic() >= until:
                for d in running:
                    if d.finished is None:
                        log.warning("message %d: its handler has not ended %s after it was stopped; giving "
                                    "the message back (whatever the handler does later is ignored)",
                                    d.message.id, f"{_GIVE_UP:g} s" if self._urged == urged else "yet")
                        d.released = True
                        self._finish(d)
                break
            yield from self._drain_wait(min(0.05, max(0.0, until - time.monotonic())), interrupted)
        # A delivery finished but not queued for settling: its bookkeeping was interrupted (a
        # KeyboardInterrupt between the two); settle it too rather than leave it leased.
        queued = {id(d) for d in self._finished}
        self._finished += [d for d in list(self._in_hand.values()) if d.finished is not None and id(d) not in queued]
        yield from self._drain_step(self._settle_quietly(), interrupted)
        for d in list(self._in_hand.values()):
            log.warning("message %d: not acknowledged (no database); it returns when its lease runs out",
                        d.message.id)
        if interrupted:
            raise interrupted[0]

    def _drain_step(self, step: Step[None], interrupted: list[BaseException]) -> Step[None]:
        """One of the shutdown's calls (:meth:`_settle_quietly`, which handles the database's
        errors). A KeyboardInterrupt or cancellation that lands in it is taken as in
        :meth:`_drain_wait`: the shutdown goes on at once (the grace's last settle acknowledges
        what finished and gives back the rest; fencing makes an acknowledgement that the interrupted
        call had committed a stale one, changing nothing) and the drain raises it at its end.
        Raised from the call, it skipped the rest of the shutdown: the finished handlers' messages
        unacknowledged, to run again once their leases ran out, and the running ones' leased by no
        one (a review). An interruption of the last settle itself leaves those to their leases."""
        try:
            yield from step
        except (GeneratorExit, *_DATABASE_ERRORS):
            raise
        except BaseException as exc:
            interrupted.append(exc)
            self._stop_now(now=True)

    def _drain_wait(self, timeout: float, interrupted: list[BaseException]) -> Step[None]:
        """One of the shutdown's waits. A cancellation of the run or a KeyboardInterrupt that lands
        in it (a caller's ``asyncio.wait_for`` running out during the grace, Ctrl-C with
        handle_signals=False) stops at once, as ``stop(now=True)`` does: the shutdown goes on,
        giving back what is in hand, and the drain raises it at its end. Raised here, it skipped
        the rest of the shutdown: the running handlers' messages stayed leased by no one until
        their leases ran out, an attempt spent, while the handlers ran on unwatched (a review)."""
        try:
            yield Wait(timeout)
        except BaseException as exc:
            interrupted.append(exc)
            self._stop_now(now=True)

    def _settle_quietly(self) -> Step[None]:
        """Settle during shutdown: a database error is logged, never raised (what cannot be
        acknowledged returns when its lease runs out). A conflict (40001, 40P01: at REPEATABLE
        READ, another transaction changed a message's row while the acknowledgement waited for
        it) rolled the call back whole: it is made again on the same connection after a short
        random wait, as the loop's rounds are, up to _CONFLICTS_IN_A_ROW times and for
        _SHUTDOWN_CONFLICTS_FOR seconds at most, and not after a further stop(now=True); then
        it warns, without reconnecting (the connection is fine). A lost connection
        is tried again once at once, on a new connection (the heartbeats' rule): the loop's
        connection may have died while idle (a terminated backend, a restart that is over) with
        the database there, and a finished handler's message must not be left to run again when
        its lease runs out. Not after the stop's watchdog gave up a call: that database does not
        answer. A connection the error left open (busy with an answer nobody reads, say) is
        closed first: the retry ran on it and failed the same way (a review)."""
        reconnected, conflicts = False, 0
        urged, until = self._urged, time.monotonic() + _SHUTDOWN_CONFLICTS_FOR
        while True:
            try:
                yield from self._settle()
                return
            except _DATABASE_ERRORS as exc:
                if is_conflict(exc):
                    # (not once stop(now=True) came again, nor for more than a few seconds in
                    # all: each call is timed on its own by the stop's watchdog)
                    if (conflicts < _CONFLICTS_IN_A_ROW and not self._gave_up and self._urged == urged
                            and time.monotonic() < until):
                        conflicts += 1
                        log.debug("acknowledging during shutdown conflicted with another transaction (%s, %d "
                                  "in a row): %s; trying again", getattr(exc, "sqlstate", None), conflicts,
                                  _first_line(exc))
                        yield Wait(_conflict_wait(conflicts))
                        continue
                    log.warning("could not acknowledge during shutdown: %s (%d conflicts in a row)",
                                _first_line(exc), conflicts + 1)
                    return
                if reconnected or self._gave_up or not is_connection_error(exc):
                    log.warning("could not acknowledge during shutdown: %s", _first_line(exc))
                    return
                reconnected = True
                log.info("acknowledging during shutdown: %s; trying again on a new connection", _first_line(exc))
                conn = self._loop_connection()
                if conn is not None and not conn.closed:
                    conn.pgconn.finish()  # the next call opens a new one (a closed connection is replaced)

    def _run_steps(self) -> Step[None]:
        """The worker's life once started: the loop, then the shutdown (also when the loop raises:
        what is in hand is given back at once, then the error propagates)."""
        try:
            yield from self._loop_until_stopped()
        except BaseException:
            self._stopping = self._aborting = True
            raise
        finally:
            yield from self._drain()

    # -- bookkeeping ----------------------------------------------------------------------------

    def _limit(self, msg: Message) -> float | None:
        """The handler's time limit for a message (None: no limit). A timeout function's answer
        that is not a number of seconds > 0 (a timedelta, a string, 0, NaN) raises TypeError or
        ValueError: the message fails with it, and the worker goes on."""
        limit: object = self._timeout(msg) if callable(self._timeout) else self._timeout
        if limit is None:
            return None
        if isinstance(limit, bool) or not isinstance(limit, (numbers.Real, Decimal)):  # (numpy's too)
            raise TypeError(f"the timeout function returned a {type(limit).__name__}: expected seconds "
                            "(a number > 0) or None")
        seconds = float(limit)
        if not seconds > 0:
            raise ValueError(f"the timeout function returned {quoted(limit)}: expected seconds > 0 or None")
        return seconds

    def _finish(self, d: Delivery) -> None:
        """A handler is over (returned, raised, timed out or stopped): settle its message next.
        A handler's KeyboardInterrupt or SystemExit stops the worker too: its message is failed,
        the others given back at once, and run() raises it when the worker has shut down.
        A delivery finishes once: a later call (a handler ending after the shutdown gave its
        message back, a return whose event comes after the worker took it) changes nothing."""
        if d.finished is not None:
            return
        d.finished = time.monotonic()
        self._finished.append(d)
        if isinstance(d.error, _FATAL) and not d.released:
            log.warning("message %d: the handler raised %s; stopping the worker", d.message.id,
                        type(d.error).__name__)
            self._fatal = self._fatal or d.error
            self._stop_now(now=True)
        self._wake_up()

    def _raise_fatal(self) -> None:
        """After the shutdown: raise a handler's KeyboardInterrupt or SystemExit, if one came."""
        if self._fatal is not None:
            raise self._fatal

    def _completed(self, done: list[Delivery], lost: list[Message]) -> list[Result]:
        """The results of deliveries acknowledged as completed (``lost``: those of their messages
        whose lease had been lost); they leave the worker's hands."""
        stale = {_key(m) for m in lost}
        results = []
        for d in done:
            log.debug("message %d completed (attempt %d, %.3f s)", d.message.id, d.message.attempts, self._took(d))
            if d.key in stale:
                self._lost_log(d, "finished")
            results.append(Result(d.message, "completed", d.key not in stale, None, self._took(d)))
            self._let_go(d)
        return results

    def _hold(self, d: Delivery) -> None:
        """Take a new delivery in hand (a worker's _start)."""
        self._in_hand[d.key] = d

    def _adopt(self, messages: list[Message]) -> list[Message]:
        """Of newly leased messages, return those to run. A message this worker already holds (its
        handler still running, or finished and not yet acknowledged) came back because its lease
        ran out while the database or this process stalled (heartbeats and acknowledgements
        could not get through), and nobody else took it: the delivery in hand takes the new
        lease (token) over, so its handler is not run a second time beside or after the first,
        and its acknowledgement, with the new token, is accepted."""
        if not self._in_hand:
            return messages
        held = {d.message.id: d for d in self._in_hand.values() if not d.released}
        fresh = []
        for msg in messages:
            d = held.get(msg.id)
            if d is None or d.message.attempts >= msg.attempts:
                fresh.append(msg)
                continue
            log.warning("message %d: leased again (attempt %d) while this worker held it (attempt %d, its "
                        "handler %s): the lease had run out while the database or this process stalled; "
                        "the delivery in hand takes the new lease, the handler is not run again",
                        msg.id, msg.attempts, d.message.attempts, "running" if d.finished is None else "finished")
            self._let_go(d)
            d.message, d.in_doubt = msg, False
            self._in_hand[d.key] = d
        return fresh

    def _let_go(self, d: Delivery) -> None:
        """A delivery is settled: it leaves the worker's hands (another delivery of its message,
        if the worker holds one, stays)."""
        if self._in_hand.get(d.key) is d:
            del self._in_hand[d.key]

    @staticmethod
    def _lost_log(d: Delivery, what: str) -> None:
        """Log an acknowledgement the database refused as stale: the lease had run out (or the
        message had left the queue: cancelled, purged, its queue dropped), or, sent again after
        a call that was interrupted or lost its connection (``d.in_doubt``), that call was
        committed. The Result reports the database's answer (``acknowledged`` False)
        either way: telling the two apart takes another query, and a call lost after its commit
        but before its answer is rare (an interruption that lands while the call waits, on a row
        lock say, cancels it: rolled back, and the acknowledgement sent again is accepted)."""
        msg = d.message
        if d.in_doubt:
            log.warning("message %d: %s (attempt %d), sent again after an interrupted call: refused as "
                        "stale; the interrupted call was committed, the lease ran out, or the message is "
                        "no longer on the queue (cancelled, purged, its queue dropped)", msg.id, what,
                        msg.attempts)
            return
        log.warning("message %d: %s after its lease ran out (attempt %d), or after it left the queue "
                    "(cancelled, purged, its queue dropped); this changed nothing (if the lease ran out: "
                    "it is delivered again, or dead-lettered if that was its last attempt; raise "
                    "lock_ms?)", msg.id, what, msg.attempts)

    @staticmethod
    def _took(d: Delivery) -> float:
        return (d.finished or time.monotonic()) - d.started

    def _report(self, result: Result) -> None:
        if self._on_result is None:
            return
        try:
            self._on_result(result)
        except Exception:
            log.exception("on_result hook failed")

    def _running(self) -> list[Delivery]:
        """The deliveries whose handler still runs (a copy: the heartbeats' thread reads it too)."""
        return [d for d in list(self._in_hand.values()) if d.finished is None]

    # -- heartbeats -----------------------------------------------------------------------------

    def _beat(self, msgs: list[Message]) -> Call[list[Message]]:
        """The heartbeat of held messages, one statement for all (at most ``MAX_BATCH``): renew
        their leases for the worker's lease length; its result is those whose lease was lost."""
        return _core.heartbeat_batch(msgs, self._lease_ms)

    def _held(self) -> list[Message]:
        """The messages whose leases the heartbeats renew: those whose handler is running."""
        return [d.message for d in self._running()]

    def _still_held(self, msg: Message) -> bool:
        """Whether the delivery with this message's token is in hand and its handler running (a
        stale delivery's beat is refused and never repeated; the live one's goes on)."""
        d = self._in_hand.get(_key(msg))
        return d is not None and d.finished is None


def drive(step: Step[T], run: Callable[[Call[Any]], Any], wait: Callable[[float], None]) -> T:
    """Run a step to its end: each call it yields by ``run``, each wait by ``wait`` (the sync
    worker's driver; the async worker's is the same with ``await``)."""
    try:
        todo = next(step)
        while True:
            try:  # what a call or a wait raises is the step's to handle (a KeyboardInterrupt too)
                if isinstance(todo, Wait):
                    wait(todo.timeout)
                    result = None
                else:
                    result = run(todo)
            except BaseException as exc:
                todo = step.throw(exc)
            else:
                todo = step.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
