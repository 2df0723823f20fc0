"""The options of the ``pgqueue`` Spark data source, parsed and checked once on the driver.

Spark hands options over as a case-insensitive mapping of strings; :func:`parse` turns them into
a frozen, picklable :class:`Options` (it travels to the executors inside readers, writers and
partitions). Nothing here imports pyspark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Literal

from pgqueue.errors import InvalidArgument

__all__ = ["ACCEPTS", "Entry", "Options", "option", "parse", "passwords", "READ_PAYLOAD_TYPES",
           "WRITE_PAYLOAD_TYPES"]

CommitMode = Literal["task", "job"]

#: Payload types of reads: the column's Spark type.
READ_PAYLOAD_TYPES = ("binary", "string", "json")
#: Payload types of writes: how a column becomes content and content_type.
WRITE_PAYLOAD_TYPES = ("auto", "binary", "string", "json")

# (\Z, not $: $ matches before a final newline too, and "q1\n" was taken here; a review)
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}\Z")
_CONSUMER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}\Z")

#: The password of a libpq URI's user info (``postgresql://user:password@host``): libpq takes
#: the user info up to the first ``@`` before any ``/``.
_URI_PASSWORD = re.compile(r"postgres(?:ql)?://[^@/]*?:([^@/]+)@")
#: A ``password`` parameter: ``password=...`` of a key=value string (quoted or not), or of a URI's query.
_KEYWORD_PASSWORD = re.compile(r"(?:^|[\s?&])password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&#]+)")

#: The entry points, as a user writes them; each takes its own options (:data:`ACCEPTS`).
Entry = Literal["spark.read", "spark.readStream", "df.write", "df.writeStream"]

_EVERYWHERE = ("dsn", "conninfo", "queue", "path")
_READ = ("payloadType", "numPartitions", "minPartitions", "fetchSize")  # minPartitions: the Kafka source's name
_WRITE = ("payloadColumn", "payloadType", "dequeueAtColumn", "delayColumn", "priorityColumn", "groupColumn",
          "keyColumn", "commitMode", "batchSize")

#: The options each entry point takes (as documented): an option it would ignore is refused like
#: a typo, so that a misplaced option is an error, not a no-op. writeStream takes commitMode for
#: ``job`` (what it always does; ``task`` is refused there) and Spark's own checkpointLocation,
#: which Spark passes to a stream writer along with ours.
ACCEPTS: Mapping[Entry, tuple[str, ...]] = {
    "spark.read": (*_EVERYWHERE, *_READ, "includeDead", "filterPushdown", "reconnectTimeout"),
    "spark.readStream": (*_EVERYWHERE, *_READ, "consumer", "maxMessagesPerBatch", "maxMessagesPerTrigger",
                         "startingPosition", "failOnDataLoss", "reconnectTimeout"),
    "df.write": (*_EVERYWHERE, *_WRITE),
    "df.writeStream": (*_EVERYWHERE, *_WRITE, "checkpointLocation", "reconnectTimeout"),
}

#: Every option some entry point takes: its name in lower case (as Spark passes it) -> as documented.
_CANONICAL = {name.lower(): name for names in ACCEPTS.values() for name in names}
#: Every option some entry point takes (lower case).
KNOWN = frozenset(_CANONICAL)


@dataclass(frozen=True, slots=True)
class Options:
    """The checked options (see the module docstring of :mod:`pgqueue.spark` for each).

    The connection string stays out of ``repr`` (Spark logs partitions, which carry it).
    """

    dsn: str = field(repr=False)
    queue: str
    consumer: str = "spark"
    max_messages_per_batch: int = 100_000
    num_partitions: int = 1
    payload_column: str = "payload"
    payload_type: str = "auto"
    dequeue_at_column: str | None = None
    delay_column: str | None = None
    priority_column: str | None = None
    group_column: str | None = None
    key_column: str | None = None
    commit_mode: CommitMode = "task"
    batch_size: int = 5_000
    include_dead: bool = False
    fail_on_data_loss: bool = True
    fetch_size: int = 5_000
    filter_pushdown: bool = False
    #: ``earliest``, ``latest`` or epoch milliseconds (a timestamp)
    starting_position: str | int = "earliest"
    #: seconds to keep reconnecting after a lost connection (0: fail at the first loss)
    reconnect_timeout: int = 300


def option(options: Mapping[str, str], name: str) -> str | None:
    """The value of option ``name`` in any case of its letters, None if it is not set."""
    # Spark passes a CaseInsensitiveDict; a plain dict (tests, direct use) may use any case.
    for key, value in options.items():
        if key.lower() == name.lower():
            return value
    return None


_get = option

#: Options whose value Spark itself reads and checks (this module takes them only so as not to
#: refuse them).
_SPARKS_OWN = frozenset({"checkpointlocation"})
#: Options without a default (lower case): the connection string and the queue.
_REQUIRED = frozenset({"dsn", "conninfo", "queue", "path"})


def _refuse_empty(options: Mapping[str, str]) -> None:
    """Refuse an option given as an empty string: only a missing option takes the default.

    An empty value is most often an unset variable (``.option("consumer", os.environ.get(...,
    ""))``): taking the default then would consume as the shared consumer ``spark``, publish
    per task instead of per job, start at the earliest message or drop a group column, silently.
    """
    for key, value in options.items():
        name = key.lower()
        if name in KNOWN and name not in _SPARKS_OWN and value is not None and str(value) == "":
            advice = "" if name in _REQUIRED else " (leave the option out to take its default)"
            raise InvalidArgument(f"option {_CANONICAL[name]} must not be empty, got ''{advice}")


def _int(options: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidArgument(f"option {name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise InvalidArgument(f"option {name} must be between {low} and {high}, got {value}")
    return value


def _aliased(options: Mapping[str, str], name: str, alias: str, default: int, high: int) -> int:
    """An integer option >= 1 that also goes by the name Spark's Kafka source gives it."""
    value = _int(options, name, default, 1, high)
    if option(options, alias) is None:
        return value
    other = _int(options, alias, default, 1, high)
    if option(options, name) is not None and other != value:
        raise InvalidArgument(f"options {name} and {alias} are the same setting: give one, got {value} and {other}")
    return other


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise InvalidArgument(f"option {name} must be true or false, got {raw!r}")


def _choice(options: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = _get(options, name)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in choices:
        raise InvalidArgument(f"option {name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _starting_position(options: Mapping[str, str]) -> str | int:
    """``earliest``, ``latest``, or the epoch milliseconds of a timestamp (ISO 8601 with a zone, or ms)."""
    raw = _get(options, "startingPosition")
    if raw is None:
        return "earliest"
    text = str(raw).strip()  # blanks are refused below, as an empty value is by _refuse_empty
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    if re.fullmatch(r"-?[0-9]{1,19}", text) and -(2**63) <= int(text) < 2**63:
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise InvalidArgument(
            f"option startingPosition must be earliest, latest, a timestamp with a time zone (ISO 8601, "
            f"e.g. 2026-11-23T10:00:00Z) or epoch milliseconds, got {raw!r}"
        )
    return (when - _EPOCH) // timedelta(milliseconds=1)


def _column(options: Mapping[str, str], name: str) -> str | None:
    """The column an option names; None if the option is not given."""
    return _get(options, name)


def passwords(dsn: str) -> list[str]:
    """The passwords written in a connection string (raw and unquoted), longest first, to scrub
    them from error messages: libpq quotes a malformed URI whole, and fragments of others."""
    found = [m.group(1) for m in _URI_PASSWORD.finditer(dsn)]
    for m in _KEYWORD_PASSWORD.finditer(dsn):
        raw = m.group(1)
        found.append(raw)
        if raw.startswith("'"):
            found.append(re.sub(r"\\(.)", r"\1", raw[1:-1]))
    return sorted({p for p in found if p}, key=len, reverse=True)


def _check_names(options: Mapping[str, str], entries: tuple[Entry, ...]) -> None:
    """Refuse an option that none of ``entries`` takes: unknown anywhere, or one they would ignore."""
    where = " or ".join(entries)
    accepted = list(dict.fromkeys(name for entry in entries for name in ACCEPTS[entry]))
    takes = f"{where} of the pgqueue data source takes: {', '.join(accepted)}"
    unknown = sorted(k for k in options if k.lower() not in KNOWN)
    if unknown:
        raise InvalidArgument(f"unknown option(s) {', '.join(unknown)} for {where}; {takes}")
    lower = {name.lower() for name in accepted}
    misplaced = sorted(_CANONICAL[k.lower()] for k in options if k.lower() not in lower)
    if misplaced:
        raise InvalidArgument(f"option(s) {', '.join(misplaced)} do not apply to {where} (they would be ignored); "
                              + takes)


def _one_of(options: Mapping[str, str], name: str, alias: str, conflict: str) -> str | None:
    """The value of option ``name`` or ``alias``; both set to different values is an error."""
    value, other = _get(options, name), _get(options, alias)
    if value is not None and other is not None and value != other:
        raise InvalidArgument(conflict.format(value=value, other=other))
    return value if value is not None else other


def parse(options: Mapping[str, str], entry: Entry, *more: Entry) -> Options:
    """Return the checked options of ``entry`` (the reader's ``schema()``, which Spark asks of both
    kinds of read, passes ``spark.read`` and ``spark.readStream``: it takes what either takes).

    Raises:
        InvalidArgument: a missing dsn or queue, an unknown option or one that the entry point
            would ignore, an option given as an empty string (only a missing option takes the
            default), a queue option other than the path, or a value out of range.
    """
    entries = (entry, *more)
    _check_names(options, entries)
    _refuse_empty(options)
    reading = entry in ("spark.read", "spark.readStream")
    if any((e in ("spark.read", "spark.readStream")) != reading for e in more):
        raise ValueError(f"parse: {' and '.join(entries)} are not all reads or all writes")
    dsn = _one_of(options, "dsn", "conninfo", "options dsn and conninfo are the same setting: give one, got "
                  "two different connection strings")
    if not dsn:
        raise InvalidArgument('the pgqueue data source needs option("dsn", "<libpq connection string>")')
    if not dsn.strip():
        # (" " or a newline read from a file connected to libpq's defaults, as an empty dsn
        # would: whatever database the environment names; a review)
        name = "dsn" if _get(options, "dsn") is not None else "conninfo"
        raise InvalidArgument(f"option {name} must not be blank, got {dsn!r}")
    if _URI_PASSWORD.match(dsn):
        # Spark shows option values in plans (a stream's explain(), the UI) unless the key or the
        # value matches spark.redaction.regex (by default secret|password|token|access.?key)
        name = "dsn" if _get(options, "dsn") is not None else "conninfo"
        raise InvalidArgument(
            f"option {name} has a password in its URI (postgresql://user:PASSWORD@...), which Spark shows "
            "in clear in query plans (explain(), the Spark UI): write it as ?password=... in the URI or "
            "password=... in a key=value string (Spark redacts a value that says password), or keep it "
            "out of the options (a password file, PGPASSFILE, or PGPASSWORD on every node)"
        )
    queue = _one_of(options, "queue", "path", "option queue={value!r} and the path {other!r} of load()/save()/"
                    "start() name different queues: give one")
    if not queue:
        raise InvalidArgument('name the queue: .load("<queue>") / .save("<queue>") or option("queue", ...)')
    if not _QUEUE_NAME.match(queue):
        raise InvalidArgument(
            f"invalid queue name {queue!r}: 1 to 48 characters from A-Z a-z 0-9 _ . - not starting with . or -"
        )
    consumer = _get(options, "consumer")
    if consumer is None:
        consumer = "spark"
    if not _CONSUMER_NAME.match(consumer):
        raise InvalidArgument(
            f"invalid consumer name {consumer!r}: 1 to 100 characters from A-Z a-z 0-9 _ . : - "
            "not starting with . : or -"
        )
    payload_types = READ_PAYLOAD_TYPES if reading else WRITE_PAYLOAD_TYPES
    payload_column = _column(options, "payloadColumn")
    if payload_column is None:
        payload_column = "payload"
    return Options(
        dsn=dsn,
        queue=queue,
        consumer=consumer,
        max_messages_per_batch=_aliased(options, "maxMessagesPerBatch", "maxMessagesPerTrigger", 100_000, 2**31 - 1),
        num_partitions=_aliased(options, "numPartitions", "minPartitions", 1, 10_000),
        payload_column=payload_column,
        payload_type=_choice(options, "payloadType", "binary" if reading else "auto", payload_types),
        dequeue_at_column=_column(options, "dequeueAtColumn"),
        delay_column=_column(options, "delayColumn"),
        priority_column=_column(options, "priorityColumn"),
        group_column=_column(options, "groupColumn"),
        key_column=_column(options, "keyColumn"),
        commit_mode="job" if _choice(options, "commitMode", "task", ("task", "job")) == "job" else "task",
        batch_size=_int(options, "batchSize", 5_000, 1, 100_000),
        include_dead=_bool(options, "includeDead", False),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        fetch_size=_int(options, "fetchSize", 5_000, 1, 1_000_000),
        filter_pushdown=_bool(options, "filterPushdown", False),
        starting_position=_starting_position(options),
        reconnect_timeout=_int(options, "reconnectTimeout", 300, 0, 86_400),
    )
