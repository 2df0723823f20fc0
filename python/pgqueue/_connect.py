"""Every connection pgqueue opens itself, from a connection string: the client's own (``Queue(dsn,
...)``), the workers', the command line's, the scheduler's, the metrics exporter's, the
dashboard's and the Spark source's. A connection or pool the caller hands over is left as it is.

Such a connection is set up the same way wherever it is opened:

- ``client_encoding`` UTF8 unless the connection string sets one (:func:`pgqueue._core.utf8`);
- ``default_transaction_isolation`` READ COMMITTED for the session, whatever the database or
  role defaults to. pgqueue's own calls are single statements or short transactions written for
  READ COMMITTED: on a database that defaults to REPEATABLE READ, ``pgqueue queue create`` and
  ``Queue(dsn, ...).create()`` were refused (``queue_create needs READ COMMITTED``, PQ009), and
  workers side by side failed dequeues with 40001 ("could not serialize access due to
  concurrent update") and reconnected, several times a second. The setting is one ``SET``
  when the connection is made (a pool runs it as its ``configure``), not a startup option, so
  that the ``options`` of a connection string, ``PGOPTIONS`` or a service file are kept.

tests/test_own_connections.py checks each kind of connection, and that no module opens one
without going through here.
"""

from __future__ import annotations

from typing import Any, Final, LiteralString

import psycopg

from pgqueue import _core

#: The session setting of a connection pgqueue opened itself (see the module's docstring).
OWN_SESSION: Final[LiteralString] = "SET default_transaction_isolation = 'read committed'"


def own_session(conn: psycopg.Connection[Any]) -> None:
    """Set up a connection pgqueue opened itself (or a pool's new one): READ COMMITTED by default.

    Runs on a plain cursor, whatever the connection's ``cursor_factory``; committed at once on
    a connection that is not in autocommit mode (the ``SET`` would otherwise be undone with the
    first transaction that rolls back)."""
    psycopg.Cursor(conn).execute(OWN_SESSION)
    if not conn.autocommit:
        conn.commit()


async def own_session_async(conn: psycopg.AsyncConnection[Any]) -> None:
    """:func:`own_session` for an ``AsyncConnection``."""
    await psycopg.AsyncCursor(conn).execute(OWN_SESSION)
    if not conn.autocommit:
        await conn.commit()


def connect(conninfo: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """``psycopg.connect(conninfo, **kwargs)`` for a connection pgqueue opens itself: UTF8 unless
    the connection string sets a ``client_encoding``, then :func:`own_session`. Closed again
    if that fails."""
    conn: psycopg.Connection[Any] = psycopg.connect(conninfo, **{**_core.utf8(conninfo), **kwargs})
    try:
        own_session(conn)
    except BaseException:
        conn.close()
        raise
    return conn


async def connect_async(conninfo: str, **kwargs: Any) -> psycopg.AsyncConnection[Any]:
    """:func:`connect` for an ``AsyncConnection``."""
    conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
        conninfo, **{**_core.utf8(conninfo), **kwargs})
    try:
        await own_session_async(conn)
    except BaseException:
        await conn.close()
        raise
    return conn
