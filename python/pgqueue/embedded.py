"""The throwaway PostgreSQL server that ``pgqueue demo`` runs on when it is given no database.

It needs the ``embedded`` extra (``pip install './python[embedded]'`` from a clone: ``testing.postgresql``)
and PostgreSQL's server programs (``initdb``, ``postgres``) on the machine; the package works
without both. The repository's test suite, benchmarks and examples start their servers with it
too, so that there is one way to do it.

Wraps ``testing.postgresql`` so that it also works when run as root: PostgreSQL refuses to
run as root, so the data directory is handed to an unprivileged user (``postgres`` unless
``PGQUEUE_EMBEDDED_USER`` names another; :class:`EmbeddedUnavailable` when there is no such
user) and ``initdb``/``postgres`` are started through
``setpriv``, which drops privileges and then execs, so the server's pid is the child's pid.

``initdb`` and the server run in a session (and process group) of their own: a Ctrl-C on the
terminal reaches the caller only, which stops the server and deletes its directory in order
(:meth:`EmbeddedPostgres.stop`, also when the start itself is interrupted), rather than the
server shutting down under the caller's last calls.

Stopping the server and deleting its directory defer SIGINT, SIGTERM and SIGHUP (on the main
thread) until both are done, then act on the first: a second Ctrl-C while the server shut down,
or while its directory was deleted, left the directory behind (half-deleted, or whole: the
server's process was still recorded) (a review).

The server listens on TCP (127.0.0.1) only, with no Unix-domain socket: every use of it connects
over TCP, and the socket's path (under ``$TMPDIR``) is limited to 107 bytes, so that a long
``$TMPDIR`` made the start fail ("could not create any Unix-domain sockets").

The server is taken as booted only once it answers on its port from its own data directory:
``testing.postgresql`` picks a free port, closes it and waits until something answers there, so
another server that took the port meanwhile counted as ours. A start whose port was taken is
tried again on another.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from psycopg import pq
from psycopg.conninfo import make_conninfo

__all__ = ["FAST_SETTINGS", "EmbeddedPostgres", "EmbeddedUnavailable", "check_available"]


class EmbeddedUnavailable(RuntimeError):
    """The throwaway server cannot be started here: the extra or setpriv is missing, or (as
    root) the unprivileged user to run it as does not exist."""


#: Server settings for a fast throwaway cluster: durability off, it is thrown away anyway.
FAST_SETTINGS: dict[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "256MB",
    "log_min_messages": "warning",
    # TCP only (see the module's docstring): no socket whose path may be too long
    "unix_socket_directories": "",
}

#: The signals whose handlers run while the server is stopped and its directory deleted are
#: deferred (see :func:`_signals_deferred`): those a terminal, `kill` or `timeout` sends.
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Record SIGINT, SIGTERM and SIGHUP for the block instead of acting on them, then act on
    the first one recorded, as it would have been (its handler, or its default action).

    A handler that raises (KeyboardInterrupt) inside ``server.stop()`` or ``shutil.rmtree``
    left the server recorded as running, so that the directory was kept, or the directory
    half-deleted. Handlers are replaced rather than the signals blocked: pthread_sigmask blocks
    them for the calling thread only, and the kernel hands them to another thread, whose
    handler flag the main thread acts on all the same. Off the main thread, where handlers
    cannot be set, the block runs as it is; so do signals ignored, or handled outside Python.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous: dict[int, Any] = {}
    try:
        for sig in _STOP_SIGNALS:
            handler = signal.getsignal(sig)
            if handler is signal.SIG_IGN or handler is None:
                continue
            previous[sig] = signal.signal(sig, lambda signum, frame: received.append(signum))
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            signal.raise_signal(received[0])  # its handler runs now: KeyboardInterrupt, say


def _unprivileged_user() -> str | None:
    """Return the user to run the server as, or None to run it as ourselves."""
    if os.geteuid() != 0:
        return None
    return os.environ.get("PGQUEUE_EMBEDDED_USER", "postgres")


def _drop_privileges(user: str | None, argv: list[str], *, die_with_parent: bool = False) -> list[str]:
    """``argv`` run as ``user`` (None: as the caller) through setpriv. ``die_with_parent`` (the
    server's) adds setpriv's ``--pdeathsig INT`` when setpriv is here, set after the change of
    user, which clears it: the server makes a fast shutdown when the thread that started it ends.
    A caller killed without its clean-up (SIGKILL, the OOM killer, Ctrl-\\) left the server, in a
    session of its own, running for good (a review); its directory is still left then."""
    who = [] if user is None else [f"--reuid={user}", f"--regid={user}", "--init-groups"]
    death = ["--pdeathsig", "INT"] if die_with_parent and shutil.which("setpriv") is not None else []
    if not who and not death:
        return argv
    return ["setpriv", *death, *who, "--", *argv]


def _account(user: str) -> pwd.struct_passwd:
    """Return the account of the user the server is to run as (as root).

    Raises:
        EmbeddedUnavailable: there is no such user (no ``postgres`` account, or a mistyped
            ``PGQUEUE_EMBEDDED_USER``).
    """
    try:
        return pwd.getpwnam(user)
    except KeyError:
        raise EmbeddedUnavailable(
            f"running as root needs an unprivileged user to run PostgreSQL as, and there is no user {user!r} "
            "here: create it, or name another with PGQUEUE_EMBEDDED_USER") from None


def _chown_tree(path: str, user: str) -> None:
    entry = _account(user)
    for root, _dirs, files in os.walk(path):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)


def check_available() -> None:
    """Raise EmbeddedUnavailable, saying what is missing, if no server can be started here: the
    extra, or as root setpriv or the unprivileged user (``postgres`` or ``PGQUEUE_EMBEDDED_USER``)."""
    try:
        import testing.postgresql  # noqa: F401
    except ImportError as exc:
        raise EmbeddedUnavailable(
            "the throwaway server needs the pgqueue-sql[embedded] extra: pip install 'testing.postgresql>=1.3,<2' "
            "(from a clone of pgqueue: pip install './python[embedded]')"
        ) from exc
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        raise EmbeddedUnavailable("running as root needs setpriv (util-linux) to start PostgreSQL")
    user = _unprivileged_user()
    if user is not None:
        _account(user)
        _check_reachable(tempfile.gettempdir(), user)


def _check_reachable(directory: str, user: str) -> None:
    """Raise EmbeddedUnavailable unless ``user`` can enter ``directory``, where the server's
    directory is made (as root: initdb and the server run as that user).

    A temporary directory of root's own (libpam-tmpdir's /tmp/user/0, mode 700) gave initdb's
    "could not create directory ...: Permission denied", which did not say why (a review).
    Asked of the system as that user (``test -x`` through setpriv), so that ACLs count too.
    """
    argv = _drop_privileges(user, ["test", "-x", directory])
    try:
        reachable = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, check=False, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return  # cannot tell: initdb will say what fails
    if not reachable:
        raise EmbeddedUnavailable(
            f"user {user} (who runs the throwaway server, as root) cannot enter the temporary directory "
            f"{directory} ($TMPDIR): set TMPDIR to a directory it can reach, such as /tmp")


#: How many ports a start tries when the one picked was taken before the server bound it.
PORT_ATTEMPTS = 5


def _kill_session(proc: subprocess.Popen[str]) -> None:
    """Kill every process of the session ``proc`` leads (started with start_new_session) and wait,
    up to 5 s, until none is left."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            break  # no process of the group is left
        except PermissionError:
            break
        proc.poll()  # reap the leader, so that only live processes keep the group
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    proc.wait()


def _make_server_class() -> Any:
    check_available()
    import testing.postgresql as tp

    class _Server(tp.Postgresql):  # type: ignore[misc]
        run_as: str | None = None
        #: The server's ``-c name=value`` options, each an argv item of its own (a value may
        #: hold spaces: testing.postgresql splits its ``postgres_args`` on whitespace).
        server_settings: tuple[str, ...] = ()
        child_process: subprocess.Popen[bytes] | None

        def initialize_database(self) -> None:
            data = os.path.join(self.base_dir, "data")
            if os.path.exists(os.path.join(data, "PG_VERSION")):
                return
            if self.run_as is not None:
                _chown_tree(self.base_dir, self.run_as)
            argv = _drop_privileges(
                self.run_as,
                [self.initdb, "-D", data, "--lc-messages=C", "-E", "UTF8", "--locale=C",
                 *self.settings["initdb_args"].split()],
            )
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
            try:
                _, stderr = proc.communicate()
            except BaseException:
                # Interrupted (a Ctrl-C reaches only the caller): initdb's own children (postgres
                # --single, in initdb's session) would go on writing into the directory that the
                # caller is about to delete. Kill the whole session and wait until it is gone.
                _kill_session(proc)
                raise
            if proc.returncode != 0:
                raise RuntimeError(f"initdb failed: {stderr.strip()}")

        def get_server_commandline(self) -> list[str]:
            argv: list[str] = super().get_server_commandline()
            # less testing.postgresql's `-k <base_dir>/tmp`: no socket (unix_socket_directories)
            if "-k" in argv:
                at = argv.index("-k")
                del argv[at:at + 2]
            return _drop_privileges(self.run_as, [*argv, *self.server_settings], die_with_parent=True)

        def start(self) -> None:
            # testing.common.database.Database.start, with the server in a session of its own
            # (Popen is called there with no way to ask for one), again on another port when
            # the one picked was taken meanwhile; a failed start stops it there, an interrupted
            # one in EmbeddedPostgres.start.
            if self.child_process:
                return
            for attempt in range(PORT_ATTEMPTS):
                self.prestart()
                with open(os.path.join(self.base_dir, f"{self.name}.log"), "w") as log:
                    try:
                        self.child_process = subprocess.Popen(self.get_server_commandline(), stdout=log,
                                                              stderr=log, start_new_session=True)
                    except Exception as exc:
                        raise RuntimeError(f"failed to launch {self.name}: {exc!r}") from exc
                try:
                    self.wait_booting()
                    self.poststart()
                    return
                except Exception as exc:
                    taken = self._port_taken()
                    self.stop()
                    if not taken:
                        raise
                    if attempt == PORT_ATTEMPTS - 1:
                        raise RuntimeError(f"the server could not start: each of the {PORT_ATTEMPTS} ports picked "
                                           f"was taken by another program before it bound it ({exc})") from exc
                    self.settings["port"] = None  # prestart picks another

        def is_server_available(self) -> bool:
            """Tell whether our server answers: its process runs, and the server on its port
            serves its data directory. testing.postgresql took any answer on the port, and the
            port it picked free may be taken before our server binds it: another server's
            answer made the start succeed on it (our server, failing to bind, exited)."""
            if self.child_process is None or self.child_process.poll() is not None:
                return False
            # pg8000, as testing.postgresql itself: libpq (psycopg) would read the caller's PG*
            # environment (PGSSLMODE=require, PGHOSTADDR...), and the start waited out its
            # boot_timeout for a server that was up (a review)
            import pg8000  # type: ignore[import-untyped]
            try:
                conn = pg8000.connect(host="127.0.0.1", port=self.settings["port"], user="postgres",
                                      database="template1", timeout=5)
            except Exception:  # noqa: BLE001 (not up yet, or another program that answers otherwise: pg8000 raises KeyError too)
                return False
            try:
                cur = conn.cursor()
                cur.execute("SHOW data_directory")
                row = cur.fetchone()
            except Exception:  # noqa: BLE001 (as above)
                return False
            finally:
                with contextlib.suppress(Exception):
                    conn.close()
            data = os.path.realpath(os.path.join(self.base_dir, "data"))
            return row is not None and os.path.realpath(str(row[0])) == data

        def _port_taken(self) -> bool:
            """Tell whether the server failed to start because its port was taken (its log)."""
            try:
                return "Address already in use" in self.read_bootlog()
            except RuntimeError:  # no log
                return False

    return _Server


class EmbeddedPostgres:
    """Start a private PostgreSQL server in a temporary directory; stop and delete it on exit.

    Use as a context manager::

        with EmbeddedPostgres() as pg:
            psycopg.connect(pg.dsn())

    ``settings`` are the server's settings (``-c name=value``; a value may hold spaces), over
    :data:`FAST_SETTINGS`.

    The server stops (a fast shutdown) when the thread that started it ends, also when the
    process is killed without its clean-up (SIGKILL): start it on a thread that outlives its use.

    Raises EmbeddedUnavailable when it cannot be started here (the embedded extra or setpriv is
    missing, or, as root, the user to run it as: ``postgres`` or ``PGQUEUE_EMBEDDED_USER``), RuntimeError when the server fails to start (the reason is in the message).
    """

    def __init__(self, *, settings: dict[str, str] | None = None, boot_timeout: float = 60.0) -> None:
        self._settings = dict(FAST_SETTINGS)
        self._settings.update(settings or {})
        self._boot_timeout = boot_timeout
        self._server: Any = None
        #: The temporary directory, named before it is made (see :meth:`start`); None once deleted.
        self._dir: str | None = None
        #: The server's pid when a stop could not end it (its directory is then kept: :attr:`left`).
        self._stuck_pid: int | None = None

    def start(self) -> EmbeddedPostgres:
        """Start the server (idempotent) and return self."""
        if self._server is not None:
            return self
        cls = _make_server_class()
        cls.run_as = _unprivileged_user()
        cls.server_settings = tuple(arg for k, v in self._settings.items() for arg in ("-c", f"{k}={v}"))
        server = None
        try:
            # The directory is ours, named before it is made: testing.postgresql made it in its
            # constructor, and a Ctrl-C that landed before it recorded it as its own to delete
            # left it behind (a review).
            self._dir = None
            while self._dir is None:
                self._dir = os.path.join(tempfile.gettempdir(), f"pgqueue-{secrets.token_hex(6)}")
                try:
                    os.mkdir(self._dir, 0o700)
                except FileExistsError:  # another's: not ours to delete
                    self._dir = None
            server = cls(
                base_dir=self._dir,
                postgres_args="-h 127.0.0.1 -F -c logging_collector=off",
                boot_timeout=self._boot_timeout,
                auto_start=0,  # started below, so that an interrupted start is cleaned up too
            )
            server.setup()  # initdb
            server.start()
        except BaseException:
            # A Ctrl-C no longer reaches initdb or the server (their own session): stop them
            # (a second one deferred until that is done).
            with _signals_deferred():
                try:
                    if server is not None:
                        server.stop()
                finally:
                    self._remove_dir(server)
            raise
        self._server = server
        return self

    @property
    def port(self) -> int:
        """The TCP port on 127.0.0.1."""
        self._require()
        return int(self._server.settings["port"])

    @property
    def base_dir(self) -> str:
        """The temporary directory holding the data directory and the server log."""
        self._require()
        return str(self._server.base_dir)

    @property
    def data_dir(self) -> str:
        """The cluster's data directory."""
        return os.path.join(self.base_dir, "data")

    @property
    def run_as(self) -> str | None:
        """The unprivileged user the server runs as, or None if it runs as the caller."""
        self._require()
        return self._server.run_as  # type: ignore[no-any-return]

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """Return a libpq connection string for a database of this server (its values quoted
        as libpq needs: a database name may hold spaces or quotes).

        It names every setting of the caller's libpq environment that would keep it from this
        server: libpq fills in what a connection string leaves out from PG* variables, and
        PGSSLMODE=require (set for a managed database, say) failed every connection to this
        server, which has no SSL (`pgqueue demo` stopped with "server does not support SSL", a
        review); PGOPTIONS set its options, PGGSSENCMODE, PGCHANNELBINDING and
        PGTARGETSESSIONATTRS refuse it. A PGHOSTADDR would send the connection elsewhere: hostaddr
        is pinned empty, which libpq takes as not set (an address there would outrank a host given
        over this string, and a list of hosts made from it would fail to parse)."""
        pinned: dict[str, str] = {"hostaddr": "", "sslmode": "disable", "gssencmode": "disable", "options": ""}
        if pq.version() >= 130000:
            pinned["channel_binding"] = "disable"
        if pq.version() >= 140000:
            pinned["target_session_attrs"] = "any"
        return make_conninfo("", host="127.0.0.1", port=self.port, user=user, dbname=dbname, **pinned)

    def stop(self) -> None:
        """Stop the server and delete its directory (idempotent).

        SIGINT, SIGTERM and SIGHUP that arrive meanwhile (a second Ctrl-C) are acted on once
        both are done (:func:`_signals_deferred`). What could not be done is in :attr:`left`.
        """
        with _signals_deferred():
            if self._server is not None:
                server, self._server = self._server, None
                try:
                    server.stop()
                finally:
                    self._remove_dir(server)

    @property
    def left(self) -> str | None:
        """What a :meth:`stop` left behind, said for a user (the directory, with why and how
        much of it), or None when the directory is gone; None before a start too."""
        if self._dir is None or not os.path.exists(self._dir):
            return None
        size, files = 0, 0
        for root, _dirs, names in os.walk(self._dir):
            for name in names:
                with contextlib.suppress(OSError):
                    size += os.lstat(os.path.join(root, name)).st_size
                    files += 1
        why = f" (its server, pid {self._stuck_pid}, did not stop)" if self._stuck_pid is not None else ""
        # "1 file", not "1 files" (a review)
        return f"{self._dir}{why}: {files:,} {'file' if files == 1 else 'files'}, {size / 1e6:.1f} MB"

    def _remove_dir(self, server: Any) -> None:
        """Delete the temporary directory, unless its server could not be stopped (its process
        is still there: testing.postgresql leaves the directory to it then too)."""
        if self._dir is None:
            return
        if server is not None and server.child_process is not None:
            # testing.postgresql SIGKILLs a server that ignores its stop for 10 s, raises at
            # once, and leaves child_process set: a process that is gone (reaped here within a
            # few seconds) leaves nothing to keep the directory for
            try:
                server.child_process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._stuck_pid = server.child_process.pid
                return
            server.child_process = None
        shutil.rmtree(self._dir, ignore_errors=True)
        if not os.path.exists(self._dir):
            self._dir = None

    def _require(self) -> None:
        if self._server is None:
            raise RuntimeError("the embedded server is not running")

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
