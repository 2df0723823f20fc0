"""The logic that ``Queue`` and ``AsyncQueue`` share: argument checks, scheduling, the
statement and parameters of every call, and the conversion of result rows.

Nothing here does I/O. Each operation is described by a :class:`Call` (statement, parameters,
how to turn the rows into the result); the sync and async clients only execute it, so the two
clients cannot drift apart.
"""

from __future__ import annotations

import functools
import math
import select
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, Literal, LiteralString, TypeVar, cast

import psycopg
from psycopg import ConnectionInfo
from psycopg._encodings import pg2pyenc
from psycopg.abc import Buffer
from psycopg.adapt import AdaptersMap, Loader
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import Conninfo, ConnStatus, TransactionStatus
from psycopg.pq.abc import PGconn
from psycopg.types.array import ListBinaryDumper, ListDumper

from pgqueue import _sql, codec
from pgqueue.errors import InvalidArgument, InvalidQueueName, QueueNotFound, quoted
from pgqueue.tasks import Reject
from pgqueue.message import (
    DeadLetter,
    GroupStats,
    Message,
    Pending,
    QueueSettings,
    QueueCounters,
    QueueStats,
    ScheduledMessage,
    ScheduleEntry,
    to_datetime,
)

T = TypeVar("T")

#: A result row as the clients fetch it (always with ``tuple_row``).
Row = tuple[Any, ...]

#: A delay: a ``timedelta`` or a number of seconds.
Delay = timedelta | float | int
#: A point in time: an aware ``datetime`` (naive ones are taken as UTC) or epoch milliseconds.
When = datetime | int

#: The range of a bigint, the SQL type of every time and delay in milliseconds.
MIN_BIGINT = -(2**63)
MAX_BIGINT = 2**63 - 1
#: The largest priority, as ``pgqueue.priority_dequeue_at(integer)`` accepts.
MAX_PRIORITY = 2**31 - 1
#: The most characters of an error text stored in ``last_error``.
MAX_ERROR_CHARS = 8000
#: The most messages one call of the ``*_batch`` functions takes (``message_heartbeat_batch``,
#: ``message_complete_batch``), as the most a dequeue hands out.
MAX_BATCH = 10000
#: The shortest heartbeat interval in seconds, however short the lease.
MIN_HEARTBEAT_INTERVAL = 0.005
#: SQLSTATE idle_session_timeout: the server closed the session while it sat idle, before the
#: statement that reads this error reached it, so that statement never ran and may be sent again
#: on a new connection. (Sent by a server whose idle_session_timeout, as some managed services
#: set it, is shorter than a worker's pauses between calls.)
IDLE_SESSION_TIMEOUT = "57P05"


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One statement to execute, and how to turn its rows into the caller's result.

    Attributes:
        query: the SQL (a constant from :mod:`pgqueue._sql`).
        params: its named parameters.
        result: converts the fetched rows into the result (may raise).
        probe_queue: if set and the statement returns no rows, the client runs
            ``_sql.CHECK_QUEUE`` for this queue before ``result``, so that an unknown or
            invalid queue name raises the extension's own error instead of giving an empty
            answer.
        untranslatable: if set, the call the client runs instead when this one's text cannot
            be held in the connection's or the database's encoding (InvalidArgument with
            SQLSTATE 22P05): a failure's error text in ASCII escapes (:func:`_error_in_ascii_too`).
        read_committed: the statement needs READ COMMITTED (PQ009 otherwise: ``queue_create``,
            ``queue_alter``, ``queue_drop``). On a connection that is the call's alone
            (pgqueue's own, the command line's, a pool's lent one) the client runs it in a
            READ COMMITTED transaction of its own (on an autocommit one again, after a PQ009;
            as the first statement of a lent one in a transaction, by setting its level), so
            that a database or role that defaults to REPEATABLE READ does not refuse it; on a
            connection the caller passed, autocommit or not, it runs at the level there.
        again_on_40001: a refusal with 40001 is answered by running the statement again (an
            enqueue with an idempotency key whose insert waited while the key's message left
            within its window: the second run returns the id that keeps the key). The client
            does so once where the statement is a transaction of its own (an autocommit
            connection outside a transaction, or a pool's connection lent to it); in a caller's
            transaction the error is raised: the whole transaction is to be retried.

    Raises:
        InvalidQueueName: the ``queue`` parameter holds NUL (:func:`check_queue_name`).
    """

    query: LiteralString
    params: Mapping[str, object]
    result: Callable[[list[Row]], T]
    probe_queue: str | None = None
    untranslatable: Call[T] | None = None
    read_committed: bool = False
    again_on_40001: bool = False

    def __post_init__(self) -> None:
        check_queue_name(self.params)


#: The rule of a queue name, as the server's HINT states it (InvalidQueueName, 42602).
QUEUE_NAME_RULE = "A queue name has 1 to 48 characters from A-Z a-z 0-9 _ . - and does not start with . or -."


def check_queue_name(params: Mapping[str, object]) -> None:
    """Refuse the parameters of a call whose queue name holds NUL, as the server refuses every
    other name that breaks the rule, before anything is sent or connected: a PostgreSQL text
    cannot hold NUL, and psycopg refused it with an error of its own (which came out as a
    PgQueueError without SQLSTATE). Every :class:`Call` is checked when it is made.

    A name that no encoding can send (a lone surrogate, which the rule refuses as it refuses
    every character outside ASCII) is refused here too: it was an InvalidArgument (22P05) of
    the client encoding instead of InvalidQueueName (a review).

    Raises:
        InvalidQueueName: the ``queue`` parameter holds NUL or a surrogate.
    """
    queue = params.get("queue")
    if isinstance(queue, str) and ("\x00" in queue or not (queue.isascii() or _encodable(queue))):
        raise InvalidQueueName(f"invalid queue name {quoted(queue)}", hint=QUEUE_NAME_RULE)


def _encodable(text: str) -> bool:
    """Whether ``text`` has a UTF-8 form (not one with a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a message becomes deliverable: an absolute epoch-ms value or a delay from the server's now.

    Both None means "now" (the extension's default).
    """

    dequeue_at: int | None = None
    delay_ms: int | None = None

    def params(self) -> dict[str, object]:
        """Return the ``dequeue_at`` and ``delay_ms`` parameters of the statements in ``_sql``."""
        return {"dequeue_at": self.dequeue_at, "delay_ms": self.delay_ms}


@dataclass(frozen=True, slots=True)
class Lease:
    """A message dequeued by ``receive`` and the lease granted with it (ms)."""

    message: Message
    lease_ms: int


# ---------------------------------------------------------------------------------------
# Argument checks and scheduling
# ---------------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_int(name: str, value: object, *, allow_none: bool = True) -> int | None:
    """Return ``value`` if it is an int (or None when allowed), else raise InvalidArgument."""
    if value is None and allow_none:
        return None
    if not _is_int(value):
        raise InvalidArgument(f"{name} must be an int{' or None' if allow_none else ''}, got {quoted(value)}")
    assert isinstance(value, int)
    return value


def check_bool(name: str, value: object, *, allow_none: bool = True) -> bool | None:
    """Return ``value`` if it is a bool (or None when allowed), else raise InvalidArgument."""
    if value is None and allow_none:
        return None
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be a bool{' or None' if allow_none else ''}, got {quoted(value)}")
    return value


def check_str(name: str, value: object) -> str | None:
    """Return ``value`` if it is a str without NUL, or None, else raise InvalidArgument (a
    PostgreSQL text cannot hold NUL: psycopg refused it with an error of its own)."""
    if value is not None and not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a str or None, got {quoted(value)}")
    if value is not None and "\x00" in value:
        raise InvalidArgument(f"{name} must not contain NUL (\\x00): a PostgreSQL text cannot hold it, "
                              f"got {quoted(value)}")
    return value


def _items(name: str, values: object, of: str) -> list[Any]:
    """Return the items of ``values``, the iterable argument ``name`` of a call, read once (a
    generator is consumed by reading it).

    Raises:
        InvalidArgument: ``values`` is not iterable (one item in place of a list, None), or is
            a str, bytes or a mapping, whose characters, bytes or keys would be taken for
            the items (``of`` says what each item is).
    """
    if isinstance(values, (str, bytes, bytearray, memoryview)):
        raise InvalidArgument(f"{name} must be an iterable of {of}, not a single str or bytes")
    if isinstance(values, Mapping):
        raise InvalidArgument(f"{name} must be an iterable of {of}, not a mapping (its keys would be taken)")
    try:
        iterator = iter(cast(Iterable[Any], values))
    except TypeError:
        raise InvalidArgument(f"{name} must be an iterable of {of} (a list), got {type(values).__name__}") from None
    return list(iterator)


def _per_message(name: str, values: Iterable[str | None] | None, n: int) -> list[str | None] | None:
    """One group or key per message (or None for none at all), as many as the payloads."""
    if values is None:
        return None
    out = [check_str(name, v) for v in _items(name, values, "str or None, one per payload")]
    if len(out) != n:
        raise InvalidArgument(f"{name} has {len(out)} values for {n} payloads")
    return out


def delay_to_ms(delay: Delay, name: str = "delay") -> int:
    """Return a delay in whole milliseconds (rounded).

    Parameters:
        delay: a ``timedelta`` or a number of seconds, not negative.
        name: the caller's parameter, which an error names (``every`` of a schedule).

    Raises:
        InvalidArgument: a negative, infinite or NaN delay, one of more milliseconds than a
            bigint holds (2**63 - 1, some 292 million years; PostgreSQL refused it with 22003),
            or one of another type. (A delay whose time, the server's now plus it, is past
            the bigint range is the server's 22003, InvalidArgument too.)
    """
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        try:
            seconds = float(delay)
        except OverflowError:  # an int beyond a float (10**309)
            seconds = math.inf if delay > 0 else -math.inf
    else:
        raise InvalidArgument(f"{name} must be a timedelta or a number of seconds, got {quoted(delay)}")
    if not (math.isfinite(seconds) or isinstance(delay, int)) or seconds < 0:
        raise InvalidArgument(f"{name} must be finite and >= 0, got {quoted(delay)}")
    # (compared before the product, which may be inf: round() raised OverflowError)
    ms = round(seconds * 1000) if seconds <= MAX_BIGINT / 1000 else None
    if ms is None or ms > MAX_BIGINT:
        raise InvalidArgument(f"{name} must be at most {MAX_BIGINT} ms (a bigint: some 292 million years), "
                              f"got {quoted(delay)}")
    return ms


def to_epoch_ms(at: When, name: str = "at") -> int:
    """Return a point in time as epoch milliseconds (floor, as ``pgqueue.to_epoch`` does).

    Parameters:
        at: an aware ``datetime``; a naive one is taken as UTC; an int is epoch ms already.
        name: the caller's parameter, which an error names (``before``, ``start_at``).

    Raises:
        InvalidArgument: ``at`` is of another type, or epoch milliseconds outside the bigint
            range (-2**63 to 2**63 - 1; PostgreSQL refused them with 22003).
    """
    if isinstance(at, datetime):
        if at.tzinfo is None:
            at = at.replace(tzinfo=timezone.utc)
        return (at - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)
    if _is_int(at):
        assert isinstance(at, int)
        if not MIN_BIGINT <= at <= MAX_BIGINT:
            raise InvalidArgument(f"{name} must be epoch milliseconds in the bigint range ({MIN_BIGINT} to "
                                  f"{MAX_BIGINT}), got {quoted(at)}")
        return at
    raise InvalidArgument(f"{name} must be a datetime or epoch milliseconds (int), got {quoted(at)}")


def priority_to_dequeue_at(priority: int) -> int:
    """Return the ``dequeue_at`` of a priority, as ``pgqueue.priority_dequeue_at`` computes it.

    ``-1 - priority``: ahead of every normal message; larger priorities go first.

    Raises:
        InvalidArgument: ``priority`` is not an int in 0 .. 2**31-1.
    """
    if not _is_int(priority) or not 0 <= priority <= MAX_PRIORITY:
        raise InvalidArgument(f"priority must be an int from 0 to {MAX_PRIORITY}, got {quoted(priority)}")
    return -1 - priority


def schedule(delay: Delay | None = None, at: When | None = None, priority: int | None = None) -> Schedule:
    """Return when a message becomes deliverable, from at most one of delay, at and priority.

    A delay is added to the server's clock (``pgqueue.now_ms()``) when the statement runs.

    Raises:
        InvalidArgument: more than one is given, or one is invalid (also a ValueError).
    """
    given = [name for name, value in (("delay", delay), ("at", at), ("priority", priority)) if value is not None]
    if len(given) > 1:
        raise InvalidArgument(f"give at most one of delay, at and priority, got {' and '.join(given)}")
    if delay is not None:
        return Schedule(delay_ms=delay_to_ms(delay))
    if at is not None:
        dequeue_at = to_epoch_ms(at)
        if dequeue_at < 0:  # below the epoch a dequeue_at is a priority, above every real one
            raise InvalidArgument(f"at must be from 1970-01-01 UTC on (epoch ms >= 0), got {quoted(at)}; "
                                  "an earlier time would jump every priority (use priority= for that)")
        return Schedule(dequeue_at=dequeue_at)
    if priority is not None:
        return Schedule(dequeue_at=priority_to_dequeue_at(priority))
    return Schedule()


def dequeue_at_for(delay: Delay | None = None, at: When | None = None, priority: int | None = None) -> int | None:
    """Return the ``dequeue_at`` (epoch ms) for a delay, a point in time or a priority.

    Parameters:
        delay: a ``timedelta`` or seconds from now, measured on this machine's clock (the
            client's own calls add delays to the server's clock instead).
        at: an aware ``datetime`` (naive = UTC) or epoch milliseconds.
        priority: an int >= 0; gives ``-1 - priority`` as ``pgqueue.priority_dequeue_at``.

    Returns:
        The epoch-ms value, or None if none was given (the extension then uses its now).

    Raises:
        InvalidArgument: (a ValueError) more than one was given, or one is invalid.
    """
    plan = schedule(delay, at, priority)
    if plan.delay_ms is not None:
        return int(time.time() * 1000) + plan.delay_ms
    return plan.dequeue_at


def error_text(error: str | BaseException) -> str:
    """Return the text stored as a failed message's ``last_error`` (the client's ``fail`` and
    both workers use it).

    A string is kept as it is; an exception becomes ``"TypeName: message"`` on one line (runs
    of blanks and line breaks made one space), or its type's name alone when its message is
    empty or cannot be made (its ``__str__`` raises). An exception group (an
    ``asyncio.TaskGroup``'s) is followed by its leaf exceptions, nested groups opened, each
    as above: ``"ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception): ValueError:
    boom"``, so that the stored text says what failed. Either is cut to
    :data:`MAX_ERROR_CHARS`. What PostgreSQL text cannot hold is written as Python escapes: a
    lone surrogate (as ``os.fsdecode`` makes of a file name that is not UTF-8) as ``\\udce9``,
    NUL as ``\\x00``.
    """
    if isinstance(error, BaseExceptionGroup):
        parts = [_one_error(error)]
        length = len(parts[0])
        leaves = _leaves(error)
        while length <= MAX_ERROR_CHARS:  # (a group of a million leaves is not read to the end)
            leaf = next(leaves, None)
            if leaf is None:
                break
            parts.append(_one_error(leaf))
            length += len(parts[-1]) + 2
        text = parts[0] + (": " + "; ".join(parts[1:]) if len(parts) > 1 else "")
    elif isinstance(error, BaseException):
        text = _one_error(error)
    elif isinstance(error, str):
        text = error
    else:
        raise InvalidArgument(f"error must be a str or an exception, got {quoted(error)}")
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode()
    except UnicodeEncodeError:
        text = text.encode(errors="backslashreplace").decode()
    return text[:MAX_ERROR_CHARS]


def _one_error(error: BaseException) -> str:
    """``"TypeName: message"`` of one exception, on one line (see :func:`error_text`)."""
    try:
        message = str(error)
    except Exception:  # a handler's exception must fail its message, whatever its __str__ does
        message = "(its message could not be made: __str__ raised)"
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return " ".join(text.split())


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    """The leaf exceptions of a group, nested groups opened, in order (a loop, not recursion:
    a deep nest of groups cannot overflow the stack)."""
    pending: list[BaseException] = list(reversed(group.exceptions))
    while pending:
        e = pending.pop()
        if isinstance(e, BaseExceptionGroup):
            pending.extend(reversed(e.exceptions))
        else:
            yield e


def ascii_text(text: str) -> str:
    """Return ``text`` with what ASCII lacks written as Python escapes: the error text of a
    ``fail`` or ``reject`` sent again when the connection's client encoding (a LATIN1
    database's, say) could not hold it (InvalidArgument with SQLSTATE 22P05)."""
    return text.encode("ascii", "backslashreplace").decode()[:MAX_ERROR_CHARS]


def _error_in_ascii_too(call: Call[T]) -> Call[T]:
    """``call`` (whose ``error`` parameter is a failure's text) with the same call, that text
    in ASCII escapes, to run instead when the encoding cannot hold the text (``untranslatable``)."""
    return replace(call, untranslatable=replace(call, params={**call.params, "error": ascii_text(str(call.params["error"]))}))


def _ids(ids: Iterable[int] | None, *, allow_none: bool = True) -> list[int] | None:
    """The ids of a call (None, when allowed: all), read once.

    Raises:
        InvalidArgument: ``ids`` is not an iterable of ints (one int, a str, a mapping), or None
            when not allowed.
    """
    if ids is None and allow_none:
        return None
    given = _items("ids", ids, "ints")
    if not all(_is_int(i) for i in given):
        raise InvalidArgument(f"ids must be a sequence of ints, got {quoted(given)}")
    return given


def _state(state: bytes | bytearray | memoryview | None) -> bytes | None:
    if state is None:
        return None
    if not isinstance(state, (bytes, bytearray, memoryview)):
        raise InvalidArgument(f"state must be bytes or None, got {type(state).__name__}")
    return bytes(state)


def _check_message(msg: object) -> None:
    if not isinstance(msg, Message):
        raise InvalidArgument(f"expected a pgqueue Message, got {type(msg).__name__}")
    # a Message made by hand with the id "5" was completed, but a batch never reported its lost
    # lease (the server's stale ids are ints: a review)
    if not _is_int(msg.id) or not _is_int(msg.attempts):
        raise InvalidArgument(f"a Message's id and attempts must be ints, got {quoted(msg.id)} and "
                              f"{quoted(msg.attempts)}")


def _token(msg: Message) -> dict[str, object]:
    _check_message(msg)
    return {"id": msg.id, "attempts": msg.attempts}


def _token_arrays(msgs: list[Message]) -> dict[str, str]:
    """The tokens of messages as two array literals, ``ids`` and ``attempts``, for statements
    that cast them to bigint[] and integer[]. Passed as lists, psycopg's list dumper inspects
    every element to choose the array's type: about 20 us more a call of 4 messages, measured
    on this project's 2-core machine. In id order, the order in which the server locks the rows
    (docs/locking.md), which it then need not sort (the results are read by id, not place).
    ``msgs`` come from :func:`_newest`, which has checked each."""
    msgs = sorted(msgs, key=lambda m: (int(m.id), int(m.attempts)))
    return {"ids": "{" + ",".join([str(int(m.id)) for m in msgs]) + "}",
            "attempts": "{" + ",".join([str(int(m.attempts)) for m in msgs]) + "}"}


def heartbeat_interval(lease_ms: int) -> float:
    """Return the seconds between heartbeats for a lease: a third of it (at least 5 ms)."""
    return max(lease_ms / 3000, MIN_HEARTBEAT_INTERVAL)


Outcome = Literal["complete", "fail", "reject", "release"]


def rejections(exc: BaseException | None) -> list[Reject]:
    """Return the :class:`pgqueue.Reject` exceptions that make ``exc`` a rejection, in order:
    ``[exc]`` for a Reject; for an ``ExceptionGroup`` or a ``BaseExceptionGroup`` (an
    ``asyncio.TaskGroup`` wraps what its tasks raised in one), its leaf exceptions, nested
    groups opened, if every one of them is a Reject; else none (an empty list): a group that
    holds anything else besides is not a rejection, and is settled as that group is (a
    failure, or an interruption for a ``BaseExceptionGroup`` that holds a KeyboardInterrupt,
    say)."""
    if isinstance(exc, Reject):
        return [exc]
    if not isinstance(exc, BaseExceptionGroup):
        return []
    leaves: list[Reject] = []
    for e in _leaves(exc):
        if not isinstance(e, Reject):
            return []
        leaves.append(e)
    return leaves


def rejection_text(exc: BaseException) -> str:
    """Return the ``last_error`` of a message dead-lettered because of ``exc`` (see
    :func:`rejections`): the :func:`error_text` of each Reject of a group, joined by ``"; "``
    (``"Reject: not an email"`` for a TaskGroup's one Reject, as for the bare Reject), rather
    than the group's own text; the :func:`error_text` of anything else."""
    leaves = rejections(exc)
    if not leaves or isinstance(exc, Reject):
        return error_text(exc)
    return error_text("; ".join(error_text(e) for e in leaves))


def outcome(exc: BaseException | None) -> Outcome:
    """Return what ``receive`` does with its message when the block ends.

    ``complete`` when the block succeeded; ``reject`` (to the dead letters now) when it raised
    :class:`pgqueue.Reject`, or a group of exceptions (an ``asyncio.TaskGroup``'s) all of whose
    leaves are Rejects (:func:`rejections`); ``fail`` (retry with back-off or dead-letter) when
    it raised another ``Exception`` (an ``ExceptionGroup`` that mixes Rejects with other
    errors included); ``release`` (defer to now, another consumer may take it at once) when it
    was interrupted: KeyboardInterrupt, SystemExit, asyncio cancellation, or a
    ``BaseExceptionGroup`` that holds one.
    """
    if exc is None:
        return "complete"
    if rejections(exc):
        return "reject"
    return "fail" if isinstance(exc, Exception) else "release"


def utf8(conninfo: str) -> dict[str, Any]:
    """The ``client_encoding`` of a connection pgqueue opens itself: UTF8, unless the connection
    string sets one. pgqueue's texts are Python's str: on a SQL_ASCII database (initdb under the
    C locale makes them) psycopg otherwise returned them as bytes (a dequeue failed after its
    lease was committed), and on a LATIN1 one it could not send what Latin-1 lacks; with UTF8
    the server converts, and refuses what the database cannot hold (22P05)."""
    try:
        given = conninfo_to_dict(conninfo)
    except Exception:  # psycopg's connect reports a connection string that does not parse
        return {}
    return {} if "client_encoding" in given else {"client_encoding": "UTF8"}


class _Utf8TextLoader(Loader):
    """Load a text value as UTF-8 (psycopg returns bytes on a SQL_ASCII connection); a byte
    that is not UTF-8 (a client in another encoding wrote it: SQL_ASCII takes any byte) as a
    Python escape, ``\\xe9``, so that reading it cannot fail after a lease was committed."""

    def load(self, data: Buffer) -> str:
        return bytes(data).decode("utf-8", "backslashreplace")


#: The types psycopg loads as str, by OID (a name would be looked up at every call): text,
#: varchar, bpchar, name, "char", and ``0``, a type it has no loader for, such as an enum.
_TEXT_TYPES: tuple[int, ...] = (25, 1043, 1042, 19, 18, 0)


def utf8_texts(encoding: str, adapters: AdaptersMap) -> None:
    """Have a cursor of a connection in ``encoding`` (``conn.info.encoding``) load texts as
    ``str``: on a SQL_ASCII connection (a caller's, which pgqueue does not reconfigure) psycopg
    returns them as bytes, and a dequeue failed after its lease was committed, a version check
    read b'0.4', stats named a queue "b'q'". Texts are decoded as UTF-8, which pgqueue writes
    (:class:`_Utf8TextLoader`). Other encodings are left to psycopg."""
    if encoding == "ascii":
        for name in _TEXT_TYPES:
            adapters.register_loader(name, _Utf8TextLoader)


def psycopg_arrays(params: Mapping[str, object], adapters: AdaptersMap) -> None:
    """Have a cursor dump the lists among ``params`` as psycopg's own arrays, whatever dumper
    the caller registered for ``list`` (``psycopg.adapters.register_dumper(list, JsonbDumper)``,
    globally or on the connection): the statements cast them (``%(ids)s::bigint[]``) to mean
    the same whatever adapters, but a list dumped as JSON broke them (``enqueue_many`` raised a
    bare TypeError, ``cancel`` 42846). Only a call with a list pays the registration."""
    if any(isinstance(value, list) for value in params.values()):
        # in psycopg's own order: the text dumper last, the one a %s placeholder takes
        adapters.register_dumper(list, ListBinaryDumper)
        adapters.register_dumper(list, ListDumper)


#: The server encodings the server never refuses a text for: UTF8 holds every character, and
#: SQL_ASCII takes the bytes unconverted.
_HOLD_ANY_TEXT = frozenset({"UTF8", "SQL_ASCII"})


#: The server encodings whose Python codec refuses exactly what PostgreSQL's conversion from
#: UTF8 refuses (a review compared them character by character, U+0080 to U+FFFF): the
#: single-byte ones and EUC_CN. Python's EUC_JP, EUC_KR and EUC_JIS_2004 codecs take characters
#: PostgreSQL refuses (〜 in EUC_JP, most Hangul syllables in EUC_KR), as do Python's codecs
#: of a client encoding converted straight to the server's (WIN1251 to KOI8R).
_CODEC_AGREES = frozenset({
    *(f"LATIN{n}" for n in range(1, 11)), *(f"WIN{n}" for n in range(1250, 1259)), "WIN866", "WIN874",
    "KOI8R", "KOI8U", "ISO_8859_5", "ISO_8859_6", "ISO_8859_7", "ISO_8859_8", "EUC_CN"})


def server_refuses(call: Call[Any], info: ConnectionInfo) -> bool:
    """Tell whether the server may refuse a text of ``call`` that its encoding cannot hold, so
    that its ASCII twin (``untranslatable``) is to be sent in its place. The server converts a
    text from the client encoding to its own and refuses one its own cannot hold (22P05, a LATIN1
    database under client_encoding UTF8), which aborts a transaction the call runs in (a pool's,
    a caller's): the twin then failed with 25P02 and the message stayed leased (a review). So it
    is decided here, before anything is sent: no round trip, and no savepoint, which on a
    connection other tasks share rolled their statements back with it (a review of that fix).
    Under client_encoding UTF8 on a server encoding of :data:`_CODEC_AGREES`, the texts are
    tried against its Python codec; elsewhere any text that is not ASCII gets the twin."""
    server = info.parameter_status("server_encoding")
    client = info.parameter_status("client_encoding")
    if server is None or server in _HOLD_ANY_TEXT or server == client:
        return False
    texts = [value for value in call.params.values() if isinstance(value, str)]
    if client != "UTF8" or server not in _CODEC_AGREES:
        return not all(text.isascii() for text in texts)
    codec = pg2pyenc(server.encode())
    for text in texts:
        try:
            text.encode(codec)
        except UnicodeEncodeError:
            return True
    return False


def ended_while_idle(pgconn: PGconn) -> bool:
    """Tell, without waiting, whether the server ended the session of the idle connection
    ``pgconn`` while it sat idle: its goodbye (a FATAL error, 57P01 of a restart or of a
    ``pg_terminate_backend``, 57P05 of ``idle_session_timeout``) and the socket's end are there to
    read before anything is sent. A call found so never reached the server: it may be made on a
    new connection. Before, the call was sent and failed with ``ConnectionFailed`` (57P01 cannot
    tell that apart from a session ended while the call ran).

    False for a connection in use (not IDLE: a statement in flight, a transaction), for one
    whose socket holds nothing to read, and where the socket cannot be watched; the caller holds
    the connection's lock (or, on asyncio, awaits nothing meanwhile)."""
    if pgconn.status != ConnStatus.OK:
        return True
    if pgconn.transaction_status != TransactionStatus.IDLE:
        return False
    for _ in range(_ENDED_READS):
        try:
            readable, _, _ = select.select([pgconn.socket], [], [], 0)
        except (OSError, ValueError):  # (a descriptor select cannot watch: the call finds out)
            return False
        if not readable:
            return False
        try:
            # one read at a time: the goodbye first, the socket's end (an error here) at the
            # next; what came is kept for the next statement (a notice, say)
            pgconn.consume_input()
        except psycopg.Error:
            return True
        if pgconn.status != ConnStatus.OK:
            return True
    return False


#: How many reads :func:`ended_while_idle` makes at most of what an idle connection's socket
#: holds (a goodbye and the socket's end take two).
_ENDED_READS = 4


def conninfo_of(pgconn: PGconn) -> str:
    """Return a connection string that reaches the same server, database and user as a connection.

    It includes the password if the connection used one (libpq reports it), so a second
    connection can be opened with the same credentials.
    """
    params = {opt.keyword.decode(): opt.val.decode() for opt in pgconn.info if opt.val is not None}
    return make_conninfo("", **params)


#: The longest a connection opened to settle a message elsewhere may take to connect (seconds):
#: psycopg's default without ``connect_timeout`` is 130 s, which a Ctrl-C twice against a server
#: that no longer answers waited out (a review).
SETTLE_CONNECT_TIMEOUT = 3


@dataclass(frozen=True, slots=True)
class CallerSession:
    """A caller's connection's server session, recorded while the connection is open, for
    settling a message on a connection of its own once the caller's is closed.

    Attributes:
        conninfo: a connection string to the same server, database and user (:func:`conninfo_of`),
            of the host, address and port the connection reached, with ``connect_timeout`` at
            most :data:`SETTLE_CONNECT_TIMEOUT`.
        pid: the server process of the session (``backend_pid``).
        addr: the client address the server saw (None for a Unix socket).
        port: the client port the server saw (-1 for a Unix socket; None if it could not be read,
            and then :func:`end_session` ends no session and leaves the message leased if a
            session has the pid).
    """

    conninfo: str
    pid: int
    addr: str | None
    port: int | None


def backend_pid() -> Call[int]:
    """Return the call that reads the server process of the connection it runs on
    (:data:`pgqueue._sql.BACKEND_PID`), for :func:`caller_session`."""
    return Call(_sql.BACKEND_PID, {}, _int)


def caller_session(pgconn: PGconn, server_pid: int) -> CallerSession | None:
    """Record an open connection's session (:class:`CallerSession`): its conninfo (that of the
    host and address it reached: psycopg tries a list of hosts, or a name's addresses, one at a
    time), its backend pid, and its socket's local address, which the server sees as the
    client's. None when the backend pid the connection was given is not ``server_pid``, its
    server process's (:func:`backend_pid`, read on it): a pooler's made-up process id (PgBouncer,
    pgcat), which no session of the server may have, so that "no session has it" would not
    prove the caller's session gone (a review: the message was settled while the block's
    statement ran on behind the pooler). No session is then ever ended, nor a message settled
    elsewhere."""
    if pgconn.backend_pid != server_pid:
        return None
    params = conninfo_to_dict(conninfo_of(pgconn))
    timeout = str(params.get("connect_timeout") or "")
    if not timeout.isdigit() or not 0 < int(timeout) <= SETTLE_CONNECT_TIMEOUT:
        params["connect_timeout"] = SETTLE_CONNECT_TIMEOUT
    addr: str | None = None
    port: int | None = -1
    sock: socket.socket | None = None
    try:
        sock = socket.socket(fileno=pgconn.socket)  # psycopg's socket, detached below, never closed here
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            name = sock.getsockname()
            addr, port = str(name[0]).partition("%")[0], int(name[1])  # no IPv6 zone: not an inet
    except OSError:
        port = None  # unknown: a session with the pid is then never ended, nor the message settled
    finally:
        if sock is not None:
            sock.detach()
    return CallerSession(make_conninfo("", **params), pgconn.backend_pid, addr, port)


def end_session(session: CallerSession) -> Call[bool | None]:
    """Return the call that ends a closed caller connection's server session if the server still
    runs it (:data:`pgqueue._sql.END_SESSION`): True once no session has its pid (gone, or
    ended), None if one has it that is not provably the caller's (left alone), False if it did
    not exit within 5 seconds or exited just before the call (:func:`session_gone` tells)."""
    return Call(_sql.END_SESSION, {"pid": session.pid, "addr": session.addr, "port": session.port}, _bool_or_none)


def session_gone(session: CallerSession) -> Call[bool]:
    """Return the call that tells whether no session has the closed caller connection's pid now
    (:data:`pgqueue._sql.SESSION_GONE`), after :func:`end_session` said False."""
    return Call(_sql.SESSION_GONE, {"pid": session.pid}, _bool)


def session_runs_on(session: CallerSession, ended: bool | None) -> str:
    """The error text when :func:`end_session` did not end the session: it did not exit in time
    (``ended`` False), or a session with its pid is not provably the caller's (None)."""
    if ended is None:
        return (f"a server session with the closed connection's process id ({session.pid}) is not provably "
                "its own (another client address, port or user: a NAT, a proxy or a pooler between); "
                "it is left alone, and the message leased until its lease runs out")
    return (f"the closed connection's server session (process {session.pid}) did not end within 5 seconds; "
            "the message is left leased until its lease runs out")


@functools.cache
def _libpq_keywords() -> frozenset[str]:
    """The connection options the linked libpq knows (``host``, ``sslmode``, ...)."""
    return frozenset(opt.keyword.decode() for opt in Conninfo.get_defaults())


def pool_conninfo(conninfo: object, kwargs: object) -> str:
    """Return a connection string for a pool's ``conninfo`` and the libpq options among its
    ``kwargs`` (psycopg's own connection arguments, such as ``autocommit``, ``prepare_threshold``
    or ``row_factory``, are not connection options: they are left out).

    Raises:
        InvalidArgument: ``conninfo`` is not a string or ``kwargs`` not a dict (a function the
            pool calls, say, which an async pool's may be): pass the connection string
            explicitly then (``dsn=`` for a worker).
    """
    if not isinstance(conninfo, str):
        raise InvalidArgument("the pool's conninfo is not a string: pass the connection string explicitly")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise InvalidArgument("the pool's kwargs is not a dict: pass the connection string explicitly")
    extra = {k: v for k, v in (kwargs or {}).items() if k in _libpq_keywords()}
    return make_conninfo(conninfo, **extra)


# ---------------------------------------------------------------------------------------
# Row conversion
# ---------------------------------------------------------------------------------------


def _payload(content: bytes, content_type: str | None) -> object:
    try:
        return codec.decode(content, content_type)
    except ValueError:
        # A message that does not decode must still reach its handler (or the dead letters):
        # hand out the raw bytes rather than fail the whole batch.
        return content


def message_from_row(queue: str, row: Row) -> Message:
    """Return the Message for a row of ``_sql.DEQUEUE``."""
    content = bytes(row[1])
    dequeue_at = int(row[3])
    return Message(
        id=int(row[0]),
        queue=queue,
        payload=_payload(content, row[5]),
        attempts=int(row[2]),
        state=None if row[4] is None else bytes(row[4]),
        dequeue_at=None if dequeue_at < 0 else to_datetime(dequeue_at),
        created_at=to_datetime(int(row[6])),
        locked_until=None if row[7] is None else to_datetime(int(row[7])),
        content=content,
        content_type=row[5],
        priority=-1 - dequeue_at if dequeue_at < 0 else None,
    )


def pending_from_row(queue: str, row: Row) -> Pending:
    """Return the Pending message for a row of ``_sql.PEEK`` / ``_sql.CANCEL``."""
    content = bytes(row[1])
    dequeue_at = int(row[4])
    return Pending(
        id=int(row[0]),
        queue=queue,
        payload=_payload(content, row[2]),
        content=content,
        content_type=row[2],
        attempts=int(row[3]),
        state=None if row[7] is None else bytes(row[7]),
        dequeue_at=None if dequeue_at < 0 else to_datetime(dequeue_at),
        priority=-1 - dequeue_at if dequeue_at < 0 else None,
        created_at=to_datetime(int(row[5])),
        expired_at=None if row[6] is None else to_datetime(int(row[6])),
        last_error=row[8],
    )


def stats_from_row(row: Row) -> QueueStats:
    """Return the QueueStats for a row of ``_sql.QUEUE_STATS`` / ``_sql.ALL_STATS``."""
    return QueueStats(
        queue=str(row[0]),
        ready=int(row[1]),
        scheduled=int(row[2]),
        leased=int(row[3]),
        dead=int(row[4]),
        oldest_ready_age_ms=None if row[5] is None else int(row[5]),
    )


def counters_from_row(row: Row) -> QueueCounters:
    """Return the QueueCounters for a row of ``_sql.QUEUE_COUNTERS`` / ``_sql.ALL_COUNTERS``."""
    return QueueCounters(queue=str(row[0]), enqueued=int(row[1]), delivered=int(row[2]), completed=int(row[3]),
                         failed=int(row[4]), dead_lettered=int(row[5]), expired=int(row[6]), shared=bool(row[7]))


def settings_from_row(row: Row) -> QueueSettings:
    """Return the QueueSettings for a row of ``_sql.QUEUE_LIST`` / ``_sql.QUEUE_SETTINGS``."""
    return QueueSettings(
        queue=str(row[0]),
        lock_ms=int(row[1]),
        max_attempts=None if row[2] is None else int(row[2]),
        retry_base_ms=int(row[3]),
        retry_cap_ms=int(row[4]),
        max_size=None if row[5] is None else int(row[5]),
        notify=bool(row[6]),
        created_at=_utc(int(row[7])),
        group_concurrency=None if row[8] is None else int(row[8]),
        key_window_ms=int(row[9]),
        rate_limit=None if row[10] is None else int(row[10]),
    )


def _utc(microseconds: int) -> datetime:
    """A timestamptz read as microseconds since the epoch (``_sql.QUEUE_LIST``) as an aware UTC
    datetime, clamped as :func:`pgqueue.message.to_datetime` clamps."""
    try:
        return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=microseconds)
    except OverflowError:
        return (datetime.max if microseconds > 0 else datetime.min).replace(tzinfo=timezone.utc)


def dead_letter_from_row(row: Row) -> DeadLetter:
    """Return the DeadLetter for a row of ``_sql.DEAD_LETTERS``."""
    content = bytes(row[2])
    return DeadLetter(
        id=int(row[0]),
        queue=str(row[1]),
        payload=_payload(content, row[3]),
        content=content,
        content_type=row[3],
        state=None if row[4] is None else bytes(row[4]),
        attempts=int(row[5]),
        last_error=row[6],
        created_at=to_datetime(int(row[7])),
        dead_at=to_datetime(int(row[8])),
        dead_at_ms=int(row[8]),
    )


def _scalar(rows: list[Row]) -> Any:
    return rows[0][0] if rows else None


def _bool(rows: list[Row]) -> bool:
    return bool(_scalar(rows))


def _bool_or_none(rows: list[Row]) -> bool | None:
    value = _scalar(rows)
    return None if value is None else bool(value)


def _int(rows: list[Row]) -> int:
    return int(_scalar(rows))


def _none(rows: list[Row]) -> None:
    return None


# ---------------------------------------------------------------------------------------
# Calls
# ---------------------------------------------------------------------------------------


def enqueue(queue: str, payload: object, *, delay: Delay | None = None, at: When | None = None,
            priority: int | None = None, task: str | None = None, group: str | None = None,
            key: str | None = None) -> Call[int]:
    """Return the call that enqueues one payload (naming ``task``, if given, in message group
    ``group`` with idempotency key ``key``); its result is the id."""
    content, content_type = codec.encode(payload)
    content_type = codec.with_task(content_type, task)
    return Call(
        _sql.ENQUEUE,
        {"queue": queue, "content": content, "content_type": content_type,
         "group": check_str("group", group), "key": check_str("key", key),
         **schedule(delay, at, priority).params()},
        _int,
        again_on_40001=key is not None,
    )


#: The most payload bytes one ``enqueue_many`` sends: its statement's parameters travel in one
#: protocol message, which PostgreSQL takes up to 1 GB (a larger one closed the connection:
#: ``ConnectionFailed``, the caller's transaction lost; a review); the margin is for the rest.
#: The contents go as a binary array (``_sql.ENQUEUE_MANY``'s ``%(contents)b``): as text each
#: went as hex, twice its size, and 600 MB of payloads closed the connection (a review).
MAX_CALL_CONTENT = 1_000_000_000


#: The most payload bytes one call sends on a cursor that binds its parameters on the client
#: (``psycopg.ClientCursor``): it writes ``bytea`` into the statement's text as one hex string
#: literal (an array of them for ``enqueue_many``), twice its size, and PostgreSQL's parser
#: reads a literal of less than 2^29 characters (a longer one failed with XX000, "invalid memory
#: alloc request size 1073741824", after it was sent: 270,000,000 bytes did; two reviews). The
#: margin is for an array's quoting, up to 10 characters an element.
MAX_CLIENT_BOUND_CONTENT = 250_000_000


def check_client_bound(params: Mapping[str, object], client_binding: bool) -> None:
    """Refuse a call whose payloads a client-binding cursor would write past what PostgreSQL
    takes in one statement (:data:`MAX_CLIENT_BOUND_CONTENT`), before anything is sent.

    Raises:
        InvalidArgument: the call's ``bytea`` parameters pass it in all.
    """
    if not client_binding:
        return
    total = 0
    for value in params.values():
        if isinstance(value, bytes):
            total += len(value)
        elif isinstance(value, list):
            total += sum(len(v) for v in value if isinstance(v, bytes))
    if total > MAX_CLIENT_BOUND_CONTENT:
        raise InvalidArgument(
            f"{total:,} bytes of payloads in one call on a connection whose cursors bind parameters on "
            f"the client (psycopg.ClientCursor: bytea goes as a hex string literal, twice its size, and "
            f"PostgreSQL reads none of 2^29 characters or more) is over the {MAX_CLIENT_BOUND_CONTENT:,} "
            "it sends; enqueue less at a time, or use a server-binding cursor")


def enqueue_many(queue: str, payloads: Iterable[object], *, delay: Delay | None = None,
                 at: When | None = None, priority: int | None = None, task: str | None = None,
                 groups: Iterable[str | None] | None = None,
                 keys: Iterable[str | None] | None = None) -> Call[list[int]]:
    """Return the call that enqueues many payloads in one statement; its result is their ids in order."""
    plan = schedule(delay, at, priority)
    codec.with_task(None, task)  # a bad task is refused with no payloads too, as a bad delay is
    encoded = [(c, codec.with_task(t, task)) for c, t in map(codec.encode, _items("payloads", payloads, "payloads"))]
    total = sum(len(c) for c, _ in encoded)
    if total > MAX_CALL_CONTENT:
        raise InvalidArgument(
            f"enqueue_many: {total:,} bytes of payloads in one call is over the {MAX_CALL_CONTENT:,} it "
            "sends (PostgreSQL takes a statement's parameters in at most 1 GB; a larger one dropped the "
            "connection); enqueue them in smaller batches")
    per_key = _per_message("keys", keys, len(encoded))
    return Call(
        _sql.ENQUEUE_MANY,
        {"queue": queue, "contents": [c for c, _ in encoded], "content_types": [t for _, t in encoded],
         "groups": _per_message("groups", groups, len(encoded)), "keys": per_key,
         **plan.params()},
        lambda rows: [int(r[0]) for r in rows],
        again_on_40001=per_key is not None and any(k is not None for k in per_key),
    )


def dequeue(queue: str, limit: int = 1, *, lock_ms: int | None = None) -> Call[list[Message]]:
    """Return the call that dequeues up to ``limit`` messages (``lock_ms=0`` deletes them)."""
    check_int("limit", limit, allow_none=False)
    check_int("lock_ms", lock_ms)
    return Call(
        _sql.DEQUEUE,
        {"queue": queue, "limit": limit, "lock_ms": lock_ms},
        lambda rows: [message_from_row(queue, r) for r in rows],
    )


def receive(queue: str, *, lock_ms: int | None = None, heartbeat: bool = True) -> Call[Lease | None]:
    """Return the call that dequeues one leased message for ``receive``, with its lease length.

    Raises:
        InvalidArgument: ``lock_ms`` is 0 (receive needs a lease to complete or fail), or
            ``heartbeat`` is not a bool ("no" was taken as true, and heartbeats sent: a review).
    """
    check_bool("heartbeat", heartbeat, allow_none=False)
    if check_int("lock_ms", lock_ms) == 0:
        raise InvalidArgument("receive() needs a lease: lock_ms must be > 0 or None (the queue's lock_ms)")

    def result(rows: list[Row]) -> Lease | None:
        if not rows:
            return None
        message = message_from_row(queue, rows[0])
        if lock_ms is not None:
            granted = lock_ms
        else:
            granted = int(rows[0][7]) - int(rows[0][8])
        return Lease(message, max(granted, 1))

    return Call(_sql.DEQUEUE, {"queue": queue, "limit": 1, "lock_ms": lock_ms}, result)


def complete(msg: Message) -> Call[bool]:
    """Return the call that completes a leased message; False if the lease was lost."""
    return Call(_sql.COMPLETE, _token(msg), _bool)


def _newest(given: list[Message]) -> tuple[list[Message], Callable[[Message], bool]]:
    """Return the deliveries of ``given`` to acknowledge, one a message: the newest (a message's
    attempts token grows with each delivery), in the order given; and a test that tells an
    older delivery of a message given (stale by construction: its lease ran out before the
    newest was handed out), which is lost without being sent. A delivery listed twice is sent
    once."""
    newest: dict[int, int] = {}
    for m in given:
        _check_message(m)
        newest[m.id] = max(newest.get(m.id, m.attempts), m.attempts)
    send: dict[int, Message] = {}
    for m in given:
        if m.attempts == newest[m.id]:
            send.setdefault(m.id, m)
    return list(send.values()), lambda m: m.attempts < newest[m.id]


def _many(sql: LiteralString, msgs: Iterable[Message], **params: Any) -> Call[list[Message]]:
    """The call of a ``*_batch`` function that acts on leased messages by token and returns the
    stale ids: its result is the messages whose lease was lost (those changed nothing), in the
    order given: the server's stale tokens, and each delivery of a message older than another
    one given (never sent). The server takes at most :data:`MAX_BATCH` messages a call.

    Raises:
        InvalidArgument: ``msgs`` is not an iterable of messages (one Message, None, a str),
            or holds something else.
    """
    given = _items("msgs", msgs, "pgqueue Messages")
    send, older = _newest(given)

    def result(rows: list[Row]) -> list[Message]:
        stale = set(rows[0][0] or ())  # ids: each is sent once
        return [m for m in given if older(m) or m.id in stale]

    return Call(sql, {**_token_arrays(send), **params}, result)


def complete_many(msgs: Iterable[Message]) -> Call[list[Message]]:
    """Return the call that completes leased messages in one statement (at most
    :data:`MAX_BATCH`); its result is the messages whose lease was lost (:func:`_many`)."""
    return _many(_sql.COMPLETE_BATCH, msgs)


def complete_and_dequeue(queue: str, msgs: Iterable[Message], limit: int = 1, *,
                         lock_ms: int | None = None) -> Call[tuple[list[Message], list[Message]]]:
    """Return the call that completes leased messages (at most :data:`MAX_BATCH`) and dequeues
    up to ``limit`` new ones in one statement; its result is the messages handed out and the
    given messages whose lease was lost (those changed nothing), in the order given."""
    check_int("limit", limit, allow_none=False)
    check_int("lock_ms", lock_ms)
    given = _items("msgs", msgs, "pgqueue Messages")
    send, older = _newest(given)

    def result(rows: list[Row]) -> tuple[list[Message], list[Message]]:
        stale = {int(r[0]) for r in rows if r[9]}  # ids: each is sent once
        lost = [m for m in given if older(m) or m.id in stale]
        return [message_from_row(queue, r) for r in rows if not r[9]], lost

    return Call(_sql.COMPLETE_AND_DEQUEUE,
                {**_token_arrays(send), "queue": queue, "limit": limit, "lock_ms": lock_ms}, result)


def heartbeat(msg: Message, lock_ms: int | None = None) -> Call[bool]:
    """Return the call that extends a lease to now + lock_ms (None: the queue's); False if lost."""
    check_int("lock_ms", lock_ms)
    return Call(_sql.HEARTBEAT, {**_token(msg), "lock_ms": lock_ms}, _bool)


def heartbeat_batch(msgs: Iterable[Message], lock_ms: int | None = None) -> Call[list[Message]]:
    """Return the call that extends many leases to now + lock_ms (None: each queue's) in one
    statement, each with its own token as :func:`heartbeat`; its result is the messages whose
    lease was lost (those changed nothing), in the order given: the server's stale tokens, and
    each delivery of a message older than another one given (never sent). At most
    :data:`MAX_BATCH` messages a call."""
    check_int("lock_ms", lock_ms)
    return _many(_sql.HEARTBEAT_BATCH, msgs, lock_ms=lock_ms)


def defer(msg: Message, *, delay: Delay | None = None, at: When | None = None,
          state: bytes | bytearray | memoryview | None = None) -> Call[bool]:
    """Return the call that gives a leased message back until later, optionally saving state."""
    return Call(_sql.DEFER, {**_token(msg), "state": _state(state), **schedule(delay, at).params()}, _bool)


def fail(msg: Message, error: str | BaseException, *, delay: Delay | None = None,
         at: When | None = None) -> Call[bool]:
    """Return the call that reports a failed attempt (retry after back-off, or dead-letter)."""
    return _error_in_ascii_too(Call(_sql.FAIL, {**_token(msg), "error": error_text(error), **schedule(delay, at).params()},
                                    _bool))


def fail_reporting(msg: Message, error: str | BaseException) -> Call[tuple[bool, bool]]:
    """Return the call that fails a delivery as :func:`fail` does (after the queue's back-off);
    its result is (False if the lease was lost, True if the message went to the dead letters):
    what the server did with the queue's ``max_attempts`` of the moment, not of an earlier read."""

    def result(rows: list[Row]) -> tuple[bool, bool]:
        ok, max_attempts = rows[0]
        return bool(ok), bool(ok) and max_attempts is not None and msg.attempts >= max_attempts

    return _error_in_ascii_too(Call(_sql.FAIL_REPORTING,
                                    {**_token(msg), "error": error_text(error), "queue": msg.queue, **schedule().params()},
                                    result))


def reject(msg: Message, error: str | BaseException) -> Call[bool]:
    """Return the call that dead-letters a leased message now; False if the lease was lost.

    An exception is stored as :func:`rejection_text` gives it: a group of Rejects (a
    TaskGroup's) as the Rejects' own texts."""
    text = rejection_text(error) if isinstance(error, BaseException) else error_text(error)
    return _error_in_ascii_too(Call(_sql.REJECT, {**_token(msg), "error": text}, _bool))


def next_due(queue: str) -> Call[datetime | None]:
    """Return the call that asks when the queue's next message becomes deliverable (None: the
    queue is empty). A priority message is due since the epoch: ``queue_next_due`` gives its
    stored ``dequeue_at``, ``-1 - priority``, which is made 1970-01-01 UTC here (the client
    hides that encoding, as ``Message.dequeue_at`` None does)."""
    return Call(_sql.NEXT_DUE, {"queue": queue},
                lambda rows: None if _scalar(rows) is None else to_datetime(max(_int(rows), 0)))


def next_due_in(queue: str) -> Call[float | None]:
    """Return the call that asks how many seconds until the queue's next message becomes
    deliverable, by the server's clock (None: the queue is empty; 0 or less: due, a priority
    message long since). A worker sleeps by it: :func:`next_due`'s time against the worker
    host's clock woke it late wherever the two clocks differed (a review: a host 3 s ahead
    started a message due within those 3 s up to a whole poll back-off late)."""
    return Call(_sql.NEXT_DUE_IN, {"queue": queue},
                lambda rows: None if _scalar(rows) is None else _int(rows) / 1000.0)


def peek(queue: str, limit: int = 10) -> Call[list[Pending]]:
    """Return the call that reads up to ``limit`` waiting messages without leasing them."""
    check_int("limit", limit, allow_none=False)
    return Call(_sql.PEEK, {"queue": queue, "limit": limit},
                lambda rows: [pending_from_row(queue, r) for r in rows])


def cancel(queue: str, ids: Iterable[int]) -> Call[list[Pending]]:
    """Return the call that deletes pending messages by id; its result is those removed, by id.

    Raises:
        InvalidArgument: ``ids`` is not an iterable of ints (one int, None, a str or a mapping).
    """
    return Call(_sql.CANCEL, {"queue": queue, "ids": _ids(ids, allow_none=False)},
                lambda rows: [pending_from_row(queue, r) for r in rows], probe_queue=queue)


def create(queue: str, *, lock_ms: int = 30000, max_attempts: int | None = None, retry_base_ms: int = 1000,
           retry_cap_ms: int = 3600000, max_size: int | None = None, notify: bool = False,
           if_not_exists: bool = False, group_concurrency: int | None = None, key_window_ms: int = 0,
           rate_limit: int | None = None) -> Call[None]:
    """Return the call that creates a queue."""
    params = {
        "queue": queue,
        "lock_ms": check_int("lock_ms", lock_ms, allow_none=False),
        "max_attempts": check_int("max_attempts", max_attempts),
        "retry_base_ms": check_int("retry_base_ms", retry_base_ms, allow_none=False),
        "retry_cap_ms": check_int("retry_cap_ms", retry_cap_ms, allow_none=False),
        "max_size": check_int("max_size", max_size),
        "notify": check_bool("notify", notify, allow_none=False),
        "if_not_exists": check_bool("if_not_exists", if_not_exists, allow_none=False),
        "group_concurrency": check_int("group_concurrency", group_concurrency),
        "key_window_ms": check_int("key_window_ms", key_window_ms, allow_none=False),
        "rate_limit": check_int("rate_limit", rate_limit),
    }
    return Call(_sql.QUEUE_CREATE, params, _none, read_committed=True)


def alter(queue: str, *, lock_ms: int | None = None, max_attempts: int | None = None,
          retry_base_ms: int | None = None, retry_cap_ms: int | None = None, max_size: int | None = None,
          notify: bool | None = None, group_concurrency: int | None = None, key_window_ms: int | None = None,
          rate_limit: int | None = None) -> Call[None]:
    """Return the call that changes a queue's settings (None keeps a setting)."""
    params = {
        "queue": queue,
        "lock_ms": check_int("lock_ms", lock_ms),
        "max_attempts": check_int("max_attempts", max_attempts),
        "retry_base_ms": check_int("retry_base_ms", retry_base_ms),
        "retry_cap_ms": check_int("retry_cap_ms", retry_cap_ms),
        "max_size": check_int("max_size", max_size),
        "notify": check_bool("notify", notify),
        "group_concurrency": check_int("group_concurrency", group_concurrency),
        "key_window_ms": check_int("key_window_ms", key_window_ms),
        "rate_limit": check_int("rate_limit", rate_limit),
    }
    return Call(_sql.QUEUE_ALTER, params, _none, read_committed=True)


def drop(queue: str) -> Call[bool]:
    """Return the call that drops a queue with its messages; False if it did not exist."""
    return Call(_sql.QUEUE_DROP, {"queue": queue}, _bool, read_committed=True)


def settings(queue: str) -> Call[QueueSettings]:
    """Return the call that reads a queue's settings."""

    def result(rows: list[Row]) -> QueueSettings:
        if not rows:  # the probe did not raise: the queue was dropped in between
            raise QueueNotFound(f'queue "{queue}" does not exist', sqlstate="PQ001")
        return settings_from_row(rows[0])

    return Call(_sql.QUEUE_SETTINGS, {"queue": queue}, result, probe_queue=queue)


def group_stats(queue: str, limit: int = 10) -> Call[list[GroupStats]]:
    """Return the call that lists the ``limit`` message groups with the most messages waiting."""
    check_int("limit", limit, allow_none=False)
    return Call(_sql.GROUP_STATS, {"queue": queue, "limit": limit},
                lambda rows: [GroupStats(str(r[0]), int(r[1]), int(r[2])) for r in rows])


def stats(queue: str, *, exact: bool = False) -> Call[QueueStats]:
    """Return the call that counts a queue's messages by state (``queue_stats``: exact up to
    10,000 a state, estimated above; ``exact``: ``queue_stats_exact``, every message)."""

    def result(rows: list[Row]) -> QueueStats:
        if not rows:
            raise QueueNotFound(f'queue "{queue}" does not exist', sqlstate="PQ001")
        return stats_from_row(rows[0])

    exact = bool(check_bool("exact", exact, allow_none=False))  # ("yes" was taken: a review)
    return Call(_sql.QUEUE_STATS_EXACT if exact else _sql.QUEUE_STATS, {"queue": queue}, result)


def counters(queue: str) -> Call[QueueCounters]:
    """Return the call that reads a queue's counters (what happened since it was created)."""

    def result(rows: list[Row]) -> QueueCounters:
        if not rows:
            raise QueueNotFound(f'queue "{queue}" does not exist', sqlstate="PQ001")
        return counters_from_row(rows[0])

    return Call(_sql.QUEUE_COUNTERS, {"queue": queue}, result)


def dead_letters(queue: str, limit: int = 100, after: DeadLetter | None = None) -> Call[list[DeadLetter]]:
    """Return the call that lists a queue's dead letters, oldest death first (after the letter
    ``after``, by its (dead_at, id), when given: the next page)."""
    check_int("limit", limit, allow_none=False)
    if limit < 0:
        raise InvalidArgument(f"limit must be >= 0, got {quoted(limit)}")
    if after is not None and not isinstance(after, DeadLetter):
        raise InvalidArgument(f"after must be a DeadLetter (the last of the page before), got {quoted(after)}")
    if after is None:
        return Call(_sql.DEAD_LETTERS, {"queue": queue, "limit": limit},
                    lambda rows: [dead_letter_from_row(r) for r in rows], probe_queue=queue)
    return Call(
        _sql.DEAD_LETTERS_AFTER,
        # (the stored time: dead_at is clamped for a time outside datetime's range, and a
        # cursor made from it would repeat or skip letters)
        {"queue": queue, "limit": limit, "id": after.id,
         "dead_at": to_epoch_ms(after.dead_at) if after.dead_at_ms is None else after.dead_at_ms},
        lambda rows: [dead_letter_from_row(r) for r in rows],
        probe_queue=queue,
    )


def requeue_dead(queue: str, ids: Iterable[int] | None = None, *, delay: Delay | None = None,
                 at: When | None = None) -> Call[int]:
    """Return the call that moves dead letters back onto the queue; its result is how many."""
    return Call(_sql.DEAD_REQUEUE, {"queue": queue, "ids": _ids(ids), **schedule(delay, at).params()}, _int)


def purge_dead(queue: str, ids: Iterable[int] | None = None, *, before: When | None = None) -> Call[int]:
    """Return the call that deletes dead letters (all, the ids given, and/or dead before a time)."""
    return Call(
        _sql.DEAD_PURGE,
        {"queue": queue, "ids": _ids(ids), "before": None if before is None else to_epoch_ms(before, "before")},
        _int,
    )


def list_queues() -> Call[list[QueueSettings]]:
    """Return the call that lists every queue's settings, by name."""
    return Call(_sql.QUEUE_LIST, {}, lambda rows: [settings_from_row(r) for r in rows])


def all_stats() -> Call[list[QueueStats]]:
    """Return the call that counts the messages of every queue, by name."""
    return Call(_sql.ALL_STATS, {}, lambda rows: [stats_from_row(r) for r in rows])


def all_counters() -> Call[list[QueueCounters]]:
    """Return the call that reads the counters of every queue, by name."""
    return Call(_sql.ALL_COUNTERS, {}, lambda rows: [counters_from_row(r) for r in rows])


def schedule_create(name: str, queue: str, payload: object, *, every: Delay | None = None, cron: str | None = None,
                    missed: str = "latest", start_at: When | None = None, task: str | None = None) -> Call[int]:
    """Return the call that creates a periodic message; its result is the schedule's id."""
    # (a name of 5 made a schedule "5", a NUL in the cron expression was an error that named
    # no argument: a review; a NUL in the queue's name is InvalidQueueName, see Call)
    check_str("name", name)
    check_str("cron", cron)
    check_str("missed", missed)
    if queue is not None and not isinstance(queue, str):
        raise InvalidArgument(f"queue must be a str, got {quoted(queue)}")
    content, content_type = codec.encode(payload)
    return Call(_sql.SCHEDULE_CREATE, {
        "name": name, "queue": queue, "content": content, "content_type": codec.with_task(content_type, task),
        "every_ms": None if every is None else delay_to_ms(every, "every"), "cron": cron, "missed": missed,
        "start_at": None if start_at is None else to_epoch_ms(start_at, "start_at")}, _int)


def schedule_drop(name: str) -> Call[bool]:
    """Return the call that drops a schedule; False if there was none."""
    check_str("name", name)
    return Call(_sql.SCHEDULE_DROP, {"name": name}, _bool)


def schedule_list() -> Call[list[ScheduleEntry]]:
    """Return the call that lists every schedule, by name."""

    def entry(row: Row) -> ScheduleEntry:
        content = bytes(row[4])
        return ScheduleEntry(name=row[0], queue=row[1], every_ms=row[2], cron=row[3],
                             payload=_payload(content, row[5]), content_type=row[5], missed=row[6],
                             next_run=to_datetime(int(row[7])), created_at=_utc(int(row[8])))

    return Call(_sql.SCHEDULE_LIST, {}, lambda rows: [entry(r) for r in rows])


def schedule_run(limit: int = 1000) -> Call[list[ScheduledMessage]]:
    """Return the call that enqueues the due slots of every schedule; its result is what it enqueued."""
    check_int("limit", limit, allow_none=False)
    return Call(_sql.SCHEDULE_RUN, {"limit": limit},
                lambda rows: [ScheduledMessage(r[0], int(r[1]), to_datetime(int(r[2]))) for r in rows])
