"""``pgqueue dashboard``: a small web application that shows what the queues are doing.

Queues with their counts and settings; depth and throughput over the last hour, sampled by the
dashboard itself (:mod:`pgqueue.dashboard.sampler`); the oldest ready message's age; the next
ready and scheduled messages with their payloads (JSON pretty-printed, text, or a hex dump);
the messages under a live lease and the database sessions of workers; dead letters to browse,
requeue and purge, each after a confirmation page.

It is a Flask application (the ``dashboard`` extra) whose templates, stylesheet and chart script
ship in the package: no CDN, no build step. :func:`serve` runs it on Werkzeug's threaded server,
on 127.0.0.1 unless told otherwise; :func:`pgqueue.dashboard.app.create_app` returns the WSGI
application for any other server. What it may change is decided twice: ``read_only`` turns every
change off, and the database role it connects as must hold the privileges each action needs
(a role with SELECT only gives a read-only dashboard; docs/grants.sql).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from pgqueue.dashboard.app import Options, close, create_app

__all__ = ["Options", "Server", "create_app", "serve", "start"]


class _QuietHandler(WSGIRequestHandler):
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


def _url(host: str, port: int, token: str | None) -> str:
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def start(options: Options, *, host: str = "127.0.0.1", port: int = 8080) -> Server:
    """Serve the dashboard on a daemon thread and return at once; ``port=0`` picks a free port.

    The returned :class:`Server` has the URL to open (with the token, if one is required).
    """
    app = create_app(options)
    wsgi = make_server(host, port, app, threaded=True, request_handler=_QuietHandler)
    thread = threading.Thread(target=wsgi.serve_forever, name="pgqueue-dashboard", daemon=True)
    thread.start()
    return Server(_url(host, wsgi.server_port, options.token), wsgi, thread)


def serve(options: Options, *, host: str = "127.0.0.1", port: int = 8080,
          ready: Callable[[str], None] | None = None) -> None:
    """Serve the dashboard until Ctrl-C (KeyboardInterrupt) or SIGTERM; ``ready`` gets the URL."""
    app = create_app(options)
    wsgi = make_server(host, port, app, threaded=True)
    if ready is not None:
        ready(_url(host, wsgi.server_port, options.token))
    try:
        wsgi.serve_forever()
    finally:
        wsgi.server_close()
        close(app)
