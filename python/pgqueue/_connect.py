"""Every connection pgqueue opens itself, from a connection string: the client's own (``Queue(dsn,
...)``), the workers', the command line's, the scheduler's, the metrics exporter's, the
dashboard's and the Spark source's. A connection or pool the caller hands over is left as it is.

Such a connection is opened in UTF8 unless the connection string sets a ``client_encoding``
(:func:`pgqueue._core.utf8`: pgqueue's texts are Python's str, which a SQL_ASCII database
returned as bytes). Nothing else is set for the session: a session ``SET`` would stick to a
server connection that a transaction-mode pooler (PgBouncer, RDS Proxy) then lends to other
clients. (The extension's own functions keep per-session caches in ``pgqueue.*`` settings, the
session hints and the lock stripes a session found its queues on: they describe the server
session, whoever it serves, and each is checked before it is used.) The queue's creation, change and drop, which need READ COMMITTED, run as they are
first (READ COMMITTED is PostgreSQL's default) and, refused with PQ009, in a transaction of
that level: on a connection opened for them alone when the client has a connection string
(:meth:`pgqueue.client._Connector._run_alone`), in a pool's lent connection's transaction, and
in a transaction of the command line's connection (``pgqueue.cli._read_committed``).

tests/test_own_connections.py checks that no module opens a connection without going through
here.
"""

from __future__ import annotations

from typing import Any

import psycopg

from pgqueue import _core


def connect(conninfo: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect(conninfo, **kwargs)`` for a connection pgqueue opens itself: UTF8 unless
    the connection string sets a ``client_encoding``."""
    conn: psycopg.Connection[Any] = psycopg.connect(conninfo, **{**_core.utf8(conninfo), **kwargs})
    return conn


async def connect_async(conninfo: str, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    """:func:`connect` for an ``AsyncConnection``."""
    conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
        conninfo, **{**_core.utf8(conninfo), **kwargs})
    return conn
