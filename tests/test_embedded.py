"""pgqueue.embedded, the throwaway server of the demo and of the test suite: what its start
must not get wrong (another server on its port, an interrupted start)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from helpers import processes_from
from pgqueue.embedded import PORT_ATTEMPTS, EmbeddedPostgres


@pytest.fixture(scope="module")
def other() -> Iterator[EmbeddedPostgres]:
    """Another throwaway server, whose port the tests hand to a new one, with a database of
    its own to tell it apart."""
    with EmbeddedPostgres() as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE only_on_the_other")
        yield pg


def test_a_server_that_took_the_port_is_not_taken_for_ours(other: EmbeddedPostgres,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """testing.postgresql picks a free port, closes it and waits until something answers there:
    a server that took the port meanwhile (our own server, failing to bind it, exited) made the
    start succeed on that server (a review). Now the server must answer from our data directory;
    a start whose port was taken goes on to another."""
    import testing.common.database as tcd

    real = tcd.get_unused_port
    picked: list[int] = []

    def taken_first() -> int:  # the race: the first port picked is taken meanwhile
        picked.append(other.port if not picked else real())
        return picked[-1]

    monkeypatch.setattr(tcd, "get_unused_port", taken_first)
    with EmbeddedPostgres() as pg:
        assert len(picked) == 2 and pg.port == picked[1] != other.port
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            assert conn.execute("SHOW data_directory").fetchone() == (pg.data_dir,)
            assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'only_on_the_other'").fetchone() == (0,)
        base_dir = pg.base_dir
    assert not os.path.exists(base_dir)

    monkeypatch.setattr(tcd, "get_unused_port", lambda: other.port)  # taken every time: a clear error
    made: list[str] = []
    original_mkdir = os.mkdir

    def mkdir(path: str, mode: int = 0o777) -> None:
        made.append(path)
        original_mkdir(path, mode)

    monkeypatch.setattr(os, "mkdir", mkdir)
    with pytest.raises(RuntimeError, match=f"each of the {PORT_ATTEMPTS} ports picked was taken"):
        EmbeddedPostgres().start()
    assert made and not any(os.path.exists(m) for m in made)
    with psycopg.connect(other.dsn(), autocommit=True) as conn:  # the other server is untouched
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'only_on_the_other'").fetchone() == (1,)


@pytest.fixture
def reachable_tmp() -> Iterator[Path]:
    """A directory that the server's user can enter (pytest's tmp_path is root's own, mode 700,
    when the tests run as root: the start refuses it, naming it), deleted after the test."""
    path = Path(tempfile.mkdtemp(prefix="pgqueue-test-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_start_interrupted_right_after_its_directory_is_made_deletes_it(
        reachable_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C that landed right after the temporary directory was made (in testing.postgresql's
    constructor, before it recorded the directory as its own to delete) left the directory
    behind (a review). The directory is now named before it is made, and deleted by
    EmbeddedPostgres itself; so is one of a constructor interrupted later."""
    import testing.postgresql

    monkeypatch.setattr("tempfile.tempdir", str(reachable_tmp))  # where the temporary directory is made
    made = os.mkdir

    def mkdir_then_interrupted(path: str, mode: int = 0o777) -> None:
        made(path, mode)
        raise KeyboardInterrupt  # the Ctrl-C lands as the directory is there

    with monkeypatch.context() as m:
        m.setattr(os, "mkdir", mkdir_then_interrupted)
        with pytest.raises(KeyboardInterrupt):
            EmbeddedPostgres().start()
    assert list(reachable_tmp.iterdir()) == []

    def interrupted(self: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(testing.postgresql.Postgresql, "initialize", interrupted)
    with pytest.raises(KeyboardInterrupt):
        EmbeddedPostgres().start()
    assert list(reachable_tmp.iterdir()) == []


def test_a_start_interrupted_while_the_server_boots_deletes_its_directory_and_stops_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory is EmbeddedPostgres's own now (testing.postgresql no longer deletes it): an
    interruption once the server runs still stops it and deletes the directory."""
    import testing.postgresql

    booted: list[str] = []

    def interrupted(self: testing.postgresql.Postgresql) -> None:
        booted.append(self.base_dir)
        raise KeyboardInterrupt

    monkeypatch.setattr(testing.postgresql.Postgresql, "poststart", interrupted)
    pg = EmbeddedPostgres()
    with pytest.raises(KeyboardInterrupt):
        pg.start()
    assert booted and not os.path.exists(booted[0])
    assert processes_from(booted[0]) == []
    with pytest.raises(RuntimeError, match="not running"):
        pg.base_dir


def test_a_start_ignores_the_callers_libpq_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check that the server answering is ours ran through libpq, which read the caller's
    PG* environment: with PGSSLMODE=require (set for a cloud database, say) every check failed
    on the server without SSL, and the start waited out its boot_timeout (a review). It goes
    through pg8000 now, as testing.postgresql's own check did."""
    import time

    monkeypatch.setenv("PGSSLMODE", "require")
    monkeypatch.setenv("PGHOSTADDR", "192.0.2.1")  # TEST-NET-1: nothing answers there
    started = time.monotonic()
    with EmbeddedPostgres(boot_timeout=30) as pg:
        assert time.monotonic() - started < 20  # (a loaded machine's initdb and start, not the 30 s)
        # and so does its connection string: with PGSSLMODE=require `pgqueue demo` failed at its
        # first connection ("server does not support SSL", a review); with PGHOSTADDR it went
        # to that address
        monkeypatch.setenv("PGGSSENCMODE", "require")
        monkeypatch.setenv("PGOPTIONS", "-c search_path=nowhere")
        monkeypatch.setenv("PGTARGETSESSIONATTRS", "standby")
        monkeypatch.setenv("PGCONNECT_TIMEOUT", "5")
        with psycopg.connect(pg.dsn()) as conn:
            assert conn.execute("SELECT 1, current_setting('search_path')").fetchone() == (1, '"$user", public')
        # and a list of hosts made from the string still parses (fc3bb95's pinned hostaddr did not)
        listed = psycopg.conninfo.make_conninfo(pg.dsn(), host="127.0.0.1,127.0.0.1", port=f"1,{pg.port}")
        with psycopg.connect(listed) as conn:
            assert conn.execute("SELECT 2").fetchone() == (2,)


def test_interrupts_while_the_server_stops_and_its_directory_is_deleted_are_acted_on_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A second Ctrl-C while the server shut down left it recorded as running, so that its
    directory (57-74 MB) was kept; one while the directory was deleted left it half-deleted; a
    third printed "Exception ignored in: Database.__del__" (a review). They are deferred now
    until both are done, then acted on: one KeyboardInterrupt, from stop()."""
    import signal

    import testing.common.database as tcd

    import pgqueue.embedded as embedded

    terminate, rmtree = tcd.Database.terminate, embedded.shutil.rmtree
    sent: list[str] = []

    def interrupted_terminate(self: tcd.Database, *args: object) -> None:
        if self.child_process is not None:  # (not in __del__'s stop, later)
            for _ in range(2):  # Ctrl-C twice while the server shuts down
                sent.append("terminate")
                os.kill(os.getpid(), signal.SIGINT)
        terminate(self, *args)

    def interrupted_rmtree(path: str, *args: object, **kwargs: object) -> None:
        rmtree(os.path.join(path, "data"), *args, **kwargs)  # half of it
        sent.append("rmtree")
        os.kill(os.getpid(), signal.SIGINT)
        rmtree(path, *args, **kwargs)

    pg = EmbeddedPostgres().start()
    base_dir = pg.base_dir
    monkeypatch.setattr(tcd.Database, "terminate", interrupted_terminate)
    monkeypatch.setattr(embedded.shutil, "rmtree", interrupted_rmtree)
    with pytest.raises(KeyboardInterrupt):
        pg.stop()
    assert not os.path.exists(base_dir)
    assert sent == ["terminate", "terminate", "rmtree"]
    assert pg.left is None
    assert processes_from(base_dir) == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    pg.stop()  # again: nothing to do


def test_a_long_temporary_directory_path_starts_the_server(reachable_tmp: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A $TMPDIR of some 67 characters or more made the start fail ("could not create any
    Unix-domain sockets": testing.postgresql put the server's socket under it, and a socket's
    path is limited to 107 bytes) although everything connects over TCP (a review)."""
    long_dir = reachable_tmp / ("a-temporary-directory-with-a-long-name-" * 3)
    long_dir.mkdir(mode=0o755)
    assert len(str(long_dir)) > 120
    monkeypatch.setattr("tempfile.tempdir", str(long_dir))
    with EmbeddedPostgres() as pg:
        assert pg.base_dir.startswith(str(long_dir))
        with psycopg.connect(pg.dsn()) as conn:
            assert conn.execute("SHOW unix_socket_directories").fetchone() == ("",)
    assert list(long_dir.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: the server then runs as the postgres user")
def test_a_temporary_directory_the_server_user_cannot_enter_is_said_plainly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root with a $TMPDIR that the postgres user cannot enter (libpam-tmpdir's /tmp/user/0,
    mode 700), initdb failed with "could not create directory ...: Permission denied", which did
    not say why (a review). The start (and check_available, which the demo calls first) says so."""
    from pgqueue.embedded import EmbeddedUnavailable, check_available

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    monkeypatch.setattr("tempfile.tempdir", str(private))
    for attempt in (check_available, lambda: EmbeddedPostgres().start()):
        with pytest.raises(EmbeddedUnavailable) as raised:
            attempt()
        assert str(raised.value) == (
            f"user postgres (who runs the throwaway server, as root) cannot enter the temporary directory {private} "
            "($TMPDIR): set TMPDIR to a directory it can reach, such as /tmp")
    assert list(private.iterdir()) == []


def test_a_server_killed_for_ignoring_its_stop_leaves_no_directory() -> None:
    """A server that does not answer its stop (here: SIGSTOPped) is SIGKILLed by
    testing.postgresql after 10 s, which raises and leaves its process set; the directory went
    with it before the deferred-signal stop, which then kept it and called the dead server
    stuck (a review)."""
    import signal
    import time

    pg = EmbeddedPostgres().start()
    pid = pg._server.child_process.pid  # type: ignore[union-attr]
    base_dir = pg.base_dir
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="failed to shutdown"):
        pg.stop()
    assert time.monotonic() - started < 20
    assert not os.path.exists(base_dir)
    assert pg.left is None


@pytest.mark.parametrize("kept", [1, 2])
def test_what_a_stop_left_behind_counts_one_file_in_the_singular(monkeypatch: pytest.MonkeyPatch, kept: int) -> None:
    """`left` (the demo's "directory left behind" line) said "1 files" (a review)."""
    import pgqueue.embedded

    rmtree = shutil.rmtree

    def delete_all_but(path: str, ignore_errors: bool = False) -> None:  # a deletion that left `kept` files
        rmtree(path)
        os.mkdir(path)
        for n in range(kept):
            Path(path, f"kept-{n}").write_text("x")

    pg = EmbeddedPostgres().start()
    base_dir = pg.base_dir
    monkeypatch.setattr(pgqueue.embedded.shutil, "rmtree", delete_all_but)
    try:
        pg.stop()
        assert pg.left == f"{base_dir}: {kept} {'file' if kept == 1 else 'files'}, 0.0 MB"
    finally:
        rmtree(base_dir, ignore_errors=True)


def test_a_caller_killed_without_its_clean_up_leaves_no_server_running() -> None:
    """The caller SIGKILLed (the OOM killer, or Ctrl-\\ on a demo): its server, in a session of
    its own that no terminal signal reaches, makes a fast shutdown (setpriv's parent-death
    signal). It ran on for good, its directory with it (a review); the directory is left."""
    import signal
    import subprocess
    import sys
    import time

    script = ("import sys, time\n"
              "from pgqueue.embedded import EmbeddedPostgres\n"
              "pg = EmbeddedPostgres().start()\n"
              "print(pg.base_dir, flush=True)\n"
              "time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    base_dir = ""
    try:
        assert proc.stdout is not None
        base_dir = proc.stdout.readline().strip()
        assert base_dir and processes_from(base_dir), base_dir  # the server runs
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 20
        while processes_from(base_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not processes_from(base_dir), "the server outlived its caller"
    finally:
        proc.kill()
        for pid in processes_from(base_dir) if base_dir else []:
            os.kill(int(pid), signal.SIGKILL)
        if base_dir:
            shutil.rmtree(base_dir, ignore_errors=True)


def test_a_second_start_is_the_same_server_and_a_stopped_one_says_so() -> None:
    """start() is idempotent (a second one starts no second server, which its stop would have
    left running with its directory); a second stop does nothing; the server's port, directory
    and DSN are refused plainly ("not running") before the start and after the stop, and its
    directory is the caller's alone (mode 700: the data and the server's log are in it)."""
    import signal

    pg = EmbeddedPostgres()
    with pytest.raises(RuntimeError, match="the embedded server is not running"):
        pg.port  # noqa: B018
    assert pg.left is None
    base_dir = ""
    try:
        assert pg.start() is pg
        port, base_dir = pg.port, pg.base_dir
        assert pg.start() is pg and (pg.port, pg.base_dir) == (port, base_dir)
        assert os.stat(base_dir).st_mode & 0o777 == 0o700
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        pg.stop()
        left = processes_from(base_dir) if base_dir else []  # (a second start's server: the first left)
        for pid in left:
            os.kill(int(pid), signal.SIGKILL)
        if left:
            shutil.rmtree(base_dir, ignore_errors=True)
    assert not os.path.exists(base_dir) and pg.left is None
    pg.stop()
    for attribute in ("port", "base_dir", "data_dir", "run_as"):
        with pytest.raises(RuntimeError, match="the embedded server is not running"):
            getattr(pg, attribute)
    with pytest.raises(RuntimeError, match="the embedded server is not running"):
        pg.dsn()

