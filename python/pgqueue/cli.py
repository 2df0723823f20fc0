"""The ``pgqueue`` command line.

Run ``pgqueue --help`` for the commands. Every command but ``demo`` needs a database: give
``--dsn`` or set ``PGQUEUE_DSN`` (``worker`` also takes it as its first argument, then without
``--dsn``); without either, libpq's own defaults apply, as for psql (``PGHOST``,
``PGDATABASE``, ``PGSERVICE``...). A user mistake (a bad connection string, an unknown queue, a missing extension, a bad argument) is
reported as one line on stderr with a non-zero exit status: 1 for errors, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextvars
import importlib
import io
import json
import logging
import errno
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgqueue import _connect
from pgqueue._core import check_str, delay_to_ms
from pgqueue._version import DISTRIBUTION, __version__
from pgqueue._worker_core import (_GIVE_UP, _SIGNALS, CommandSignals, NotStarted, WorkerCore, _client_side,
                                   is_async_handler, stop_signals)
from pgqueue.client import Queue, _read_committed_again, all_counters, all_stats, list_queues
from pgqueue.codec import with_task
from pgqueue.compat import check_server, server_pgqueue, version_mismatch
from pgqueue.errors import (
    ConnectionFailed,
    ExtensionNotInstalled,
    InvalidArgument,
    PgQueueError,
    QueueExists,
    QueueNotFound,
    VersionMismatch,
    conninfo_error,
    one_line,
    printable,
    quoted,
)
from pgqueue.message import DeadLetter, Message, Pending, QueueCounters, QueueSettings, QueueStats, ScheduleEntry
from pgqueue.tasks import is_generator_callable

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["main"]

T = TypeVar("T")

PROG = "pgqueue"
DSN_ENV = "PGQUEUE_DSN"


class UserError(Exception):
    """A mistake the user can fix: reported as one line, exit status 1."""


class _OutputFailed(Exception):
    """Standard output could not be written (a full disk, ``> /dev/full``): one line, exit 1."""


#: What a write to standard output fails with when the output, not the program, is at fault.
_OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EDQUOT})


class UsageError(Exception):
    """Bad command-line usage: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises UsageError instead of printing the usage and exiting, and
    takes no abbreviation of an option (`dead purge jobs --a` ran as `--all`, `uninstall --y`
    as `--yes`: a review)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message} (see `{self.prog} --help`)")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """Write the help or version; a write that fails propagates to :func:`main`, which says
        "cannot write the output" with status 1 (argparse's own ignores it: `--help > /dev/full`
        exited 0, a review)."""
        file = file or sys.stderr
        if message and file is not None:
            file.write(message)


# ---------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------


#: True when the process is the `pgqueue` command (:func:`console`), not a caller of :func:`main`
_CONSOLE = False
#: What an AsyncWorker's run left running (:func:`_run_async`): handlers it gave up that still
#: run, which :func:`console` does not wait for
_LEFT_RUNNING: list[str] = []


def console() -> NoReturn:
    """The `pgqueue` command (and ``python -m pgqueue``): :func:`main`, then the exit. Once
    main has returned, the exit status is decided: a SIGINT, SIGTERM or SIGHUP that comes while
    the process exits (Python resets its own handlers to the default ones as it finalizes) is
    ignored, not reported as the status (130, 143, 129)."""
    global _CONSOLE
    _CONSOLE = True
    _escape_what_the_locale_cannot_write()
    status = main()
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if _LEFT_RUNNING:
        # handlers the worker gave up (their messages given back or failed) still run: the
        # interpreter's exit would wait for their threads without end (_run_async)
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)
    sys.exit(status)


def _run_async(run: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run(run)`` without its unbounded waits. Once the worker's ``run()`` has returned
    (or raised), the tasks still running (a handler the worker gave up that ignores its
    cancellation) are cancelled and waited for :data:`~pgqueue._worker_core._GIVE_UP` seconds at
    most, and the threads of the loop's pool (``asyncio.to_thread``) one second: asyncio.run and
    the interpreter's exit waited for both without end, so `pgqueue worker` stayed after "worker
    stopped", deaf to further signals, until such a handler ended (a review). What is still
    running then is named in :data:`_LEFT_RUNNING`, and :func:`console` exits without it."""
    before = set(threading.enumerate())
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(run)
    finally:
        try:
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                _, still = loop.run_until_complete(asyncio.wait(pending, timeout=_GIVE_UP))
                _LEFT_RUNNING.extend(f"task {task.get_name()}" for task in still)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()  # (its thread pool told to stop: the idle threads end, the busy ones finish first)
        deadline = time.monotonic() + 1.0
        for thread in set(threading.enumerate()) - before:
            if not thread.daemon:
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    _LEFT_RUNNING.append(f"thread {thread.name}")
        if _LEFT_RUNNING:
            logging.getLogger("pgqueue").warning(
                "exiting without waiting for %d handler(s) the worker gave up (%s)",
                len(_LEFT_RUNNING), ", ".join(_LEFT_RUNNING))


def _escape_what_the_locale_cannot_write() -> None:
    """Write a character the output's encoding cannot hold (a queue name, a payload or a
    schedule's in a Latin-1 or ASCII locale) as a backslash escape, ``\\u2603``: it was a
    UnicodeEncodeError traceback, after `schedule create` had created the schedule."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    """Run the ``pgqueue`` command line with ``argv`` (default: ``sys.argv[1:]``).

    Returns the exit status: 0 on success, 1 on an error, 2 on bad usage, 130 on Ctrl-C.
    """
    argv = sys.argv[1:] if argv is None else argv
    _DONE.set(None)
    bench_argv = _bench_argv(argv)
    if bench_argv is not None:  # every option after it belongs to the benchmark suite
        try:
            return _run_bench(bench_argv)
        except UserError as exc:
            _error(str(exc))
            return 1
    parser = build_parser()
    try:
        try:
            args = _parse(parser, argv)
        except SystemExit:  # --help printed (or argparse's usage error, on stderr)
            if sys.stdout is not None:
                sys.stdout.flush()  # a help that could not be written is reported (below), not 0
            raise
        if args.version:
            status = _print_version(args, sys.stdout)
        elif not hasattr(args, "run"):
            parser.print_help(sys.stderr)
            return 2
        else:
            _check_utf8_arguments(args)
            run: Callable[[argparse.Namespace], int] = args.run
            if run in (_cmd_worker, _cmd_scheduler, _cmd_metrics, _cmd_dashboard, _cmd_demo):
                status = run(args)  # they stop on the signals themselves
            else:
                with _stop_signals_interrupt():
                    status = run(args)
        if sys.stdout is not None:  # (None: started with its descriptor closed, `>&-`)
            sys.stdout.flush()  # here, not at exit: a write that fails is reported (below)
        return status
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except UsageError as exc:
        _error(str(exc), prefix=False)
        return 2
    except _Stopped as exc:
        # (a signal once the change is made, while its output is written: say it is done, or a
        # script reads "not done" and runs it again, as it would after a failed write)
        done = _DONE.get()
        what = "not done" if done is None else f"done all the same: {done}"
        print(f"\n{parser.prog}: stopped by {signal.Signals(exc.signum).name}: {what}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(file=sys.stderr)
        if _DONE.get() is not None:
            print(f"{parser.prog}: interrupted: done all the same: {_DONE.get()}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `pgqueue dead list jobs | head`: the reader has gone
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit-time flush cannot fail again
        if _DONE.get() is not None:  # the status 1 is the output's, not the work's: say so
            _error(f"the output was closed before it was all written; done all the same: {_DONE.get()}")
        return 1
    except (_OutputFailed, OSError) as exc:  # `> /dev/full`, a disk that filled up
        cause = exc.__cause__ if isinstance(exc, _OutputFailed) else exc
        if not isinstance(cause, OSError) or cause.errno not in _OUTPUT_ERRNOS:
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit-time flush cannot fail again
        done = f"; done all the same: {_DONE.get()}" if _DONE.get() is not None else ""
        _error(f"cannot write the output: {cause.strerror}{done}")
        return 1
    except Exception as exc:
        message = describe_error(exc)
        if message is None:
            raise  # a bug, not a user mistake: the traceback is what we need
        _error(message)
        return 1


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse argv. The worker's positional arguments may have options between them (`worker
    jobs --concurrency 2 app:handle`: argparse takes the positionals of one run only and said
    "unrecognized arguments", pointing at the top-level help); arguments no command knows are
    refused naming the command's help."""
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "run", None) is _cmd_worker:
        args.target = [*args.target, *(e for e in extra if not e.startswith("-"))]
        extra = [e for e in extra if e.startswith("-")]
    if extra:
        prog = getattr(args, "command_prog", PROG)
        raise UsageError(f"{prog}: error: unrecognized arguments: {' '.join(extra)} (see `{prog} --help`)")
    return args


#: What a command that changes the database did, once it is done (:func:`_done`): said when
#: the output then cannot be written, whose exit status 1 would otherwise read as "not done"
#: (`pgqueue enqueue jobs x >> ids.log` on a full disk: the message is on the queue). A context
#: variable: two main() calls on two threads keep their own.
_DONE: contextvars.ContextVar[str | None] = contextvars.ContextVar("pgqueue_cli_done", default=None)


def _done(what: str) -> None:
    _DONE.set(what)


def _check_output(nothing: str = "nothing done") -> None:
    """Refuse to run a command whose output is what the user needs (ids, payloads, counts)
    when it was started with its standard output closed (``>&-``: Python has no ``sys.stdout``,
    and print() writes nowhere): one line, exit 1, before anything is done. `enqueue` and
    `cancel` did their work and lost its only record (the id; the payload cancelled), exit 0;
    `stats --json` and `dead list --all` ended in a traceback (a review). ``nothing`` says
    what was not done."""
    if sys.stdout is None:
        raise UserError(f"cannot write the output: the standard output is closed; {nothing}")


def _not_utf8(text: str) -> str | None:
    """Where ``text`` is not UTF-8 (bytes the locale could not decode, kept as surrogates by
    Python's argv and environ), or None if it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        byte = f"byte 0x{code - 0xDC00:02x} " if 0xDC80 <= code <= 0xDCFF else ""
        return f"{byte}at character {exc.start}"
    return None


#: Arguments whose value an error must not repeat (the message names them only).
_SECRET = frozenset({"dsn", "token"})


def _check_utf8_arguments(args: argparse.Namespace) -> None:
    """Refuse an argument that is not UTF-8 text (bytes of another encoding in a name, a DSN, a
    cron expression...), naming it, without repeating it (a DSN or a token may hold a
    password): one line, exit 1, before anything is done. A DSN or a --token was a
    UnicodeEncodeError traceback, and a name "a text the connection's client encoding (utf-8)
    cannot hold", which did not say which."""
    parser: argparse.ArgumentParser | None = getattr(args, "command_parser", None)
    names: dict[str, str] = {}
    for action in parser._actions if parser is not None else ():
        longest = max(action.option_strings, key=len, default=None)
        names[action.dest] = longest or str(action.metavar or action.dest.upper())
    for dest, value in vars(args).items():
        if dest in ("bench_args", "command_prog", "command_parser", "run"):
            continue
        if dest == "target" and isinstance(value, list):  # worker [DSN] QUEUE MODULE:FUNCTION
            labels = ["DSN", "QUEUE", "MODULE:FUNCTION"][-len(value):] if len(value) <= 3 else []
            items = list(zip(labels, value))
        elif isinstance(value, str):
            items = [(names.get(dest, dest), value)]
        else:
            continue
        for name, text in items:
            where = _not_utf8(text)
            if where is None:
                continue
            if dest == "payload":
                raise UserError(_NOT_UTF8.format(where=where))
            if dest == "dsn" or name == "DSN":
                raise UserError(f"invalid connection string: {name} is not valid UTF-8 text ({where})")
            if dest == "token":
                name = f"{name} (or $PGQUEUE_DASHBOARD_TOKEN)"
            raise UserError(f"{name} is not valid UTF-8 text ({where})")


def describe_error(exc: BaseException) -> str | None:
    """Return the one-line report of a user-facing error, or None for an unexpected one."""
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, QueueNotFound):
        return f"{exc.message} (create it with `pgqueue queue create NAME`; list queues with `pgqueue queue list`)"
    if isinstance(exc, ExtensionNotInstalled):
        cause = exc.__cause__
        if exc.sqlstate not in (None, "3F000") and isinstance(cause, psycopg.Error):
            # the schema is there, a function or table is not: not installed, or an older release
            return (f"this database's pgqueue has no such function or table ({_one_line(cause.diag.message_primary or '')}): "
                    "run `pgqueue install`, which installs or upgrades it")
        return ("pgqueue is not installed in this database: run `pgqueue install` (the extension when the "
                "server has its files from `make install` in the pgqueue repository, else the plain SQL install)")
    if isinstance(exc, ConnectionFailed):
        return f"database connection failed: {_one_line(exc.message)}"
    if isinstance(exc, PgQueueError):  # (VersionMismatch says its hint in its message already)
        hint = f" ({_one_line(_cli_hint(exc.hint))})" if exc.hint and exc.hint not in exc.message else ""
        return f"{_one_line(exc.message)}{hint}"
    if isinstance(exc, psycopg.OperationalError) and (exc.sqlstate or "08").startswith("08"):
        # (psycopg files a cancel, a lock timeout, a deadlock, a serialization failure under
        # OperationalError too: those are the server's answers to a statement, worded below)
        return f"cannot connect to the database: {_one_line(str(exc))}"
    if isinstance(exc, psycopg.ProgrammingError) and exc.sqlstate is None:
        return f"invalid connection string: {conninfo_error(exc)}"
    if isinstance(exc, psycopg.Error):
        diag = exc.diag
        text = diag.message_primary or str(exc)
        hint = f" ({_one_line(_cli_hint(diag.message_hint))})" if diag.message_hint else ""
        return f"{_one_line(text)}{hint}"
    return None


def _cli_hint(hint: str) -> str:
    """The server's hint, or the command line's way of doing what it says where it names SQL
    parameters (the commands that catch an error themselves, such as `queue create` of an
    existing queue, word their own)."""
    if "p_group_concurrency" in hint:  # queue_alter, or a --group on a queue without groups
        return "message groups are chosen when a queue is created: `pgqueue queue create NAME --group-concurrency N`"
    if "raise max_size with pgqueue.queue_alter()" in hint:  # PQ003, a full queue
        return "back off and retry later, or raise its cap with `pgqueue queue alter NAME --max-size N`"
    if "pgqueue.schedule_drop()" in hint:  # schedule create of a name in use
        return "drop it first with `pgqueue schedule drop NAME`, or choose another name"
    if hint.startswith("Pass NULL for none"):  # an empty or over-long --group or --key
        return "omit --group / --key for none; hash a longer key"
    return hint


def _one_line(text: str) -> str:
    """Return text on one line: lines joined with "; ", runs of blanks made one space, and
    psycopg's "connection is bad: " or "connection failed: " dropped before libpq's own
    "connection to server ... failed" (they say nothing more; before an option value libpq
    refused, "connection is bad: " is kept)."""
    text = one_line(text)
    for prefix in _REDUNDANT:
        if text.startswith(prefix + "connection to server"):
            return text.removeprefix(prefix)
    return text


_REDUNDANT = ("connection is bad: ", "connection failed: ")


def _error(message: str, *, prefix: bool = True) -> None:
    print(f"{PROG}: error: {message}" if prefix else message, file=sys.stderr)


def _stopped(line: str) -> None:
    """A serving command's last line, on stderr, best effort: stopped by a closed terminal
    (SIGHUP), stderr is that terminal and the write fails (EIO); the command stopped as asked,
    so it still exits 0 (stderr then goes to /dev/null, so that the exit-time flush cannot fail
    again)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stderr.fileno())


# ---------------------------------------------------------------------------------------
# The parser
# ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``pgqueue`` command."""
    # --dsn is accepted before and after the command name: `pgqueue --dsn X stats`, `pgqueue stats --dsn X`
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", default=argparse.SUPPRESS, metavar="DSN",
                        help=f"the database, as a libpq connection string or URI (default: ${DSN_ENV}, "
                             "else libpq's PG* variables and service file)")

    parser = _Parser(prog=PROG, parents=[common], description=(
        "pgqueue: a message queue inside PostgreSQL. Start with `pgqueue demo`."))
    parser.add_argument("--version", action="store_true",
                        help="print the client's version and, if a database is reachable (--dsn, "
                             f"${DSN_ENV} or the libpq PG* environment), the database's, then exit")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, run: Callable[[argparse.Namespace], int] | None, help: str,
                parent: Any = commands, options: argparse.ArgumentParser = common) -> argparse.ArgumentParser:
        """Add a command; one without ``run`` is a group whose actions are its subcommands."""
        p: argparse.ArgumentParser = parent.add_parser(name, parents=[options], help=help, description=help)
        p.set_defaults(run=run or _usage_of(p), command_prog=p.prog, command_parser=p)
        return p

    # bench
    p = command("bench", _cmd_bench, "run the benchmark suite (bench/ in a clone of the repository) "
                "and write its report (bench/results/benchmarks-<UTC time>.md, or --out FILE); options go to "
                "`python -m bench` (try --smoke, --help)")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, metavar="...",
                   help="options of the benchmark suite, e.g. --smoke or --profile quick")

    # demo (its --dsn has no libpq fallback: without one it runs on a throwaway server)
    demo_options = argparse.ArgumentParser(add_help=False)
    demo_options.add_argument("--dsn", default=argparse.SUPPRESS, metavar="DSN",
                              help=f"the database, as a libpq connection string or URI (default: ${DSN_ENV}, "
                                   "else a throwaway server; libpq's PG* variables are not used)")
    p = command("demo", _cmd_demo, "run producers and workers on a realistic mix of messages and "
                "report (on a throwaway server unless --dsn or $PGQUEUE_DSN is given)", options=demo_options)
    from pgqueue.demo import add_arguments as add_demo_arguments

    add_demo_arguments(p)

    # install, uninstall
    p = command("install", _cmd_install, "install pgqueue in the database, or upgrade it to this client's "
                "version: the extension if the server has its files, else the plain SQL this package ships")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--plain", dest="mode", action="store_const", const="plain",
                     help="the plain SQL install (no extension files needed on the server; upgrades apply the "
                          "missing steps)")
    how.add_argument("--extension", dest="mode", action="store_const", const="extension",
                     help="CREATE EXTENSION pgqueue (needs `make install` on the server)")
    p = command("uninstall", _cmd_uninstall, "remove pgqueue from the database, with every queue and message")
    p.add_argument("--yes", action="store_true", help="really remove it (required)")

    # enqueue
    p = command("enqueue", _cmd_enqueue, "put a message on a queue and print its id")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("payload", metavar="PAYLOAD", help="the message, as text ('-' reads standard input, as it is: a final newline is kept)")
    p.add_argument("--json", action="store_true", help="PAYLOAD is JSON: send the value it encodes, as the Python client sends it "
                   "(a JSON string as text, anything else as application/json)")
    when = p.add_mutually_exclusive_group()  # one sort key: a message is scheduled or prioritised, not both
    when.add_argument("--delay", type=_seconds, metavar="S", help="deliver it after S seconds")
    when.add_argument("--at", type=_time, metavar="TIME",
                      help="deliver it at TIME, ISO 8601 such as 2030-01-31T09:30:00Z (UTC unless it gives "
                           "an offset such as +02:00); a past TIME: at once, ahead of messages due later")
    when.add_argument("--priority", type=_priority, metavar="N",
                      help=f"deliver it before every normal message (larger N first, 0 to {_INT_MAX})")
    p.add_argument("--task", metavar="NAME", help="the task of a pgqueue.Tasks registry that is to handle it")
    p.add_argument("--group", metavar="GROUP", help="its message group (a queue created with --group-concurrency)")
    p.add_argument("--key", metavar="KEY",
                   help="an idempotency key: while a message with it is live, print that one's id, insert nothing")

    # dequeue
    p = command("dequeue", _cmd_dequeue, "receive messages and print them as JSON lines")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--limit", type=_batch, default=1, metavar="N", help="at most N messages, up to 10000 (default 1)")
    p.add_argument("--lock-ms", type=_lease_or_zero, metavar="MS",
                   help="lease length, up to a year (default: the queue's lock_ms); 0 deletes them on receipt")
    p.add_argument("--complete", action="store_true",
                   help="complete (delete) each once it is printed; one whose lease ran out first (a slow "
                        "reader) is named on stderr, exit 1. If the output closes early (| head), the "
                        "messages not printed are given back, not completed")

    # peek, cancel
    p = command("peek", _cmd_peek, "print a queue's next messages as JSON lines, without taking them")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--limit", type=_batch, default=10, metavar="N", help="at most N messages, up to 10000 (default 10)")
    p = command("cancel", _cmd_cancel, "delete pending messages by id and print them as JSON lines")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("ids", type=_id, nargs="+", metavar="ID", help="message ids")

    # stats
    p = command("stats", _cmd_stats, "show message counts per queue")
    p.add_argument("queue", metavar="QUEUE", nargs="?", help="one queue (default: all)")
    p.add_argument("--watch", type=_interval, metavar="S", help="refresh every S seconds (0.1 or more) until Ctrl-C")
    p.add_argument("--json", action="store_true",
                   help="print a JSON array, one object per queue with its counts and counters (with "
                        "--watch: one array per line)")
    p.add_argument("--groups", type=_batch, metavar="N",
                   help="with QUEUE: its N message groups (up to 10000) with the most messages waiting (a "
                        "queue created with --group-concurrency)")

    # metrics
    p = command("metrics", _cmd_metrics, "serve Prometheus metrics of every queue (counts by state, oldest "
                "ready age, counters) until SIGINT/SIGTERM/SIGHUP")
    p.add_argument("--host", default="127.0.0.1", type=_address, metavar="ADDR",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=9469, metavar="N",
                   help="port to listen on (default 9469; 0 picks a free one)")
    p.add_argument("--min-interval", type=_min_interval, default=1.0, metavar="S",
                   help="scrapes closer together than S seconds get the previous reading (default 1, "
                        "at most 3600)")
    p.add_argument("--timeout", type=_statement_timeout, default=5.0, metavar="S",
                   help="a reading that takes longer than S seconds (a lock on the table, a database that does "
                        "not answer: its connection is cut 1 s later) is given up: pgqueue_up 0 (default 5, up "
                        "to 2147483.647; keep it a second below the scraper's timeout)")
    p.add_argument("--once", action="store_true", help="print the metrics once to stdout and exit")

    # dashboard
    p = command("dashboard", _cmd_dashboard, "serve a web dashboard of the queues (counts, charts, messages, "
                "leases, dead letters) until SIGINT/SIGTERM/SIGHUP; needs the dashboard extra")
    p.add_argument("--host", default="127.0.0.1", type=_address, metavar="ADDR",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8080, metavar="N",
                   help="port to listen on (default 8080; 0 picks a free one)")
    p.add_argument("--token", default=os.environ.get("PGQUEUE_DASHBOARD_TOKEN") or None, metavar="TOKEN",
                   help="require this access token (default: $PGQUEUE_DASHBOARD_TOKEN; none). The printed URL "
                        "carries it")
    p.add_argument("--read-only", action="store_true",
                   help="never change anything (no requeue or purge), whatever the role may do")
    p.add_argument("--sample-interval", type=_sample_interval, default=5.0, metavar="S",
                   help="seconds between the samples of the counts and charts (default 5, up to 86400: a day; "
                        "an hour is kept)")

    # dead
    p = command("dead", None, "list, requeue or purge dead letters")
    dead = p.add_subparsers(title="actions", metavar="ACTION", parser_class=_Parser)
    p = command("list", _cmd_dead_list, "list a queue's dead letters", dead)
    p.add_argument("queue", metavar="QUEUE")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--limit", type=_batch, default=100, metavar="N",
                       help="at most N, up to 10000 (default 100); a last line says when there are more")
    which.add_argument("--all", action="store_true",
                       help="every one, read in pages of 1000 (an index walk each: no matter how many)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per letter and line (payload, or payload_base64 if not JSON)")
    p = command("requeue", _cmd_dead_requeue, "put dead letters back on their queue", dead)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--id", type=_id, action="append", dest="ids", metavar="ID",
                   help="only this dead letter (repeat for more; default: all); an ID that is not one of "
                        "the queue's dead letters: exit 1, nothing requeued")
    when = p.add_mutually_exclusive_group()
    when.add_argument("--delay", type=_seconds, metavar="S",
                      help="due after S seconds (default: at once), e.g. while the fix that made them fail rolls out")
    when.add_argument("--at", type=_time, metavar="TIME",
                      help="due at TIME, ISO 8601 as for enqueue (UTC unless it gives an offset)")
    p = command("purge", _cmd_dead_purge, "delete dead letters", dead)
    p.add_argument("queue", metavar="QUEUE")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--id", type=_id, action="append", dest="ids", metavar="ID",
                       help="only this dead letter (repeat for more); an ID that is not one of the queue's "
                            "dead letters: exit 1, nothing purged")
    which.add_argument("--all", action="store_true", help="delete all of the queue's dead letters")

    # schedules
    p = command("schedule", None, "create, list, drop or run periodic messages (interval or cron, UTC)")
    sched = p.add_subparsers(title="actions", metavar="ACTION", parser_class=_Parser)
    p = command("create", _cmd_schedule_create, "create a periodic message", sched)
    p.add_argument("name", metavar="NAME")
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("payload", metavar="PAYLOAD", help="the message, as text ('-' reads standard input, as it is: a final newline is kept)")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--every", type=_every, metavar="S", help="every S seconds (1 to 3153600000: 100 years)")
    when.add_argument("--cron", metavar="EXPR", help="at each match of a five-field cron expression, UTC")
    p.add_argument("--json", action="store_true", help="PAYLOAD is JSON: send the value it encodes, as the Python client sends it "
                   "(a JSON string as text, anything else as application/json)")
    p.add_argument("--task", metavar="NAME", help="the task the messages name")
    p.add_argument("--missed", choices=["latest", "all"], default="latest",
                   help="after downtime, one message for all missed slots (latest, default) or one each (all)")
    command("list", _cmd_schedule_list, "list the schedules", sched)
    p = command("drop", _cmd_schedule_drop, "drop a schedule", sched)
    p.add_argument("name", metavar="NAME")
    command("run", _cmd_schedule_run, "enqueue the due slots once and print them", sched)
    p = command("scheduler", _cmd_scheduler, "enqueue the schedules' due slots every --interval seconds until "
                "SIGINT/SIGTERM/SIGHUP (several may run: each slot is enqueued once)")
    p.add_argument("--interval", type=_interval, default=1.0, metavar="S",
                   help="seconds between runs (default 1)")
    _startup_timeout_option(p)

    # queue management
    p = command("queue", None, "create, alter, drop or list queues")
    manage = p.add_subparsers(title="actions", metavar="ACTION", parser_class=_Parser)
    p = command("create", _cmd_queue_create, "create a queue", manage)
    p.add_argument("queue", metavar="QUEUE")
    _queue_options(p, create=True)
    p.add_argument("--if-not-exists", action="store_true", help="do nothing if it exists")
    p = command("alter", _cmd_queue_alter, "change a queue's settings", manage)
    p.add_argument("queue", metavar="QUEUE")
    _queue_options(p, create=False)
    p = command("drop", _cmd_queue_drop, "drop a queue with its messages, dead letters and schedules", manage)
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--if-exists", action="store_true", help="do nothing if it does not exist")
    command("list", _cmd_queue_list, "list queues and their settings", manage)

    # worker
    p = command("worker", _cmd_worker, "run a handler on a queue's messages until SIGINT/SIGTERM/SIGHUP")
    p.usage = "pgqueue worker [DSN] QUEUE MODULE:FUNCTION [options]"
    p.add_argument("target", nargs="+", metavar="[DSN] QUEUE MODULE:FUNCTION",
                   help="the database (default: --dsn or $PGQUEUE_DSN; not both), the queue, and the handler: "
                        "a function taking a pgqueue.Message, imported from MODULE (the current "
                        "directory is on the import path); an `async def` one runs on asyncio")
    p.add_argument("--concurrency", "-c", type=_batch, default=4, metavar="N",
                   help="handlers running at once, up to 10000 (default 4)")
    p.add_argument("--batch-size", type=_batch, metavar="N",
                   help="most messages fetched at once, up to 10000 (default: the free slots)")
    p.add_argument("--lock-ms", type=_lease, metavar="MS", help="lease length, up to a year (default: the queue's)")
    p.add_argument("--no-listen", dest="listen", action="store_false", help="poll only, no LISTEN")
    p.add_argument("--poll-max", type=_positive_float, default=5.0, metavar="S",
                   help="longest sleep between polls of an empty queue (default 5)")
    p.add_argument("--shutdown-grace", type=_non_negative_float, default=10.0, metavar="S",
                   help="seconds in-flight handlers get to finish on SIGTERM or SIGHUP (default 10)")
    p.add_argument("--timeout", type=_positive_float, metavar="S",
                   help="fail a message whose handler runs longer than S seconds (default: no limit)")
    p.add_argument("--metrics-port", type=_port, metavar="N",
                   help="serve the worker's Prometheus metrics (handled, failed, handler durations, in "
                        "flight) on this port (0 picks a free one; default: none)")
    p.add_argument("--metrics-host", default="127.0.0.1", type=_address, metavar="ADDR",
                   help="address of the worker's metrics (default 127.0.0.1)")
    _startup_timeout_option(p)
    # one or the other: both were taken, --verbose winning without a word (a review)
    loud = p.add_mutually_exclusive_group()
    loud.add_argument("--verbose", "-v", action="store_true", help="log every message and tracebacks")
    loud.add_argument("--quiet", "-q", action="store_true", help="log warnings only")
    return parser


#: `worker` and `scheduler`: the default --startup-timeout, in seconds (the library's default is
#: None, wait until stopped): a misconfigured deployment ends, exit 1, rather than waiting for good.
STARTUP_TIMEOUT = 300.0


def _startup_timeout_option(p: argparse.ArgumentParser) -> None:
    """`worker` and `scheduler`: how long to wait at start for a database not reachable yet."""
    p.add_argument("--startup-timeout", type=_number(float, lambda v: 0 <= v <= 1e9, "seconds >= 0, up to 1e9"),
                   default=STARTUP_TIMEOUT, metavar="S",
                   help="seconds to wait at start for a database that cannot be reached yet or is read-only, "
                   f"retrying with a backoff up to 30 s and warning again every minute (default {STARTUP_TIMEOUT:g}; "
                   "0: one attempt, no wait), then exit 1. A refused login, a missing database or pgqueue, "
                   "a bad connection option end the start at once")


def _queue_options(p: argparse.ArgumentParser, *, create: bool) -> None:
    def d(default: str) -> str:
        return f" (default {default})" if create else ""

    p.add_argument("--lock-ms", type=_lease, metavar="MS", help="lease length, up to a year" + d("30000"))
    p.add_argument("--max-attempts", type=_int_or_zero, metavar="N",
                   help="deliveries before a message is dead-lettered, 0 = unlimited" + d("unlimited"))
    p.add_argument("--retry-base-ms", type=_ms_or_zero, metavar="MS",
                   help="back-off after the first failure, doubling each time" + d("1000"))
    p.add_argument("--retry-cap-ms", type=_ms_or_zero, metavar="MS",
                   help="longest back-off, up to a year" + d("3600000"))
    p.add_argument("--max-size", type=_count_or_zero, metavar="N",
                   help="most live messages, 0 = unbounded" + d("unbounded"))
    if create:
        p.add_argument("--notify", action="store_true", help="NOTIFY listeners on enqueue (instant wake-ups)")
    else:
        p.add_argument("--notify", action=argparse.BooleanOptionalAction, default=None,
                       help="NOTIFY listeners on enqueue, or not")
    p.add_argument("--group-concurrency", type=_int_or_zero, metavar="N",
                   help=("message groups: at most N of a group in flight, 0 = no limit (chosen at creation; "
                         "default: no groups)" if create else
                         "at most N of a group in flight, 0 = no limit (a queue created with groups)"))
    p.add_argument("--key-window-ms", type=_ms_or_zero, metavar="MS",
                   help="how long an idempotency key stays taken after its message left, up to a year" + d("0"))
    p.add_argument("--rate-limit", type=_rate, metavar="N",
                   help="most messages handed out a second (up to 1000000), all consumers together, 0 = none"
                        + d("none"))


#: What an integer or a number option takes: ASCII decimal digits, with a sign and, for a number,
#: a fraction and an exponent; blanks around them (int() and float() also read "1_0" as 10 and
#: other scripts' digits, "\u0665" as 5: a review).
_INTEGER = re.compile(r"[ \t\n\r\f\v]*[+-]?[0-9]+[ \t\n\r\f\v]*")
_DECIMAL = re.compile(r"[ \t\n\r\f\v]*[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[ \t\n\r\f\v]*")


def _number(kind: type[int] | type[float], test: Callable[[Any], bool], what: str) -> Callable[[str], Any]:
    syntax = _INTEGER if kind is int else _DECIMAL

    def parse(text: str) -> Any:
        try:
            value = kind(text) if syntax.fullmatch(text) else None
        except ValueError:  # an integer of more digits than Python converts (4300)
            value = None
        if value is None or not test(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {quoted(text)}")
        return value

    parse.__name__ = what
    return parse


def _int_range(low: int, high: int, what: str | None = None) -> Callable[[str], Any]:
    """Return the argument type of an integer from ``low`` to ``high``, as the server takes it."""
    return _number(int, lambda v: low <= v <= high, what or f"an integer from {low} to {high}")


def _time(text: str) -> datetime:
    """Parse an ISO 8601 time; without an offset it is UTC, as every time the command line prints."""
    what = "an ISO 8601 time from 1970 on, such as 2030-01-31T09:30:00Z or 2030-01-31 09:30+02:00"
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {quoted(text)}") from None
    value = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    try:
        # in UTC, as printed: 9999-12-31T23:59-12:00 is past the year 9999 there, and its print
        # raised OverflowError (a traceback) after `dead requeue --at` had requeued (a review)
        value.astimezone(timezone.utc)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"expected {what} up to 9999-12-31T23:59:59Z, got {quoted(text)}") from None
    if value < datetime(1970, 1, 1, tzinfo=timezone.utc):
        # a negative epoch is the priority range of the sort key: the message would jump every priority
        raise argparse.ArgumentTypeError(f"expected {what}, got {quoted(text)}")
    return value


# The server's ranges, checked here so that a value out of them is a usage error naming its option
# rather than the server's "integer out of range" (PostgreSQL integer and bigint, the extension's limits).
_INT_MAX = 2**31 - 1
_BIGINT_MAX = 2**63 - 1
_YEAR_MS = 31_536_000_000  # the longest lease, back-off and key window
_positive_int = _number(int, lambda v: v > 0, "a positive integer")


def _address(text: str) -> str:
    """An address to listen on: not empty (an empty one listened on every address, printed as
    nothing: pass 0.0.0.0 or :: for every address). An IPv6 address may be bracketed as in a URL
    (``[::1]``): the brackets are dropped (bind() refused them: "Name or service not known")."""
    if len(text) > 2 and text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected an address (0.0.0.0 or :: for every address), got {quoted(text)}")
    # a name the socket cannot encode (a label empty or over 63 characters, ASCII or not; bytes
    # that are not UTF-8) raised TypeError or UnicodeError out of bind(): a traceback (reviews)
    try:
        text.encode("idna")
    except UnicodeError:
        raise argparse.ArgumentTypeError(f"expected an address (a host name or an IP address), "
                                         f"got {quoted(text)}") from None
    return text
_id = _int_range(1, _BIGINT_MAX, f"an id (a positive integer up to {_BIGINT_MAX})")
_batch = _int_range(1, 10000)  # messages or groups one call returns
_count = _int_range(1, _BIGINT_MAX, f"a positive integer up to {_BIGINT_MAX}")
_count_or_zero = _int_range(0, _BIGINT_MAX, f"an integer from 0 to {_BIGINT_MAX}")
_int_or_zero = _int_range(0, _INT_MAX)
_priority = _int_range(0, _INT_MAX)
_lease = _int_range(1, _YEAR_MS, f"milliseconds from 1 to {_YEAR_MS} (a year)")
_lease_or_zero = _int_range(0, _YEAR_MS, f"milliseconds from 0 to {_YEAR_MS} (a year)")
_ms_or_zero = _lease_or_zero
_rate = _int_range(0, 1_000_000)
_every = _number(float, lambda v: 1 <= v <= 3_153_600_000, "seconds from 1 to 3153600000 (100 years)")
_positive_float = _number(float, lambda v: v > 0 and v < float("inf"), "a positive number")
_non_negative_float = _number(float, lambda v: 0 <= v < float("inf"), "a number >= 0")
_seconds = _number(float, lambda v: 0 <= v < 1e9, "seconds >= 0, below 1e9 (31 years)")
_port = _number(int, lambda v: 0 <= v <= 65535, "a port number 0-65535")
# metrics --timeout becomes the server's statement_timeout, an integer of milliseconds (the first
# bound before the product: 1e306 * 1000 is inf, whose ceil raised OverflowError, a traceback)
_statement_timeout = _number(float, lambda v: 0 < v <= _INT_MAX and math.ceil(v * 1000) <= _INT_MAX,
                             f"seconds > 0, up to {_INT_MAX / 1000} (the server's statement_timeout limit)")
_MAX_MIN_INTERVAL = 3600.0  # metrics.MAX_MIN_INTERVAL (that module loads when metrics runs)
_min_interval = _number(float, lambda v: 0 <= v <= _MAX_MIN_INTERVAL,
                        f"seconds from 0 to {_MAX_MIN_INTERVAL:g} (an hour)")
_DAY_S = 86400  # the longest dashboard --sample-interval (the page refreshes as often: a browser timer)
# at least 0.1 s (the dashboard's sampler.MIN_INTERVAL): 1e-20 overflowed the history's length (a
# traceback), 0.0001 sampled without a pause (a review)
_sample_interval = _number(float, lambda v: 0.1 <= v <= _DAY_S, f"seconds from 0.1 up to {_DAY_S} (a day)")
_interval = _number(float, lambda v: 0.1 <= v < 1e9, "seconds >= 0.1, below 1e9 (31 years)")


# ---------------------------------------------------------------------------------------
# Connections
# ---------------------------------------------------------------------------------------


def resolve_dsn(args: argparse.Namespace) -> str:
    """Return the connection string from --dsn or $PGQUEUE_DSN, or "" for libpq's own defaults.

    With "" libpq takes everything from its environment (``PGHOST``, ``PGPORT``, ``PGUSER``,
    ``PGDATABASE``, ``PGPASSWORD``, ``PGSERVICE`` and the service file, ``~/.pgpass``) and its
    built-in defaults (the local socket, the user's name), as psql does.
    """
    dsn: str = getattr(args, "dsn", None) or os.environ.get(DSN_ENV) or ""
    where = _not_utf8(dsn)
    if where is not None:  # (psycopg raised UnicodeEncodeError: a traceback)
        name = "--dsn" if getattr(args, "dsn", None) else f"${DSN_ENV}"
        raise UserError(f"invalid connection string: {name} is not valid UTF-8 text ({where})")
    return dsn


#: Said after a connection failure when no DSN was given.
NO_DSN_HINT = (f"no --dsn or ${DSN_ENV} given, so libpq's defaults were used (PGHOST, PGPORT, "
               "PGDATABASE, PGUSER, PGSERVICE...); pass --dsn DSN or set one of them")


def connect_timeout_kwargs(dsn: str, default: int) -> dict[str, Any]:
    """``connect_timeout=default`` unless the DSN or $PGCONNECT_TIMEOUT sets one (a keyword
    argument would override both)."""
    if os.environ.get("PGCONNECT_TIMEOUT"):
        return {}
    try:
        given = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:  # (the connection attempt reports it)
        given = {}
    return {} if "connect_timeout" in given else {"connect_timeout": default}


@contextmanager
def connect(dsn: str, *, check: bool = True, connect_timeout: int = 10) -> Iterator[psycopg.Connection[Any]]:
    """Open an autocommit connection, reporting a bad DSN or an unreachable server clearly.

    With ``check`` (the default) the database's pgqueue must match this client's version
    (:func:`pgqueue.check_server`); ``pgqueue install`` connects without the check.
    """
    hint = "" if dsn else f" ({NO_DSN_HINT})"
    try:
        conn = _connect.connect(dsn, autocommit=True, **connect_timeout_kwargs(dsn, connect_timeout))
    except psycopg.ProgrammingError as exc:
        raise UserError(f"invalid connection string: {conninfo_error(exc, dsn)}{hint}") from exc
    except psycopg.OperationalError as exc:
        raise UserError(f"cannot connect to the database: {_one_line(str(exc))}{hint}") from exc
    with conn:
        if check:
            check_server(conn)
        yield conn


def _print_version(args: argparse.Namespace, out: TextIO) -> int:
    """Print the client's version, then the database's when one is reachable; return 0."""
    print(f"{PROG} {__version__} ({DISTRIBUTION})", file=out)
    dsn: str = getattr(args, "dsn", None) or os.environ.get(DSN_ENV) or ""  # "": libpq's PG* defaults
    where = ""
    try:
        resolve_dsn(args)
    except UserError as exc:  # (not UTF-8)
        print(f"database: not connected ({exc})", file=out)
        return 0
    try:
        with _connect.connect(dsn, autocommit=True, **connect_timeout_kwargs(dsn, 3)) as conn:
            where = f"database {conn.info.dbname} on {conn.info.host}:{conn.info.port}"
            installed = server_pgqueue(conn)
    except psycopg.ProgrammingError as exc:
        print(f"database: not connected (invalid connection string: {conninfo_error(exc, dsn)})", file=out)
        return 0
    except (psycopg.Error, PgQueueError) as exc:
        reason = _one_line(str(exc)) or type(exc).__name__
        if where:  # connected: the version could not be read (e.g. a role without the grants)
            print(f"database: connected to {where}, pgqueue's version not readable ({reason})", file=out)
        else:
            print(f"database: not connected ({reason})", file=out)
        return 0
    if installed is None:
        print(f"database: pgqueue not installed in {where}", file=out)
        return 0
    print(f"database: pgqueue {installed.version} ({installed.kind}) in {where}", file=out)
    mismatch = version_mismatch(installed)
    if mismatch is not None:
        print(f"database: {mismatch.message}", file=out)
    return 0


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]],
                 min_widths: Sequence[int] | None = None) -> str:
    """Return rows as an aligned text table: numbers right-aligned, text left-aligned; each
    column at least as wide as ``min_widths`` says, if given."""
    cells = [[_cell(v) for v in row] for row in rows]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) and bool(rows)
               for i in range(len(headers))]
    widths = [max([len(h), min_widths[i] if min_widths else 0] + [len(r[i]) for r in cells])
              for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)]
        return "  ".join(parts).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):  # every time in UTC, and said so (cron schedules are UTC)
        return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return printable(str(value))


def format_seconds(seconds: float) -> str:
    """Return seconds as plain decimal text to the millisecond (``2.5``, ``1000000``): ``:g``
    printed ``1e+06`` for a --delay or --watch of 1,000,000 s (a review)."""
    return f"{seconds:.3f}".rstrip("0").rstrip(".")


def format_interval(ms: int | None) -> str:
    """Return an interval in milliseconds exactly, in its largest units (``1 min 1 s``, ``1 d``,
    ``1 min 29.999 s``): a schedule's interval, which :func:`format_ms` rounded (61 s and
    60 s were both ``1.0 min``, 86401 s ``1.0 d``: a review)."""
    if ms is None:
        return "-"
    parts = []
    seconds, rest = divmod(ms, 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        n, seconds = divmod(seconds, size)
        if n:
            parts.append(f"{n} {unit}")
    if seconds or rest:
        parts.append(f"{format_seconds(seconds + rest / 1000)} s")
    return " ".join(parts) or "0 s"


def format_ms(ms: int | None) -> str:
    """Return a duration in milliseconds as a short readable text (``850 ms``, ``2.5 s``, ``3 h``)."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    if s < 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _payload_json(payload: object, content: bytes) -> dict[str, object]:
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return {"payload_base64": base64.b64encode(bytes(payload)).decode("ascii")}
    try:
        json.dumps(payload, allow_nan=False)  # NaN, Infinity (from another client): not JSON
    except (TypeError, ValueError, RecursionError):
        return {"payload_base64": base64.b64encode(content).decode("ascii")}
    return {"payload": payload}


def _preview(payload: object, width: int = 40) -> str:
    if isinstance(payload, (bytes, bytearray, memoryview)):
        text = f"<{len(payload)} bytes>"
    elif isinstance(payload, str):
        text = payload
    else:
        try:
            text = json.dumps(payload, separators=(",", ":"))
        except (TypeError, ValueError):
            text = repr(payload)
    text = _one_line(text)
    return text if len(text) <= width else text[: width - 3] + "..."


def stats_table(stats: Sequence[QueueStats]) -> str:
    """Return queue statistics as an aligned table."""
    rows = [(s.queue, s.ready, s.scheduled, s.leased, s.dead, format_ms(s.oldest_ready_age_ms))
            for s in stats]
    return format_table(["queue", "ready", "scheduled", "leased", "dead", "oldest ready"], rows)


def settings_table(queues: Sequence[QueueSettings]) -> str:
    """Return queue settings as an aligned table."""
    rows = [(q.queue, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms, q.max_size,
             q.notify, q.group_concurrency, q.key_window_ms, q.rate_limit, q.created_at) for q in queues]
    return format_table(["queue", "lock_ms", "max_attempts", "retry_base_ms", "retry_cap_ms",
                         "max_size", "notify", "groups", "key_window_ms", "rate_limit", "created"], rows)


_DEAD_HEADERS = ("id", "attempts", "dead since", "last error", "payload")


def _dead_rows(letters: Sequence[DeadLetter]) -> list[tuple[object, ...]]:
    return [(d.id, d.attempts, d.dead_at, _preview(d.last_error or "", 50), _preview(d.payload)) for d in letters]


def dead_table(letters: Sequence[DeadLetter]) -> str:
    """Return dead letters as an aligned table."""
    return format_table(_DEAD_HEADERS, _dead_rows(letters))


def _dead_lines(letters: Sequence[DeadLetter],
                widths: Sequence[int] | None) -> tuple[list[str], list[str], list[int]]:
    """One page of ``dead list --all``'s table: its header lines, its rows, and the widths used
    (at least ``widths``, the pages' before, so that the columns stay put from page to page)."""
    lines = format_table(_DEAD_HEADERS, _dead_rows(letters), widths).split("\n")
    return lines[:2], lines[2:], [len(c) for c in lines[1].split("  ")]


# ---------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------


def _usage_of(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """Return a command that reports a missing action of a command group."""

    def run(args: argparse.Namespace) -> int:
        raise UsageError(f"{parser.prog}: error: give an action (see `{parser.prog} --help`)")

    return run


def _bench_argv(argv: list[str]) -> list[str] | None:
    """The benchmark suite's arguments when ``argv`` runs `bench`, else None: what follows it,
    and a --dsn given before it, which is the suite's own (`pgqueue --dsn X bench --smoke` was
    refused, and X dropped where it parsed: a review)."""
    if argv[:1] == ["bench"]:
        return argv[1:]
    if len(argv) >= 3 and argv[0] == "--dsn" and argv[2] == "bench":
        dsn, rest = argv[1], argv[3:]
    elif len(argv) >= 2 and argv[0].startswith("--dsn=") and argv[1] == "bench":
        dsn, rest = argv[0][len("--dsn="):], argv[2:]
    else:
        return None
    return rest if any(a == "--dsn" or a.startswith("--dsn=") for a in rest) else ["--dsn", dsn, *rest]


def _cmd_bench(args: argparse.Namespace) -> int:
    return _run_bench(list(args.bench_args))  # (a --dsn before `bench`: _bench_argv, in main)


#: The suite's options that name a file: relative to the directory `pgqueue bench` runs in.
_BENCH_PATH_OPTIONS = ("--out", "--json", "--render", "--held-twin-sql", "--pgqueuer-tool", "--pgqueuer-python")


def _absolute_bench_paths(bench_args: list[str]) -> list[str]:
    """Return ``bench_args`` with the files its options name made absolute (the suite runs from
    the repository; a `--pgqueuer-python` given as a bare command name stays one)."""
    out: list[str] = []
    pending: str | None = None
    for arg in bench_args:
        if pending is not None:
            keep_bare = pending == "--pgqueuer-python" and os.sep not in arg
            out.append(arg if keep_bare or not arg else os.path.abspath(arg))
            pending = None
            continue
        name, eq, value = arg.partition("=")
        if name in _BENCH_PATH_OPTIONS and eq:
            keep_bare = name == "--pgqueuer-python" and os.sep not in value
            out.append(arg if keep_bare or not value else f"{name}={os.path.abspath(value)}")
        else:
            out.append(arg)
            if arg in _BENCH_PATH_OPTIONS:
                pending = arg
    return out


def _run_bench(bench_args: list[str]) -> int:
    """Run the repository's benchmark suite, which lives beside python/ rather than in the package.

    It is found beside an editable install of the package, or in the current directory.
    """
    for repo in (Path(__file__).resolve().parents[2], Path.cwd()):
        if (repo / "bench" / "cli.py").is_file():
            break
    else:
        raise UserError("the benchmark suite is not part of the installed package: in a clone of the "
                        "pgqueue repository, run `python -m bench` (or `pgqueue bench` there)")
    bench_args = _absolute_bench_paths(bench_args)  # (given from the caller's directory, read from the repo's)
    os.chdir(repo)
    sys.path.insert(0, str(repo))
    bench_cli = importlib.import_module("bench.cli")
    return int(bench_cli.main(bench_args, prog="pgqueue bench"))  # (its usage and errors name this command)


def _cmd_demo(args: argparse.Namespace) -> int:
    from pgqueue.demo import run_from_args

    if getattr(args, "dsn", None) or os.environ.get(DSN_ENV):
        resolve_dsn(args)  # one that is not UTF-8: one line, not a traceback

    return run_from_args(args)


class _Report:
    """The installer's ``report``: prints each line as it comes, and keeps the first failure to
    write one (a full disk, a closed pipe) for after the work. Raised from the installer, it
    stopped an upgrade between two of its steps, each committed on its own (unbuffered output,
    PYTHONUNBUFFERED=1 as in many container images: `> /dev/full` left 0.1 at 0.2, exit 1 with
    nothing said of it), and an install or uninstall that had committed said nothing of it."""

    def __init__(self) -> None:
        self.failed: OSError | None = None

    def __call__(self, line: str) -> None:
        if self.failed is not None:
            return
        try:
            print(line)
        except OSError as exc:
            self.failed = exc

    def done(self, summary: str) -> None:
        """Record what was done (:func:`_done`), then raise the write that failed, if any."""
        _done(summary)
        if self.failed is not None:
            raise self.failed


def _warn_notice(diag: psycopg.errors.Diagnostic) -> None:
    """Print a WARNING the server sent (a notice of that severity or above) on stderr."""
    if diag.severity_nonlocalized == "WARNING" and diag.message_primary:
        try:
            print(f"{PROG}: warning: {_one_line(diag.message_primary)}", file=sys.stderr, flush=True)
        except OSError:  # (stderr closed: the install goes on)
            pass


def _cmd_install(args: argparse.Namespace) -> int:
    from pgqueue import installer

    report = _Report()
    with connect(resolve_dsn(args), check=False) as conn:
        # the scripts' warnings (docs/security.md: CREATE on the new schema that default
        # privileges granted, revoked) were lost: the connection showed no notice (a review)
        conn.add_notice_handler(_warn_notice)
        try:
            report.done(installer.install(conn, args.mode, report=report))
        except installer.InstallError as exc:
            raise UserError(str(exc)) from exc
        except psycopg.errors.InsufficientPrivilege as exc:
            raise UserError(f"{_one_line(exc.diag.message_primary or str(exc))}: connect as the role that is to "
                            "own pgqueue, with CREATE on the database (its owner, say), to install it") from exc
    return 0


def _cmd_uninstall(args: argparse.Namespace) -> int:
    from pgqueue import installer

    if not args.yes:
        raise UserError("`pgqueue uninstall` drops pgqueue with every queue and message in the database: "
                        "add --yes to do it")
    report = _Report()
    with connect(resolve_dsn(args), check=False) as conn:
        try:
            report.done(installer.uninstall(conn, report=report))
        except installer.InstallError as exc:
            raise UserError(str(exc)) from exc
    return 0


#: How a PAYLOAD that is not UTF-8 text is refused, from the command line or standard input.
_NOT_UTF8 = "PAYLOAD is not valid UTF-8 text ({where}); send bytes from a program through the client instead"


def _read_stdin() -> str:
    """Read standard input (``enqueue QUEUE -``, ``schedule create NAME QUEUE -``) as UTF-8
    text, whatever the locale's encoding.

    The bytes are read and decoded here, strictly, so that bytes that are not UTF-8 are the
    same one-line error whether the locale's decoding is strict (``PYTHONIOENCODING=utf-8``,
    ``en_US.UTF-8``) or escapes them (C.UTF-8), where it raised a UnicodeDecodeError traceback.
    """
    stream = sys.stdin
    if stream is None:  # started with standard input closed
        raise UserError("PAYLOAD is '-' but there is no standard input to read it from")
    binary = getattr(stream, "buffer", None)  # None: a text-only stream put in its place
    try:
        if binary is None:
            return stream.read()
        data: bytes = binary.read()
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(_NOT_UTF8.format(where=f"at byte {exc.start} of standard input")) from exc
    except OSError as exc:  # opened write-only (`0>file`), a terminal gone (EIO): it was a traceback
        raise UserError(f"PAYLOAD is '-' but standard input cannot be read: {exc.strerror or exc}") from exc


def _payload(args: argparse.Namespace) -> object:
    """Return what PAYLOAD sends (``enqueue``, ``schedule create``): its text, or what its JSON
    encodes with --json; ``-`` reads it from standard input. Refused in one line (UserError):
    text that is not UTF-8, standard input that cannot be read, JSON that is not valid."""
    text: str = _read_stdin() if args.payload == "-" else args.payload
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes the locale could not decode, or a lone surrogate
        raise UserError(_NOT_UTF8.format(where=f"at character {exc.start}")) from exc
    return _json_payload(text) if args.json else text


def _json_payload(text: str) -> object:
    """Return the value that PAYLOAD's JSON encodes, or refuse it in one line (UserError).

    One leading byte order mark is ignored, as RFC 8259 lets a parser do (a file saved by a
    Windows editor): Python's json refused it, saying "decode using utf-8-sig". A text payload
    keeps it, as given."""
    try:
        payload = json.loads(text.removeprefix("\ufeff"), parse_constant=_not_json)  # NaN, Infinity: not JSON (RFC 8259)
        json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except RecursionError as exc:  # as the client refuses such a payload (UnsupportedPayload)
        raise UserError("PAYLOAD is JSON nested deeper than Python's recursion limit: the client cannot "
                        "send it") from exc
    except ValueError as exc:  # (UnicodeEncodeError is a ValueError: a "\ud800" escape)
        if str(exc).startswith("Out of range float"):  # 1e400: JSON, which Python reads as an infinity
            raise UserError("PAYLOAD holds a number beyond a double's range (about 1.8e308): the client "
                            "cannot send it") from exc
        if str(exc).startswith("Exceeds the limit"):  # valid JSON: it was called invalid, pointing at Python
            raise UserError(f"PAYLOAD holds an integer of more than {sys.get_int_max_str_digits()} digits: "
                            "the client cannot read it (send it as a string)") from exc
        if str(exc).startswith("Unexpected UTF-8 BOM"):  # a second one: not "decode using utf-8-sig"
            raise UserError("PAYLOAD is not valid JSON: a second byte order mark (U+FEFF) at character 1") from exc
        raise UserError(f"PAYLOAD is not valid JSON: {exc}") from exc
    return payload


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not a JSON value")


def _check_task(args: argparse.Namespace) -> None:
    """Refuse a --task that is not a task name before connecting: bad usage, exit 2 (it was the
    client's InvalidArgument, exit 1, though nothing had been done: a review)."""
    try:
        with_task(None, args.task)  # (the client's own check)
    except InvalidArgument as exc:
        prog = getattr(args, "command_prog", PROG)
        raise UsageError(f"{prog}: error: argument --task: {exc} (see `{prog} --help`)") from None


def _check_group_and_key(args: argparse.Namespace) -> None:
    """Refuse a --group or --key that is empty or longer than 200 characters (the server's
    rule, 22023) or holds NUL (the client's) before connecting: bad usage, exit 2, as a --task
    is (it was exit 1 once connected, though nothing had been done: a review)."""
    prog = getattr(args, "command_prog", PROG)
    for option, name, value, hint in (("--group", "message group", args.group, ""),
                                      ("--key", "idempotency key", args.key, "; hash a longer key")):
        if value is None:
            continue
        try:
            check_str(name, value)  # (the client's own check: no NUL)
        except InvalidArgument as exc:
            raise UsageError(f"{prog}: error: argument {option}: {exc} (see `{prog} --help`)") from None
        if not 1 <= len(value) <= 200:
            raise UsageError(f"{prog}: error: argument {option}: the {name} must have 1 to 200 characters, got "
                             f"{len(value)} (omit {option} for none{hint}) (see `{prog} --help`)")


def _cmd_enqueue(args: argparse.Namespace) -> int:
    _check_task(args)
    _check_group_and_key(args)
    _check_output("nothing enqueued")
    payload = _payload(args)
    delay = timedelta(seconds=args.delay) if args.delay else None
    with connect(resolve_dsn(args)) as conn:
        msg_id = Queue(conn, args.queue).enqueue(payload, delay=delay, at=args.at, priority=args.priority,
                                                 task=args.task, group=args.group, key=args.key)
    _done(f"message {msg_id} is on queue {args.queue}")
    print(msg_id)
    return 0


def _cmd_dequeue(args: argparse.Namespace) -> int:
    """Print the messages taken as JSON lines; with --complete, complete each once it is printed.

    A message is completed only after its line was written: one whose lease ran out first (a
    slow reader of the output) and was taken by another consumer is not, and is named on stderr
    with exit status 1. When the output closes early (``| head -1``) the messages not printed
    yet are given back (due at once, as a worker's shutdown gives them back) and the exit status
    is 1; with ``--lock-ms 0`` they were deleted on receipt (delete mode: at most once). Either
    way the error line says what was done all the same (:class:`_Taken`): a message deleted but
    not written is gone for good, and its id is named. Started with its output closed (``>&-``:
    no ``sys.stdout``, print() writes nowhere), it takes nothing and exits 1: it completed, or
    deleted, messages it had written nowhere (a review).
    """
    _check_output("nothing taken")
    with connect(resolve_dsn(args)) as conn:
        queue = Queue(conn, args.queue)
        taken = _Taken(args.queue)
        try:
            taken.messages = queue.dequeue(args.limit, lock_ms=args.lock_ms)
            taken.say()
            for i, msg in enumerate(taken.messages):
                try:
                    print(json.dumps(_message_json(msg)), flush=True)
                except OSError as exc:  # the reader has gone, or the output cannot take it (a full disk):
                    taken.given_back += _give_back(queue, taken.messages[i:])  # this one and the rest were not printed
                    taken.say()
                    if isinstance(exc, BrokenPipeError):
                        raise
                    raise _OutputFailed(str(exc)) from exc
                taken.written = i + 1
                taken.say()
                if args.complete and msg.leased:
                    (taken.completed if queue.complete(msg) else taken.lost).append(msg)
                    taken.say()
        except KeyboardInterrupt:
            # Ctrl-C, SIGTERM or SIGHUP while it prints (a slow reader) or completes: the messages
            # not printed, or printed but not completed, are given back as when the output closes;
            # they stayed leased until their lease ran out (a --lock-ms of up to a year: a review).
            # What was done all the same (completed, deleted) is said: it said "not done" (a review)
            handled = len(taken.completed) + len(taken.lost)
            taken.given_back += _give_back(queue, taken.messages[handled if args.complete else taken.written:])
            taken.say()
            raise
        messages, lost = taken.messages, taken.lost
        if not messages:
            print(f"no message ready on queue {args.queue}", file=sys.stderr)
        elif not args.complete and any(m.leased for m in messages):
            print(f"{len(messages)} message(s) leased, not completed: they return to the queue when "
                  "the lease runs out (use --complete or --lock-ms 0 to remove them)", file=sys.stderr)
    if lost:
        _error(f"{len(lost)} of {len(messages)} message(s) printed but not completed: lease lost (it ran out "
               f"and another consumer holds or has handled them): {' '.join(str(m.id) for m in lost)}")
        return 1
    return 0


class _Taken:
    """What a ``dequeue`` has done so far, kept as main's "done all the same" (:func:`_done`) at
    each step: its output closed or failed, or a signal stopped it, after it had deleted
    (``--lock-ms 0``) or completed messages, and it exited 1 (or 143) in silence, or saying
    "not done", with messages gone (a review). Nothing is done when every message taken was
    given back (or none was taken)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.messages: list[Message] = []
        self.written = 0  # lines written in full
        self.completed: list[Message] = []
        self.lost: list[Message] = []  # printed, but its complete came after its lease was lost
        self.given_back = 0

    def say(self) -> None:
        _DONE.set(self.what())

    def what(self) -> str | None:
        deleted = [m for m in self.messages if not m.leased]
        if deleted:  # delete mode: gone on receipt, written or not
            text = f"{len(deleted)} message(s) taken from queue {self.queue} and deleted (--lock-ms 0)"
            unwritten = [m for m in self.messages[self.written:] if not m.leased]
            if unwritten:
                text += (f"; {len(unwritten)} of them not written, lost for good: "
                         f"ids {' '.join(str(m.id) for m in unwritten)}")
            return text
        settled = {m.id for m in self.completed + self.lost}
        still_leased = len(self.messages) - len(settled) - self.given_back
        parts = [f"{n} {what}" for n, what in (
            (len(self.completed), "completed"),
            (still_leased, "leased, not completed (back on the queue when the lease runs out)"),
            (self.given_back, "given back, due at once")) if n]
        if self.lost:
            parts.append(f"{len(self.lost)} printed but not completed (lease lost): "
                         f"ids {' '.join(str(m.id) for m in self.lost)}")
        if not self.completed and not self.lost and still_leased <= 0:
            return None  # nothing taken, or all of it given back
        return f"{len(self.messages)} message(s) taken from queue {self.queue}: {', '.join(parts)}"


def _give_back(queue: Queue, messages: Sequence[Message]) -> int:
    """Give back the leased ones of ``messages`` (not taken in delete mode), due at once; return
    how many were."""
    given = 0
    for msg in messages:
        if msg.leased and queue.defer(msg):  # (False: its lease was lost already, nothing to give back)
            given += 1
    return given


def _message_json(msg: Message) -> dict[str, object]:
    record: dict[str, object] = {"id": msg.id, "queue": msg.queue, "attempts": msg.attempts,
                                 "content_type": msg.content_type}
    record.update(_payload_json(msg.payload, msg.content))
    record["created_at"] = msg.created_at.isoformat()
    if msg.locked_until is not None:
        record["locked_until"] = msg.locked_until.isoformat()
    return record


def _pending_json(msg: Pending) -> dict[str, object]:
    record: dict[str, object] = {"id": msg.id, "queue": msg.queue, "attempts": msg.attempts,
                                 "content_type": msg.content_type}
    record.update(_payload_json(msg.payload, msg.content))
    record["created_at"] = msg.created_at.isoformat()
    if msg.priority is not None:
        record["priority"] = msg.priority
    else:
        assert msg.dequeue_at is not None
        record["dequeue_at"] = msg.dequeue_at.isoformat()
    if msg.expired_at is not None:
        record["lease_expired_at"] = msg.expired_at.isoformat()
    if msg.last_error is not None:
        record["last_error"] = msg.last_error
    return record


def _cmd_peek(args: argparse.Namespace) -> int:
    _check_output()
    with connect(resolve_dsn(args)) as conn:
        messages = Queue(conn, args.queue).peek(args.limit)
    for msg in messages:
        print(json.dumps(_pending_json(msg)), flush=True)
    if not messages:
        print(f"no message waiting on queue {args.queue}", file=sys.stderr)
    return 0


def _cmd_cancel(args: argparse.Namespace) -> int:
    _check_output("nothing cancelled")
    with connect(resolve_dsn(args)) as conn:
        removed = Queue(conn, args.queue).cancel(args.ids)
    _done(f"{len(removed)} message(s) cancelled")
    for msg in removed:
        print(json.dumps(_pending_json(msg)), flush=True)
    kept = sorted(set(args.ids) - {m.id for m in removed})
    if kept:
        _error(f"cancelled {len(removed)} of {len(set(args.ids))} message(s) on queue {args.queue}; not "
               f"pending there (leased, done, or on another queue): {' '.join(map(str, kept))}")
        return 1
    print(f"cancelled {len(removed)} message(s) on queue {args.queue}", file=sys.stderr)
    return 0


def _cmd_stats(args: argparse.Namespace) -> int:
    # SIGTERM and SIGHUP end a --watch as Ctrl-C does (exit 0: _rounds), through main's
    # _stop_signals_interrupt, as they stop every one-shot command
    return _stats(args)


class _Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a one-shot command: it ends as Ctrl-C does (psycopg cancels the
    statement in flight; a transaction rolls back), with status 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def _stop_signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (`timeout 5 pgqueue enqueue ...`, a closed ssh session) end a one-shot
    command as Ctrl-C does (:class:`_Stopped`). Without this the process died at once and a
    statement it had sent, waiting for a lock, committed after it (an enqueue that the script
    then retried: twice on the queue; a review). A signal ignored when the command began stays
    ignored; on another thread (a caller of main) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    done = False

    def on_stop(signum: int, frame: object) -> None:
        if not done:  # once the command's work is over, a late signal changes nothing (a review)
            raise _Stopped(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP) if hasattr(signal, "SIGHUP") else (signal.SIGTERM,):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, on_stop)
    try:
        yield
        done = True
    finally:
        done = True
        # blocked while they go back, so that none lands between two of them (it would find
        # on_stop still in place, or the default action)
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, list(previous)) if previous else None
        try:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        finally:
            if blocked is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _stats(args: argparse.Namespace) -> int:
    if args.groups is not None:
        if args.queue is None:
            raise UsageError("pgqueue stats: error: --groups needs a QUEUE (see `pgqueue stats --help`)")
        _check_output()
        return _group_stats(args)
    _check_output()
    dsn = resolve_dsn(args)
    with connect(dsn) as conn:
        kept = _KeptConnection(dsn, conn)

        def collect() -> list[QueueStats]:
            # (an empty QUEUE is a name, which the server refuses, not "every queue")
            now = kept.get()
            return [Queue(now, args.queue).stats()] if args.queue is not None else list(all_stats(now))

        try:
            if args.json:
                return _stats_json(kept, collect, args.queue, args.watch, sys.stdout)
            if not args.watch:
                print(stats_table(collect()))
                return 0
            return _watch(lambda: stats_table(collect()), args.watch, sys.stdout, kept)
        finally:
            kept.close()


class _KeptConnection:
    """The connection of a ``--watch``: opened again, pgqueue's version checked, after a loss
    (a server restart, a failover), so that a watch outlives it (see :func:`_rounds`)."""

    def __init__(self, dsn: str, conn: psycopg.Connection[Any]) -> None:
        self._dsn = dsn
        self._conn = conn
        self._own: psycopg.Connection[Any] | None = None  # a connection opened here, closed here

    def get(self) -> psycopg.Connection[Any]:
        if self._own is not None and not self._own.closed:
            return self._own
        if self._own is None and not self._conn.closed:
            return self._conn
        self.close()
        conn = _connect.connect(self._dsn, autocommit=True, pooler_check=False, **connect_timeout_kwargs(self._dsn, 10))
        try:
            with self._cut(conn, time.monotonic() + WATCH_ROUND_LIMIT):
                _connect.fit_for_pooler(conn)  # (within the round's limit, as the check)
                check_server(conn)
        except BaseException:
            conn.close()
            raise
        self._own = conn
        return conn

    @contextmanager
    def bounded(self) -> Iterator[None]:
        """A watch's round: one the database does not answer within :data:`WATCH_ROUND_LIMIT`
        seconds (a network path that drops packets, a stalled proxy, a lock held on the table)
        has its connection cut, a lost connection that the watch reports and connects again
        for. The watch printed nothing meanwhile, until TCP gave up (a review)."""
        started = time.monotonic()
        conn = self.get()
        with self._cut(conn, started + WATCH_ROUND_LIMIT):
            yield

    @staticmethod
    @contextmanager
    def _cut(conn: psycopg.Connection[Any], deadline: float) -> Iterator[None]:
        """The exporter's cut of ``conn`` at ``deadline``, said as a lost connection of ours."""
        from pgqueue.metrics import _cut_at

        try:
            with _metrics_log_quiet(), _cut_at(conn, deadline, "stats"):  # (its warning: the line the watch prints)
                yield
        except (ConnectionFailed, psycopg.OperationalError) as exc:
            if time.monotonic() < deadline:
                raise
            raise ConnectionFailed(f"the database did not answer within {WATCH_ROUND_LIMIT:g} s: "
                                   "connection cut") from exc

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None


@contextmanager
def _metrics_log_quiet() -> Iterator[None]:
    """Hold back pgqueue.metrics' warnings (below ERROR) in the block: the command says it its
    own way."""
    logger = logging.getLogger("pgqueue.metrics")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


#: Seconds a round of a ``--watch`` waits for the database before it cuts the connection.
WATCH_ROUND_LIMIT = 10.0


def _rounds(every: float | None, round_: Callable[[], None], kept: _KeptConnection) -> int:
    """Run ``round_`` once, or every ``every`` seconds until Ctrl-C (exit 0). In a watch, a
    connection lost (or not made again, or cut: :meth:`_KeptConnection.bounded`) is one line
    on stderr, and one more when the readings go on: the watch tries again each round."""
    lost = False
    try:
        while True:
            try:
                if every:
                    with kept.bounded():
                        round_()
                else:
                    round_()
                if lost:
                    print(f"{PROG}: connected again", file=sys.stderr, flush=True)
                    lost = False
            except (ConnectionFailed, psycopg.OperationalError) as exc:
                if not every:
                    raise
                if not lost:
                    _error(f"{_one_line(str(exc)) or type(exc).__name__}; trying again every {format_seconds(every)} s")
                    lost = True
            if not every:
                return 0
            time.sleep(every)
    except KeyboardInterrupt:
        if not every:  # one reading stopped: not done (SIGTERM/SIGHUP: 143/129; it said 0, a review)
            raise
        return 0


def _group_stats(args: argparse.Namespace) -> int:
    """``pgqueue stats QUEUE --groups N``: the queue's busiest message groups, once or --watch."""
    dsn = resolve_dsn(args)
    with connect(dsn) as conn:
        kept = _KeptConnection(dsn, conn)
        if Queue(conn, args.queue).settings().group_concurrency is None:
            # group_stats is empty for such a queue: say why rather than print a table that stays empty
            raise UserError(f'queue "{args.queue}" has no message groups (they are chosen at creation: '
                            "`pgqueue queue create NAME --group-concurrency N`)")

        def table() -> str:
            groups = Queue(kept.get(), args.queue).group_stats(args.groups)
            if not groups:
                return f"no message group of queue {args.queue} has messages waiting or in flight"
            return format_table(["group", "waiting", "in flight"], [(g.group, g.waiting, g.in_flight) for g in groups])

        def json_line() -> None:
            print(json.dumps([{"group": g.group, "waiting": g.waiting, "in_flight": g.in_flight}
                              for g in Queue(kept.get(), args.queue).group_stats(args.groups)]), flush=True)

        try:
            if args.json:
                return _rounds(args.watch, json_line, kept)
            if args.watch:
                return _watch(table, args.watch, sys.stdout, kept)
            text = table()
            print(text, file=sys.stdout if text.startswith("group") else sys.stderr)
            return 0
        finally:
            kept.close()


def stats_json(stats: Sequence[QueueStats], counters: Sequence[QueueCounters] | None) -> list[dict[str, object]]:
    """Return the JSON objects of ``pgqueue stats --json``: counts, and counters when readable (else null)."""
    by_name = {c.queue: c for c in counters or ()}
    out: list[dict[str, object]] = []
    for s in stats:
        c = by_name.get(s.queue)
        out.append({"queue": s.queue, "ready": s.ready, "scheduled": s.scheduled, "leased": s.leased, "dead": s.dead,
                    "oldest_ready_age_ms": s.oldest_ready_age_ms,
                    "counters": None if c is None else {
                        "enqueued": c.enqueued, "delivered": c.delivered, "completed": c.completed,
                        "failed": c.failed, "dead_lettered": c.dead_lettered, "expired": c.expired,
                        "shared": c.shared}})
    return out


def _stats_json(kept: _KeptConnection, collect: Callable[[], list[QueueStats]], queue: str | None,
                every: float | None, out: TextIO) -> int:
    def counters() -> list[QueueCounters] | None:
        conn = kept.get()
        try:
            with conn.transaction():
                return [Queue(conn, queue).counters()] if queue else all_counters(conn)
        except PgQueueError as exc:
            if exc.sqlstate != "42501":  # a role that may count but not read the counters: null
                raise
            return None

    def line() -> None:
        out.write(json.dumps(stats_json(collect(), counters())) + "\n")
        out.flush()

    return _rounds(every, line, kept)


#: What a server (or libpq) says of a login no wait mends: a database or role that does not
#: exist, a password refused or not given (the server's English texts; another language's are
#: taken for an outage, as are a pooler's answers).
_LOGIN_REFUSED = ("does not exist", "password authentication failed", "no password supplied", "fe_sendauth",
                  "authentication failed", "no pg_hba.conf entry", "not permitted to log in")


def _login_refused_for_good(text: str) -> bool:
    text = " ".join(text.split()).lower()
    return any(words in text for words in _LOGIN_REFUSED)


def _cmd_metrics(args: argparse.Namespace) -> int:
    from pgqueue.metrics import MetricsServer, QueueMetrics

    if args.once:
        _check_output()
    dsn = resolve_dsn(args)
    # Fail fast on what waiting will not mend: a DSN that does not parse or holds an option value
    # libpq refuses (port=5x: it waited with pgqueue_up 0 for ever, a review), pgqueue missing or of
    # another version. A database that cannot be reached now (down, failing over) is what
    # pgqueue_up 0 is for: the endpoint serves it until the database answers, and --once prints
    # it (exit 1), as for a reading that fails later.
    # (The check is the reading's own connection, opened now under its deadline: a server that
    # stops answering after the login is out of reach too. A database found without pgqueue or
    # with another version later is a reading that fails: pgqueue_up 0, the reason logged.)
    hint = "" if dsn else f" ({NO_DSN_HINT})"
    metrics = QueueMetrics(dsn, min_interval=args.min_interval, timeout=args.timeout)
    try:
        metrics.connect()
    except psycopg.ProgrammingError as exc:
        metrics.close()
        raise UserError(f"invalid connection string: {conninfo_error(exc, dsn)}{hint}") from exc
    except (psycopg.OperationalError, ConnectionFailed) as exc:
        # an option value libpq refuses (port=5x, sslmode=requir), or a login the server refused
        # for good (no such database or role, a password): no wait mends it (it served
        # pgqueue_up 0 for ever, where the worker and the dashboard exit 1: a review). Any other
        # answer (a pooler whose server is down, a server starting up in another language) is
        # an outage: pgqueue_up 0, as before (the worker's stricter rule, retry_at_start, made
        # the exporter exit on them: a review)
        if _client_side(str(exc)) or _login_refused_for_good(str(exc)):
            metrics.close()
            raise UserError(f"cannot connect to the database: {_one_line(str(exc))}{hint}") from exc
        if not args.once:
            print(f"pgqueue metrics: cannot reach the database now ({_one_line(str(exc))}){hint}: serving "
                  "pgqueue_up 0 until it answers", file=sys.stderr, flush=True)
    except (ExtensionNotInstalled, VersionMismatch):
        metrics.close()
        raise
    except (PgQueueError, psycopg.Error) as exc:
        # the check's reading refused or given up (--timeout run out on a lock of the catalog or
        # of pgqueue.install, a lock_timeout, a server shutting down): a reading that fails, as
        # it would be at any later scrape: pgqueue_up 0 until it reads (it exited 1: a review)
        if not args.once:
            print(f"pgqueue metrics: cannot read the database now ({_one_line(str(exc))}): serving "
                  "pgqueue_up 0 until it answers", file=sys.stderr, flush=True)
    except BaseException:
        metrics.close()
        raise
    try:
        if args.once:
            with _metrics_log_quiet():  # its warning is the error below
                sys.stdout.write(metrics.render())
            if metrics.error is not None:  # printed all the same (pgqueue_up 0), for a textfile collector
                sys.stdout.flush()
                raise UserError(f"cannot read the database (pgqueue_up 0): {metrics.error}")
            return 0
        with _StopSignals() as stop:  # before it serves: a SIGTERM once it answers stops it cleanly
            try:
                server = MetricsServer(metrics.render, host=args.host, port=args.port)
            except OSError as exc:
                raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
            print(f"pgqueue metrics at {server.url} (Ctrl-C to stop)", flush=True)
            try:
                stopped_by = stop.wait()
            finally:
                server.close()
        _stopped(f"metrics stopped on {stopped_by.name}")
        return 0
    finally:
        metrics.close()


class _StopSignals:
    """SIGINT (Ctrl-C), SIGTERM (a service manager's stop) and SIGHUP (a closed terminal or ssh
    session) for a serving command, on the main thread: from the block's start each is noted
    instead of ending the process, and :meth:`wait` returns the first. All three stop the
    command the same way, as they stop `pgqueue worker`. A signal ignored when the command
    started (SIGHUP under nohup, SIGINT in `cmd &` from a script, a SIGTERM its parent ignored)
    stays ignored; the previous handlers are back when the block ends, so a second signal while
    the command stops acts at once.

    With ``interrupt``, each signal also raises KeyboardInterrupt, as Ctrl-C does, for a block
    that a KeyboardInterrupt ends (the dashboard's serve()); :attr:`first` is then the signal
    that ended it (None: a KeyboardInterrupt of another kind)."""

    def __init__(self, *, interrupt: bool = False) -> None:
        self._interrupt = interrupt
        self._got: list[signal.Signals] = []
        self._stop = threading.Event()
        self._saved: dict[signal.Signals, Any] = {}

    def _on_signal(self, signum: int, frame: object) -> None:
        self._got.append(signal.Signals(signum))
        self._stop.set()
        if self._interrupt:
            raise KeyboardInterrupt

    def __enter__(self) -> _StopSignals:
        self._saved = {sig: signal.signal(sig, self._on_signal) for sig in stop_signals()}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._saved.items():
            signal.signal(sig, previous)

    def wait(self) -> signal.Signals:
        while not self._stop.wait(3600):
            pass
        return self._got[0]

    @property
    def first(self) -> signal.Signals | None:
        """The first signal that came (None: none came)."""
        return self._got[0] if self._got else None



def _watch(render: Callable[[], str], every: float, out: TextIO, kept: _KeptConnection) -> int:
    tty = out.isatty()

    def show() -> None:
        table = render()
        stamp = datetime.now(timezone.utc).strftime("%H:%M:%S UTC")  # UTC, as every time printed
        header = f"pgqueue stats at {stamp} (every {format_seconds(every)} s, Ctrl-C to stop)"
        if tty:
            out.write("\x1b[H\x1b[2J")
        out.write(f"{header}\n{table}\n")
        if not tty:
            out.write("\n")
        out.flush()

    return _rounds(every, show, kept)


def _cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        from pgqueue.dashboard import Options, serve
    except ImportError as exc:
        raise UserError(f"the dashboard needs Flask ({exc}), the pgqueue-sql[dashboard] extra: pip install 'flask>=3.0,<4' "
                        "(from a clone of pgqueue: pip install './python[dashboard]')") from exc
    from pgqueue.dashboard.app import _is_loopback_host

    if args.token is not None and len(args.token) < 8:
        raise UsageError("pgqueue dashboard: error: argument --token: the access token (or "
                         "$PGQUEUE_DASHBOARD_TOKEN) must have at least 8 characters (see `pgqueue dashboard --help`)")
    dsn = resolve_dsn(args)
    with connect(dsn):
        pass  # fail fast: unreachable database, pgqueue missing or of another version
    loopback = _is_loopback_host(args.host)
    if not loopback and args.token is None:
        print(f"{PROG}: warning: listening on {args.host} without --token: anyone who can reach it sees the queues "
              "and acts on them; it answers to IP addresses only, not to names (DNS rebinding)", file=sys.stderr)
    options = Options(dsn=dsn, token=args.token, read_only=args.read_only,
                      sample_interval=args.sample_interval, loopback_only=loopback,
                      ip_hosts_only=not loopback and args.token is None)

    def ready(url: str) -> None:
        print(f"pgqueue dashboard at {url} (Ctrl-C to stop)", flush=True)

    # While it serves, serve()'s own handlers stop it (SIGHUP too): they set the flag that its
    # loop reads. Before and after (the pool's start, the sampler's stop), a stop signal raises
    # KeyboardInterrupt, and so does a second one while it stops. (A KeyboardInterrupt raised
    # by every signal while it served could land in the start of a request's thread, and
    # socketserver took it for that request's error and served on: a CI run, killed after 20 s.)
    signals = stop_signals()
    stopped_by: signal.Signals | None = None
    with _StopSignals(interrupt=True) as stop:
        try:
            stopped_by = serve(options, host=args.host, port=args.port, ready=ready, signals=signals)
        except OSError as exc:
            raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
        except KeyboardInterrupt:  # a signal before it served, or a second one while it stopped
            pass
    stopped_by = stopped_by or stop.first
    _stopped(f"dashboard stopped{f' on {stopped_by.name}' if stopped_by else ''}")
    return 0


#: dead list --all reads the letters in pages of this many (keyset pages: each an index walk)
DEAD_PAGE = 1000


def _dead_json(letter: DeadLetter) -> dict[str, object]:
    record: dict[str, object] = {"id": letter.id, "queue": letter.queue, "attempts": letter.attempts,
                                 "content_type": letter.content_type}
    record.update(_payload_json(letter.payload, letter.content))
    if letter.state is not None:
        record["state_base64"] = base64.b64encode(letter.state).decode("ascii")
    record["last_error"] = letter.last_error
    record["created_at"] = letter.created_at.isoformat()
    record["dead_at"] = letter.dead_at.isoformat()
    return record


def _cmd_dead_list(args: argparse.Namespace) -> int:
    _check_output()
    with connect(resolve_dsn(args)) as conn:
        queue = Queue(conn, args.queue)
        if not args.all:
            letters = queue.dead_letters(args.limit + 1)  # one more: are there more?
            shown = letters[:args.limit]
            if args.json:
                for letter in shown:
                    print(json.dumps(_dead_json(letter)), flush=True)
            elif shown:
                print(dead_table(shown))
            if len(letters) > args.limit:
                print(f"(the oldest {args.limit} shown: there are more; --all for every one, or "
                      f"`pgqueue stats {args.queue}` for the count)", file=sys.stderr if args.json else sys.stdout)
            count = len(shown)
        else:
            # Page by page, each printed before the next is read (a queue's letters need not fit
            # in memory); the table keeps its columns' widths from page to page, widening a
            # column only when a page needs it. Each page is its own statement: a letter
            # requeued or purged meanwhile is not shown again, one that dies meanwhile is shown
            # if it sorts after the page in hand.
            count, widths, after = 0, None, None
            while True:
                page = queue.dead_letters(DEAD_PAGE, after=after)
                if args.json:
                    for letter in page:
                        print(json.dumps(_dead_json(letter)))
                elif page:
                    header, rows, widths = _dead_lines(page, widths)
                    print("\n".join(rows if count else header + rows))
                sys.stdout.flush()
                count += len(page)
                if len(page) < DEAD_PAGE:
                    break
                after = page[-1]
    if not count:
        print(f"no dead letters on queue {args.queue}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _dead_by_id(conn: psycopg.Connection[Any], queue: str, ids: list[int], action: Callable[[list[int]], int],
                done: str) -> int:
    """Apply ``action`` (requeue or purge) to each dead letter of ``ids`` in one transaction.

    One call an id, so that the ids that are not the queue's dead letters can be named (the
    server returns only a count); if there is any, nothing is done (rolled back) and the error
    names them, so that a mistyped id does not leave the others half-handled.
    """
    missing: list[int] = []
    with conn.transaction():
        for msg_id in dict.fromkeys(ids):  # each once, in the order given
            if action([msg_id]) == 0:
                missing.append(msg_id)
        if missing:
            raise UserError(f"no dead letter with id{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                            f"on queue {queue}: nothing {done} (see `pgqueue dead list {queue}`)")
    return len(dict.fromkeys(ids))


def _cmd_dead_requeue(args: argparse.Namespace) -> int:
    with connect(resolve_dsn(args)) as conn:
        queue = Queue(conn, args.queue)
        delay = timedelta(seconds=args.delay) if args.delay else None

        def requeue(ids: list[int] | None = None) -> int:
            return queue.requeue_dead(ids, delay=delay, at=args.at)

        if args.ids:
            n = _dead_by_id(conn, args.queue, args.ids, requeue, "requeued")
        else:
            n = requeue()
    _done(f"{n} dead letter(s) requeued")
    due = (f", due at {args.at.astimezone(timezone.utc).isoformat()}" if args.at else f", due in {format_seconds(delay_to_ms(args.delay) / 1000)} s" if args.delay else "")
    print(f"requeued {n} dead letter(s) on queue {args.queue}{due}")
    return 0


def _cmd_dead_purge(args: argparse.Namespace) -> int:
    if not args.ids and not args.all:
        raise UsageError("pgqueue dead purge: error: give --id ID (repeatable) or --all to delete every dead letter "
                         "(see `pgqueue dead purge --help`)")
    with connect(resolve_dsn(args)) as conn:
        queue = Queue(conn, args.queue)
        if args.ids:
            n = _dead_by_id(conn, args.queue, args.ids, queue.purge_dead, "purged")
        else:
            n = queue.purge_dead()
    _done(f"{n} dead letter(s) purged")
    print(f"purged {n} dead letter(s) from queue {args.queue}")
    return 0


def _cmd_schedule_create(args: argparse.Namespace) -> int:
    from pgqueue.schedules import create_schedule

    _check_task(args)
    payload = _payload(args)
    with connect(resolve_dsn(args)) as conn:
        create_schedule(conn, args.name, args.queue, payload, every=args.every, cron=args.cron,
                        missed=args.missed, task=args.task)
        _done(f"schedule {printable(args.name)} created")
        print(schedules_table([s for s in _schedules(conn) if s.name == args.name]))
    return 0


def _schedules(conn: psycopg.Connection[Any]) -> list[ScheduleEntry]:
    from pgqueue.schedules import list_schedules

    return list_schedules(conn)


def schedules_table(entries: Sequence[ScheduleEntry]) -> str:
    """Return schedules as an aligned table."""
    # (the task its messages name: the payload alone did not say which handler gets them, a review)
    rows = [(e.name, e.queue, e.cron or f"every {format_interval(e.every_ms)}", e.missed, e.next_run,
             "-" if e.task is None else e.task, _preview(e.payload)) for e in entries]
    return format_table(["schedule", "queue", "when", "missed", "next", "task", "payload"], rows)


def _cmd_schedule_list(args: argparse.Namespace) -> int:
    _check_output()
    with connect(resolve_dsn(args)) as conn:
        entries = _schedules(conn)
    print(schedules_table(entries) if entries else "no schedules")
    return 0


def _cmd_schedule_drop(args: argparse.Namespace) -> int:
    from pgqueue.schedules import drop_schedule

    with connect(resolve_dsn(args)) as conn:
        if not drop_schedule(conn, args.name):  # (a name may hold any character: escaped, as in the list)
            raise UserError(f'schedule "{printable(args.name)}" does not exist (see `pgqueue schedule list`)')
    _done(f"schedule {printable(args.name)} dropped")
    print(f"dropped schedule {printable(args.name)}")
    return 0


def _cmd_schedule_run(args: argparse.Namespace) -> int:
    from pgqueue.schedules import run_schedules

    _check_output("no schedule run")
    held: list[str] = []
    with connect(resolve_dsn(args)) as conn:
        done = run_schedules(conn, on_held=held.append)
    _done(f"{len(done)} message(s) enqueued")
    for m in done:
        print(json.dumps({"schedule": m.schedule, "message_id": m.message_id, "slot": m.slot.isoformat()}))
    for notice in held:
        # (the notice names the schedule, whose name may hold any character: escaped, as in the list)
        print(f"{PROG}: warning: {printable(notice)}; its slots wait for a later run", file=sys.stderr)
    print(f"enqueued {len(done)} message(s)", file=sys.stderr)
    return 0


def _log_to_stderr(level: int) -> None:
    """The long-running commands' log lines on stderr, stamped in UTC with the zone written out
    (2026-11-30T17:40:01.123Z), so that lines from hosts in different zones sort and compare."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("%(asctime)s.%(msecs)03dZ pgqueue[%(process)d] %(levelname)s %(message)s",
                                  datefmt="%Y-%m-%dT%H:%M:%S")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    logging.basicConfig(level=level, handlers=[handler])


def _until_stopped(what: str, body: Callable[[CommandSignals], int]) -> int:
    """`pgqueue worker` and `pgqueue scheduler`: run ``body`` with SIGINT, SIGTERM and SIGHUP
    handled from the command's start by a :class:`CommandSignals` (in the `pgqueue` command,
    on the main thread), which ``body`` points at what it starts; the run replaces it while it
    runs and puts it back when it has stopped. A signal before the run has taken them over
    stops the command all the same (it was ignored between the command's handlers and the
    run's: the worker ran on until SIGKILL): before anything is started, at once, exit 0; once
    the worker or scheduler exists, it is stopped as its run's handler would (the run then
    returns without starting, or stops as soon as it runs). Once the run has
    stopped, a signal is ignored: the exit status stays 0 (the default handlers reported a
    supervisor's repeated stop, or Ctrl-C pressed again, as 143 or 130); :func:`console`
    ignores them at the OS level for the rest of the exit. A signal ignored when the command
    started stays ignored, and so does an application's own SIGHUP handler (see
    :func:`stop_signals`)."""
    signals = CommandSignals()
    if _CONSOLE and threading.current_thread() is threading.main_thread():
        for sig in stop_signals():
            signal.signal(sig, signals)
    try:
        try:
            return body(signals)
        finally:
            signals.over = True
    except NotStarted as exc:
        _stopped(f"{what} stopped on {exc.sig.name} before it started")
        return 0


def _stop_from_a_thread(stop: Callable[[], None]) -> Callable[[signal.Signals], None]:
    """A :class:`CommandSignals` ``stop`` that calls ``stop`` on a thread of its own, as the runs'
    handlers do: a signal handler runs between two bytecodes of the main thread, maybe inside
    a lock that ``stop`` takes."""
    return lambda sig: threading.Thread(target=stop, name="pgqueue-stop", daemon=True).start()


def _check_dsn(dsn: str) -> None:
    """`worker` and `scheduler`: a connection string that does not parse is one line, exit 1,
    before anything waits for the database."""
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise UserError(f"invalid connection string: {conninfo_error(exc, dsn)}") from exc


@contextmanager
def _start_failures(dsn: str) -> Iterator[None]:
    """`worker` and `scheduler`: a start that failed to connect (a refused login, a database that
    does not exist, or --startup-timeout run out) is reported as `connect` reports it: one line,
    with what to do when no DSN was given. (They wait for a server that cannot be reached yet;
    after the start, connection failures are retried, never raised.)"""
    try:
        yield
    except ConnectionFailed as exc:
        hint = "" if dsn else f" ({NO_DSN_HINT})"
        raise UserError(f"cannot connect to the database: {_one_line(exc.message)}{hint}") from exc


def _cmd_scheduler(args: argparse.Namespace) -> int:
    return _until_stopped("scheduler", lambda signals: _scheduler(args, signals))


def _scheduler(args: argparse.Namespace, signals: CommandSignals) -> int:
    from pgqueue.schedules import Scheduler

    dsn = resolve_dsn(args)
    _check_dsn(dsn)
    _log_to_stderr(logging.INFO)
    # waits for a database not reachable yet (or read-only); fails at once on what no wait mends:
    # a refused login, pgqueue missing or of another version
    scheduler = Scheduler(dsn, interval=args.interval, startup_timeout=args.startup_timeout)
    signals.stop = _stop_from_a_thread(scheduler.stop)
    with _start_failures(dsn):
        scheduler.run()
    _stopped(f"scheduler stopped: enqueued {scheduler.enqueued} message(s)")
    return 0


def _queue_settings(args: argparse.Namespace) -> dict[str, Any]:
    names = ["lock_ms", "max_attempts", "retry_base_ms", "retry_cap_ms", "max_size", "notify",
             "group_concurrency", "key_window_ms", "rate_limit"]
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def _cmd_queue_create(args: argparse.Namespace) -> int:
    options = _queue_settings(args)
    with connect(resolve_dsn(args)) as conn:
        queue = Queue(conn, args.queue)
        try:
            _read_committed_again(conn, lambda: queue.create(if_not_exists=args.if_not_exists, **options))
        except QueueExists as exc:
            raise UserError(f"queue {args.queue} already exists (change it with `pgqueue queue alter`, "
                            "or pass --if-not-exists)") from exc
        _done(f"queue {args.queue} {'exists' if args.if_not_exists else 'created'}")
        settings = queue.settings()
        print(settings_table([settings]))
    # --if-not-exists of a queue that exists with other settings: it is left as it is, which
    # printed its row without a word (a review); say which setting differs
    unset = {"max_attempts", "max_size", "rate_limit"}  # 0: none
    # as the settings table shows them: yes/no, not Python's True/False (a review)
    def shown(name: str, value: object) -> str:
        if isinstance(value, bool):
            return "yes" if value else "no"
        if value is None:
            return "none (no message groups)" if name == "group_concurrency" else "none"
        return str(value)

    differ = {name: f"{name} {shown(name, getattr(settings, name))} (not {shown(name, value)})"
              for name, value in options.items()
              if getattr(settings, name) != (None if name in unset and value == 0 else value)
              and not (name == "notify" and value is False)}  # (no --notify: not a setting asked for)
    if differ:
        # whether a queue has groups is chosen when it is created: `queue alter` refuses it
        groups = "group_concurrency" in differ and None in (settings.group_concurrency, options["group_concurrency"])
        how = "change them with `pgqueue queue alter`" + (
            " (message groups are chosen when a queue is created: drop and create it for them)" if groups else "")
        print(f"pgqueue: warning: queue {args.queue} exists with other settings, left as they are: "
              f"{', '.join(differ.values())}; {how}", file=sys.stderr)
    return 0


def _cmd_queue_alter(args: argparse.Namespace) -> int:
    options = _queue_settings(args)
    if not options:
        raise UsageError("pgqueue queue alter: error: nothing to change (see `pgqueue queue alter --help`)")
    with connect(resolve_dsn(args)) as conn:
        queue = Queue(conn, args.queue)
        _read_committed_again(conn, lambda: queue.alter(**options))
        _done(f"queue {args.queue} altered")
        print(settings_table([queue.settings()]))
    return 0


def _cmd_queue_drop(args: argparse.Namespace) -> int:
    with connect(resolve_dsn(args)) as conn:
        dropped = _read_committed_again(conn, Queue(conn, args.queue).drop)
    if dropped:
        _done(f"queue {args.queue} dropped")
        print(f"dropped queue {args.queue}")
    elif args.if_exists:
        print(f"queue {args.queue} does not exist")
    else:
        raise UserError(f'queue "{args.queue}" does not exist')
    return 0


def _cmd_queue_list(args: argparse.Namespace) -> int:
    _check_output()
    with connect(resolve_dsn(args)) as conn:
        print(settings_table(list(list_queues(conn))))
    return 0


def load_handler(spec: str) -> Callable[[Message], object]:
    """Import ``module:function`` (the current directory is on the import path)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"the handler must be MODULE:FUNCTION (like myapp.tasks:handle), got {quoted(spec)}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        reason = str(exc).replace(repr(module_name), quoted(module_name))  # "No module named '...'"
        raise UserError(f"cannot import handler module {quoted(module_name)}: {reason}") from exc
    except Exception as exc:
        raise UserError(f"importing handler module {quoted(module_name)} failed: "
                        f"{type(exc).__name__}: {_one_line(str(exc))}") from exc
    except SystemExit as exc:  # (main's catch of --help's exit took it: exit 0 or its code, silent)
        raise UserError(f"importing handler module {quoted(module_name)} failed: it raised "
                        f"SystemExit({exc.code!r})") from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UserError(f"module {quoted(module_name)} has no {quoted(attr)}") from None
    if not callable(target):
        raise UserError(f"{spec} is not callable")
    if is_generator_callable(target):
        raise UserError(f"{spec} is a generator function (it has `yield`): calling it runs none of its body, "
                        "so every message would be completed without being handled")
    handler: Callable[[Message], object] = target
    return handler


def _stop_worker(worker: WorkerCore) -> Callable[[signal.Signals], None]:
    """What a stop signal does to the worker before its run has taken the signals over (or
    once it has put them back): what its run's handler does (a first signal stops it
    gracefully, a second at once); nothing once the run has ended."""

    def stop(sig: signal.Signals) -> None:
        if not worker._ended.is_set():  # (on a thread: see _stop_from_a_thread)
            threading.Thread(target=worker._on_signal, args=(sig,), name="pgqueue-stop", daemon=True).start()

    return stop


def _cmd_worker(args: argparse.Namespace) -> int:
    return _until_stopped("worker", lambda signals: _worker(args, signals))


def _worker(args: argparse.Namespace, signals: CommandSignals) -> int:
    from pgqueue.worker import Worker

    if len(args.target) == 3:
        dsn, queue_name, spec = args.target
        if getattr(args, "dsn", None):  # (an empty --dsn is none: it was refused as a second database)
            raise UsageError("pgqueue worker: error: the database given twice (a DSN argument and "
                             "--dsn): give one (see `pgqueue worker --help`)")
        if not dsn:  # an empty DSN argument is none, as an empty --dsn is: $PGQUEUE_DSN, else libpq's
            dsn = resolve_dsn(args)  # defaults (it went to libpq's defaults past $PGQUEUE_DSN, a review)
    elif len(args.target) == 2:
        queue_name, spec = args.target
        dsn = resolve_dsn(args)
    else:
        raise UsageError("pgqueue worker: error: expected [DSN] QUEUE MODULE:FUNCTION "
                         "(see `pgqueue worker --help`)")
    module_name, colon, attr = spec.partition(":")
    if not (module_name and colon and attr):  # (one that does not import is a failure: exit 1)
        raise UsageError(f"pgqueue worker: error: the handler must be MODULE:FUNCTION (like myapp.tasks:handle), "
                         f"got {quoted(spec)} (see `pgqueue worker --help`)")
    handler = load_handler(spec)
    _check_dsn(dsn)
    _log_to_stderr(logging.WARNING)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.getLogger("pgqueue").setLevel(level)
    # The worker's run() waits for a database that cannot be reached yet (or is read-only), and
    # raises at once, before it logs anything, what no wait mends: a refused login, an unknown
    # queue, pgqueue missing or of another version (one line each, exit 1).
    options: dict[str, Any] = dict(
        concurrency=args.concurrency, batch_size=args.batch_size, lock_ms=args.lock_ms, listen=args.listen,
        poll_max=args.poll_max, poll_min=min(0.05, args.poll_max), shutdown_grace=args.shutdown_grace,
        dsn=dsn, timeout=args.timeout, startup_timeout=args.startup_timeout)
    metrics = server = None
    if args.metrics_port is not None:
        from pgqueue.metrics import MetricsServer, WorkerMetrics

        metrics = WorkerMetrics(queue_name)
        options["on_result"] = metrics.observe
        try:
            server = MetricsServer(metrics.render, host=args.metrics_host, port=args.metrics_port)
        except OSError as exc:
            raise UserError(f"cannot listen on {args.metrics_host}:{args.metrics_port}: {exc.strerror or exc}") from exc
        logging.getLogger("pgqueue").info("worker metrics at %s", server.url)
    try:
        # `async def` (a function, an object's __call__, a Tasks registry of them): the asyncio worker
        if is_async_handler(handler):
            from pgqueue.async_client import AsyncQueue
            from pgqueue.async_worker import AsyncWorker

            async_worker = AsyncWorker(AsyncQueue(dsn, queue_name), cast(Any, handler), **options)  # (checked above)
            signals.stop = _stop_worker(async_worker)
            if metrics is not None:
                metrics.in_flight = lambda: async_worker.in_flight
            with _start_failures(dsn):
                _run_async(async_worker.run())
        else:
            worker = Worker(Queue(dsn, queue_name), handler, **options)
            signals.stop = _stop_worker(worker)
            if metrics is not None:
                metrics.in_flight = lambda: worker.in_flight
            with _start_failures(dsn):
                worker.run()  # graceful on SIGINT/SIGTERM/SIGHUP
    finally:
        if server is not None:
            server.close()
    return 0
