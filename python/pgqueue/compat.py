"""Which pgqueue the database has, and whether this client works with it.

The Python package and the SQL share one version: the client 0.4.x works with a database whose
pgqueue is 0.4 (an extension, or a plain install made by ``pgqueue install``), and with no
other major.minor. :func:`check_server` says so clearly at start-up instead of letting a
missing or changed SQL function fail later in the middle of the work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from psycopg.rows import tuple_row

from pgqueue import _core, _sql
from pgqueue._version import DISTRIBUTION, __version__
from pgqueue.errors import INSTALL_HINT, ExtensionNotInstalled, VersionMismatch, translating

__all__ = ["ServerPgQueue", "check_server", "major_minor", "server_pgqueue", "version_mismatch"]


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


def server_pgqueue(conn: psycopg.Connection[Any]) -> ServerPgQueue | None:
    """Return the pgqueue installed in the connection's database, or None if there is none.

    Runs two catalog queries at most (in the caller's transaction, if one is open).

    Raises:
        PgQueueError: (a subclass of it) when the queries fail, e.g. ConnectionFailed.
    """
    with translating(), conn.cursor(row_factory=tuple_row) as cur:
        _core.utf8_texts(conn.info.encoding, cur.adapters)  # a caller's SQL_ASCII connection: str, not bytes
        row = cur.execute(_sql.SERVER_VERSION).fetchone()
        assert row is not None
        extversion, has_install_table = row
        if extversion is not None:
            return ServerPgQueue(str(extversion), "extension")
        if not has_install_table:
            return None
        versions = [str(r[0]) for r in cur.execute(_sql.PLAIN_INSTALL_VERSIONS).fetchall() if r[0] is not None]
    if not versions:
        return None
    # one row per applied release or a single row: either way the highest is what is installed
    return ServerPgQueue(max(versions, key=lambda v: major_minor(v) or (-1, -1)), "plain")


def check_server(conn: psycopg.Connection[Any]) -> ServerPgQueue:
    """Check that the database's pgqueue has this client's major.minor version; return it.

    Call it once after connecting (the worker and the command line do), not before every call.

    Raises:
        ExtensionNotInstalled: the database has no pgqueue (neither the extension nor a plain
            install).
        VersionMismatch: the database's pgqueue is older or newer (in major.minor) than this
            client; the message says what to upgrade.
        PgQueueError: (a subclass of it) when the database cannot be asked.
    """
    installed = server_pgqueue(conn)
    if installed is None:
        raise ExtensionNotInstalled(
            f"pgqueue is not installed in this database: {INSTALL_HINT}", hint=INSTALL_HINT)
    mismatch = version_mismatch(installed)
    if mismatch is not None:
        raise mismatch
    return installed


def version_mismatch(installed: ServerPgQueue) -> VersionMismatch | None:
    """Return the error that :func:`check_server` raises for ``installed``, or None if it fits."""
    ours = major_minor(__version__)
    theirs = major_minor(installed.version)
    assert ours is not None
    client = f"{DISTRIBUTION} {__version__}"
    want = f"{ours[0]}.{ours[1]}"
    if theirs is None or theirs < ours:
        how = ("ALTER EXTENSION pgqueue UPDATE" if installed.kind == "extension"
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
