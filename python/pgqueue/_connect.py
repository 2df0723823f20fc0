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

Behind a pooler, psycopg's prepared statements (after 5 runs of one, on the server session under
a name such as ``_pg3_0``) meet another client's of the same name on a server connection they
share, or find theirs missing on the next one lent ("prepared statement "_pg3_0" already exists":
PgBouncer 1.20 and older, or 1.21 and later with ``max_prepared_statements = 0``; a
worker's threads died of it, a review). So such a connection is opened with them off
(``prepare_threshold`` None) when its backend pid is not its server process's
(:func:`behind_pooler`: PgBouncer's, pgcat's made-up pid; one round trip as it opens), unless
the caller gives a ``prepare_threshold``. Connections and pools handed over are left as they
are (README, "Behind a connection pooler").

tests/test_own_connections.py checks that no module opens a connection without going through
here; tests/test_pooler.py runs pgqueue through PgBouncer in transaction mode.
"""

from __future__ import annotations

import weakref
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from pgqueue import _core, _sql

#: the connections checked here, each with whether its backend pid is not its server process's
_POOLED: weakref.WeakKeyDictionary[psycopg.Connection[Any] | psycopg.AsyncConnection[Any], bool] = \
    weakref.WeakKeyDictionary()


def connect(conninfo: str, *, pooler_check: bool = True, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect(conninfo, **kwargs)`` for a connection pgqueue opens itself: UTF8 unless
    the connection string sets a ``client_encoding``; without prepared statements behind a pooler
    (see the module), unless ``kwargs`` has a ``prepare_threshold``. ``pooler_check`` False: the
    caller runs :func:`fit_for_pooler` itself, within its own time limit (its query waits for a
    server connection a saturated pooler lends: a metrics scrape hung past its timeout, up to
    PgBouncer's query_wait_timeout, a review)."""
    conn: psycopg.Connection[Any] = psycopg.connect(conninfo, **{**_core.utf8(conninfo), **kwargs})
    if pooler_check and "prepare_threshold" not in kwargs:
        try:
            fit_for_pooler(conn)
        except BaseException:
            conn.close()
            raise
    return conn


async def connect_async(conninfo: str, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    """:func:`connect` for an ``AsyncConnection``."""
    conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
        conninfo, **{**_core.utf8(conninfo), **kwargs})
    if "prepare_threshold" not in kwargs:
        try:
            async with conn.cursor(row_factory=tuple_row) as cur:  # (whatever the caller's row factory)
                pid = await (await cur.execute(_sql.BACKEND_PID)).fetchone()
            if not conn.autocommit:
                await conn.rollback()
            _note(conn, pid)
        except BaseException:
            await conn.close()
            raise
    return conn


def fit_for_pooler(conn: psycopg.Connection[Any]) -> None:
    """Turn ``conn``'s prepared statements off if it goes through a pooler (its backend pid is
    not its server process's); a pool's ``configure`` too (the dashboard's). Leaves no
    transaction open (an autocommit connection's transaction block is left as it is). Once a
    connection: a second call does nothing."""
    if conn in _POOLED:
        return
    with conn.cursor(row_factory=tuple_row) as cur:  # (whatever the caller's row factory)
        pid = cur.execute(_sql.BACKEND_PID).fetchone()
    if not conn.autocommit:
        conn.rollback()
    _note(conn, pid)


def _note(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], pid: tuple[Any, ...] | None) -> None:
    _POOLED[conn] = pid is not None and pid[0] != conn.info.backend_pid
    if _POOLED[conn]:
        conn.prepare_threshold = None


def behind_pooler(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``conn``, opened here, was found to go through a pooler (its backend pid is not
    its server process's). A pooler in session mode gives such pids too: this says a pooler is
    there, not which mode it runs in."""
    return _POOLED.get(conn, False)
