"""The dashboard's Flask application: pages, a small JSON API for the live parts, and the
guards (access token, CSRF, read-only mode, the role's privileges, loopback Host names)."""

from __future__ import annotations

import hmac
import ipaddress
import math
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

import psycopg
from flask import Flask, Response, abort, g, jsonify, redirect, render_template, request, session, url_for
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from pgqueue import _connect
from pgqueue._core import dead_letter_from_row, pending_from_row, utf8
from pgqueue._version import __version__
from pgqueue.cli import _BIGINT_MAX, connect_timeout_kwargs, format_ms
from pgqueue.client import Queue, all_stats, list_queues
from pgqueue.dashboard import _sql
from pgqueue.dashboard.payload import MAX_SHOWN, Shown, show
from pgqueue.dashboard.sampler import (APPLICATION_NAME, MAX_POINTS, Sampler, depth_series, oldest_series,
                                      throughput_series)
from pgqueue.errors import InvalidQueueName, PgQueueError, QueueNotFound, translate
from pgqueue.message import DeadLetter, Pending, to_datetime
from pgqueue.metrics import _MAX_TIMEOUT_MS, CUT_AFTER, _cut_at

#: Dead letters and peeked messages listed on a page.
PAGE_LIMIT = 100
#: Wrong access tokens one client (an IPv4 address, an IPv6 /64) may give within
#: FAILED_LOGIN_WINDOW seconds of its first; past them its attempts are refused (429, with
#: Retry-After, the token not even compared) for FAILED_LOGIN_LOCKOUT seconds.
FAILED_LOGIN_LIMIT = 10
FAILED_LOGIN_WINDOW = 300.0
FAILED_LOGIN_LOCKOUT = 900.0
#: Clients whose wrong tokens are counted one by one (a few hundred kB at most); while that many
#: are, the wrong tokens of all others are counted together, as of one client.
FAILED_LOGIN_CLIENTS = 4096
#: Sessions ended by a logout that a process remembers (until they would have expired anyway);
#: past it, the process ends every session logged in until then (everyone logs in again).
MAX_REVOKED_SESSIONS = 10000
#: Why a token in a URL that another site made the browser load (Sec-Fetch-Site) is not taken.
FOREIGN_TOKEN = ("the access token in a link from another site is not taken: open the URL that "
                 "pgqueue dashboard printed yourself (type or paste it), or enter the token here")

#: The form field and header that carry the CSRF token.
CSRF_FIELD = "csrf_token"
#: What the dead-letter page says after an action: the redirect names the action and a count
#: (``?done=purged&n=3``), never text of its own.
DONE = {"requeued": "requeued {n} dead letter(s)", "purged": "purged {n} dead letter(s)"}


@dataclass(frozen=True)
class Options:
    """How the dashboard runs (the options of ``pgqueue dashboard``)."""

    dsn: str
    token: str | None = None  # required to see anything, if set
    read_only: bool = False  # never change anything, whatever the role may do
    sample_interval: float = 5.0  # seconds between samples of the charts
    history: float = 3600.0  # seconds of samples kept
    loopback_only: bool = True  # refuse Host names other than localhost / loopback addresses
    # refuse Host names other than IP addresses and localhost (a DNS-rebinding page's name):
    # `pgqueue dashboard` sets it when it listens beyond loopback without a token
    ip_hosts_only: bool = False
    # seconds a page waits for a database connection, and each of its statements for the
    # database (a lock another session holds: LOCK TABLE, VACUUM FULL), before it says so
    wait: float = 10.0
    # signs the session cookie (login, CSRF token); None: random, for this process only. Several
    # processes serving one dashboard (gunicorn -w N) must share one.
    secret_key: bytes | None = None


@dataclass(frozen=True)
class Privileges:
    """What the dashboard's role may do (from the catalogs), and why it may not change things."""

    role: str
    read_queues: bool
    read_stats: bool
    read_content: bool
    read_dead: bool
    requeue: bool
    purge: bool
    read_sequence: bool
    read_only_transaction: bool
    read_all_stats: bool
    read_attempts: bool

    def missing(self) -> list[str]:
        """Say, in words, what the role cannot do."""
        out = []
        if not self.read_stats:
            out.append("read message counts (SELECT on pgqueue.message and pgqueue.dead_letter)")
        if not self.read_content:
            out.append("peek at payloads (SELECT on pgqueue.message.content)")
        if not self.read_dead:
            out.append("browse dead letters (SELECT on pgqueue.dead_letters and pgqueue.queue)")
        if not self.requeue:
            out.append("requeue dead letters (DELETE on pgqueue.dead_letter, INSERT on pgqueue.message)")
        if not self.purge:
            out.append("purge dead letters (DELETE on pgqueue.dead_letter)")
        if self.read_only_transaction:
            out.append("write at all: the session is read-only (default_transaction_read_only or a standby)")
        return out


@dataclass
class _Failures:
    since: float  # the first wrong token of the window
    last: float  # the latest
    count: int = 0
    locked_until: float | None = None

    def over(self, now: float, window: float) -> bool:
        """Whether nothing is left to count: the window is over, or the lockout."""
        return now >= self.locked_until if self.locked_until is not None else now - self.since >= window


class FailedLogins:
    """Wrong access tokens counted per client, in bounded memory.

    A client that gives ``limit`` wrong tokens within ``window`` seconds of its first one is
    refused every further attempt for ``lockout`` seconds (:meth:`retry_after` says how long
    still); a right token forgets its failures. At most ``capacity`` clients are counted one by
    one (a client is forgotten when its window or lockout is over): while that many are counted,
    every other client's wrong tokens are counted together, as one client, so that many
    addresses do not buy many more tries (an attack from that many addresses locks out new
    clients' logins for as long as it goes on, not the sessions logged in). A token is counted
    before it is compared (:meth:`attempt`, one check-and-count under the lock, so that
    concurrent attempts cannot pass the limit) and a right one is taken back
    (:meth:`succeeded`): the wrong ones before it stay counted, so a client that knows the
    token (a script behind the same address) does not wipe an attacker's count. Thread-safe
    (Werkzeug's threaded server); ``clock`` gives monotonic seconds.
    """

    def __init__(self, limit: int = FAILED_LOGIN_LIMIT, window: float = FAILED_LOGIN_WINDOW,
                 lockout: float = FAILED_LOGIN_LOCKOUT, capacity: int = FAILED_LOGIN_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self.window, self.lockout, self.capacity, self.clock = limit, window, lockout, capacity, clock
        self._lock = threading.RLock()
        self._clients: OrderedDict[str, _Failures] = OrderedDict()  # least recently failing first
        self._others: _Failures | None = None  # the clients not counted one by one
        self._swept = -math.inf

    def __len__(self) -> int:
        return len(self._clients)

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until ``client`` may try a token again; None: it may now."""
        now = self.clock()
        with self._lock:
            entry = self._clients.get(client, self._others)
            if entry is None or entry.locked_until is None:
                return None
            if entry.over(now, self.window):
                if entry is self._others:
                    self._others = None
                else:
                    del self._clients[client]
                return None
            return max(1, math.ceil(entry.locked_until - now))

    def attempt(self, client: str) -> int | None:
        """Before a token of ``client`` is compared: whole seconds until it may try again (the
        token is not compared), or None: it may, and this attempt is counted as a wrong one (in
        the same step as the check), which :meth:`succeeded` takes back if the token was right."""
        with self._lock:
            wait = self.retry_after(client)
            if wait is None:
                self.failed(client)
            return wait

    def failed(self, client: str) -> None:
        """Count a wrong token of ``client``."""
        now = self.clock()
        with self._lock:
            entry = self._clients.pop(client, None)
            if entry is None and len(self._clients) >= self.capacity:
                self._sweep(now)
            if entry is None and len(self._clients) >= self.capacity:
                if self._others is None or self._others.over(now, self.window):
                    self._others = _Failures(since=now, last=now)
                self._count(self._others, now)
                return
            if entry is None or entry.over(now, self.window):
                entry = _Failures(since=now, last=now)
            self._count(entry, now)
            self._clients[client] = entry  # the most recent, last
            # the least recently failing first: forget those with nothing left to count
            keep = max(self.window, self.lockout)
            while self._clients and now - next(iter(self._clients.values())).last >= keep:
                self._clients.popitem(last=False)

    def _count(self, entry: _Failures, now: float) -> None:
        entry.count += 1
        entry.last = now
        if entry.count >= self.limit and entry.locked_until is None:
            entry.locked_until = now + self.lockout

    def _sweep(self, now: float) -> None:
        # every client with nothing left to count, at most once a second (a full table of live
        # clients would otherwise be read through at every new client's wrong token)
        if now - self._swept < 1.0:
            return
        self._swept = now
        for key in [k for k, e in self._clients.items() if e.over(now, self.window)]:
            del self._clients[key]

    def succeeded(self, client: str) -> None:
        """Take back the attempt of ``client`` (:meth:`attempt`) whose token was right; its wrong
        ones stay counted until their window ends."""
        with self._lock:
            entry = self._clients.get(client, self._others)
            if entry is None:
                return
            entry.count = max(0, entry.count - 1)
            if entry.locked_until is not None and entry.count < self.limit:
                entry.locked_until = None  # (the lock this attempt set)


def client_key(address: str | None) -> str:
    """Whom wrong tokens are counted for: an IPv4 address (an IPv4-mapped IPv6 one as IPv4), an
    IPv6 address's /64 (one host commonly has a /64 to take addresses from), anything else as is."""
    try:
        ip = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return address or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Sessions:
    """The login sessions this process has ended (logout), in bounded memory.

    The session cookie is signed, not stored: without this a logout only made the browser forget
    its copy, and a copy kept elsewhere worked on. A login gives the session a random id and its
    time; :meth:`end` remembers the id until the session would have expired anyway (``lifetime``
    seconds after its login), and :meth:`valid` refuses it. Past ``capacity`` ended sessions
    still remembered, every session logged in until then ends (nothing ended is let back in).
    Each process has its own: processes sharing a secret_key do not learn of another's logouts.
    """

    def __init__(self, lifetime: float, capacity: int = MAX_REVOKED_SESSIONS,
                 clock: Callable[[], float] = time.time) -> None:
        self.lifetime, self.capacity, self.clock = lifetime, capacity, clock
        self._lock = threading.Lock()
        self._ended: dict[str, float] = {}  # session id: when it expires anyway
        self._ended_before = -math.inf  # sessions logged in at or before this have ended

    def __len__(self) -> int:
        return len(self._ended)

    def valid(self, sid: str, since: float) -> bool:
        """Whether the session ``sid`` logged in at ``since`` still holds."""
        now = self.clock()
        with self._lock:
            return since > self._ended_before and now - since < self.lifetime and sid not in self._ended

    def end(self, sid: str, since: float) -> None:
        """End the session ``sid`` logged in at ``since`` (a logout)."""
        now = self.clock()
        with self._lock:
            self._ended[sid] = since + self.lifetime
            if len(self._ended) > self.capacity:
                self._ended = {s: t for s, t in self._ended.items() if t > now}
                if len(self._ended) > self.capacity:
                    self._ended_before = now
                    self._ended.clear()


def _fmt_time(value: datetime | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        value = to_datetime(value)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def peek_shown(conn: psycopg.Connection[Any], queue: str, limit: int) -> list[tuple[Pending, Shown]]:
    """Return up to ``limit`` waiting messages as ``Queue.peek`` would, each with how the page shows
    its payload; only the first MAX_SHOWN bytes of each content are read (``content`` holds
    them, and ``payload`` their decoding), and no checkpoint state (``state`` is None)."""
    rows = conn.execute(_sql.PEEK_SHOWN, {"queue": queue, "limit": limit, "shown": MAX_SHOWN}).fetchall()
    out = []
    for row in rows:
        m = pending_from_row(queue, row)
        out.append((m, show(m.content, m.content_type, int(row[9]))))
    return out


#: Where a page of dead letters starts or ends: the (dead_at, id) of a letter, as
#: ``<dead_at>-<id>`` (epoch milliseconds, then the id) in ``?after=`` and ``?before=``.
Cursor = tuple[int, int]
_CURSOR = re.compile(r"(-?[0-9]{1,19})-([0-9]{1,19})")
_BIGINT = range(-(2**63), 2**63)


def parse_cursor(text: str) -> Cursor | None:
    """The (dead_at, id) of ``<dead_at>-<id>``; None if it is not one."""
    found = _CURSOR.fullmatch(text)
    if found is None:
        return None
    dead_at, ident = int(found.group(1)), int(found.group(2))
    return (dead_at, ident) if dead_at in _BIGINT and ident in _BIGINT else None


def format_cursor(cursor: Cursor) -> str:
    """``<dead_at>-<id>``, as :func:`parse_cursor` reads it."""
    return f"{cursor[0]}-{cursor[1]}"


@dataclass(frozen=True)
class DeadPage:
    """A page of a queue's dead letters, oldest first, and where the next and previous start."""

    letters: list[tuple[DeadLetter, Shown]]
    next: str | None  # ``?after=`` of the next page; None: this page is the last
    previous: str | None  # ``?before=`` of the previous page; None: this page is the first


def _dead_rows(conn: psycopg.Connection[Any], queue: str, limit: int, after: Cursor | None,
               before: Cursor | None) -> list[tuple[DeadLetter, Shown, Cursor]]:
    params: dict[str, Any] = {"queue": queue, "limit": limit, "shown": MAX_SHOWN}
    query = _sql.DEAD_LETTERS_SHOWN
    if after is not None:
        query = _sql.DEAD_LETTERS_SHOWN_AFTER
        params.update(dead_at=after[0], id=after[1])
    elif before is not None:
        query = _sql.DEAD_LETTERS_SHOWN_BEFORE
        params.update(dead_at=before[0], id=before[1])
    out = []
    for row in conn.execute(query, params).fetchall():
        d = dead_letter_from_row(row)
        out.append((d, show(d.content, d.content_type, int(row[9])), (int(row[8]), int(row[0]))))
    if after is None and before is not None:
        out.reverse()  # (read newest first)
    return out


def dead_letters_shown(conn: psycopg.Connection[Any], queue: str, limit: int, *, after: Cursor | None = None,
                       before: Cursor | None = None) -> list[tuple[DeadLetter, Shown]]:
    """Return up to ``limit`` dead letters as ``Queue.dead_letters`` would (oldest first: by
    dead_at, then id), each with how the page shows its payload; only the first MAX_SHOWN bytes
    of each content are read (as :func:`peek_shown`). ``after``: those after the letter with that
    (dead_at, id); ``before``: the last ``limit`` before it."""
    return [(d, shown) for d, shown, _ in _dead_rows(conn, queue, limit, after, before)]


def dead_letter_page(conn: psycopg.Connection[Any], queue: str, limit: int, *, after: Cursor | None = None,
                     before: Cursor | None = None) -> DeadPage:
    """A page of up to ``limit`` dead letters (as :func:`dead_letters_shown`), by keyset paging:
    the page after ``after``, the page before ``before``, or the first; a page before which
    nothing is left (requeued or purged since) is the first."""
    rows = _dead_rows(conn, queue, limit + 1, after, before)
    if after is None and before is not None:
        if not rows:  # nothing before it any more: the first page
            return dead_letter_page(conn, queue, limit)
        more_before, more_after = len(rows) > limit, True
        rows = rows[-limit:]
    else:
        more_before, more_after = after is not None, len(rows) > limit
        rows = rows[:limit]
    return DeadPage([(d, shown) for d, shown, _ in rows],
                    format_cursor(rows[-1][2]) if more_after and rows else None,
                    format_cursor(rows[0][2]) if more_before and rows else None)


def _done(args: Any) -> str | None:
    """The notice of ``?done=<action>&n=<count>`` (None for anything else)."""
    text, n = DONE.get(args.get("done", "")), args.get("n", "")
    return text.format(n=int(n)) if text is not None and n.isascii() and n.isdigit() and len(n) < 19 else None


#: Where a statement's first literal starts: a quote ('...', E'...', U&'...', B'...') or a dollar
#: quote ($$ or $tag$), not a parameter ($1).
_LITERAL = re.compile(r"'|\$(?=[A-Za-z_\x80-\U0010ffff$])")


def _without_literals(query: str) -> str:
    """Return a statement up to its first literal (which may be a payload), "…" for the rest."""
    found = _LITERAL.search(query)
    return query if found is None else query[:found.start()] + "…"


def _is_loopback_host(host: str) -> bool:
    """True for localhost or a loopback address, bare (``::1``, ``127.0.0.1``), bracketed
    (``[::1]``) or with a port (``[::1]:8080``, ``127.0.0.1:8080``, ``localhost:8080``)."""
    for name in (host, host.rsplit(":", 1)[0]):  # the whole host first: a bare IPv6 address has colons
        name = name.strip("[]")
        if name == "localhost":
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            continue
    return False


def _is_ip_host(host: str) -> bool:
    """True for an IP address or localhost, bare, bracketed or with a port (not a DNS name)."""
    for name in (host, host.rsplit(":", 1)[0]):
        name = name.strip("[]")
        if name == "localhost":
            return True
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            continue
    return False


def check_within(seconds: float) -> Callable[[psycopg.Connection[Any]], None]:
    """Return a pool ``check`` that is ConnectionPool.check_connection answered within ``seconds``:
    a pooled connection to a server that stopped answering (its host down, a network partition,
    not a refused connection) waited for the answer until the kernel gave up on it, many minutes,
    and so did the page. Past ``seconds`` the connection is cut (a shutdown of its socket, which
    the waiting read sees at once) and closed, and the check fails: the pool replaces it."""

    def check(conn: psycopg.Connection[Any]) -> None:
        with _cut_at(conn, time.monotonic() + seconds, "dashboard"):  # (the exporter's cut)
            ConnectionPool.check_connection(conn)
        if conn.closed:  # (cut as its answer came: the connection is gone all the same)
            raise psycopg.OperationalError(f"the database did not answer within {seconds:g} s")

    return check


#: The SQLSTATEs of a statement the server gave up on: statement_timeout, lock_timeout.
BUSY_SQLSTATES = frozenset({"57014", "55P03"})


@contextmanager
def _bounded(conn: psycopg.Connection[Any], statement_timeout: str,
             lock_timeout: str) -> Iterator[psycopg.Connection[Any]]:
    """Run the block in a transaction of ``conn`` (autocommit, outside a transaction) whose first
    statement sets its statement_timeout and lock_timeout, for that transaction alone
    (set_config's is_local: the commit or rollback restores the session's).

    Every use of a database connection by a page, and each pass of the sampler, runs in one (as
    ``pgqueue metrics --timeout`` bounds its readings): a lock another session held on
    pgqueue's tables (LOCK TABLE, VACUUM FULL) made every page, and the sampler, wait for as long
    as it lasted, until the pool had no connection left for any page. Never for the session
    (the pool's ``configure`` set them once per connection): behind a transaction-mode pooler
    (PgBouncer pool_mode=transaction, RDS Proxy) the server connection goes to other clients
    between transactions, with whatever the session set, and the next transaction may run on
    another one. Not prepared either: such a pooler may not keep prepared statements. An error
    in the block aborts the transaction: a statement whose refusal a caller gets over (the
    counters, the sessions, the Spark consumers of a role that may not read them) runs in a
    transaction of its own, or a savepoint."""
    with conn.transaction():
        conn.execute("SELECT pg_catalog.set_config('statement_timeout', %(s)s, true), "
                     "pg_catalog.set_config('lock_timeout', %(l)s, true)",
                     {"s": statement_timeout, "l": lock_timeout}, prepare=False)
        yield conn


def create_app(options: Options, *, start_sampler: bool = True) -> Flask:
    """Return the dashboard's Flask application for ``options``.

    It opens a small connection pool (application_name ``pgqueue-dashboard``) and, with
    ``start_sampler``, the background sampler of the charts; ``app.extensions["pgqueue"]`` holds
    both (call :func:`close` to stop them).
    """
    app = Flask(__name__)
    app.config.update(
        # sessions last as long as the process unless the options give a key to share
        SECRET_KEY=options.secret_key or secrets.token_bytes(32),
        SESSION_COOKIE_NAME="pgqueue_dashboard",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        MAX_CONTENT_LENGTH=1024 * 1024,
        TEMPLATES_AUTO_RELOAD=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]  # series in the order they are made
    # (client_encoding UTF8 unless the DSN sets one: on a SQL_ASCII database the pages read
    # texts as bytes and the queue and dead-letter pages failed, as pgqueue's own connections did)
    conninfo = make_conninfo(options.dsn, application_name=APPLICATION_NAME, **utf8(options.dsn))
    # (check: a pooled connection the server ended, by a restart, idle_session_timeout or a
    # proxy, is replaced before a page uses it, where the next pages answered 500 Database error)
    # (reconnect_timeout: the pool's attempts to connect again back off, 1, 2, 4 ... s, for as long
    # as that: with its default of 5 minutes, after an outage of a minute or two the next attempt
    # was that far off, and pages waiting options.wait answered 503 for as long again after the
    # database was back. Given up as soon as a page would, the next page tries at once.)
    # (check_within, connect_timeout: a server that stops answering, rather than refusing, held a
    # page for minutes, and the pool's connection attempts, past its return, for up to 130 s)
    # (configure sets no session setting: the pages' timeouts are set in each transaction, by
    # database() below; it turns prepared statements off behind a pooler, as pgqueue._connect does)
    pool: ConnectionPool[Any] = ConnectionPool(conninfo, min_size=1, max_size=4, open=False, timeout=options.wait,
                                               kwargs={"autocommit": True,
                                                       **connect_timeout_kwargs(conninfo, math.ceil(options.wait))},
                                               configure=_connect.fit_for_pooler,
                                               name="pgqueue-dashboard", check=check_within(options.wait),
                                               reconnect_timeout=options.wait)
    pool.open(wait=False)
    # a statement that waits longer than options.wait, on a lock most likely, is given up: the
    # page answers "Database busy" (503) and its connection is free again; a sampler's pass
    # ends with its error, and so can the dashboard
    wait = f"{min(_MAX_TIMEOUT_MS, max(1, math.ceil(options.wait * 1000)))}ms"

    def bound(conn: psycopg.Connection[Any]) -> AbstractContextManager[Any]:
        return _bounded(conn, wait, wait)

    @contextmanager
    def sampler_bound(conn: psycopg.Connection[Any]) -> Iterator[None]:
        # (and a server that stops answering, its host gone or a network partition, has the
        # sampler's socket shut down a second past the timeout: the pass ends with its error,
        # which the page shows; it waited on the socket for as long as the kernel kept it, with
        # the charts stale and no error shown: a review. A pass longer than that, however it
        # spends the time, is given up as well, as README says; the pages are not cut)
        with _cut_at(conn, time.monotonic() + options.wait + CUT_AFTER, "dashboard sampler"), bound(conn):
            _connect.fit_for_pooler(conn)  # (once a connection, within the pass's limits)
            yield

    def sampler_connection() -> psycopg.Connection[Any]:
        return _connect.connect(conninfo, autocommit=True, pooler_check=False, **connect_timeout_kwargs(conninfo, 10))

    sampler = Sampler(sampler_connection, interval=options.sample_interval, history=options.history,
                      bound=sampler_bound)
    if start_sampler:
        sampler.start()
    failed_logins = FailedLogins()
    sessions = Sessions(app.permanent_session_lifetime.total_seconds())
    app.extensions["pgqueue"] = {"pool": pool, "sampler": sampler, "options": options,
                                 "failed_logins": failed_logins, "sessions": sessions}

    @contextmanager
    def database() -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in a transaction with the pages' statement_timeout and
        lock_timeout (:func:`_bounded`)."""
        with pool.connection() as conn, bound(conn):
            yield conn

    def privileges() -> Privileges:
        with database() as conn:
            row = conn.execute(_sql.PRIVILEGES).fetchone()
        assert row is not None
        return Privileges(str(row[0]), *(bool(v) for v in row[1:]))

    def writable(p: Privileges) -> bool:
        return not options.read_only and not p.read_only_transaction

    # -- guards ---------------------------------------------------------------------------

    def csrf_token() -> str:
        token = session.get("csrf")
        if not isinstance(token, str):
            token = session["csrf"] = secrets.token_urlsafe(32)
        return token

    @app.before_request
    def guard() -> BaseResponse | None:
        if options.loopback_only and not _is_loopback_host(request.host):
            abort(400, "this dashboard answers to localhost and loopback addresses only "
                       "(it was started without --host naming another address)")
        if options.ip_hosts_only and not _is_ip_host(request.host):
            abort(400, "this dashboard answers to IP addresses only: it runs without an access "
                       "token, so a name (which a DNS-rebinding page can take) is refused "
                       "(start it with --token to reach it by name)")
        if request.endpoint == "static":
            return None
        if options.token is not None and not _logged_in():
            client = client_key(request.remote_addr)
            given = request.args.get("token")
            header = request.headers.get("Authorization", "")
            bearer = header[7:] if header.startswith("Bearer ") else None
            login_post = request.endpoint == "login" and request.method == "POST"
            if login_post:
                # the login form of this dashboard's own page, not another site's: a page
                # elsewhere could otherwise post wrong tokens from the user's browser, which
                # count against the user's address and lock it out (nothing is counted here)
                _require_csrf()
            foreign = given is not None and request.headers.get("Sec-Fetch-Site", "none") not in ("none", "same-origin")
            if foreign:
                # a URL with a token that a page elsewhere made the browser load (an <img>, a
                # redirect; another port of this host is "same-site"): neither compared nor
                # counted, or such a page could lock the user's address out with wrong tokens.
                # The printed URL, typed, pasted or opened from a terminal, is "none"; browsers
                # that send no such header, and other clients, are taken at their word
                given = None
            if given is not None or bearer is not None:
                wait = failed_logins.attempt(client)  # (counted as wrong until found right)
                if wait is not None:  # too many wrong tokens: this one is not even compared
                    return _too_many(wait)
            elif login_post:  # (the login view counts its token, once the form is read)
                wait = failed_logins.retry_after(client)
                if wait is not None:
                    return _too_many(wait)
            if bearer is not None and _is_token(bearer):
                failed_logins.succeeded(client)
            elif given is not None and _is_token(given):
                failed_logins.succeeded(client)
                _log_in()
                # the page asked for, built from its route, and the query's other parameters
                # appended as they came (given to url_for as arguments, "endpoint" or "_method"
                # was a TypeError or BuildError: a 500, a review)
                rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
                target = url_for(request.endpoint, **(request.view_args or {})) if request.endpoint else url_for("index")
                return redirect(target + ("?" + urlencode(rest) if rest else ""))
            else:
                if login_post:
                    return None  # (the login view compares and counts)
                failed = given is not None or bearer is not None
                if request.path.startswith("/api/"):  # (an API client read the login page's HTML)
                    refusal = jsonify(error="wrong access token" if failed else
                                      FOREIGN_TOKEN if foreign else
                                      "an access token is needed: the header Authorization: Bearer TOKEN")
                    refusal.status_code = 401
                    refusal.headers["WWW-Authenticate"] = 'Bearer realm="pgqueue dashboard"'
                    return refusal
                return Response(render_template("login.html", failed=failed,
                                                foreign=FOREIGN_TOKEN if foreign else None,
                                                signed_out=request.args.get("signed_out") == "1"), 401)
        # past the Host check and the token: pages may tell what the database said (the sampler's
        # error names the server, the database and the role); the login page, and the refusal
        # of a foreign Host name (which a DNS-rebinding page can read), tell nothing
        g.trusted = True
        name = (request.view_args or {}).get("name")
        if isinstance(name, str) and "\x00" in name:  # (psycopg refuses it before the server sees it)
            raise InvalidQueueName(f"invalid queue name {name!r}", sqlstate="42602")
        # (a POST to a page that takes none, or to no page, changes nothing: it answers 405 or 404,
        # not "CSRF token missing", which no token would change)
        if request.method == "POST" and request.routing_exception is None:
            _require_csrf()
        return None

    def _require_csrf() -> None:
        """Abort with 400 unless the request carries the session's CSRF token (the form field or
        the X-CSRF-Token header)."""
        given = request.form.get(CSRF_FIELD) or request.headers.get("X-CSRF-Token") or ""
        expected = session.get("csrf")
        if not (isinstance(expected, str) and hmac.compare_digest(given.encode(), expected.encode())):
            abort(400, "the form's CSRF token is missing or stale: reload the page and try again")

    def _too_many(wait: int) -> BaseResponse:
        message = (f"Too many wrong access tokens from this address: try again in {wait} s "
                   f"({failed_logins.limit} within {failed_logins.window:g} s lock it out for "
                   f"{failed_logins.lockout:g} s)")
        response: BaseResponse
        if request.path.startswith("/api/"):
            response = jsonify(error=message)
            response.status_code = 429
        else:
            response = Response(render_template("login.html", locked=message), 429)
        response.headers["Retry-After"] = str(wait)
        return response

    def _is_token(given: str) -> bool:
        assert options.token is not None
        return hmac.compare_digest(given.encode(), options.token.encode())

    def _log_in() -> None:
        # a new session: its own id and login time, which a logout ends (Sessions)
        session.clear()
        session["auth"] = _token_mark()
        session["sid"] = secrets.token_urlsafe(16)
        session["since"] = time.time()

    def _token_mark() -> str:
        # what a login keeps in the session: a digest of the token it gave, so that a session
        # made with a token stops working when the token changes (a shared secret_key)
        assert options.token is not None
        return hmac.new(app.secret_key if isinstance(app.secret_key, bytes) else str(app.secret_key).encode(),
                        options.token.encode(), "sha256").hexdigest()

    def _logged_in() -> bool:
        """Whether the session cookie holds a login: with the token of now, not ended by a logout,
        nor older than the session lifetime (31 days)."""
        assert options.token is not None
        mark, sid, since = session.get("auth"), session.get("sid"), session.get("since")
        if (isinstance(mark, str) and hmac.compare_digest(mark, _token_mark()) and isinstance(sid, str)
                and isinstance(since, (int, float)) and sessions.valid(sid, float(since))):
            return True
        if "auth" in session:  # what does not hold any more goes from the cookie
            for key in ("auth", "sid", "since"):
                session.pop(key, None)
        return False

    @app.after_request
    def headers(response: BaseResponse) -> BaseResponse:
        response.headers["Content-Security-Policy"] = (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
            "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        if request.endpoint != "static":
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.context_processor
    def globals_() -> dict[str, Any]:
        return {"csrf_token": csrf_token, "fmt_age": format_ms, "fmt_time": _fmt_time, "version": __version__,
                "page_limit": PAGE_LIMIT,
                "options": options, "sample_error": sampler.error if g.get("trusted") else None,
                "signed_in": bool(g.get("trusted")) and options.token is not None and "sid" in session}

    @app.errorhandler(PgQueueError)
    def database_error(exc: PgQueueError) -> tuple[str | Response, int]:
        if isinstance(exc, (QueueNotFound, InvalidQueueName)):  # (a name no queue can have: none has it)
            title, detail, status = "No such queue", None, 404
        elif exc.sqlstate == "42501":
            title, status = "Permission denied", 403
            detail = (f"The dashboard connects as role {_role()}, which the database does "
                      "not allow this. Connect it as a role that may (docs/grants.sql).")
        elif exc.sqlstate in BUSY_SQLSTATES:
            title, status = "Database busy", 503
            detail = (f"The database did not run this page's statement within {options.wait:g} s, most likely "
                      "held by a lock another session has on pgqueue's tables (LOCK TABLE, VACUUM FULL, a long "
                      "migration); nothing was changed. Reload the page later.")
        elif exc.sqlstate == "PQ003":  # a requeue into a queue at its max_size: a refusal, not a fault
            title, detail, status = "Queue full", exc.hint, 409
        else:
            title, detail, status = "Database error", exc.hint, 500
        if request.path.startswith("/api/"):
            return jsonify(error=exc.message, detail=detail), status
        return render_template("error.html", title=title, message=exc.message, detail=detail), status

    @app.errorhandler(psycopg.Error)
    def psycopg_error(exc: psycopg.Error) -> tuple[str | Response, int]:
        return database_error(translate(exc))

    @app.errorhandler(PoolTimeout)
    def unreachable(exc: PoolTimeout) -> tuple[str | Response, int]:
        message = f"no connection to the database within {options.wait:g} s: {exc}"
        detail = "The dashboard keeps trying: reload the page later."
        if request.path.startswith("/api/"):  # (JSON, as the API's other errors)
            return jsonify(error=message, detail=detail), 503
        return render_template("error.html", title="Database unreachable", message=message, detail=detail), 503

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> tuple[str, int]:
        if request.path.startswith("/api/"):
            return jsonify(error=exc.description), exc.code or 500  # type: ignore[return-value]
        return render_template("error.html", title=exc.name, message=exc.description), exc.code or 500

    def _role() -> str:
        try:
            return privileges().role
        except Exception:
            return "(unknown)"

    # -- pages ----------------------------------------------------------------------------

    @app.route("/login", methods=["POST"])
    def login() -> BaseResponse:
        given = request.form.get("token", "")
        client = client_key(request.remote_addr)
        if options.token is not None:
            # checked again and counted now that the form is read: guard's check ran before
            # the body came, and many connections could have sent theirs meanwhile
            wait = failed_logins.attempt(client)
            if wait is not None:
                return _too_many(wait)
            if _is_token(given):
                failed_logins.succeeded(client)
                _log_in()
                return redirect(url_for("index"))
        return Response(render_template("login.html", failed=True), 401)

    @app.route("/logout", methods=["POST"])
    def logout() -> BaseResponse:
        # (a POST with the session's CSRF token, checked by guard; without a login, guard answers 401)
        sid, since = session.get("sid"), session.get("since")
        if isinstance(sid, str) and isinstance(since, (int, float)):
            sessions.end(sid, float(since))  # a copy of the cookie kept elsewhere stops working too
        session.clear()  # and the browser's is deleted
        return redirect(url_for("index", signed_out=1) if options.token is not None else url_for("index"), 303)

    @app.route("/")
    def index() -> str:
        p = privileges()
        with database() as conn:
            settings = list_queues(conn)
            stats = {s.queue: s for s in all_stats(conn)} if p.read_stats else {}
        leased, sessions, sessions_error = _workers(p, None)
        return render_template("index.html", p=p, writable=writable(p), settings=settings, stats=stats,
                               leased=leased, sessions=sessions, sessions_error=sessions_error,
                               spark=_spark(None))

    @app.route("/queues/<name>")
    def queue_page(name: str) -> str:
        p = privileges()
        peek_error = None
        pending: list[tuple[Any, Any]] = []
        with database() as conn:
            queue = Queue(conn, name)
            settings = queue.settings()
            stats = queue.stats() if p.read_stats else None
            if p.read_content:
                pending = peek_shown(conn, name, PAGE_LIMIT)
            else:
                peek_error = f"role {p.role} may not read message contents (SELECT on pgqueue.message.content)"
        counters = None
        try:
            with database() as conn:  # (a transaction of its own: a refusal aborts it)
                counters = Queue(conn, name).counters()
        except PgQueueError as exc:
            if exc.sqlstate != "42501":
                raise
        leased, sessions, sessions_error = _workers(p, name)
        return render_template("queue.html", p=p, writable=writable(p), name=name, settings=settings,
                               stats=stats, counters=counters, pending=pending, peek_error=peek_error,
                               leased=leased, sessions=sessions, sessions_error=sessions_error, spark=_spark(name),
                               now=datetime.now(timezone.utc))

    @app.route("/queues/<name>/dead")
    def dead_page(name: str) -> str:
        p = privileges()
        with database() as conn:
            Queue(conn, name).settings()  # 404 for an unknown queue
        if not p.read_dead:
            raise PgQueueError(f"permission denied: role {p.role} may not read pgqueue.dead_letters and pgqueue.queue",
                               sqlstate="42501")
        after, before = _page_args(request.args)
        with database() as conn:
            page = dead_letter_page(conn, name, PAGE_LIMIT, after=after, before=before)
            stats = Queue(conn, name).stats() if p.read_stats else None
        return render_template("dead.html", p=p, writable=writable(p), name=name, letters=page.letters, page=page,
                               stats=stats, done=_done(request.args), here=_page_values(after, before),
                               paged=after is not None or page.previous is not None)

    @app.route("/queues/<name>/dead/<action>", methods=["POST"])
    def dead_action(name: str, action: str) -> BaseResponse | tuple[str, int] | str:
        if action not in ("requeue", "purge"):
            abort(404)
        p = privileges()
        if options.read_only:
            abort(403, "the dashboard runs in read-only mode (--read-only): it changes nothing")
        if p.read_only_transaction:
            abort(403, "the database session is read-only: nothing can be changed from here")
        if not (p.requeue if action == "requeue" else p.purge):
            raise PgQueueError(f"permission denied: role {p.role} may not {action} dead letters", sqlstate="42501")
        every = request.form.get("all") == "1"
        try:
            ids = sorted({int(v) for v in request.form.getlist("id")})
        except ValueError:
            abort(400, "dead letter ids are integers")
        if ids and not 1 <= ids[0] <= ids[-1] <= _BIGINT_MAX:  # (out of range: a 500, "bigint out of range")
            abort(400, "dead letter ids are integers from 1 to 9223372036854775807")
        if not every and not ids:
            abort(400, "choose dead letters (or all of them) first")
        here = _page_values(*_page_args(request.form))  # the page of dead letters to go back to
        def confirmation(changed: tuple[int, int] | None = None) -> tuple[str, int] | str:
            upto = counted = ids_hash = None
            if every:  # the newest death this page sees bounds what the confirmation acts on
                if not p.read_dead:
                    raise PgQueueError(f"permission denied: role {p.role} may not read pgqueue.dead_letters and pgqueue.queue",
                                       sqlstate="42501")
                with database() as conn:
                    Queue(conn, name).settings()  # 404 for an unknown queue
                # (without the pages' statement_timeout, as the action it confirms: a count of
                # tens of millions of letters takes longer, and "all" could not be confirmed)
                with _unbounded() as conn:
                    row = conn.execute(_sql.DEAD_NEWEST, {"queue": name}).fetchone()
                upto = -1 if row is None or row[0] is None else int(row[0])  # -1: there were none
                counted = 0 if row is None else int(row[1])  # exactly what "all" acts on
                ids_hash = 0 if row is None else int(row[2])
            page = render_template("confirm.html", p=p, writable=True, name=name, action=action, ids=ids,
                                   every=every, upto=upto, dead=counted, ids_hash=ids_hash, here=here, changed=changed)
            return page if changed is None else (page, 409)

        if request.form.get("confirm") != "yes":
            return confirmation()
        newest = counted = ids_hash = 0  # (the "upto" of "all": the newest dead_at its confirmation counted)
        if every:
            try:
                newest, counted = int(request.form.get("upto", "")), int(request.form.get("counted", ""))
                ids_hash = int(request.form.get("ids_hash", ""))
            except ValueError:
                newest = -2
            # (-1: there were none; beyond the bigint range, or its end that + 1 passes, was a 500)
            if not -1 <= newest < _BIGINT_MAX or not 0 <= counted <= _BIGINT_MAX:
                abort(400, "this confirmation does not say which dead letters it counted: "
                           "go back to the dead letters and choose again")
        # one statement (after the count of "all"), in a transaction without the statement_timeout
        # of the pages: a purge of many letters runs to its end; a lock it waits for past
        # lock_timeout changes nothing
        changed: tuple[int, int] | None = None
        n = 0
        with _unbounded() as conn:
            queue = Queue(conn, name)
            if every:
                row = conn.execute(_sql.DEAD_COUNT_UPTO, {"queue": name, "upto": newest}).fetchone()
                now = (0, 0) if row is None else (int(row[0]), int(row[1]))
                if now != (counted, ids_hash):
                    changed = (counted, now[0])
            if changed is None:
                if every and action == "requeue":
                    row = conn.execute(_sql.DEAD_REQUEUE_UPTO, {"queue": name, "upto": newest}).fetchone()
                    n = 0 if row is None else int(row[0])
                elif every:
                    n = queue.purge_dead(None, before=newest + 1)  # dead_at < upto + 1
                elif action == "requeue":
                    n = queue.requeue_dead(ids)
                else:
                    n = queue.purge_dead(ids)
        if changed is not None:  # (the confirmation again, once this connection is back in the pool)
            return confirmation(changed=changed)
        values: dict[str, Any] = {"name": name, "done": "requeued" if action == "requeue" else "purged", "n": n,
                                  **here}
        return redirect(url_for("dead_page", **values), 303)

    @contextmanager
    def _unbounded() -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in a transaction without the pages' statement_timeout (none: '0'),
        with their lock_timeout (:func:`_bounded`)."""
        with pool.connection() as conn, _bounded(conn, "0", wait):
            yield conn

    def _page_args(args: Any) -> tuple[Cursor | None, Cursor | None]:
        """The ``after`` and ``before`` of a request (400 if either is not a cursor)."""
        out: list[Cursor | None] = []
        for key in ("after", "before"):
            text = args.get(key)
            cursor = None if text is None or text == "" else parse_cursor(text)
            if text and cursor is None:
                abort(400, f"{key} is a dead letter's <dead_at>-<id>, as the page's links give it")
            out.append(cursor)
        return out[0], out[1]

    def _page_values(after: Cursor | None, before: Cursor | None) -> dict[str, Any]:
        if after is not None:
            return {"after": format_cursor(after)}
        return {} if before is None else {"before": format_cursor(before)}

    def _workers(p: Privileges, queue: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
        leased: list[dict[str, Any]] = []
        if p.read_stats:
            query = _sql.LEASED if p.read_attempts else _sql.LEASED_COUNTS_ONLY
            with database() as conn:
                # one more than a page shows: the page says "100+" only when there are more
                rows = conn.execute(query, {"queue": queue, "limit": PAGE_LIMIT + 1}).fetchall()
            leased = [{"id": r[0], "queue": r[1], "attempts": r[2], "remaining_ms": r[3] - r[5],
                       "age_ms": r[5] - r[4], "spark": r[3] == _sql.SPARK_CLAIM_LOCKED_UNTIL} for r in rows]
        sessions: list[dict[str, Any]] = []
        error = None
        try:
            with database() as conn:  # (a transaction of its own: a refusal aborts it)
                rows = conn.execute(_sql.SESSIONS, {"own": APPLICATION_NAME}).fetchall()
        except psycopg.Error as exc:
            error = translate(exc).message
            rows = []
        for r in rows:
            query = r[9] or ""
            listens = query[len('LISTEN "pgqueue.'):-1] if query.startswith('LISTEN "pgqueue.') else None
            if not p.read_content:
                # pg_read_all_stats (pg_monitor) shows other roles' statements whole: a payload a
                # client wrote as a literal too, which this role may not read
                query = _without_literals(query)
            if queue is not None and listens is not None and listens != queue:
                continue
            sessions.append({"pid": r[0], "application": r[1], "user": r[2], "client": r[3] or "local socket",
                             "started": r[4], "state": r[5], "since": r[6],
                             "wait": ":".join(x for x in (r[7], r[8]) if x), "query": query,
                             "listens": listens})
        return leased, sessions, error

    def _spark(queue: str | None) -> list[dict[str, Any]]:
        """The Spark consumers with open claims or a running query (none if the role may not see them)."""
        try:
            with database() as conn:  # (a transaction of its own: a refusal aborts it)
                rows = conn.execute(_sql.SPARK_CONSUMERS, {"queue": queue}).fetchall()
        except psycopg.errors.InsufficientPrivilege:
            return []
        return [{"queue": r[0], "consumer": r[1], "claims": r[2], "claimed": r[3],
                 "oldest_ms": None if r[4] is None else r[6] - r[4], "active": r[5]}
                for r in rows if r[2] or r[5]]

    # -- JSON for the live parts of the pages ----------------------------------------------

    @app.route("/api/queues")
    def api_queues() -> Response:
        # The sampler's latest counts when they are fresh: one count of the queues per interval,
        # however many pages are open.
        samples = sampler.snapshot()
        if samples and time.time() - samples[-1].t < 2 * options.sample_interval + 1:
            stats = list(samples[-1].stats.values())
        elif privileges().read_stats:
            with database() as conn:
                stats = all_stats(conn)
        else:
            stats = []
        return jsonify(queues=[{"queue": s.queue, "ready": s.ready, "scheduled": s.scheduled, "leased": s.leased,
                                "dead": s.dead, "oldest_ready_age_ms": s.oldest_ready_age_ms,
                                "oldest_ready_age": format_ms(s.oldest_ready_age_ms)} for s in stats],
                       sampler_error=sampler.error)

    @app.route("/api/queues/<name>/dead")
    def api_dead(name: str) -> Response:
        """A page of a queue's dead letters, oldest first (``?limit=`` up to 100, ``?after=`` the
        ``next`` of the page before, ``?before=`` the ``previous`` of the page after)."""
        p = privileges()
        with database() as conn:
            Queue(conn, name).settings()  # 404 for an unknown queue
        if not p.read_dead:
            raise PgQueueError(f"permission denied: role {p.role} may not read pgqueue.dead_letters and pgqueue.queue",
                               sqlstate="42501")
        text = request.args.get("limit", str(PAGE_LIMIT))
        if not (text.isascii() and text.isdigit() and len(text) <= 3 and 1 <= int(text) <= PAGE_LIMIT):
            abort(400, f"limit is a number of dead letters from 1 to {PAGE_LIMIT}")
        after, before = _page_args(request.args)
        with database() as conn:
            page = dead_letter_page(conn, name, int(text), after=after, before=before)
        return jsonify(queue=name, dead_letters=[
            {"id": d.id, "dead_at": d.dead_at.isoformat(), "created_at": d.created_at.isoformat(),
             "attempts": d.attempts, "last_error": d.last_error, "content_type": d.content_type,
             "size": shown.size, "payload": {"kind": shown.kind, "text": shown.text, "shown_bytes": shown.shown_bytes,
                                             "truncated": shown.truncated, "note": shown.note}}
            for d, shown in page.letters], next=page.next, previous=page.previous)

    @app.route("/api/history")
    def api_history() -> Response:
        queue = request.args.get("queue") or None
        samples = sampler.snapshot(MAX_POINTS)
        source, rates = throughput_series(samples, queue)
        shared = sorted(samples[-1].shared if samples else ())
        if queue is not None:
            shared = [q for q in shared if q == queue]
        return jsonify(queue=queue, interval=options.sample_interval, history=options.history,
                       depth=depth_series(samples, queue), oldest=oldest_series(samples, queue),
                       throughput=rates, throughput_source=source,
                       shared_counters=shared, sampler_error=sampler.error)

    return app


def close(app: Flask) -> None:
    """Stop the sampler and close the pool of an application made by :func:`create_app`."""
    parts: dict[str, Any] = app.extensions["pgqueue"]
    parts["sampler"].stop()
    parts["pool"].close()


ServeCallback = Callable[[str], None]
