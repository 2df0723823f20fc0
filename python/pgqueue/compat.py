"""Which pgqueue the database has, and whether this client works with it.

The Python package and the SQL share one version: the client 0.4.x works with a database whose
pgqueue is 0.4 (an extension, or a plain install made by ``pgqueue install``), and with no
other major.minor. :func:`check_server` (:func:`async_check_server` on asyncio) says so clearly
at start-up instead of letting a missing or changed SQL function fail later in the middle of the
work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from pgqueue import _core, _sql
from pgqueue._version import DISTRIBUTION, __version__
from pgqueue.errors import INSTALL_HINT, ExtensionNotInstalled, VersionMismatch, translating

__all__ = ["ServerPgQueue", "async_check_server", "async_server_pgqueue", "check_server", "major_minor",
           "server_pgqueue", "version_mismatch"]


@dataclass(frozen=True)
class ServerPgQueue:
    """The pgqueue installed in a database."""

    version: str
    """The installed SQL version, e.g. ``"0.4"``."""
    kind: Literal["extension", "plain"]
    """``extension`` (CREATE EXTENSION) or ``plain`` (the plain SQL install)."""


def major_minor(version: str) -> tuple[int, int] | None:
    """Return the (major, minor) numbers of a version like ``0.4`` or ``0.4.1``, or None."""
    parts = version.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def _sync_only(conn: object, name: str, instead: str) -> None:
    """Refuse what is not a sync connection: an async connection, naming the coroutine that
    takes it; a connection string or a pool, which a Queue takes (each failed deep in psycopg
    otherwise, with an AttributeError or a TypeError that says nothing of this)."""
    if isinstance(conn, psycopg.Connection):
        return
    if isinstance(conn, psycopg.AsyncConnection):
        raise TypeError(f"{name}() takes a psycopg.Connection, got an AsyncConnection: use "
                        f"`await {instead}(conn)`")
    if isinstance(conn, str):
        how = f": connect first (`with psycopg.connect(dsn) as conn: {name}(conn)`)"
    elif isinstance(conn, ConnectionPool):
        how = f": pass one of its connections (`with pool.connection() as conn: {name}(conn)`)"
    elif isinstance(conn, AsyncConnectionPool):
        how = f": use `await {instead}(conn)` with one of its connections"
    else:
        how = ""
    raise TypeError(f"{name}() takes a psycopg.Connection, got {type(conn).__name__}{how}")


def _async_only(conn: object, name: str, instead: str) -> None:
    """Refuse what is not an async connection: a sync connection, naming the function that
    takes it; a connection string or a pool (psycopg failed with an error that says nothing of
    this)."""
    if isinstance(conn, psycopg.AsyncConnection):
        return
    if isinstance(conn, psycopg.Connection):
        raise TypeError(f"{name}() takes a psycopg.AsyncConnection, got a Connection: use "
                        f"`{instead}(conn)`")
    if isinstance(conn, str):
        how = (": connect first (`async with await psycopg.AsyncConnection.connect(dsn) as conn: "
               f"await {name}(conn)`)")
    elif isinstance(conn, AsyncConnectionPool):
        how = f": pass one of its connections (`async with pool.connection() as conn: await {name}(conn)`)"
    elif isinstance(conn, ConnectionPool):
        how = f": use `{instead}(conn)` with one of its connections"
    else:
        how = ""
    raise TypeError(f"{name}() takes a psycopg.AsyncConnection, got {type(conn).__name__}{how}")


def _installed(row: tuple[Any, ...] | None, plain_versions: list[Any] | None) -> ServerPgQueue | None:
    """Tell the pgqueue installed from the answers of :data:`_sql.SERVER_VERSION` and, when it
    found no extension but the plain install's table, :data:`_sql.PLAIN_INSTALL_VERSIONS`."""
    assert row is not None
    extversion, _ = row
    if extversion is not None:
        return ServerPgQueue(str(extversion), "extension")
    versions = [str(v) for v in plain_versions or [] if v is not None]
    if not versions:
        return None
    # one row per applied release or a single row: either way the highest is what is installed
    return ServerPgQueue(max(versions, key=lambda v: major_minor(v) or (-1, -1)), "plain")


def server_pgqueue(conn: psycopg.Connection[Any]) -> ServerPgQueue | None:
    """Return the pgqueue installed in the connection's database, or None if there is none.

    Runs two catalog queries at most (in the caller's transaction, if one is open). For a
    ``psycopg.AsyncConnection``: :func:`async_server_pgqueue`.

    Raises:
        TypeError: ``conn`` is not a psycopg.Connection (an AsyncConnection, a connection string,
            a pool).
        PgQueueError: (a subclass of it) when the queries fail, e.g. ConnectionFailed.
    """
    _sync_only(conn, "server_pgqueue", "pgqueue.compat.async_server_pgqueue")
    with translating(), conn.cursor(row_factory=tuple_row) as cur:
        _core.utf8_texts(conn.info.encoding, cur.adapters)  # a caller's SQL_ASCII connection: str, not bytes
        row = cur.execute(_sql.SERVER_VERSION).fetchone()
        plain = None
        if row is not None and row[0] is None and row[1]:
            plain = [r[0] for r in cur.execute(_sql.PLAIN_INSTALL_VERSIONS).fetchall()]
    return _installed(row, plain)


async def async_server_pgqueue(conn: psycopg.AsyncConnection[Any]) -> ServerPgQueue | None:
    """:func:`server_pgqueue` for a ``psycopg.AsyncConnection``."""
    _async_only(conn, "async_server_pgqueue", "pgqueue.compat.server_pgqueue")
    with translating():
        async with conn.cursor(row_factory=tuple_row) as cur:
            _core.utf8_texts(conn.info.encoding, cur.adapters)
            await cur.execute(_sql.SERVER_VERSION)
            row = await cur.fetchone()
            plain = None
            if row is not None and row[0] is None and row[1]:
                await cur.execute(_sql.PLAIN_INSTALL_VERSIONS)
                plain = [r[0] for r in await cur.fetchall()]
    return _installed(row, plain)


def _checked(installed: ServerPgQueue | None) -> ServerPgQueue:
    if installed is None:
        raise ExtensionNotInstalled(
            f"pgqueue is not installed in this database: {INSTALL_HINT}", hint=INSTALL_HINT)
    mismatch = version_mismatch(installed)
    if mismatch is not None:
        raise mismatch
    return installed


def check_server(conn: psycopg.Connection[Any]) -> ServerPgQueue:
    """Check that the database's pgqueue has this client's major.minor version; return it.

    Call it once after connecting (the worker and the command line do), not before every call.
    For a ``psycopg.AsyncConnection``: ``await`` :func:`async_check_server`.

    Raises:
        ExtensionNotInstalled: the database has no pgqueue (neither the extension nor a plain
            install).
        VersionMismatch: the database's pgqueue is older or newer (in major.minor) than this
            client; the message says what to upgrade.
        PgQueueError: (a subclass of it) when the database cannot be asked.
        TypeError: ``conn`` is not a psycopg.Connection: an AsyncConnection, a connection string
            or a pool (the message says what to pass instead).
    """
    _sync_only(conn, "check_server", "pgqueue.async_check_server")
    return _checked(server_pgqueue(conn))


async def async_check_server(conn: psycopg.AsyncConnection[Any]) -> ServerPgQueue:
    """:func:`check_server` for a ``psycopg.AsyncConnection`` (the same checks and errors).

    Raises:
        TypeError: ``conn`` is not a psycopg.AsyncConnection: a (sync) Connection (use
            :func:`check_server`), a connection string or a pool.
    """
    _async_only(conn, "async_check_server", "pgqueue.check_server")
    return _checked(await async_server_pgqueue(conn))


def version_mismatch(installed: ServerPgQueue) -> VersionMismatch | None:
    """Return the error that :func:`check_server` raises for ``installed``, or None if it fits."""
    ours = major_minor(__version__)
    theirs = major_minor(installed.version)
    assert ours is not None
    client = f"{DISTRIBUTION} {__version__}"
    want = f"{ours[0]}.{ours[1]}"
    if theirs is None and installed.kind == "plain":  # (pgqueue install refuses it: no upgrade path starts there)
        hint = ("the version record does not match a released version (a half-applied or hand-edited "
                "install): check what schema pgqueue holds, or drop it (`pgqueue uninstall --yes`) and "
                "install again")
        return VersionMismatch(
            f"the database has pgqueue {installed.version!r} ({installed.kind}), no version this client "
            f"({client}, which needs {want}) knows: {hint}", hint=hint)
    if theirs is None or theirs < ours:
        how = ("`pgqueue install`, or ALTER EXTENSION pgqueue UPDATE as the extension's owner (from 0.1 or 0.2 "
               "with the workers stopped: it can deadlock with them)" if installed.kind == "extension"
               else "`pgqueue install`, which applies the missing upgrade steps")
        hint = f"upgrade the database to pgqueue {want} with {how}"
        return VersionMismatch(
            f"the database has pgqueue {installed.version} ({installed.kind}), older than this "
            f"client ({client} needs {want}): {hint}", hint=hint)
    if theirs > ours:
        hint = (f"upgrade the client ({DISTRIBUTION}) to {theirs[0]}.{theirs[1]}: pip install ./python "
                f"in a clone of pgqueue at release {theirs[0]}.{theirs[1]} ({DISTRIBUTION} is not on PyPI)")
        return VersionMismatch(
            f"the database has pgqueue {installed.version} ({installed.kind}), newer than this "
            f"client ({client} works with {want}): {hint}", hint=hint)
    return None
