"""The asyncio client: :class:`AsyncQueue`, and :func:`list_queues` / :func:`all_stats` / :func:`all_counters`.

The same queue operations as :class:`pgqueue.Queue`, as coroutines, over a connection string,
a ``psycopg.AsyncConnection`` or a ``psycopg_pool.AsyncConnectionPool``, with the same rules:
it never commits or closes what it did not open; on a caller's connection every call runs in
the caller's transaction state; a pool lends a connection per call. Statements, parameters
and results come from :mod:`pgqueue._core`, shared with the sync client.

Example::

    async with AsyncQueue(dsn, "emails") as queue:
        await queue.enqueue({"to": "a@example.com"})
        async with queue.receive() as msg:
            if msg is not None:
                await send(msg.payload)
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from pgqueue import _connect, _core, _sql
from pgqueue._core import Call, Delay, When
from pgqueue._lease import AsyncHeartbeats, interval
from pgqueue.client import READABLE, _going_on, _steps_reading_what_is_left
from pgqueue.errors import (
    ConnectionFailed,
    InvalidArgument,
    NeedsReadCommitted,
    PgQueueError,
    SerializationFailure,
    translating,
)
from pgqueue.message import DeadLetter, GroupStats, Message, Pending, QueueCounters, QueueSettings, QueueStats

__all__ = ["AsyncQueue", "list_queues", "all_stats", "all_counters", "AsyncConnectionSource"]

T = TypeVar("T")

#: What an AsyncQueue can work over: a connection string, an async connection or an async pool.
AsyncConnectionSource = str | psycopg.AsyncConnection[Any] | AsyncConnectionPool[Any]

Runner = Callable[[Call[bool]], Awaitable[bool]]

#: How long a cancelled ``receive`` waits for its dequeue's answer (seconds), to give back the
#: message it leased; psycopg waits as long for a statement it cancels.
CANCEL_WAIT = 5.0

logger = logging.getLogger("pgqueue")

#: The tasks of receive() that a cancellation does not reach (stopping heartbeats, settling),
#: held until they end: the event loop keeps only weak references to its tasks.
_UNREACHED: set[asyncio.Future[Any]] = set()


async def _unreached(task: asyncio.Future[Any],
                     held: asyncio.CancelledError | None = None) -> asyncio.CancelledError | None:
    """Await ``task`` so that no cancellation reaches it, and return the cancellation that
    landed meanwhile (or ``held``, one that landed before), if any, for the caller to raise once
    it is done.

    Once cancelled (or given ``held``), it waits for the task :data:`CANCEL_WAIT` seconds more
    at most (then cancels it); further cancellations are remembered, not passed on
    (``asyncio.wait``, unlike ``wait_for``, does not cancel what it waits for when it is
    cancelled itself).
    """
    _UNREACHED.add(task)
    task.add_done_callback(_UNREACHED.discard)
    loop = asyncio.get_running_loop()
    cancelled: asyncio.CancelledError | None = held
    deadline: float | None = None if held is None else loop.time() + CANCEL_WAIT
    while not task.done():
        timeout = None if deadline is None else deadline - loop.time()
        if timeout is not None and timeout <= 0:
            task.cancel()  # did not end in time; the caller tells
            break
        try:
            await asyncio.wait({task}, timeout=timeout)
        except asyncio.CancelledError as exc:
            if cancelled is None:
                cancelled = exc
                deadline = loop.time() + CANCEL_WAIT
    return cancelled


async def _answered(statement: Awaitable[T]) -> tuple[T, asyncio.CancelledError | None]:
    """Await a statement in a task that a cancellation does not reach; return its result and
    the cancellation that landed meanwhile, if any. Cancelled, the statement is awaited for at
    most :data:`CANCEL_WAIT` seconds more (:func:`_unreached`); if it failed or did not answer in
    time, the cancellation is raised (its answer, if the server committed it, is lost). Cancelled
    with its caller, psycopg cancels the statement and drops an answer already on its way: what
    the server had committed (a lease) was lost with it."""
    running = asyncio.ensure_future(statement)
    try:
        return await asyncio.shield(running), None
    except asyncio.CancelledError as first:
        cancelled = await _unreached(running, first)
        assert cancelled is not None
        if not running.done() or running.cancelled() or running.exception() is not None:
            raise cancelled from None
        return running.result(), cancelled


def _cursor(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncCursor[tuple[Any, ...]]:
    """A cursor for pgqueue's statements on ``conn`` (see :func:`pgqueue.client._cursor`): one
    of the connection's ``cursor_factory`` (an ``AsyncClientCursor`` too), unless that class is
    a ``psycopg.AsyncRawCursor`` (or a subclass), whose ``$1`` placeholders are not pgqueue's
    ``%(name)s``; then a plain ``psycopg.AsyncCursor``."""
    factory = conn.cursor_factory
    if isinstance(factory, type) and issubclass(factory, psycopg.AsyncRawCursor):
        return psycopg.AsyncCursor(conn, row_factory=tuple_row)
    return conn.cursor(row_factory=tuple_row)


async def _execute(conn: psycopg.AsyncConnection[Any], call: Call[T],
                   status: list[TransactionStatus] | None = None, *, lent: bool = False) -> T:
    """Run a call on a connection; with ``status``, append the connection's transaction status
    as its statement left it (read before anything else can run on the connection: another
    task's statement in flight a moment later shows ACTIVE). ``lent``: the connection is this
    call's alone, and a call that needs READ COMMITTED runs in a transaction of that level, as
    :func:`pgqueue.client._execute` says; so does a keyed enqueue refused with 40001 run once more."""
    if lent and call.read_committed and conn.info.transaction_status == TransactionStatus.IDLE:
        if conn.autocommit:
            try:  # one statement first: READ COMMITTED is the default level (client._execute)
                return await _statement(conn, call, status)
            except (NeedsReadCommitted, SerializationFailure):
                pass
            with translating():
                async with conn.transaction():  # (a cancellation rolls it back, or the pool does)
                    await _set_read_committed(conn)
                    return await _statement(conn, call, status)
        await _set_read_committed(conn)  # (psycopg begins the transaction before it)
    elif call.again_on_40001 and (conn.autocommit or lent) and conn.info.transaction_status == TransactionStatus.IDLE:
        try:  # a keyed enqueue, run once more as client._execute says
            return await _statement(conn, call, status)
        except SerializationFailure:
            if not conn.autocommit:
                with translating():
                    await conn.rollback()
    return await _statement(conn, call, status)


async def _ended_while_idle(conn: psycopg.AsyncConnection[Any]) -> bool:
    """:func:`pgqueue.client._ended_while_idle` on an ``AsyncConnection``: closed, or ended by
    the server while it sat idle (closed then); False while another task's statement holds
    its lock (the look itself awaits nothing: no other task runs on the connection meanwhile)."""
    if conn.closed:
        return True
    if conn.lock.locked() or not _core.ended_while_idle(conn.pgconn):
        return False
    await conn.close()
    return True


async def _set_read_committed(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`pgqueue.client._set_read_committed` on an ``AsyncConnection``."""
    with translating():
        async with _cursor(conn) as cur:
            await cur.execute(_sql.SET_READ_COMMITTED, prepare=False)


async def _statement(conn: psycopg.AsyncConnection[Any], call: Call[T],
                     status: list[TransactionStatus] | None = None) -> T:
    # (translated: on a closed connection the encodings are not there, ConnectionFailed)
    with translating():
        if call.untranslatable is not None and _core.server_refuses(call, conn.info):
            call = call.untranslatable  # a text the server's encoding cannot hold: its ASCII twin
    try:
        with translating():
            async with _cursor(conn) as cur:
                _core.check_client_bound(call.params, isinstance(cur, psycopg.AsyncClientCursor))
                _core.utf8_texts(conn.info.encoding, cur.adapters)
                _core.psycopg_arrays(call.params, cur.adapters)
                await cur.execute(call.query, call.params)
                if status is not None:
                    status.append(conn.info.transaction_status)
                rows = await cur.fetchall()
                if not rows and call.probe_queue is not None:
                    await cur.execute(_sql.CHECK_QUEUE, {"queue": call.probe_queue})
    except InvalidArgument as exc:  # a text the encoding cannot hold: the call's ASCII twin, if any
        if exc.sqlstate != "22P05" or call.untranslatable is None \
                or conn.info.transaction_status == TransactionStatus.INERROR:
            raise  # (in a transaction the refusal aborted, the twin would fail with 25P02: this says why)
        return await _statement(conn, call.untranslatable, status)
    return call.result(rows)


async def _socket_ready(fd: int, wait: str, timeout: float) -> None:
    """Wait until the socket ``fd`` is readable (:data:`~pgqueue.client.READABLE`) or
    writable, for up to ``timeout`` seconds, without blocking the event loop."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def on_ready() -> None:
        if not ready.done():
            ready.set_result(None)

    if wait == READABLE:
        loop.add_reader(fd, on_ready)
    else:
        loop.add_writer(fd, on_ready)
    try:
        await asyncio.wait({ready}, timeout=timeout)
    finally:
        if wait == READABLE:
            loop.remove_reader(fd)
        else:
            loop.remove_writer(fd)


async def _read_what_is_left(conn: psycopg.AsyncConnection[Any] | None, timeout: float = 5.0) -> None:
    """Read the rest of an answer an interruption left unread on ``conn``, as the sync client's
    ``_read_what_is_left`` does (the same steps: ``_steps_reading_what_is_left``), for up to
    ``timeout`` seconds in all, awaiting the socket: the event loop runs on meanwhile.

    A cancellation (or a Ctrl-C) that lands inside psycopg's reading on after its cancel of a
    statement leaves the answer unread and the connection busy: the give-back of a ``receive``
    block's message failed ("another command is already in progress"), the message leased
    until its lease ran out (a review). A lost connection is left as it is."""
    if conn is None or conn.closed:
        return
    pgconn = conn.pgconn
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        for wait in _steps_reading_what_is_left(pgconn):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if wait is None:
                await asyncio.sleep(0)  # a long COPY OUT drained: the other tasks run too
            else:
                await _socket_ready(pgconn.socket, wait, remaining)
    except (psycopg.Error, OSError):  # the connection is lost: the next call says so
        return


def _plain(value: object, what: str) -> object:
    """Return a pool's ``conninfo`` or ``kwargs``, called if it is a plain function (as the pool
    does); an async one cannot be called here (``AsyncQueue.conninfo`` is a property).

    Raises:
        InvalidArgument: ``value`` is an async function (or returns an awaitable).
    """
    if not callable(value):
        return value
    refusal = (f"the pool's {what} is an async function, which AsyncQueue.conninfo cannot call: "
               "pass the connection string explicitly (dsn= for an AsyncWorker)")
    if inspect.iscoroutinefunction(value):
        raise InvalidArgument(refusal)
    result = value()
    if inspect.isawaitable(result):
        if isinstance(result, Coroutine):
            result.close()  # never awaited: no "coroutine was never awaited" warning
        raise InvalidArgument(refusal)
    return result


class _AsyncConnector:
    """Run calls over a DSN, a caller's async connection or an async pool."""

    def __init__(self, source: AsyncConnectionSource) -> None:
        self._dsn: str | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._pool: AsyncConnectionPool[Any] | None = None
        if isinstance(source, str):
            self._dsn = source
        elif isinstance(source, psycopg.AsyncConnection):
            self._conn = source
        elif isinstance(source, AsyncConnectionPool):
            self._pool = source
        else:
            hint = " (use Queue for sync connections and pools)" if isinstance(source, psycopg.Connection) else ""
            raise TypeError(
                "expected a connection string, a psycopg.AsyncConnection or a "
                f"psycopg_pool.AsyncConnectionPool, got {type(source).__name__}{hint}"
            )
        self._lock: asyncio.Lock | None = None
        self._own: psycopg.AsyncConnection[Any] | None = None
        self._own_heartbeat: psycopg.AsyncConnection[Any] | None = None
        self._closed = False
        # a caller's connection's session, recorded while it is open (see settle_elsewhere)
        self._caller_session: _core.CallerSession | None = None
        self._caller_read = False  # whether _caller_session was read (None then: not provable)

    async def _open(self, attr: str) -> psycopg.AsyncConnection[Any]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._closed:
                raise PgQueueError("the queue is closed")
            conn: psycopg.AsyncConnection[Any] | None = getattr(self, attr)
            if conn is None or conn.closed:
                assert self._dsn is not None
                with translating():
                    conn = await _connect.connect_async(self._dsn, autocommit=True)
                if self._closed:
                    # close() ran while we connected (it does not wait for the lock): it could
                    # not see this connection, which would stay open with nothing to close it
                    await conn.close()
                    raise PgQueueError("the queue is closed")
                setattr(self, attr, conn)
            return conn

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """Lend the connection a call runs on."""
        if self._conn is not None:
            yield self._conn
        elif self._pool is not None:
            with translating():
                async with self._pool.connection() as conn:
                    yield conn
        else:
            yield await self._live("_own")

    async def _live(self, attr: str) -> psycopg.AsyncConnection[Any]:
        """Our own connection ``attr``, opened if need be, and opened again if the server ended
        its session while it sat idle (as the sync client's ``_live``)."""
        conn: psycopg.AsyncConnection[Any] | None = getattr(self, attr)
        if conn is None or await _ended_while_idle(conn):
            conn = await self._open(attr)
        return conn

    async def run(self, call: Call[T]) -> T:
        """Execute a call and return its result; after an interruption (a cancellation, a
        KeyboardInterrupt) read what it left unread on the shared connection first, as the sync
        ``_Connector.run`` does (:meth:`read_what_is_left`)."""
        try:
            return await self._run(call)
        except BaseException as exc:
            if not isinstance(exc, Exception) and self._pool is None:
                await self.read_what_is_left()
            raise

    async def _run(self, call: Call[T]) -> T:
        if self._conn is not None:
            return await _execute(self._conn, call)
        if self._pool is None:
            if call.read_committed:
                return await self._run_alone(call)
            # Our own connection while it is open, without the lock and the context manager
            # of connection() (a worker's loop makes thousands of calls a second through here).
            return await self._on_own("_own", call)
        async with self.connection() as conn:
            return await _execute(conn, call, lent=True)

    async def _on_own(self, attr: str, call: Call[T]) -> T:
        """Run a call on our own connection ``attr``; one that the server closed while it sat
        idle is opened again and the call made at once, and one it ended otherwise while it sat
        idle (a restart, 57P01) is found so before the call is sent (as the sync client's
        ``_on_own``)."""
        conn = await self._live(attr)
        try:
            return await _execute(conn, call)
        except PgQueueError as exc:
            if exc.sqlstate != _core.IDLE_SESSION_TIMEOUT:
                raise
        await conn.close()
        return await _execute(await self._open(attr), call)

    async def _run_alone(self, call: Call[T]) -> T:
        """:meth:`pgqueue.client._Connector._run_alone`: a call that needs READ COMMITTED on a
        connection opened for it alone (the own connection is shared by the queue's tasks,
        whose statements would join its transaction), closed after it."""
        assert self._dsn is not None
        if self._closed:
            raise PgQueueError("the queue is closed")
        with translating():
            conn = await _connect.connect_async(self._dsn, autocommit=True)
        async with conn:
            return await _execute(conn, call, lent=True)

    async def run_leasing(self, call: Call[T]) -> tuple[T, bool]:
        """Execute the dequeue of ``receive``; return its result and whether it ran inside a
        transaction of the caller's connection (then no heartbeat is needed: see
        :meth:`heartbeat_runner`).

        Decided from the connection's mode and the status the dequeue's own statement left,
        not read again later: other tasks may share the caller's connection, and one's
        statement in flight shows ACTIVE, which on an autocommit connection is no transaction
        (read so, the block went without heartbeats and lost its lease).

        The dequeue is one statement, in no savepoint: inside the caller's transaction a
        refusal (QueueNotFound, say) aborts it, as every call's does, and as the sync client's
        does (``_Connector.leasing``).
        """
        if self._conn is None:
            return await self.run(call), False
        if (not self._caller_read and self._conn.autocommit and not self._conn.closed
                and self._conn.info.transaction_status == TransactionStatus.IDLE):  # (as the sync client's)
            pid = await _execute(self._conn, _core.backend_pid())  # (once: a round trip)
            with translating():  # for settle_elsewhere
                self._caller_session = _core.caller_session(self._conn.pgconn, pid)
            self._caller_read = True
        status: list[TransactionStatus] = []
        result = await _execute(self._conn, call, status)
        in_transaction = not self._conn.autocommit or (
            bool(status) and status[-1] in (TransactionStatus.INTRANS, TransactionStatus.INERROR))
        return result, in_transaction

    @asynccontextmanager
    async def heartbeat_runner(self, in_transaction: bool = False) -> AsyncIterator[Runner | None]:
        """Lend a coroutine function that runs a heartbeat on a connection other than the calls'.

        Yields None when the dequeue ran inside a transaction of the caller's connection
        (``in_transaction``, from :meth:`run_leasing`: its row lock keeps the message from
        other consumers); see ``Queue.receive``.
        """
        if self._pool is not None:
            pool = self._pool

            async def on_pool(call: Call[bool]) -> bool:
                with translating():
                    async with pool.connection() as conn:
                        return await _execute(conn, call)

            yield on_pool
        elif self._conn is not None:
            if in_transaction:
                yield None
                return
            # A private connection to the same server for the block's beats, opened again after a
            # loss, so that the beat retried at once after one runs on a live connection (as
            # Queue.receive's; pgqueue._lease).
            with translating():  # (the caller's connection closed meanwhile: ConnectionFailed, a review)
                conninfo = _core.conninfo_of(self._conn.pgconn)
            sides: list[psycopg.AsyncConnection[Any]] = []

            async def side() -> psycopg.AsyncConnection[Any]:
                # (or ended by the server while it sat idle between beats: as Queue.receive's)
                if not sides or await _ended_while_idle(sides[-1]):
                    with translating():
                        sides.append(await _connect.connect_async(conninfo, autocommit=True))
                return sides[-1]

            async def on_side(call: Call[bool]) -> bool:
                return await _execute(await side(), call)

            try:
                await side()  # connect now: a failure shows at the block's start
                yield on_side
            finally:
                for conn in sides:
                    await conn.close()
        else:
            await self._open("_own_heartbeat")  # connect now: a failure shows at the block's start

            async def on_own(call: Call[bool]) -> bool:
                # each beat takes the connection again: opened anew after a loss
                return await self._on_own("_own_heartbeat", call)

            yield on_own

    async def read_what_is_left(self) -> None:
        """After an interruption: read what it left unread on the shared connection, a caller's or
        our own (:func:`_read_what_is_left`; a pool drops a busy connection it is given back).

        Under psycopg's lock of the connection (an ``asyncio.Lock``): a statement another task
        runs on it holds it while it is busy, and is waited for. pgqueue has no lock of its own
        for the statements on a shared async connection: each of its calls is one psycopg
        statement (the dequeue of ``receive`` too, no transaction block), serialised by that
        lock.

        Not while another task's statement holds that lock: what an interruption of ours left
        would have been met by that statement first, and the wait had no bound (a cancelled call
        that had sent nothing, waiting for the lock, waited for the other task's statement, as
        long as that waited on a row lock: a review). psycopg itself, cancelled inside a
        statement, cancels it and reads its answer before it lets the lock go."""
        conn = self._conn if self._conn is not None else self._own
        if conn is None or conn.lock.locked():
            return
        async with conn.lock:
            await _read_what_is_left(conn)

    def replaces_lost(self) -> bool:
        """Whether a call after a lost connection runs on a new one (see the sync connector's)."""
        return self._conn is None

    def settles_elsewhere(self) -> bool:
        """Whether a lease committed on a caller's autocommit connection, which is closed now, can
        be settled on a connection of its own (see the sync connector's)."""
        return self._conn is not None and self._conn.closed and self._caller_session is not None

    async def settle_elsewhere(self, call: Call[bool]) -> bool:
        """Run a settling call on a connection opened for it alone to the caller's server, closed
        after it (see the sync connector's: psycopg 3.3 closes a connection when a second
        cancellation lands during its cancel of an interrupted statement, as anyio's
        ``move_on_after`` does). The closed connection's server session is ended first if it is
        still there, and the connection opened with a ``connect_timeout`` of at most 3 seconds."""
        session = self._caller_session
        assert session is not None
        with translating():
            conn = await _connect.connect_async(session.conninfo, autocommit=True)
        async with conn:
            ended: bool | None = await _execute(conn, _core.end_session(session), lent=True)
            if ended is False:  # or it exited just before the call: look again, with a new snapshot
                gone: bool = await _execute(conn, _core.session_gone(session), lent=True)
                ended = gone
            if not ended:
                raise ConnectionFailed(_core.session_runs_on(session, ended))
            return await _execute(conn, call, lent=True)

    async def drop_lost(self) -> None:
        """After a lost connection: make the pool drop its other dead connections too."""
        if self._pool is not None:
            await self._pool.check()

    def conninfo(self) -> str:
        """Return a connection string that reaches the same database (for extra connections)."""
        if self._dsn is not None:
            return self._dsn
        if self._conn is not None:
            with translating():  # (a closed connection's psycopg error: ConnectionFailed, a review)
                return _core.conninfo_of(self._conn.pgconn)
        assert self._pool is not None
        return _core.pool_conninfo(_plain(self._pool.conninfo, "conninfo"), _plain(self._pool.kwargs, "kwargs"))

    async def close(self) -> None:
        """Close the connections this connector opened (never the caller's)."""
        self._closed = self._dsn is not None
        owned = [c for c in (self._own, self._own_heartbeat) if c is not None]
        self._own = self._own_heartbeat = None
        for conn in owned:
            await conn.close()


class AsyncQueue:
    """A queue of the pgqueue extension, used with asyncio.

    Parameters:
        conn: a connection string, a ``psycopg.AsyncConnection`` or a
            ``psycopg_pool.AsyncConnectionPool``.
        name: the queue's name.

    The methods are those of :class:`pgqueue.Queue`, as coroutines, with the same parameters,
    results and errors; ``receive()`` is an async context manager.
    """

    def __init__(self, conn: AsyncConnectionSource, name: str = "default") -> None:
        if not isinstance(name, str):
            raise TypeError(f"the queue name must be a str, got {type(name).__name__}")
        self._name = name
        self._connector = _AsyncConnector(conn)

    @property
    def name(self) -> str:
        """The queue's name."""
        return self._name

    @property
    def conninfo(self) -> str:
        """A connection string for the queue's database (the password included, if any).

        :class:`pgqueue.AsyncWorker` uses it to open connections of its own.
        """
        return self._connector.conninfo()

    def __repr__(self) -> str:
        return f"AsyncQueue({self._name!r})"

    async def close(self) -> None:
        """Close the connections the queue opened itself; a caller's connection or pool stays open."""
        await self._connector.close()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # -- producing ---------------------------------------------------------------------

    async def enqueue(self, payload: object, *, delay: Delay | None = None, at: When | None = None,
                      priority: int | None = None, task: str | None = None, group: str | None = None,
                      key: str | None = None) -> int:
        """Enqueue one message and return its id (see :meth:`pgqueue.Queue.enqueue`)."""
        return await self._connector.run(
            _core.enqueue(self._name, payload, delay=delay, at=at, priority=priority, task=task,
                          group=group, key=key))

    async def enqueue_many(self, payloads: Iterable[object], *, delay: Delay | None = None,
                           at: When | None = None, priority: int | None = None,
                           task: str | None = None, groups: Iterable[str | None] | None = None,
                           keys: Iterable[str | None] | None = None) -> list[int]:
        """Enqueue many messages in one statement and return their ids (see :meth:`pgqueue.Queue.enqueue_many`)."""
        return await self._connector.run(
            _core.enqueue_many(self._name, payloads, delay=delay, at=at, priority=priority, task=task,
                               groups=groups, keys=keys))

    # -- consuming ---------------------------------------------------------------------

    async def dequeue(self, limit: int = 1, *, lock_ms: int | None = None) -> list[Message]:
        """Take up to ``limit`` deliverable messages (see :meth:`pgqueue.Queue.dequeue`)."""
        return await self._connector.run(_core.dequeue(self._name, limit, lock_ms=lock_ms))

    async def complete(self, msg: Message) -> bool:
        """Acknowledge a leased message; False if its lease was lost (see :meth:`pgqueue.Queue.complete`)."""
        return await self._connector.run(_core.complete(msg))

    async def complete_many(self, msgs: Iterable[Message]) -> list[Message]:
        """Acknowledge many leased messages (at most 10000 distinct) in one statement; returns those whose
        lease was lost (see :meth:`pgqueue.Queue.complete_many`)."""
        return await self._connector.run(_core.complete_many(msgs))

    async def complete_and_dequeue(self, msgs: Iterable[Message], limit: int = 1, *,
                                   lock_ms: int | None = None) -> tuple[list[Message], list[Message]]:
        """Acknowledge leased messages (at most 10000 distinct) and take up to ``limit`` new ones in one
        statement; returns ``(messages, lost)`` (see :meth:`pgqueue.Queue.complete_and_dequeue`)."""
        return await self._connector.run(_core.complete_and_dequeue(self._name, msgs, limit, lock_ms=lock_ms))

    async def heartbeat(self, msg: Message, lock_ms: int | None = None) -> bool:
        """Extend a lease to now + lock_ms; False if it was lost (see :meth:`pgqueue.Queue.heartbeat`)."""
        return await self._connector.run(_core.heartbeat(msg, lock_ms))

    async def heartbeat_many(self, msgs: Iterable[Message], lock_ms: int | None = None) -> list[Message]:
        """Extend many leases (at most 10000 distinct messages) in one statement; returns those whose lease
        was lost (see :meth:`pgqueue.Queue.heartbeat_many`)."""
        return await self._connector.run(_core.heartbeat_batch(msgs, lock_ms))

    async def defer(self, msg: Message, *, delay: Delay | None = None, at: When | None = None,
                    state: bytes | None = None) -> bool:
        """Give a leased message back until later (see :meth:`pgqueue.Queue.defer`)."""
        return await self._connector.run(_core.defer(msg, delay=delay, at=at, state=state))

    async def fail(self, msg: Message, error: str | BaseException, *, delay: Delay | None = None,
                   at: When | None = None) -> bool:
        """Report a failed attempt: retry after back-off or dead-letter (see :meth:`pgqueue.Queue.fail`)."""
        return await self._connector.run(_core.fail(msg, error, delay=delay, at=at))

    @asynccontextmanager
    async def receive(self, *, lock_ms: int | None = None, heartbeat: bool = True) -> AsyncIterator[Message | None]:
        """Dequeue one message for the ``async with`` block and settle it when the block ends.

        Completes it when the block returns, fails it when the block raises an ``Exception``
        (which propagates; :class:`pgqueue.Reject`, or an ``asyncio.TaskGroup``'s exception
        group whose leaves are all Rejects, dead-letters it now), gives it back for
        immediate redelivery when the block is cancelled or interrupted, or when the
        heartbeats' connection cannot be opened (the block does not run). A cancellation that
        lands as the block ends, while its heartbeat task stops (a beat in flight is awaited
        for at most :data:`CANCEL_WAIT` seconds, cancelled or not) or while the message is
        being settled, still settles it by the block's outcome (up to :data:`CANCEL_WAIT`
        seconds), then goes on. A cancellation while the message is being dequeued (an
        ``asyncio.timeout`` around the ``async with``) gives back the message the server had
        leased already, if any, and the block does not run. While the block runs, an asyncio
        task extends the lease every third of it on a separate connection (see
        :meth:`pgqueue.Queue.receive`), on the block's own loop: a block that blocks the loop
        (``time.sleep``, a blocking client) holds the heartbeats up, and a lease it outlasts runs
        out (blocking work goes to ``asyncio.to_thread``).

        Raises:
            InvalidArgument: lock_ms is 0. And what the block raises.
        """
        lease, in_transaction = await self._take(_core.receive(self._name, lock_ms=lock_ms, heartbeat=heartbeat))
        if lease is None:
            yield None
            return
        msg = lease.message
        stack = AsyncExitStack()
        try:
            if heartbeat:
                runner = await stack.enter_async_context(self._connector.heartbeat_runner(in_transaction))
                if runner is not None:
                    # one message held: message_heartbeat, renewing the lease the block was given
                    # (the queue's lock_ms lowered while it runs made each beat too short for the
                    # beats' interval, and another consumer took the message: a review)
                    hb_call = _core.heartbeat(msg, lease.lease_ms if lock_ms is None else lock_ms)

                    async def beat(held: list[Message]) -> list[Message]:
                        return [] if await runner(hb_call) else held

                    beats = AsyncHeartbeats(lambda: [msg], beat, interval(lease.lease_ms),
                                            name=f"pgqueue-heartbeat-{msg.id}")
                    # bounded: a beat stuck on a dead connection does not hold the block's end
                    stack.push_async_callback(beats.stop, CANCEL_WAIT)
        except BaseException as exc:  # the block has not run: the message goes back as it was
            # a cancellation while the heartbeats' connection closes goes on in place of the
            # error of the setup, once the message is back
            await self._end(stack, msg, exc, "release", committed=not in_transaction)
            raise
        outcome: BaseException | None = None
        try:
            yield msg
        except BaseException as exc:
            outcome = exc
            raise
        finally:
            # The heartbeats stop first (a beat after the settling would find the lease gone),
            # then the message is settled by the block's own outcome, whatever lands meanwhile:
            # a cancellation while the heartbeats stop (an asyncio.timeout, a TaskGroup) goes on
            # once the message is settled, rather than leave a finished block's message leased.
            # That cancellation goes on even if the settling fails (its error is then the
            # cancellation's context), and in place of the block's own error, but not of its
            # KeyboardInterrupt or SystemExit.
            await self._end(stack, msg, outcome, committed=not in_transaction)

    async def _end(self, stack: AsyncExitStack, msg: Message, outcome: BaseException | None,
                   action: _core.Outcome | None = None, *, committed: bool = False) -> None:
        """End a ``receive`` block: stop its heartbeats (:meth:`_unwind`), settle its message by
        ``outcome`` (or ``action``) where no cancellation reaches (:meth:`_settle_shielded`),
        then raise a cancellation that landed meanwhile, if :func:`_going_on` says it goes on
        (what was raised is then its context)."""
        interrupted = await self._unwind(stack, msg)
        settle_error: BaseException | None = None
        cancelled: asyncio.CancelledError | None = None
        try:
            # a cancellation held back while the heartbeats stopped bounds the settling too, and
            # so does the block's own (its give-back waited, without a bound, for a statement of
            # another task on the shared connection: 12 s under a 1-s asyncio.timeout in a review)
            held = (interrupted if isinstance(interrupted, asyncio.CancelledError)
                    else outcome if isinstance(outcome, asyncio.CancelledError) else None)
            # The block's own statement on the shared connection may have been interrupted in
            # the middle of its answer (a cancellation or a Ctrl-C inside psycopg's reading on
            # after its cancel): what is left is read first, in the settling's task (a second
            # cancellation meanwhile is held back as the settling's). Not for a GeneratorExit:
            # an async generator closed around the block interrupts no statement.
            reading = outcome is not None and not isinstance(outcome, (Exception, GeneratorExit))
            cancelled = await self._settle_shielded(msg, outcome, action, held, reading, committed=committed)
        except BaseException as err:
            settle_error = err
            raise
        finally:
            going = _going_on(msg, settle_error or outcome, cancelled, interrupted)
            if going is not None:
                raise going  # a cancellation goes on; what was raised is its context

    async def _unwind(self, stack: AsyncExitStack, msg: Message) -> BaseException | None:
        """Close a ``receive`` block's stack (stop its heartbeats, at most :data:`CANCEL_WAIT`
        seconds, and close their connection) in a task a cancellation does not reach.

        Returns what interrupted it, for the caller to raise once the message is settled: a
        cancellation that landed meanwhile (the closing is then awaited for at most
        :data:`CANCEL_WAIT` seconds more), or an error of the closing.
        """
        closing = asyncio.ensure_future(stack.aclose())
        cancelled = await _unreached(closing)
        error = None if not closing.done() or closing.cancelled() else closing.exception()
        if cancelled is None:
            return error  # raised after the settling
        if error is not None or not closing.done() or closing.cancelled():
            # it failed, or did not end in time: the settling comes first
            logger.warning("message %s on queue %s: the heartbeats of a cancelled receive() did not stop: %r",
                           msg.id, msg.queue, error)
        return cancelled

    async def _settle_shielded(self, msg: Message, exc: BaseException | None, action: _core.Outcome | None = None,
                               held: asyncio.CancelledError | None = None,
                               reading: bool = False, *, committed: bool = False) -> asyncio.CancelledError | None:
        """Settle as :meth:`_settle` does, in a task a cancellation does not reach: cancelled
        meanwhile (an ``asyncio.timeout`` around the ``async with``), even twice, the settling
        is awaited for at most :data:`CANCEL_WAIT` seconds more. Cancelled with it, the
        statement would be cancelled and a finished message left leased, to be delivered again
        (a dead letter at ``max_attempts``).

        Returns the cancellation, for the caller to raise (an error of the settling is then
        logged); raises the settling's error if there was none, or if the only one is ``held``
        (one that landed before, while the heartbeats stopped, which bounds the settling too).

        With ``reading``, what an interruption left unread on the shared connection is read
        first, in the same task (:meth:`_read_then_settle`).
        """
        settling = asyncio.ensure_future(self._read_then_settle(msg, exc, action, committed=committed) if reading
                                         else self._settle(msg, exc, action, committed=committed))
        cancelled = await _unreached(settling, held)
        if cancelled is None or (cancelled is held and settling.done() and not settling.cancelled()):
            settling.result()  # its error, if any, for the caller (a held cancellation goes on with it as context)
            return cancelled
        if not settling.done() or settling.cancelled() or settling.exception() is not None:
            error = None if not settling.done() or settling.cancelled() else settling.exception()
            logger.warning("message %s on queue %s: the settling of a cancelled receive() did not finish: %r",
                           msg.id, msg.queue, error)
        return cancelled

    async def _read_then_settle(self, msg: Message, exc: BaseException | None,
                                action: _core.Outcome | None = None, *, committed: bool = False) -> None:
        """Read what an interruption left unread on the shared connection
        (:meth:`_AsyncConnector.read_what_is_left`, at most 5 seconds), then settle as
        :meth:`_settle` does, whatever the reading met."""
        try:
            await self._connector.read_what_is_left()
        except Exception as err:  # noqa: BLE001 (the settling comes all the same; it says what is wrong)
            logger.warning("message %s on queue %s: reading what an interruption left on the connection failed: %r",
                           msg.id, msg.queue, err)
        await self._settle(msg, exc, action, committed=committed)

    async def _take(self, call: Call[_core.Lease | None]) -> tuple[_core.Lease | None, bool]:
        """Run the dequeue of ``receive`` so that a cancellation cannot strand the message it leased.

        Returns the lease, if any, and whether the dequeue ran in the caller's transaction
        (:meth:`_AsyncConnector.run_leasing`).

        Cancelled while it waits, psycopg asks the server to cancel the statement; if the server
        had leased the message already (its answer still on the way), psycopg drops the answer
        and the message would stay leased by no one until the lease ran out, an attempt spent
        (a dead letter at ``max_attempts``). So the statement runs in a task the cancellation
        does not reach: it is awaited, for at most :data:`CANCEL_WAIT` seconds (then cancelled
        as before), the message it took is given back, and the cancellation goes on.
        """
        (lease, in_transaction), cancelled = await _answered(self._connector.run_leasing(call))
        if cancelled is None:
            return lease, in_transaction
        if lease is not None:  # the message it took given back where no cancellation reaches either
            await self._settle_shielded(lease.message, cancelled, None, cancelled, committed=not in_transaction)
        raise cancelled from None

    async def _settle(self, msg: Message, exc: BaseException | None, action: _core.Outcome | None = None, *,
                      committed: bool = False) -> None:
        action = action or _core.outcome(exc)
        if action == "complete":
            if not await self._settle_call(_core.complete(msg), committed):
                logger.warning("message %s on queue %s could not be completed: its lease was lost "
                               "(or the block completed, deferred, failed or rejected it itself)",
                               msg.id, msg.queue)
            return
        assert exc is not None
        try:
            await self._settle_call(_core.fail(msg, exc) if action == "fail"
                                    else _core.reject(msg, exc) if action == "reject" else _core.defer(msg), committed)
        except PgQueueError as err:
            exc.add_note(f"pgqueue: could not {action} message {msg.id}: {err}")
            logger.warning("could not %s message %s on queue %s: %s", action, msg.id, msg.queue, err)

    async def _settle_call(self, call: Call[bool], committed: bool = False) -> bool:
        """Run the call that settles a ``receive`` block's message, once more on a new
        connection if its own was lost, or on one of its own if the caller's is closed and the
        lease was ``committed`` on it (see :meth:`pgqueue.Queue._settle_once`)."""
        try:
            return await self._connector.run(call)
        except ConnectionFailed:
            if committed and self._connector.settles_elsewhere():
                logger.info("settling a message: the caller's connection is closed; settling on a connection of its own")
                return await self._connector.settle_elsewhere(call)
            if not self._connector.replaces_lost():
                raise
            logger.info("settling a message: the connection was lost; trying once more on a new one")
            await self._connector.drop_lost()
            return await self._connector.run(call)

    async def reject(self, msg: Message, error: str | BaseException) -> bool:
        """Move a leased message to the dead letters now (see :meth:`pgqueue.Queue.reject`)."""
        return await self._connector.run(_core.reject(msg, error))

    async def next_due(self) -> datetime | None:
        """Return when the next message becomes deliverable, None if the queue is empty; a
        priority message counts as due since the epoch, 1970-01-01 UTC (see
        :meth:`pgqueue.Queue.next_due`)."""
        return await self._connector.run(_core.next_due(self._name))

    async def peek(self, limit: int = 10) -> list[Pending]:
        """Return up to ``limit`` waiting messages in delivery order, without leasing them (see
        :meth:`pgqueue.Queue.peek`)."""
        return await self._connector.run(_core.peek(self._name, limit))

    async def cancel(self, ids: Iterable[int]) -> list[Pending]:
        """Delete pending messages by id; return those removed, by id (see :meth:`pgqueue.Queue.cancel`)."""
        return await self._connector.run(_core.cancel(self._name, ids))

    # -- management --------------------------------------------------------------------

    async def create(self, *, lock_ms: int = 30000, max_attempts: int | None = None, retry_base_ms: int = 1000,
                     retry_cap_ms: int = 3600000, max_size: int | None = None, notify: bool = False,
                     if_not_exists: bool = False, group_concurrency: int | None = None,
                     key_window_ms: int = 0, rate_limit: int | None = None) -> None:
        """Create the queue (see :meth:`pgqueue.Queue.create`)."""
        await self._connector.run(_core.create(
            self._name, lock_ms=lock_ms, max_attempts=max_attempts, retry_base_ms=retry_base_ms,
            retry_cap_ms=retry_cap_ms, max_size=max_size, notify=notify, if_not_exists=if_not_exists,
            group_concurrency=group_concurrency, key_window_ms=key_window_ms, rate_limit=rate_limit))

    async def alter(self, *, lock_ms: int | None = None, max_attempts: int | None = None,
                    retry_base_ms: int | None = None, retry_cap_ms: int | None = None,
                    max_size: int | None = None, notify: bool | None = None,
                    group_concurrency: int | None = None, key_window_ms: int | None = None,
                    rate_limit: int | None = None) -> None:
        """Change the queue's settings; None keeps a setting (see :meth:`pgqueue.Queue.alter`)."""
        await self._connector.run(_core.alter(
            self._name, lock_ms=lock_ms, max_attempts=max_attempts, retry_base_ms=retry_base_ms,
            retry_cap_ms=retry_cap_ms, max_size=max_size, notify=notify,
            group_concurrency=group_concurrency, key_window_ms=key_window_ms, rate_limit=rate_limit))

    async def drop(self) -> bool:
        """Drop the queue with its messages and dead letters; False if it did not exist (see
        :meth:`pgqueue.Queue.drop`)."""
        return await self._connector.run(_core.drop(self._name))

    async def settings(self) -> QueueSettings:
        """Return the queue's settings (see :meth:`pgqueue.Queue.settings`)."""
        return await self._connector.run(_core.settings(self._name))

    async def stats(self, *, exact: bool = False) -> QueueStats:
        """Return the queue's message counts by state (see :meth:`pgqueue.Queue.stats`)."""
        return await self._connector.run(_core.stats(self._name, exact=exact))

    async def group_stats(self, limit: int = 10) -> list[GroupStats]:
        """Return the message groups with the most messages waiting (see :meth:`pgqueue.Queue.group_stats`)."""
        return await self._connector.run(_core.group_stats(self._name, limit))

    async def counters(self) -> QueueCounters:
        """Return what happened on the queue since it was created (see :meth:`pgqueue.Queue.counters`)."""
        return await self._connector.run(_core.counters(self._name))

    async def dead_letters(self, limit: int = 100, *, after: DeadLetter | None = None) -> list[DeadLetter]:
        """Return up to ``limit`` dead letters of the queue, oldest death first, after the
        letter ``after`` when given (see :meth:`pgqueue.Queue.dead_letters`)."""
        return await self._connector.run(_core.dead_letters(self._name, limit, after))

    async def requeue_dead(self, ids: Iterable[int] | None = None, *, delay: Delay | None = None,
                           at: When | None = None) -> int:
        """Move dead letters back onto the queue as new messages; return how many (see
        :meth:`pgqueue.Queue.requeue_dead`)."""
        return await self._connector.run(_core.requeue_dead(self._name, ids, delay=delay, at=at))

    async def purge_dead(self, ids: Iterable[int] | None = None, *, before: When | None = None) -> int:
        """Delete dead letters of the queue (all, the ids given, and/or dead before a time); return
        how many (see :meth:`pgqueue.Queue.purge_dead`)."""
        return await self._connector.run(_core.purge_dead(self._name, ids, before=before))


async def _run_once(conn: AsyncConnectionSource, call: Call[T]) -> T:
    connector = _AsyncConnector(conn)
    try:
        return await connector.run(call)
    finally:
        await connector.close()


async def list_queues(conn: AsyncConnectionSource) -> list[QueueSettings]:
    """Return the settings of every queue, by name (a connection string is opened and closed here)."""
    return await _run_once(conn, _core.list_queues())


async def all_stats(conn: AsyncConnectionSource) -> list[QueueStats]:
    """Return the message counts of every queue, by name (a connection string is opened and closed here)."""
    return await _run_once(conn, _core.all_stats())


async def all_counters(conn: AsyncConnectionSource) -> list[QueueCounters]:
    """Return the counters of every queue, by name (a connection string is opened and closed here)."""
    return await _run_once(conn, _core.all_counters())
