"""``pgqueue dashboard``: a small web application that shows what the queues are doing.

Queues with their counts and settings; depth and throughput over the last hour, sampled by the
dashboard itself (:mod:`pgqueue.dashboard.sampler`); the oldest ready message's age; the next
ready and scheduled messages with their payloads (JSON pretty-printed, text, or a hex dump);
the messages under a live lease and the database sessions of workers; dead letters to browse
(100 a page, keyset-paged), requeue and purge, each after a confirmation page. With an access
token: a login session that a logout ends, and wrong tokens rate-limited per client.

It is a Flask application (the ``dashboard`` extra) whose templates, stylesheet and chart script
ship in the package: no CDN, no build step. :func:`serve` runs it on Werkzeug's threaded server,
on 127.0.0.1 unless told otherwise, until Ctrl-C or SIGTERM (``pgqueue dashboard``);
:func:`pgqueue.dashboard.app.create_app` returns the WSGI application for any other server.
What it may change is decided twice: ``read_only`` turns every change off, and the database
role it connects as must hold the privileges each action needs (a role with SELECT only gives
a read-only dashboard; docs/grants.sql).
"""

from __future__ import annotations

import io
import re
import signal
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from werkzeug.serving import (BaseWSGIServer, ThreadedWSGIServer, WSGIRequestHandler, get_sockaddr,
                              select_address_family)

from pgqueue.dashboard.app import Options, close, create_app

__all__ = ["Options", "Server", "create_app", "serve", "start"]


#: Seconds a connection may keep the server waiting for its next bytes: a client that opened
#: connections and sent nothing (or part of a request) held a thread each for ever, before any
#: token was asked for (a review).
READ_TIMEOUT = 20.0
#: Seconds a client has for a request's line and headers, from when the server waits for them:
#: the read timeout alone let a client that sent a byte every few seconds hold a thread for
#: ever (a review of the first fix).
REQUEST_TIMEOUT = 20.0
#: Client connections served at once, each on a thread of its own; one more is answered 503
#: and closed at once, where each held a thread and its memory, with no limit (a review). A
#: browser opens six at most to a server.
MAX_CONNECTIONS = 64


class _HeadReader(io.RawIOBase):
    """The handler's socket, read with its read timeout and, while a request's line and headers
    are read, no later than their deadline (``_Handler.head_deadline``)."""

    def __init__(self, handler: _Handler) -> None:
        super().__init__()
        self._handler = handler

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        sock: socket.socket = self._handler.connection
        deadline = self._handler.head_deadline
        if deadline is None:
            return sock.recv_into(buffer)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request's line and headers took more than {REQUEST_TIMEOUT:g} s")
        sock.settimeout(min(self._handler.timeout, left))
        try:
            got = sock.recv_into(buffer)
            self._handler.idle = self._handler.idle and not got
            return got
        finally:
            sock.settimeout(self._handler.timeout)  # (writes, and the body's reads: the read timeout)


class _Handler(WSGIRequestHandler):
    """Werkzeug's request handler with a timeout on each read and write of its socket, and a
    deadline for each request's line and headers (:data:`REQUEST_TIMEOUT`)."""

    timeout = READ_TIMEOUT
    connection: socket.socket
    head_deadline: float | None = None
    idle = True  # no byte of the next request came yet

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # (socketserver's file of the socket: else the socket stays open once closed)
        self.rfile = io.BufferedReader(_HeadReader(self))

    def handle_one_request(self) -> None:
        # (http.server's: a TimeoutError while reading ends the connection)
        self.head_deadline = time.monotonic() + REQUEST_TIMEOUT
        self.idle = True
        super().handle_one_request()

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's API)
        if self.idle and format.startswith("Request timed out"):
            return  # (sent nothing: a browser's speculative connection, say; closed, nothing to tell)
        super().log_error(format, *args)

    def parse_request(self) -> bool:
        try:
            return super().parse_request()  # (the headers: read up to the blank line)
        finally:
            self.head_deadline = None


class _Server(ThreadedWSGIServer):
    """Werkzeug's threaded server serving at most :data:`MAX_CONNECTIONS` connections at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own (as ThreadingMixIn does: Werkzeug's
        threads are daemons, not kept for server_close), which gives its slot back when it ends.
        The slot is given back once: by the thread, or here when its start fails. A
        KeyboardInterrupt (Ctrl-C) that landed in ``start()`` after the thread was made gave it
        back twice: the BoundedSemaphore's ValueError took the interrupt's place, socketserver
        logged it as the request's error, and the server served on (a CI run: killed after
        20 s)."""
        if not self.slots.acquire(blocking=False):
            self._refuse(request)
            return
        release = _Once(self.slots.release)
        try:
            thread = threading.Thread(target=self._serve, args=(request, client_address, release),
                                      daemon=self.daemon_threads)
            thread.start()
        except BaseException:
            release()  # (an interrupt while the thread starts: the server stops; the thread's own is then none)
            raise

    def _serve(self, request: Any, client_address: Any, release: Callable[[], None]) -> None:
        try:
            self.process_request_thread(request, client_address)  # (ThreadingMixIn's: serve, then close)
        finally:
            release()

    def _refuse(self, request: socket.socket) -> None:
        # on the accepting thread: a send that cannot wait (the answer fits any socket buffer)
        body = b"Too many connections to this dashboard: try again shortly.\n"
        try:
            request.setblocking(False)
            request.send(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                         b"Content-Length: %d\r\nRetry-After: 5\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        except OSError:
            pass
        self.shutdown_request(request)


class _Once:
    """``call`` on the first call only, from any thread."""

    def __init__(self, call: Callable[[], object]) -> None:
        self._call: Callable[[], object] | None = call
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            call, self._call = self._call, None
        if call is not None:
            call()


class _RedactingHandler(_Handler):
    """Werkzeug's request log with the access token of a ``?token=`` URL left out, however it is
    written (percent-encoded, with a raw ``&`` or space in it): every line the handler logs, the
    request line of a malformed request included, goes through :func:`_hide_token`."""

    def log(self, type: str, message: str, *args: Any) -> None:  # noqa: A002 (Werkzeug's API)
        super().log(type, "%s", _hide_token(message % args if args else message))


# a query string, and what follows it up to the HTTP version if the request line has more words
# (a raw space in the token): "GET /?token=ab cd HTTP/1.1"
_QUERY = re.compile(r"\?(?P<query>\S*)(?P<more>[^\n]*?(?= HTTP/\d))?")


def _hide_token(text: str) -> str:
    """``text`` with every query string's ``token`` parameter, and all that follows it in the
    query, replaced by ``token=(hidden)``: a token with a raw ``&`` in it went on as more
    parameters, which showed the rest of the token."""

    def hide(found: re.Match[str]) -> str:
        # (";" too: a separator some clients use; and the words after a raw space, up to the
        # HTTP version, with the query: a token after a parameter with a space in it)
        params = re.split(r"[&;]", found["query"] + (found["more"] or ""))
        for i, param in enumerate(params):
            if urllib.parse.unquote_plus(param.split("=", 1)[0]) == "token":
                return "?" + "&".join([*params[:i], "token=(hidden)"])
        return found[0]

    return _QUERY.sub(hide, text)


class _QuietHandler(_Handler):
    """Log no requests: the dashboard runs beside something else's output (the demo's)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


@dataclass
class Server:
    """A dashboard running on a background thread (see :func:`start`)."""

    url: str
    wsgi: BaseWSGIServer
    thread: threading.Thread

    def stop(self) -> None:
        """Stop serving, then stop the sampler and close the pool."""
        self.wsgi.shutdown()
        self.thread.join(timeout=10)
        self.wsgi.server_close()
        close(self.wsgi.app)  # type: ignore[arg-type]


def _cookie_of_port(app: Any, port: int) -> None:
    """Name the session cookie after the port: browsers keep cookies by host, not by port, so
    two dashboards on one host (production and staging through tunnels) logged each other out."""
    app.config["SESSION_COOKIE_NAME"] = f"pgqueue_dashboard_{port}"


def _listen(host: str, port: int, app: Any, request_handler: type[_Handler]) -> BaseWSGIServer:
    """Werkzeug's threaded server (:class:`_Server`) on a socket bound here: a port in use (or
    any other failure to listen) raises OSError, where Werkzeug's own bind prints two lines and
    exits the process."""
    family = select_address_family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Werkzeug's own bind does
        sock.bind(get_sockaddr(host, port, family))
        sock.listen(128)
        return _Server(host, port, app, request_handler, fd=sock.fileno())  # (a duplicate of sock)
    finally:
        sock.close()


def _url(host: str, port: int, token: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    # (quoted: a token with + / = & # % or a space in it, base64 say, did not log in from the URL)
    return f"http://{shown}:{port}/" + (f"?token={urllib.parse.quote(token, safe='')}" if token else "")


def start(options: Options, *, host: str = "127.0.0.1", port: int = 8080) -> Server:
    """Serve the dashboard on a daemon thread and return at once; ``port=0`` picks a free port.

    The returned :class:`Server` has the URL to open (with the token, if one is required).
    A port it cannot listen on (in use, say) raises OSError.
    """
    app = create_app(options)
    try:
        wsgi = _listen(host, port, app, request_handler=_QuietHandler)
    except BaseException:  # (the port is taken: OSError)
        close(app)
        raise
    _cookie_of_port(app, wsgi.port)
    thread = threading.Thread(target=wsgi.serve_forever, name="pgqueue-dashboard", daemon=True)
    thread.start()
    return Server(_url(host, wsgi.port, options.token), wsgi, thread)


def serve(options: Options, *, host: str = "127.0.0.1", port: int = 8080,
          ready: Callable[[str], None] | None = None, handle_signals: bool = True,
          signals: Iterable[signal.Signals] = (signal.SIGINT, signal.SIGTERM)) -> signal.Signals | None:
    """Serve the dashboard until Ctrl-C or SIGTERM, then close the socket, stop the sampler and
    close the pool, and return; ``ready`` gets the URL.

    Called on the main thread (unless ``handle_signals=False``), each of ``signals`` (SIGINT and
    SIGTERM unless told otherwise: `pgqueue dashboard` adds SIGHUP) stops it the same way and it
    returns the one that did; a second signal while it stops raises KeyboardInterrupt at once. A
    signal ignored when it starts (SIGINT in ``cmd &`` from a script, a SIGTERM its parent
    ignored) stays ignored, and the previous handlers are back when it returns. Otherwise a
    KeyboardInterrupt on the main thread stops it the same way and it returns None.
    """
    app = create_app(options)
    try:
        wsgi = _listen(host, port, app, request_handler=_RedactingHandler)
    except BaseException:  # (the port is taken: OSError)
        close(app)
        raise
    _cookie_of_port(app, wsgi.port)
    stopped_by: list[signal.Signals] = []

    def on_signal(signum: int, frame: object) -> None:
        if stopped_by:
            raise KeyboardInterrupt
        stopped_by.append(signal.Signals(signum))
        # What shutdown() asks (it waits for serve_forever() to return, which this thread runs):
        # the flag serve_forever() reads between its polls (0.5 s), set here with no lock and no
        # thread. A thread started from this handler, which runs between two bytecodes of the
        # main thread, hung for good when the main thread was itself starting a thread (a
        # request's) and held the lock that every start takes (a CI run: killed after 20 s).
        setattr(wsgi, "_BaseServer__shutdown_request", True)

    saved: dict[signal.Signals, Any] = {}
    if handle_signals and threading.current_thread() is threading.main_thread():
        for sig in signals:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # nohup, `cmd &` in a script: stays so
                saved[sig] = signal.signal(sig, on_signal)
    try:
        if ready is not None:
            ready(_url(host, wsgi.port, options.token))
        wsgi.serve_forever()  # (Werkzeug's returns on a KeyboardInterrupt)
    finally:
        try:
            wsgi.server_close()
            close(app)
        finally:
            for sig, previous in saved.items():
                signal.signal(sig, previous)
    return stopped_by[0] if stopped_by else None
