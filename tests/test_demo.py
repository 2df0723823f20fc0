"""`pgqueue demo`: a short run on the embedded server and on the test database, and the
exactly-once check catching what it must catch."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any
from pathlib import Path

import pytest

from helpers import processes_from
from pgqueue import Queue
from pgqueue.cli import main
from pgqueue.client import list_queues
from pgqueue.demo import Tally, check, fencing
from pgqueue.message import Message, to_datetime
from pgqueue.worker import Result

PGQUEUE = Path(sys.executable).with_name("pgqueue")


def test_demo_on_the_embedded_server() -> None:
    proc = subprocess.run([str(PGQUEUE), "demo", "--messages", "200", "--rate", "400", "--seed", "2"],  # 4 slow jobs
                          check=False, capture_output=True, text=True, timeout=300, env=_demo_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "throwaway PostgreSQL" in out
    assert re.search(r"process them \(about \d+ s; Ctrl-C stops and cleans up\)", out), out
    for line in ("sent", "settled", "latency", "retries", "dead letters", "lost leases"):
        assert f"  {line}" in out, out
    # at an offered rate the run measures how long the last messages took, not a throughput
    assert re.search(r"^  settled +200 by 3 workers x 8, the last \d+\.\d s after the last was sent ", out, re.MULTILINE), out
    assert re.search(r"slow .* handlers ran up to \d\.\d s on a 1 s lease: heartbeats kept it", out), out
    assert "  fencing       a worker stalled past its 0.2 s lease and another took the message: the stalled " \
           "one's complete was refused, the new holder's accepted" in out, out
    assert "exactly once  OK" in out, out
    assert re.search(r"^Dropped queue demo_\w+\.$", out, re.MULTILINE), out
    _assert_cleaned_up(out)
    assert "Traceback" not in proc.stderr


def _demo_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}


def _assert_cleaned_up(out: str) -> None:
    """The throwaway server's directory is gone and no process runs from it."""
    found = re.search(r"^Stopped the throwaway server and deleted (\S+)\.$", out, re.MULTILINE)
    assert found, out
    base_dir = found.group(1)
    assert not os.path.exists(base_dir)
    left = processes_from(base_dir)
    assert left == [], f"processes still running from {base_dir}: {left}"


def _start_in_own_group(*args: str, tmpdir: str | None = None) -> subprocess.Popen[str]:
    """Start `pgqueue ...` in a process group of its own, as a shell starts a foreground job:
    Ctrl-C on a terminal is SIGINT to every process of that group (os.killpg below)."""
    env = _demo_env() if tmpdir is None else {**_demo_env(), "TMPDIR": tmpdir}
    # SIGHUP at its default, as in a terminal's job: under nohup (a CI runner started so) the
    # child would inherit it ignored, which the demo rightly leaves so
    return subprocess.Popen([str(PGQUEUE), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> str:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        lines.append(line)
        if marker in line or time.monotonic() > deadline:
            break
    assert marker in lines[-1], "".join(lines)
    return "".join(lines)


def _interrupt_in_the_middle(
        interrupt: Callable[[subprocess.Popen[str]], None]) -> tuple[subprocess.Popen[str], str, str]:
    """Run the demo, interrupt it while producers and workers are busy; its output and errors."""
    proc = _start_in_own_group("demo", "--messages", "4000", "--rate", "400", "--no-progress")
    try:
        head = _read_until(proc, "process them", timeout=90)
        time.sleep(2.0)  # producers and workers busy
        interrupt(proc)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc, head + rest, err


def test_ctrl_c_in_the_middle_stops_cleanly_and_leaves_nothing_behind() -> None:
    """Ctrl-C also reaches the throwaway server (same process group), which shuts down at once:
    the demo must still stop its threads, say so, exit 130, and leave no server or directory."""
    proc, out, err = _interrupt_in_the_middle(lambda proc: os.killpg(proc.pid, signal.SIGINT))
    assert proc.returncode == 130, out + err
    # with the seed it ran with, to repeat it (only the report said it: not printed when interrupted)
    assert re.search(r"^Interrupted with [\d,]+ of 4,000 messages settled \(seed (\d+): `--seed \1 --messages 4000`\): "
                     r"stopping", out, re.MULTILINE), out
    assert "error" not in err and "Traceback" not in err, err
    _assert_cleaned_up(out)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_kill_or_a_closed_terminal_stops_cleanly_as_ctrl_c_does(sig: signal.Signals) -> None:
    """SIGTERM (`kill`, `timeout`) or SIGHUP (a closed terminal) to the demo alone, not its
    group: it ended the process at once and left the throwaway server running, orphaned (a new
    user's first hour, session 41). Now they stop the demo as Ctrl-C does."""
    proc, out, err = _interrupt_in_the_middle(lambda proc: proc.send_signal(sig))
    assert proc.returncode == 130, out + err
    assert re.search(r"^Interrupted with [\d,]+ of 4,000 messages settled \(seed \d+: `[^`]+`\): stopping", out, re.MULTILINE), out
    assert "Traceback" not in err, err
    _assert_cleaned_up(out)


def test_nohup_keeps_sighup_ignored() -> None:
    """Under nohup SIGHUP is ignored: the demo's handler took that over, and closing the
    terminal stopped a demo meant to outlive it (review of session 41)."""
    from pgqueue.demo import _Sigint

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with _Sigint():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_IGN, signal.SIG_DFL)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


def test_ctrl_c_while_the_server_starts_is_an_interrupt_not_an_error() -> None:
    """Ctrl-C during initdb kills initdb too: the demo must report the Ctrl-C (exit 130), not
    "initdb failed", leave nothing in the temporary directory, and say so (it said only
    "Interrupted.": a review)."""
    tmpdir = tempfile.mkdtemp(prefix="pgqueue-demo-tmp-")
    os.chmod(tmpdir, 0o755)  # the server runs as postgres when the tests run as root
    try:
        proc = _start_in_own_group("demo", "--messages", "100", "--no-progress", tmpdir=tmpdir)
        try:
            head = _read_until(proc, "Starting a throwaway PostgreSQL", timeout=60)
            time.sleep(0.3)  # initdb takes a second or more
            os.killpg(proc.pid, signal.SIGINT)
            rest, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        out = head + rest
        assert proc.returncode == 130, out + err
        assert "Interrupted." in out, out
        assert "Stopped the throwaway server's start and deleted its directory." in out, out
        assert "error" not in err and "Traceback" not in err, err
        assert os.listdir(tmpdir) == []
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_ctrl_c_ends_the_dashboard_after_the_report_with_success() -> None:
    """`--dashboard` lingers until Ctrl-C, the documented way out: exit 0, not an error."""
    proc = _start_in_own_group("demo", "--messages", "100", "--rate", "0", "--no-progress", "--dashboard", "0")
    try:
        head = _read_until(proc, "Ctrl-C to stop", timeout=90)
        os.killpg(proc.pid, signal.SIGINT)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = head + rest
    assert proc.returncode == 0, out + err
    assert "exactly once  OK" in out
    assert "error" not in err and "Traceback" not in err, err
    _assert_cleaned_up(out)


@pytest.mark.parametrize("size", ["20M", "50M"])  # full in initdb; full in CREATE EXTENSION
def test_a_temporary_directory_too_small_is_named_with_the_way_out(size: str) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("mounts a small tmpfs in a mount namespace of its own: needs root and unshare")
    small = tempfile.mkdtemp(prefix="pgqueue-demo-small-")
    os.chmod(small, 0o755)  # the server runs as postgres
    try:
        script = f'mount -t tmpfs -o size={size},mode=1777 tmpfs "$0" && TMPDIR="$0" exec "$@"'
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, small,
                               str(PGQUEUE), "demo", "--messages", "300", "--no-progress"],
                              check=False, capture_output=True, text=True, timeout=120, env=_demo_env())
    finally:
        os.rmdir(small)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"pgqueue: error: the throwaway PostgreSQL ran out of disk space in {small} "
                                  "(it needs about 100 MB there"), proc.stderr
    assert "set TMPDIR to a directory with more room" in proc.stderr and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_demo_on_a_given_database_cleans_up(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    status = main(["demo", "--dsn", dsn, "--messages", "300", "--rate", "0", "--seed", "7",
                   "--workers", "2", "--concurrency", "4", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "exactly once  OK" in out
    assert "throwaway" not in out
    assert [q.queue for q in list_queues(dsn)] == ["default"]  # the demo's queue is gone


def _result(queue: str, msg_id: int, kind: str, outcome: str) -> Result:
    msg = Message(id=msg_id, queue=queue, payload={"kind": kind, "due": 0.0}, attempts=1, state=None,
                  dequeue_at=to_datetime(0), created_at=to_datetime(0), locked_until=to_datetime(1), content=b"", content_type=None)
    return Result(msg, outcome, True)  # type: ignore[arg-type]


def test_the_check_catches_duplicates_losses_and_leftovers(dsn: str) -> None:
    queue = Queue(dsn, "demo_check")
    queue.create()
    twice, lost, poison = queue.enqueue_many(["a", "b", "c"])
    tally = Tally()
    for msg_id, kind in ((twice, "immediate"), (lost, "immediate"), (poison, "poison")):
        tally.enqueued(msg_id, kind)
    tally.record(_result(queue.name, twice, "immediate", "completed"))
    tally.record(_result(queue.name, twice, "immediate", "completed"))
    tally.record(_result(queue.name, 999999, "immediate", "completed"))
    problems = check(queue, tally, Counter(immediate=2, poison=1))
    text = "\n".join(problems)
    assert f"message {twice}: completed 2x" in text
    assert f"message {lost}: completed 0x" in text
    assert f"poison message {poison}: dead-lettered 0x" in text
    assert "message 999999 was processed but never enqueued" in text
    assert "left in the queue: 3 ready" in text
    assert "dead letters (0) are not the poison messages (1)" in text


def test_the_check_says_the_database_dead_lettered_a_message_whose_leases_ran_out(dsn: str) -> None:
    """A slow message whose heartbeats fell behind (a machine with too many workers x handlers:
    60 workers on 2 cores did it) is dead-lettered by the database when its last lease runs out,
    and no handler reports it: the check says so, not "completed 0x, dead-lettered 0x" alone."""
    queue = Queue(dsn, "demo_check")
    queue.create(max_attempts=1)
    slow = queue.enqueue("slow")
    tally = Tally()
    tally.enqueued(slow, "slow")
    assert [m.id for m in queue.dequeue(1, lock_ms=1)] == [slow]
    time.sleep(0.05)
    assert queue.dequeue(1) == []  # the take's look at expired leases dead-letters it
    problems = check(queue, tally, Counter(slow=1))
    assert problems == [
        f"slow message {slow}: completed 0x, dead-lettered 0x by a worker, but dead-lettered by the "
        "database after attempt 1 (lease expired): its heartbeats fell behind (too many workers x "
        "handlers for this machine?)",
        "the dead letters (1) are not the poison messages (0)",
    ]


def test_the_check_passes_when_all_is_accounted_for(dsn: str) -> None:
    queue = Queue(dsn, "demo_check")
    queue.create(max_attempts=1)
    done, poison = queue.enqueue_many(["a", "b"])
    tally = Tally()
    tally.enqueued(done, "immediate")
    tally.enqueued(poison, "poison")
    for msg in queue.dequeue(2):
        if msg.id == done:
            assert queue.complete(msg)
            tally.record(_result(queue.name, done, "immediate", "completed"))
        else:
            assert queue.fail(msg, "poison")
            tally.record(_result(queue.name, poison, "poison", "dead"))
    assert check(queue, tally, Counter(immediate=1, poison=1)) == []


def _path_without(tmp_path: Path, hidden: set[str], logged: dict[str, str | None]) -> tuple[str, Path]:
    """A PATH of the machine's commands less ``hidden``, where each of ``logged`` appends its
    arguments to a log and then runs the real command (or, given None, does nothing)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for directory in reversed(os.environ["PATH"].split(os.pathsep)):
        if os.path.isdir(directory):
            for entry in os.scandir(directory):
                target = bin_dir / entry.name
                if entry.name not in hidden and entry.name not in logged and os.access(entry.path, os.X_OK):
                    target.unlink(missing_ok=True)
                    target.symlink_to(entry.path)
    for name, real in logged.items():
        run = f'exec {real} "$@"' if real else "exit 0"
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n{run}\n')
        (bin_dir / name).chmod(0o755)
    return str(bin_dir), log


def test_demo_sh_installs_only_what_the_demo_needs_and_a_second_run_nothing(tmp_path: Path) -> None:
    """scripts/demo.sh on a machine without Node.js: the bootstrap must not install it (nor the
    benchmark suite's packages), and once everything is there it installs nothing, not even the
    extension again (which, as a user that is not root, was a sudo prompt on every run)."""
    repo = Path(__file__).parents[1]
    path, log = _path_without(tmp_path, {"node", "npm"},
                              {"apt-get": None, "sudo": None, "make": shutil.which("make")})
    env = {**_demo_env(), "PATH": path}
    for _ in range(2):  # the first run may install the extension: the tree may be newer
        log.unlink(missing_ok=True)
        proc = subprocess.run([str(repo / "scripts" / "demo.sh"), "--help"], check=False,
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        calls = log.read_text() if log.exists() else ""
        assert "nodejs" not in calls and "npm" not in calls, calls
    assert "requirements-bench" not in proc.stdout
    assert [c for c in calls.splitlines() if "install" in c.split()] == [], calls
    assert proc.stdout.startswith("demo.sh: checking this machine for what the demo needs (scripts/bootstrap.sh)\n"
                                  "usage: pgqueue demo"), proc.stdout


def test_a_dashboard_port_in_use_is_one_line_of_ours_before_anything_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([str(PGQUEUE), "demo", "--messages", "10", "--no-progress", "--dashboard", str(port)],
                              check=False, capture_output=True, text=True, timeout=120, env=_demo_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr == (f"pgqueue: error: --dashboard: cannot listen on 127.0.0.1:{port}: Address already in use "
                           "(another program has it? pick another port: --dashboard PORT)\n"), proc.stderr
    assert "throwaway" not in proc.stdout  # refused before a server was started for nothing


def test_a_server_that_never_answers_is_given_up_on_as_by_the_other_commands() -> None:
    """`pgqueue demo --dsn` connected without a connect_timeout: a server (or proxy) that accepts
    the connection and never answers kept it waiting for ever, where the other commands give up
    after 10 s by default."""
    with socket.socket() as silent:  # the kernel completes the handshake; nothing ever answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        dsn = f"host=127.0.0.1 port={silent.getsockname()[1]} user=postgres dbname=postgres"
        env = {k: v for k, v in os.environ.items() if k != "PGCONNECT_TIMEOUT"}
        started = time.monotonic()
        try:
            proc = subprocess.run([str(PGQUEUE), "demo", "--dsn", dsn, "--messages", "10", "--no-progress"],
                                  check=False, capture_output=True, text=True, timeout=40, env=env)
        except subprocess.TimeoutExpired:
            pytest.fail("the demo was still waiting for the server after 40 s")
        took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.startswith("pgqueue: error: cannot connect to the database: "), proc.stderr
    assert "Traceback" not in proc.stderr
    assert 9 <= took < 30, took


def test_the_fencing_check_sees_a_stale_complete_accepted(dsn: str) -> None:
    """The demo's fencing line is measured: were the stalled worker's complete accepted (here a
    client that says yes to every complete stands in for a broken fence), the check says so."""

    class Unfenced(Queue):
        def complete(self, msg: Message) -> bool:
            super().complete(msg)
            return True

    queue = Unfenced(dsn, "demo_fencing")
    queue.create()
    assert fencing(Queue(dsn, "demo_fencing")) is None
    assert fencing(queue) == "fencing: the stalled worker's complete was accepted after another took the message"


def test_a_dashboard_port_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    """`demo --dashboard 70000` is bad usage naming the option, exit 2, as `dashboard --port 70000`
    is (the same check): it was an OverflowError traceback from the port check."""
    for port in ("70000", "65536", "-1"):
        status = main(["demo", "--messages", "10", "--no-progress", "--dashboard", port, "--dsn", dsn])
        out, err = capsys.readouterr()
        assert status == 2, out + err
        assert err == (f"pgqueue demo: error: argument --dashboard: expected a port number 0-65535, got '{port}' "
                       "(see `pgqueue demo --help`)\n"), err


# -- the embedded server (pgqueue.embedded) -------------------------------------------------


def test_embedded_settings_with_spaces_and_a_dsn_for_any_database_name() -> None:
    """A setting's value with a space was split into two server arguments (testing.postgresql
    splits its postgres_args on whitespace): the server did not start. dsn() did not quote its
    values: a database named "my app" could not be reached."""
    import psycopg
    from pgqueue.embedded import EmbeddedPostgres

    with EmbeddedPostgres(settings={"log_line_prefix": "%m [%p] ", "application_name": "it's me"}) as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            assert conn.execute("SHOW log_line_prefix").fetchone() == ("%m [%p] ",)
            conn.execute('CREATE DATABASE "my app"')
        with psycopg.connect(pg.dsn(dbname="my app")) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("my app",)
        named = psycopg.conninfo.conninfo_to_dict(pg.dsn("o'brien", user="me"))
        assert {k: named[k] for k in ("host", "port", "user", "dbname")} == {
            "host": "127.0.0.1", "port": str(pg.port), "user": "me", "dbname": "o'brien"}
        assert (named["sslmode"], named["options"], named["hostaddr"]) == ("disable", "", "")


@pytest.mark.skipif(os.geteuid() != 0, reason="the unprivileged user is looked up only as root")
def test_a_missing_unprivileged_user_is_embedded_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """As root with no `postgres` account (or a mistyped PGQUEUE_EMBEDDED_USER), the start
    raised a bare KeyError from pwd.getpwnam, and `pgqueue demo` printed a traceback."""
    from pgqueue.embedded import EmbeddedPostgres, EmbeddedUnavailable, check_available

    monkeypatch.setenv("PGQUEUE_EMBEDDED_USER", "no_such_user_47")
    for attempt in (check_available, lambda: EmbeddedPostgres().start()):
        with pytest.raises(EmbeddedUnavailable) as raised:
            attempt()
        assert "'no_such_user_47'" in str(raised.value) and "PGQUEUE_EMBEDDED_USER" in str(raised.value)
    proc = subprocess.run([str(PGQUEUE), "demo", "--messages", "10"], check=False, capture_output=True, text=True,
                          timeout=60, env={**_demo_env(), "PGQUEUE_EMBEDDED_USER": "no_such_user_47"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "no user 'no_such_user_47'" in line and "PGQUEUE_EMBEDDED_USER" in line and "--dsn" in line, line
    assert "Starting a throwaway" not in proc.stdout


def test_demo_on_a_database_whose_server_has_no_extension_files_installs_the_plain_sql(
        capsys: pytest.CaptureFixture[str], bare_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`pgqueue demo --dsn` on a database without pgqueue whose server has no pgqueue extension
    files (a managed PostgreSQL, simulated: the catalog lists none, and CREATE EXTENSION fails as
    it does there) installs pgqueue with the plain SQL, as `pgqueue install` does, says so and
    runs. It refused, asking for `make install`, which a managed service does not allow."""
    import dataclasses

    import psycopg

    from pgqueue import installer

    with psycopg.connect(bare_dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE FUNCTION no_files() RETURNS event_trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF tg_tag = 'CREATE EXTENSION' THEN
                    RAISE EXCEPTION 'could not open extension control file "pgqueue.control": No such file or directory'
                        USING ERRCODE = '58P01';
                END IF;
            END $$""")
        conn.execute("CREATE EVENT TRIGGER no_files ON ddl_command_start EXECUTE FUNCTION no_files()")
    read_state = installer.read_state
    monkeypatch.setattr(installer, "read_state",
                        lambda conn: dataclasses.replace(read_state(conn), available=False))
    status = main(["demo", "--dsn", bare_dsn, "--messages", "200", "--rate", "0", "--seed", "7",
                   "--workers", "2", "--concurrency", "4", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert f"pgqueue {installer.sql_version()} installed (plain SQL) in database " in out, out
    assert "exactly once  OK" in out
    with psycopg.connect(bare_dsn) as conn:
        assert conn.execute("SELECT version FROM pgqueue.install").fetchall() == [(installer.sql_version(),)]


# -- review of the demo: interrupts while cleaning up, the wait, the report, the options --------


def test_ctrl_c_again_while_the_server_stops_still_deletes_its_directory() -> None:
    """A second (and third) Ctrl-C while the throwaway server stopped, or while its directory was
    deleted, left the directory behind (57-74 MB, sometimes half-deleted) while the demo printed
    that it had deleted it, and a third printed "Exception ignored in: Database.__del__" (a
    review: 4 runs of 4). The signals are acted on once the cleanup is done."""
    proc = _start_in_own_group("demo", "--messages", "50", "--rate", "0", "--no-progress")
    try:
        head = _read_until(proc, "Dropped queue", timeout=120)
        for _ in range(3):  # as the server stops: Ctrl-C, Ctrl-C, Ctrl-C
            proc.send_signal(signal.SIGINT)
            time.sleep(0.03)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = head + rest
    assert proc.returncode == 130, out + err
    assert "Interrupted." in out, out
    assert "Exception ignored" not in err and "Traceback" not in err, err
    _assert_cleaned_up(out)


def test_the_wait_gives_up_only_on_a_stretch_without_progress_and_says_so(
        capsys: pytest.CaptureFixture[str], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait for the last messages ended at a deadline (the sending's schedule + 60 s), and
    what was not settled by then was reported as lost: a --rate 0 run of 40,000 messages, longer
    than 60 s, failed with thousands of "completed 0x" (a review). It gives up now only after a
    stretch of GIVE_UP_AFTER_S (60 s; shortened here) with nothing sent or settled, and says so."""
    import threading

    from pgqueue import demo

    release = threading.Event()
    real_handle = demo.handle

    def stuck_on_the_first(msg: Message) -> None:
        if msg.payload["n"] == 0:  # type: ignore[index]
            release.wait(120)  # a handler that never returns (its heartbeats keep its lease)
        real_handle(msg)

    # (6 s: not so short that a loaded machine's stall of a few seconds passes for such a stretch)
    monkeypatch.setattr(demo, "GIVE_UP_AFTER_S", 6.0, raising=False)
    monkeypatch.setattr(demo, "handle", stuck_on_the_first)
    try:
        status = main(["demo", "--dsn", dsn, "--messages", "60", "--rate", "0", "--seed", "7", "--no-progress"])
    finally:
        release.set()
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert re.search(r"^    - stopped waiting after \d+ s with 1 unsettled \(none sent or settled in the last 6 s; "
                     r"in the queue: 1 ready, 0 scheduled, 0 leased\): not counted as lost$", out, re.MULTILINE), out
    assert "completed 0x" not in out and "left in the queue" not in out, out
    assert re.search(r"^  exactly once  FAILED: 1 problem$", out, re.MULTILINE), out


def _report(dsn: str, kinds: list[str], settle: Callable[[Tally, list[int]], None],
            options: Any = None, name: str = "demo_report") -> tuple[int, str]:
    """Run the demo's report on a queue of messages of ``kinds``, as a tally ``settle`` fills."""
    import io

    from pgqueue.demo import DemoOptions, report

    queue = Queue(dsn, name)
    queue.create(max_attempts=3)
    ids = queue.enqueue_many([{"kind": kind} for kind in kinds])
    tally = Tally()
    for msg_id, kind in zip(ids, kinds):
        tally.enqueued(msg_id, kind)
    settle(tally, ids)
    out = io.StringIO()
    jobs = [{"n": n, "kind": kind} for n, kind in enumerate(kinds)]
    status = report(queue, jobs, tally, 1.0, options or DemoOptions(), out)
    return status, out.getvalue()


def test_the_report_counts_what_was_settled_of_each_kind(dsn: str) -> None:
    """Each kind's row printed how many were sent, and the poison row "dead-lettered after 3
    attempts each" whatever happened, beside "dead letters 1" of a failed run (a review). The
    rows count what was settled, "N of M" when not all; the problems past the 20 listed are
    counted."""
    def settle(tally: Tally, ids: list[int]) -> None:
        tally.record(_result("demo_report", ids[0], "poison", "dead"))
        tally.record(_result("demo_report", ids[2], "immediate", "completed"))
        tally.record(_result("demo_report", ids[3], "immediate", "completed"))

    status, out = _report(dsn, ["poison", "poison"] + ["immediate"] * 25, settle)
    assert status == 1, out
    assert re.search(r"^    poison     +1 of 2  dead-lettered after 3 attempts each$", out, re.MULTILINE), out
    assert re.search(r"^    immediate  +2 of 25  p50 ", out, re.MULTILINE), out
    assert re.search(r"^  dead letters  1$", out, re.MULTILINE), out
    problems = re.findall(r"^    - (.*)$", out, re.MULTILINE)
    assert len(problems) == 21 and problems[-1].startswith("and ") and problems[-1].endswith(" more"), out

    _status, out = _report(dsn, ["poison"], lambda tally, ids: None, name="demo_report_2")
    assert re.search(r"^    poison     +0 of 1  none dead-lettered$", out, re.MULTILINE), out


def test_a_poison_message_the_database_dead_lettered_is_settled_once(dsn: str) -> None:
    """A poison message whose last lease ran out (110 workers on CI's 2 cores: its handler's
    fail came after it) is dead-lettered by the database at the next take, and the worker's
    fail is refused: it reached its end once. The check called it "dead-lettered 0x" and failed
    the run; the report counts it, and says the database did it."""
    def settle(tally: Tally, ids: list[int]) -> None:
        queue = Queue(dsn, "demo_report")
        for attempt in range(1, 4):
            taken = queue.dequeue(1, lock_ms=1)
            assert [(m.id, m.attempts) for m in taken] == [(ids[0], attempt)]
            time.sleep(0.05)
        assert queue.dequeue(1) == []  # the take's look at expired leases dead-letters it
        assert not queue.fail(taken[0], "poison")  # the worker's fail, too late
        tally.record(Result(taken[0], "dead", False))

    status, out = _report(dsn, ["poison"], settle)
    assert status == 0, out
    assert re.search(r"^    poison     +1  dead-lettered after 3 attempts each \(1 by the database: the last lease "
                     r"ran out, see lost leases\)$", out, re.MULTILINE), out
    assert re.search(r"^  lost leases   1 ", out, re.MULTILINE), out
    assert "exactly once  OK: 0 completed once each, 1 dead-lettered once each (1 of them by the database)" in out, out


def test_the_send_rate_is_left_out_when_too_few_were_sent_to_measure_it(dsn: str) -> None:
    """One message sent read "1,000,000,000 msg/s" (a division by a 1e-9 floor, a review)."""
    def settle(tally: Tally, ids: list[int]) -> None:
        tally.record(_result("demo_report", ids[0], "immediate", "completed"))

    _status, out = _report(dsn, ["immediate"], settle)
    [sent] = [line for line in out.splitlines() if line.startswith("  sent ")]
    assert sent == "  sent          1 message in 0.0 s by 2 producers, one transaction each (offered 400 msg/s)", out


def test_a_rate_too_low_or_too_many_messages_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--rate 1e-10 crashed a producer with OverflowError (a wait of 2e10 s, past what a thread
    can wait); --messages had no bound, and every job is made before the first is sent (a
    review)."""
    for option, value, expected in (
            ("--rate", "1e-10", "0 (as fast as they can) or a rate of at least 0.001 msg/s"),
            ("--rate", "-1", "0 (as fast as they can) or a rate of at least 0.001 msg/s"),
            ("--messages", "10000001", "a number of messages from 1 to 10,000,000")):
        status = main(["demo", option, value, "--dsn", "host=/nonexistent"])  # refused before it connects
        out, err = capsys.readouterr()
        assert status == 2, out + err
        assert err == (f"pgqueue demo: error: argument {option}{'/-n' if option == '--messages' else ''}: expected "
                       f"{expected}, got '{value}' (see `pgqueue demo --help`)\n"), err


def test_a_producer_waits_for_a_turn_far_off_without_overflowing() -> None:
    """The lowest rate, 0.001 msg/s, over the most messages puts a turn 1e10 s away: the wait
    for it raised OverflowError (threading's TIMEOUT_MAX is about 9.2e9 s)."""
    import threading

    from pgqueue.demo import MIN_RATE, produce

    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            produce(None, [{"n": 10_000_000, "kind": "immediate"}], time.monotonic(), MIN_RATE,  # type: ignore[arg-type]
                    Tally(), stop)
        except BaseException as exc:  # noqa: BLE001 (kept for the assertion)
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.3)
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and errors == []


def test_the_throwaway_server_has_a_connection_for_every_worker(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each worker holds 3 connections (its loop's, its heartbeats', its LISTEN's): `--workers
    100` ran out of the throwaway server's 200, the failures were hidden and the report blamed
    slow heartbeats (a review). Its max_connections is sized from the options now. (110
    workers: their loops' and LISTEN's connections alone are 220. Seed 8 has no slow job, whose
    heartbeats 110 workers on a busy machine may not keep up with.)"""
    import psycopg

    from pgqueue import demo

    seen: list[int] = []
    run_workload = demo.run_workload

    def recording(queue: Queue, dsn: str, *args: Any) -> Any:
        with psycopg.connect(dsn) as conn:
            row = conn.execute("SHOW max_connections").fetchone()
            assert row is not None
            seen.append(int(row[0]))
        return run_workload(queue, dsn, *args)

    monkeypatch.setattr(demo, "run_workload", recording)
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    status = main(["demo", "--messages", "100", "--rate", "0", "--seed", "8", "--workers", "110", "--concurrency", "1",
                   "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert len(seen) == 1 and seen[0] >= 110 * 3 + 2 + 1, seen  # the workers', the producers', its own
    assert "exactly once  OK" in out and "  connections " not in out, out
    _assert_cleaned_up(out)


def test_a_given_database_short_of_connections_is_said_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    """With --dsn the server's connection limit is the user's: the demo says up front that it
    needs more than are free, and the report counts the workers' connection failures (they were
    silenced, and only slow heartbeats were blamed, a review)."""
    import psycopg

    from pgqueue.embedded import EmbeddedPostgres

    # 12: fewer than the producers, the demo and one connection a worker (superuser_reserved
    # 3), so that some worker fails to connect however late its connections are opened
    with EmbeddedPostgres(settings={"max_connections": "12"}) as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgqueue")
        started = time.monotonic()
        status = main(["demo", "--dsn", pg.dsn(), "--messages", "100", "--rate", "0", "--seed", "7",
                       "--workers", "8", "--concurrency", "2", "--no-progress"])
        took = time.monotonic() - started
    out, err = capsys.readouterr()
    assert status in (0, 1), out + err
    assert re.search(r"^Warning: the demo needs about 27 connections to the database \(24 for 8 workers, 2 for 2 "
                     r"producers, 1 its own; 3 a worker\) and the server has \d+ free \(max_connections 12, \d+ in use\): "
                     r"workers that cannot connect wait and retry\. Lower --workers or --producers, or raise the "
                     r"server's max_connections\.$",
                     out, re.MULTILINE), out
    assert re.search(r"^  connections   [\d,]+ failures? logged by the workers \(about 27 connections needed: the "
                     r"server's max_connections is yours \(--dsn\): lower --workers or raise it\); the first: .*"
                     r"(too many clients|connection slots)", out, re.MULTILINE), out
    assert took < 50, took


def test_the_connection_check_counts_the_slots_a_role_may_not_use() -> None:
    """The up-front check of free connections counted superuser_reserved_connections only;
    PostgreSQL 16's reserved_connections keeps slots for pg_use_reserved_connections too, which a
    role that is neither that nor a superuser cannot use either (the server here is 15, whose
    row has no such slots: the check's arithmetic is tested on the rows a 16 returns)."""
    import io

    from pgqueue import demo

    class Answers:
        def __init__(self, row: tuple[Any, ...]) -> None:
            self.row = row

        def execute(self, query: str) -> Answers:
            return self

        def fetchone(self) -> tuple[Any, ...]:
            return self.row

        def rollback(self) -> None:
            pass

    def free_said(row: tuple[Any, ...]) -> str:
        out = io.StringIO()
        demo._check_connections(Answers(row), [(50, "for workers")], out)  # type: ignore[arg-type]
        found = re.search(r"has (\d+) free", out.getvalue())
        return found.group(1) if found else "enough"

    # max_connections, superuser_reserved, reserved, in use, superuser, member of pg_use_reserved_connections
    assert free_said((100, 3, 10, 50, False, False)) == "38"
    assert free_said((100, 3, 10, 50, False, True)) == "48"
    assert free_said((100, 3, 10, 50, True, False)) == "enough"  # 51 free
    assert free_said((100, 3, 0, 60, False, False)) == "38"  # a 15: no reserved_connections


def test_the_wait_ends_when_the_database_dead_lettered_the_rest(
        capsys: pytest.CaptureFixture[str], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A message whose last lease ran out (no heartbeats: here none are sent) is dead-lettered by
    the database, and no worker reports it: the wait went on until its deadline (a minute) for
    it. It ends now once the queue's dead letters account for the rest."""
    import functools
    import threading

    import pgqueue.worker
    from pgqueue import demo

    class NoHeartbeats:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def stop(self, timeout: float | None = None) -> None:
            pass

    monkeypatch.setattr(pgqueue.worker, "Heartbeats", NoHeartbeats)
    # idle workers look at the queue (and its expired leases) every 0.2 s, not after up to 5 s:
    # the slow job's leases run out and are taken over at once, until the database dead-letters it
    monkeypatch.setattr(demo, "Worker", functools.partial(pgqueue.worker.Worker, poll_max=0.2))
    # and the slow job's handler outlasts its lease by far, so that it is taken over every time
    release, real_handle = threading.Event(), demo.handle

    def slower(msg: Message) -> None:
        if msg.payload["kind"] == "slow":  # type: ignore[index]
            release.wait(8.0)
        real_handle(msg)

    monkeypatch.setattr(demo, "handle", slower)
    started = time.monotonic()
    try:
        status = main(["demo", "--dsn", dsn, "--messages", "100", "--rate", "0", "--seed", "7", "--no-progress"])
    finally:
        release.set()
    took = time.monotonic() - started
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert re.search(r"slow message \d+: completed 0x, dead-lettered 0x by a worker, but dead-lettered by the "
                     r"database after attempt 3 \(lease expired\)", out), out
    assert re.search(r"^  dead letters  \d+ \(the queue holds \d+: the database dead-lettered 1 itself\)$", out,
                     re.MULTILINE), out
    assert "stopped waiting" not in out, out
    assert took < 40, took


def test_the_readme_says_how_long_the_default_run_takes() -> None:
    """The README said the default run "takes about 15 s"; it took 22-23 s in all (a review):
    the demo's own estimate (its first lines) is the work, the server's start and stop come on top."""
    from pgqueue.demo import DemoOptions

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    d = DemoOptions()
    work = round(d.messages / d.rate + 4)  # as run_workload says it
    assert f"{d.messages:,} messages at {d.rate:g} msg/s, takes about {work} s of work" in readme
    assert re.search(r"about \d+(-\d+)? s in all", readme)


def test_a_directory_that_could_not_be_deleted_is_named_not_said_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo printed "Stopped the throwaway server and deleted DIR" whatever was left of DIR
    (a review): it names what is left now."""
    import io

    import pgqueue.embedded
    from pgqueue.demo import database

    rmtree = shutil.rmtree  # (the test's own deletions below: the patch is of the module, shutil's)
    monkeypatch.setattr(pgqueue.embedded.shutil, "rmtree", lambda path, ignore_errors=False: None)
    out = io.StringIO()
    with database(None, out) as dsn:
        assert dsn
    text = out.getvalue()
    found = re.search(r"^Could not delete the throwaway server's directory: (\S+): ([\d,]+) files, [\d.]+ MB left behind "
                      r"\(rm -rf (\S+) deletes it\)\.$", text, re.MULTILINE)
    assert found and found.group(1) == found.group(3) and int(found.group(2).replace(",", "")) > 100, text
    assert "deleted" not in text, text
    assert os.path.isdir(found.group(1)) and processes_from(found.group(1)) == []
    rmtree(found.group(1))  # (shutil.rmtree, patched, deleted nothing: 57 MB left in /tmp a run)


# -- review of the demo, session 68 -----------------------------------------------------------


@pytest.mark.parametrize("columns", [80, 40, 200])
def test_the_progress_bar_fits_the_terminal(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    """The bar's line was 98 columns in the default run's end: on an 80-column terminal it
    wrapped, and "\\r" went back to the start of the wrapped part only, so that every redraw
    (ten a second) left a line on the screen. It fits in the terminal's width less a column."""
    import io

    from pgqueue.demo import Progress

    monkeypatch.setenv("COLUMNS", str(columns))  # (what shutil.get_terminal_size reads first)
    tally = Tally()
    tally.kinds = dict.fromkeys(range(4000), "immediate")
    tally.completed = Counter(dict.fromkeys(range(3840), 1))
    tally.dead = Counter(dict.fromkeys(range(3840, 4000), 1))
    tally.retries = 487
    out = io.StringIO()
    progress = Progress(4000, out, bar=True)
    progress.update(tally)
    [line] = [part for part in out.getvalue().split("\r") if part]
    assert len(line) <= columns - 1, line
    assert line.startswith("[") and "100%" in line, line
    if columns >= 80:
        assert line.endswith(" s") and "4,000/4,000 done  sent 4,000  retries 487  dead 160 " in line, line
    if columns >= 200:
        assert line.startswith("[" + "#" * 30 + "] 100%  "), line


def test_percentiles_are_nearest_rank() -> None:
    """The percentile rounded half to even: the p99 of 100 latencies was their maximum, the p50
    of 2 the greater and of 6 the 4th (a review). Nearest rank: the least value that p percent
    of them are at most."""
    from pgqueue.demo import percentile

    hundred = [float(v) for v in range(100, 0, -1)]  # (unsorted)
    assert (percentile(hundred, 99), percentile(hundred, 50), percentile(hundred, 100)) == (99, 50, 100)
    assert percentile([2.0, 1.0], 50) == 1
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 50) == 3
    assert percentile([float(v) for v in range(1, 11)], 90) == 9
    assert percentile([float(v) for v in range(1, 201)], 99) == 198  # (198 of 200 are at most 198)
    assert percentile([7.0], 99) == percentile([7.0], 50) == 7
    assert percentile(hundred, 0) == 1  # the least (its range is 0-100), not the greatest


def test_a_rate_is_said_only_of_enough_messages_over_enough_time() -> None:
    """The report's msg/s: none for one message, nor for a time too short to measure (two
    messages sent within a millisecond read "2,000 msg/s" and more)."""
    from pgqueue.demo import _per_second

    assert _per_second(1000, 2.0) == ": 500 msg/s"
    assert _per_second(2, 0.01) == ": 200 msg/s"
    assert _per_second(1, 5.0) == _per_second(2, 0.001) == _per_second(2, 0.0) == ""


def test_the_settled_line_says_none_settled_after_the_last_send_not_a_negative_time(dsn: str) -> None:
    """A run in which nothing settled (workers that could not connect, the wait given up after
    60 s) reported "settled 0 by 3 workers x 8, the last -4521.3 s after the last was sent": the
    last settle's time, None, was taken for 0 on the monotonic clock (a review). So did a run
    whose last settle came before its last send."""
    def nothing(tally: Tally, ids: list[int]) -> None:
        pass

    def before_the_last_send(tally: Tally, ids: list[int]) -> None:
        tally.record(_result("demo_report_2", ids[0], "immediate", "completed"))
        tally.enqueued(ids[1], "immediate")  # sent again, later: the last send is after the settle

    for settle, name, count in ((nothing, "demo_report", 0), (before_the_last_send, "demo_report_2", 1)):
        _status, out = _report(dsn, ["immediate", "immediate"], settle, name=name)
        [line] = [line for line in out.splitlines() if line.startswith("  settled ")]
        assert line == f"  settled       {count} by 3 workers x 8, none after the last was sent", out


def test_the_command_to_delete_a_directory_left_behind_is_quoted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a $TMPDIR with a space, the demo's advice for a directory it could not delete was
    "rm -rf /tmp/my tmp/pgqueue-... deletes it": run as said, it deletes /tmp/my (and
    ./tmp/pgqueue-...), not the directory (a review). The path is quoted for the shell."""
    import io
    import shlex

    import pgqueue.embedded
    from pgqueue.demo import database

    rmtree = shutil.rmtree  # (patched below, in shutil itself)
    parent = tempfile.mkdtemp(prefix="pgqueue-demo-")
    spaced = os.path.join(parent, "my tmp")
    os.mkdir(spaced)
    os.chmod(parent, 0o755)  # the server runs as postgres when the tests run as root
    os.chmod(spaced, 0o755)
    try:
        monkeypatch.setattr(tempfile, "tempdir", spaced)
        monkeypatch.setattr(pgqueue.embedded.shutil, "rmtree", lambda path, ignore_errors=False: None)
        out = io.StringIO()
        with database(None, out) as dsn:
            assert dsn
        text = out.getvalue()
        found = re.search(r"left behind \(rm -rf (.+) deletes it\)\.$", text, re.MULTILINE)
        assert found, text
        [path] = shlex.split(found.group(1))
        assert os.path.dirname(path) == spaced and os.path.isdir(path), text
    finally:
        rmtree(parent)


# -- review of the demo, session 69 -----------------------------------------------------------


def _queue_name(head: str) -> str:
    found = re.search(r"^Queue (demo_\w+): ", head, re.MULTILINE)
    assert found, head
    return found.group(1)


@pytest.mark.parametrize("during_the_drop", [1, 2])
def test_ctrl_c_while_the_queue_is_dropped_does_not_leave_it_behind_unsaid(dsn: str, during_the_drop: int) -> None:
    """With --dsn a second Ctrl-C while the demo dropped its queue cancelled the drop (psycopg
    cancels the statement on a KeyboardInterrupt), and the queue demo_<pid>_<hex> was left in
    the user's database, unsaid (a review). The drop waits here for work in flight on the
    queue's lock stripe (as it may for another queue's: 64 stripes): a Ctrl-C then is held until
    the drop is done; another gives up the drop, and the demo prints the command that drops
    the queue, which does."""
    import psycopg

    proc = _start_in_own_group("demo", "--dsn", dsn, "--messages", "4000", "--rate", "400", "--no-progress")
    try:
        head = _read_until(proc, "process them", timeout=90)
        name = _queue_name(head)
        with psycopg.connect(dsn) as blocker, psycopg.connect(dsn, autocommit=True) as watcher:
            # work in flight on the stripe (ROW EXCLUSIVE, as every operation takes it) until the rollback
            blocker.execute("SELECT pgqueue._queue_lock(id) FROM pgqueue.queue WHERE name = %s", [name])
            time.sleep(1.0)
            proc.send_signal(signal.SIGINT)  # the first Ctrl-C: stop, and clean up
            deadline = time.monotonic() + 60
            waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s"
            while watcher.execute(waiting, ["%pgqueue.queue_drop(%"]).fetchone() != (1,):
                assert proc.poll() is None and time.monotonic() < deadline, "the drop did not start"
                time.sleep(0.05)
            for _ in range(during_the_drop):  # Ctrl-C again, while the drop waits
                proc.send_signal(signal.SIGINT)
                time.sleep(0.5)
            blocker.rollback()
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = head + rest
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    assert re.search(r"^Interrupted with [\d,]+ of 4,000 messages settled \(seed \d+: `[^`]+`\): stopping", out, re.MULTILINE), out
    assert f"Dropping queue {name} first (Ctrl-C again leaves it behind)...\n" in out, out
    if during_the_drop == 1:
        assert f"Dropped queue {name}.\n" in out, out
        assert [q.queue for q in list_queues(dsn)] == ["default"]
        return
    found = re.search(rf"^Could not drop queue {name} \(interrupted\): it is left behind, with its messages and dead "
                      r"letters; `(pgqueue queue drop --dsn .+)` drops it\.$", out, re.MULTILINE)
    assert found, out
    assert "Dropped queue" not in out, out
    assert name in [q.queue for q in list_queues(dsn)]
    [program, *args] = shlex.split(found.group(1))
    done = subprocess.run([str(PGQUEUE.with_name(program)), *args], check=False, capture_output=True, text=True,
                          timeout=60, env=_demo_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert [q.queue for q in list_queues(dsn)] == ["default"]


def test_a_second_ctrl_c_while_the_workers_stop_is_held(capsys: pytest.CaptureFixture[str], dsn: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """README: "a second Ctrl-C while it cleans up is held until it is done". One that came while
    the first Ctrl-C's stop joined the workers raised there: the workers were left running while
    the queue was dropped, "Interrupted." was said twice, and with --dsn it used up a press of
    the drop's count (a review). It is held now: the workers are joined, then the queue dropped."""
    import threading

    from pgqueue import demo

    real_join = demo._Threads.join
    workers_ended_at_drop: list[bool] = []
    worker_threads: list[threading.Thread] = []

    def join(self: Any) -> None:
        if self.threads and self.threads[0].name.startswith("demo-worker") and first.is_set():
            worker_threads.extend(self.threads)
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the workers stop
            for _ in range(30):
                time.sleep(0.01)  # (the handler runs here, between two sleeps)
        real_join(self)

    real_drop = demo._drop

    def drop(*args: Any, **kwargs: Any) -> None:
        workers_ended_at_drop.append(bool(worker_threads) and not any(t.is_alive() for t in worker_threads))
        real_drop(*args, **kwargs)

    first = threading.Event()

    def first_ctrl_c() -> None:
        first.set()
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(demo._Threads, "join", join)
    monkeypatch.setattr(demo, "_drop", drop)
    timer = threading.Timer(2.0, first_ctrl_c)
    timer.start()
    try:
        status = main(["demo", "--dsn", dsn, "--messages", "4000", "--rate", "400", "--no-progress"])
    finally:
        timer.cancel()
    out, err = capsys.readouterr()
    assert status == 130, out + err
    assert re.search(r"^Interrupted with [\d,]+ of 4,000 messages settled", out, re.MULTILINE), out
    assert "\nInterrupted.\n" not in "\n" + out, out  # (said once, with the count)
    assert workers_ended_at_drop == [True], (workers_ended_at_drop, out)
    assert re.search(r"^Dropped queue demo_\w+\.$", out, re.MULTILINE), out
    assert [q.queue for q in list_queues(dsn)] == ["default"]


def test_a_ctrl_c_as_the_queue_is_created_does_not_leave_it_behind(
        capsys: pytest.CaptureFixture[str], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The queue was created before the block whose end drops it: a Ctrl-C as the create
    returned (or an error just after it) left the queue behind in the user's database."""
    from pgqueue import demo

    class Interrupted(Queue):
        def create(self, *args: Any, **kwargs: Any) -> Any:
            super().create(*args, **kwargs)
            raise KeyboardInterrupt

    monkeypatch.setattr(demo, "Queue", Interrupted)
    status = main(["demo", "--dsn", dsn, "--messages", "10", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 130, out + err
    assert re.search(r"^Dropped queue demo_\w+\.$", out, re.MULTILINE) and "Interrupted." in out, out
    assert [q.queue for q in list_queues(dsn)] == ["default"]


def test_the_connection_warning_adds_up_with_the_dashboard(
        capsys: pytest.CaptureFixture[str], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning's breakdown ("3 a worker, one a producer, one its own") left out the
    dashboard's 6 connections, which its total counted (a review). Each part has its number."""
    import contextlib

    import psycopg

    from pgqueue import demo

    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
    assert row is not None
    workers = int(row[0]) // 3 + 1  # more connections than the server has, whatever it serves
    if workers > 200:
        pytest.skip("a server of more than 600 connections")

    @contextlib.contextmanager
    def no_dashboard(*args: object) -> Any:  # stopped here: the warning is what is looked at
        raise RuntimeError("stopped after the warning")
        yield

    monkeypatch.setattr(demo, "dashboard", no_dashboard)
    with pytest.raises(RuntimeError, match="stopped after the warning"):
        main(["demo", "--dsn", dsn, "--workers", str(workers), "--producers", "5", "--dashboard", "0",
              "--no-progress"])
    out, _err = capsys.readouterr()
    found = re.search(r"^Warning: the demo needs about ([\d,]+) connections to the database \((.*); 3 a worker\) and ",
                      out, re.MULTILINE)
    assert found, out
    total, parts = int(found.group(1).replace(",", "")), found.group(2).split(", ")
    assert parts == [f"{3 * workers:,} for {workers} workers", "5 for 5 producers", "1 its own", "6 the dashboard's"]
    assert sum(int(part.split()[0].replace(",", "")) for part in parts) == total == 3 * workers + 5 + 1 + 6


def test_counts_of_one_are_singular(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    """"sent 1 messages ... by 1 producers", "1 workers x 1 handlers", "1 failures logged",
    "1 problem(s)" (a review): every count of the demo's output agrees with its number."""
    status = main(["demo", "--dsn", dsn, "--messages", "1", "--rate", "0", "--seed", "1", "--producers", "1",
                   "--workers", "1", "--concurrency", "1", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert re.search(r"^Queue demo_\w+: 1 producer sends 1 message as fast as it can; 1 worker x 1 handler "
                     r"processes them ", out, re.MULTILINE), out
    assert re.search(r"^  sent          1 message in \d+\.\d s by 1 producer, one transaction each \(as fast as it "
                     r"could\)$", out, re.MULTILINE), out
    assert re.search(r"^  settled       1 by 1 worker x 1 in ", out, re.MULTILINE), out
    assert re.search(r"^  lost leases   0 acknowledgements refused ", out, re.MULTILINE), out
    plural = re.findall(r"(?<![\d.,])1 (?!ms\b)[a-z]+s\b", out)
    assert plural == [], out

    # the check's and the report's other counts
    import io

    from pgqueue.demo import DemoOptions, _Trouble, report

    queue = Queue(dsn, "demo_plural")
    queue.create()
    [msg_id] = queue.enqueue_many([{"kind": "immediate"}])
    tally = Tally()
    tally.enqueued(msg_id, "immediate")
    assert check(queue, tally, Counter(immediate=2))[0] == "1 message was never enqueued"
    trouble = _Trouble()
    trouble.count, trouble.first = 1, "connection refused"
    tally.stale = 1
    text = io.StringIO()
    assert report(queue, [{"n": 0, "kind": "immediate"}], tally, 1.0, DemoOptions(), text, trouble) == 1
    report_text = text.getvalue()
    assert re.search(r"^  lost leases   1 acknowledgement refused ", report_text, re.MULTILINE), report_text
    assert re.search(r"^  connections   1 failure logged by the workers ", report_text, re.MULTILINE), report_text
    assert re.search(r"^  exactly once  FAILED: [2-9] problems$", report_text, re.MULTILINE), report_text


def test_the_report_reads_the_dead_letters_and_the_stats_once(dsn: str) -> None:
    """The check and then the report each read the queue's dead letters (up to 1,000 rows) and
    its stats (a review): once each now, for both, and the report is the same."""
    import io

    from pgqueue.demo import DemoOptions, report

    calls: Counter[str] = Counter()

    class Counting(Queue):
        def dead_letters(self, *args: Any, **kwargs: Any) -> Any:
            calls["dead_letters"] += 1
            return super().dead_letters(*args, **kwargs)

        def stats(self, *args: Any, **kwargs: Any) -> Any:
            calls["stats"] += 1
            return super().stats(*args, **kwargs)

    queue = Counting(dsn, "demo_report")
    queue.create(max_attempts=1)
    done, poison = queue.enqueue_many([{"kind": "immediate"}, {"kind": "poison"}])
    tally = Tally()
    tally.enqueued(done, "immediate")
    tally.enqueued(poison, "poison")
    for msg in Queue(dsn, "demo_report").dequeue(2):
        if msg.id == done:
            assert queue.complete(msg)
            tally.record(_result(queue.name, done, "immediate", "completed"))
        else:
            assert queue.fail(msg, "poison")
            tally.record(_result(queue.name, poison, "poison", "dead"))
    queue.alter(max_attempts=3)  # (the report's fencing check takes its message over once)
    out = io.StringIO()
    jobs = [{"n": 0, "kind": "immediate"}, {"n": 1, "kind": "poison"}]
    assert report(queue, jobs, tally, 1.0, DemoOptions(), out) == 0, out.getvalue()
    assert calls == Counter(dead_letters=1, stats=1), calls
    text = out.getvalue()
    assert re.search(r"^    poison     +1  dead-lettered after 3 attempts each$", text, re.MULTILINE), text
    assert re.search(r"^  dead letters  1$", text, re.MULTILINE), text
    assert "exactly once  OK: 1 completed once each, 1 dead-lettered once each, none lost, none twice" in text, text


def test_workers_and_producers_are_bounded_by_their_connections(capsys: pytest.CaptureFixture[str]) -> None:
    """--workers and --producers took up to 10,000: the throwaway server was sized for 30,000
    connections and more, far past a machine (a review). They are bounded, said in --help."""
    for option, value, expected in (("--workers", "201", "a number of workers from 1 to 200"),
                                    ("--producers", "101", "a number of producers from 1 to 100")):
        status = main(["demo", option, value, "--dsn", "host=/nonexistent"])  # refused before it connects
        out, err = capsys.readouterr()
        assert status == 2, out + err
        assert err == (f"pgqueue demo: error: argument {option}: expected {expected}, got '{value}' "
                       "(see `pgqueue demo --help`)\n"), err
    assert main(["demo", "--help"]) == 0
    out, _err = capsys.readouterr()
    text = " ".join(out.split())
    assert "(default 2, at most 100)" in text and "(default 3, at most 200)" in text, out


def test_producers_that_cannot_connect_are_said_plainly(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """More producers than the server had free connections: after 30 s the demo said "cannot
    connect to the database: pool initialization incomplete after 30.0 sec", and its warning
    had advised lowering --workers only (a review). It names the producers and the way out."""
    import psycopg

    from pgqueue import demo
    from pgqueue.embedded import EmbeddedPostgres

    monkeypatch.setattr(demo, "PRODUCERS_CONNECT_S", 3.0, raising=False)
    with EmbeddedPostgres(settings={"max_connections": "6"}) as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgqueue")
        status = main(["demo", "--dsn", pg.dsn(), "--messages", "20", "--rate", "0", "--producers", "8",
                       "--workers", "1", "--no-progress"])
        out, err = capsys.readouterr()
        with psycopg.connect(pg.dsn()) as conn:
            assert [q.queue for q in list_queues(conn)] == ["default"]
    assert status == 1, out + err
    assert "Lower --workers or --producers, or raise the server's max_connections." in out, out
    assert err == ("pgqueue: error: the producers could not open their 8 connections to the database in 3 s (the "
                   "server short of free connections? lower --producers, or raise its max_connections)\n"), err


# -- review of the demo, session 69, a second pass --------------------------------------------


def test_a_run_without_a_seed_says_the_one_it_used_and_pasted_back_it_repeats_the_mix(
        capsys: pytest.CaptureFixture[str], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --seed the demo never said the seed it ran with: a run that failed could not be
    repeated (a review). The report says it, in a form pasted back as it is."""
    from pgqueue import demo

    made: list[list[dict[str, Any]]] = []
    make_jobs = demo.make_jobs

    def recording(count: int, rng: Any) -> list[dict[str, Any]]:
        made.append(make_jobs(count, rng))
        return made[-1]

    monkeypatch.setattr(demo, "make_jobs", recording)
    line = r"^  seed          (-?\d+): `(--seed -?\d+ --messages 30)` repeats this run's mix of messages$"
    args = ["demo", "--dsn", dsn, "--rate", "0", "--workers", "2", "--no-progress"]
    assert main([*args, "--messages", "30"]) == 0
    out, err = capsys.readouterr()
    first = re.search(line, out, re.MULTILINE)
    assert first, out + err
    assert main([*args, *shlex.split(first.group(2))]) == 0
    out, err = capsys.readouterr()
    again = re.search(line, out, re.MULTILINE)
    assert again and again.group(1) == first.group(1), out + err
    assert len(made) == 2 and made[0] == made[1]
    assert len({job["kind"] for job in made[0]}) > 1  # (a mix, not one kind: the comparison means something)


def test_a_dashboard_without_flask_is_refused_before_anything_starts(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """`pgqueue demo --dashboard` without Flask started a throwaway server, stopped it and only
    then said that Flask was missing (a review): it is refused before anything starts."""
    monkeypatch.delenv("PGQUEUE_DSN", raising=False)
    for name in [name for name in sys.modules if name == "pgqueue.dashboard" or name.startswith("pgqueue.dashboard.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "flask", None)  # as if it were not installed: import flask raises ImportError
    started = time.monotonic()
    status = main(["demo", "--messages", "10", "--no-progress", "--dashboard", "0"])
    out, err = capsys.readouterr()
    assert status == 1, out + err
    assert err == ("pgqueue: error: --dashboard needs Flask (import of flask halted; None in sys.modules), the "
                   "pgqueue-sql[dashboard] extra: pip install 'flask>=3.0,<4' (from a clone of pgqueue: pip install "
                   "'./python[dashboard]')\n"), err
    assert out == "", out  # no "Starting a throwaway PostgreSQL server..." and its stop
    assert time.monotonic() - started < 5


def test_demo_options_refuse_what_the_command_line_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    """The limits (--workers at most 200, --producers 100...) held on the command line only:
    run_demo(DemoOptions(workers=10000)) went ahead (a review). DemoOptions refuses what the
    command line refuses, saying the same, from the same definition."""
    from pgqueue.demo import DemoOptions, run_demo

    with pytest.raises(ValueError, match=r"^DemoOptions\.workers: expected a number of workers from 1 to 200, "
                                         r"got 10000$"):
        run_demo(DemoOptions(workers=10000, dsn="host=/nonexistent"), out=sys.stdout)
    for option, value, given in (("workers", 201, "201"), ("workers", 0, "0"), ("producers", 101, "101"),
                                 ("messages", 0, "0"), ("messages", 10_000_001, "10000001"),
                                 ("concurrency", 0, "0"), ("rate", -1.0, "-1"), ("rate", float("nan"), "nan"),
                                 ("rate", 0.0001, "0.0001"), ("dashboard", 70000, "70000")):
        with pytest.raises(ValueError) as raised:
            DemoOptions(**{option: value})  # type: ignore[arg-type]
        said = str(raised.value)
        assert said.startswith(f"DemoOptions.{option}: expected ") and said.endswith(f", got {value!r}"), said
        status = main(["demo", f"--{option}", given, "--dsn", "host=/nonexistent"])  # refused before it connects
        _out, err = capsys.readouterr()
        assert status == 2, err
        expected = said[len(f"DemoOptions.{option}: "):-len(f", got {value!r}")]
        assert re.search(rf"argument --{option}(/-n)?: {re.escape(expected)}, got '{given}'", err), (said, err)
    with pytest.raises(ValueError, match=r"^DemoOptions: workers 200 x concurrency 51 is 10,200 handler threads, "
                                         r"more than 10,000$"):
        DemoOptions(workers=200, concurrency=51)
    for option, value in (("workers", "3"), ("producers", 2.5), ("messages", True), ("rate", "400"),
                          ("seed", "7"), ("dashboard", 80.0)):
        with pytest.raises(TypeError, match=rf"^DemoOptions\.{option}: expected "):
            DemoOptions(**{option: value})  # type: ignore[arg-type]
    DemoOptions(workers=200, producers=100, concurrency=50, messages=10_000_000, rate=0, dashboard=0, seed=-3)


def test_the_check_reads_a_dead_letter_for_every_poison_message_of_a_large_run() -> None:
    """A run of 100,000 messages sends some 4,000 poison ones: the check reads that many dead
    letters and more (1,000 alone would have failed a run that went right, "the dead letters
    (1000) are not the poison messages (4000)")."""
    from pgqueue.demo import _dead_letters

    asked: list[int] = []

    class Letters:
        def dead_letters(self, limit: int) -> list[Any]:
            asked.append(limit)
            return []

    tally = Tally()
    for msg_id in range(4000):
        tally.enqueued(msg_id, "poison")
    tally.enqueued(4000, "immediate")
    assert _dead_letters(Letters(), tally) == {}  # type: ignore[arg-type]
    assert asked and asked[0] >= 4000, asked


def test_the_command_to_drop_a_queue_left_behind_leaves_the_password_out() -> None:
    """When the demo cannot drop its queue on the user's database it prints the command that
    does, with the DSN less its password (the terminal and its scroll-back are no place for it)."""
    from pgqueue.demo import _drop_command

    from psycopg.conninfo import conninfo_to_dict

    command = _drop_command("host=db.example port=5433 user=app password=s3cret dbname=prod", "demo_1_abc")
    assert "s3cret" not in command, command
    assert command.endswith("` (with the DSN's password, left out here)"), command
    argv = shlex.split(command.split("`")[1])
    assert argv[:4] == ["pgqueue", "queue", "drop", "--dsn"] and argv[5:] == ["demo_1_abc"], argv
    assert conninfo_to_dict(argv[4]) == {"host": "db.example", "port": "5433", "user": "app", "dbname": "prod"}
    assert "left out" not in _drop_command("host=db.example dbname=prod", "q")  # (none to leave out)


def test_the_report_counts_the_database_warnings_not_the_failures_of_the_demos_own_jobs() -> None:
    """The workers' warnings about a message (the flaky and poison jobs fail on purpose) are not
    trouble; those about the database are counted, the first kept for the report."""
    import logging

    from pgqueue.demo import _Trouble

    def record(text: str, level: int = logging.WARNING) -> logging.LogRecord:
        return logging.LogRecord("pgqueue.worker", level, __file__, 1, text, None, None)

    trouble = _Trouble()
    trouble.emit(record("message 12 failed (attempt 1 of 3): TransientError: downstream service unavailable"))
    trouble.emit(record("message 13 dead-lettered after 3 attempts: PoisonMessage: job 13 cannot be processed"))
    assert (trouble.count, trouble.first) == (0, None)
    trouble.emit(record("cannot connect to the database: connection refused (until it works again, retries are "
                        "logged at DEBUG)"))
    trouble.emit(record("cannot connect to the database: too many clients"))
    assert (trouble.count, trouble.first) == (2, "cannot connect to the database: connection refused")


def test_the_demo_runs_on_the_database_pgqueue_dsn_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pgqueue demo` without --dsn runs on $PGQUEUE_DSN when it is set (a throwaway server
    otherwise); --dsn wins over it."""
    import argparse

    import pgqueue.demo as demo

    ran: list[Any] = []
    monkeypatch.setattr(demo, "run_demo", lambda options: ran.append(options) or 0)
    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    parser.add_argument("--dsn")
    monkeypatch.setenv("PGQUEUE_DSN", "dbname=from_env")
    assert demo.run_from_args(parser.parse_args(["--messages", "10"])) == 0
    assert demo.run_from_args(parser.parse_args(["--dsn", "dbname=given"])) == 0
    monkeypatch.delenv("PGQUEUE_DSN")
    assert demo.run_from_args(parser.parse_args([])) == 0
    assert [(o.dsn, o.messages) for o in ran] == [("dbname=from_env", 10), ("dbname=given", 4000), (None, 4000)]


def test_the_producers_send_at_the_rate_asked() -> None:
    """--rate R: message n is sent at n / R seconds from the start, not all at once; a
    scheduled job is due its delay after it is sent."""
    import threading

    from pgqueue.demo import produce

    sent: list[tuple[float, Any, Any]] = []

    class Sink:
        def enqueue(self, payload: Any, delay: Any = None, priority: Any = None) -> int:
            sent.append((time.monotonic(), payload, delay))
            return len(sent)

    jobs = [{"n": 0, "kind": "immediate"}, {"n": 1, "kind": "scheduled", "delay": 30.0}, {"n": 2, "kind": "immediate"}]
    tally = Tally()
    start = time.monotonic()
    produce(Sink(), jobs, start, 10.0, tally, threading.Event())  # type: ignore[arg-type]
    offsets = [at - start for at, _payload, _delay in sent]
    assert offsets[1] >= 0.1 and offsets[2] >= 0.2, offsets
    assert sent[1][2] == 30.0 and sent[1][1]["due"] - time.time() > 25
    assert tally.kinds == {1: "immediate", 2: "scheduled", 3: "immediate"}


def test_the_slow_row_says_the_longest_a_handler_held_its_lease(dsn: str) -> None:
    """The slow jobs' row says how long the longest of them ran on its 1 s lease (what the
    heartbeats had to cover), not the shortest; the dead letters' row adds what the database
    dead-lettered itself only when it did."""
    def settle(tally: Tally, ids: list[int]) -> None:
        for msg_id, took in zip(ids, (1.6, 2.4)):
            result = _result("demo_report", msg_id, "slow", "completed")
            tally.record(Result(result.message, "completed", True, duration=took))

    _status, out = _report(dsn, ["slow", "slow"], settle)  # (left in the queue: a problem, not this test's)
    assert re.search(r"^    slow +2  p50 .* handlers ran up to 2\.4 s on a 1 s lease: heartbeats kept it$", out,
                     re.MULTILINE), out
    assert re.search(r"^  dead letters  0$", out, re.MULTILINE), out  # (none the database's own to add)


def test_the_check_counts_a_scheduled_message_left_in_the_queue(dsn: str) -> None:
    """A run the wait did not give up on leaves nothing in its queue: a scheduled (delayed)
    message left there is a problem too, as a ready or a leased one is."""
    queue = Queue(dsn, "demo_check")
    queue.create()
    later = queue.enqueue("later", delay=3600)
    tally = Tally()
    tally.enqueued(later, "scheduled")
    problems = check(queue, tally, Counter(scheduled=1))
    assert "left in the queue: 0 ready, 1 scheduled, 0 leased" in problems, problems


def test_a_slow_rate_is_not_taken_for_a_stretch_without_progress(
        capsys: pytest.CaptureFixture[str], dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait gives up on a stretch without progress only once the producers' schedule is
    over: at --rate 1 nothing is sent or settled for most of each second, and that is not a
    stall (GIVE_UP_AFTER_S shortened here below the gap between two sends)."""
    from pgqueue import demo

    monkeypatch.setattr(demo, "GIVE_UP_AFTER_S", 0.6)
    monkeypatch.setattr(demo, "MIX", {"immediate": 1})  # (no slow job, retry or dead letter to wait for)
    status = main(["demo", "--dsn", dsn, "--messages", "3", "--rate", "1", "--producers", "1", "--workers", "1",
                   "--seed", "1", "--no-progress"])
    out, err = capsys.readouterr()
    assert status == 0, out + err
    assert "stopped waiting" not in out and re.search(r"^    immediate +3  p50 ", out, re.MULTILINE), out


def test_one_problem_past_those_listed_is_counted_not_dropped(dsn: str) -> None:
    """The report lists 20 problems and counts the rest: the 21st too ("and 1 more")."""
    _status, out = _report(dsn, ["immediate"] * 20, lambda tally, ids: None)  # 20 unsettled + what is left
    assert re.search(r"^  exactly once  FAILED: 21 problems$", out, re.MULTILINE), out
    problems = re.findall(r"^    - (.*)$", out, re.MULTILINE)
    assert len(problems) == 21 and problems[-1] == "and 1 more", out


def test_the_jobs_of_each_kind_are_what_the_demo_says_they_are() -> None:
    """The mix of the module's docstring: scheduled jobs due in 0.5-2 s, priority jobs with a
    priority 0-9, slow jobs of 1.5-2.5 s (past the 1 s lease), the others a few ms."""
    import random

    from pgqueue.demo import MIX, make_jobs

    jobs = make_jobs(2000, random.Random(3))
    assert [job["n"] for job in jobs] == list(range(2000))
    assert {job["kind"] for job in jobs} == set(MIX)
    for job in jobs:
        kind = job["kind"]
        assert ("delay" in job) == (kind == "scheduled") and ("priority" in job) == (kind == "priority"), job
        if kind == "scheduled":
            assert 0.5 <= job["delay"] <= 2.0, job
        if kind == "priority":
            assert job["priority"] in range(10), job
        assert (1500 <= job["work_ms"] <= 2500) if kind == "slow" else (0 <= job["work_ms"] <= 40), job
