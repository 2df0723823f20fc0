"""The dashboard's Flask application: pages, a small JSON API for the live parts, and the
guards (access token, CSRF, read-only mode, the role's privileges, loopback Host names)."""

from __future__ import annotations

import hmac
import ipaddress
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psycopg
from flask import Flask, Response, abort, g, jsonify, redirect, render_template, request, session, url_for
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool, PoolTimeout
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from pgqueue._core import dead_letter_from_row, pending_from_row
from pgqueue._version import __version__
from pgqueue.cli import connect_timeout_kwargs, format_ms
from pgqueue.client import Queue, all_stats, list_queues
from pgqueue.dashboard import _sql
from pgqueue.dashboard.payload import MAX_SHOWN, Shown, show
from pgqueue.dashboard.sampler import APPLICATION_NAME, Sampler, depth_series, oldest_series, throughput_series
from pgqueue.errors import PgQueueError, QueueNotFound, translate
from pgqueue.message import DeadLetter, Pending, to_datetime

#: Dead letters and peeked messages listed on a page.
PAGE_LIMIT = 100
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
    wait: float = 10.0  # seconds a page waits for a database connection before it says so
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
            out.append("browse dead letters (SELECT on pgqueue.dead_letters)")
        if not self.requeue:
            out.append("requeue dead letters (DELETE on pgqueue.dead_letter, INSERT on pgqueue.message)")
        if not self.purge:
            out.append("purge dead letters (DELETE on pgqueue.dead_letter)")
        if self.read_only_transaction:
            out.append("write at all: the session is read-only (default_transaction_read_only or a standby)")
        return out


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


def dead_letters_shown(conn: psycopg.Connection[Any], queue: str, limit: int) -> list[tuple[DeadLetter, Shown]]:
    """Return up to ``limit`` dead letters as ``Queue.dead_letters`` would, each with how the page
    shows its payload; only the first MAX_SHOWN bytes of each content are read (as
    :func:`peek_shown`)."""
    rows = conn.execute(_sql.DEAD_LETTERS_SHOWN, {"queue": queue, "limit": limit, "shown": MAX_SHOWN}).fetchall()
    out = []
    for row in rows:
        d = dead_letter_from_row(row)
        out.append((d, show(d.content, d.content_type, int(row[9]))))
    return out


def _done(args: Any) -> str | None:
    """The notice of ``?done=<action>&n=<count>`` (None for anything else)."""
    text, n = DONE.get(args.get("done", "")), args.get("n", "")
    return text.format(n=int(n)) if text is not None and n.isdigit() and len(n) < 19 else None


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
    conninfo = make_conninfo(options.dsn, application_name=APPLICATION_NAME)
    pool: ConnectionPool[Any] = ConnectionPool(conninfo, min_size=1, max_size=4, open=False, timeout=options.wait,
                                               kwargs={"autocommit": True}, name="pgqueue-dashboard")
    pool.open(wait=False)
    sampler = Sampler(lambda: psycopg.connect(conninfo, autocommit=True, **connect_timeout_kwargs(conninfo, 10)),
                      interval=options.sample_interval, history=options.history)
    if start_sampler:
        sampler.start()
    app.extensions["pgqueue"] = {"pool": pool, "sampler": sampler, "options": options}

    def privileges() -> Privileges:
        with pool.connection() as conn:
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
        if options.token is not None and not _authorised():
            given = request.args.get("token")
            if given is not None and hmac.compare_digest(given.encode(), options.token.encode()):
                session["auth"] = _token_mark()
                values: dict[str, Any] = {k: v for k, v in request.args.items() if k != "token"}
                values.update(request.view_args or {})
                return redirect(url_for(request.endpoint or "index", **values))
            if request.endpoint == "login" and request.method == "POST":
                return None
            return Response(render_template("login.html", failed=given is not None), 401)
        # past the Host check and the token: pages may tell what the database said (the sampler's
        # error names the server, the database and the role); the login page, and the refusal
        # of a foreign Host name (which a DNS-rebinding page can read), tell nothing
        g.trusted = True
        if request.method == "POST":
            given = request.form.get(CSRF_FIELD) or request.headers.get("X-CSRF-Token") or ""
            expected = session.get("csrf")
            if not isinstance(expected, str) or not hmac.compare_digest(given.encode(), expected.encode()):
                abort(400, "the form's CSRF token is missing or stale: reload the page and try again")
        return None

    def _token_mark() -> str:
        # what a login keeps in the session: a digest of the token it gave, so that a session
        # made with a token stops working when the token changes (a shared secret_key)
        assert options.token is not None
        return hmac.new(app.secret_key if isinstance(app.secret_key, bytes) else str(app.secret_key).encode(),
                        options.token.encode(), "sha256").hexdigest()

    def _authorised() -> bool:
        assert options.token is not None
        mark = session.get("auth")
        if isinstance(mark, str) and hmac.compare_digest(mark, _token_mark()):
            return True
        header = request.headers.get("Authorization", "")
        return header.startswith("Bearer ") and hmac.compare_digest(header[7:].encode(), options.token.encode())

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
                "options": options, "sample_error": sampler.error if g.get("trusted") else None}

    @app.errorhandler(PgQueueError)
    def database_error(exc: PgQueueError) -> tuple[str, int]:
        if isinstance(exc, QueueNotFound):
            return render_template("error.html", title="No such queue", message=exc.message), 404
        if exc.sqlstate == "42501":
            return render_template("error.html", title="Permission denied", message=exc.message,
                                   detail=f"The dashboard connects as role {_role()}, which the database does "
                                          "not allow this. Connect it as a role that may (docs/grants.sql)."), 403
        return render_template("error.html", title="Database error", message=exc.message, detail=exc.hint), 500

    @app.errorhandler(psycopg.Error)
    def psycopg_error(exc: psycopg.Error) -> tuple[str, int]:
        return database_error(translate(exc))

    @app.errorhandler(PoolTimeout)
    def unreachable(exc: PoolTimeout) -> tuple[str, int]:
        return render_template("error.html", title="Database unreachable",
                               message=f"no connection to the database within {options.wait:g} s: {exc}",
                               detail="The dashboard keeps trying: reload the page later."), 503

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
        if options.token is not None and hmac.compare_digest(given.encode(), options.token.encode()):
            session["auth"] = _token_mark()
            return redirect(url_for("index"))
        return Response(render_template("login.html", failed=True), 401)

    @app.route("/")
    def index() -> str:
        p = privileges()
        settings = list_queues(pool)
        stats = {s.queue: s for s in all_stats(pool)} if p.read_stats else {}
        leased, sessions, sessions_error = _workers(p, None)
        return render_template("index.html", p=p, writable=writable(p), settings=settings, stats=stats,
                               leased=leased, sessions=sessions, sessions_error=sessions_error,
                               spark=_spark(None))

    @app.route("/queues/<name>")
    def queue_page(name: str) -> str:
        p = privileges()
        queue = Queue(pool, name)
        settings = queue.settings()
        stats = queue.stats() if p.read_stats else None
        peek_error = None
        pending: list[tuple[Any, Any]] = []
        if p.read_content:
            with pool.connection() as conn:
                pending = peek_shown(conn, name, PAGE_LIMIT)
        else:
            peek_error = f"role {p.role} may not read message contents (SELECT on pgqueue.message.content)"
        counters = None
        try:
            counters = queue.counters()
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
        queue = Queue(pool, name)
        queue.settings()  # 404 for an unknown queue
        if not p.read_dead:
            raise PgQueueError(f"permission denied: role {p.role} may not read pgqueue.dead_letters",
                               sqlstate="42501")
        with pool.connection() as conn:
            letters = dead_letters_shown(conn, name, PAGE_LIMIT)
        stats = queue.stats() if p.read_stats else None
        return render_template("dead.html", p=p, writable=writable(p), name=name, letters=letters, stats=stats,
                               done=_done(request.args))

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
        if not every and not ids:
            abort(400, "choose dead letters (or all of them) first")
        queue = Queue(pool, name)
        if request.form.get("confirm") != "yes":
            upto = None
            if every:  # the newest death this page sees bounds what the confirmation acts on
                if not p.read_dead:
                    raise PgQueueError(f"permission denied: role {p.role} may not read pgqueue.dead_letters",
                                       sqlstate="42501")
                queue.settings()  # 404 for an unknown queue
                with pool.connection() as conn:
                    row = conn.execute(_sql.DEAD_NEWEST, {"queue": name}).fetchone()
                upto = -1 if row is None or row[0] is None else int(row[0])  # -1: there were none
                counted = 0 if row is None else int(row[1])  # exactly what "all" acts on
            return render_template("confirm.html", p=p, writable=True, name=name, action=action, ids=ids,
                                   every=every, upto=upto, dead=counted if every else None)
        if every:
            try:
                upto = int(request.form.get("upto", ""))
            except ValueError:
                abort(400, "this confirmation does not say which dead letters it counted: "
                           "go back to the dead letters and choose again")
            if action == "requeue":
                with pool.connection() as conn:
                    row = conn.execute(_sql.DEAD_REQUEUE_UPTO, {"queue": name, "upto": upto}).fetchone()
                n = 0 if row is None else int(row[0])
            else:
                n = queue.purge_dead(None, before=upto + 1)  # dead_at < upto + 1
        elif action == "requeue":
            n = queue.requeue_dead(ids)
        else:
            n = queue.purge_dead(ids)
        return redirect(url_for("dead_page", name=name, done="requeued" if action == "requeue" else "purged", n=n),
                        303)

    def _workers(p: Privileges, queue: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
        leased: list[dict[str, Any]] = []
        if p.read_stats:
            query = _sql.LEASED if p.read_attempts else _sql.LEASED_COUNTS_ONLY
            with pool.connection() as conn:
                rows = conn.execute(query, {"queue": queue, "limit": PAGE_LIMIT}).fetchall()
            leased = [{"id": r[0], "queue": r[1], "attempts": r[2], "remaining_ms": r[3] - r[5],
                       "age_ms": r[5] - r[4], "spark": r[3] == _sql.SPARK_CLAIM_LOCKED_UNTIL} for r in rows]
        sessions: list[dict[str, Any]] = []
        error = None
        try:
            with pool.connection() as conn:
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
            with pool.connection() as conn:
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
        else:
            stats = all_stats(pool) if privileges().read_stats else []
        return jsonify(queues=[{"queue": s.queue, "ready": s.ready, "scheduled": s.scheduled, "leased": s.leased,
                                "dead": s.dead, "oldest_ready_age_ms": s.oldest_ready_age_ms,
                                "oldest_ready_age": format_ms(s.oldest_ready_age_ms)} for s in stats],
                       sampler_error=sampler.error)

    @app.route("/api/history")
    def api_history() -> Response:
        queue = request.args.get("queue") or None
        samples = sampler.snapshot()
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
