"""Turn payloads into message content and back, recording the encoding in ``content_type``.

The extension stores a message as ``content bytea`` plus a ``content_type text`` that says how
the bytes are encoded, so that a consumer written in any language can read them:

==============================  ================================  ==========================
payload (Python)                content                           content_type
==============================  ================================  ==========================
bytes, bytearray, memoryview    the bytes as they are             NULL
str                             UTF-8                             ``text/plain; charset=utf-8``
anything else (dict, list, int,  compact JSON, UTF-8               ``application/json``
float, bool, None, ...)
==============================  ================================  ==========================

A message may name a task (for :class:`pgqueue.Tasks`): ``; task=<name>`` (``task="<name>"`` when
the name holds a ``:``) is added to its content type (``application/octet-stream`` for raw bytes), e.g. ``application/json; task=send_email``,
which producers in any language can write too (``pgqueue.message_create_json(..., p_task)``).

Decoding reverses this: JSON (``application/json`` or any ``+json`` type) is parsed (a leading
byte-order mark, which RFC 8259 lets a parser ignore, left out), text (``text/*``) is decoded
with its charset (UTF-8 if none is named; a byte-order mark kept), and any other or no content
type gives the bytes back. JSON turns tuples into lists and non-string keys into strings.
JSON is read as Python's json reads it: ``NaN`` and ``Infinity`` (which Python's ``json.dumps``
writes, though JSON has no such values) and a number beyond a double's range (``1e400``) come back
as float nan and inf, which :func:`encode` refuses (such a payload cannot be enqueued again as it
is); an integer of more digits than ``sys.get_int_max_str_digits()`` does not decode.
"""

from __future__ import annotations

import codecs
import json
import re
from itertools import chain

from pgqueue.errors import InvalidArgument, UnsupportedPayload, quoted

__all__ = ["JSON", "TEXT", "encode", "decode", "media_type", "task_of", "with_task"]

#: The content type of JSON payloads.
JSON = "application/json"
#: The content type of ``str`` payloads.
TEXT = "text/plain; charset=utf-8"


#: What a task name may hold (the rule of ``pgqueue.message_create_json``).
TASK_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")
#: The content type of raw bytes that name a task.
OCTETS = "application/octet-stream"

#: The largest message content pgqueue's clients send: 500,000,000 bytes. PostgreSQL holds 1 GB
#: in a value, but a consumer that reads content as text (psql, most drivers' default, this
#: client) gets ``bytea`` as hex, twice its size, in a row that must also fit in 1 GB: a message
#: of about 512 MB or more that a binary parameter let in could not be dequeued, peeked or
#: cancelled (XX000, "invalid memory alloc request size"), and stood first in its queue for good
#: (a review). The margin leaves room for the row's other columns.
MAX_CONTENT = 500_000_000


def with_task(content_type: str | None, task: str | None) -> str | None:
    """Return ``content_type`` with ``; task=<task>`` added (None: unchanged).

    Raises:
        InvalidArgument: the task name is not 1 to 200 of ``A-Z a-z 0-9 _ . : -``.
    """
    if task is None:
        return content_type
    if not isinstance(task, str) or not TASK_NAME.fullmatch(task):
        raise InvalidArgument(f"invalid task name {quoted(task)}: 1 to 200 letters, digits, '_', '.', ':' or '-'")
    # (quoted when it holds a ':', which a MIME parameter's token may not: Python's email parser
    # read "task=a:b" as "a", a review; pgqueue's readers take either form)
    value = f'"{task}"' if ":" in task else task
    return f"{content_type or OCTETS}; task={value}"


def task_of(content_type: str | None) -> str | None:
    """Return the task a content type names (its ``task`` parameter), or None."""
    return media_type(content_type)[1].get("task")


def encode(payload: object) -> tuple[bytes, str | None]:
    """Encode a payload into message content and its content type.

    Parameters:
        payload: ``bytes``, ``bytearray`` or ``memoryview`` (stored raw; another bytes-like
            object, an ``array.array`` say, is not JSON-serialisable: UnsupportedPayload), ``str``
            (UTF-8 text) or any JSON-serialisable value (``None`` included: it is stored as the
            JSON ``null``).

    Returns:
        ``(content, content_type)``; ``content_type`` is None for raw bytes.

    Raises:
        UnsupportedPayload: the payload is not JSON-serialisable (also NaN and infinities,
            which JSON cannot express, and values nested deeper than the interpreter's
            recursion limit), or a string in it holds a lone surrogate (no UTF-8 form), or its
            content would be over :data:`MAX_CONTENT` bytes. It is a ``TypeError`` and a
            ``ValueError`` too.
    """
    if isinstance(payload, (bytes, bytearray, memoryview)):
        _check_size(payload.nbytes if isinstance(payload, memoryview) else len(payload))
        return bytes(payload), None
    try:
        if isinstance(payload, str):
            content, content_type = payload.encode("utf-8"), TEXT
        else:
            text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            if isinstance(payload, (dict, list, tuple)):
                _refuse_clashing_keys(payload)
            content, content_type = text.encode("utf-8"), JSON
    except (TypeError, ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
        raise UnsupportedPayload(
            f"cannot encode a payload of type {type(payload).__name__}: pass bytes, str or a "
            f"JSON-serialisable value ({exc})"
        ) from exc
    _check_size(len(content))
    return content, content_type


def _check_size(size: int) -> None:
    if size > MAX_CONTENT:
        raise UnsupportedPayload(
            f"a payload of {size:,} bytes is over the {MAX_CONTENT:,} bytes a message holds (PostgreSQL "
            "returns no value over 1 GB, and a consumer that reads it as text gets twice its size); store "
            "it elsewhere and enqueue its address")


#: The types whose values hold nothing to look into for keys.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _refuse_clashing_keys(payload: dict[object, object] | list[object] | tuple[object, ...]) -> None:
    """Raise ValueError if an object of ``payload`` (already encoded: no cycles, every key a str,
    int, float, bool or None) has two keys that JSON writes as the same string: ``1`` and ``"1"``,
    ``None`` and ``"null"``. json.dumps wrote both and the decoder kept the last, silently (a
    review). One nesting level at a time, the types of its keys and values read at C speed
    (``map(type, ...)``): only the levels that hold containers are walked item by item, and only
    the objects with a key that is not a str are looked at key by key. Measured (session 65,
    best of 5): a dict of three keys 5.7 us against json.dumps's 2.6; 100,000 ints 9.6 ms
    against 7.5; 20,000 objects of two keys 15.1 ms against 8.8."""
    level: list[object] = [payload]
    while level:
        objects = [v for v in level if isinstance(v, dict)]
        arrays = [v for v in level if isinstance(v, (list, tuple))]
        if objects and set(map(type, chain.from_iterable(objects))) - {str}:
            for value in objects:
                _one_object_keys(value)
        children = list(chain(chain.from_iterable(map(dict.values, objects)), chain.from_iterable(arrays)))
        if set(map(type, children)) <= _SCALARS:
            return
        level = [item for item in children if isinstance(item, (dict, list, tuple))]


def _one_object_keys(value: dict[object, object]) -> None:
    seen: dict[str, object] = {}
    for key in value:
        name = key if isinstance(key, str) else json.dumps(key)  # the encoder's text of a key
        if name in seen:
            raise ValueError(f"keys {seen[name]!r} and {key!r} of one object are both the JSON key {name!r}: "
                             "JSON keys are strings, and one would be lost")
        seen[name] = key


def media_type(content_type: str | None) -> tuple[str, dict[str, str]]:
    """Split a content type into its lower-case media type and its parameters.

    ``"text/plain; charset=UTF-8"`` gives ``("text/plain", {"charset": "UTF-8"})``; None gives
    ``("", {})``.
    """
    if not content_type:
        return "", {}
    head, *rest = _split_params(content_type)
    params: dict[str, str] = {}
    for item in rest:
        key, sep, value = item.partition("=")
        if sep:
            params[key.strip(_BLANKS).lower()] = _unquote(value.strip(_BLANKS))
    return head.strip(_BLANKS).lower(), params


#: What is trimmed around a content type's parts: ASCII white space, as message_create_text
#: trims it (btrim ' \t\r\n\f\v'). str.strip() also took Unicode's (a no-break space before
#: "charset", which the server did not read as a charset parameter and stored, after which the
#: codec decoded the UTF-8 text as latin-1: a review).
_BLANKS = " \t\r\n\f\v"


def _split_params(content_type: str) -> list[str]:
    """Split a content type at the semicolons that are not inside a quoted string (RFC 9110).

    ``'text/plain; name="a;charset=x"'`` has one parameter, ``name``: a charset named inside
    another parameter's quoted value is not the charset (a review).
    """
    items: list[str] = []
    start = 0
    quoted_ = escaped = False
    for i, char in enumerate(content_type):
        if escaped:
            escaped = False
        elif quoted_ and char == "\\":
            escaped = True
        elif char == '"':
            quoted_ = not quoted_
        elif char == ";" and not quoted_:
            items.append(content_type[start:i])
            start = i + 1
    items.append(content_type[start:])
    return items


def _unquote(value: str) -> str:
    """A parameter's value: a quoted string loses its quotes and backslash escapes."""
    if len(value) < 2 or not (value.startswith('"') and value.endswith('"')):
        return value.strip('"')
    out: list[str] = []
    escaped = False
    for char in value[1:-1]:
        if escaped or char != "\\":
            out.append(char)
            escaped = False
        else:
            escaped = True
    return "".join(out)


def decode(content: bytes, content_type: str | None) -> object:
    """Decode message content back into the payload, following its content type.

    Parameters:
        content: the stored bytes.
        content_type: the recorded content type (None for raw bytes).

    Returns:
        The parsed JSON value, the ``str``, or ``bytes`` for a missing or unknown content type.

    Raises:
        ValueError: the content is not valid for its declared type (malformed JSON, bytes
            that are not in the named charset, or an unknown charset).
    """
    kind, params = media_type(content_type)
    if kind == JSON or kind.endswith("+json") or kind.startswith("text/"):
        charset = params.get("charset", "utf-8")
        try:
            text = bytes(content).decode(charset)
        except LookupError as exc:
            raise ValueError(f"unknown charset in content type {quoted(content_type)}") from exc
        except UnicodeError as exc:
            # Python's "undefined" codec is found but decodes nothing (a plain UnicodeError,
            # "decoding with 'undefined' codec failed"): no charset either, as JavaScript's
            # `charset=${enc}` writes it for an unset enc. Other UnicodeErrors are bytes that are
            # not in the charset, raised as they are.
            if isinstance(exc, UnicodeDecodeError) or codecs.lookup(charset).name != "undefined":
                raise
            raise ValueError(f"unknown charset in content type {quoted(content_type)}") from exc
        if not kind.startswith("text/"):
            # a byte-order mark before JSON (some Windows tools write one) is not part of the
            # value, and RFC 8259 lets a parser ignore it: json.loads refused it, and the
            # message was handed out as its bytes. In text it is the producer's, kept.
            text = text.removeprefix("\ufeff")
            try:
                return json.loads(text)
            except RecursionError as exc:  # nested deeper than the interpreter's recursion limit
                raise ValueError("JSON nested too deeply to decode") from exc
        return text
    return bytes(content)
