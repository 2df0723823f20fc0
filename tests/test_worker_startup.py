"""The start of a worker (Worker, AsyncWorker, `pgqueue worker`) and of a scheduler (Scheduler,
`pgqueue scheduler`) against a database that cannot be used yet, and a worker whose server turns
read-only.

A database that cannot be reached yet (nothing listens, a server starting up or out of connection
slots: docker-compose starting the worker first, a failover) is waited for with the worker's
reconnection backoff (0.1 s doubling to 30 s), logged with one warning when it starts and one line
when it connects; so is a read-only one (a hot standby, simulated here with
default_transaction_read_only set on the database), at start and while running. What no wait
mends (a refused login, a database or role that does not exist, pgqueue not installed, an
unknown queue, a bad connection string) still ends the start at once, and stop() (SIGTERM) ends
the wait at once, even in a connection attempt the server does not answer.

The database is reached through a :class:`Door`: a port in front of the test server that is
shut (connection refused), open (a relay to the server), silent (accepts, never answers), or
answers the next connections itself with a server's FATAL refusal of the login.

Each test failed on the code before this change: the start raised the first connection error
(so run() raised and `pgqueue worker`/`pgqueue scheduler` exited 1 at once), a write refused as
read-only (25006) stopped the worker with the error, and a connection attempt the server did
not answer held stop() for connect_timeout (10 s). The cases of
test_what_no_wait_mends_ends_the_start_at_once for the workers are the guard of the other side:
they passed before and must still pass (the library Scheduler's failed before: it retried a
refused login, a missing database or pgqueue forever).

Section 6 came with a review, each test failing before its fix: option values libpq refuses
before connecting and logins refused in another language were retried for good; the timeout was
no bound (a silent server took connect_timeout per attempt, for ever with connect_timeout=0, and a
check the database did not answer was not given up); stop() did not give up the Scheduler's
check, nor the worker's read-only check; a stopped attempt with connect_timeout=0 kept its
thread; a long wait said nothing after its first warning; the commands waited for good.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from conftest import Server, admin_execute, create_database, drop_database, hold_version_check
from pgqueue import AsyncQueue, AsyncWorker, Message, Queue
from pgqueue.errors import ConnectionFailed, ExtensionNotInstalled, PgQueueError, QueueNotFound
from pgqueue.schedules import Scheduler, create_schedule
from pgqueue.worker import Result, Worker
from test_worker import PGQUEUE, TESTS, Started, make_queue, stop_and_time, wait_for
from worker_handlers import marks

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Door:
    """A port on 127.0.0.1 in front of the test server: ``shut`` (nothing listens: connection
    refused), ``open`` (each connection relayed to the server), ``silent`` (accepted, never
    answered: a server that hangs). ``fatals`` are answered to the next connections, one each,
    before the mode applies: a server refusing the login with (SQLSTATE, message)."""

    def __init__(self, server: Server, dbname: str) -> None:
        self.server = server
        self.port = free_port()
        self.dsn = make_conninfo(server.dsn(dbname), host="127.0.0.1", port=str(self.port))
        self.mode = "shut"
        self.fatals: list[tuple[str, ...]] = []  # (SQLSTATE, message[, severity as the server words it])
        self.accepted = 0
        self._listener: socket.socket | None = None
        self._held: list[socket.socket] = []
        self._relayed: list[socket.socket] = []

    def open(self, mode: str = "open") -> None:
        self.mode = mode
        if self._listener is None:
            self._listener = socket.create_server(("127.0.0.1", self.port))
            threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def shut(self) -> None:
        self.mode = "shut"
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # (wakes the accept: close alone does not)
            except OSError:
                pass
            listener.close()
        for s in self._held:
            s.close()

    def cut(self) -> None:
        """Break the connections relayed so far (as a server that went away)."""
        for s in self._relayed:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            self.accepted += 1
            if self.fatals:
                threading.Thread(target=self._refuse, args=(client, *self.fatals.pop(0)), daemon=True).start()
            elif self.mode == "silent":
                self._held.append(client)
            else:
                upstream = socket.create_connection((self.server.host, self.server.port))
                self._relayed += [client, upstream]
                threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
                threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _refuse(client: socket.socket, sqlstate: str, message: str, severity: str = "FATAL") -> None:
        """Answer a connection's start-up as a server refusing the login with a FATAL error
        (``severity``: its localized word, as a server whose lc_messages is not English sends it)."""
        with client:
            try:
                while True:
                    length, code = struct.unpack("!II", _read(client, 8))
                    if code in (SSL_REQUEST, GSSENC_REQUEST):
                        client.sendall(b"N")
                        continue
                    _read(client, length - 8)  # the StartupMessage's parameters
                    break
                fields = (b"S" + severity.encode() + b"\0VFATAL\0C" + sqlstate.encode() + b"\0M" + message.encode() + b"\0\0")
                client.sendall(b"E" + struct.pack("!I", len(fields) + 4) + fields)
            except OSError:
                pass


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def door(pg_server: Server, dbname: str) -> Iterator[Door]:
    d = Door(pg_server, dbname)
    try:
        yield d
    finally:
        d.shut()


class Handled:
    """A handler for either worker that records the ids it handled."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    def worker(self, kind: str, dsn: str, queue: str = "jobs", **options: Any) -> Worker | AsyncWorker:
        if kind == "Worker":
            return Worker(Queue(dsn, queue), lambda msg: self.ids.append(msg.id), poll_max=0.2, **options)

        async def handle(msg: Message) -> None:
            self.ids.append(msg.id)

        return AsyncWorker(AsyncQueue(dsn, queue), handle, poll_max=0.2, **options)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("pgqueue")]


def messages_of(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


# -- 1. a server that cannot be reached yet: waited for ---------------------------------------


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_worker_started_before_its_server_waits_for_it_then_works(
        dsn: str, door: Door, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgqueue")
    make_queue(dsn).enqueue_many(list(range(5)))
    handled = Handled()
    started = Started(handled.worker(kind, door.dsn))  # nothing listens: connection refused
    try:
        wait_for(lambda: warnings_of(caplog) or not started.thread.is_alive(), what="the first failure")
        time.sleep(1.6)  # several tries: 0.1 s, 0.2 s, 0.4 s, 0.8 s
        assert not started.errors, started.errors
        assert started.thread.is_alive() and not handled.ids
        door.open()
        wait_for(lambda: len(handled.ids) == 5, timeout=40, what="the messages, once the server is there")
    finally:
        took = stop_and_time(started)
    assert not started.thread.is_alive() and not started.errors, started.errors
    assert took < 5, took
    # the outage logged once (its retries at DEBUG), and its end once
    warned = warnings_of(caplog)
    assert len(warned) == 1, warned
    assert warned[0].startswith("the database cannot be reached yet: ") and "Connection refused" in warned[0], warned
    assert len(messages_of(caplog, "database connection works again")) == 1, caplog.text


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_logins_refused_for_now_are_waited_out_and_a_final_refusal_ends_the_start(
        door: Door, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """The server answers the login with a FATAL: starting up, shutting down (57P03), out of
    connection slots (53300), an administrator's shutdown (57P01): tried again; then a refused
    password (28P01): the start ends at once with it, no further try."""
    caplog.set_level(logging.INFO, logger="pgqueue")
    door.fatals = [("57P03", "the database system is starting up"),
                   ("53300", "sorry, too many clients already"),
                   ("57P03", "the database system is shutting down"),
                   ("53300", 'too many connections for role "postgres"'),
                   ("57P01", "terminating connection due to administrator command"),
                   ("28P01", 'password authentication failed for user "postgres"')]
    door.open()
    started = Started(Handled().worker(kind, door.dsn))
    started.thread.join(20)
    assert not started.thread.is_alive()
    assert len(started.errors) == 1 and isinstance(started.errors[0], ConnectionFailed), started.errors
    assert "password authentication failed" in str(started.errors[0])
    assert door.accepted == 6, door.accepted  # each refusal for now tried again; the last not
    warned = warnings_of(caplog)
    assert len(warned) == 1 and "the database system is starting up" in warned[0], warned


def _no_connect_role(pg_server: Server, dbname: str) -> str:
    role = f"noconnect_{os.getpid()}"
    admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)),
                  sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)),
                  sql.SQL("REVOKE CONNECT ON DATABASE {} FROM PUBLIC").format(sql.Identifier(dbname)))
    return role


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker", "Scheduler"])
def test_what_no_wait_mends_ends_the_start_at_once(pg_server: Server, dbname: str, kind: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgqueue")
    make_queue(pg_server.dsn(dbname))
    bare = create_database(pg_server, "template0", prefix="bare")  # no pgqueue in it
    role = _no_connect_role(pg_server, dbname)
    cases: list[tuple[str, str, type[PgQueueError], str]] = [
        ("no such database", pg_server.dsn(f"{dbname}_missing"), ConnectionFailed, "does not exist"),
        ("no such role", pg_server.dsn(dbname, user="nobody_here"), ConnectionFailed, "does not exist"),
        ("no CONNECT privilege", pg_server.dsn(dbname, user=role), ConnectionFailed, "permission denied"),
        ("pgqueue not installed", pg_server.dsn(bare), ExtensionNotInstalled, "not installed"),
    ]
    if kind != "Scheduler":
        cases.append(("unknown queue", pg_server.dsn(dbname), QueueNotFound, "does not exist"))
    try:
        for what, dsn, error, words in cases:
            caught: list[BaseException] = []
            runner: Scheduler | Worker | AsyncWorker
            if kind == "Scheduler":
                runner = Scheduler(dsn, interval=0.1, handle_signals=False)
            else:
                runner = Handled().worker(kind, dsn, "nope" if what == "unknown queue" else "jobs")
            thread = threading.Thread(target=_catch, args=(runner, caught), daemon=True)
            t0 = time.monotonic()
            thread.start()
            thread.join(15)
            if thread.is_alive():  # (it waits: a failure, stopped to end the test)
                runner.stop()
                thread.join(15)
            took = time.monotonic() - t0
            assert len(caught) == 1 and isinstance(caught[0], error), (what, caught)
            assert words in str(caught[0]), (what, caught[0])
            assert took < 10, (what, took)  # at once (a loaded machine: seconds), not once stopped
            assert not warnings_of(caplog), (what, warnings_of(caplog))  # no retry announced
    finally:
        drop_database(pg_server, bare)
        admin_execute(pg_server, sql.SQL("GRANT CONNECT ON DATABASE {} TO PUBLIC").format(sql.Identifier(dbname)),
                      sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def _catch(runner: Scheduler | Worker | AsyncWorker, caught: list[BaseException]) -> None:
    """Run a scheduler or worker to its end (on a thread); keep what it raised."""
    try:
        if isinstance(runner, AsyncWorker):
            asyncio.run(runner.run())
        else:
            runner.run()
    except BaseException as exc:
        caught.append(exc)


# -- 2. stop() while the start waits: at once -------------------------------------------------


@pytest.mark.parametrize("server", ["refusing", "silent"])
@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker", "Scheduler"])
def test_a_stop_while_the_start_waits_for_the_database_ends_it_at_once(
        door: Door, kind: str, server: str, caplog: pytest.LogCaptureFixture) -> None:
    """Stopped during a wait between tries (nothing listens), or in a connection attempt that the
    server accepted and does not answer (it took connect_timeout, 10 s): run() returns at once,
    without an error."""
    caplog.set_level(logging.INFO, logger="pgqueue")
    if server == "silent":
        door.open("silent")
    # an attempt a stop did not end would take connect_timeout: 30 s here, far past the bound below
    dsn = make_conninfo(door.dsn, connect_timeout="30")
    caught: list[BaseException] = []
    started: Started | None = None
    if kind == "Scheduler":
        scheduler = Scheduler(dsn, interval=0.1, handle_signals=False)
        thread = threading.Thread(target=_catch, args=(scheduler, caught), daemon=True)
        thread.start()
    else:
        started = Started(Handled().worker(kind, dsn))
        thread = started.thread
    try:
        if server == "silent":
            wait_for(lambda: door.accepted >= 1, what="the connection attempt")
        else:
            wait_for(lambda: warnings_of(caplog) or not thread.is_alive(), what="the first failure")
        time.sleep(0.3)
        assert thread.is_alive(), (caught, started and started.errors)
        t0 = time.monotonic()
        if started is not None:
            took = stop_and_time(started)
        else:
            scheduler.stop()
            thread.join(15)
            took = time.monotonic() - t0
    finally:
        if thread.is_alive():
            (scheduler if started is None else started.worker).stop()
            thread.join(15)
    assert not thread.is_alive()
    assert not caught and not (started and started.errors), (caught, started and started.errors)
    assert took < 5, took  # at once (a loaded machine: seconds), not after the attempt
    assert messages_of(caplog, "stopped while waiting for the database: not started"), caplog.text


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_stop_while_a_running_worker_reconnects_ends_it_at_once(
        dsn: str, door: Door, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """The server goes away under a running worker and the address it reconnects to accepts and
    does not answer (a failover in progress): stop() ends the reconnection attempt at once. It
    waited for connect_timeout (10 s), and the Worker for its LISTEN thread's attempt too."""
    caplog.set_level(logging.INFO, logger="pgqueue")
    queue = make_queue(dsn)
    door.open()
    handled = Handled()
    settled: list[Result] = []
    threads = set(threading.enumerate())
    started = Started(handled.worker(kind, door.dsn, on_result=settled.append))
    try:
        queue.enqueue("first")
        # acknowledged: nothing is left for the shutdown to settle (which connects as before, to
        # acknowledge what finished: bounded by connect_timeout, not by the stop)
        wait_for(lambda: len(settled) == 1, what="the first message acknowledged")
        door.open("silent")
        before = door.accepted
        door.cut()
        wait_for(lambda: door.accepted >= before + 2, what="the reconnection attempts")  # the loop's, LISTEN's
        time.sleep(0.3)
        assert started.thread.is_alive() and not started.errors, started.errors
        took = stop_and_time(started)
        # the Worker's LISTEN thread ends with the stop: run() waits 2 s for it, too short to tell
        # from a loaded machine's delays, so it is given 3 s more here; its attempt, had the stop
        # not ended it, would run on until connect_timeout (10 s)
        listening = [t for t in threading.enumerate() if t not in threads and t.name == "pgqueue-listen"]
        for t in listening:
            t.join(3)
    finally:
        if started.thread.is_alive():
            stop_and_time(started)
    assert not started.thread.is_alive() and not started.errors, started.errors
    assert not [t for t in listening if t.is_alive()], "the LISTEN thread's attempt outlived the stop"
    # at once (a loaded machine: seconds), not after the loop's attempt (connect_timeout, 10 s)
    assert took < 6, took


# -- 3. a read-only server (a hot standby after a failover): an outage --------------------------


def _read_only(conn: psycopg.Connection[Any], on: bool) -> None:
    name = sql.Identifier(conn.info.dbname)
    if on:
        conn.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(name))
    else:
        conn.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(name))


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_worker_started_on_a_read_only_database_waits_until_it_takes_writes(
        dsn: str, conn: psycopg.Connection[Any], kind: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgqueue")
    make_queue(dsn).enqueue_many(list(range(3)))
    _read_only(conn, True)  # every new session read-only, as on a hot standby
    handled = Handled()
    started = Started(handled.worker(kind, dsn))
    try:
        wait_for(lambda: warnings_of(caplog) or not started.thread.is_alive(), what="the first failure")
        time.sleep(1.0)
        assert not started.errors, started.errors
        assert started.thread.is_alive() and not handled.ids
        _read_only(conn, False)
        wait_for(lambda: len(handled.ids) == 3, timeout=30, what="the messages, once it takes writes")
    finally:
        stop_and_time(started)
    assert not started.thread.is_alive() and not started.errors, started.errors
    warned = warnings_of(caplog)
    assert len(warned) == 1 and warned[0].startswith("the database is read-only ("), warned
    assert "default_transaction_read_only" in warned[0], warned
    assert len(messages_of(caplog, "database connection works again")) == 1, caplog.text


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_a_worker_whose_server_turns_read_only_waits_and_goes_on(
        dsn: str, conn: psycopg.Connection[Any], kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """A failover leaves the worker on a server that refuses writes (25006): its sessions are
    ended and the new ones read-only. The worker waits (the outage logged once, the read-only
    refusals among its retries), then goes on once the server takes writes again. It used to
    stop with the error."""
    caplog.set_level(logging.DEBUG, logger="pgqueue")
    queue = make_queue(dsn, lock_ms=3000)
    handled = Handled()
    started = Started(handled.worker(kind, dsn))
    try:
        queue.enqueue("before")
        wait_for(lambda: len(handled.ids) == 1, what="the first message")
        _read_only(conn, True)
        conn.execute("SELECT pg_catalog.pg_terminate_backend(pid, 10000) FROM pg_catalog.pg_stat_activity "
                     "WHERE application_name = 'pgqueue-worker' AND datname = current_database()")
        queue.close()
        for n in range(3):  # (this session predates the change: it still writes)
            conn.execute("SELECT pgqueue.message_create('jobs', %s::bytea)", (f"during {n}".encode(),))
        wait_for(lambda: messages_of(caplog, "read-only") or not started.thread.is_alive(), timeout=15,
                 what="a write refused as read-only")
        time.sleep(1.0)
        assert not started.errors, started.errors
        assert started.thread.is_alive() and len(handled.ids) == 1, handled.ids
        _read_only(conn, False)
        wait_for(lambda: len(handled.ids) == 4, timeout=40, what="the messages, once it takes writes")
    finally:
        stop_and_time(started)
    assert not started.thread.is_alive() and not started.errors, started.errors
    loop_warnings = [w for w in warnings_of(caplog) if not w.startswith("LISTEN")]
    assert len(loop_warnings) == 1, loop_warnings  # one for the outage, whatever its errors
    assert len(messages_of(caplog, "database connection works again")) == 1, caplog.text


# -- 4. the commands -----------------------------------------------------------------------------


class Process:
    """A `pgqueue` command run from the tests directory, its stderr read as it comes."""

    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen([str(PGQUEUE), *argv], cwd=TESTS, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def having(self, words: str) -> list[str]:
        return [line for line in self.lines if words in line]

    def end(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 15) -> tuple[int, float]:
        """Send the signal; return the exit status and how long it took."""
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        status = self.proc.wait(timeout)
        took = time.monotonic() - t0
        self._reader.join(5)
        return status, took

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_the_commands_wait_for_the_database_and_a_sigterm_ends_the_wait_at_once(
        dsn: str, door: Door, command: str, tmp_path: Path) -> None:
    """`pgqueue worker` and `pgqueue scheduler` started before the server: they wait (one warning),
    work once it is there (one line), and SIGTERM ends them with status 0. Started again with
    nothing to reach, a SIGTERM during the wait ends them at once, status 0. They exited 1 at
    once."""
    queue = make_queue(dsn)
    mark = str(tmp_path / "marks")
    if command == "worker":
        queue.enqueue({"mark": mark})
        argv = ["worker", door.dsn, "jobs", "worker_handlers:obey"]
    else:
        create_schedule(dsn, "tick", "jobs", "tick", every=1)
        argv = ["scheduler", "--dsn", door.dsn, "--interval", "0.2"]
    proc = Process(*argv)
    try:
        wait_for(lambda: proc.having("WARNING") or proc.proc.poll() is not None, timeout=20,
                 what="the first failure")
        time.sleep(1.0)
        assert proc.proc.poll() is None, proc.lines
        door.open()
        if command == "worker":
            wait_for(lambda: marks(mark), timeout=40, what="the message handled")
        else:
            wait_for(lambda: queue.stats().ready >= 1, timeout=40, what="a slot enqueued")
        status, _ = proc.end()
    finally:
        proc.kill()
    assert status == 0, proc.lines
    assert "Traceback" not in "\n".join(proc.lines)
    warned = proc.having("WARNING")
    assert len(warned) == 1 and "the database cannot be reached yet" in warned[0], proc.lines
    assert len(proc.having("database connection works again")) == 1, proc.lines

    door.shut()
    proc = Process(*argv)
    try:
        wait_for(lambda: proc.having("WARNING") or proc.proc.poll() is not None, timeout=20,
                 what="the first failure")
        time.sleep(0.5)
        assert proc.proc.poll() is None, proc.lines
        status, took = proc.end()
    finally:
        proc.kill()
    assert status == 0, proc.lines
    assert took < 5.0, took  # at once (a loaded machine's exit: seconds), not when the wait would end
    assert proc.having("stopped while waiting for the database: not started"), proc.lines


@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_the_commands_startup_timeout_bounds_the_wait(dsn: str, door: Door, command: str) -> None:
    """--startup-timeout S: the wait ends after S seconds, exit 1 with one line; 0: no wait
    (the first failure, without a retry warning). The option did not exist."""
    make_queue(dsn)
    # (most: what a loaded machine may take; without the bound, the default's 300 s)
    for seconds, least, most in (("1.5", 1.4, 10.0), ("0", 0.0, 8.0)):
        if command == "worker":
            argv = ["worker", door.dsn, "jobs", "worker_handlers:obey", "--startup-timeout", seconds]
        else:
            argv = ["scheduler", "--dsn", door.dsn, "--startup-timeout", seconds]
        t0 = time.monotonic()
        proc = subprocess.run([str(PGQUEUE), *argv], cwd=TESTS, capture_output=True, text=True, timeout=60,
                              check=False)
        took = time.monotonic() - t0
        errors = [line for line in proc.stderr.splitlines() if line.startswith("pgqueue: error: ")]
        assert proc.returncode == 1, proc.stderr
        assert len(errors) == 1 and "cannot connect to the database" in errors[0], proc.stderr
        # libpq's lines joined with "; " (the worker's ran together), without psycopg's redundant
        # "connection failed: " before libpq's "connection to server ... failed"
        assert "Connection refused; Is the server running" in errors[0], proc.stderr
        assert "connection failed: connection to server" not in errors[0], proc.stderr
        assert least <= took < most + 1.5, (seconds, took)  # (+ the interpreter's start)
        warned = [line for line in proc.stderr.splitlines() if " WARNING " in line]
        if seconds == "0":
            assert not warned and "gave up" not in errors[0], proc.stderr
        else:
            assert len(warned) == 1 and "gave up" in errors[0], proc.stderr


@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_a_start_that_times_out_on_a_read_only_server_says_read_only(
        dsn: str, conn: psycopg.Connection[Any], command: str) -> None:
    """The error of a start given up on a read-only database (a hot standby) is the read-only
    refusal, not "got no answer in time": the last wait ends at the deadline, so the attempt
    after it was cut short at once and its OutOfTime was reported instead (a review, on a
    standby, with every --startup-timeout from 1 to 8 s)."""
    make_queue(dsn)
    _read_only(conn, True)
    try:
        for seconds in ("1", "2.5"):
            if command == "worker":
                argv = ["worker", dsn, "jobs", "worker_handlers:obey", "--startup-timeout", seconds]
            else:
                argv = ["scheduler", "--dsn", dsn, "--startup-timeout", seconds]
            proc = subprocess.run([str(PGQUEUE), *argv], cwd=TESTS, capture_output=True, text=True, timeout=60,
                                  check=False)
            errors = [line for line in proc.stderr.splitlines() if line.startswith("pgqueue: error: ")]
            assert proc.returncode == 1, proc.stderr
            assert len(errors) == 1 and "gave up" in errors[0], proc.stderr
            assert "read-only" in errors[0] and "no answer in time" not in errors[0], proc.stderr
    finally:
        _read_only(conn, False)


def test_a_start_whose_last_check_had_time_and_ran_out_of_it_says_so(
        dsn: str, conn: psycopg.Connection[Any]) -> None:
    """The read-only refusals before it are not the reason when the last attempt had time: the
    database took writes again, but the start-up check waited on a lock until the deadline. The
    first fix of the test above reported "read-only" here too (a second review)."""
    make_queue(dsn)
    _read_only(conn, True)
    proc = subprocess.Popen([str(PGQUEUE), "worker", dsn, "jobs", "worker_handlers:obey", "--startup-timeout", "6"],
                            cwd=TESTS, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        time.sleep(1.0)  # refused as read-only (tries at 0, 0.1, 0.3, 0.7 s; the next at 1.5 s)
        with psycopg.connect(dsn) as locker:
            _read_only(conn, False)
            locker.execute("LOCK TABLE pgqueue.queue IN ACCESS EXCLUSIVE MODE")  # the check waits on it
            _, err = proc.communicate(timeout=60)
    finally:
        _read_only(conn, False)
        if proc.poll() is None:
            proc.kill()
    errors = [line for line in err.splitlines() if line.startswith("pgqueue: error: ")]
    assert proc.returncode == 1 and len(errors) == 1, err
    assert "no answer in time" in errors[0] and "read-only" not in errors[0], err


@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_the_commands_end_at_once_on_what_no_wait_mends(pg_server: Server, dbname: str, door: Door,
                                                        command: str) -> None:
    """A refused login, a database that does not exist, a bad connection string: one line, exit 1,
    no wait (a guard: the commands did this before, and must go on doing it)."""
    make_queue(pg_server.dsn(dbname))
    door.fatals = [("28P01", 'password authentication failed for user "postgres"')]
    door.open()
    for dsn, words in ((door.dsn, "password authentication failed"),
                       (pg_server.dsn(f"{dbname}_missing"), "does not exist"),
                       ("host=127.0.0.1 nonsense", "invalid connection string"),
                       # an option value libpq refuses before connecting (it was retried for good)
                       (make_conninfo(door.dsn, sslmode="requir"), 'invalid sslmode value: "requir"')):
        if command == "worker":
            argv = ["worker", dsn, "jobs", "worker_handlers:obey"]
        else:
            argv = ["scheduler", "--dsn", dsn]
        proc = subprocess.run([str(PGQUEUE), *argv], cwd=TESTS, capture_output=True, text=True, timeout=30,
                              check=False)
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pgqueue: error: ") and words in lines[0], proc.stderr


# -- 5. the rule --------------------------------------------------------------------------------


def test_which_start_up_errors_are_waited_out() -> None:
    from pgqueue._worker_core import retry_at_start

    def failed(text: str) -> ConnectionFailed:
        return ConnectionFailed(f'connection failed: connection to server at "db", port 5432 failed: {text}')

    waited = [
        failed("Connection refused Is the server running on that host and accepting TCP/IP connections?"),
        ConnectionFailed('connection failed: connection to server on socket "/run/postgresql/.s.PGSQL.5432" '
                         "failed: No such file or directory"),
        failed("timeout expired"),
        ConnectionFailed('connection failed: could not translate host name "db" to address: Name or service '
                         "not known"),
        # libpq's own words for a host it resolves (one a service file names): not a bad value
        ConnectionFailed('connection is bad: could not translate host name "db" to address: Name or service '
                         "not known"),
        failed("server closed the connection unexpectedly"),
        failed("FATAL: the database system is starting up"),
        failed("FATAL: the database system is not yet accepting connections DETAIL: Consistent recovery state "
               "has not been yet reached."),
        failed("FATAL: the database system is shutting down"),
        failed("FATAL: the database system is in recovery mode"),
        failed("FATAL: sorry, too many clients already"),
        failed('FATAL: too many connections for role "app"'),
        failed("FATAL: remaining connection slots are reserved for roles with the SUPERUSER attribute"),
        failed("FATAL: terminating connection due to administrator command"),
        ConnectionFailed("terminating connection due to administrator command", sqlstate="57P01"),
        ConnectionFailed("the database system is starting up", sqlstate="57P03"),
        PgQueueError("cannot execute UPDATE in a read-only transaction", sqlstate="25006"),
    ]
    final = [
        failed('FATAL: password authentication failed for user "app"'),
        failed("fe_sendauth: no password supplied"),
        failed('FATAL: role "app" does not exist'),
        failed('FATAL: database "app" does not exist'),
        failed('FATAL: no pg_hba.conf entry for host "10.0.0.1", user "app", database "app", no encryption'),
        failed('FATAL: permission denied for database "app"'),
        failed('FATAL: role "app" is not permitted to log in'),
        PgQueueError('invalid connection string: missing "=" after "nonsense" in connection info string'),
        ConnectionFailed('connection is bad: invalid integer value "5x" for connection option "port"'),
        ConnectionFailed('connection is bad: invalid sslmode value: "requir"'),
        ExtensionNotInstalled("pgqueue is not installed in this database"),
        QueueNotFound('queue "nope" does not exist', sqlstate="PQ001"),
        PgQueueError("permission denied for schema pgqueue", sqlstate="42501"),
    ]
    assert [e for e in waited if not retry_at_start(e)] == []
    assert [e for e in final if retry_at_start(e)] == []


# -- 6. after the review: option values, other languages, the timeout's bound, stops, leftovers --


def _run_until_ended(runner: Scheduler | Worker | AsyncWorker, seconds: float) -> tuple[list[BaseException], float]:
    """Run a worker or scheduler on a thread for at most ``seconds`` (then stop it: the test has
    failed); return what it raised and how long it ran."""
    caught: list[BaseException] = []
    thread = threading.Thread(target=_catch, args=(runner, caught), daemon=True)
    t0 = time.monotonic()
    thread.start()
    thread.join(seconds)
    took = time.monotonic() - t0
    if thread.is_alive():
        runner.stop()
        thread.join(15)
        caught.append(AssertionError(f"still running after {seconds} s"))
    return caught, took


def _runner(kind: str, dsn: str, **options: Any) -> Scheduler | Worker | AsyncWorker:
    if kind == "Scheduler":
        return Scheduler(dsn, interval=0.1, handle_signals=False, **options)
    return Handled().worker(kind, dsn, handle_signals=False, **options)


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker", "Scheduler"])
def test_an_option_value_libpq_refuses_ends_the_start_at_once(door: Door, kind: str,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """libpq refuses these values before it connects ("connection is bad: invalid sslmode value"):
    no wait mends them. They were retried for good (the text named no refusal it knew)."""
    caplog.set_level(logging.INFO, logger="pgqueue")
    for option, value, words in (("sslmode", "requir", "invalid sslmode value"),
                                 ("target_session_attrs", "primery", "invalid target_session_attrs value"),
                                 ("port", "5x", 'invalid integer value "5x" for connection option "port"'),
                                 ("load_balance_hosts", "foo", "invalid load_balance_hosts value")):
        caught, took = _run_until_ended(_runner(kind, make_conninfo(door.dsn, **{option: value})), 15)
        assert len(caught) == 1 and isinstance(caught[0], ConnectionFailed), (option, caught)
        assert words in str(caught[0]), (option, caught[0])
        assert took < 10, (option, took)  # at once (a loaded machine: seconds), not retried
    assert not warnings_of(caplog), warnings_of(caplog)


#: A server refusing the login in other languages (lc_messages): the severity word is translated.
LOCALIZED = [
    ("ВАЖНО", "28P01", 'пользователь "postgres" не прошёл проверку подлинности (по паролю)'),  # ru
    ("FATALT", "28P01", 'Lösenordsautentisering misslyckades för användare "postgres"'),  # sv
    ("FATALE", "3D000", 'il database "q" non esiste'),  # it
    ("치명적오류", "3D000", '"q" 데이터베이스 없음'),  # ko
    ("致命错误", "57P03", "数据库系统启动中"),  # zh_CN: starting up, which cannot be told in Chinese
]


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker", "Scheduler"])
def test_a_login_refused_in_another_language_ends_the_start_at_once(dsn: str, door: Door, kind: str) -> None:
    """The server's answer is told from libpq's format ("failed: <severity>:  <text>"), whatever
    its language: it ends the start (only the English texts of a server that cannot take the
    connection yet are waited out). It was retried: here the retry reached the server and the
    start went on as if nothing had been refused; for real, for good."""
    make_queue(dsn)
    door.open()
    for severity, sqlstate, message in LOCALIZED:
        door.fatals = [(sqlstate, message, severity)]
        caught, took = _run_until_ended(_runner(kind, door.dsn), 15)
        assert len(caught) == 1 and isinstance(caught[0], ConnectionFailed), (severity, caught)
        assert message in str(caught[0]), (severity, caught[0])
        assert took < 10, (severity, took)  # at once (a loaded machine: seconds), not retried


def test_which_connection_failures_libpq_tells_are_final() -> None:
    """The rule on libpq's raw text (the translated error's whitespace is collapsed)."""
    from pgqueue._worker_core import retry_at_start

    def raw(text: str) -> psycopg.OperationalError:
        return psycopg.OperationalError(f"connection failed: connection to server at \"db\", port 5432 failed: {text}")

    final = [raw(f"{severity}:  {message}") for severity, _, message in LOCALIZED]
    final += [raw('FATAL:  password authentication failed for user "app"'),
              psycopg.OperationalError('connection is bad: invalid sslmode value: "requir"'),
              psycopg.OperationalError('connection is bad: invalid integer value "5x" for connection option "port"'),
              ConnectionFailed('connection is bad: invalid target_session_attrs value: "primery"')]
    waited = [raw("FATAL:  the database system is starting up"),
              raw("FATAL:  sorry, too many clients already"),
              psycopg.OperationalError('connection is bad: connection to server on socket "/tmp/.s.PGSQL.5432" '
                                       "failed: No such file or directory"),
              raw("Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?")]
    assert [e for e in final if retry_at_start(e)] == []
    assert [e for e in waited if not retry_at_start(e)] == []


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker", "Scheduler"])
def test_startup_timeout_bounds_a_server_that_does_not_answer(door: Door, kind: str) -> None:
    """A server that accepts and never answers: the start ends at startup_timeout (each attempt's
    connect_timeout is capped to the time left, the attempt given up at the deadline), even with
    connect_timeout=0, and says how long it waited. It took connect_timeout (10 s), or for ever."""
    door.open("silent")
    for dsn in (door.dsn, make_conninfo(door.dsn, connect_timeout="0")):
        caught, took = _run_until_ended(_runner(kind, dsn, startup_timeout=2), 15)
        assert len(caught) == 1 and isinstance(caught[0], ConnectionFailed), caught
        assert 1.9 <= took < 8, (dsn, took)  # 2 s (a loaded machine: seconds more), not connect_timeout's 10
        assert "gave up" in str(caught[0]) and "still failing after 2." in str(caught[0]), caught[0]


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker", "Scheduler"])
def test_startup_timeout_bounds_a_check_the_database_does_not_answer(plain_dsn: str, kind: str) -> None:
    """The start-up check waits on a lock (a DDL in flight holds the table it reads): it is given
    up at startup_timeout (its connection shut down). It waited for the lock, past the timeout."""
    dsn = plain_dsn
    make_queue(dsn)
    with psycopg.connect(dsn) as locker:
        hold_version_check(locker)
        caught, took = _run_until_ended(_runner(kind, dsn, startup_timeout=2), 15)
        locker.rollback()
    assert len(caught) == 1 and isinstance(caught[0], ConnectionFailed), caught
    assert "no answer" in str(caught[0]) and "gave up" in str(caught[0]), caught[0]
    assert 1.9 <= took < 8, took  # 2 s (a loaded machine: seconds more), not until the lock is gone


def test_scheduler_stop_gives_up_a_start_up_check_the_database_does_not_answer(plain_dsn: str) -> None:
    """stop() ends a start-up check that waits on a lock STUCK_RUN seconds later, as it ends a
    run: the check is the scheduler's call in flight. It waited for the lock."""
    from pgqueue.schedules import STUCK_RUN

    dsn = plain_dsn
    with psycopg.connect(dsn) as locker:
        hold_version_check(locker)
        scheduler = Scheduler(dsn, interval=0.1, handle_signals=False)
        caught: list[BaseException] = []
        thread = threading.Thread(target=_catch, args=(scheduler, caught), daemon=True)
        thread.start()
        time.sleep(1)
        t0 = time.monotonic()
        scheduler.stop()
        thread.join(STUCK_RUN + 15)
        took = time.monotonic() - t0
        alive = thread.is_alive()
        locker.rollback()
    thread.join(15)
    assert not alive, took
    assert not caught, caught
    assert took < STUCK_RUN + 10, took  # (a loaded machine: seconds more)


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_worker_stop_gives_up_a_writability_check_the_database_does_not_answer(
        dsn: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read-only check runs inside the start-up check the stop's watchdog guards: a server
    that does not answer it is given up _STUCK_CALL seconds after the grace. It ran outside: stop()
    waited for the answer (here, an hour)."""
    import pgqueue._worker_core as core

    def hangs(conn: psycopg.Connection[Any]) -> None:
        conn.execute("SELECT pg_catalog.pg_sleep(3600)")

    monkeypatch.setattr(core, "require_writable", hangs)
    make_queue(dsn)
    started = Started(Handled().worker(kind, dsn, shutdown_grace=0.2))
    try:
        time.sleep(1)
        assert started.thread.is_alive(), started.errors
        took = stop_and_time(started)
    finally:
        admin_execute_terminate(dsn)  # (the backend sleeps on: its client is gone)
        started.thread.join(15)
    assert took < 0.2 + core._STUCK_CALL + 8, took  # (a loaded machine: seconds more; not the hour)


def admin_execute_terminate(dsn: str) -> None:
    """End the test's hung backends (the test failed)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(3600)%' "
                  "AND pid <> pg_backend_pid()")


def test_a_stopped_connection_attempt_leaves_no_thread_behind(door: Door, monkeypatch: pytest.MonkeyPatch) -> None:
    """With connect_timeout=0 (no limit) and a server that never answers, the attempt a stop
    abandoned kept its thread and socket for good; its connect_timeout is capped now
    (_ATTEMPT_CAP, shortened here), so it ends."""
    import pgqueue._worker_core as core

    monkeypatch.setattr(core, "_ATTEMPT_CAP", 5, raising=False)
    door.open("silent")
    before = set(threading.enumerate())
    started = Started(Handled().worker("Worker", make_conninfo(door.dsn, connect_timeout="0")))
    wait_for(lambda: door.accepted >= 1, what="the connection attempt")
    assert stop_and_time(started) < 2.5  # at once (a loaded machine: a second or two), not after the attempt's 5 s
    attempts = [t for t in threading.enumerate() if t not in before and t.name == "pgqueue-connect"]
    assert attempts, "no attempt in flight"
    for t in attempts:
        t.join(10)
    assert not [t for t in attempts if t.is_alive()]


def test_a_long_wait_repeats_its_warning_with_the_time_waited(door: Door, monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """One warning, then the retries at DEBUG: a misconfigured worker sat silent for good. Now the
    warning comes again every _REPEAT_WARNING seconds (60, shortened here) with the time waited."""
    import pgqueue._worker_core as core

    caplog.set_level(logging.INFO, logger="pgqueue")
    monkeypatch.setattr(core, "_REPEAT_WARNING", 0.5, raising=False)
    started = Started(Handled().worker("Worker", door.dsn))
    try:
        wait_for(lambda: len(messages_of(caplog, "still waiting for the database after")) >= 2, timeout=10,
                 what="the warning repeated")
    finally:
        stop_and_time(started)
    repeated = [r for r in caplog.records if "still waiting for the database after" in r.getMessage()]
    assert all(r.levelno == logging.WARNING for r in repeated)
    assert "Connection refused" in repeated[0].getMessage()


def test_the_commands_wait_at_most_300_s_by_default() -> None:
    """`pgqueue worker` and `pgqueue scheduler` end a start that cannot connect after 300 s by
    default (the library's Worker and Scheduler wait until stopped). They waited for good."""
    from pgqueue.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["worker", "jobs", "worker_handlers:obey"]).startup_timeout == 300
    assert parser.parse_args(["scheduler"]).startup_timeout == 300
    assert parser.parse_args(["scheduler", "--startup-timeout", "0"]).startup_timeout == 0
