"""The synchronous client: :class:`Queue`, and :func:`list_queues` / :func:`all_stats` / :func:`all_counters`.

A ``Queue`` works over whatever the caller has, and never commits or closes what it did not
open:

* a **connection string**: it opens its own autocommit connection on first use (and a second
  one for the heartbeats of ``receive``); ``close()`` or leaving ``with Queue(...)`` closes them;
* a **psycopg Connection**: every call runs on it, in the caller's transaction state. On an
  autocommit connection each call is its own transaction; otherwise ``enqueue`` joins the
  caller's transaction and nothing is visible (or leased) until the caller commits;
* a **psycopg_pool ConnectionPool**: each call borrows a connection for its duration (the pool
  commits it when it is given back).

Example::

    with psycopg.connect(dsn) as conn:              # a business transaction
        conn.execute("INSERT INTO orders ...")
        Queue(conn, "emails").enqueue({"order": 42})
    # committed together, or not at all

    with Queue(dsn, "emails") as queue:
        with queue.receive() as msg:                 # completes on success, fails on error
            if msg is not None:
                send(msg.payload)
"""

from __future__ import annotations

import logging
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg.pq import ExecStatus, PipelineStatus, TransactionStatus
from psycopg.pq.abc import PGconn
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool

from pgqueue import _connect, _core, _sql
from pgqueue._core import Call, Delay, When
from pgqueue._lease import Heartbeats, interval
from pgqueue.errors import (
    ConnectionFailed,
    InvalidArgument,
    NeedsReadCommitted,
    PgQueueError,
    SerializationFailure,
    translating,
)
from pgqueue.message import DeadLetter, GroupStats, Message, Pending, QueueCounters, QueueSettings, QueueStats

__all__ = ["Queue", "list_queues", "all_stats", "all_counters", "ConnectionSource"]

T = TypeVar("T")

#: What a Queue can work over: a connection string, a connection or a pool.
ConnectionSource = str | psycopg.Connection[Any] | ConnectionPool[Any]

logger = logging.getLogger("pgqueue")

#: How long the end of a ``receive`` block waits for its heartbeat thread's beat in flight
#: (seconds): a beat stuck on a dead connection is left behind (the thread is a daemon).
STOP_WAIT = 5.0


def _going_on(msg: Message, raised: BaseException | None, *landed: BaseException | None) -> BaseException | None:
    """Tell what a ``receive`` block's exit raises, once its message is settled, instead of
    what it raises already (``raised``: the settling's error, else the block's outcome; None if
    the block returned and the message was settled).

    ``landed`` is what interrupted the stopping of the heartbeats or the settling (a
    KeyboardInterrupt, a SystemExit, a cancellation; an error of the closing). An interruption
    goes on when nothing is raised or in place of an ordinary error or of the GeneratorExit of a
    generator closed around the block (never in place of another
    interruption); an error of the closing goes on only when nothing is raised, and is logged
    when it does not.
    """
    errors = [e for e in landed if e is not None]
    interruptions = [e for e in errors if not isinstance(e, Exception)]
    first = interruptions[0] if interruptions else errors[0] if errors else None
    going = None
    if first is not None and (raised is None or (not isinstance(first, Exception)
                                                 and isinstance(raised, (Exception, GeneratorExit)))):
        going = first
    for err in errors:
        if isinstance(err, Exception) and err is not going:
            logger.warning("message %s on queue %s: stopping the heartbeats of receive() or closing their connection "
                           "failed (%r was raised already): %s: %s", msg.id, msg.queue, raised, type(err).__name__, err)
    return going


#: One lock a caller's connection, shared by every Queue over it (see ``_Connector``).
_CALLER_LOCKS: weakref.WeakKeyDictionary[psycopg.Connection[Any], threading.RLock] = weakref.WeakKeyDictionary()
_CALLER_LOCKS_GUARD = threading.Lock()


def _caller_lock(conn: psycopg.Connection[Any]) -> threading.RLock:
    with _CALLER_LOCKS_GUARD:
        lock = _CALLER_LOCKS.get(conn)
        if lock is None:
            lock = _CALLER_LOCKS[conn] = threading.RLock()
        return lock


def _cursor(conn: psycopg.Connection[Any]) -> psycopg.Cursor[tuple[Any, ...]]:
    """A cursor for pgqueue's statements on ``conn``: one of the connection's ``cursor_factory``
    (a caller's cursor class that logs or counts statements sees pgqueue's too; a
    ``psycopg.ClientCursor`` binds their parameters on the client and sends them by the simple
    query protocol, never prepared, as the caller chose it for), unless that class is a
    ``psycopg.RawCursor`` (or a subclass): its queries take ``$1`` placeholders, not pgqueue's
    ``%(name)s``, and every call failed with a psycopg TypeError; then a plain
    ``psycopg.Cursor``, which binds on the server as a RawCursor does. The caller's own
    statements keep the connection's cursors."""
    factory = conn.cursor_factory
    if isinstance(factory, type) and issubclass(factory, psycopg.RawCursor):
        return psycopg.Cursor(conn, row_factory=tuple_row)
    return conn.cursor(row_factory=tuple_row)


def _execute(conn: psycopg.Connection[Any], call: Call[T], *, lent: bool = False) -> T:
    """Run a call on a connection and return its result.

    ``lent``: the connection is this call's alone (a pool's, or one opened for it), and a call
    that needs READ COMMITTED (``call.read_committed``: PQ009 otherwise, where the database or
    role defaults to another level) runs in a transaction of that level: the first statement of
    the transaction it begins. On an autocommit connection the call runs as one statement first,
    as it does where the default level is READ COMMITTED (PostgreSQL's), and only when refused
    with PQ009, or with 40001 (a change it does not refuse, a ``lock_ms`` say, run at a
    REPEATABLE READ default behind another session's change of the queue), again in a READ
    COMMITTED transaction of its own: no extra round trips in the common case, and no
    transaction block, which a statement-mode pooler refuses. Elsewhere, a caller's or a shared
    connection, the call runs as it is, at the level there. A call refused with 40001 that
    answers when run again (``call.again_on_40001``: a keyed enqueue) runs once more where its
    statement is a transaction of its own: on an autocommit connection outside a transaction,
    or on a lent one."""
    if lent and call.read_committed and conn.info.transaction_status == TransactionStatus.IDLE:
        if conn.autocommit:
            return _read_committed_again(conn, lambda: _statement(conn, call))
        _set_read_committed(conn)  # (psycopg begins the transaction before it)
    elif call.again_on_40001 and (conn.autocommit or lent) and conn.info.transaction_status == TransactionStatus.IDLE:
        try:  # (a transaction of its own: nothing was done, and running it again answers)
            return _statement(conn, call)
        except SerializationFailure:
            if not conn.autocommit:
                with translating():
                    conn.rollback()
    return _statement(conn, call)


def _ended_while_idle(conn: psycopg.Connection[Any]) -> bool:
    """Tell whether ``conn``, one of pgqueue's own connections, is closed, or was ended by the
    server while it sat idle (:func:`pgqueue._core.ended_while_idle`: a restart, a
    ``pg_terminate_backend``, an ``idle_session_timeout``); one found so is closed, for the call
    about to run, which never reached the server, to be made on a new one. A connection another
    thread is using (a beat in flight) is not idle: False."""
    if conn.closed:
        return True
    if not conn.lock.acquire(blocking=False):
        return False
    try:
        ended = _core.ended_while_idle(conn.pgconn)
    finally:
        conn.lock.release()
    if ended:
        conn.close()
    return ended


def _read_committed_again(conn: psycopg.Connection[Any], do: Callable[[], T]) -> T:
    """Run ``do`` on the autocommit connection ``conn`` as it is, and when refused with PQ009 or
    40001 (see :func:`_execute`) again in a READ COMMITTED transaction of its own. The command
    line's queue create/alter/drop use it on their one connection."""
    try:
        return do()
    except (NeedsReadCommitted, SerializationFailure):
        pass  # (refused before anything was done: its statement's transaction is gone)
    with translating(), conn.transaction():  # (an interruption rolls it back, or the pool does)
        _set_read_committed(conn)
        return do()


def _set_read_committed(conn: psycopg.Connection[Any]) -> None:
    """Make the transaction just begun on ``conn`` READ COMMITTED (never prepared: a
    transaction-mode pooler may not keep prepared statements)."""
    with translating(), _cursor(conn) as cur:
        cur.execute(_sql.SET_READ_COMMITTED, prepare=False)


def _statement(conn: psycopg.Connection[Any], call: Call[T]) -> T:
    # (translated: on a closed connection the encodings are not there, ConnectionFailed)
    with translating():
        if call.untranslatable is not None and _core.server_refuses(call, conn.info):
            call = call.untranslatable  # a text the server's encoding cannot hold: its ASCII twin
    try:
        with translating(), _cursor(conn) as cur:
            _core.check_client_bound(call.params, isinstance(cur, psycopg.ClientCursor))
            _core.utf8_texts(conn.info.encoding, cur.adapters)
            _core.psycopg_arrays(call.params, cur.adapters)
            rows = cur.execute(call.query, call.params).fetchall()
            if not rows and call.probe_queue is not None:
                cur.execute(_sql.CHECK_QUEUE, {"queue": call.probe_queue})
    except InvalidArgument as exc:  # a text the encoding cannot hold: the call's ASCII twin, if any
        if exc.sqlstate != "22P05" or call.untranslatable is None \
                or conn.info.transaction_status == TransactionStatus.INERROR:
            raise  # (in a transaction the refusal aborted, the twin would fail with 25P02: this says why)
        return _statement(conn, call.untranslatable)
    return call.result(rows)


#: What :func:`_steps_reading_what_is_left` waits for: the socket readable, or writable.
READABLE, WRITABLE = "r", "w"

#: The results of an answer read on until its end (what else comes is a state not read here;
#: looked up by name: TUPLES_CHUNK, of a chunked stream, is missing from older psycopg releases).
_ANSWERS = frozenset(getattr(ExecStatus, name) for name in (
    "COMMAND_OK", "TUPLES_OK", "EMPTY_QUERY", "FATAL_ERROR", "NONFATAL_ERROR", "SINGLE_TUPLE", "TUPLES_CHUNK")
    if hasattr(ExecStatus, name))

#: The error a COPY FROM STDIN an interruption left open ends with (the server aborts it).
COPY_IN_ABORTED = b"pgqueue: a COPY FROM STDIN an interruption left open is aborted"


def _steps_reading_what_is_left(pgconn: PGconn) -> Iterator[str | None]:
    """Read the rest of an answer an interruption left unread on ``pgconn``, one pass at a time:
    yield :data:`READABLE` or :data:`WRITABLE` for the driver to wait for the socket (bounded),
    None after a pass that did not wait; the driver checks its deadline at every yield (a COPY
    that never ends, or a wait for an answer that does not come, is given up).

    Ordinary results are read until the answer ends; a COPY OUT is drained (its rows thrown
    away, then its final result read); a COPY IN is ended with an error (``COPY_IN_ABORTED``:
    the server aborts the COPY), then read on. A COPY BOTH (replication), a connection in
    pipeline mode (the caller's pipeline: its results are not ours) or a result of a state not
    known here are left as they are: the give-back then fails, and the message waits for its
    lease. Before, a connection left in COPY state (not busy, a COPY result at every read)
    spun here forever, the locks held (a review)."""
    if pgconn.pipeline_status != PipelineStatus.OFF:
        return
    while pgconn.transaction_status == TransactionStatus.ACTIVE:
        if pgconn.is_busy():
            yield READABLE
            pgconn.consume_input()
            continue
        result = pgconn.get_result()
        if result is None:
            return
        if result.status == ExecStatus.COPY_OUT:
            while True:
                nbytes, _ = pgconn.get_copy_data(1)
                if nbytes == -1:  # its end: its final result is read next
                    break
                if nbytes == 0:  # no whole row in yet
                    yield READABLE
                    pgconn.consume_input()
                else:
                    yield None
        elif result.status == ExecStatus.COPY_IN:
            while pgconn.put_copy_end(COPY_IN_ABORTED) == 0:  # not queued (non-blocking): room first
                yield WRITABLE
            while pgconn.flush() != 0:
                yield WRITABLE
        elif result.status not in _ANSWERS:
            return  # COPY BOTH, or a state not known here
        yield None


def _read_what_is_left(conn: psycopg.Connection[Any] | None, timeout: float = 5.0) -> None:
    """Read the rest of an answer an interruption left unread on ``conn``.

    A KeyboardInterrupt that lands while psycopg waits for an answer makes it cancel the
    statement and read the answer on; one that lands inside that reading (between two of its
    polls) leaves the answer unread and the connection busy: every later statement on it failed
    ("another command is already in progress"), the give-back of a message whose COMMIT answered
    then included, which stayed leased until its lease ran out (CI, test_client.py). The answer
    is read here (:func:`_steps_reading_what_is_left`), for up to ``timeout`` seconds in all;
    a lost connection is left as it is."""
    if conn is None or conn.closed:
        return
    pgconn = conn.pgconn
    deadline = time.monotonic() + timeout
    try:
        for wait in _steps_reading_what_is_left(pgconn):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if wait is not None:
                fds = [pgconn.socket]
                select.select(fds if wait == READABLE else [], fds if wait == WRITABLE else [], [], min(remaining, 0.1))
    except (psycopg.Error, OSError):  # the connection is lost: the next call says so
        return


class _Connector:
    """Run calls over a DSN, a caller's connection or a pool, by the rules of the module docstring.

    Threads may share it. psycopg serialises the statements on one connection, but not a
    transaction block: the dequeue of ``receive`` runs in one (:meth:`leasing`), and another
    thread's statement sent meanwhile would join it, or its own block nest in it as a
    savepoint and end it at the wrong level, leaving the connection in a transaction that
    nothing commits. So every use of a shared connection, our own or a caller's (whichever
    Queues use it), holds that connection's ``_shared_lock``: a statement, or the dequeue's
    short block, never a ``receive`` block's body. A pool lends each call a connection of its
    own.
    """

    def __init__(self, source: ConnectionSource) -> None:
        self._dsn: str | None = None
        self._conn: psycopg.Connection[Any] | None = None
        self._pool: ConnectionPool[Any] | None = None
        if isinstance(source, str):
            self._dsn = source
        elif isinstance(source, psycopg.Connection):
            self._conn = source
        elif isinstance(source, ConnectionPool):
            self._pool = source
        else:
            hint = " (use AsyncQueue for async connections and pools)" if isinstance(
                source, psycopg.AsyncConnection) else ""
            raise TypeError(
                "expected a connection string, a psycopg.Connection or a psycopg_pool.ConnectionPool, "
                f"got {type(source).__name__}{hint}"
            )
        self._lock = threading.Lock()
        self._shared_lock = threading.RLock() if self._conn is None else _caller_lock(self._conn)
        self._own: psycopg.Connection[Any] | None = None
        self._own_heartbeat: psycopg.Connection[Any] | None = None
        self._closed = False
        # a caller's connection's session, recorded while it is open (see settle_elsewhere)
        self._caller_session: _core.CallerSession | None = None
        self._caller_read = False  # whether _caller_session was read (None then: not provable)

    def conninfo(self) -> str:
        """Return a connection string that reaches the same database (for extra connections)."""
        if self._dsn is not None:
            return self._dsn
        if self._conn is not None:
            with translating():  # (a closed connection's psycopg error: ConnectionFailed, a review)
                return _core.conninfo_of(self._conn.pgconn)
        assert self._pool is not None
        conninfo = self._pool.conninfo() if callable(self._pool.conninfo) else self._pool.conninfo
        kwargs = self._pool.kwargs() if callable(self._pool.kwargs) else self._pool.kwargs
        return _core.pool_conninfo(conninfo, kwargs)

    def _open(self, attr: str) -> psycopg.Connection[Any]:
        with self._lock:
            if self._closed:
                raise PgQueueError("the queue is closed")
            conn: psycopg.Connection[Any] | None = getattr(self, attr)
            if conn is None or conn.closed:
                assert self._dsn is not None
                with translating():
                    conn = _connect.connect(self._dsn, autocommit=True)
                setattr(self, attr, conn)
            return conn

    def _live(self, attr: str) -> psycopg.Connection[Any]:
        """Our own connection ``attr``, opened if need be, and opened again if the server ended
        its session while it sat idle (:func:`_ended_while_idle`): the call about to run on it
        failed with ConnectionFailed after a server restart or a ``pg_terminate_backend`` of idle
        sessions (57P01), though it never reached the server (a review)."""
        conn: psycopg.Connection[Any] | None = getattr(self, attr)
        if conn is None or _ended_while_idle(conn):
            conn = self._open(attr)
        return conn

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """Lend the connection a call runs on (a shared one with its lock held)."""
        if self._pool is not None:
            with translating(), self._pool.connection() as conn:
                yield conn
        else:
            with self._shared_lock:
                yield self._live("_own") if self._conn is None else self._conn

    @contextmanager
    def leasing(self) -> Iterator[tuple[psycopg.Connection[Any], bool]]:
        """Lend the connection for a dequeue whose leases are committed only after the block
        returns, and whether the dequeue runs inside a transaction of the caller's connection
        (then no heartbeat is needed: see :meth:`heartbeat_runner`).

        On an autocommit connection outside a transaction (our own, or a caller's or a pool's
        in autocommit mode) the block runs in a transaction of its own; otherwise in the
        connection's transaction: the caller's (one it opened with ``conn.transaction()`` on an
        autocommit connection too), or the pool's, committed when the connection is given back.
        Either way what the block read is in the caller's hands before the leases can be
        committed, and an exception that interrupts the block rolls them back.

        Inside the caller's transaction the dequeue is a plain statement in it, as every other
        call is, not a savepoint: a refusal (QueueNotFound, say) aborts the caller's
        transaction (docs/guarantees.md), as it does on an AsyncConnection, whose dequeue is
        one statement. Before, inside a caller's ``conn.transaction()`` on an autocommit
        connection the dequeue ran in a ``conn.transaction()`` of its own, which nested as a
        savepoint: it rolled the refusal back and left the caller's transaction usable, unlike
        every other call (a review).

        The caller's transaction is told from the connection's mode and its status before the
        dequeue, not read again later: a statement another thread has in flight on it shows
        ACTIVE, which on an autocommit connection is no transaction.
        """
        with self.connection() as conn:
            in_transaction = self._conn is not None and (not conn.autocommit or conn.info.transaction_status in (
                TransactionStatus.INTRANS, TransactionStatus.INERROR))
            if conn.autocommit and not in_transaction:
                if self._conn is not None and not self._caller_read and not conn.closed:
                    with translating():  # for settle_elsewhere
                        pid = _execute(conn, _core.backend_pid())  # (once: a round trip)
                        self._caller_session = _core.caller_session(conn.pgconn, pid)
                    self._caller_read = True
                with translating(), ExitStack() as begun:
                    try:
                        begun.enter_context(conn.transaction())
                    except psycopg.OperationalError as exc:
                        # Our own connection, closed by the server's idle_session_timeout while
                        # it sat idle: the BEGIN found it so (nothing ran), and the dequeue is made
                        # on a new one at once, as every single call is (_on_own; a review: the
                        # block failed with ConnectionFailed)
                        if self._conn is not None or self._pool is not None or exc.sqlstate != _core.IDLE_SESSION_TIMEOUT:
                            raise
                        conn.close()
                        conn = self._open("_own")
                        begun.enter_context(conn.transaction())
                    yield conn, in_transaction
            else:
                yield conn, in_transaction

    def run(self, call: Call[T]) -> T:
        """Execute a call and return its result.

        A KeyboardInterrupt (or SystemExit) that lands while psycopg sends the statement or reads
        its answer can leave the answer unread and the connection busy: every later call on it
        failed ("another command is already in progress"), on our own connection for good (it
        is replaced only once closed), the give-back of a worker's shutdown or of the command
        line's ``dequeue`` included (a review: 62 of 200 interrupted enqueue loops). What is
        left is read here (:meth:`read_what_is_left`, at most 5 seconds) before it propagates;
        a pool drops a busy connection it is given back."""
        try:
            return self._run(call)
        except BaseException as exc:
            if not isinstance(exc, Exception) and self._pool is None:
                self.read_what_is_left()
            raise

    def _run(self, call: Call[T]) -> T:
        if self._conn is not None:
            with self._shared_lock:
                return _execute(self._conn, call)
        if self._pool is None:
            if call.read_committed:
                return self._run_alone(call)
            # Our own connection while it is open, without the opening lock and the context
            # manager of connection() (a worker's loop makes thousands of calls a second here).
            with self._shared_lock:
                return self._on_own("_own", call)
        with self.connection() as conn:
            return _execute(conn, call, lent=True)

    def _on_own(self, attr: str, call: Call[T]) -> T:
        """Run a call on our own connection ``attr`` (opened if need be). One that the server
        closed while it sat idle (idle_session_timeout: :data:`pgqueue._core.IDLE_SESSION_TIMEOUT`,
        the call never ran) is opened again and the call made on it at once: the first call
        after each such timeout failed with ConnectionFailed, and a worker logged an outage and
        waited its back-off every time (a review). One the server ended while it sat idle
        otherwise (a restart, 57P01) is found so before the call is sent (:meth:`_live`)."""
        conn = self._live(attr)
        try:
            return _execute(conn, call)
        except PgQueueError as exc:
            if exc.sqlstate != _core.IDLE_SESSION_TIMEOUT:
                raise
        conn.close()
        return _execute(self._open(attr), call)

    def _run_alone(self, call: Call[T]) -> T:
        """Run a call that needs READ COMMITTED (a queue's creation, change or drop) on a
        connection opened for it alone, in a READ COMMITTED transaction (:func:`_execute`): on
        a database that defaults to REPEATABLE READ, ``Queue(dsn, ...).create()`` was refused
        (PQ009). Not on the shared connection, whose other users' statements would join the
        transaction (or an interruption leave it open), and with no session setting, which a
        transaction-mode pooler would lend to other clients. Closed after it: an interruption
        closes it, and the server rolls back."""
        assert self._dsn is not None
        if self._closed:
            raise PgQueueError("the queue is closed")
        with translating():
            conn = _connect.connect(self._dsn, autocommit=True)
        with conn:
            return _execute(conn, call, lent=True)

    @contextmanager
    def heartbeat_runner(self, in_transaction: bool = False) -> Iterator[Callable[[Call[bool]], bool] | None]:
        """Lend a function that runs a heartbeat on a connection other than the one of the calls.

        Yields None when no heartbeat is needed: the dequeue ran inside a transaction of the
        caller's connection (``in_transaction``, from :meth:`leasing`), whose row lock on the
        leased message keeps every other consumer away (they skip locked rows) until it ends; a
        heartbeat from another connection would only wait on that lock.
        """
        if self._pool is not None:
            pool = self._pool

            def on_pool(call: Call[bool]) -> bool:
                with translating(), pool.connection() as conn:
                    return _execute(conn, call)

            yield on_pool
        elif self._conn is not None:
            if in_transaction:
                yield None
                return
            # The caller's autocommit connection: a heartbeat on it could land inside a
            # transaction the block opens. Use a private connection to the same server, with
            # the same credentials, for the duration of the block (opened again after a loss,
            # so that the beat retried at once after one runs on a live connection).
            with translating():  # (the caller's connection closed meanwhile: ConnectionFailed, a review)
                conninfo = _core.conninfo_of(self._conn.pgconn)
            sides: list[psycopg.Connection[Any]] = []

            def side() -> psycopg.Connection[Any]:
                # (one the server ended while it sat idle between beats, an idle_session_timeout
                # shorter than the beats' interval say, too: each beat logged a warning, a review)
                if not sides or _ended_while_idle(sides[-1]):
                    with translating():
                        sides.append(_connect.connect(conninfo, autocommit=True))
                return sides[-1]

            try:
                side()  # connect now: a failure shows at the block's start
                yield lambda call: _execute(side(), call)
            finally:
                for conn in sides:
                    conn.close()
        else:
            self._open("_own_heartbeat")  # connect now: a failure shows at the block's start
            # Each beat takes the connection again: opened anew after a loss (see pgqueue._lease).
            yield lambda call: self._on_own("_own_heartbeat", call)

    def read_what_is_left(self) -> None:
        """After an interruption: read what it left unread on the shared connection, a caller's or
        our own (:func:`_read_what_is_left`; a pool drops a busy connection it is given back)."""
        conn = self._conn if self._conn is not None else self._own
        if conn is None:
            return
        # psycopg's own lock too: a statement another thread runs on a caller's connection
        # without pgqueue (the caller's code) holds it while it is busy, and is waited for
        with self._shared_lock, conn.lock:
            _read_what_is_left(conn)

    def retries_settling(self) -> bool:
        """Whether a settling call interrupted on its way can run again: on our own connection, a
        pool's, or a caller's in autocommit mode (never inside a caller's transaction)."""
        return self._conn is None or self._conn.autocommit

    def replaces_lost(self) -> bool:
        """Whether a call after a lost connection runs on a new one (our own, or a pool's; never
        a caller's connection)."""
        return self._conn is None

    def settles_elsewhere(self) -> bool:
        """Whether a lease committed on a caller's autocommit connection, which is closed now, can
        be settled on a connection of its own (:meth:`settle_elsewhere`)."""
        return self._conn is not None and self._conn.closed and self._caller_session is not None

    def settle_elsewhere(self, call: Call[bool]) -> bool:
        """Run a settling call on a connection opened for it alone to the caller's server, with
        the caller's credentials (recorded by :meth:`leasing` while the caller's connection was
        open), closed after it.

        For a ``receive`` whose lease was committed on the caller's autocommit connection and
        whose connection was closed since: by the caller, or by psycopg (3.3 closes a connection
        when a second interruption lands during its cancel of an interrupted statement, a
        Ctrl-C twice or an anyio ``move_on_after``). The give-back failed on it ("the connection
        is closed") and the message stayed leased until its lease ran out (a review). The token
        makes it safe: a lease taken over since makes the call stale (False).

        The closed connection's server session is ended first if it is still there
        (:func:`pgqueue._core.end_session`): psycopg closes the connection without waiting for
        its cancel, and a statement of the block running on in the session (committed at its
        end: autocommit) ran beside the message's next delivery to another consumer (a review).
        If the session does not exit within 5 seconds, or a session with its pid is not provably
        the caller's (another client address or port: a NAT, a proxy, a pooler), the message is
        not settled: its lease runs out (ConnectionFailed). The connection is opened with a
        ``connect_timeout`` of at most 3 seconds (psycopg's default is 130)."""
        session = self._caller_session
        assert session is not None
        with translating():
            conn = _connect.connect(session.conninfo, autocommit=True)
        with conn:
            ended: bool | None = _execute(conn, _core.end_session(session), lent=True)
            if ended is False:  # or it exited just before the call: look again, with a new snapshot
                gone: bool = _execute(conn, _core.session_gone(session), lent=True)
                ended = gone
            if not ended:
                raise ConnectionFailed(_core.session_runs_on(session, ended))
            return _execute(conn, call, lent=True)

    def drop_lost(self) -> None:
        """After a lost connection: make the pool drop its other dead connections too (a server
        restart ends them all; the pool would lend the next of them). Our own is opened again
        by the next call anyway."""
        if self._pool is not None:
            self._pool.check()

    def close(self) -> None:
        """Close the connections this connector opened (never the caller's)."""
        with self._lock:
            self._closed = self._dsn is not None
            owned = [c for c in (self._own, self._own_heartbeat) if c is not None]
            self._own = self._own_heartbeat = None
        for conn in owned:
            conn.close()


class Queue:
    """A queue of the pgqueue extension, used synchronously.

    Parameters:
        conn: a connection string, a ``psycopg.Connection`` or a ``psycopg_pool.ConnectionPool``
            (see the module docstring for what each means for transactions).
        name: the queue's name (``default`` is created with the extension).

    Every method raises :class:`pgqueue.errors.PgQueueError` subclasses for database errors
    (``QueueNotFound`` when the queue does not exist, ``ExtensionNotInstalled``,
    ``ConnectionFailed``, ...). Threads may share a Queue: its calls on one connection are
    serialised, and so are the calls of every Queue over one caller's connection (the dequeue
    of :meth:`receive` included, with its transaction); a ``receive`` block's body runs
    unserialised.
    """

    def __init__(self, conn: ConnectionSource, name: str = "default") -> None:
        if not isinstance(name, str):
            raise TypeError(f"the queue name must be a str, got {type(name).__name__}")
        self._name = name
        self._connector = _Connector(conn)

    @property
    def conninfo(self) -> str:
        """A connection string for the queue's database (the password included, if any).

        Workers and heartbeats use it to open connections of their own.
        """
        return self._connector.conninfo()

    @property
    def name(self) -> str:
        """The queue's name."""
        return self._name

    def __repr__(self) -> str:
        return f"Queue({self._name!r})"

    def close(self) -> None:
        """Close the connections the queue opened itself; a caller's connection or pool stays open."""
        self._connector.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- producing ---------------------------------------------------------------------

    def enqueue(self, payload: object, *, delay: Delay | None = None, at: When | None = None,
                priority: int | None = None, task: str | None = None, group: str | None = None,
                key: str | None = None) -> int:
        """Enqueue one message and return its id.

        Parameters:
            payload: bytes, str or any JSON-serialisable value; it comes back as the same type
                (see :mod:`pgqueue.codec`).
            delay: deliver no sooner than this long from now (``timedelta`` or seconds),
                measured on the server's clock.
            at: deliver no sooner than this time (aware ``datetime``, naive = UTC, or epoch ms).
            priority: deliver ahead of every normal message; larger goes first (int >= 0).
                At most one of delay, at and priority.
            task: the task of a :class:`pgqueue.Tasks` registry that is to handle it (kept in
                the content type as ``; task=<name>``).
            group: its message group, on a queue created with ``group_concurrency`` (1 to 200
                characters, no NUL): in order within the group, groups served in turn.
            key: an idempotency key (1 to 200 characters, no NUL): while a message with this key
                is in the queue (or within the queue's ``key_window_ms`` after it left), its id is
                returned and nothing is enqueued.

        Raises:
            QueueNotFound, QueueFull, InvalidQueueName (a NUL in the name too), UnsupportedPayload
            (also a payload over 500,000,000 bytes, ``codec.MAX_CONTENT``), InvalidArgument (a NUL
            in ``group`` or ``key`` too, refused before anything is sent);
            NeedsReadCommitted for a new ``key`` into a queue with ``key_window_ms`` in a REPEATABLE
            READ or SERIALIZABLE transaction; SerializationFailure (40001, any level) in a
            transaction of the caller's when the enqueue waited (for another producer's
            transaction) while a message with its ``key`` left within the window: nothing is
            enqueued, and a retry of the transaction returns the kept id (where the enqueue is
            a transaction of its own, the queue runs it again and returns that id itself).
        """
        return self._connector.run(
            _core.enqueue(self._name, payload, delay=delay, at=at, priority=priority, task=task,
                          group=group, key=key))

    def enqueue_many(self, payloads: Iterable[object], *, delay: Delay | None = None, at: When | None = None,
                     priority: int | None = None, task: str | None = None,
                     groups: Iterable[str | None] | None = None,
                     keys: Iterable[str | None] | None = None) -> list[int]:
        """Enqueue many messages in one statement (all or none) and return their ids in order.

        Parameters are those of :meth:`enqueue`; delay, at, priority or task apply to every message,
        ``groups`` and ``keys`` give one group and one idempotency key (or None) per payload.

        Raises:
            QueueNotFound, QueueFull (nothing is enqueued), InvalidQueueName, UnsupportedPayload;
            InvalidArgument: ``payloads``, ``groups`` or ``keys`` is not an iterable of them (one
            value, None, a single str or bytes, a mapping), ``groups`` or ``keys`` has another
            count than ``payloads``, a value is invalid (as for :meth:`enqueue`), or the payloads
            pass 1,000,000,000 bytes in all (``_core.MAX_CALL_CONTENT``: enqueue them in smaller
            batches); UnsupportedPayload for one over 500,000,000 bytes (``codec.MAX_CONTENT``);
            SerializationFailure with ``keys`` as for :meth:`enqueue` (nothing is enqueued).
        """
        return self._connector.run(
            _core.enqueue_many(self._name, payloads, delay=delay, at=at, priority=priority, task=task,
                               groups=groups, keys=keys))

    # -- consuming ---------------------------------------------------------------------

    def dequeue(self, limit: int = 1, *, lock_ms: int | None = None) -> list[Message]:
        """Take up to ``limit`` deliverable messages, skipping those other consumers hold
        (SKIP LOCKED; the few waits there are: README, "Dequeue: the three delivery modes").

        Parameters:
            limit: the most messages to return (1 to 10000).
            lock_ms: the lease in ms (None: the queue's ``lock_ms``); each message must be
                completed, deferred or failed before it runs out or it is delivered again.
                0 deletes the messages as they are delivered (at most once, no lease).

        Returns:
            The messages, expired leases first, then by due time and id; empty if none is due.
            A session that found no expired lease within the last 20 ms may hand out a ready
            message before a lease that ran out meanwhile (docs/guarantees.md, "Delivery modes").

        Raises:
            QueueNotFound, InvalidArgument (limit or lock_ms out of range).
        """
        return self._connector.run(_core.dequeue(self._name, limit, lock_ms=lock_ms))

    def complete(self, msg: Message) -> bool:
        """Acknowledge a leased message: delete it.

        Returns:
            False (and nothing changes) if the lease was lost: it ran out and the message was
            delivered again, or it was already completed, deferred or failed.
        """
        return self._connector.run(_core.complete(msg))

    def complete_many(self, msgs: Iterable[Message]) -> list[Message]:
        """Acknowledge many leased messages in one statement (and one transaction,
        ``message_complete_batch``), at most 10000 distinct messages.

        Each is completed only with its own token, as by :meth:`complete`. Of two deliveries of
        one message (an older one whose lease ran out, and the one handed out after it) only the
        newest, with the higher ``attempts``, is sent: the older is lost. A delivery listed twice
        is completed once.

        Returns:
            The messages whose lease was lost, in the order given: they changed nothing (empty
            when all were done).

        Raises:
            InvalidArgument: ``msgs`` is not an iterable of messages (one Message, None, a str,
                a mapping) or holds something else; more than 10000 distinct messages.
        """
        return self._connector.run(_core.complete_many(msgs))

    def complete_and_dequeue(self, msgs: Iterable[Message], limit: int = 1, *,
                             lock_ms: int | None = None) -> tuple[list[Message], list[Message]]:
        """Acknowledge leased messages and take up to ``limit`` new ones, in one statement and
        one transaction (``message_complete_and_dequeue``), at most 10000 distinct messages: a consumer
        in lease mode so pays one transaction per message instead of two.

        Each message is completed only with its own token, as by :meth:`complete` (of two
        deliveries of one message only the newest is sent, as by :meth:`complete_many`); the new
        messages are taken as by :meth:`dequeue` (``lock_ms`` likewise), leaving out the
        messages acknowledged: one whose lease ran out before this call and that nobody took is
        still yours, and is completed (one another consumer took meanwhile is lost).

        Returns:
            ``(messages, lost)``: the messages handed out, and the given messages whose lease
            was lost (they changed nothing).

        Raises:
            QueueNotFound, InvalidArgument (limit or lock_ms out of range; ``msgs`` not an
            iterable of messages, as for :meth:`complete_many`; more than 10000 distinct messages).
        """
        return self._connector.run(_core.complete_and_dequeue(self._name, msgs, limit, lock_ms=lock_ms))

    def heartbeat(self, msg: Message, lock_ms: int | None = None) -> bool:
        """Extend a message's lease to now + ``lock_ms`` (None: the queue's ``lock_ms``).

        Returns:
            False if the lease was already lost (see :meth:`complete`).
        """
        return self._connector.run(_core.heartbeat(msg, lock_ms))

    def heartbeat_many(self, msgs: Iterable[Message], lock_ms: int | None = None) -> list[Message]:
        """Extend many leases to now + ``lock_ms`` (None: each message's queue's ``lock_ms``) in
        one statement (``message_heartbeat_batch``), at most 10000 distinct messages.

        Each lease is extended only with its own token, as by :meth:`heartbeat`. Of two
        deliveries of one message only the newest, with the higher ``attempts``, is sent: the
        older is lost (as by :meth:`complete_many`). A delivery listed twice is extended once.

        Returns:
            The messages whose lease was lost, in the order given: they changed nothing (empty
            when all were extended).

        Raises:
            InvalidArgument (lock_ms out of range; ``msgs`` not an iterable of messages, as for
            :meth:`complete_many`; more than 10000 distinct messages).
        """
        return self._connector.run(_core.heartbeat_batch(msgs, lock_ms))

    def defer(self, msg: Message, *, delay: Delay | None = None, at: When | None = None,
              state: bytes | None = None) -> bool:
        """Give a leased message back until later, keeping its attempts count.

        Parameters:
            msg: the leased message.
            delay, at: when it is due again (default: now). At most one.
            state: checkpoint bytes saved with it (``msg.state`` on the next delivery); None
                keeps the current state.

        Returns:
            False if the lease was lost.
        """
        return self._connector.run(_core.defer(msg, delay=delay, at=at, state=state))

    def fail(self, msg: Message, error: str | BaseException, *, delay: Delay | None = None,
             at: When | None = None) -> bool:
        """Report a failed attempt: retry after the queue's back-off, or dead-letter it.

        Parameters:
            msg: the leased message.
            error: what went wrong, stored as ``last_error`` (an exception is stored as
                ``"TypeName: message"``, an exception group followed by its leaf exceptions).
            delay, at: retry then instead of after the exponential back-off. At most one.

        Returns:
            False if the lease was lost. Once ``attempts`` reaches the queue's
            ``max_attempts`` the message moves to the dead letters.
        """
        return self._connector.run(_core.fail(msg, error, delay=delay, at=at))

    @contextmanager
    def receive(self, *, lock_ms: int | None = None, heartbeat: bool = True) -> Iterator[Message | None]:
        """Dequeue one message for the ``with`` block and settle it when the block ends.

        ``with queue.receive() as msg:`` gives None if no message is due. Otherwise, when the
        block returns the message is completed (a block that settled it itself, with
        ``complete``, ``defer``, ``fail`` or ``reject``, leaves nothing to complete, and a
        warning says the completion found its lease gone); when it raises an ``Exception`` the message is
        failed with it (retry after back-off, or dead letter; :class:`pgqueue.Reject`, or an
        exception group whose leaves are all Rejects: dead letter now) and the exception
        propagates; when it is interrupted (KeyboardInterrupt, SystemExit, or a
        ``BaseExceptionGroup`` holding one) the message is given back for immediate
        redelivery, as it is when the heartbeats' connection cannot be opened (the block does
        not run; the error propagates). If settling itself fails, the block's exception still
        propagates, with a note. An interruption that lands while the dequeue is being
        answered leaves the message ready too: on an autocommit connection the dequeue runs in a
        transaction of its own (BEGIN and COMMIT, two more round trips), committed only once
        its answer is read; inside a caller's transaction the lease is undone with it. There
        the dequeue is a statement of the caller's transaction, as every call is: refused
        (QueueNotFound, say), it aborts that transaction, which is the caller's to roll back.

        Parameters:
            lock_ms: the lease in ms (None: the queue's ``lock_ms``; 0 is refused).
            heartbeat: extend the lease every third of it from a background thread while the
                block runs, on a separate connection: a second connection the queue opens
                from its connection string, or one borrowed from the pool for each beat. With
                a caller's connection inside a transaction no heartbeat is sent: the
                transaction's row lock keeps the message from every other consumer until it
                ends. With a caller's autocommit connection a private connection to the same
                server is opened for the block. Without heartbeats a block that outlives the
                lease may see its message delivered to another consumer (and ``complete``
                then does nothing).

        Raises:
            InvalidArgument: lock_ms is 0. And what the block raises.
        """
        lease, in_transaction = self._take(_core.receive(self._name, lock_ms=lock_ms, heartbeat=heartbeat))
        if lease is None:
            yield None
            return
        msg = lease.message
        stack = ExitStack()
        try:
            if heartbeat:
                runner = stack.enter_context(self._connector.heartbeat_runner(in_transaction))
                if runner is not None:
                    # one message held: message_heartbeat, renewing the lease the block was given
                    # (the queue's lock_ms lowered while it runs made each beat too short for the
                    # beats' interval, and another consumer took the message: a review)
                    hb_call = _core.heartbeat(msg, lease.lease_ms if lock_ms is None else lock_ms)

                    def beat(held: list[Message]) -> list[Message]:
                        return [] if runner(hb_call) else held

                    beats = Heartbeats(lambda: [msg], beat, interval(lease.lease_ms),
                                       name=f"pgqueue-heartbeat-{msg.id}")
                    stack.callback(beats.stop, STOP_WAIT)  # a beat stuck on a dead connection is left behind
        except BaseException as exc:  # the block has not run: the message goes back as it was
            # a KeyboardInterrupt while the heartbeats' connection closes goes on in place of
            # the error of the setup, once the message is back
            self._end(stack, msg, exc, "release", committed=not in_transaction)
            raise
        outcome: BaseException | None = None
        try:
            yield msg
        except BaseException as exc:
            outcome = exc
            raise
        finally:
            # The heartbeats stop first, then the message is settled by the block's own outcome,
            # whatever lands meanwhile (a KeyboardInterrupt while the heartbeat thread is joined
            # goes on once the message is settled, rather than leave a finished block's message
            # leased).
            # An interruption that lands meanwhile goes on even if the settling fails (its
            # error is then the interruption's context).
            self._end(stack, msg, outcome, committed=not in_transaction)

    def _end(self, stack: ExitStack, msg: Message, outcome: BaseException | None,
             action: _core.Outcome | None = None, *, committed: bool = False) -> None:
        """End a ``receive`` block: stop its heartbeats (:meth:`_unwind`), settle its message by
        ``outcome`` (or ``action``), then raise an interruption that landed meanwhile, if
        :func:`_going_on` says it goes on (what was raised is then its context). ``committed``:
        the lease was committed on its own, not in the caller's transaction (:meth:`_settle_once`)."""
        interrupted = self._unwind(stack)
        if outcome is not None and not isinstance(outcome, (Exception, GeneratorExit)):
            # The block's own statement on the shared connection may have been interrupted in
            # the middle of its answer (a Ctrl-C inside psycopg's reading on after its cancel):
            # the connection is then busy, and the give-back would fail, the message leased
            # until its lease ran out. Read it off first (under psycopg's lock: never beside a
            # statement of the caller's other thread). Not for a GeneratorExit: a generator
            # closed around the block interrupts no statement.
            try:
                self._connector.read_what_is_left()
            except BaseException as exc:  # noqa: BLE001 (a second interruption: the message is settled all the same)
                interrupted = interrupted or exc
        settle_error: BaseException | None = None
        try:
            self._settle(msg, outcome, action, committed=committed)
        except BaseException as err:
            settle_error = err
            raise
        finally:
            going = _going_on(msg, settle_error or outcome, interrupted)
            if going is not None:
                raise going  # an interruption goes on; what was raised is its context

    @staticmethod
    def _unwind(stack: ExitStack) -> BaseException | None:
        """Close a ``receive`` block's stack (stop its heartbeats, close their connection); return
        what interrupted it (a KeyboardInterrupt, an error of the closing), for the caller to
        raise once the message is settled."""
        try:
            stack.close()
        except BaseException as exc:  # noqa: BLE001 (raised after the settling)
            return exc
        return None

    def _take(self, call: Call[_core.Lease | None]) -> tuple[_core.Lease | None, bool]:
        """Run the dequeue of ``receive`` so that an exception landing meanwhile cannot strand its message.

        Returns the lease, if any, and whether the dequeue ran in the caller's transaction
        (:meth:`_Connector.leasing`).

        A KeyboardInterrupt (or any exception) that lands while the server answers makes psycopg
        cancel the statement and drop the answer; run as its own transaction, the dequeue would
        have leased the message already, and it would stay leased by no one until the lease ran
        out, an attempt spent (a dead letter at ``max_attempts``). So the dequeue commits only
        after its answer is read (:meth:`_Connector.leasing`): interrupted before, it is rolled
        back; interrupted during the commit or after it, the message read is given back for
        immediate redelivery, and the interruption goes on. A commit that fails (a lost
        connection: committed or not, nobody knows) gives nothing back: were it not committed,
        another consumer could hold the message meanwhile with the same token, and would lose
        it; committed, the lease runs out as before. On a caller's connection inside a
        transaction the lease is the caller's transaction's, undone when it rolls back.
        """
        lease: _core.Lease | None = None
        in_transaction = True
        try:
            with self._connector.leasing() as (conn, in_transaction):
                lease = _execute(conn, call)
        except BaseException as exc:
            # An interruption lands on the client; psycopg's cancel request chases a COMMIT the
            # server has in practice finished by then, so the lease is committed: give it back.
            if lease is not None and not isinstance(exc, Exception):
                try:
                    self._connector.read_what_is_left()
                except BaseException:  # noqa: BLE001 (a second Ctrl-C: the give-back is tried all the same, the first goes on;
                    # it fails if the answer is still unread, and the message waits for its lease)
                    pass
                self._settle(lease.message, exc, "release", committed=not in_transaction)
            raise
        return lease, in_transaction

    def _settle(self, msg: Message, exc: BaseException | None, action: _core.Outcome | None = None, *,
                committed: bool = False) -> None:
        action = action or _core.outcome(exc)
        if action == "complete":
            if not self._settle_call(_core.complete(msg), committed):
                logger.warning("message %s on queue %s could not be completed: its lease was lost "
                               "(or the block completed, deferred, failed or rejected it itself)",
                               msg.id, msg.queue)
            return
        assert exc is not None
        try:
            self._settle_call(_core.fail(msg, exc) if action == "fail"
                              else _core.reject(msg, exc) if action == "reject" else _core.defer(msg), committed)
        except PgQueueError as err:
            exc.add_note(f"pgqueue: could not {action} message {msg.id}: {err}")
            logger.warning("could not %s message %s on queue %s: %s", action, msg.id, msg.queue, err)

    def _settle_call(self, call: Call[bool], committed: bool = False) -> bool:
        """Run the call that settles a ``receive`` block's message, as :meth:`_settle_once` does.

        A KeyboardInterrupt (or another interruption) that lands while the server answers makes
        psycopg cancel the statement: the settling may not have happened, and a message whose
        block had finished would stay leased until its lease ran out, to be delivered again (an
        attempt spent). So the call runs once more, then the interruption goes on (a second one
        ends the retry). The token makes that safe: a first call that committed after all makes
        the second stale. Not on a caller's connection in transaction mode: the cancelled
        statement aborted the caller's transaction, which is the caller's to end (the lease it
        took is undone with it, or was committed before the block and runs out)."""
        try:
            return self._settle_once(call, committed)
        except BaseException as exc:
            if isinstance(exc, Exception) or not self._connector.retries_settling():
                raise
            try:
                self._connector.read_what_is_left()
                self._settle_once(call, committed)
            except Exception as err:  # noqa: BLE001 (the interruption goes on; this is noted)
                logger.warning("settling a message after an interruption failed: %s", err)
            raise

    def _settle_once(self, call: Call[bool], committed: bool = False) -> bool:
        """Run the call that settles a ``receive`` block's message. If its connection was lost
        (our own or a pool's, gone while the block ran: a server restart, an idle timeout), run it
        once more on a new one: the token makes that safe (a first call that committed after all
        makes the second stale: False). A caller's connection is not replaced; if it is closed
        (by the caller, or by psycopg after a second interruption) and the lease was
        ``committed`` on it in a transaction of its own, the call runs on a connection opened
        for it (:meth:`_Connector.settle_elsewhere`). Not when the lease was taken in the
        caller's transaction: closed, it rolled back, and the token may be another's now."""
        try:
            return self._connector.run(call)
        except ConnectionFailed:
            if committed and self._connector.settles_elsewhere():
                logger.info("settling a message: the caller's connection is closed; settling on a connection of its own")
                return self._connector.settle_elsewhere(call)
            if not self._connector.replaces_lost():
                raise
            logger.info("settling a message: the connection was lost; trying once more on a new one")
            self._connector.drop_lost()
            return self._connector.run(call)

    def reject(self, msg: Message, error: str | BaseException) -> bool:
        """Move a leased message to the dead letters now, whatever ``max_attempts`` says: for a
        message no retry can fix (malformed, an unknown task).

        Returns:
            False if the lease was lost.
        """
        return self._connector.run(_core.reject(msg, error))

    def next_due(self) -> datetime | None:
        """Return when the next message becomes deliverable, None if the queue is empty
        (``queue_next_due``).

        A ready or scheduled message counts with its due time, a leased one with its lease
        expiry; on a queue with message groups, the next turn of a group; with a rate limit, no
        sooner than its next slot. A priority message counts as due since the epoch, 1970-01-01
        00:00 UTC (the extension stores its priority as a time before the epoch, ``-1 -
        priority``, which the client hides as ``Message.dequeue_at`` None does).
        """
        return self._connector.run(_core.next_due(self._name))

    def peek(self, limit: int = 10) -> list[Pending]:
        """Return up to ``limit`` waiting messages without leasing them, in the order a dequeue
        would hand them out: expired leases first, then ready and scheduled messages by due
        time. Messages under a live lease are not shown. Two index probes; nothing is locked.

        Raises:
            QueueNotFound, InvalidQueueName, InvalidArgument (limit outside 1 to 10000).
        """
        return self._connector.run(_core.peek(self._name, limit))

    def cancel(self, ids: Iterable[int]) -> list[Pending]:
        """Delete pending messages of the queue by id (ready, scheduled or with an expired lease).

        A message under a live lease is being handled and is not cancelled; nor is an id of
        another queue or one that is gone. Compare what comes back with what you asked for.

        Returns:
            The messages removed, by id.

        Raises:
            QueueNotFound, InvalidQueueName; InvalidArgument: ``ids`` is not an iterable of ints
            (one int, None, a str, a mapping).
        """
        return self._connector.run(_core.cancel(self._name, ids))

    # -- management --------------------------------------------------------------------

    def create(self, *, lock_ms: int = 30000, max_attempts: int | None = None, retry_base_ms: int = 1000,
               retry_cap_ms: int = 3600000, max_size: int | None = None, notify: bool = False,
               if_not_exists: bool = False, group_concurrency: int | None = None, key_window_ms: int = 0,
               rate_limit: int | None = None) -> None:
        """Create the queue.

        Parameters:
            lock_ms: the default lease (ms).
            max_attempts: deliveries before a message is dead-lettered (None or 0: unlimited).
            retry_base_ms, retry_cap_ms: the back-off after a failure doubles from base up to cap.
            max_size: the most live messages accepted (None or 0: unbounded).
            notify: send NOTIFY on channel ``pgqueue.<name>`` when messages arrive.
            if_not_exists: do nothing if the queue exists already.
            group_concurrency: message groups: at most this many of a group in flight (0: no
                limit); None: no groups (chosen here, for good).
            key_window_ms: how long an idempotency key stays taken after its message left.
            rate_limit: the most messages handed out a second, all consumers together.

        Raises:
            QueueExists, InvalidQueueName, InvalidArgument; NeedsReadCommitted in a REPEATABLE
            READ or SERIALIZABLE transaction (unless ``if_not_exists`` and the queue exists).
        """
        self._connector.run(_core.create(
            self._name, lock_ms=lock_ms, max_attempts=max_attempts, retry_base_ms=retry_base_ms,
            retry_cap_ms=retry_cap_ms, max_size=max_size, notify=notify, if_not_exists=if_not_exists,
            group_concurrency=group_concurrency, key_window_ms=key_window_ms, rate_limit=rate_limit))

    def alter(self, *, lock_ms: int | None = None, max_attempts: int | None = None,
              retry_base_ms: int | None = None, retry_cap_ms: int | None = None, max_size: int | None = None,
              notify: bool | None = None, group_concurrency: int | None = None, key_window_ms: int | None = None,
              rate_limit: int | None = None) -> None:
        """Change the queue's settings; None keeps a setting, 0 makes max_attempts/max_size unlimited
        (and group_concurrency unlimited, or removes the rate_limit).

        Raises:
            QueueNotFound, InvalidQueueName, InvalidArgument (bad values are refused before
            anything waits); NeedsReadCommitted for a ``max_size`` or ``group_concurrency``
            change in a REPEATABLE READ or SERIALIZABLE transaction.
        """
        self._connector.run(_core.alter(
            self._name, lock_ms=lock_ms, max_attempts=max_attempts, retry_base_ms=retry_base_ms,
            retry_cap_ms=retry_cap_ms, max_size=max_size, notify=notify,
            group_concurrency=group_concurrency, key_window_ms=key_window_ms, rate_limit=rate_limit))

    def drop(self) -> bool:
        """Drop the queue with its messages and dead letters; False if it did not exist.

        Raises:
            ProtectedQueue: for the ``default`` queue.
            InvalidQueueName: the name breaks the queue-name rule.
            NeedsReadCommitted: in a REPEATABLE READ or SERIALIZABLE transaction.
        """
        return self._connector.run(_core.drop(self._name))

    def settings(self) -> QueueSettings:
        """Return the queue's settings.

        Raises:
            QueueNotFound, InvalidQueueName.
        """
        return self._connector.run(_core.settings(self._name))

    def stats(self, *, exact: bool = False) -> QueueStats:
        """Return the queue's message counts by state.

        Each count is exact up to 10,000 and estimated from a sample of the table above that
        (``queue_stats``: cheap enough to poll beside full load); with ``exact`` every message
        is counted (``queue_stats_exact``: a deep queue takes a while).

        Raises:
            QueueNotFound, InvalidQueueName.
        """
        return self._connector.run(_core.stats(self._name, exact=exact))

    def group_stats(self, limit: int = 10) -> list[GroupStats]:
        """Return the ``limit`` message groups with the most messages waiting (a queue with
        groups; none otherwise). Counts every grouped message: for monitoring, not every poll.

        Raises:
            QueueNotFound, InvalidQueueName, InvalidArgument.
        """
        return self._connector.run(_core.group_stats(self._name, limit))

    def counters(self) -> QueueCounters:
        """Return what happened on the queue since it was created (counts of messages enqueued,
        delivered, completed, failed, dead-lettered and of leases expired).

        Raises:
            QueueNotFound, InvalidQueueName.
        """
        return self._connector.run(_core.counters(self._name))

    def dead_letters(self, limit: int = 100, *, after: DeadLetter | None = None) -> list[DeadLetter]:
        """Return up to ``limit`` dead letters of the queue, oldest death first.

        Each page is an index walk that stops at its end, however many letters the queue has.
        Needs SELECT on ``pgqueue.dead_letters`` and on ``pgqueue.queue`` (the queue's id is
        looked up there; every recipe of docs/grants.sql grants the latter).

        Parameters:
            limit: the most to return (>= 0).
            after: the last letter of the page before: this page starts after it, by (dead_at,
                id) as stored (keyset paging: a page does not shift when letters before it are
                requeued or purged; a letter that dies while you page comes after the cursor
                unless its transaction commits after the cursor passed its dead_at).

        Raises:
            QueueNotFound, InvalidQueueName, InvalidArgument.
        """
        return self._connector.run(_core.dead_letters(self._name, limit, after))

    def requeue_dead(self, ids: Iterable[int] | None = None, *, delay: Delay | None = None,
                     at: When | None = None) -> int:
        """Move dead letters back onto the queue as new messages (new id, attempts 0).

        Parameters:
            ids: which dead letters (their ``id``); None for all of the queue.
            delay, at: when they are due (default: now). At most one.

        Returns:
            How many were requeued.

        Raises:
            QueueNotFound, QueueFull; InvalidArgument (``ids`` not an iterable of ints, a bad
            ``delay`` or ``at``).
        """
        return self._connector.run(_core.requeue_dead(self._name, ids, delay=delay, at=at))

    def purge_dead(self, ids: Iterable[int] | None = None, *, before: When | None = None) -> int:
        """Delete dead letters of the queue: all, the ids given, and/or those that died before a time.

        Parameters:
            ids: which dead letters; None for all (subject to ``before``).
            before: only those dead before this time (``datetime`` or epoch ms).

        Returns:
            How many were deleted.

        Raises:
            QueueNotFound; InvalidArgument (``ids`` not an iterable of ints, ``before`` not a
            datetime or epoch ms).
        """
        return self._connector.run(_core.purge_dead(self._name, ids, before=before))


def _run_once(conn: ConnectionSource, call: Call[T]) -> T:
    connector = _Connector(conn)
    try:
        return connector.run(call)
    finally:
        connector.close()


def list_queues(conn: ConnectionSource) -> list[QueueSettings]:
    """Return the settings of every queue, by name.

    Parameters:
        conn: a connection string (opened and closed here), a connection or a pool.
    """
    return _run_once(conn, _core.list_queues())


def all_stats(conn: ConnectionSource) -> list[QueueStats]:
    """Return the message counts of every queue, by name.

    Parameters:
        conn: a connection string (opened and closed here), a connection or a pool.
    """
    return _run_once(conn, _core.all_stats())


def all_counters(conn: ConnectionSource) -> list[QueueCounters]:
    """Return the counters of every queue, by name (see :meth:`Queue.counters`).

    Parameters:
        conn: a connection string (opened and closed here), a connection or a pool.
    """
    return _run_once(conn, _core.all_counters())
