"""Turn Arrow record batches of a DataFrame into message contents, and messages back into rows.

Writing follows :mod:`pgqueue.codec`, so that ``Queue.dequeue()`` decodes what Spark wrote:

=====================================  =====================  ================================
payload column (Spark type)            content                content_type
=====================================  =====================  ================================
BINARY                                 the bytes              NULL
STRING (payloadType auto or string)    UTF-8                  ``text/plain; charset=utf-8``
STRING (payloadType json)              the JSON text, UTF-8   ``application/json`` (validated)
STRUCT, ARRAY, MAP, numbers, BOOLEAN   compact JSON, UTF-8    ``application/json``
=====================================  =====================  ================================

Inside JSON, maps become objects (keys as strings, as ``to_json`` writes them: :func:`_key`),
decimals numbers written exactly, FLOATs their shortest decimal, dates and timestamps ISO 8601
strings (a year outside 1..9999 as ``to_json`` writes it: ``+10000-01-01``, ``-0001-12-31``),
binary values base64 strings (as Spark's ``to_json`` writes them); times ISO 8601 strings and
day-time intervals their seconds (a number, as ``delayColumn`` takes one; ``to_json`` writes
``"INTERVAL '1' DAY"``). A VARIANT,
a year-month or calendar interval, a GEOMETRY or a GEOGRAPHY inside a payload is refused on
the driver (``source.write_plan``): Arrow carries the first and the last two in their internal
binary form, and pyarrow cannot read a year-month interval.

Only pyarrow is needed (imported where used); nothing here imports pyspark.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pgqueue import codec
from pgqueue.errors import InvalidArgument

__all__ = ["WritePlan", "Chunk", "encode_batch", "decode_payload", "MAX_PRIORITY", "MAX_CONTENT_BYTES",
           "MAX_CALL_BYTES"]

MAX_PRIORITY = 2**31 - 1
#: The longest delay (ms) a bigint holds; the server saturates now + delay at the same bound.
MAX_DELAY_MS = 2**63 - 1
#: The largest message content a write takes, the Python client's (:data:`pgqueue.codec.MAX_CONTENT`:
#: a consumer reading text gets twice its size, in a row PostgreSQL holds within 1 GB), so a
#: larger row fails its task, naming it, before anything is sent.
MAX_CONTENT_BYTES = codec.MAX_CONTENT
#: The most content bytes one SQL call carries (besides ``batchSize`` rows): a call's array is
#: one value, so 5000 rows of 300 kB would pass PostgreSQL's 1 GB; a larger row goes alone.
MAX_CALL_BYTES = 64 * 2**20


@dataclass(frozen=True, slots=True)
class WritePlan:
    """How the columns of a DataFrame become messages; decided on the driver from its schema.

    Attributes:
        payload_column: the payload column's name.
        payload_kind: ``binary``, ``text``, ``json_text`` (a string holding JSON) or
            ``json_value`` (a struct, array, map, number or boolean serialised to JSON).
        dequeue_at_column, dequeue_at_kind: an absolute due time, ``timestamp`` or ``epoch_ms``.
        delay_column, delay_kind: a delay from now, ``seconds`` (a number) or ``interval``.
        priority_column: a priority (int >= 0, larger first).
        group_column, key_column: the message group and the idempotency key (STRING, or an
            integer written as decimal text); NULL is none.
    """

    payload_column: str
    payload_kind: str
    dequeue_at_column: str | None = None
    dequeue_at_kind: str | None = None
    delay_column: str | None = None
    delay_kind: str | None = None
    priority_column: str | None = None
    group_column: str | None = None
    key_column: str | None = None

    @property
    def scheduled(self) -> bool:
        """True if any column sets when messages become deliverable."""
        return any((self.dequeue_at_column, self.delay_column, self.priority_column))


@dataclass(slots=True)
class Chunk:
    """Messages ready for ``message_create_batch`` / ``spark_stage``.

    A column has one encoding, so every message of a chunk has the same ``content_type``.
    ``dequeue_ats`` and ``delays_ms`` (as long as ``contents``) are None when no row is scheduled;
    ``groups`` and ``keys`` are None without a group or key column.
    """

    contents: list[bytes]
    content_type: str | None
    dequeue_ats: list[int | None] | None
    delays_ms: list[int | None] | None
    groups: list[str | None] | None = None
    keys: list[str | None] | None = None

    def __len__(self) -> int:
        return len(self.contents)

    def slices(self, size: int, max_bytes: int | None = None) -> Iterator[Chunk]:
        """Yield consecutive chunks of at most ``size`` messages and ``max_bytes`` of content
        (default :data:`MAX_CALL_BYTES`); a message larger than ``max_bytes`` is a chunk of its own.
        """
        max_bytes = MAX_CALL_BYTES if max_bytes is None else max_bytes
        start = 0
        while start < len(self.contents):
            end, total = start, 0
            while end < len(self.contents) and end - start < size:
                total += len(self.contents[end])
                if total > max_bytes and end > start:
                    break
                end += 1
            yield Chunk(
                self.contents[start:end],
                self.content_type,
                None if self.dequeue_ats is None else self.dequeue_ats[start:end],
                None if self.delays_ms is None else self.delays_ms[start:end],
                None if self.groups is None else self.groups[start:end],
                None if self.keys is None else self.keys[start:end],
            )
            start = end


def _where(partition: int, row: int) -> str:
    return f"row {row + 1} of partition {partition}"


def _pylist(column: Any, what: str, name: str, partition: int, first_row: int) -> list[Any]:
    """The values of an Arrow column; a string that is not UTF-8 is an error naming its row.

    Spark's STRING may hold any bytes (``CAST(unhex('ff') AS STRING)``, files read with another
    charset), which Arrow hands over unchecked; only decoding them finds out.
    """
    try:
        values: list[Any] = column.to_pylist()
    except UnicodeDecodeError:
        for i in range(len(column)):
            try:
                column[i].as_py()
            except UnicodeDecodeError as exc:
                raise InvalidArgument(
                    f"{what} column {name!r} holds a string that is not valid UTF-8 in "
                    f"{_where(partition, first_row + i)} ({exc.reason} at byte {exc.start}): write bytes as "
                    "BINARY, or fix the text (e.g. decode(col, 'charset') of the source bytes)"
                ) from None
        raise
    return values


def _as_integers(arrow_type: Any) -> Any:
    """The type with each date and timestamp inside it replaced by its storage (days, units since
    the epoch), or None if it holds none.

    pyarrow's ``to_pylist`` makes Python dates and datetimes of them, which stop at years 1 and
    9999: a DATE or TIMESTAMP past 9999 (Spark holds them) or one that the session time zone moves
    past a limit failed the task with a bare ``OverflowError: date value out of range``. Read as
    integers, :func:`_date_text` and :func:`_timestamp_text` write them.
    """
    import pyarrow as pa

    t = pa.types
    if t.is_timestamp(arrow_type) or t.is_date64(arrow_type):
        return pa.int64()
    if t.is_date32(arrow_type):
        return pa.int32()
    if t.is_struct(arrow_type):
        fields = [arrow_type.field(i) for i in range(arrow_type.num_fields)]
        inner = [_as_integers(f.type) for f in fields]
        if all(i is None for i in inner):
            return None
        return pa.struct([f if i is None else f.with_type(i) for f, i in zip(fields, inner, strict=True)])
    if t.is_map(arrow_type):
        key, item = _as_integers(arrow_type.key_type), _as_integers(arrow_type.item_type)
        if key is None and item is None:
            return None
        return pa.map_(arrow_type.key_field.with_type(key or arrow_type.key_type),
                       arrow_type.item_field.with_type(item or arrow_type.item_type), arrow_type.keys_sorted)
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        item = _as_integers(arrow_type.value_type)
        if item is None:
            return None
        field = arrow_type.value_field.with_type(item)
        if t.is_large_list(arrow_type):
            return pa.large_list(field)
        return pa.list_(field, arrow_type.list_size if t.is_fixed_size_list(arrow_type) else -1)
    return None


_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
_DAY_US = 86_400_000_000
#: The Gregorian calendar repeats every 400 years (146097 days), weekdays and leap days included.
_CYCLE_DAYS = 146_097
#: Days a value is moved into by whole cycles before Python formats it: a day from its limits,
#: so that a time zone's offset cannot take it out.
_FIRST_DAY = (dt.date(2, 1, 1) - _EPOCH_DATE).days
_LAST_DAY = (dt.date(9998, 12, 31) - _EPOCH_DATE).days


def _cycles(days: int) -> int:
    """How many 400-year cycles to take from a day (since the epoch) to bring it into the years
    Python's dates hold (negative: cycles to add)."""
    if days < _FIRST_DAY:
        return -((_FIRST_DAY - days + _CYCLE_DAYS - 1) // _CYCLE_DAYS)
    if days > _LAST_DAY:
        return (days - _LAST_DAY + _CYCLE_DAYS - 1) // _CYCLE_DAYS
    return 0


def _with_year(iso: str, year: int) -> str:
    """An isoformat() text (which starts with a 4-digit year) with another year, written as
    Spark's ``to_json`` writes a year outside 0..9999: ``+10000``, ``-0001``."""
    if year > 9999:
        return f"+{year}{iso[4:]}"
    if year < 0:
        return f"-{-year:04d}{iso[4:]}"
    return f"{year:04d}{iso[4:]}"


def _date_text(days: int) -> str:
    """A DATE (days since the epoch) as ``date.isoformat()`` writes it, for any year."""
    cycles = _cycles(days)
    d = _EPOCH_DATE + dt.timedelta(days=days - cycles * _CYCLE_DAYS)
    return _with_year(d.isoformat(), d.year + 400 * cycles)


def _timestamp_text(micros: int, tz: dt.tzinfo | None) -> str:
    """A TIMESTAMP (microseconds since the epoch) as ``datetime.isoformat()`` writes it, in the
    time zone of its Arrow type (the session's; none for TIMESTAMP_NTZ), for any year.

    A value outside what a datetime holds is moved by whole 400-year cycles, which leave the
    calendar and a zone's rules as they were (its first offset before its history, its last rules
    after), formatted, and given its year back.
    """
    cycles = _cycles(micros // _DAY_US)
    t = _EPOCH + dt.timedelta(microseconds=micros - cycles * _CYCLE_DAYS * _DAY_US)
    if tz is not None:
        t = t.replace(tzinfo=dt.timezone.utc).astimezone(tz)
    return _with_year(t.isoformat(), t.year + 400 * cycles)


def _temporal_converter(arrow_type: Any) -> Callable[[Any], Any]:
    """Return a function turning a date or timestamp of an Arrow type, read as its integer
    (:func:`_as_integers`), into its ISO 8601 text."""
    import pyarrow as pa

    if pa.types.is_date32(arrow_type):
        return lambda v: None if v is None else _date_text(v)
    if pa.types.is_date64(arrow_type):
        return lambda v: None if v is None else _date_text(v // 86_400_000)
    # the tzinfo pyarrow's to_pylist gives, so that the offsets written are those it wrote
    tz = None if arrow_type.tz is None else pa.lib.string_to_tzinfo(arrow_type.tz)
    scale = {"s": 1_000_000, "ms": 1_000, "us": 1}.get(arrow_type.unit)
    if scale is None:  # nanoseconds: floored to microseconds, as a datetime holds them
        return lambda v: None if v is None else _timestamp_text(v // 1_000, tz)
    return lambda v: None if v is None else _timestamp_text(v * scale, tz)


class _Number:
    """A JSON number written as its exact text (a decimal that a float would round)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _decimal(v: Decimal) -> int | _Number:
    return int(v) if v == v.to_integral_value() else _Number(str(v))


def _float32(v: float) -> float:
    """The shortest decimal that reads back as the same 32-bit float (0.1, not 0.10000000149011612),
    as Spark's ``to_json`` writes a FLOAT."""
    if math.isfinite(v):
        for digits in range(1, 10):
            shortest = float(f"{v:.{digits}g}")
            if struct.unpack("f", struct.pack("f", shortest))[0] == v:
                return shortest
    return v


def _java_double(v: float) -> str:
    """A DOUBLE as Java's ``Double.toString`` writes it (1.0E16, 1.0E-4, NaN, Infinity; Python:
    1e+16, 0.0001, nan, inf): a FLOAT too, given its shortest decimal (:func:`_float32`).

    The digits are the shortest that read back as the value, as Java 19+ writes them; Java 17
    writes a few values with a digit more (2.0E23 as 1.9999999999999998E23).
    """
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    if v == 0:
        return f"{sign}0.0"
    _, digit_tuple, exponent = Decimal(repr(abs(v))).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    point = len(digits) + int(exponent)  # the value is 0.<digits> * 10**point
    if 1e-3 <= abs(v) < 1e7:  # Java's plain notation
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def _key(k: object) -> str:
    """A map key as an object key: as Spark's ``to_json`` writes it, which is the key's Java text.

    true, not True; a DOUBLE or FLOAT as Java writes it (:func:`_java_double`); an array as its
    elements in brackets, a struct as its fields' values (no names), each as a key and NULL as
    null: ``[1,2]``, ``[a,null]`` (Python wrote ``[1, 2]``, ``{'k': 1}``). Unlike ``to_json``,
    dates and timestamps are ISO 8601 as elsewhere (``to_json`` writes its internal day or
    microsecond count) and binary is base64 (``to_json`` writes a Java object's name, ``[B@1f2a``).
    """
    if k is None:
        return "null"
    if isinstance(k, bool):
        return "true" if k else "false"
    if isinstance(k, float):
        return _java_double(k)
    if isinstance(k, list):
        return "[" + ",".join(map(_key, k)) + "]"
    if isinstance(k, dict):
        return "[" + ",".join(map(_key, k.values())) + "]"
    return k.text if isinstance(k, _Number) else str(k)


def _map_object(pairs: list[tuple[Any, Any]], key_conv: Callable[[Any], Any],
                item_conv: Callable[[Any], Any]) -> dict[str, Any]:
    """A map's entries as a JSON object. Array and struct keys are written without quoting
    (:func:`_key`), so two keys can come out as one name (``["a,b"]`` and ``["a","b"]`` are both
    ``[a,b]``, ``["null"]`` and ``[NULL]`` both ``[null]``): a dict kept the last of them, and
    the message went out without the other entry. Such a map is refused (ValueError: the caller
    names the column and the row), as the client refuses a dict whose keys JSON writes alike."""
    out: dict[str, Any] = {}
    for k, x in pairs:
        name = _key(key_conv(k))
        if name in out:
            raise ValueError(f"two keys of a map are both written as the JSON name {name!r} "
                             "(array and struct keys are written without quoting); one entry would be lost")
        out[name] = item_conv(x)
    return out


def _json_converter(arrow_type: Any) -> Callable[[Any], Any]:
    """Return a function turning a Python value of an Arrow type into one that :func:`_dumps`
    writes (decimals become :class:`_Number`: their exact text; dates and timestamps come as their
    integers, :func:`_as_integers`, and become their ISO 8601 text)."""
    import pyarrow as pa

    t = pa.types
    if t.is_struct(arrow_type):
        fields = [(arrow_type.field(i).name, _json_converter(arrow_type.field(i).type))
                  for i in range(arrow_type.num_fields)]
        return lambda v: None if v is None else {name: conv(v.get(name)) for name, conv in fields}
    if t.is_map(arrow_type):
        key_conv = _json_converter(arrow_type.key_type)
        item_conv = _json_converter(arrow_type.item_type)
        return lambda v: None if v is None else _map_object(v, key_conv, item_conv)
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        item = _json_converter(arrow_type.value_type)
        return lambda v: None if v is None else [item(x) for x in v]
    if t.is_decimal(arrow_type):
        return lambda v: None if v is None else _decimal(v)
    if t.is_float32(arrow_type):
        return lambda v: None if v is None else _float32(v)
    if t.is_timestamp(arrow_type) or t.is_date(arrow_type):
        return _temporal_converter(arrow_type)
    if t.is_time(arrow_type):
        return lambda v: None if v is None else v.isoformat()
    if t.is_duration(arrow_type):
        return lambda v: None if v is None else v.total_seconds()
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_fixed_size_binary(arrow_type):
        return lambda v: None if v is None else base64.b64encode(v).decode("ascii")
    return lambda v: v


def _dumps(value: object) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _dumps_exact(value: object) -> bytes:
    """:func:`_dumps` for a value that may hold :class:`_Number` s (json.dumps cannot write them)."""
    out: list[str] = []
    _write(value, out)
    return "".join(out).encode("utf-8")


def _holds_decimal(arrow_type: Any) -> bool:
    """Whether values of an Arrow type may hold a decimal (a :class:`_Number` once converted)."""
    import pyarrow as pa

    t = pa.types
    if t.is_decimal(arrow_type):
        return True
    if t.is_struct(arrow_type):
        return any(_holds_decimal(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    if t.is_map(arrow_type):
        return _holds_decimal(arrow_type.key_type) or _holds_decimal(arrow_type.item_type)
    if t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type):
        return _holds_decimal(arrow_type.value_type)
    return False


def _write(value: object, out: list[str]) -> None:
    """Write a value holding :class:`_Number` s as compact JSON (json.dumps cannot write them)."""
    if isinstance(value, _Number):
        out.append(value.text)
    elif isinstance(value, dict):
        out.append("{")
        for i, (k, v) in enumerate(value.items()):
            out.append("," if i else "")
            out.append(json.dumps(k, ensure_ascii=False))
            out.append(":")
            _write(v, out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, v in enumerate(value):
            out.append("," if i else "")
            _write(v, out)
        out.append("]")
    else:
        out.append(json.dumps(value, ensure_ascii=False, allow_nan=False))


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not a JSON value")


def _payloads(plan: WritePlan, column: Any, partition: int, first_row: int) -> tuple[list[bytes], str | None]:
    if column.null_count:
        row = column.is_null().to_pylist().index(True)
        raise InvalidArgument(
            f"payload column {plan.payload_column!r} is NULL in {_where(partition, first_row + row)}: "
            "every message needs content (write an empty string or empty bytes for an empty message, "
            "or filter the NULL rows out)"
        )
    integers = _as_integers(column.type) if plan.payload_kind == "json_value" else None
    values = _pylist(column if integers is None else column.cast(integers), "payload", plan.payload_column,
                     partition, first_row)
    if plan.payload_kind == "binary":
        contents, content_type = [bytes(v) for v in values], None
    elif plan.payload_kind == "text":
        contents, content_type = [v.encode("utf-8") for v in values], codec.TEXT
    else:
        contents, content_type = _json_payloads(plan, values, column.type, partition, first_row)
    for i, content in enumerate(contents):
        if len(content) > MAX_CONTENT_BYTES:
            raise InvalidArgument(
                f"payload column {plan.payload_column!r} is {len(content)} bytes in "
                f"{_where(partition, first_row + i)}: a message holds at most {MAX_CONTENT_BYTES} bytes "
                "(read as text, a value is twice its size, and PostgreSQL returns none over 1 GB); store a "
                "larger object elsewhere and enqueue its address"
            )
    return contents, content_type


def _not_before_1970(column: str, ms: int, partition: int, row: int) -> int:
    """A due time of the dequeueAtColumn, in epoch ms: one before 1970 would be a priority
    (pgqueue keys priorities below every real time), so it is refused, naming the row."""
    if ms < 0:
        raise InvalidArgument(
            f"due-time column {column!r} is before 1970 ({ms} epoch ms) in {_where(partition, row)}: "
            "pgqueue reads a time before 1970 as a priority; give NULL for now, or use priorityColumn"
        )
    return ms


def _json_payloads(plan: WritePlan, values: list[Any], arrow_type: Any, partition: int,
                   first_row: int) -> tuple[list[bytes], str]:
    if plan.payload_kind == "json_text":
        contents: list[bytes] = []
        for i, v in enumerate(values):
            try:
                json.loads(v, parse_constant=_not_json)  # NaN, Infinity: Python's, not JSON
            except ValueError as exc:
                raise InvalidArgument(
                    f"payload column {plan.payload_column!r} is not valid JSON in "
                    f"{_where(partition, first_row + i)}: {exc}"
                ) from None
            except RecursionError:
                raise InvalidArgument(
                    f"payload column {plan.payload_column!r} in {_where(partition, first_row + i)} is JSON "
                    "nested too deeply to be checked (Python's parser stops near 1000 levels)"
                ) from None
            contents.append(v.encode("utf-8"))
        return contents, codec.JSON
    conv = _json_converter(arrow_type)
    dumps = _dumps_exact if _holds_decimal(arrow_type) else _dumps
    contents = []
    for i, v in enumerate(values):
        try:
            contents.append(dumps(conv(v)))
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(
                f"payload column {plan.payload_column!r} cannot be written as JSON in "
                f"{_where(partition, first_row + i)}: {exc}"
            ) from None
    return contents, codec.JSON


def _int_values(column: Any) -> list[int | None]:
    import pyarrow as pa

    values: list[int | None] = column.cast(pa.int64()).to_pylist()
    return values


def _schedule(plan: WritePlan, batch: Any, partition: int, first_row: int
              ) -> tuple[list[int | None], list[int | None]]:
    n = batch.num_rows
    ats: list[int | None] = [None] * n
    delays: list[int | None] = [None] * n
    given: list[str | None] = [None] * n

    def claim(i: int, name: str) -> None:
        if given[i] is not None:
            raise InvalidArgument(
                f"{_where(partition, first_row + i)} sets both {given[i]!r} and {name!r}: "
                "give at most one of the due time, delay and priority columns per row"
            )
        given[i] = name

    if plan.dequeue_at_column is not None:
        col = batch.column(plan.dequeue_at_column)
        if plan.dequeue_at_kind == "timestamp":
            # Arrow keeps timestamps as units since the epoch (UTC); as microseconds, floored to ms
            import pyarrow as pa

            micros = _int_values(col.cast(pa.timestamp("us", tz=col.type.tz)))
            for i, us in enumerate(micros):
                if us is not None:
                    claim(i, plan.dequeue_at_column)
                    ats[i] = _not_before_1970(plan.dequeue_at_column, us // 1000, partition, first_row + i)
        else:
            for i, ms in enumerate(_int_values(col)):
                if ms is not None:
                    claim(i, plan.dequeue_at_column)
                    ats[i] = _not_before_1970(plan.dequeue_at_column, ms, partition, first_row + i)
    if plan.delay_column is not None:
        col = batch.column(plan.delay_column)
        if plan.delay_kind == "interval":
            import pyarrow as pa

            micros = _int_values(col.cast(pa.duration("us")))
            raw: Sequence[Any] = [None if us is None else us / 1_000_000 for us in micros]
        else:
            raw = col.to_pylist()
        for i, seconds in enumerate(raw):
            if seconds is None:
                continue
            seconds = float(seconds) if isinstance(seconds, Decimal) else seconds
            if not math.isfinite(seconds) or seconds < 0 or seconds * 1000 > MAX_DELAY_MS:
                raise InvalidArgument(
                    f"delay column {plan.delay_column!r} must be finite, >= 0 and < 2**63 ms, got "
                    f"{seconds!r} in {_where(partition, first_row + i)}"
                )
            claim(i, plan.delay_column)
            delays[i] = round(seconds * 1000)
    if plan.priority_column is not None:
        for i, p in enumerate(_int_values(batch.column(plan.priority_column))):
            if p is None:
                continue
            if not 0 <= p <= MAX_PRIORITY:
                raise InvalidArgument(
                    f"priority column {plan.priority_column!r} must be from 0 to {MAX_PRIORITY}, got "
                    f"{p} in {_where(partition, first_row + i)}"
                )
            claim(i, plan.priority_column)
            ats[i] = -1 - p
    return ats, delays


#: The longest group or idempotency key (characters), as the extension's pgqueue._check_message_key.
MAX_KEY_CHARS = 200


def _keys(column: Any, name: str, what: str, partition: int, first_row: int) -> list[str | None]:
    """The values of a group or key column as text (integers in decimal), NULL as None."""
    values: list[str | None] = [None if v is None else str(v)
                                for v in _pylist(column, what, name, partition, first_row)]
    for i, v in enumerate(values):
        if v is not None and not 1 <= len(v) <= MAX_KEY_CHARS:
            raise InvalidArgument(
                f"{what} column {name!r} must be NULL (none) or 1 to {MAX_KEY_CHARS} characters, got "
                f"{len(v)} in {_where(partition, first_row + i)} (hash a longer key)"
            )
        if v is not None and "\x00" in v:
            raise InvalidArgument(
                f"{what} column {name!r} holds a NUL character (U+0000) in {_where(partition, first_row + i)}, "
                "which PostgreSQL text cannot store"
            )
    return values


def encode_batch(plan: WritePlan, batch: Any, *, partition: int, first_row: int) -> Chunk:
    """Encode one ``pyarrow.RecordBatch`` of a partition into messages.

    Parameters:
        plan: what the columns mean.
        batch: the record batch (its columns are those of the DataFrame).
        partition: the Spark partition (for error messages).
        first_row: the index in the partition of the batch's first row (for error messages).

    Raises:
        InvalidArgument: a NULL payload, invalid JSON, a negative delay, a priority out of
            range, more than one of due time, delay and priority in a row, or an empty group or
            key or one longer than 200 characters. The message names the column and the row.
    """
    contents, content_type = _payloads(plan, batch.column(plan.payload_column), partition, first_row)
    groups = keys = None
    if plan.group_column is not None:
        groups = _keys(batch.column(plan.group_column), plan.group_column, "group", partition, first_row)
    if plan.key_column is not None:
        keys = _keys(batch.column(plan.key_column), plan.key_column, "key", partition, first_row)
    if not plan.scheduled:
        return Chunk(contents, content_type, None, None, groups, keys)
    ats, delays = _schedule(plan, batch, partition, first_row)
    return Chunk(contents, content_type, ats, delays, groups, keys)


def decode_payload(content: bytes, content_type: str | None, payload_type: str) -> bytes | str | None:
    """Return a message's payload as the read option ``payloadType`` asks for.

    ``binary``: the bytes as stored. ``string``: the content decoded as text, whatever its
    content type (with the charset the type names, UTF-8 if none). ``json``: JSON text: JSON
    content as it is, ``text/*`` as a JSON string; None for any other content type (raw bytes
    included).

    Content that cannot be decoded is None whatever the reason: bytes not valid in the charset,
    a charset Python does not know (LookupError), or one it knows but cannot decode with, which
    raises a plain UnicodeError (``charset=undefined``, what ``charset=${enc}`` gives for an
    unset ``enc``, or ``punycode`` on other bytes). So is text that has no UTF-8 form, which
    Spark cannot take: a lone surrogate, which UTF-7 (``+2AA-``), ``unicode_escape`` and
    ``raw_unicode_escape`` decode valid bytes into. An exception here (or in Spark, encoding the
    row) would fail the task, and a stream replays a failed micro-batch with the same message
    forever.
    """
    if payload_type == "binary":
        return bytes(content)
    kind, params = codec.media_type(content_type)
    try:
        text = bytes(content).decode(params.get("charset", "utf-8"))
    except (LookupError, ValueError):  # UnicodeError and UnicodeDecodeError are ValueErrors
        return None
    if not text.isascii():  # isascii() is O(1) on CPython's compact strings
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            return None
    if payload_type == "string":
        return text
    if kind == codec.JSON or kind.endswith("+json"):
        return text.removeprefix("\ufeff")  # a byte-order mark is not part of the JSON (pgqueue.codec.decode)
    if kind.startswith("text/"):
        return json.dumps(text, ensure_ascii=False)
    return None

