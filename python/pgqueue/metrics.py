"""Prometheus metrics: the queues' (``pgqueue metrics``) and a worker's own (``pgqueue worker
--metrics-port``), in the text exposition format (version 0.0.4), written here: nothing to
install.

Queue metrics (:class:`QueueMetrics`), per queue:

- ``pgqueue_queue_messages{queue, state}``: ready (expired leases included), scheduled, leased
  and dead, from ``pgqueue.queue_stats`` at each scrape (exact up to 10,000, estimated from a
  block sample of the table above);
- ``pgqueue_queue_oldest_ready_age_seconds{queue}``: how long the ready message that has waited
  longest has waited, an expired lease since it ran out (0 when none is ready);
- ``pgqueue_queue_created_timestamp_seconds{queue}``: when the queue was created (``queue_list``),
  which changes when a queue is dropped and created again under its name: its counters started
  again at zero, which a scrape may not see as a decrease;
- the counters of ``pgqueue.queue_counters``: ``pgqueue_messages_enqueued_total``,
  ``pgqueue_messages_delivered_total``, ``pgqueue_messages_completed_total``,
  ``pgqueue_messages_failed_total``, ``pgqueue_messages_dead_lettered_total`` and
  ``pgqueue_leases_expired_total``, with ``pgqueue_queue_counters_shared``;
- ``pgqueue_up`` (1 if the scrape read the database within its timeout) and
  ``pgqueue_scrape_duration_seconds``.

Worker metrics (:class:`WorkerMetrics`): ``pgqueue_worker_handled_total`` (handlers that
finished), ``pgqueue_worker_failed_total`` (of those, the ones that raised or timed out),
``pgqueue_worker_messages_total{outcome}`` (completed, retried, dead, released),
``pgqueue_worker_lost_total`` (finished after the lease ran out), the histogram
``pgqueue_worker_handler_duration_seconds`` and the gauge ``pgqueue_worker_in_flight``.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_attempts, conninfo_to_dict, make_conninfo

from pgqueue import _connect
from pgqueue.client import all_counters, all_stats, list_queues
from pgqueue.compat import check_server
from pgqueue.errors import ConnectionFailed, PgQueueError, conninfo_error, one_line, quoted, translating
from pgqueue.message import QueueCounters, QueueSettings, QueueStats
from pgqueue.worker import Result

__all__ = ["CONTENT_TYPE", "MetricsServer", "QueueMetrics", "WorkerMetrics", "render"]

log = logging.getLogger("pgqueue.metrics")

#: The Content-Type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Handler duration buckets, in seconds.
DURATION_BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                                       300.0)

Labels = tuple[tuple[str, str], ...]

_MAX_TIMEOUT_MS = 2**31 - 1  # the server's statement_timeout: an integer of milliseconds
#: The longest QueueMetrics timeout, in seconds (2147483.647): the longest statement_timeout.
MAX_TIMEOUT = _MAX_TIMEOUT_MS / 1000
#: The longest QueueMetrics min_interval, in seconds (an hour): longer, a reading is served for
#: longer than any scraper's interval, and a huge one (1e300) froze the answer for good, a dead
#: database's pgqueue_up 1 included, as the refused inf did (a review).
MAX_MIN_INTERVAL = 3600.0


@dataclass
class Family:
    """One metric with its HELP and TYPE lines and its samples (name suffix, labels, value)."""

    name: str
    kind: str  # counter, gauge or histogram
    help: str
    samples: list[tuple[str, Labels, float]] = field(default_factory=list)

    def add(self, value: float, labels: Labels = (), suffix: str = "") -> None:
        self.samples.append((suffix, labels, value))


def _escape(value: str) -> str:
    """Escape a label value: backslash, double quote and line feed."""
    return _escape_help(value).replace('"', '\\"')


def _escape_help(text: str) -> str:
    """Escape a HELP text: backslash and line feed only (a parser rejects any other escape)."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 2**63:
        return str(int(value))
    return repr(float(value))


def render(families: Iterable[Family]) -> str:
    """Return families in the text exposition format."""
    out: list[str] = []
    for f in families:
        out.append(f"# HELP {f.name} {_escape_help(f.help)}")
        out.append(f"# TYPE {f.name} {f.kind}")
        for suffix, labels, value in f.samples:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            out.append(f"{f.name}{suffix}{{{text}}} {_number(value)}" if text else f"{f.name}{suffix} {_number(value)}")
    return "\n".join(out) + "\n"


# -- queue metrics --------------------------------------------------------------------------

_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("enqueued", "pgqueue_messages_enqueued_total", "Messages enqueued since the queue was created"),
    ("delivered", "pgqueue_messages_delivered_total", "Messages handed out by a dequeue (lease or delete mode)"),
    ("completed", "pgqueue_messages_completed_total", "Leased messages completed"),
    ("failed", "pgqueue_messages_failed_total", "Failed attempts that will be retried"),
    ("dead_lettered", "pgqueue_messages_dead_lettered_total", "Messages moved to the dead letters"),
    ("expired", "pgqueue_leases_expired_total", "Leases that ran out before their holder acknowledged them"),
)


def queue_families(stats: Sequence[QueueStats], counters: Sequence[QueueCounters] | None,
                   settings: Sequence[QueueSettings] | None = None) -> list[Family]:
    """Return the queue metrics for what ``queue_stats``, ``queue_counters`` and ``queue_list``
    returned."""
    messages = Family("pgqueue_queue_messages", "gauge",
                      "Messages of the queue by state (queue_stats: exact up to 10,000, else estimated from a "
                      "block sample; ready includes expired leases)")
    age = Family("pgqueue_queue_oldest_ready_age_seconds", "gauge",
                 "How long the ready message that has waited longest has waited, an expired lease since it ran "
                 "out (0 when none is ready)")
    for s in stats:
        for state in ("ready", "scheduled", "leased", "dead"):
            messages.add(getattr(s, state), (("queue", s.queue), ("state", state)))
        age.add((s.oldest_ready_age_ms or 0) / 1000.0, (("queue", s.queue),))
    families = [messages, age]
    if settings is not None:
        # A queue dropped and created again under its name starts its counters at zero; a scrape
        # that comes after they passed the old values sees them go up, not a reset. This changes.
        created = Family("pgqueue_queue_created_timestamp_seconds", "gauge",
                         "When the queue was created (Unix time): a change means it was dropped and created "
                         "again, its counters started again at zero")
        for t in settings:
            created.add(t.created_at.timestamp(), (("queue", t.queue),))
        families.append(created)
    if counters is not None:
        for attr, name, text in _COUNTERS:
            f = Family(name, "counter", text + " (counted with sequences: a rolled-back call stays counted)")
            for c in counters:
                f.add(getattr(c, attr), (("queue", c.queue),))
            families.append(f)
        shared = Family("pgqueue_queue_counters_shared", "gauge",
                        "1 if another queue counts on the same lock stripe (more than 64 queues): its counters "
                        "are then the sum of both")
        for c in counters:
            shared.add(1 if c.shared else 0, (("queue", c.queue),))
        families.append(shared)
    return families


def _check_real(name: str, value: object) -> None:
    """Refuse a value that is not an int or a float (a bool, a str, None) with a TypeError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {quoted(value)}")


def _checked_buckets(buckets: Sequence[float]) -> tuple[float, ...]:
    """The histogram's upper bounds, sorted: finite numbers, each once (the +Inf bucket is always
    added). Duplicates, NaN or infinities made a histogram that Prometheus refuses or misreads
    (two buckets of one bound; a NaN bound counted nothing)."""
    if isinstance(buckets, (str, bytes)) or not isinstance(buckets, Sequence):
        raise TypeError(f"buckets must be a sequence of numbers, got {type(buckets).__name__}")
    bounds: list[float] = []
    for b in buckets:
        _check_real("each bucket", b)
        try:
            bound = float(b)
        except OverflowError:  # an int beyond a float's range
            bound = math.inf
        if not math.isfinite(bound):
            raise ValueError(f"buckets must be finite numbers (+Inf is always added), got {quoted(b)}")
        bounds.append(bound)
    bounds.sort()
    twice = [b for a, b in zip(bounds, bounds[1:]) if a == b]
    if twice:
        raise ValueError(f"buckets must each be given once, got {twice[0]!r} twice")
    return tuple(bounds)


class QueueMetrics:
    """The metrics of every queue of a database, read at each scrape over one connection.

    Scrapes closer together than ``min_interval`` seconds get the previous answer, so that many
    scrapers cost what one does. A role that may read the queues but not the counters (no
    SELECT on ``pgqueue.counter_*``) gets the queue gauges only.

    A reading gives up after ``timeout`` seconds (the server's ``statement_timeout``, set in the
    reading's transaction alone: pgqueue makes no session setting, which a transaction-mode
    pooler would lend to other clients; and the connection attempt's ``connect_timeout`` unless
    the DSN sets one, shared out among the hosts of a DSN of several) and reports
    ``pgqueue_up 0``: without it a scrape waiting on a lock (``VACUUM FULL`` or ``LOCK TABLE``
    of ``pgqueue.message``) or on a connection attempt nobody answers waited as long as they
    did, and every later scrape queued behind it. A server that stops answering on the open
    connection (a network path that drops packets, a stalled proxy, a hung host) never sends the
    statement_timeout's error: :data:`CUT_AFTER` seconds after the timeout the reading shuts the
    connection's socket down itself (the next reading opens a new connection). Keep ``timeout``
    below the scraper's own (10 s in Prometheus by default) less that second. It is at most
    :data:`MAX_TIMEOUT` seconds, the longest ``statement_timeout`` the server takes (a longer one
    would make every scrape fail).

    ``min_interval`` is a number of seconds from 0 to :data:`MAX_MIN_INTERVAL` and ``timeout``
    one > 0 (ValueError; TypeError for what is not an int or a float). Scrapes that wait while
    a reading is under way (another scrape's) get that reading, whatever ``min_interval`` is:
    with 0, five scrapes of a database that did not answer waited one timeout each, in turn,
    the last past Prometheus's scrape timeout (a review).
    """

    def __init__(self, dsn: str, *, min_interval: float = 1.0, timeout: float = 5.0) -> None:
        _check_real("timeout", timeout)
        # (the first bound before the product: 1e306 * 1000 is inf, whose ceil raised OverflowError)
        if not (0 < timeout <= _MAX_TIMEOUT_MS and math.ceil(timeout * 1000) <= _MAX_TIMEOUT_MS):
            raise ValueError(f"timeout must be > 0 seconds and at most {MAX_TIMEOUT}, got {quoted(timeout)}")
        # (-5 or NaN read the database at every scrape; inf never again after the first)
        _check_real("min_interval", min_interval)
        if not 0 <= min_interval <= MAX_MIN_INTERVAL:
            raise ValueError(f"min_interval must be a number of seconds from 0 to {MAX_MIN_INTERVAL:g}, "
                             f"got {quoted(min_interval)}")
        self._dsn = dsn
        self._min_interval = min_interval
        self._timeout = timeout
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._reused: bool | None = None  # whether the reading under way uses a kept connection
        self._cached: tuple[float, str] | None = None
        self._error: str | None = None

    @property
    def error(self) -> str | None:
        """Why the last reading failed (it reported ``pgqueue_up 0``), or None if it read the database."""
        return self._error

    def render(self) -> str:
        """Return the metrics text, reading the database unless the last read is recent."""
        arrived = time.monotonic()
        with self._lock:
            now = time.monotonic()
            # (a reading that ended after this scrape arrived: it waited for that one)
            if self._cached is not None and (now - self._cached[0] < self._min_interval
                                             or self._cached[0] >= arrived):
                return self._cached[1]
            text = render(self._collect())
            self._cached = (time.monotonic(), text)
            return text

    def _collect(self) -> list[Family]:
        started = time.monotonic()
        up = Family("pgqueue_up", "gauge", "1 if this scrape read the database, else 0")
        took = Family("pgqueue_scrape_duration_seconds", "gauge", "How long reading the database took")
        families: list[Family] = []
        deadline = started + self._timeout + CUT_AFTER
        try:
            try:
                stats, settings, counters = self._read(deadline)
            except ConnectionFailed:
                # the connection kept from the last reading was lost meanwhile (a restart of the
                # server, a failover, an idle timeout): one more try on a new one, in the time left
                if self._reused is False or time.monotonic() + self._connect_timeout() > deadline:
                    raise  # (a new connection might not be made before the deadline)
                self._close()
                stats, settings, counters = self._read(deadline)
            families = queue_families(stats, counters, settings)
            up.add(1)
            self._error = None
        except (PgQueueError, psycopg.Error, OSError) as exc:
            if isinstance(exc, psycopg.ProgrammingError) and exc.sqlstate is None:
                # the DSN does not parse: libpq's message may quote it, password included
                self._error = f"invalid connection string: {conninfo_error(exc, self._dsn)}"
            else:
                self._error = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            log.warning("metrics: cannot read the database: %s", self._error)
            self._close()
            up.add(0)
        took.add(time.monotonic() - started)
        return [up, took, *families]

    def _connect_timeout(self) -> int:
        """The connect_timeout of the reading's connections (unless the DSN sets one): the
        reading's timeout in whole seconds, at least 2 (libpq's least). Not $PGCONNECT_TIMEOUT:
        a reading must end within its timeout."""
        given = conninfo_to_dict(self._dsn).get("connect_timeout")
        if given is not None:
            try:
                return max(2, int(str(given)))
            except ValueError:
                pass
        return max(2, math.ceil(self._timeout))

    def _read(self, deadline: float) -> tuple[list[QueueStats], list[QueueSettings], list[QueueCounters] | None]:
        self._reused = self._conn is not None and not self._conn.closed
        conn = self._connection(deadline)
        with _cut_at(conn, deadline), self._bounded(conn):
            stats = all_stats(conn)
            settings = list_queues(conn)
            try:
                # (a savepoint: a refusal would abort the reading's transaction, and the commit
                # with it)
                with translating(), conn.transaction():
                    counters: list[QueueCounters] | None = all_counters(conn)
            except PgQueueError as exc:
                if exc.sqlstate != "42501":  # a role that may not read the counters: gauges only
                    raise
                counters = None
        return stats, settings, counters

    @contextmanager
    def _bounded(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Run the block in a transaction of ``conn`` whose first statement sets its
        statement_timeout to the reading's timeout, for that transaction alone (set_config's
        is_local: its end restores the session's). Never for the session: behind a
        transaction-mode pooler (PgBouncer pool_mode=transaction, RDS Proxy) the server
        connection goes to other clients between transactions, with whatever the session set,
        and the next transaction may run on another one (not prepared either: such a pooler may
        not keep prepared statements)."""
        with translating(), conn.transaction():
            conn.execute("SELECT pg_catalog.set_config('statement_timeout', %s, true)",
                         (f"{math.ceil(self._timeout * 1000)}ms",), prepare=False)
            yield

    def connect(self) -> None:
        """Open the reading connection now, as a reading would (its timeouts, pgqueue's version
        checked), and keep it for the next reading; raise what that raises (psycopg errors as
        they are, a database without pgqueue or with another version as
        :class:`~pgqueue.errors.ExtensionNotInstalled` / ``VersionMismatch``)."""
        with self._lock:
            self._connection(time.monotonic() + self._timeout + CUT_AFTER)

    def _connection(self, deadline: float) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            conn = self._connect(deadline)
            try:
                with _cut_at(conn, deadline), self._bounded(conn):
                    _connect.fit_for_pooler(conn)  # (within the reading's limits, as the rest)
                    # each new connection: the database may have changed (restored, upgraded)
                    # since the last one, or been out of reach when the command started
                    check_server(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _connect(self, deadline: float) -> psycopg.Connection[Any]:
        """Open the reading's connection. Unless the DSN sets a connect_timeout, a DSN of several
        hosts (or a name of several addresses) is tried one host at a time within the reading's
        deadline (its timeout and :data:`CUT_AFTER`): each host an equal share of what is left, at
        most :meth:`_connect_timeout` and at least 2 s (libpq's least connect_timeout), and a
        next host only while 2 s are left. (libpq and psycopg give each host the whole
        connect_timeout: three hosts that did not answer took three timeouts, a review.)"""
        params = conninfo_to_dict(self._dsn)
        if "connect_timeout" in params:
            return _connect.connect(self._dsn, autocommit=True, application_name="pgqueue-metrics",
                                    pooler_check=False)  # (in the reading's limits: _connection)
        attempts = _resolved(params, deadline)  # (a name that does not resolve raises here, as connect does)
        failures: list[psycopg.OperationalError] = []
        most = self._connect_timeout()
        for i, attempt in enumerate(attempts):
            left = deadline - time.monotonic() + _SLACK  # (the last host's 2 s may end _SLACK late)
            if i and left < 2:
                break
            # an equal share of what is left to each host not tried yet
            timeout = min(most, max(2, math.floor(left / (len(attempts) - i))))
            try:
                return _connect.connect(make_conninfo("", **attempt), autocommit=True, pooler_check=False,
                                        application_name="pgqueue-metrics", connect_timeout=timeout)
            except psycopg.OperationalError as exc:
                failures.append(exc)
        if len(failures) == 1 and len(attempts) == 1:
            raise failures[0]
        where = [f"{a.get('host') or a.get('hostaddr') or 'the default host'}:{a.get('port') or 'the default port'}"
                 for a in attempts]
        lines = [f"connection attempts failed: {len(failures)} of {len(attempts)} hosts tried within the "
                 "reading's timeout"]
        lines += [f"- {w}: {one_line(str(e))}" for w, e in zip(where, failures)]
        raise psycopg.OperationalError("\n".join(lines)) from failures[-1]

    def close(self) -> None:
        """Close the connection (the next scrape opens a new one). A reading in progress on
        another thread ends first (within its timeout, plus :data:`CUT_AFTER`)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _resolved(params: dict[str, Any], deadline: float) -> list[dict[str, Any]]:
    """psycopg's ``conninfo_attempts`` (the host names resolved), given up at ``deadline``: it
    runs on a thread of its own, left to end by itself when the deadline comes first. A
    resolver that did not answer held the reading for its own timeouts (10 s with glibc's
    defaults, 20 s with two name servers) past the reading's, and every scrape queued behind
    it (a review)."""
    got: list[list[dict[str, Any]] | BaseException] = []
    done = threading.Event()

    def resolve() -> None:
        try:
            got.append(conninfo_attempts(params))
        except BaseException as exc:  # (handed to the reading)
            got.append(exc)
        finally:
            done.set()

    threading.Thread(target=resolve, name="pgqueue-metrics-resolve", daemon=True).start()
    if not done.wait(max(0.0, deadline - time.monotonic())):
        hosts = params.get("host") or "the host"
        raise psycopg.OperationalError(f"resolving {hosts} did not end within the reading's timeout")
    result = got[0]
    if isinstance(result, BaseException):
        raise result
    return result


#: How late past its deadline a reading's last connection attempt may end: the time spent
#: between attempts, which the whole seconds of connect_timeout do not allow for.
_SLACK = 0.05

#: Seconds the endpoint waits on a client's socket (for its request, or for room to write the
#: answer) before it drops the connection. A client that connected and sent nothing (a port
#: scan, a probe that only opens the port, a peer gone without closing) held a thread and a file
#: descriptor for ever; enough of them and accept() failed on every new connection: no scrape
#: was answered and the serving thread spun a core. Not the reading's time: only the socket's.
CLIENT_TIMEOUT = 30.0

#: Seconds a client has to send its whole request (the request line and every header), however
#: it spreads the bytes: CLIENT_TIMEOUT bounds each wait alone, so a client that sent a byte
#: every 29 s (slowloris) held a thread and a descriptor for as long as it kept on. After this
#: the connection is shut down and dropped.
REQUEST_DEADLINE = 60.0

#: Seconds past a reading's timeout after which it shuts its connection's socket down (a server
#: that answers sends the statement_timeout's error by then).
CUT_AFTER = 1.0


@contextmanager
def _cut_at(conn: psycopg.Connection[Any], deadline: float, who: str = "metrics") -> Iterator[None]:
    """Shut ``conn``'s socket down if the block still runs at ``deadline`` (time.monotonic()):
    a read blocked on a server that stopped answering then fails at once with a lost
    connection, which the reading reports as ``pgqueue_up 0``. Never after the block ended;
    a connection cut while the block ended anyway (its last answer came in time) is closed, so
    that the next reading connects again.

    The socket is a duplicate of libpq's descriptor, taken here, by the thread that owns the
    connection: shutdown() acts on the connection both share, and the duplicate stays that
    connection's even if libpq closes its own descriptor meanwhile (its number may then name
    another socket of the process). ``who`` names the reader in the warning a cut logs (the
    dashboard's pool checks its connections with it too)."""
    sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    lock = threading.Lock()
    ended = False
    fired = False

    def cut() -> None:
        nonlocal fired
        with lock:
            if ended:
                return
            fired = True
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # (the connection ended already)
                pass
        log.warning("%s: the database did not answer within the timeout: connection cut", who)

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            ended = True
        timer.cancel()
        sock.close()  # the duplicate only: libpq still owns and closes its own
        if fired:
            conn.close()


# -- worker metrics -------------------------------------------------------------------------


class WorkerMetrics:
    """A worker's own metrics, fed by its ``on_result`` hook.

    ``Worker(queue, handler, on_result=metrics.observe)``, with ``in_flight`` reading the
    worker's :attr:`~pgqueue.Worker.in_flight` (set it after the worker exists). ``then``
    is called with each result after it is counted (another ``on_result`` hook). ``buckets``
    are the handler-duration histogram's upper bounds in seconds: finite numbers, each once, in
    any order (the ``+Inf`` bucket is added); others raise ValueError or TypeError.
    """

    def __init__(self, queue: str, *, in_flight: Callable[[], int] | None = None,
                 then: Callable[[Result], None] | None = None,
                 buckets: Sequence[float] = DURATION_BUCKETS) -> None:
        self.queue = queue
        self.in_flight = in_flight
        self._then = then
        self._buckets = _checked_buckets(buckets)
        self._lock = threading.Lock()
        self._outcomes: dict[str, int] = {"completed": 0, "retried": 0, "dead": 0, "released": 0}
        self._handled = 0
        self._failed = 0
        self._lost = 0
        self._counts = [0] * (len(self._buckets) + 1)
        self._sum = 0.0

    def observe(self, result: Result) -> None:
        """Count one settled delivery (use as the worker's ``on_result``)."""
        with self._lock:
            self._outcomes[result.outcome] = self._outcomes.get(result.outcome, 0) + 1
            if result.outcome != "released":  # given back at shutdown: its handler may not have finished
                self._handled += 1
                self._failed += result.error is not None
                self._lost += not result.acknowledged
                i = next((i for i, b in enumerate(self._buckets) if result.duration <= b), len(self._buckets))
                self._counts[i] += 1
                self._sum += result.duration
        if self._then is not None:
            self._then(result)

    def families(self) -> list[Family]:
        """Return the worker's metrics."""
        q = (("queue", self.queue),)
        with self._lock:
            handled = Family("pgqueue_worker_handled_total", "counter", "Messages whose handler finished")
            handled.add(self._handled, q)
            failed = Family("pgqueue_worker_failed_total", "counter",
                            "Messages whose handler raised or timed out (retried or dead-lettered)")
            failed.add(self._failed, q)
            outcomes = Family("pgqueue_worker_messages_total", "counter",
                              "Settled deliveries by outcome (lost leases included: see pgqueue_worker_lost_total)")
            for outcome, n in sorted(self._outcomes.items()):
                outcomes.add(n, (*q, ("outcome", outcome)))
            lost = Family("pgqueue_worker_lost_total", "counter",
                          "Handlers that finished after their lease ran out (the message was delivered again)")
            lost.add(self._lost, q)
            duration = Family("pgqueue_worker_handler_duration_seconds", "histogram", "How long handlers ran")
            cumulative = 0
            for bound, n in zip((*self._buckets, math.inf), self._counts):
                cumulative += n
                duration.add(cumulative, (*q, ("le", _number(bound))), "_bucket")
            duration.add(self._sum, q, "_sum")
            duration.add(cumulative, q, "_count")
        flight = Family("pgqueue_worker_in_flight", "gauge", "Messages the worker holds right now")
        flight.add(self.in_flight() if self.in_flight is not None else 0, q)
        return [handled, failed, outcomes, lost, duration, flight]

    def render(self) -> str:
        """Return the worker's metrics text."""
        return render(self.families())


# -- the HTTP endpoint ----------------------------------------------------------------------


def _is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    # ::ffff:127.0.0.1 is loopback too, which Python 3.11's is_loopback does not say: such a
    # listener went without the Host check, open to DNS rebinding (a review)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def _host_name(header: str) -> str:
    """The name in a Host header (or a --host value), without its port and brackets, lower case,
    and an IP address in its canonical form (``0:0:0:0:0:0:0:1`` is ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):  # [::1] or [::1]:9601
        name = header[1:header.find("]")] if "]" in header else header
    else:
        name, _, port = header.rpartition(":")
        if not (name and port.isdigit() and ":" not in name):
            name = header
        name = name.rstrip(".")
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


#: Seconds the endpoint waits after accept() failed for want of a file descriptor (or of
#: memory) before it tries again: the listening socket stays readable meanwhile, and the serving
#: thread spun a core until a descriptor was free (a flood of connections past the file limit).
ACCEPT_PAUSE = 0.1


class _Server(ThreadingHTTPServer):
    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                log.debug("metrics: accept() failed (%s): trying again in %g s", e, ACCEPT_PAUSE)
                time.sleep(ACCEPT_PAUSE)
            raise  # (socketserver drops the attempt)


class MetricsServer:
    """Serve ``render()`` at ``/metrics`` (and ``/``) over HTTP on a background thread.

    ``port`` 0 picks a free port (see :attr:`port`); ``host`` may be an IPv6 address (``::1``,
    ``::``). Use as a context manager, or call :meth:`close`. GET and HEAD are answered; a
    client that sends no request or reads no answer for :data:`CLIENT_TIMEOUT` seconds is dropped.

    Listening on a loopback address (the default), it answers 421 to a request whose Host header
    names anything but ``localhost``, ``127.0.0.1``, ``[::1]`` or the address it listens on (with
    or without a port): a web page cannot read the metrics through a browser on this machine by
    pointing its own name at 127.0.0.1 (DNS rebinding). Listening on any other address, it answers
    whatever the Host header.
    """

    def __init__(self, render: Callable[[], str], *, host: str = "127.0.0.1", port: int = 0) -> None:
        produce = render

        class Handler(BaseHTTPRequestHandler):
            # (http.server drops a connection whose read or write times out: a debug log line)
            timeout = CLIENT_TIMEOUT

            def handle(self) -> None:
                # The whole request within REQUEST_DEADLINE: past it the socket is shut down,
                # and the read blocked on it ends (the timer is cancelled once the request is in)
                self._request_lock = threading.Lock()
                self._request_in = False
                timer = threading.Timer(REQUEST_DEADLINE, self._cut)
                timer.daemon = True
                timer.start()
                try:
                    super().handle()
                except (BrokenPipeError, ConnectionResetError) as e:  # the scraper gave up (its timeout)
                    log.debug("metrics: the client went away: %s", e)
                finally:
                    timer.cancel()

            def _cut(self) -> None:
                with self._request_lock:
                    if self._request_in:
                        return
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:  # (it ended already)
                        pass
                log.debug("metrics: no whole request within %g s: connection dropped", REQUEST_DEADLINE)

            def parse_request(self) -> bool:
                ok = super().parse_request()  # (reads the headers)
                with self._request_lock:
                    self._request_in = True  # the answer is not cut
                return ok

            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                self._answer(body_too=True)

            def do_HEAD(self) -> None:  # noqa: N802 (the http.server API)
                self._answer(body_too=False)

            def _not_allowed(self) -> None:
                # a method HTTP knows but the endpoint does not take: 405 and the methods it
                # does take (http.server answered 501 Unsupported method, which says the server
                # does not know the method at all); the body, if any, is not read
                if not self._host_allowed():
                    self.send_error(421, "this endpoint answers to localhost only")
                    return
                body = b"405 Method Not Allowed: the metrics are read with GET or HEAD\n"
                self.send_response(405)
                self.send_header("Allow", "GET, HEAD")
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                self.wfile.write(body)

            do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed  # noqa: N815

            def _answer(self, *, body_too: bool) -> None:
                if not self._host_allowed():
                    self.send_error(421, "this endpoint answers to localhost only")
                    return
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404, "try /metrics")
                    return
                try:
                    body = produce().encode()
                except Exception:  # a bug must not take the endpoint down
                    log.exception("metrics: rendering failed")
                    self.send_error(500)
                    return
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if body_too:
                    self.wfile.write(body)

            def _host_allowed(self) -> bool:
                """On a loopback address, only a Host header naming this machine: a web page whose
                name an attacker points at 127.0.0.1 (DNS rebinding) must not read the metrics."""
                if not loopback:
                    return True
                host = self.headers.get("Host")
                return host is None or _host_name(host) in allowed

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the http.server API)
                log.debug("metrics: " + format, *args)

        if host.startswith("[") and host.endswith("]"):  # [::1], as a URL writes it
            host = host[1:-1]
        server_class: type[ThreadingHTTPServer] = _Server
        if ":" in host:  # an IPv6 address such as ::1 or :: (http.server listens on IPv4 only)
            class _Server6(_Server):
                address_family = socket.AF_INET6
            server_class = _Server6
        self._server = server_class((host, port), Handler)
        bound = str(self._server.server_address[0])
        loopback = _is_loopback(bound)
        # ... and the name or address it was told to listen on, which the operator chose
        allowed = {"localhost", "127.0.0.1", "::1", _host_name(bound), _host_name(host)}
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="pgqueue-metrics", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The URL of the metrics."""
        host = str(self._server.server_address[0])
        return f"http://{'[' + host + ']' if ':' in host else host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
