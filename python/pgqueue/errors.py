"""The exceptions of pgqueue, and the one place that maps the extension's SQLSTATEs onto them.

Every database call of the client runs inside :func:`translating`, so callers catch
:class:`PgQueueError` (or one of its subclasses) and never a bare ``psycopg.Error``. The
original psycopg exception stays available as ``__cause__``.

=======================  =====================  ==========================================
class                    SQLSTATE               raised when
=======================  =====================  ==========================================
QueueNotFound            PQ001                  the queue does not exist
QueueExists              PQ002                  queue_create on an existing queue
QueueFull                PQ003                  the queue has max_size messages
ProtectedQueue           PQ004                  dropping the default queue
ConsumerInUse            PQ005                  another Spark query holds the consumer
ConsumerNotFound         PQ006                  the Spark consumer does not exist
StagedRowsMissing        PQ007                  a Spark publish finds staged rows missing
UnsafeSchema             PQ008                  install/upgrade into a schema pgqueue not safe
NeedsReadCommitted       PQ009                  queue_create/_drop, a max_size or group_concurrency
                                                change, a new key (key window) outside READ COMMITTED
SerializationFailure     40001                  a REPEATABLE READ / SERIALIZABLE snapshot is too old
DeadlockDetected         40P01                  the server broke a deadlock by ending this transaction
InvalidQueueName         42602                  the name breaks the queue-name rule (a NUL in it:
                                                raised client-side)
InvalidArgument          22023, 22004,          a bad or NULL argument (also raised client-side), one
                         22003, 22P05,          beyond its SQL type, a text the encoding cannot hold,
                         22P02, 22021,          a malformed value (JSON, a uuid), a text
                                                that is not UTF-8 (a SQL_ASCII database);
                         none                   a parameter psycopg refuses to send (a text with NUL)
ExtensionNotInstalled    3F000, 42883, 42P01,   the pgqueue schema, or a function, table or column of it,
                         42703                  is missing
VersionMismatch          (client-side)          the database's pgqueue is older or newer
ConnectionFailed         08xxx, 57P01-03,       the server cannot be reached or the link broke
                         57P05, 25P03, none     (the server ended the session, an idle timeout)
PgQueueError             anything else          any other database error
=======================  =====================  ==========================================
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

__all__ = [
    "PgQueueError",
    "QueueNotFound",
    "QueueExists",
    "QueueFull",
    "ProtectedQueue",
    "ConsumerInUse",
    "ConsumerNotFound",
    "StagedRowsMissing",
    "UnsafeSchema",
    "NeedsReadCommitted",
    "SerializationFailure",
    "DeadlockDetected",
    "InvalidQueueName",
    "InvalidArgument",
    "UnsupportedPayload",
    "ExtensionNotInstalled",
    "VersionMismatch",
    "ConnectionFailed",
    "translate",
    "translating",
]

INSTALL_HINT = (
    "install it with `pgqueue install --dsn DSN` (the extension when the server has its files from "
    "`make install` in the pgqueue source tree, else the plain SQL install), or `CREATE EXTENSION pgqueue`"
)


class PgQueueError(Exception):
    """Base class of every error pgqueue raises.

    Attributes:
        sqlstate: the five-character SQLSTATE of the database error, or None for an error
            detected by the client itself or one without a SQLSTATE (a failed connection).
        hint: the server's HINT (what to do about it), or None.
        detail: the server's DETAIL (more about this occurrence: how long a full queue is
            refused without counting again, say), or None.
    """

    sqlstate: str | None
    hint: str | None
    detail: str | None

    def __init__(self, message: str, *, sqlstate: str | None = None, hint: str | None = None,
                 detail: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.hint = hint
        self.detail = detail

    @property
    def message(self) -> str:
        """The error message, one line. A server error's HINT and DETAIL are apart, in
        :attr:`hint` and :attr:`detail`; the client's own :class:`ExtensionNotInstalled` and
        :class:`VersionMismatch` say what to do in the message too (and in :attr:`hint`)."""
        return str(self.args[0]) if self.args else ""


class QueueNotFound(PgQueueError):
    """The queue does not exist (PQ001)."""


class QueueExists(PgQueueError):
    """The queue already exists (PQ002)."""


class QueueFull(PgQueueError):
    """The queue holds max_size messages and refused new ones (PQ003); back off and retry.

    A queue of 10,000 or more that was just counted full refuses without counting again for up
    to ten times that count's duration (at most 1 s), even if consumers made room meanwhile.
    """


class ProtectedQueue(PgQueueError):
    """The operation is not allowed on this queue, e.g. dropping ``default`` (PQ004)."""


class ConsumerInUse(PgQueueError):
    """Another streaming query holds this Spark consumer (PQ005)."""


class ConsumerNotFound(PgQueueError):
    """The Spark consumer does not exist (PQ006)."""


class StagedRowsMissing(PgQueueError):
    """A Spark job-mode publish found fewer staged rows than its tasks reported (PQ007)."""


class UnsafeSchema(PgQueueError):
    """An install or upgrade into a schema ``pgqueue`` that another role owns, that others may
    create in, or that holds objects pgqueue did not create (PQ008, docs/security.md)."""


class NeedsReadCommitted(PgQueueError):
    """``queue_create``, ``queue_drop``, a ``max_size`` or ``group_concurrency`` change, or an
    enqueue of a new idempotency key into a queue with ``key_window_ms``, run in a REPEATABLE READ
    or SERIALIZABLE transaction (PQ009): run it in READ COMMITTED (PostgreSQL's default level,
    unless the database or role sets another; README, "Isolation levels")."""


class SerializationFailure(PgQueueError):
    """The queue or message changed after the REPEATABLE READ or SERIALIZABLE transaction's
    snapshot was taken, or (at any level) an enqueue waited while a message that left kept its
    idempotency key (40001); roll back and retry the whole transaction."""


class DeadlockDetected(PgQueueError):
    """The server ended this transaction to break a deadlock with another one (40P01): roll back
    and retry it. Batches take their groups' locks in one order (READ COMMITTED); what is left:
    transactions that enqueue grouped messages in several calls each, grouped batches under
    REPEATABLE READ, and batches sharing idempotency keys in different orders."""


class InvalidQueueName(PgQueueError):
    """The queue name breaks the rule: 1-48 of ``A-Za-z0-9_.-``, not starting with ``.`` or ``-`` (42602)."""


class InvalidArgument(PgQueueError, ValueError):
    """An argument is out of range, of the wrong kind or NULL (22023, 22004, 22003: beyond its SQL
    type; 22P05: a text the encoding cannot hold; 22P02: a malformed value, such as JSON that does
    not parse; or client-side, such as a text with NUL, which PostgreSQL cannot hold).

    It is also a ``ValueError``, so ``except ValueError`` catches it.
    """


class UnsupportedPayload(InvalidArgument, TypeError):
    """A payload cannot be encoded: not bytes, not str and not JSON-serialisable.

    It is also a ``TypeError`` (what ``json.dumps`` raises) and a ``ValueError``.
    """


class ExtensionNotInstalled(PgQueueError):
    """The database has no pgqueue (3F000: no schema), or its pgqueue lacks the function or
    table called (42883, 42P01: not installed, or older than this client; :func:`pgqueue.check_server`
    tells which) or a column the call reads (42703: older than this client)."""


class VersionMismatch(PgQueueError):
    """The database's pgqueue differs from this client in major.minor (raised by
    :func:`pgqueue.check_server`); the message says which side to upgrade."""


class ConnectionFailed(PgQueueError):
    """The server could not be reached, refused the login, or the connection broke."""


_BY_SQLSTATE: dict[str, type[PgQueueError]] = {
    "PQ001": QueueNotFound,
    "PQ002": QueueExists,
    "PQ003": QueueFull,
    "PQ004": ProtectedQueue,
    "PQ005": ConsumerInUse,
    "PQ006": ConsumerNotFound,
    "PQ007": StagedRowsMissing,
    "PQ008": UnsafeSchema,
    "PQ009": NeedsReadCommitted,
    "40001": SerializationFailure,
    "40P01": DeadlockDetected,
    "42602": InvalidQueueName,
    "22023": InvalidArgument,
    "22004": InvalidArgument,
    "22P05": InvalidArgument,  # a text the database's encoding cannot hold (a LATIN1 database)
    "22P02": InvalidArgument,  # a malformed value of the call (JSON for message_create_json, a uuid)
    "22003": InvalidArgument,  # an argument beyond its SQL type (a bigint time or delay, an integer limit)
    "22021": InvalidArgument,  # a text that is not valid UTF-8 for message_create_text (a SQL_ASCII database)
}

# undefined schema / function / table: the extension is missing if the message names pgqueue
_MISSING_OBJECT = frozenset({"3F000", "42883", "42P01"})


#: The server ended the session: admin shutdown or pg_terminate_backend (57P01), crash
#: shutdown (57P02), cannot connect now (57P03), idle_session_timeout (57P05),
#: idle_in_transaction_session_timeout (25P03).
_CONNECTION_LOST = frozenset({"57P01", "57P02", "57P03", "57P05", "25P03"})


#: libpq's conninfo errors that quote what may hold the password, and the part they quote: a
#: whole URI, a token with a bad percent-encoding or a %00 in it, a query parameter, a word
#: without its "=", a value with spaces.
_QUOTING = (re.compile(r'( in URI(?: \(expected ":" or "/"\))?: ).*$'),
            re.compile(r'(internal parser routine: ).*$'),
            re.compile(r'(percent-encoded token: ).*$'),
            re.compile(r'(in percent-encoded value: ).*$'),
            re.compile(r'(URI query parameter: ).*$'),
            re.compile(r'( after ).*( in connection info string)'),
            re.compile(r'(unexpected spaces found in ).*(, use percent-encoded spaces)'))


def conninfo_error(exc: BaseException, dsn: str | None = None) -> str:
    """Return why a connection string could not be parsed, on one line, without quoting it.

    libpq quotes what it could not parse: a URI whole (``postgresql://user:password@[::1/db``,
    ``...@[]/db``, ``...@[::1]x/db``), a token with a bad percent-encoding, a query parameter,
    a word without its ``=``; any of them may hold the password, and this text goes to logs.
    """
    text = " ".join(str(exc).split())
    if dsn:
        text = text.replace(f'"{dsn}"', "(the connection string)")
    for pattern in _QUOTING:
        text = pattern.sub(lambda m: m.group(1) + "(not shown)" + (m.group(2) if m.re.groups > 1 else ""), text)
    return text


def one_line(text: str) -> str:
    """Return text on one line: its lines joined with "; ", runs of blanks made one space."""
    return "; ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def _client_text(exc: psycopg.Error) -> str:
    """A client-side error's text (a failed connection's, which may span lines) on one line."""
    return one_line(str(exc))


def translate(exc: psycopg.Error) -> PgQueueError:
    """Return the pgqueue exception for a psycopg error (the caller raises it ``from exc``).

    Parameters:
        exc: the error psycopg raised.

    Returns:
        An instance of the :class:`PgQueueError` subclass for the error's SQLSTATE (see the
        module docstring), carrying the server's primary message, SQLSTATE, hint and detail
        (the detail was dropped: a QueueFull's "counted again in N ms" was lost).
    """
    sqlstate = exc.sqlstate
    diag = exc.diag
    # a server error has a primary message; a client-side one (failed connection) only text,
    # which may span lines: keep it on one line, its lines joined with "; " as the CLI does
    message = diag.message_primary or _client_text(exc) or type(exc).__name__
    if sqlstate is None and isinstance(exc, psycopg.ProgrammingError):  # a DSN that does not parse, say
        message = conninfo_error(exc)
    hint = diag.message_hint
    detail = diag.message_detail
    if sqlstate is None and isinstance(exc, psycopg.DataError):
        # psycopg refused a parameter before sending it: "PostgreSQL text fields cannot contain
        # NUL (0x00) bytes" (the client checks its own texts first; this is the net for the rest)
        return InvalidArgument(message, hint=hint, detail=detail)
    if sqlstate in _MISSING_OBJECT and "pgqueue" in message:
        if sqlstate == "3F000":
            what = f"pgqueue is not installed in this database ({message})"
        else:  # the schema is there: not the extension, or one older than this client
            what = (f"this database's pgqueue has no such function or table ({message}): it is not "
                    "installed, or older than this client (pgqueue.check_server says which)")
        return ExtensionNotInstalled(f"{what}: {INSTALL_HINT}", sqlstate=sqlstate, hint=INSTALL_HINT, detail=detail)
    if sqlstate == "42703":
        # undefined column: the client's statements read only pgqueue's functions and tables, so a
        # column they name is missing in a release older than this client (0.3's queue_list()
        # has no group_concurrency); the message names the client's alias, not pgqueue
        what = (f"this database's pgqueue has no such column ({message}): it is older than this client "
                "(pgqueue.check_server says which)")
        return ExtensionNotInstalled(f"{what}: {INSTALL_HINT}", sqlstate=sqlstate, hint=INSTALL_HINT, detail=detail)
    if sqlstate is not None and sqlstate in _BY_SQLSTATE:
        return _BY_SQLSTATE[sqlstate](message, sqlstate=sqlstate, hint=hint, detail=detail)
    if (sqlstate is not None and (sqlstate.startswith("08") or sqlstate in _CONNECTION_LOST)) or (
        sqlstate is None and isinstance(exc, psycopg.OperationalError)
    ):
        return ConnectionFailed(message, sqlstate=sqlstate, hint=hint, detail=detail)
    return PgQueueError(message, sqlstate=sqlstate, hint=hint, detail=detail)


@contextmanager
def translating() -> Iterator[None]:
    """Turn any ``psycopg.Error`` raised in the block into a :class:`PgQueueError`.

    The psycopg error becomes the new exception's ``__cause__``. Works around ``await``
    too, since it only catches what the block raises.

    Raises:
        PgQueueError: (a subclass of it) for every psycopg error raised in the block;
            InvalidArgument (SQLSTATE 22P05, the server's untranslatable_character, which
            maps to it too) for a text the connection's client encoding cannot hold (psycopg's
            UnicodeEncodeError, on a connection of the caller's in that encoding).
    """
    try:
        yield
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"a text the connection's client encoding ({exc.encoding}) cannot hold: "
                              f"{exc.reason} at position {exc.start}", sqlstate="22P05") from exc
    except psycopg.Error as exc:
        error = translate(exc)
        if error.message != _client_text(exc) and exc.sqlstate is None:
            # a connection string's password left out of the message (conninfo_error): the
            # cause, which a traceback prints, would show it
            raise error from None
        raise error from exc


#: How much of a bad value an error message quotes (:func:`quoted`).
QUOTE_LIMIT = 100


def printable(text: str) -> str:
    """Return text with every character that is not printable escaped (``\\x1b``, ``\\u202e``).

    Payloads come from producers, errors from handlers and names from anyone: an escape sequence
    printed raw drives the terminal of whoever reads the table or the log (OSC 52 writes the
    clipboard, CSI 8m hides what follows), a bidirectional override turns the rest of the line
    around, a newline forges a log line of its own. The command line and the scheduler's log
    use it.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
                   if ord(c) < 0x10000 else f"\\U{ord(c):08x}" for c in text)


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(value)`` for an error message, cut to its first ``limit`` characters when longer,
    with an ellipsis and the length (``'aaaa…' (10000 characters)``): a 10,000-character task
    name, group or queue name was echoed in full in a one-line error. A value whose repr cannot
    be made (an int of more than 4,300 digits, an object whose ``__repr__`` raises) is named by
    its type instead."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        head = repr(value[:limit])  # (a plain str's repr: it ends with its quote)
        return f"{head[:-1]}\u2026{head[-1]} ({len(value)} characters)"
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts (sys.get_int_max_str_digits())
        if isinstance(value, int):
            return f"an int of more than {sys.get_int_max_str_digits()} digits"
        return f"a {type(value).__name__} whose repr could not be made"
    except Exception:  # (a caller's object whose __repr__ raises: the error must still be raised)
        return f"a {type(value).__name__} whose repr could not be made"
    return text if len(text) <= limit else f"{text[:limit]}\u2026 (a repr of {len(text)} characters)"
