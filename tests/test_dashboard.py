"""`pgqueue dashboard`: its pages and JSON over a real database, through Flask's test client
and a real server on a thread; the guards (access token, CSRF, read-only mode, the role's
privileges, loopback Host names); escaping of everything a user controls; the sampler's charts."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
import pytest
from flask import Flask
from flask.testing import FlaskClient
from psycopg import sql
from werkzeug.datastructures import MultiDict

from conftest import REPO, Relay, Server
from pgqueue import Queue
from pgqueue.cli import build_parser, main
from pgqueue.client import list_queues
from pgqueue.dashboard import Options, _sql, serve, start
from pgqueue.dashboard.app import close, create_app
from pgqueue.dashboard.payload import MAX_SHOWN, show
from pgqueue.dashboard.sampler import (MAX_INTERVAL, MAX_POINTS, MAX_SAMPLES, Sample, Sampler, depth_series, oldest_series,
                                      throughput_series)
from pgqueue.message import QueueStats
from helpers import command

XSS_TEXT = '<script>alert("payload")</script>'
XSS_TYPE = 'text/plain; x="><img src=x onerror=alert(1)>'
XSS_ERROR = "<svg onload=alert('error')>"


@pytest.fixture
def make_app(dsn: str) -> Iterator[Any]:
    apps: list[Flask] = []

    def make(**kwargs: Any) -> Flask:
        target = kwargs.pop("dsn", dsn)
        app = create_app(Options(dsn=target, **kwargs), start_sampler=False)
        app.config["TESTING"] = True
        apps.append(app)
        return app

    yield make
    for app in apps:
        close(app)


@contextmanager
def pgqueue_command(*args: str, ignored: tuple[signal.Signals, ...] = ()) -> Iterator[subprocess.Popen[str]]:
    """Run ``python -m pgqueue ARGS`` with its output piped, in a session of its own with the
    default signal dispositions but the ``ignored`` ones (as nohup leaves SIGHUP); kill it if
    the test leaves it running."""
    with command([sys.executable, "-m", "pgqueue", *args], ignored=ignored) as proc:
        yield proc


def csrf(client: FlaskClient, path: str = "/") -> str:
    page = client.get(path).get_data(as_text=True)
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert found, page[:500]
    return found.group(1)


def log_in(client: FlaskClient, token: str) -> Any:
    """POST the login form as the dashboard's own page sends it: with the CSRF token of the
    login page the client got (a form posted from another site has none, and is refused)."""
    return client.post("/login", data={"token": token, "csrf_token": csrf(client)})


def dead_letter(conn: psycopg.Connection[Any], queue: str, payload: bytes = b"x",
                content_type: str | None = None, error: str = "boom") -> int:
    """Enqueue a message and reject it into the dead letters; return the dead letter's id."""
    conn.execute("SELECT pgqueue.message_create(%s, %s::bytea, NULL, %s)", (queue, payload, content_type))
    row = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue(%s)", (queue,)).fetchone()
    assert row is not None
    conn.execute("SELECT pgqueue.message_reject(%s, %s, %s)", (row[0], row[1], error))
    return int(row[0])


def test_pages_after_the_pooled_connections_were_ended(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """After a database restart (or idle_session_timeout, a proxy cutting idle connections) the
    first page loads answered 500 "Database error: terminating connection due to administrator
    command", one per pooled connection: the pool handed them out unchecked."""
    app = make_app()
    client = app.test_client()
    assert client.get("/").status_code == 200
    pool = app.extensions["pgqueue"]["pool"]
    held = [pool.getconn() for _ in range(3)]  # three connections in the pool
    for c in held:
        pool.putconn(c)
    ended = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                         " WHERE application_name = 'pgqueue-dashboard' AND pid <> pg_backend_pid()").fetchone()
    assert ended is not None and ended[0] >= 3
    for _ in range(4):
        response = client.get("/")
        assert response.status_code == 200, response.get_data(as_text=True)[:500]
        assert client.get("/api/queues").status_code == 200


class Severable(Relay):
    """A TCP relay to the test server that, while ``down``, ends every connection through it at
    its next bytes, and every new one at its first: a database out of reach for a while."""

    down = False

    def passing(self, data: bytes, answers: bool) -> None:
        if self.down:
            raise OSError("the database is down")


def test_pages_answer_as_soon_as_the_database_is_back(pg_server: Server, dbname: str, make_app: Any) -> None:
    """After an outage, the first page once the database answers again loads. The pool's attempts
    to reconnect backed off (1, 2, 4, 8 ... s, for up to 5 minutes), and a page waits only
    Options.wait for a connection: after an outage of a minute or two, pages answered 503
    "Database unreachable" for as long again after the database was back."""
    relay = Severable(pg_server)
    try:
        app = make_app(dsn=psycopg.conninfo.make_conninfo(pg_server.dsn(dbname), host="127.0.0.1",
                                                          port=str(relay.port)), wait=2.0)
        client = app.test_client()
        assert client.get("/").status_code == 200
        relay.down = True
        response = client.get("/")
        assert response.status_code == 503 and "Database unreachable" in response.get_data(as_text=True)
        # the API answers JSON, as for its other errors (it was the HTML page)
        response = client.get("/api/queues")
        assert response.status_code == 503 and "within 2 s" in response.get_json()["error"]
        time.sleep(20)  # the outage goes on: the pool's attempts were 16 s apart, then 32
        relay.down = False
        started = time.monotonic()
        response = client.get("/")
        assert response.status_code == 200, (time.monotonic() - started, response.get_data(as_text=True)[-600:])
        assert client.get("/api/queues").status_code == 200
    finally:
        relay.close()


class Partition(Relay):
    """A TCP relay to the test server that, while ``down``, passes nothing on and ends nothing:
    what passes meanwhile is lost (the connection hangs until :meth:`heal_all`), as in a network
    partition or a server host gone, where a connection is not refused but never answered."""

    down = False

    def __init__(self, server: Server) -> None:
        super().__init__(server)
        self.healed = threading.Event()

    def passing(self, data: bytes, answers: bool) -> None:
        if self.down:
            self.healed.wait()
            raise OSError("lost in the partition")

    def heal_all(self) -> None:
        self.healed.set()
        self.close()


def test_pages_say_unreachable_when_the_database_stops_answering(pg_server: Server, dbname: str,
                                                                 make_app: Any) -> None:
    """A database that stops answering (not refusing: a partition, its host gone): a page says
    "Database unreachable" after Options.wait, as the README says, and pages load again soon
    after it answers again. The pool's check of a pooled connection waited for its answer without
    end (for as long as the kernel kept the connection, many minutes); and the pool's attempts to
    connect meanwhile, for up to 130 s (psycopg's default connect_timeout), during which the pool
    did not grow: pages answered 503 for that long after the database was back."""
    relay = Partition(pg_server)
    try:
        app = make_app(dsn=psycopg.conninfo.make_conninfo(pg_server.dsn(dbname), host="127.0.0.1",
                                                          port=str(relay.port)), wait=3.0)
        assert app.test_client().get("/").status_code == 200
        relay.down = True
        # the pooled connections (one or two), then a new one the pool attempts to make
        for path in ("/", "/api/queues", "/"):
            answered: list[tuple[int, float]] = []

            def page(path: str = path) -> None:
                started = time.monotonic()
                answered.append((app.test_client().get(path).status_code, time.monotonic() - started))

            thread = threading.Thread(target=page, daemon=True)
            thread.start()
            thread.join(30)
            assert answered and answered[0][0] == 503 and answered[0][1] < 15, (path, answered)
        relay.down = False
        deadline = time.monotonic() + 30
        statuses = []
        while time.monotonic() < deadline:
            statuses.append(app.test_client().get("/").status_code)
            if statuses[-1] == 200:
                break
        assert statuses[-1] == 200 and len(statuses) <= 2, statuses
    finally:
        relay.heal_all()


def test_the_sampler_reports_a_database_that_stops_answering(pg_server: Server, dbname: str,
                                                             make_app: Any) -> None:
    """The charts' sampler, on a database that stops answering (a partition, its host gone):
    its pass waited on the socket for as long as the kernel kept the connection, the charts
    went stale and /api/history's sampler_error stayed null (132 s and more in a review). Its
    socket is shut down a second past Options.wait: the pass ends with the error, and the next
    pass once the database answers again takes a sample."""
    relay = Partition(pg_server)
    try:
        app = make_app(dsn=psycopg.conninfo.make_conninfo(pg_server.dsn(dbname), host="127.0.0.1",
                                                          port=str(relay.port)), wait=2.0)
        sampler = app.extensions["pgqueue"]["sampler"]
        assert sampler.tick() is not None  # connected, a sample taken
        relay.down = True
        passed: list[float] = []

        def tick() -> None:
            started = time.monotonic()
            sampler.tick()
            passed.append(time.monotonic() - started)

        thread = threading.Thread(target=tick, daemon=True)
        thread.start()
        thread.join(30)
        assert passed and passed[0] < 2.0 + 1.0 + 2.0, passed  # the wait, the cut, some slack
        error = app.test_client().get("/api/history").get_json()["sampler_error"]
        assert error and "OperationalError" in error, error
        relay.down = False
        assert sampler.tick() is not None and sampler.error is None
    finally:
        relay.heal_all()


def test_a_client_that_sends_nothing_is_dropped(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection that sent nothing, or half a request line, held a server thread for ever,
    before any token was asked for: many of them, and the dashboard is out of threads or memory
    (a review). Each is closed READ_TIMEOUT seconds after its last bytes; pages still load."""
    import socket

    from pgqueue import dashboard

    monkeypatch.setattr(dashboard._Handler, "timeout", 1.0)
    server = start(Options(dsn=dsn), port=0)
    try:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        silent[1].sendall(b"GET / HT")
        started = time.monotonic()
        for sock in silent:
            sock.settimeout(10)
            assert sock.recv(1024) == b"", "closed without an answer"  # (not the 10 s timeout's error)
            sock.close()
        assert time.monotonic() - started < 5
        with urllib.request.urlopen(server.url, timeout=10) as page:
            assert page.status == 200
    finally:
        server.stop()


def _port(server: Any) -> int:
    return int(server.url.rsplit(":", 1)[1].split("/")[0])


def test_a_client_that_sends_a_request_slowly_is_dropped(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The read timeout alone (the first fix) let a client that sent a header line every few
    seconds, each read well within it, hold a server thread for ever (a review). A request's
    line and headers have REQUEST_TIMEOUT seconds in all; pages load meanwhile."""
    import select

    from pgqueue import dashboard

    monkeypatch.setattr(dashboard, "REQUEST_TIMEOUT", 2.0, raising=False)  # (raising: before it, a failure)
    server = start(Options(dsn=dsn), port=0)
    try:
        slow = socket.create_connection(("127.0.0.1", _port(server)))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started, closed_after = time.monotonic(), None
        while closed_after is None and time.monotonic() - started < 10:
            try:
                slow.sendall(b"X-Slow: 1\r\n")  # a line every 0.3 s
                if select.select([slow], [], [], 0.3)[0]:
                    assert slow.recv(1024) == b"", "closed without an answer"
                    closed_after = time.monotonic() - started
            except (BrokenPipeError, ConnectionResetError):
                closed_after = time.monotonic() - started
            if time.monotonic() - started > 1 and closed_after is None:
                with urllib.request.urlopen(server.url, timeout=10) as page:  # others are served
                    assert page.status == 200
        slow.close()
        assert closed_after is not None and 1.5 < closed_after < 5, closed_after
    finally:
        server.stop()


def test_a_connection_that_sends_nothing_closes_without_an_error_line(
        dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The read timeout logged "Request timed out" for every connection it closed, one that sent
    nothing too: a browser's speculative connection, opened in case it is needed, made a line
    after many pages (in the demo's output too). Only a request cut short is an error to log."""
    from pgqueue import dashboard

    monkeypatch.setattr(dashboard._Handler, "timeout", 1.0)
    server = start(Options(dsn=dsn), port=0)
    try:
        with caplog.at_level("INFO", logger="werkzeug"):
            for sent, logged in ((b"", False), (b"GET / HT", True)):
                with socket.create_connection(("127.0.0.1", _port(server))) as sock:
                    sock.sendall(sent)
                    sock.settimeout(10)
                    assert sock.recv(1024) == b""  # closed a second after its last bytes
                time.sleep(0.2)
                lines = [r.getMessage() for r in caplog.records if "timed out" in r.getMessage()]
                assert bool(lines) == logged, (sent, caplog.text)
    finally:
        server.stop()


def test_connections_past_the_most_are_refused_at_once(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each connection held a server thread, with no limit on how many (a review): past
    MAX_CONNECTIONS at once, one is answered 503 at once and closed; once the others close,
    pages load again."""
    from pgqueue import dashboard

    monkeypatch.setattr(dashboard, "MAX_CONNECTIONS", 2, raising=False)  # (raising: before it, a failure)
    server = start(Options(dsn=dsn), port=0)
    try:
        held = [socket.create_connection(("127.0.0.1", _port(server))) for _ in range(2)]
        extra = socket.create_connection(("127.0.0.1", _port(server)))
        extra.settimeout(5)
        answer = extra.recv(4096)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"Retry-After: 5" in answer, answer
        assert extra.recv(4096) == b""
        extra.close()
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 5
        while True:  # (the server threads see the held ones close, then give their places back)
            try:
                with urllib.request.urlopen(server.url, timeout=10) as page:
                    assert page.status == 200
                break
            except OSError as exc:  # (503, or the refusal's reset of a request sent meanwhile)
                assert time.monotonic() < deadline and getattr(exc, "code", 503) == 503, exc
                time.sleep(0.05)
    finally:
        server.stop()



def test_an_interrupt_as_a_requests_thread_starts_stops_the_server(make_app: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt (Ctrl-C) that lands in the start of a request's thread, once that
    thread has served and given its connection slot back, leaves process_request as it is, the
    slot given back once. The slot was given back a second time: the semaphore's ValueError
    took the interrupt's place, socketserver logged it as the request's error and served on
    (a CI run: `pgqueue dashboard` killed 20 s after its SIGTERM)."""
    from pgqueue.dashboard import MAX_CONNECTIONS, _listen, _QuietHandler

    wsgi: Any = _listen("127.0.0.1", 0, make_app(), _QuietHandler)
    ours, theirs = socket.socketpair()
    original = threading.Thread.start

    def start_then_interrupt(thread: threading.Thread) -> None:
        original(thread)
        thread.join(10)  # (it served the request and gave its slot back)
        raise KeyboardInterrupt

    try:
        theirs.sendall(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        monkeypatch.setattr(threading.Thread, "start", start_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            wsgi.process_request(ours, ("127.0.0.1", 1))
        monkeypatch.undo()
        assert theirs.recv(4096).startswith(b"HTTP/1.")  # (the thread served it)
        assert wsgi.slots._value == MAX_CONNECTIONS
    finally:
        ours.close()
        theirs.close()
        wsgi.server_close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_the_command_stops_on_a_signal_with_the_servers_own_handler(dsn: str, sig: signal.Signals,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """While `pgqueue dashboard` serves, a stop signal sets the flag its loop reads (serve()'s
    own handlers, SIGHUP too): it raises nothing in the serving thread. Every signal raised
    KeyboardInterrupt there, which could land in the start of a request's thread and be taken
    for that request's error (the process served on: a CI run, killed after 20 s)."""
    from pgqueue import dashboard

    raised: list[BaseException] = []
    serve = dashboard.serve

    def serve_and_signal(*args: Any, ready: Any, **kwargs: Any) -> Any:
        def ready_then_signal(url: str) -> None:
            ready(url)
            try:
                signal.raise_signal(sig)
                time.sleep(0.01)  # (the handler runs between two bytecodes of this thread)
            except KeyboardInterrupt as exc:
                raised.append(exc)
                raise  # (the command ends on it, as before: not served on for ever)

        return serve(*args, ready=ready_then_signal, **kwargs)

    monkeypatch.setattr(dashboard, "serve", serve_and_signal)
    # its default action for the run: one ignored when the command starts stays ignored (SIGHUP
    # under nohup, as a CI run was launched: the signal did nothing and the command served on)
    previous = signal.signal(sig, signal.SIG_DFL)
    try:
        assert main(["dashboard", "--dsn", dsn, "--port", "0"]) == 0
    finally:
        signal.signal(sig, previous)
    assert not raised
    assert f"dashboard stopped on {sig.name}" in capsys.readouterr().err


def test_index_shows_queues_with_counts_and_settings(conn: psycopg.Connection[Any], make_app: Any) -> None:
    conn.execute("SELECT pgqueue.queue_create('emails', p_max_attempts => 5, p_max_size => 1000, p_notify => true)")
    q = Queue(conn, "emails")
    q.enqueue({"to": "a"})
    q.enqueue("later", delay=3600)
    time.sleep(0.06)  # the ready message's age is read, not a constant: at least this sleep
    client = make_app().test_client()
    page = client.get("/").get_data(as_text=True)
    row = re.search(r'<tr data-queue="emails">(.*?)</tr>', page, re.S)
    assert row, page
    cells = dict(re.findall(r'data-field="(\w+)">([^<]*)<', row.group(1)))
    assert cells["ready"] == "1" and cells["scheduled"] == "1" and cells["leased"] == "0"
    assert ">5<" in row.group(1) and ">1000<" in row.group(1) and ">on<" in row.group(1)
    data = client.get("/api/queues").get_json()
    emails = next(r for r in data["queues"] if r["queue"] == "emails")
    assert (emails["ready"], emails["scheduled"], emails["dead"]) == (1, 1, 0)
    assert 50 <= emails["oldest_ready_age_ms"] < 60_000  # (milliseconds)
    # the security headers: no inline script can run, the page cannot be framed
    response = client.get("/")
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    assert response.headers["X-Frame-Options"] == "DENY"


def test_pages_whatever_the_sessions_datestyle(conn: psycopg.Connection[Any], dsn: str, make_app: Any) -> None:
    """With DateStyle 'German' (a role's setting, here the connection string's) the index and a
    queue's page answered 500: psycopg parses timestamps' text in ISO only (a review)."""
    conn.execute("SELECT pgqueue.queue_create('emails')")
    Queue(conn, "emails").enqueue("x")
    with psycopg.connect(dsn, autocommit=True) as other:  # a session the workers' list shows
        other.execute("LISTEN \"pgqueue.emails\"")
        client = make_app(dsn=make_conninfo(dsn, options="-c DateStyle=German")).test_client()
        for path in ("/", "/queues/emails"):
            response = client.get(path)
            assert response.status_code == 200, (path, response.get_data(as_text=True)[:2000])
        page = client.get("/queues/emails").get_data(as_text=True)
        assert re.search(r"<td>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</td>", page), page


def test_peek_shows_payloads_by_content_type(conn: psycopg.Connection[Any], make_app: Any) -> None:
    q = Queue(conn, "default")
    q.enqueue({"b": [1, 2], "a": "x"})
    q.enqueue("plain words")
    q.enqueue(b"\x00\xffbinary")
    q.enqueue("tomorrow", delay=86400)
    page = make_app().test_client().get("/queues/default").get_data(as_text=True)
    assert '<pre class="json">{\n  &#34;b&#34;: [\n    1,\n    2\n  ],\n  &#34;a&#34;: &#34;x&#34;\n}</pre>' in page
    assert '<pre class="text">plain words</pre>' in page
    assert "00000000  00 ff 62 69 6e 61 72 79" in page and "|..binary|" in page
    assert "scheduled" in page and "tomorrow" in page
    counters = re.search(r'<p class="settings" id="counters">(.*?)</p>', page, re.S)
    assert counters and "enqueued 4 " in " ".join(counters.group(1).split())


def test_a_confirmed_post_needs_the_csrf_token_too(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """The confirmation's POST (confirm=yes) is checked like any other: without the CSRF token it
    is 400 and changes nothing. Every earlier check posted without confirm=yes, so skipping the
    check for confirmed posts went unnoticed (a mutation-testing review): any web page could then
    purge or requeue through a browser on this machine, and a dashboard without a token needs no
    cookie, so SameSite does not stop it."""
    letter = dead_letter(conn, "default")
    client = make_app().test_client()
    for action in ("requeue", "purge"):
        for form in ({"id": str(letter), "confirm": "yes"}, {"all": "1", "upto": "9" * 15, "confirm": "yes"}):
            response = client.post(f"/queues/default/dead/{action}", data=form)
            assert response.status_code == 400 and "CSRF" in response.get_data(as_text=True), (action, form)
    assert Queue(conn, "default").stats().dead == 1


def test_a_read_only_session_refuses_a_change_in_words(conn: psycopg.Connection[Any], dsn: str,
                                                      make_app: Any) -> None:
    """On a session that is read-only (a standby, default_transaction_read_only), a purge is
    refused with 403 saying so, before the database would refuse it: no test used such a
    session, and without the check the answer was a 500 (a mutation-testing review)."""
    letter = dead_letter(conn, "default")
    client = make_app(dsn=psycopg.conninfo.make_conninfo(dsn, options="-c default_transaction_read_only=on")).test_client()
    response = client.post("/queues/default/dead/purge", data={"id": str(letter), "csrf_token": csrf(client),
                                                               "confirm": "yes"})
    assert response.status_code == 403 and "session is read-only" in response.get_data(as_text=True)
    assert Queue(conn, "default").stats().dead == 1


def test_payload_rendering_falls_back_to_hex() -> None:
    assert show(b'{"a":1}', "application/json; task=x").kind == "json"
    assert show(b"{not json", "application/json").kind == "text"
    assert show(b"{not json", "application/json").note == "not valid JSON: shown as text"
    # valid JSON whose integer has more digits than Python converts is not "not valid JSON"
    huge = show(b'{"n":' + b"7" * 5000 + b"}", "application/json")
    assert huge.kind == "text" and huge.note.startswith("JSON with an integer of more than 4300 digits"), huge.note
    assert show(b'{"n":' + b"7" * 5000 + b",}", "application/json").note == "not valid JSON: shown as text"
    bad = show(b"\xff\xfe", "text/plain; charset=utf-8")
    assert bad.kind == "hex" and "shown as hex" in bad.note
    assert show(b"abc", None).kind == "hex"
    big = show(b"a" * 100_000, "text/plain")
    assert big.truncated and len(big.text) == 16 * 1024 and big.size == 100_000


def test_json_that_pretty_printing_would_change_is_shown_as_stored() -> None:
    """The page pretty-prints a JSON payload by parsing it into Python values and writing them
    again. A number with more digits than a double holds came out rounded (0.30000000000000000001
    as 0.3), one past its range as Infinity (not JSON), and a key given twice as one entry, with
    nothing to say the page was not showing what is stored (a review). Such a payload is shown
    as stored, with a note; numbers a double holds exactly as written are pretty-printed."""
    stored = {
        b'{"amount": 0.30000000000000000001}': "the number 0.30000000000000000001 would change",
        b'{"big": 12345678901234567.89}': "the number 12345678901234567.89 would change",
        b'[1e400]': "the number 1e400 would change",
        b'{"dup": 1, "dup": 2}': "a key given twice would change",
        b'{"a": {"k": 1, "k": 1}}': "a key given twice would change",
    }
    for raw, words in stored.items():
        shown = show(raw, "application/json")
        assert (shown.kind, shown.text, shown.note) == ("text", raw.decode(), f"JSON as stored: pretty-printed, {words}"), raw
    fine = show(b'{"a": 0.1, "b": 1E5, "c": -0.0, "d": 2.5e-3, "e": 12345678901234567890}', "application/json")
    assert fine.kind == "json" and fine.note == "", fine
    assert '"b": 100000.0' in fine.text and '"e": 12345678901234567890' in fine.text


def hidden_fields(page: str) -> MultiDict[str, str]:
    """The hidden fields of a page's form (the confirmation's), as a browser posts them."""
    return MultiDict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page))


def test_big_payloads_are_read_and_shown_as_their_first_bytes(conn: psycopg.Connection[Any],
                                                              make_app: Any) -> None:
    """The queue and dead-letter pages read MAX_SHOWN bytes of a payload, not all of it (a page of
    100 messages of 10 MB took gigabytes), and say how many of how many bytes they show."""
    big = b"x" * 1_000_000
    document = ('{"items": [' + ", ".join(['"abcdefgh"'] * 100_000) + "]}").encode()
    for _ in range(8):
        dead_letter(conn, "default", big, "text/plain")
    dead_letter(conn, "default", document, "application/json")
    Queue(conn, "default").enqueue_many([big] * 8)  # bytes: hex dumps
    conn.execute("SELECT pgqueue.message_create('default', %s::bytea, NULL, 'application/json')", (document,))
    client = make_app().test_client()
    for path in ("/queues/default", "/queues/default/dead"):
        client.get(path)  # the pool's connection, templates compiled
        tracemalloc.start()
        try:
            page = client.get(path).get_data(as_text=True)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 8_000_000, (path, peak)  # below the 9 MB of payloads on the page (and 33 MB before)
        assert page.count("1000000 bytes · first 16384 bytes shown") == 8
        assert f"{len(document)} bytes · first 16384 bytes shown · the first 16384 bytes of the JSON" in page
    from pgqueue.dashboard.app import dead_letters_shown, peek_shown

    for rows, content_type in ((peek_shown(conn, "default", 100), None),
                               (dead_letters_shown(conn, "default", 100), "text/plain")):
        assert len(rows) == 9
        for item, shown in rows:
            assert len(item.content) <= MAX_SHOWN + 1
            if item.content_type == content_type:
                assert (shown.size, shown.shown_bytes, shown.truncated) == (1_000_000, MAX_SHOWN, True)
            else:
                assert (shown.kind, shown.size, shown.truncated) == ("text", len(document), True)
                assert shown.text == document[:MAX_SHOWN].decode()
    # the same rows, in the same order, as the client's peek and dead_letters
    assert [m.id for m, _ in peek_shown(conn, "default", 100)] == [m.id for m in Queue(conn, "default").peek(100)]
    assert ([d.id for d, _ in dead_letters_shown(conn, "default", 100)]
            == [d.id for d in Queue(conn, "default").dead_letters(100)])


def test_the_payload_label_counts_bytes() -> None:
    """"first N bytes shown" of the stored size: text is cut at a character boundary within
    MAX_SHOWN bytes, a hex dump says how many bytes it dumps, nothing whole is called cut."""
    accents = "é" * 10_000  # 20,000 bytes
    cut = show(accents.encode(), "text/plain")
    assert (cut.size, cut.shown_bytes, cut.truncated, cut.text) == (20_000, 16_384, True, "é" * 8192)
    odd = show(("a" + accents).encode(), "text/plain")  # the cut splits an é: it is left out
    assert (odd.shown_bytes, odd.text) == (16_383, "a" + "é" * 8191)
    whole = show(("é" * 5000).encode(), "text/plain")
    assert (whole.size, whole.shown_bytes, whole.truncated) == (10_000, 10_000, False)
    dump = show(b"\x00" * 100_000, None)
    assert (dump.kind, dump.size, dump.shown_bytes, dump.truncated) == ("hex", 100_000, 16_384, True)
    assert dump.text.count("\n") == 16_384 // 16 - 1
    # the first bytes of a bigger payload, its size given apart (what the pages read)
    prefix = show(accents.encode()[:MAX_SHOWN + 1], "text/plain", 20_000)
    assert (prefix.text, prefix.shown_bytes, prefix.truncated) == (cut.text, 16_384, True)
    start = show(b'{"a": "' + b"b" * MAX_SHOWN, "application/json", 50_000)
    assert start.kind == "text" and start.truncated and "the first 16384 bytes of the JSON" in start.note
    # JSON that fits but whose indented form would not: whole, as stored; nesting too deep to parse: text
    flat = b"[" + b",".join([b"1"] * 8000) + b"]"
    wide = show(flat, "application/json")
    assert (wide.kind, wide.text, wide.truncated) == ("text", flat.decode(), False) and "pretty-printed" in wide.note
    deep = show(b"[" * 3000 + b"]" * 3000, "application/json")
    assert deep.kind == "text" and not deep.truncated
    assert show(b"abc", "text/plain; charset=base64").kind == "hex"  # no text encoding


def test_user_controlled_text_is_escaped(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """A payload, a content type and an error text that are markup come out as text."""
    dead_letter(conn, "default", XSS_TEXT.encode(), "text/plain", XSS_ERROR)
    conn.execute("SELECT pgqueue.message_create('default', %s::bytea, NULL, %s)", (XSS_TEXT.encode(), XSS_TYPE))
    client = make_app().test_client()
    for path in ("/queues/default", "/queues/default/dead"):
        page = client.get(path).get_data(as_text=True)
        assert "<script>alert" not in page and "<img src=x" not in page and "<svg onload" not in page
        assert "&lt;script&gt;alert(&#34;payload&#34;)&lt;/script&gt;" in page
    assert "&lt;svg onload=alert(&#39;error&#39;)&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in client.get("/queues/default").get_data(as_text=True)
    # a queue name in the URL that is not a queue: escaped in the 404 page too
    response = client.get("/queues/%3Cb%3Ebold%3C%2Fb%3E")
    assert response.status_code == 404 and "<b>bold</b>" not in response.get_data(as_text=True)


@pytest.mark.parametrize("name", ["%3Cb%3Ebold", "bad%20name", "%E2%98%83", "x" * 49, "a%00b"])
def test_a_name_no_queue_can_have_is_no_such_queue(make_app: Any, name: str) -> None:
    """A URL naming a queue that breaks the name rule (markup, a space, non-ASCII, too long, a
    NUL) is a 404 "No such queue", on every page and in the JSON, as an unknown name is: it was
    a 500 "Database error" (the server's 42602, psycopg's refusal of a NUL)."""
    client = make_app().test_client()
    for path in (f"/queues/{name}", f"/queues/{name}/dead"):
        response = client.get(path)
        page = response.get_data(as_text=True)
        assert response.status_code == 404 and "No such queue" in page and "Database error" not in page, page
        assert "<b>bold" not in page
    response = client.get(f"/api/queues/{name}/dead")
    assert response.status_code == 404 and "error" in response.get_json()
    token = csrf(client)
    response = client.post(f"/queues/{name}/dead/purge", data={"id": "1", "confirm": "yes", "csrf_token": token})
    assert response.status_code == 404 and "No such queue" in response.get_data(as_text=True)


def test_requeue_and_purge_need_csrf_and_a_confirmation(conn: psycopg.Connection[Any], make_app: Any) -> None:
    first = dead_letter(conn, "default")
    second = dead_letter(conn, "default")
    client = make_app().test_client()
    token = csrf(client, "/queues/default/dead")
    # no token, a wrong token, a token of another session: refused, nothing changes
    assert client.post("/queues/default/dead/requeue", data={"id": first}).status_code == 400
    assert client.post("/queues/default/dead/requeue", data={"id": first, "csrf_token": "x" * 43}).status_code == 400
    other = make_app().test_client()
    assert other.post("/queues/default/dead/requeue", data={"id": first, "csrf_token": token}).status_code == 400
    # the first post only asks
    response = client.post("/queues/default/dead/requeue", data={"id": first, "csrf_token": token})
    assert response.status_code == 200 and f"(id {first})" in response.get_data(as_text=True)
    assert Queue(conn, "default").stats().dead == 2
    response = client.post("/queues/default/dead/requeue", data={"id": first, "csrf_token": token, "confirm": "yes"})
    assert response.status_code == 303
    stats = Queue(conn, "default").stats()
    assert (stats.dead, stats.ready) == (1, 1)
    assert "requeued 1 dead letter(s)" in client.get(response.headers["Location"]).get_data(as_text=True)
    page = client.post("/queues/default/dead/purge", data={"all": "1", "csrf_token": token}).get_data(as_text=True)
    response = client.post("/queues/default/dead/purge", data=hidden_fields(page))
    assert response.status_code == 303 and Queue(conn, "default").stats().dead == 0
    assert second not in [d.id for d in Queue(conn, "default").dead_letters()]


@pytest.mark.parametrize("action", ["requeue", "purge"])
def test_all_means_the_dead_letters_the_confirmation_counted(conn: psycopg.Connection[Any], make_app: Any,
                                                             action: str) -> None:
    """"Requeue all" / "Purge all" acts on the letters dead when the confirmation was shown: one
    that dies between the confirmation and the click is left alone."""
    counted = dead_letter(conn, "default")
    client = make_app().test_client()
    token = csrf(client, "/queues/default/dead")
    page = client.post(f"/queues/default/dead/{action}", data={"all": "1", "csrf_token": token}).get_data(as_text=True)
    assert "All 1 dead letters" in page
    time.sleep(0.01)  # a later millisecond
    later = dead_letter(conn, "default")
    response = client.post(f"/queues/default/dead/{action}", data=hidden_fields(page))
    assert response.status_code == 303
    assert [d.id for d in Queue(conn, "default").dead_letters()] == [later]
    assert f"{action}d 1 dead letter(s)" in client.get(response.headers["Location"]).get_data(as_text=True)
    assert [m.id for m in Queue(conn, "default").peek()] == ([] if action == "purge" else [counted + 2])
    # a confirmation that does not say what it counted does nothing
    response = client.post(f"/queues/default/dead/{action}", data={"all": "1", "csrf_token": token, "confirm": "yes"})
    assert response.status_code == 400 and Queue(conn, "default").stats().dead == 1
    # none dead when it was shown: none touched
    Queue(conn, "default").purge_dead()
    page = client.post(f"/queues/default/dead/{action}", data={"all": "1", "csrf_token": token}).get_data(as_text=True)
    dead_letter(conn, "default")
    assert client.post(f"/queues/default/dead/{action}", data=hidden_fields(page)).status_code == 303
    assert Queue(conn, "default").stats().dead == 1


@pytest.mark.parametrize("action", ["requeue", "purge"])
def test_all_asks_again_when_a_letter_committed_after_the_confirmation(conn: psycopg.Connection[Any], dsn: str,
                                                                       make_app: Any, action: str) -> None:
    """A letter's dead_at is the clock of the transaction that dead-lettered it: one that a
    consumer rejected inside a longer transaction and committed after the confirmation was
    shown can be dead by the confirmation's bound, and "all" acted on it too (a review). The
    action counts again: a count that differs sends the confirmation again (409, nothing
    changed), counted anew; confirmed, it acts on both."""
    conn.execute("SELECT pgqueue.message_create('default', 'a'::bytea)")
    conn.execute("SELECT pgqueue.message_create('default', 'b'::bytea)")
    client = make_app().test_client()
    token = csrf(client, "/queues/default/dead")
    with psycopg.connect(dsn) as late:  # a transaction of its own, committed after the page is shown
        row = late.execute("SELECT id, attempts FROM pgqueue.message_dequeue('default')").fetchone()
        assert row is not None
        late.execute("SELECT pgqueue.message_reject(%s, %s, 'late')", row)  # dead_at now, not yet committed
        time.sleep(0.01)  # a later millisecond
        early = dead_letter(conn, "default")  # committed at once, dead after it
        page = client.post(f"/queues/default/dead/{action}", data={"all": "1", "csrf_token": token}).get_data(
            as_text=True)
        assert "All 1 dead letters" in page
        late.commit()
    response = client.post(f"/queues/default/dead/{action}", data=hidden_fields(page))
    again = response.get_data(as_text=True)
    assert response.status_code == 409 and 'id="changed"' in again and "All 2 dead letters" in again, again
    assert sorted(d.id for d in Queue(conn, "default").dead_letters()) == sorted([row[0], early])
    response = client.post(f"/queues/default/dead/{action}", data=hidden_fields(again))
    assert response.status_code == 303 and Queue(conn, "default").stats().dead == 0
    # a late letter while another is purged by id meanwhile: the same count, not the same letters
    conn.execute("SELECT pgqueue.message_create('default', 'c'::bytea)")
    Queue(conn, "default").purge_dead()
    with psycopg.connect(dsn) as late:
        row = late.execute("SELECT id, attempts FROM pgqueue.message_dequeue('default')").fetchone()
        assert row is not None
        late.execute("SELECT pgqueue.message_reject(%s, %s, 'late')", row)
        time.sleep(0.01)
        gone = dead_letter(conn, "default")
        page = client.post(f"/queues/default/dead/{action}", data={"all": "1", "csrf_token": token}).get_data(
            as_text=True)
        assert "All 1 dead letters" in page
        late.commit()
    assert Queue(conn, "default").purge_dead([gone]) == 1
    response = client.post(f"/queues/default/dead/{action}", data=hidden_fields(page))
    assert response.status_code == 409 and "it counted 1; by its time of death 1 now" in response.get_data(as_text=True)
    assert [d.id for d in Queue(conn, "default").dead_letters()] == [row[0]]


@pytest.mark.parametrize("queue", [None, "lz"])
@pytest.mark.parametrize("query", ["LEASED", "LEASED_COUNTS_ONLY"])
def test_the_leased_list_walks_the_lease_index_per_queue(conn: psycopg.Connection[Any], query: str,
                                                          queue: str | None) -> None:
    """The leased messages of the index page (all queues) and of a queue's page are a walk of
    message_leased_idx per queue: with the clock in the WHERE clause (volatile, no index
    condition) the first was a scan of the whole table and the second read every leased row
    of the queue (a review)."""
    from pgqueue.dashboard import _sql

    conn.execute("SELECT pgqueue.queue_create('lz')")
    conn.execute("SELECT pgqueue.message_create_batch('lz', array_agg('x'::bytea)) FROM generate_series(1, 20000)")
    conn.execute("SELECT count(*) FROM pgqueue.message_dequeue('lz', 5000, 60000)")
    conn.execute("ANALYZE pgqueue.message")
    plan = "\n".join(str(r[0]) for r in conn.execute(
        b"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) " + getattr(_sql, query).encode(),
        {"queue": queue, "limit": 101}))
    assert "Index Only Scan using message_leased_idx" in plan or "Index Scan using message_leased_idx" in plan, plan
    assert "Seq Scan on message" not in plan and "Bitmap" not in plan, plan
    hit = re.search(r"Buffers: shared hit=(\d+)", plan)
    assert hit and int(hit.group(1)) < 50, plan  # a few pages of the index, not the queue's 5000 rows


def test_all_tells_other_letters_of_the_same_count_and_id_sum_apart(conn: psycopg.Connection[Any],
                                                                     make_app: Any) -> None:
    """Letters 1003, 1010 and 1020 confirmed; 1003 and 1020 purged by someone else and 1011 and
    1012 committed late, dead by the bound: the same count and the same sum of ids, and a check
    of those two purged letters never shown (a review). The hash of the ids tells them apart."""
    row = conn.execute("SELECT id FROM pgqueue.queue WHERE name = 'default'").fetchone()
    assert row is not None
    qid = row[0]
    insert = ("INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, attempts, created_at, dead_at, content) "
              "SELECT i, %s, 0, 1, 0, %s, 'x' FROM unnest(%s::bigint[]) i")
    conn.execute(insert, (qid, 1000, [1003, 1010, 1020]))
    client = make_app().test_client()
    page = client.post("/queues/default/dead/purge", data={"all": "1", "csrf_token": csrf(client)}).get_data(as_text=True)
    assert "All 3 dead letters" in page
    assert Queue(conn, "default").purge_dead([1003, 1020]) == 2
    conn.execute(insert, (qid, 999, [1011, 1012]))
    response = client.post("/queues/default/dead/purge", data=hidden_fields(page))
    assert response.status_code == 409, response.get_data(as_text=True)
    assert sorted(d.id for d in Queue(conn, "default").dead_letters()) == [1010, 1011, 1012]


def test_a_requeue_into_a_full_queue_is_a_refusal_not_a_server_error(conn: psycopg.Connection[Any],
                                                                      make_app: Any) -> None:
    """PQ003 (the queue at its max_size) was answered 500 "Database error", which reads as a
    fault of the server to users and monitors (a review): it is 409 "Queue full", with the hint,
    and nothing is requeued."""
    conn.execute("SELECT pgqueue.queue_create('capped', p_max_size => 1)")
    letter = dead_letter(conn, "capped")
    conn.execute("SELECT pgqueue.message_create('capped', 'live'::bytea)")
    client = make_app().test_client()
    response = client.post("/queues/capped/dead/requeue", data={"id": str(letter), "csrf_token": csrf(client),
                                                               "confirm": "yes"})
    page = response.get_data(as_text=True)
    assert response.status_code == 409 and "Queue full" in page and "max_size" in page, page
    assert [d.id for d in Queue(conn, "capped").dead_letters()] == [letter]


@pytest.mark.parametrize("action", ["requeue", "purge"])
def test_ids_and_bounds_out_of_the_bigint_range_are_a_bad_request(conn: psycopg.Connection[Any], make_app: Any,
                                                                   action: str) -> None:
    """A dead letter id or an "all" bound past bigint (or the bound's last value, which + 1
    passes) was a 500 "bigint out of range" (a review): it is a 400, and nothing changes."""
    dead_letter(conn, "default")
    client = make_app().test_client()
    token = csrf(client, "/queues/default/dead")
    forms: list[dict[str, str]] = [
        {"id": "99999999999999999999999", "confirm": "yes"}, {"id": "0", "confirm": "yes"},
        {"id": "-5"}, {"all": "1", "upto": "99999999999999999999999", "confirm": "yes"},
        {"all": "1", "upto": str(2**63 - 1), "confirm": "yes"}, {"all": "1", "upto": "-2", "confirm": "yes"}]
    for form in forms:
        response = client.post(f"/queues/default/dead/{action}", data={**form, "csrf_token": token})
        assert response.status_code == 400, (form, response.get_data(as_text=True))
    assert Queue(conn, "default").stats().dead == 1 and Queue(conn, "default").peek() == []


def test_the_done_notice_is_the_servers_text(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """The notice after an action comes from a code and a count; a crafted link shows no text of its own."""
    client = make_app().test_client()
    page = client.get("/queues/default/dead?done=Your+session+expired:+call+555-0100").get_data(as_text=True)
    assert "555-0100" not in page and 'id="done"' not in page
    assert 'id="done">purged 3 dead letter(s)<' in client.get("/queues/default/dead?done=purged&n=3").get_data(
        as_text=True)
    assert 'id="done"' not in client.get("/queues/default/dead?done=purged&n=lots").get_data(as_text=True)
    letter = dead_letter(conn, "default")
    token = csrf(client)
    response = client.post("/queues/default/dead/purge", data={"id": letter, "csrf_token": token, "confirm": "yes"})
    assert response.headers["Location"].endswith("/queues/default/dead?done=purged&n=1")


def test_read_only_mode_changes_nothing(conn: psycopg.Connection[Any], make_app: Any) -> None:
    letter = dead_letter(conn, "default")
    client = make_app(read_only=True).test_client()
    page = client.get("/queues/default/dead").get_data(as_text=True)
    assert "Read-only mode" in page and 'id="requeue-selected"' not in page and f'id="dead-{letter}"' in page
    token = csrf(client)
    for action in ("requeue", "purge"):
        response = client.post(f"/queues/default/dead/{action}", data={"id": letter, "csrf_token": token,
                                                                       "confirm": "yes"})
        assert response.status_code == 403 and "read-only mode" in response.get_data(as_text=True)
    assert Queue(conn, "default").stats().dead == 1


def test_access_token(conn: psycopg.Connection[Any], make_app: Any) -> None:
    client = make_app(token="s3cret-token").test_client()
    assert client.get("/").status_code == 401
    # the API answers in JSON, with how to authenticate (it sent the login page's HTML)
    for headers, error in (({}, "an access token is needed"), ({"Authorization": "Bearer wrong"}, "wrong access token")):
        response = client.get("/api/queues", headers=headers)
        assert response.status_code == 401 and response.is_json, response.get_data(as_text=True)
        assert error in response.get_json()["error"] and response.headers["WWW-Authenticate"].startswith("Bearer ")
    assert client.get("/?token=wrong").status_code == 401
    assert log_in(client, "wrong").status_code == 401
    assert client.get("/static/dashboard.css").status_code == 200  # assets are not secret
    response = client.get("/queues/default?token=s3cret-token")
    assert response.status_code == 302 and response.headers["Location"].endswith("/queues/default")
    # the query's other parameters go along as they came, whatever their names ("endpoint" and
    # "_method" were arguments of url_for: a 500, a review)
    for query, kept in (("endpoint=x&_method=POST", "?endpoint=x&_method=POST"), ("limit=5&a=1&a=2", "?limit=5&a=1&a=2")):
        response = make_app(token="s3cret-token").test_client().get(f"/queues/default?token=s3cret-token&{query}")
        assert response.status_code == 302 and response.headers["Location"].endswith("/queues/default" + kept), \
            response.headers.get("Location")
    assert client.get("/").status_code == 200  # the session remembers
    other = make_app(token="s3cret-token").test_client()
    assert other.get("/api/queues", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    assert log_in(other, "s3cret-token").status_code == 302
    assert other.get("/").status_code == 200


def test_the_login_page_shows_nothing_of_the_database(pg_server: Server, make_app: Any) -> None:
    """Before the token is given, the page tells nothing the sampler learned: its error names
    the server, the database and the role (and whatever else the database said)."""
    app = make_app(dsn=pg_server.dsn("pq_no_such_database_xyz"), token="s3cret-token", wait=1.0)
    sampler = app.extensions["pgqueue"]["sampler"]
    assert sampler.tick() is None and "pq_no_such_database_xyz" in (sampler.error or "")
    client = app.test_client()
    for path in ("/", "/queues/default", "/api/queues"):
        response = client.get(path)
        assert response.status_code == 401
        assert "pq_no_such_database_xyz" not in response.get_data(as_text=True), path
    response = log_in(client, "wrong")
    assert response.status_code == 401 and "pq_no_such_database_xyz" not in response.get_data(as_text=True)
    # nor the answer to a DNS-rebinding page (Host evil.example), which that page can read
    response = client.get("/", headers={"Host": "evil.example:8080"})
    assert response.status_code == 400 and "pq_no_such_database_xyz" not in response.get_data(as_text=True)
    open_app = make_app(dsn=pg_server.dsn("pq_no_such_database_xyz"), wait=1.0)  # no token
    open_app.extensions["pgqueue"]["sampler"].tick()
    response = open_app.test_client().get("/", headers={"Host": "evil.example:8080"})
    assert response.status_code == 400 and "pq_no_such_database_xyz" not in response.get_data(as_text=True)
    # once in, it says why the charts are empty
    response = client.get("/?token=s3cret-token", follow_redirects=True)
    assert "pq_no_such_database_xyz" in response.get_data(as_text=True)


def test_processes_sharing_a_secret_key_share_the_session(make_app: Any) -> None:
    """gunicorn -w 2: a login at one process holds at the other only with a shared key."""
    first, second = (make_app(token="s3cret-token", secret_key=b"k" * 32) for _ in range(2))
    client = first.test_client()
    assert log_in(client, "s3cret-token").status_code == 302
    cookie = client.get_cookie("pgqueue_dashboard")
    assert cookie is not None
    for app, expected in ((second, 200), (make_app(token="s3cret-token"), 401)):
        other = app.test_client()
        other.set_cookie("pgqueue_dashboard", cookie.value)
        assert other.get("/").status_code == expected


def test_only_loopback_host_names(make_app: Any) -> None:
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 cannot read the dashboard."""
    client = make_app().test_client()
    assert client.get("/", headers={"Host": "evil.example:8080"}).status_code == 400
    assert client.get("/", headers={"Host": "127.0.0.1:8080"}).status_code == 200
    assert client.get("/", headers={"Host": "[::1]:8080"}).status_code == 200
    from pgqueue.dashboard.app import _is_loopback_host

    # what `pgqueue dashboard --host` is given, and Host headers: an IPv6 loopback is loopback bare too
    assert all(_is_loopback_host(h) for h in ("::1", "[::1]", "[::1]:8080", "127.0.0.1", "127.0.0.2:80",
                                              "localhost", "localhost:8080"))
    assert not any(_is_loopback_host(h) for h in ("fe80::1", "[2001:db8::1]:80", "10.0.0.1", "0.0.0.0",
                                                  "evil.example", "evil.example:8080"))


@pytest.fixture
def roles(pg_server: Server, dbname: str) -> Iterator[dict[str, str]]:
    """DSNs of roles made with docs/grants.sql: producer, consumer, admin and monitor."""
    names = {kind: f"pq_dash_{kind}_{os.getpid()}_{dbname}" for kind in ("producer", "consumer", "admin", "monitor")}
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        proc = subprocess.run(["psql", "-X", "-q", "-d", dbname, "-f", str(REPO / "docs" / "grants.sql"),
                               *[f"-v{kind}={name}" for kind, name in names.items()]],
                              env=pg_server.libpq_env(), capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr
        yield {kind: pg_server.dsn(dbname, user=name) for kind, name in names.items()}
    finally:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
            for name in names.values():
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_read_only_role_gives_a_read_only_dashboard(conn: psycopg.Connection[Any], roles: dict[str, str],
                                                      make_app: Any) -> None:
    """The monitor recipe: counts, counters and leases; no payloads, no dead letters, no changes."""
    reader = roles["monitor"]
    letter = dead_letter(conn, "default")
    Queue(conn, "default").enqueue("secret")
    Queue(conn, "default").enqueue("held")
    held = Queue(conn, "default").dequeue()[0]
    client = make_app(dsn=reader).test_client()
    page = client.get("/").get_data(as_text=True)
    assert "read-only role" in page and "peek at payloads" in page and "requeue dead letters" in page
    row = re.search(r'<tr data-queue="default">(.*?)</tr>', page, re.S)
    assert row and 'data-field="ready">1<' in row.group(1)
    page = client.get("/queues/default").get_data(as_text=True)
    assert "may not read message contents" in page and "secret" not in page
    assert f'<td class="num">{held.id}</td>' in page  # the lease, without its attempt number
    response = client.get("/queues/default/dead")
    assert response.status_code == 403 and "Permission denied" in response.get_data(as_text=True)
    token = csrf(client)
    response = client.post("/queues/default/dead/requeue", data={"id": letter, "csrf_token": token, "confirm": "yes"})
    assert response.status_code == 403 and "may not requeue" in response.get_data(as_text=True)
    assert Queue(conn, "default").stats().dead == 1
    app = client.application
    assert app.extensions["pgqueue"]["sampler"].tick().counters["default"]["dead_lettered"] == 1


def test_leases_and_worker_sessions(conn: psycopg.Connection[Any], dsn: str, make_app: Any) -> None:
    Queue(conn, "default").enqueue("work")
    with psycopg.connect(dsn, autocommit=True, application_name="pgqueue-worker") as worker:
        worker.execute("SELECT pgqueue.queue_alter('default', p_notify => true)")
        worker.execute('LISTEN "pgqueue.default"')
        held = Queue(worker, "default").dequeue()[0]
        worker.execute('LISTEN "pgqueue.default"')  # the session's last statement names its queue
        page = make_app().test_client().get("/queues/default").get_data(as_text=True)
        leased = re.search(r'<table class="grid" id="leased">(.*?)</table>', page, re.S)
        assert leased and f'<td class="num">{held.id}</td>' in leased.group(1)
        sessions = re.search(r'<table class="grid" id="sessions">(.*?)</table>', page, re.S)
        assert sessions and f'<td class="num">{worker.info.backend_pid}</td>' in sessions.group(1)
        assert "pgqueue-worker" in sessions.group(1) and "LISTEN default" in sessions.group(1)


def test_the_leased_list_says_more_only_when_there_are_more(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """The page lists at most 100 leased messages and adds "+" when there are more: it added it
    at exactly 100 as well (the query fetched 100 rows and the page could not tell; a review)."""
    conn.execute("SELECT pgqueue.queue_create('l100')")
    conn.execute("SELECT pgqueue.message_create_batch('l100', array_fill('x'::bytea, ARRAY[101]))")
    conn.execute("SELECT pgqueue.message_dequeue('l100', 100, 3600000)")
    client = make_app().test_client()
    for held, title in ((100, "Leased messages (100)"), (101, "Leased messages (100+)")):
        if held == 101:
            conn.execute("SELECT pgqueue.message_dequeue('l100', 1, 3600000)")
        page = client.get("/queues/l100").get_data(as_text=True)
        assert f"<h3>{title}</h3>" in page, held
        rows = re.search(r'<table class="grid" id="leased">(.*?)</table>', page, re.S)
        assert rows and rows.group(1).count("<tr><td") == 100, held


def test_a_role_that_may_not_read_payloads_sees_none_in_the_sessions(pg_server: Server, roles: dict[str, str],
                                                                    make_app: Any) -> None:
    """A monitoring role often has pg_monitor (pg_read_all_stats): pg_stat_activity then shows it
    every session's last query, with the payload a client wrote as a literal (psql, client-side
    parameter binding). The sessions table of a role that may not read contents shows the
    statement without its literals."""
    for kind in ("monitor", "admin"):
        with psycopg.connect(roles[kind]) as role:
            name = role.execute("SELECT current_user").fetchone()
        assert name is not None
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("GRANT pg_read_all_stats TO {}").format(sql.Identifier(name[0])))
    with psycopg.connect(roles["producer"], autocommit=True, application_name="psql") as producer:
        producer.execute(b"SELECT pgqueue.message_create('default', convert_to('card 4111-1111-1111-1111', 'UTF8'))")
        producer.execute(b"SELECT pgqueue.message_create('default', $x$card 5500-0000-0000-0004$x$::bytea)")
        app = make_app(dsn=roles["monitor"])
        for path in ("/", "/queues/default"):
            page = app.test_client().get(path).get_data(as_text=True)
            sessions = re.search(r'<table class="grid" id="sessions">(.*?)</table>', page, re.S)
            assert sessions and f'<td class="num">{producer.info.backend_pid}</td>' in sessions.group(1), path
            assert "pgqueue.message_create" in sessions.group(1)
            assert "card" not in sessions.group(1) and "5500" not in sessions.group(1), sessions.group(1)
        # a role that may read the payloads sees the statement whole
        page = make_app(dsn=roles["admin"]).test_client().get("/").get_data(as_text=True)
        assert "5500-0000-0000-0004" in page


def test_spark_consumers_and_their_claims(conn: psycopg.Connection[Any], dsn: str, make_app: Any) -> None:
    Queue(conn, "default").enqueue_many(["a", "b", "c"])
    with psycopg.connect(dsn, autocommit=True) as spark:
        spark.execute("SELECT pgqueue.spark_consumer_open('default', 'etl')")
        spark.execute("SELECT pgqueue.spark_claim('default', 'etl', 2)")
        page = make_app().test_client().get("/queues/default").get_data(as_text=True)
        table = re.search(r'<table class="grid" id="spark">(.*?)</table>', page, re.S)
        assert table, page
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", table.group(1))
        assert cells[:3] == ["etl", "1", "2"] and cells[-1] == "yes"
        assert "a Spark claim" in page  # the claimed messages, told apart from leases


def test_sampler_history_gives_depth_and_throughput(conn: psycopg.Connection[Any], make_app: Any) -> None:
    app = make_app(sample_interval=1.0)
    sampler = app.extensions["pgqueue"]["sampler"]
    q = Queue(conn, "default")
    sampler.tick()
    q.enqueue_many(["x"] * 30)
    time.sleep(0.05)
    sampler.tick()
    for m in q.dequeue(10):
        q.complete(m)
    time.sleep(0.05)
    sampler.tick()
    client = app.test_client()
    one = client.get("/api/history?queue=default").get_json()
    assert [v for _, v in one["depth"]["ready"]] == [0, 30, 20]
    oldest = [v for _, v in one["oldest"]["oldest ready"]]
    assert oldest[0] == 0 and 0.04 <= oldest[1] < 60 and oldest[2] >= oldest[1]  # (seconds: the sleep before each tick)
    every = client.get("/api/history").get_json()
    counters = conn.execute("SELECT to_regprocedure('pgqueue.queue_counters(text)') IS NOT NULL").fetchone()
    if counters and counters[0]:  # the extension counts: rates of its counters
        for history in (one, every):
            rates = history["throughput"]
            assert history["throughput_source"] == "counters"
            assert rates["enqueued"][0][1] > 0 and rates["enqueued"][1][1] == 0
            assert rates["completed"][0][1] == 0 and rates["completed"][1][1] > 0
            assert rates["delivered"][1][1] == rates["completed"][1][1]
    else:  # estimated from the samples
        assert one["throughput_source"] == every["throughput_source"] == "samples"
        net = [v for _, v in one["throughput"]["net change"]]
        assert net[0] > 0 and net[1] < 0
        enqueued = every["throughput"]["enqueued"]
        left = every["throughput"]["left the queues"]
        assert enqueued[0][1] > 0 and enqueued[1][1] == 0 and left[1][1] > 0


def test_throughput_from_counters_and_from_samples() -> None:
    """The rates: counter deltas per second when the extension counts (a queue created again
    starts from zero: no negative rate), else the samples' estimate."""
    def stats(ready: int, dead: int = 0) -> QueueStats:
        return QueueStats(queue="q", ready=ready, scheduled=0, leased=0, dead=dead, oldest_ready_age_ms=None)

    counted = [Sample(0.0, {"q": stats(5)}, 10, {"q": {"enqueued": 10, "completed": 5}}),
               Sample(2.0, {"q": stats(3)}, 14, {"q": {"enqueued": 14, "completed": 11}}),
               Sample(4.0, {"q": stats(0)}, 14, {"q": {"enqueued": 1, "completed": 0}})]
    source, rates = throughput_series(counted, "q")
    assert source == "counters"
    assert rates == {"enqueued": [(2.0, 2.0), (4.0, 0.0)], "completed": [(2.0, 3.0), (4.0, 0.0)]}
    sampled = [Sample(s.t, s.stats, s.last_id, None) for s in counted]
    sampled[2] = Sample(4.0, {"q": stats(0, dead=2)}, 14, None)
    source, rates = throughput_series(sampled, None)
    assert source == "samples"
    assert rates["enqueued"] == [(2.0, 2.0), (4.0, 0.0)]
    assert rates["left the queues"] == [(2.0, 3.0), (4.0, 1.5)]
    assert rates["dead-lettered"] == [(2.0, 0.0), (4.0, 1.0)]
    assert throughput_series(sampled, "q")[1]["net change"] == [(2.0, -1.0), (4.0, -1.5)]
    assert depth_series(sampled, "q")["dead"] == [(0.0, 0.0), (2.0, 0.0), (4.0, 2.0)]
    aged = [Sample(1.0, {"a": QueueStats("a", 1, 0, 0, 0, 2500), "b": QueueStats("b", 0, 0, 0, 0, None)}, 0, None)]
    assert oldest_series(aged, None) == {"oldest ready": [(1.0, 2.5)]}
    assert oldest_series(aged, "b") == {"oldest ready": [(1.0, 0.0)]}


def test_a_real_server_on_a_thread(conn: psycopg.Connection[Any], dsn: str) -> None:
    server = start(Options(dsn=dsn, sample_interval=0.2), port=0)
    try:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url + "api/queues", timeout=10) as response:
            assert b'"queue":"default"' in response.read().replace(b" ", b"")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with urllib.request.urlopen(server.url + "api/history", timeout=10) as response:
                if response.read().count(b"[") > 6:
                    break
            time.sleep(0.2)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(urllib.request.Request(server.url + "queues/default/dead/purge", data=b"all=1"),
                                   timeout=10)
        assert info.value.code == 400  # no CSRF token
    finally:
        server.stop()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda sig: sig.name)
def test_the_command_serves_until_interrupted(dsn: str, sig: signal.Signals) -> None:
    """Ctrl-C, SIGTERM from a service manager (systemd, Kubernetes), or SIGHUP from a closed
    terminal or ssh session, stops it the same way: exit 0 (SIGTERM ended it at once with 143,
    a failed stop; SIGHUP with 129), one line saying so, the port and the database sessions
    closed."""
    with pgqueue_command("dashboard", "--dsn", dsn, "--port", "0", "--token", "a-long-token",
                         "--sample-interval", "0.2") as proc:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        found = re.search(r"at (http://127\.0\.0\.1:(\d+)/\?token=a-long-token) ", line)
        assert found, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # keeps the session
        with browser.open(found.group(1), timeout=10) as response:
            assert response.status == 200 and b"Queues" in response.read()
        with psycopg.connect(dsn, autocommit=True) as conn:
            def sessions() -> int:
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND pid <> pg_backend_pid()").fetchone()
                return int(row[0]) if row else 0

            assert sessions() > 0  # the pool's, the sampler's
            proc.send_signal(sig)
            assert proc.wait(timeout=20) == 0, proc.stderr.read()
            err = proc.stderr.read()
            assert "Traceback" not in err and err.splitlines()[-1:] == [f"dashboard stopped on {sig.name}"], err
            deadline = time.monotonic() + 30  # a closed connection's backend ends a moment later
            while sessions() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sessions() == 0
        with pytest.raises(ConnectionRefusedError):  # nothing listens there any more
            socket.create_connection(("127.0.0.1", int(found.group(2))), timeout=5).close()


def test_the_command_started_under_nohup_outlives_a_hangup(dsn: str) -> None:
    """`pgqueue dashboard` started with SIGHUP ignored (nohup) goes on serving after a SIGHUP,
    and still stops on SIGTERM."""
    with pgqueue_command("dashboard", "--dsn", dsn, "--port", "0", ignored=(signal.SIGHUP,)) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+/) ", line)
        assert found, line + (proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        assert proc.poll() is None
        with urllib.request.urlopen(found.group(1) + "api/queues", timeout=10) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
        err = proc.stderr.read()
        assert "Traceback" not in err and err.splitlines()[-1:] == ["dashboard stopped on SIGTERM"], err


def test_the_stop_signals_handler_starts_no_thread(dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """serve()'s SIGTERM handler started a thread to shut the server down. A handler runs between
    two bytecodes of the main thread, and when that thread was itself starting one (a request's),
    holding the lock every start takes, the new start waited for it for good: a CI run's dashboard
    hung after SIGTERM until it was killed. The handler sets the flag serve_forever() polls
    instead: here a thread started by the handler fails the run. (Only on the main thread, where
    the handler runs: the dashboard's sampler, on a thread of its own, may start one meanwhile,
    which failed a CI run of this test.)"""
    started: list[str] = []
    start = threading.Thread.start

    def no_start(thread: threading.Thread) -> None:
        if threading.current_thread() is not threading.main_thread():
            start(thread)
            return
        started.append(thread.name)
        raise AssertionError(f"a thread was started: {thread.name}")

    def ready(url: str) -> None:
        monkeypatch.setattr(threading.Thread, "start", no_start)
        try:
            signal.raise_signal(signal.SIGTERM)  # (runs the handler before it returns)
        finally:
            monkeypatch.undo()

    assert serve(Options(dsn=dsn), port=0, ready=ready) is signal.SIGTERM
    assert started == []


def test_serve_stops_on_a_signal_and_leaves_an_ignored_one_ignored(dsn: str) -> None:
    """serve() on the main thread: SIGINT or SIGTERM stops it and it returns the signal; one
    ignored when it started (SIGINT in `cmd &` from a script, a SIGTERM its parent ignored)
    stays ignored, as the demo keeps SIGHUP under nohup, and the handlers it replaced are back
    when it returns."""
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    late: list[int] = []  # a SIGINT that came too late for it: the test fails, not the test run

    def sigint(signum: int, frame: object) -> None:
        late.append(signum)

    sigint_before = signal.signal(signal.SIGINT, sigint)
    urls: list[str] = []
    served: list[int] = []

    def send() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # ignored: it goes on serving
            time.sleep(0.3)
            with urllib.request.urlopen(urls[0] + "api/queues", timeout=10) as response:
                served.append(response.status)
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=send)

    def ready(url: str) -> None:
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is not sigint
        urls.append(url)
        sender.start()

    try:
        assert serve(Options(dsn=dsn), port=0, ready=ready) is signal.SIGINT
        assert served == [200]  # still serving after the ignored SIGTERM
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is sigint and not late
    finally:
        if sender.is_alive():
            sender.join()
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGINT, sigint_before)
    port = re.search(r":(\d+)/", urls[0])
    assert port, urls
    with pytest.raises(ConnectionRefusedError):  # its socket is closed
        socket.create_connection(("127.0.0.1", int(port.group(1))), timeout=5).close()


def test_a_port_in_use_is_one_line_of_ours_and_start_raises_oserror(dsn: str) -> None:
    """`pgqueue dashboard --port <in use>`: the CLI's one line, exit 1 (Werkzeug's bind printed
    two lines of its own and exited the process: start() too, from a library caller's thread)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "pgqueue", "dashboard", "--dsn", dsn, "--port", str(port)],
                              capture_output=True, text=True, timeout=60, check=False)
        assert (proc.returncode, proc.stdout) == (1, ""), proc.stdout + proc.stderr
        assert proc.stderr == f"pgqueue: error: cannot listen on 127.0.0.1:{port}: Address already in use\n", proc.stderr
        with pytest.raises(OSError, match="in use"):
            start(Options(dsn=dsn), port=port)
    server = start(Options(dsn=dsn), port=0)  # and a port of its own still works
    try:
        with urllib.request.urlopen(server.url, timeout=10) as page:
            assert page.status == 200
    finally:
        server.stop()


def test_the_command_refuses_a_database_without_pgqueue(bare_dsn: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pgqueue", "dashboard", "--dsn", bare_dsn, "--port", "0"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "not installed" in proc.stderr and "Traceback" not in proc.stderr


def test_the_demo_shows_the_dashboard_beside_it(dsn: str) -> None:
    """`pgqueue demo --dashboard PORT` (scripts/demo.sh --dashboard): the demo's queue on the
    dashboard while it runs and after the report, with its dead letters, until Ctrl-C."""
    with pgqueue_command("demo", "--dsn", dsn, "--messages", "150", "--rate", "0", "--seed", "3", "--no-progress",
                         "--dashboard", "0") as proc:
        assert proc.stdout is not None
        lines: list[str] = []
        url = None
        for line in proc.stdout:
            lines.append(line)
            found = re.search(r"^Dashboard: (http://127\.0\.0\.1:\d+/) ", line)
            url = url or (found.group(1) if found else None)
            if "The dashboard stays up" in line:
                break
        out = "".join(lines)
        assert url and "exactly once  OK" in out, out
        queue = re.search(r"Queue (demo_\w+):", out)
        assert queue, out
        with urllib.request.urlopen(url, timeout=10) as response:
            page = response.read().decode()
        row = re.search(rf'<tr data-queue="{queue.group(1)}">(.*?)</tr>', page, re.S)
        assert row and re.search(r'data-field="dead"[^>]*><a [^>]*>[1-9]\d*</a>', row.group(1)), page
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    with psycopg.connect(dsn) as conn:
        assert Queue(conn, "default").settings() and [q.queue for q in list_queues(conn)] == ["default"]


def test_templates_and_assets_are_package_data() -> None:
    """pyproject's package-data patterns cover every template and asset (the wheel test in
    test_packaging.py checks a built wheel)."""
    import tomllib
    from fnmatch import fnmatch
    from pathlib import Path

    import pgqueue.dashboard

    root = Path(pgqueue.dashboard.__file__).parent
    patterns = tomllib.loads((Path(__file__).parents[1] / "python" / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-data"]["pgqueue"]
    files = [p.relative_to(root.parent).as_posix() for d in ("templates", "static") for p in (root / d).iterdir()]
    assert len(files) >= 10
    assert [f for f in files if not any(fnmatch(f, pat) for pat in patterns)] == []


def test_an_unreachable_database_is_a_clean_page(make_app: Any) -> None:
    client = make_app(dsn="host=127.0.0.1 port=1 dbname=nowhere connect_timeout=1", wait=1.0).test_client()
    response = client.get("/")
    assert response.status_code == 503 and "Database unreachable" in response.get_data(as_text=True)
    assert client.get("/api/queues").status_code == 503


def test_the_role_decides_what_is_offered(conn: psycopg.Connection[Any], roles: dict[str, str],
                                          make_app: Any) -> None:
    """A consumer sees payloads but may not touch dead letters; an administrator requeues."""
    letter = dead_letter(conn, "default")
    Queue(conn, "default").enqueue({"visible": "to consumers"})
    consumer = make_app(dsn=roles["consumer"]).test_client()
    page = consumer.get("/queues/default").get_data(as_text=True)
    assert "&#34;visible&#34;: &#34;to consumers&#34;" in page and "read-only role" in page
    assert consumer.get("/queues/default/dead").status_code == 403
    admin = make_app(dsn=roles["admin"]).test_client()
    page = admin.get("/queues/default/dead").get_data(as_text=True)
    assert "may change dead letters" in page and 'id="requeue-selected"' in page
    token = csrf(admin)
    response = admin.post("/queues/default/dead/requeue", data={"id": letter, "csrf_token": token, "confirm": "yes"})
    assert response.status_code == 303 and Queue(conn, "default").stats().dead == 0


def test_queues_that_share_counters_are_named(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """Past 64 queues two share a stripe of counters: the charts say whose rates mix."""
    for i in range(64):
        conn.execute("SELECT pgqueue.queue_create(%s)", (f"q{i:02d}",))
    app = make_app()
    sample = app.extensions["pgqueue"]["sampler"].tick()
    assert sample is not None and sample.counters is not None and len(sample.counters) == 65
    assert set(sample.counters["q00"]) == {"enqueued", "delivered", "completed", "failed", "dead_lettered", "expired"}
    shared = app.test_client().get("/api/history").get_json()["shared_counters"]
    assert len(shared) >= 2 and set(shared) <= set(sample.counters)
    # each queue of a shared stripe reports the stripe's sum: the all-queues rate counts it once
    assert set(sample.stripes) == set(shared) and len(set(sample.stripes.values())) < len(shared)
    Queue(conn, shared[0]).enqueue_many(["x"] * 3)
    time.sleep(0.05)
    after = app.extensions["pgqueue"]["sampler"].tick()
    assert after is not None and after.counters is not None
    assert after.counters[shared[0]]["enqueued"] - sample.counters[shared[0]]["enqueued"] == 3
    rates = throughput_series([sample, after], None)[1]
    assert rates["enqueued"][0][1] * (after.t - sample.t) == pytest.approx(3)


def test_all_queues_throughput_counts_a_shared_stripe_once() -> None:
    """a and b share a stripe (each reports the sum of both), c has its own."""
    def sample(t: float, ab: int, c: int) -> Sample:
        return Sample(t, {}, None, {"a": {"enqueued": ab}, "b": {"enqueued": ab}, "c": {"enqueued": c}},
                      frozenset({"a", "b"}), {"a": 7, "b": 7})

    samples = [sample(0.0, 10, 1), sample(2.0, 20, 3)]
    assert throughput_series(samples, None)[1] == {"enqueued": [(2.0, 6.0)]}
    assert throughput_series(samples, "b")[1] == {"enqueued": [(2.0, 5.0)]}  # one queue: its stripe's sum


def test_the_sample_interval_is_at_most_a_day(capsys: pytest.CaptureFixture[str]) -> None:
    """`dashboard --sample-interval` is at least 0.1 s and at most 86400 s (a day; the page refreshes
    as often): 1e10 was taken and the sampler thread died at once (OverflowError in its wait),
    the charts left empty. A longer one is bad usage naming the option, exit 2, and a Sampler
    refuses it too."""
    def connect() -> psycopg.Connection[Any]:
        raise AssertionError("not sampled")

    # ... and at least 0.1 s: 1e-20 was a traceback (the history's length overflowed), 0.0001
    # sampled without a pause (a review)
    for interval in (86400.001, 1e10, 0.0, 1e-20, 0.0999):
        with pytest.raises(ValueError, match="sample interval"):
            Sampler(connect, interval=interval)
    assert Sampler(connect, interval=0.1).interval == 0.1
    assert MAX_INTERVAL == 86400 and Sampler(connect, interval=MAX_INTERVAL).interval == 86400
    for bad in ("86400.001", "1e10", "inf", "0", "1e-20", "0.0999"):
        # (a DSN that cannot be used: were the value taken, the command would stop there, exit 1)
        assert main(["dashboard", "--sample-interval", bad, "--dsn", "not a dsn"]) == 2, bad
        err = capsys.readouterr().err
        assert "--sample-interval" in err and "up to 86400 (a day)" in err, err
    assert build_parser().parse_args(["dashboard", "--sample-interval", "86400"]).sample_interval == 86400


def test_the_history_kept_and_read_is_bounded_whatever_the_interval(make_app: Any) -> None:
    """At --sample-interval 0.1 the hour was 36,001 samples, every one of them in each chart
    refresh's /api/history (10 MB, 4 s of CPU at a full hour, a refresh a second: a review).
    At most MAX_SAMPLES are kept, 1 s apart for the hour, the newest always; a refresh reads at
    most MAX_POINTS of them, the newest among them, and its rates are the averages between."""
    def sample(t: float) -> Sample:
        n = int(round(t * 10))  # 10 messages enqueued a second, all of them still ready
        return Sample(1_000_000 + t, {"q": QueueStats("q", n, 0, 0, 0, None)}, n,
                      {"q": {"enqueued": n, "delivered": 0, "completed": 0}})

    fast = Sampler(lambda: psycopg.connect(""), interval=0.1)
    for i in range(40_000):  # 4,000 s of passes
        fast.keep(sample(i / 10))
    kept = fast.snapshot()
    assert len(kept) <= MAX_SAMPLES + 1 and kept[-1] == sample(3999.9)
    gaps = [b.t - a.t for a, b in zip(kept, kept[1:-1])]
    assert min(gaps) >= 1.0 - 1e-6 and kept[-1].t - kept[0].t >= 3599, (min(gaps), kept[0].t)
    slow = Sampler(lambda: psycopg.connect(""), interval=5)  # the default: every pass kept
    for i in range(100):
        slow.keep(sample(5.0 * i))
    assert [s.t for s in slow.snapshot()] == [1_000_000 + 5.0 * i for i in range(100)]

    app = make_app(sample_interval=0.1)
    sampler = app.extensions["pgqueue"]["sampler"]
    for s in kept:
        sampler.keep(s)
    data = app.test_client().get("/api/history?queue=q").get_json()
    series = [*data["depth"].values(), *data["oldest"].values(), *data["throughput"].values()]
    assert series and all(0 < len(points) <= MAX_POINTS for points in series), [len(p) for p in series]
    assert data["depth"]["ready"][-1] == [kept[-1].t, 39999.0]
    assert all(abs(rate - 10) < 0.01 for _, rate in data["throughput"]["enqueued"]), data["throughput"]["enqueued"][:3]


def _history_sample(t: float) -> Sample:
    """A sample at ``t`` seconds: 10 messages enqueued a second, all of them still ready, and 7
    more every third second (not a straight line: a shift of the points drawn shows)."""
    n = int(round(t * 10)) + (7 if int(t) % 3 == 0 else 0)
    return Sample(1_000_000 + t, {"q": QueueStats("q", n, 0, 0, 0, None)}, n,
                  {"q": {"enqueued": n, "delivered": 0, "completed": 0}})


def _ready_points(client: FlaskClient) -> list[tuple[float, float]]:
    return [(t, v) for t, v in client.get("/api/history?queue=q").get_json()["depth"]["ready"]]


def test_a_chart_refresh_draws_the_points_of_the_one_before(make_app: Any) -> None:
    """The first bound of /api/history read every n-th sample counted back from the newest: at
    0.1 s each new sample kept moved the choice by one, so that no two refreshes a second apart
    drew the same points (the lines shifted at every refresh, the rates averaged over other
    spans). A refresh draws the points of the one before but its newest (and the oldest, as it
    leaves the hour), and the newest sample."""
    app = make_app(sample_interval=0.1)
    sampler, client = app.extensions["pgqueue"]["sampler"], app.test_client()
    tenth = 0
    for tenth in range(40_000):  # 4,000 s of passes: the hour kept is full
        sampler.keep(_history_sample(tenth / 10))
    before = _ready_points(client)
    assert 600 <= len(before) <= MAX_POINTS, len(before)
    for _ in range(30):  # a refresh each second, 10 passes between
        for tenth in range(tenth + 1, tenth + 11):
            sampler.keep(_history_sample(tenth / 10))
        after = _ready_points(client)
        newest = _history_sample(tenth / 10)
        assert len(after) <= MAX_POINTS and after[-1] == (newest.t, float(newest.last_id or 0))
        lost = [p for p in before[1:-1] if p not in after]
        assert not lost, (len(lost), lost[:3])
        before = after


def test_the_default_interval_draws_every_sample_of_the_hour(make_app: Any) -> None:
    """At the default 5 s the hour is 721 samples, one more than the first bound of
    /api/history (720), which halved them to 361 points: all of them are drawn."""
    app = make_app()
    for i in range(800):
        app.extensions["pgqueue"]["sampler"].keep(_history_sample(5.0 * i))
    points = _ready_points(app.test_client())
    assert len(points) == 721 and [t for t, _ in points] == [1_000_000 + 5.0 * i for i in range(79, 800)]


def test_an_interval_longer_than_the_history_still_draws_throughput(dsn: str) -> None:
    """--sample-interval may be up to a day, longer than the hour of samples kept: the sampler
    kept one sample then, and the throughput chart (the change between two samples) stayed
    empty for as long as the dashboard ran."""
    sampler = Sampler(lambda: psycopg.connect(dsn, autocommit=True), interval=7200)
    try:
        with Queue(dsn, "default") as queue:
            assert sampler.tick() is not None
            queue.enqueue("x")
            time.sleep(0.01)
            assert sampler.tick() is not None
        samples = sampler.snapshot()
        assert len(samples) == 2
        source, rates = throughput_series(samples, None)
        assert source == "counters" and rates["enqueued"] and rates["enqueued"][-1][1] > 0, rates
    finally:
        sampler.stop()


# -- a security review of the dashboard (session 44) ---------------------------------------


def test_a_payload_whose_charset_raises_unicode_error_is_a_hex_dump(conn: psycopg.Connection[Any],
                                                                     make_app: Any) -> None:
    """utf-16 without a BOM, idna, punycode raise UnicodeError (not UnicodeDecodeError): one such
    message made its queue's page, and then its dead letters' page, a 500."""
    for charset, data in (("utf-16", b"\x68\x00\x69\x00\x0a\x00"), ("utf-32", b"\x68\x00\x69\x00"),
                          ("idna", b"\xff\xfe"), ("punycode", b"\xff\xfe"), ("undefined", b"hi")):
        shown = show(data, f"text/plain; charset={charset}")
        assert shown.kind == "hex" and f"not {charset} text" in shown.note, (charset, shown)
    # a lone surrogate is no character a page can carry: utf-7 or unicode_escape bytes that
    # decode to one are a hex dump, a JSON string escaping one stays escaped (each made the page
    # a 500 as it was encoded: a review)
    for charset, data in (("utf-7", b"+3IA-"), ("unicode_escape", b"\\udc80")):
        shown = show(data, f"text/plain; charset={charset}")
        assert shown.kind == "hex" and f"not {charset} text" in shown.note, (charset, shown)
    shown = show(b'{"note": "\\udc80", "e": "\xc3\xa9"}', "application/json")
    assert shown.kind == "json" and "\\udc80" in shown.text and "\\u00e9" in shown.text, shown
    client = make_app().test_client()
    conn.execute("SELECT pgqueue.message_create('default', convert_to('{\"note\": \"\\udc80\"}', 'UTF8'), NULL, "
                 "'application/json')")
    conn.execute("SELECT pgqueue.message_create('default', '+3IA-'::bytea, NULL, 'text/plain; charset=utf-7')")
    page = client.get("/queues/default")
    assert page.status_code == 200 and "\\udc80" in page.get_data(as_text=True)
    conn.execute("DELETE FROM pgqueue.message")
    dead_letter(conn, "default", b"+3IA-", "text/plain; charset=utf-7")
    assert client.get("/queues/default/dead").status_code == 200
    conn.execute("SELECT pgqueue.message_create('default', '\\x680069000a00'::bytea, NULL, 'text/plain; charset=utf-16')")
    assert client.get("/queues/default").status_code == 200
    dead_letter(conn, "default", b"\x68\x00", "text/plain; charset=utf-16")
    assert client.get("/queues/default/dead").status_code == 200


def test_without_a_token_beyond_loopback_it_answers_to_ip_addresses_only(dsn: str, make_app: Any) -> None:
    """`pgqueue dashboard --host 0.0.0.0` without --token turned the Host check off, so a
    DNS-rebinding page the operator visited could read the page's CSRF token and purge."""
    client = make_app(loopback_only=False, ip_hosts_only=True).test_client()
    assert client.get("/", headers={"Host": "rebind.attacker.example:8080"}).status_code == 400
    for host in ("10.1.2.3:8080", "[2001:db8::1]:8080", "127.0.0.1", "localhost:8080"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    import http.client

    with pgqueue_command("dashboard", "--dsn", dsn, "--host", "0.0.0.0", "--port", "0") as proc:
        assert proc.stdout is not None
        found = re.search(r"http://[^:/]+:(\d+)/", proc.stdout.readline())
        assert found, "no URL"
        for host, status in (("rebind.attacker.example", 400), ("127.0.0.1", 200)):
            web = http.client.HTTPConnection("127.0.0.1", int(found.group(1)), timeout=10)
            web.request("GET", "/", headers={"Host": f"{host}:{found.group(1)}"})
            assert web.getresponse().status == status, host
            web.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert "IP addresses only" in err, err


def test_a_session_ends_when_the_token_changes(make_app: Any) -> None:
    """A login session kept working after the token was rotated (processes sharing a secret_key)."""
    old = make_app(token="old-token-1", secret_key=b"k" * 32)
    client = old.test_client()
    assert log_in(client, "old-token-1").status_code == 302
    cookie = client.get_cookie("pgqueue_dashboard")
    assert cookie is not None and client.get("/").status_code == 200
    rotated = make_app(token="new-token-2", secret_key=b"k" * 32).test_client()
    rotated.set_cookie("pgqueue_dashboard", cookie.value)
    assert rotated.get("/").status_code == 401


def test_purge_all_confirms_the_exact_count_it_acts_on(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """Above 10,000 the confirmation page showed queue_stats's estimate while "all" acted on
    every dead letter: it now counts exactly what it acts on; the dead page says "about"."""
    qid = conn.execute("SELECT id FROM pgqueue.queue WHERE name = 'default'").fetchone()
    assert qid is not None
    conn.execute("INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, attempts, created_at, dead_at, content) "
                 "SELECT 1000000 + i, %s, 0, 1, 0, i, 'x' FROM generate_series(1, 12345) i", (qid[0],))
    client = make_app().test_client()
    assert "about " in client.get("/queues/default/dead").get_data(as_text=True)
    page = client.post("/queues/default/dead/purge", data={"all": "1", "csrf_token": csrf(client)})
    assert page.status_code == 200
    assert "All 12345 dead letters of queue default" in page.get_data(as_text=True)


def test_the_commands_request_log_hides_the_token_and_cookies_are_per_port(dsn: str) -> None:
    """`pgqueue dashboard` logged every `GET /?token=...` with the token on stderr; two
    dashboards on one host shared the cookie name, so each logged the other out."""
    with pgqueue_command("dashboard", "--dsn", dsn, "--port", "0", "--token", "s3cretTOKEN123456") as proc:
        assert proc.stdout is not None
        found = re.search(r"(http://127\.0\.0\.1:(\d+)/)\?token=", proc.stdout.readline())
        assert found, "no URL"
        import http.client

        for _ in range(2):  # each use of the URL is a line of the log
            web = http.client.HTTPConnection("127.0.0.1", int(found.group(2)), timeout=10)
            web.request("GET", "/?token=s3cretTOKEN123456")
            answer = web.getresponse()
            assert answer.status == 302  # logged in, the token taken out of the URL
            cookies = answer.headers.get_all("Set-Cookie") or []
            web.close()
            assert any(c.startswith(f"pgqueue_dashboard_{found.group(2)}=") for c in cookies), cookies
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert "GET /?token=(hidden)" in err, err
    assert "s3cretTOKEN123456" not in err


def test_the_printed_url_logs_in_with_any_token_and_the_log_hides_all_of_it(dsn: str) -> None:
    """The URL was printed with the token as it is: a token with + / = & # % or a space in it
    (base64 from `openssl rand -base64`) did not log in from it, each try counting towards the
    lockout, and with a raw & the log showed the rest of the token."""
    import http.client

    token = "QQzz+KKww/VVjj==XXuu&YYpp #50%"
    with pgqueue_command("dashboard", "--dsn", dsn, "--port", "0", "--token", token) as proc:
        assert proc.stdout is not None
        found = re.search(r"at http://127\.0\.0\.1:(\d+)(/\S*) \(Ctrl-C", proc.stdout.readline())
        assert found, "no URL"
        port, path = int(found.group(1)), found.group(2)

        def get(target: str) -> int:
            web = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                web.putrequest("GET", target, skip_accept_encoding=True)
                web.endheaders()
                return web.getresponse().status
            finally:
                web.close()

        assert get(path) == 302  # logged in from the printed URL
        assert get("/?token=QQzz+KKww/VVjj==XXuu&YYpp") == 401  # the token as it was printed: wrong, and logged
        assert get("/?x=1&%74oken=QQzz%2BKKww%2FVVjj%3D%3DXXuu%26YYpp%20%2350%25") == 302  # the key percent-encoded
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert err.count("token=(hidden)") == 3, err
    for part in ("QQzz", "KKww", "VVjj", "XXuu", "YYpp", "%2B", "%26"):
        assert part not in err.replace("(hidden)", ""), (part, err)


def test_the_log_hides_a_token_after_quotes_spaces_and_semicolons() -> None:
    """A review of the redaction: the query's match stopped at a quote (Werkzeug logs %27 and %22
    decoded), and a raw space before the token put it beyond the part searched."""
    from pgqueue.dashboard import _hide_token

    for line in ['"GET /?token=Abc\'SECRETpart9 HTTP/1.1" 302 -',
                 '"HEAD /?token=Abc"SECRETdq HTTP/1.1" 401 -',
                 '"GET /?q=it\'s&token=SECRETtok123 HTTP/1.1" 302 -',
                 "code 400, message Bad request syntax ('GET /?q=a b&token=SECRETtok123 HTTP/1.1')",
                 '"GET /?q=a b&token=SECRET x"y HTTP/1.1" 400 -',
                 '"GET /?x=1;token=SECRETsemi HTTP/1.1" 401 -']:
        hidden = _hide_token(line)
        assert "token=(hidden)" in hidden and "SECRET" not in hidden, (line, hidden)
    for line in ['"GET /queues?page=2 HTTP/1.1" 200 -', '"GET /?q=a b HTTP/1.1" 400 -',
                 " * Running on http://127.0.0.1:8080"]:
        assert _hide_token(line) == line


def test_a_login_posted_from_another_site_is_refused_and_not_counted(make_app: Any) -> None:
    """The login form carries the session's CSRF token like every other form; the login POST
    was the one POST the dashboard took without it. A page on another site could so post wrong
    tokens from the user's browser, each counted against the user's address, and lock the user
    out of their own dashboard (FAILED_LOGIN_LIMIT of them). Without the token (or with another
    session's) the POST is refused with 400 before its token is looked at, and counts nothing:
    after more than the limit of such posts the right token with the page's CSRF token logs in."""
    from pgqueue.dashboard.app import FAILED_LOGIN_LIMIT

    app = make_app(token="s3cret-token")
    client = app.test_client()
    other = app.test_client()
    stolen = csrf(other)  # another session's token is no better than none
    for i in range(FAILED_LOGIN_LIMIT + 2):
        response = client.post("/login", data={"token": f"guess-{i}", **({"csrf_token": stolen} if i % 2 else {})})
        assert response.status_code == 400, (i, response.status_code)
        assert "CSRF token" in response.get_data(as_text=True)
    assert client.post("/login", data={"token": "s3cret-token"}).status_code == 400  # the right one too
    assert client.get("/").status_code == 401  # nor did that log in
    assert log_in(client, "s3cret-token").status_code == 302
    assert client.get("/").status_code == 200


def test_a_token_url_loaded_by_another_site_is_neither_taken_nor_counted(make_app: Any) -> None:
    """A page elsewhere could make the user's browser load ``/?token=wrong`` (an ``<img>``, a
    redirect) again and again, each load counted against the user's address, and lock the user
    out. Browsers say who made them load a URL (Sec-Fetch-Site): a token in a URL that another
    site (or another port of this host: "same-site") had loaded is neither compared nor counted,
    even the right one, and the login page says why; the printed URL opened by the user ("none"),
    the dashboard's own links ("same-origin") and clients that send no such header log in."""
    from pgqueue.dashboard.app import FAILED_LOGIN_LIMIT, FOREIGN_TOKEN

    app = make_app(token="s3cret-token")
    client = app.test_client()
    for i in range(FAILED_LOGIN_LIMIT + 2):
        site = "cross-site" if i % 2 else "same-site"
        response = client.get(f"/?token=guess-{i}", headers={"Sec-Fetch-Site": site})
        assert response.status_code == 401, (i, response.status_code)
        assert 'id="foreign"' in response.get_data(as_text=True)
        assert "not the right one" not in response.get_data(as_text=True)
    api = client.get("/api/queues?token=s3cret-token", headers={"Sec-Fetch-Site": "cross-site"})
    assert api.status_code == 401 and api.get_json() == {"error": FOREIGN_TOKEN}
    assert client.get("/").status_code == 401  # the right token from another site did not log in
    # nothing was counted (more than the limit would have locked the address out: 429): the
    # user's own wrong token is compared
    wrong = client.get("/?token=typo", headers={"Sec-Fetch-Site": "none"})
    assert wrong.status_code == 401 and "not the right one" in wrong.get_data(as_text=True)
    for site in ("none", "same-origin", None):
        c = app.test_client()
        response = c.get("/?token=s3cret-token", headers={"Sec-Fetch-Site": site} if site else {})
        assert response.status_code == 302, (site, response.status_code)
        assert c.get("/").status_code == 200


def test_wrong_tokens_are_rate_limited_per_client(make_app: Any) -> None:
    """Nothing limited wrong access tokens: a script could try tokens as fast as the server
    answered. After FAILED_LOGIN_LIMIT wrong ones within the window a client (an IPv4 address, an
    IPv6 /64) gets 429 with Retry-After for FAILED_LOGIN_LOCKOUT seconds, even with the right
    token; other clients and logged-in sessions are not slowed."""
    from pgqueue.dashboard.app import FAILED_LOGIN_LIMIT, FAILED_LOGIN_LOCKOUT, FAILED_LOGIN_WINDOW

    app = make_app(token="s3cret-token")
    now = [1000.0]
    app.extensions["pgqueue"]["failed_logins"].clock = lambda: now[0]

    def client(address: str) -> FlaskClient:
        c = app.test_client()
        c.environ_base["REMOTE_ADDR"] = address
        return c

    def attempt(c: FlaskClient, token: str, how: int) -> Any:  # the three ways a token is given
        if how == 0:
            return c.get(f"/queues/default?token={token}")
        if how == 1:
            return log_in(c, token)
        return c.get("/api/queues", headers={"Authorization": f"Bearer {token}"})

    earlier = client("203.0.113.7")  # logged in before the attack, from the same address
    assert log_in(earlier, "s3cret-token").status_code == 302
    attacker = client("203.0.113.7")
    assert attacker.get("/").status_code == 401  # no token given: not an attempt
    for i in range(FAILED_LOGIN_LIMIT):
        assert attempt(attacker, f"guess-{i}", i % 3).status_code == 401, i
    for how in range(3):
        for token in ("guess-x", "s3cret-token"):  # the right one too: it is not even compared
            response = attempt(attacker, token, how)
            assert response.status_code == 429, (how, token)
            assert int(response.headers["Retry-After"]) == FAILED_LOGIN_LOCKOUT
            # nor did it log the client in: a request without a token is still refused (the
            # session cookie is signed and encoded, so its text names no "auth" to look for)
            assert attacker.get("/").status_code == 401, (how, token)
    assert "Too many wrong access tokens" in attacker.get("/?token=x").get_data(as_text=True)
    assert "Too many wrong access tokens" in attempt(attacker, "x", 2).get_json()["error"]
    assert earlier.get("/").status_code == 200  # a session is not an attempt
    assert log_in(client("198.51.100.1"), "s3cret-token").status_code == 302
    # an IPv6 client is its /64: another address of the same /64 is locked out too
    for i in range(FAILED_LOGIN_LIMIT):
        assert attempt(client(f"2001:db8::{i + 1:x}"), "guess", 1).status_code == 401
    assert attempt(client("2001:db8::ffff"), "s3cret-token", 1).status_code == 429
    assert attempt(client("2001:db8:0:1::1"), "s3cret-token", 1).status_code == 302
    # the lockout ends
    now[0] += FAILED_LOGIN_LOCKOUT - 10
    assert int(attempt(attacker, "s3cret-token", 1).headers["Retry-After"]) == 10
    now[0] += 10
    assert attempt(attacker, "s3cret-token", 1).status_code == 302
    # failures further apart than the window do not add up; a right token does not forget them:
    # a script that knows the token, behind the same address (a NAT, a proxy), polling with it
    # wiped an attacker's count at every poll (a review: 180 wrong tokens compared without a 429)
    other = client("192.0.2.1")
    for _ in range(FAILED_LOGIN_LIMIT - 1):
        assert attempt(other, "guess", 0).status_code == 401
    now[0] += FAILED_LOGIN_WINDOW
    for _ in range(FAILED_LOGIN_LIMIT - 1):
        assert attempt(other, "guess", 0).status_code == 401
    for how in range(3):  # (each from a client of its own: a login's session is not an attempt)
        assert attempt(client("192.0.2.1"), "s3cret-token", how).status_code in (200, 302)
    assert attempt(other, "guess", 0).status_code == 401
    assert attempt(other, "guess", 0).status_code == 429


def test_login_bodies_sent_after_the_check_are_counted_before_they_are_compared(dsn: str) -> None:
    """The limit was checked before a POST /login's body was read, and the login view compared
    and counted without checking again: a client that sent the headers of many requests first
    and their bodies later had every token compared, the right one accepted while locked out (a
    review: 40 compared against a limit of 10). The view checks and counts once it has the body,
    in one step."""
    from pgqueue.dashboard.app import FAILED_LOGIN_LIMIT

    import http.client

    server = start(Options(dsn=dsn, token="s3cret-token"), port=0)
    port = server.wsgi.port
    # the login page's session cookie and CSRF token, which the login form posts (a login POST
    # without them is refused before its token is counted)
    page = http.client.HTTPConnection("127.0.0.1", port)
    page.request("GET", "/")
    answer = page.getresponse()
    cookie = answer.getheader("Set-Cookie", "").split(";", 1)[0]
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', answer.read().decode())
    page.close()
    assert cookie and found, cookie
    form = b"csrf_token=" + found.group(1).encode() + b"&"

    def headers(length: int) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall((f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {cookie}\r\n"
                      f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {length}\r\n"
                      "Connection: close\r\n\r\n").encode())
        return sock

    def status(sock: socket.socket, body: bytes) -> int:
        sock.sendall(body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        sock.close()
        return int(data.split(b" ", 2)[1])

    try:
        bodies = [form + b"token=wrong%03d" % i for i in range(4 * FAILED_LOGIN_LIMIT)] + [form + b"token=s3cret-token"]
        socks = [headers(len(b)) for b in bodies]
        time.sleep(1.0)  # every request is past the check that runs before the body is read
        statuses = [status(sock, body) for sock, body in zip(socks, bodies)]
    finally:
        server.stop()
    assert statuses[:-1].count(401) == FAILED_LOGIN_LIMIT, statuses
    assert statuses[-1] == 429, statuses


def test_failed_logins_take_bounded_memory() -> None:
    """Many addresses each failing once do not grow the table past its capacity: those whose
    window is over are forgotten, a locked-out one is kept, and while the table is full of live
    ones all other clients count as one, so that more addresses do not buy more tries."""
    from pgqueue.dashboard.app import FAILED_LOGIN_CLIENTS, FailedLogins, client_key

    now = [0.0]
    limiter = FailedLogins(limit=3, window=60, lockout=600, capacity=100, clock=lambda: now[0])
    for _ in range(3):
        limiter.failed("locked")
    for i in range(50):
        limiter.failed(f"10.0.0.{i}")
    assert len(limiter) == 51 and limiter.retry_after("locked") == 600
    now[0] += 100  # the 50 are over (window 60 s); the lockout is not
    for i in range(99):
        limiter.failed(f"10.1.0.{i}")
    assert len(limiter) == 100 and limiter.retry_after("locked") == 500
    for i in range(100_000):  # a full table: the others count as one client
        assert limiter.retry_after(f"10.2.{i // 256}.{i % 256}") == (None if i < 3 else 600), i
        limiter.failed(f"10.2.{i // 256}.{i % 256}")
        assert len(limiter) == 100
    assert limiter.retry_after("locked") == 500 and limiter.retry_after("10.1.0.5") is None
    now[0] += 600  # every lockout is over
    assert limiter.retry_after("locked") is None and limiter.retry_after("10.9.9.9") is None
    limiter.failed("10.9.9.9")
    assert len(limiter) <= 100 and limiter.retry_after("10.9.9.9") is None
    default = FailedLogins()
    for i in range(3 * FAILED_LOGIN_CLIENTS):
        default.failed(client_key(f"2001:db8:{i:x}::1"))
    assert len(default) == FAILED_LOGIN_CLIENTS
    assert client_key("::ffff:192.0.2.1") == "192.0.2.1" and client_key("2001:db8::1") == "2001:db8::/64"


def test_logout_ends_the_session(make_app: Any) -> None:
    """There was no logout, and the session cookie is signed, not stored: a copy of it worked for
    as long as the token and the key did. POST /logout (with the CSRF token, as every change)
    deletes the cookie and ends the session in the process: the old cookie no longer works."""
    app = make_app(token="s3cret-token")
    client = app.test_client()
    assert log_in(client, "s3cret-token").status_code == 302
    page = client.get("/").get_data(as_text=True)
    assert 'id="logout"' in page and 'action="/logout"' in page
    cookie = client.get_cookie("pgqueue_dashboard")
    assert cookie is not None
    assert client.post("/logout").status_code == 400  # no CSRF token: refused, still logged in
    assert client.post("/logout", data={"csrf_token": "x" * 43}).status_code == 400
    assert client.get("/").status_code == 200
    response = client.post("/logout", data={"csrf_token": csrf(client)})
    assert response.status_code == 303 and response.headers["Location"].endswith("/?signed_out=1")
    assert client.get_cookie("pgqueue_dashboard") is None  # the browser's copy is deleted
    response = client.get("/?signed_out=1")
    assert response.status_code == 401 and "Signed out" in response.get_data(as_text=True)
    replay = app.test_client()  # a copy of the old cookie is refused too
    replay.set_cookie("pgqueue_dashboard", cookie.value)
    assert replay.get("/").status_code == 401 and replay.get("/api/queues").status_code == 401
    # a new login is a new session, which holds
    assert log_in(client, "s3cret-token").status_code == 302
    assert client.get("/").status_code == 200
    second = client.get_cookie("pgqueue_dashboard")
    assert second is not None and second.value != cookie.value
    # no logout to offer without a token, and a logout there changes nothing
    open_client = make_app().test_client()
    assert 'id="logout"' not in open_client.get("/").get_data(as_text=True)
    response = open_client.post("/logout", data={"csrf_token": csrf(open_client)})
    assert response.status_code == 303 and open_client.get("/").status_code == 200


def test_ended_sessions_take_bounded_memory() -> None:
    """A process remembers at most `capacity` ended sessions, each until it would have expired
    anyway; past that it ends every session logged in until then, rather than forget one."""
    from pgqueue.dashboard.app import Sessions

    now = [1000.0]
    sessions = Sessions(lifetime=100, capacity=3, clock=lambda: now[0])
    assert sessions.valid("a", 990) and not sessions.valid("a", 900)  # older than its lifetime
    for sid in "abc":
        sessions.end(sid, 990)
    assert not sessions.valid("a", 990) and sessions.valid("d", 990) and len(sessions) == 3
    now[0] = 1095  # a, b and c expire at 1090: forgotten when the table is full
    sessions.end("d", 1000)
    assert len(sessions) == 1 and not sessions.valid("d", 1000) and sessions.valid("e", 1000)
    for sid in "efg":
        sessions.end(sid, 1095)
    assert len(sessions) == 0  # full of live ones: every session so far ends
    assert not sessions.valid("x", 1094) and not sessions.valid("x", 1095)
    now[0] = 1096
    assert sessions.valid("y", 1096)


def insert_dead_letters(conn: psycopg.Connection[Any], queue: str, n: int) -> list[int]:
    """Insert n dead letters whose order (dead_at, id) is not the order of their ids, with ties
    on dead_at; return their ids in that order (the dead-letter page's)."""
    qid = conn.execute("SELECT id FROM pgqueue.queue WHERE name = %s", (queue,)).fetchone()
    assert qid is not None
    rows = [(7_000_000 + i, 1_700_000_000_000 + (i * 37) % 11) for i in range(n)]
    conn.execute("INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, attempts, created_at, dead_at, content, "
                 "content_type) SELECT u.id, %s, 0, 3, 0, u.dead_at, convert_to('letter ' || u.id, 'UTF8'), "
                 "'text/plain' FROM unnest(%s::bigint[], %s::bigint[]) AS u(id, dead_at)",
                 (qid[0], [r[0] for r in rows], [r[1] for r in rows]))
    return [i for i, _ in sorted(rows, key=lambda r: (r[1], r[0]))]


def test_dead_letters_page_by_keyset_in_the_api(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """Only the first 100 dead letters could be seen: GET /api/queues/<q>/dead pages through them
    all, oldest first, by keyset ((dead_at, id) of the last letter seen, not an OFFSET: a page
    stays where it was when letters before it go)."""
    order = insert_dead_letters(conn, "default", 250)
    client = make_app().test_client()
    pages, cursor = [], None
    while True:
        data = client.get("/api/queues/default/dead" + (f"?after={cursor}" if cursor else "")).get_json()
        pages.append([d["id"] for d in data["dead_letters"]])
        assert data["queue"] == "default" and (data["previous"] is None) == (cursor is None)
        cursor = data["next"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [100, 100, 50]
    assert sum(pages, []) == order
    first = client.get("/api/queues/default/dead?limit=100").get_json()
    letter = first["dead_letters"][0]
    assert letter["payload"] == {"kind": "text", "text": f"letter {order[0]}", "shown_bytes": 14,
                                 "truncated": False, "note": ""}
    assert (letter["attempts"], letter["content_type"], letter["size"]) == (3, "text/plain", 14)
    assert letter["dead_at"].startswith("2023-11-14T22:13:20")
    second = client.get(f"/api/queues/default/dead?after={first['next']}").get_json()
    back = client.get(f"/api/queues/default/dead?before={second['previous']}").get_json()
    assert [d["id"] for d in back["dead_letters"]] == pages[0] and back["previous"] is None
    assert back["next"] == first["next"]
    small = client.get("/api/queues/default/dead?limit=7").get_json()
    assert [d["id"] for d in small["dead_letters"]] == order[:7]
    # keyset: purging letters of the first page does not move the second
    Queue(conn, "default").purge_dead(order[:30])
    again = client.get(f"/api/queues/default/dead?after={first['next']}").get_json()
    assert [d["id"] for d in again["dead_letters"]] == pages[1]
    # a page before which nothing is left is the first
    Queue(conn, "default").purge_dead(order[30:100])
    gone = client.get(f"/api/queues/default/dead?before={second['previous']}").get_json()
    assert [d["id"] for d in gone["dead_letters"]] == order[100:200] and gone["previous"] is None
    # (superscript digits are digits to str.isdigit() but not to int(): a 500, a review found)
    for bad in ("limit=0", "limit=101", "limit=x", "after=12", "after=1-x", "before=9" * 30 + "-1",
                "after=99999999999999999999-1", "limit=\u00b2", "limit=\u00b9\u2070"):
        response = client.get(f"/api/queues/default/dead?{bad}")
        assert response.status_code == 400 and response.is_json, bad
    assert client.get("/queues/default/dead?done=requeued&n=\u00b2").status_code == 200  # (no notice)
    response = client.get("/api/queues/no_such_queue/dead")
    assert response.status_code == 404 and "no_such_queue" in response.get_json()["error"]


def test_dead_letters_page_by_keyset_in_the_page(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """The dead-letter page links to the next and previous 100; an action on a later page comes
    back to that page."""
    order = insert_dead_letters(conn, "default", 230)
    client = make_app().test_client()

    def shown(page: str) -> list[int]:
        return [int(i) for i in re.findall(r'<tr id="dead-(\d+)">', page)]

    def link(page: str, which: str) -> str | None:
        found = re.search(rf'id="{which}-page" href="([^"]+)"', page)
        return None if found is None else found.group(1).replace("&amp;", "&")

    page = client.get("/queues/default/dead").get_data(as_text=True)
    assert shown(page) == order[:100] and link(page, "previous") is None and link(page, "first") is None
    next_link = link(page, "next")
    assert next_link is not None
    page2 = client.get(next_link).get_data(as_text=True)
    assert shown(page2) == order[100:200] and link(page2, "first") == "/queues/default/dead"
    next_link = link(page2, "next")
    assert next_link is not None
    page3 = client.get(next_link).get_data(as_text=True)
    assert shown(page3) == order[200:] and link(page3, "next") is None
    previous = link(page3, "previous")
    assert previous is not None and shown(client.get(previous).get_data(as_text=True)) == order[100:200]
    # requeue one letter of the third page: the confirmation and the redirect keep the page
    after = next_link.split("after=", 1)[1]
    assert f'name="after" value="{after}"' in page3
    token = csrf(client)
    confirm = client.post("/queues/default/dead/requeue", data={"id": order[205], "after": after,
                                                                "csrf_token": token}).get_data(as_text=True)
    assert f'name="after" value="{after}"' in confirm and f"dead?after={after}" in confirm  # (Cancel)
    response = client.post("/queues/default/dead/requeue", data=hidden_fields(confirm))
    assert response.status_code == 303
    assert f"after={after}" in response.headers["Location"] and "done=requeued" in response.headers["Location"]
    page3 = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "requeued 1 dead letter(s)" in page3 and shown(page3) == order[200:205] + order[206:]
    assert client.get("/queues/default/dead?after=nonsense").status_code == 400
    # past the last letter: nothing, and the way back
    Queue(conn, "default").purge_dead(order[200:])
    empty = client.get(next_link).get_data(as_text=True)
    assert "No dead letters past this point" in empty and link(empty, "first") == "/queues/default/dead"


def test_pages_of_a_sql_ascii_database(pg_server: Server, template_db: str, make_app: Any) -> None:
    """The dashboard's connections ask for client_encoding UTF8, as pgqueue's others do: on a
    SQL_ASCII database (initdb under the C locale) psycopg read its texts as bytes, and the
    queue page and the dead-letter pages failed with 500 (a review), the role read b'...'."""
    from helpers import database_in

    with database_in(pg_server, "SQL_ASCII") as name:
        dsn = pg_server.dsn(name)
        queue = Queue(dsn, "dq")
        queue.create(max_attempts=1)
        queue.enqueue("grüße")
        queue.enqueue({"n": 1})
        msg = queue.dequeue(1)[0]
        queue.fail(msg, "kaputt: ü")
        client = make_app(dsn=dsn).test_client()
        for path in ("/", "/queues/dq", "/api/queues/dq/dead", "/api/queues"):
            response = client.get(path)
            assert response.status_code == 200, (path, response.get_data(as_text=True)[-500:])
            assert "b'" not in response.get_data(as_text=True), path
        dead = client.get("/api/queues/dq/dead").get_json()["dead_letters"]
        assert [d["last_error"] for d in dead] == ["kaputt: ü"]


def test_a_lock_on_the_messages_answers_database_busy(conn: psycopg.Connection[Any], dsn: str,
                                                      make_app: Any) -> None:
    """A lock another session holds on pgqueue.message (LOCK TABLE, VACUUM FULL) held every page
    and the sampler for as long as it lasted: no statement_timeout; once the pool's 4 connections
    all waited, other pages answered 503 "no connection". Each statement now gives up after
    Options.wait: the page says "Database busy" (503), its connection is free for the next, the
    sampler's pass records its error, and a requeue that waits for the lock changes nothing."""
    letter = dead_letter(conn, "default")
    app = make_app(wait=1)
    client = app.test_client()
    token = csrf(client, "/queues/default/dead")
    with psycopg.connect(dsn) as locker:
        # (the lock ends by itself after 30 s: without a timeout a page waits that long and loads)
        locker.execute("SET idle_in_transaction_session_timeout = '30s'")
        locker.execute("LOCK TABLE pgqueue.message IN ACCESS EXCLUSIVE MODE")  # (as VACUUM FULL takes)
        started = time.monotonic()
        for path in ("/", "/queues/default", "/queues/default/dead", "/", "/", "/"):  # more than the pool's 4
            response = client.get(path)
            page = response.get_data(as_text=True)
            assert response.status_code == 503 and "Database busy" in page, (path, page[-500:])
            assert "within 1 s" in page and "lock" in page
        response = client.get("/api/queues")
        assert response.status_code == 503 and "lock" in response.get_json()["detail"]
        sampler = app.extensions["pgqueue"]["sampler"]
        assert sampler.tick() is None and sampler.error is not None and "timeout" in sampler.error
        response = client.post("/queues/default/dead/requeue", data={"id": letter, "confirm": "yes",
                                                                       "csrf_token": token})
        assert response.status_code == 503 and "nothing was changed" in response.get_data(as_text=True)
        assert time.monotonic() - started < 25
        locker.rollback()
    assert [d.id for d in Queue(conn, "default").dead_letters()] == [letter]
    assert client.get("/").status_code == 200
    assert sampler.tick() is not None and sampler.error is None


def test_pages_and_the_sampler_make_no_session_setting(conn: psycopg.Connection[Any], dsn: str, make_app: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The statement_timeout and lock_timeout of the pages and the sampler are set in each of
    their transactions (set_config's is_local), never for the session: the pool's configure set
    them once per connection, and behind a transaction-mode pooler (PgBouncer
    pool_mode=transaction, RDS Proxy) that server connection went to other clients between
    transactions with them, while the dashboard's next statements could run on one without
    (a review). After pages, the API, an action and a sampler pass, every pooled connection and
    the sampler's show the database's defaults outside a transaction; a page's statement that
    runs longer than Options.wait is still cancelled (Database busy)."""
    default = [conn.execute(f"SHOW {name}").fetchone() for name in ("statement_timeout", "lock_timeout")]
    letter = dead_letter(conn, "default")
    app = make_app(wait=1)
    client = app.test_client()
    for path in ("/", "/queues/default", "/queues/default/dead", "/api/queues", "/api/queues/default/dead"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.get_data(as_text=True)[-500:])
    token = csrf(client, "/queues/default/dead")
    response = client.post("/queues/default/dead/requeue", data={"id": letter, "confirm": "yes", "csrf_token": token})
    assert response.status_code == 303
    sampler = app.extensions["pgqueue"]["sampler"]
    assert sampler.tick() is not None and sampler._conn is not None
    pool = app.extensions["pgqueue"]["pool"]
    with ExitStack() as stack:
        pooled = [stack.enter_context(pool.connection()) for _ in range(pool.get_stats()["pool_size"])]
        for c in [*pooled, sampler._conn]:
            assert [c.execute(f"SHOW {name}").fetchone() for name in ("statement_timeout", "lock_timeout")] \
                == default
    slow = _sql.LEASED.replace("AS now)", "AS now FROM pg_catalog.pg_sleep(3))")
    assert slow != _sql.LEASED
    monkeypatch.setattr(_sql, "LEASED", slow)
    started = time.monotonic()
    response = client.get("/")
    page = response.get_data(as_text=True)
    assert response.status_code == 503 and "Database busy" in page and "statement timeout" in page, page[-500:]
    assert time.monotonic() - started < 3


def test_throughput_from_counters_when_the_clock_steps_back() -> None:
    """The counters' rates divided by the time between samples (wall-clock seconds, the charts'
    x axis) without the samples' check: a clock stepped back drew negative rates, and two samples
    of the same second raised ZeroDivisionError, which /api/history answered with 500 for as
    long as both samples were kept (an hour). Such a pair has no rate, as without counters."""
    def counters(n: int) -> dict[str, dict[str, int]]:
        return {"q": {"enqueued": n, "completed": n}}

    stepped = [Sample(100.0, {}, 1, counters(0)), Sample(90.0, {}, 1, counters(10)), Sample(95.0, {}, 1, counters(20))]
    assert throughput_series(stepped, None) == ("counters", {"enqueued": [(95.0, 2.0)], "completed": [(95.0, 2.0)]})
    assert throughput_series(stepped, "q")[1]["enqueued"] == [(95.0, 2.0)]
    same = [Sample(100.0, {}, 1, counters(0)), Sample(100.0, {}, 1, counters(10))]
    assert throughput_series(same, None) == ("counters", {})


def test_history_with_two_samples_of_one_second(make_app: Any) -> None:
    app = make_app()
    app.extensions["pgqueue"]["sampler"].samples.extend(
        [Sample(100.0, {}, 1, {"q": {"enqueued": 0}}), Sample(100.0, {}, 1, {"q": {"enqueued": 5}})])
    response = app.test_client().get("/api/history")
    assert response.status_code == 200 and response.get_json()["throughput"] == {}


def test_a_post_to_a_page_without_one_is_405(make_app: Any) -> None:
    """A POST to a GET-only page (or to no page) answered 400 "the form's CSRF token is missing or
    stale: reload the page", which no token changes: it changes nothing, and says so as 405 / 404.
    A POST to an action without the token is still refused."""
    client = make_app().test_client()
    for path in ("/", "/queues/default", "/api/queues"):
        assert client.post(path).status_code == 405, path
    assert client.post("/no/such/page").status_code == 404
    response = client.post("/queues/default/dead/purge", data={"all": "1"})
    assert response.status_code == 400 and "CSRF" in response.get_data(as_text=True)


def test_the_dead_count_links_to_the_dead_letters(conn: psycopg.Connection[Any], make_app: Any) -> None:
    """The index's dead count carries the dead-letter page's address (data-href), from which
    the page's script links the count when dead letters come in without a reload."""
    client = make_app().test_client()
    page = client.get("/").get_data(as_text=True)
    assert '<td class="num" data-field="dead" data-href="/queues/default/dead">0</td>' in page
    dead_letter(conn, "default")
    page = client.get("/").get_data(as_text=True)
    assert 'data-href="/queues/default/dead"><a href="/queues/default/dead">1</a></td>' in page
    script = client.get("/static/dashboard.js").get_data(as_text=True)
    assert 'getAttribute("data-href")' in script


def test_the_count_of_all_has_no_statement_timeout(conn: psycopg.Connection[Any], dsn: str, make_app: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """"Purge all" / "Requeue all" runs without the pages' statement_timeout, so that many dead
    letters are dealt with however long that takes; the exact count of its confirmation, which
    comes first, counted them with it (10 M took seconds, a few tens of millions more than 10 s):
    "Database busy", and no way to act on them all. It counts as long as that takes too (a count
    slowed here by pg_sleep), but a lock still ends its wait after the lock_timeout; and no
    pooled connection keeps a timeout after it (set_config's is_local: the pages set theirs in
    each transaction, never for the session)."""
    dead_letter(conn, "default")
    slow = _sql.DEAD_NEWEST.replace("FROM pgqueue.dead_letters AS d", "FROM pgqueue.dead_letters AS d, pg_sleep(1.5)")
    assert slow != _sql.DEAD_NEWEST
    monkeypatch.setattr(_sql, "DEAD_NEWEST", slow)
    app = make_app(wait=1)
    client = app.test_client()
    token = csrf(client, "/queues/default/dead")
    response = client.post("/queues/default/dead/purge", data={"all": "1", "csrf_token": token})
    page = response.get_data(as_text=True)
    assert response.status_code == 200 and "All 1 dead letters" in page, page[-500:]
    assert client.post("/queues/default/dead/purge", data=hidden_fields(page)).status_code == 303
    assert Queue(conn, "default").stats().dead == 0
    pool = app.extensions["pgqueue"]["pool"]  # no pooled connection keeps a timeout of its transactions
    default = conn.execute("SHOW statement_timeout").fetchone()
    with ExitStack() as stack:
        pooled = [stack.enter_context(pool.connection()) for _ in range(pool.get_stats()["pool_size"])]
        assert [c.execute("SHOW statement_timeout").fetchone() for c in pooled] == [default] * len(pooled)
    monkeypatch.undo()
    with psycopg.connect(dsn) as locker:
        locker.execute("SET idle_in_transaction_session_timeout = '30s'")
        locker.execute("LOCK TABLE pgqueue.dead_letter IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        response = client.post("/queues/default/dead/purge", data={"all": "1", "csrf_token": token})
        assert response.status_code == 503 and "Database busy" in response.get_data(as_text=True)
        assert time.monotonic() - started < 25
        locker.rollback()
