"""The SQLSTATE table of ``pgqueue/errors.py`` (README, "Errors"), row by row, and the values of
``pgqueue/message.py`` that the client computes rather than reads (no queue needed).

Each row is raised by the server itself (``RAISE ... USING ERRCODE``), so that the psycopg error
translated is the one a call would meet: its class, SQLSTATE, message, HINT and DETAIL.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from conftest import Server
from pgqueue import errors
from pgqueue.message import DeadLetter, Message, Pending, QueueStats, to_datetime

#: Every SQLSTATE the module's table maps, with its class.
TABLE: list[tuple[str, type[errors.PgQueueError]]] = [
    ("PQ001", errors.QueueNotFound), ("PQ002", errors.QueueExists), ("PQ003", errors.QueueFull),
    ("PQ004", errors.ProtectedQueue), ("PQ005", errors.ConsumerInUse), ("PQ006", errors.ConsumerNotFound),
    ("PQ007", errors.StagedRowsMissing), ("PQ008", errors.UnsafeSchema), ("PQ009", errors.NeedsReadCommitted),
    ("40001", errors.SerializationFailure), ("40P01", errors.DeadlockDetected), ("42602", errors.InvalidQueueName),
    ("22023", errors.InvalidArgument), ("22004", errors.InvalidArgument), ("22003", errors.InvalidArgument),
    ("22P05", errors.InvalidArgument), ("22P02", errors.InvalidArgument), ("22021", errors.InvalidArgument),
    # the server ended the session, or the link broke: a retry on a new connection may work
    ("08006", errors.ConnectionFailed), ("08P01", errors.ConnectionFailed), ("57P01", errors.ConnectionFailed),
    ("57P02", errors.ConnectionFailed), ("57P03", errors.ConnectionFailed), ("57P05", errors.ConnectionFailed),
    ("25P03", errors.ConnectionFailed),
    # anything else is the base class, not a guess
    ("42501", errors.PgQueueError), ("23505", errors.PgQueueError), ("PQ010", errors.PgQueueError),
]


@pytest.fixture(scope="module")
def conn(pg_server: Server) -> Any:
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as c:
        yield c


def _raised(conn: psycopg.Connection[Any], sqlstate: str, message: str, hint: str | None = None,
            detail: str | None = None) -> errors.PgQueueError:
    """The PgQueueError that translating() makes of the server's error ``sqlstate``."""
    options = ", ".join(f"{key} = {psycopg.sql.quote(value)}" for key, value in
                        (("ERRCODE", sqlstate), ("HINT", hint), ("DETAIL", detail)) if value is not None)
    with pytest.raises(errors.PgQueueError) as info, errors.translating():
        conn.execute(f"DO $$ BEGIN RAISE EXCEPTION USING MESSAGE = {psycopg.sql.quote(message)}, {options}; END $$")
    assert isinstance(info.value.__cause__, psycopg.Error)
    return info.value


@pytest.mark.parametrize(("sqlstate", "cls"), TABLE, ids=[row[0] for row in TABLE])
def test_each_sqlstate_of_the_table_is_its_class_with_the_servers_texts(conn: psycopg.Connection[Any], sqlstate: str,
                                                                        cls: type[errors.PgQueueError]) -> None:
    error = _raised(conn, sqlstate, f"boom {sqlstate}", hint="do this", detail="about that")
    assert type(error) is cls
    assert (error.message, error.sqlstate, error.hint, error.detail) == (f"boom {sqlstate}", sqlstate, "do this",
                                                                         "about that")


def test_a_missing_object_is_not_installed_only_when_it_is_pgqueues(conn: psycopg.Connection[Any]) -> None:
    """3F000, 42883 and 42P01 name pgqueue's schema, function or table: ExtensionNotInstalled,
    saying how to install it. The same SQLSTATEs of the caller's own objects are not."""
    for sqlstate in ("3F000", "42883", "42P01"):
        error = _raised(conn, sqlstate, 'relation "pgqueue.queue" does not exist')
        assert type(error) is errors.ExtensionNotInstalled and error.sqlstate == sqlstate
        assert "pgqueue install --dsn" in error.message and error.hint == errors.INSTALL_HINT
        other = _raised(conn, sqlstate, 'relation "orders" does not exist')
        assert type(other) is errors.PgQueueError and other.message == 'relation "orders" does not exist'


def test_quoted_cuts_at_its_limit_and_printable_escapes_what_a_terminal_would_run() -> None:
    assert errors.quoted("a" * errors.QUOTE_LIMIT) == repr("a" * errors.QUOTE_LIMIT)
    assert errors.quoted("a" * (errors.QUOTE_LIMIT + 1)) == (
        f"'{'a' * errors.QUOTE_LIMIT}\u2026' ({errors.QUOTE_LIMIT + 1} characters)")
    assert errors.quoted(list(range(100))).endswith("\u2026 (a repr of 390 characters)")
    assert errors.printable("ok \u00e9") == "ok \u00e9"
    assert errors.printable("\x1b[8m\x85\u0100\u202e\U000e0001") == "\\x1b[8m\\x85\u0100\\u202e\\U000e0001"


# -- message values -----------------------------------------------------------------------


def test_to_datetime_is_exact_to_the_millisecond_and_clamps_each_way() -> None:
    assert to_datetime(1_700_000_000_123) == datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=timezone.utc)
    assert to_datetime(-1) == datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=timezone.utc)
    assert to_datetime(2**63 - 1) == datetime.max.replace(tzinfo=timezone.utc)
    assert to_datetime(-(2**63)) == datetime.min.replace(tzinfo=timezone.utc)


def test_the_values_the_client_computes() -> None:
    now = datetime(2024, 1, 1, tzinfo=timezone.utc)
    leased = Message(1, "q", {"a": 1}, 1, None, now, now, now + timedelta(seconds=30), b'{"a":1}',
                     "application/json; task=send")
    deleted = Message(2, "q", b"x", 1, None, now, now, None, b"x", None)
    assert (leased.leased, deleted.leased) == (True, False)
    assert (leased.task, deleted.task) == ("send", None)
    pending = Pending(1, "q", b"x", b"x", "application/octet-stream; task=t", 0, None, now, None, now, None, None)
    assert pending.task == "t"
    assert QueueStats("q", ready=1, scheduled=2, leased=4, dead=8, oldest_ready_age_ms=None).total == 7
    # the page cursor is not part of a dead letter's value
    letter = DeadLetter(1, "q", b"x", b"x", None, None, 3, "boom", now, now, dead_at_ms=1)
    assert letter == DeadLetter(1, "q", b"x", b"x", None, None, 3, "boom", now, now, dead_at_ms=2)
