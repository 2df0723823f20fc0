"""How the dashboard shows a payload: by its content type, JSON pretty-printed, text as it is,
anything else (raw bytes, an unknown type, bytes that are not what their type says) as a hex
dump. The result is plain text: the templates escape it.

At most :data:`MAX_SHOWN` bytes of a payload are shown, and the dashboard reads no more than
that from the database (``substring(content ...)``, with ``octet_length(content)`` for the
size): :func:`show` takes the bytes read and the size stored apart. A payload cut short is shown
as its first bytes (whole characters of text; JSON unparsed, as text), and says how many of how
many bytes that is.
"""

from __future__ import annotations

import codecs
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pgqueue.codec import media_type

#: Bytes shown of a payload (and read of it from the database); the rest is summarised.
MAX_SHOWN = 16 * 1024


@dataclass(frozen=True)
class Shown:
    """A payload as the dashboard shows it."""

    kind: str  # "json", "text" or "hex"
    text: str
    size: int  # bytes stored
    shown_bytes: int  # bytes of the stored payload that ``text`` shows (all of them, or the first ones)
    note: str = ""  # why it is shown otherwise than its type says, or cut short

    @property
    def truncated(self) -> bool:
        """Whether only the first :attr:`shown_bytes` of the :attr:`size` stored bytes are shown."""
        return self.shown_bytes < self.size


def hex_dump(data: bytes) -> str:
    """Return ``data`` as lines of 16 bytes: offset, hex bytes, printable ASCII."""
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset:offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  |{text}|")
    return "\n".join(lines)


def _decode(data: bytes, charset: str, cut: bool) -> tuple[str, int]:
    """Decode ``data``; if it is the start of a longer payload (``cut``), the whole characters
    in it. Return the text and how many bytes of ``data`` it is. Raises LookupError for an
    unknown charset (or one that is no text encoding), UnicodeError (a ValueError: not only
    UnicodeDecodeError, as utf-16 without a BOM or idna raise) for bad bytes."""
    if not getattr(codecs.lookup(charset), "_is_text_encoding", True):  # base64, zlib: as bytes.decode does
        raise LookupError(f"{charset!r} is not a text encoding")
    decoder = codecs.getincrementaldecoder(charset)("strict")
    text = decoder.decode(data, final=not cut)
    # a lone surrogate (utf-7's "+3IA-", unicode_escape's "\\udc80") is no character a page can
    # carry: UnicodeEncodeError (a ValueError) as the response was encoded, a 500 (a review)
    text.encode("utf-8")
    pending = decoder.getstate()[0] if cut else b""  # a character the cut split: not shown
    return text, len(data) - len(pending)


def _json_but_for_big_ints(text: str) -> bool:
    """Whether ``text`` is valid JSON once its integers are not converted: json.loads refuses an
    integer of more digits than ``sys.get_int_max_str_digits()`` with a ValueError, which the
    page called "not valid JSON" (a review)."""
    try:
        json.loads(text, parse_int=len)  # (the digits' count: never a conversion)
    except (ValueError, RecursionError):
        return False
    return True


def _float_noting(changed: list[str]) -> Callable[[str], float]:
    """json.loads's parse_float: the number as a float, noting in ``changed`` a number whose
    float is not the same number (more digits than a double holds, ``0.30000000000000000001``;
    past its range, ``1e400``, which json.dumps wrote as Infinity, not JSON). The pretty-printed
    page showed such numbers rounded, as if stored so (a review)."""
    def parse(text: str) -> float:
        value = float(text)
        if not changed and (math.isinf(value) or Decimal(repr(value)) != Decimal(text)):
            changed.append(f"the number {text[:40]}")
        return value
    return parse


def _object_noting(changed: list[str]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """json.loads's object_pairs_hook: the object as a dict, noting in ``changed`` a key given
    twice (the dict keeps the last: the page showed one entry where two are stored)."""
    def build(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if not changed and len(value) < len(pairs):
            changed.append("a key given twice")
        return value
    return build


def show(content: bytes, content_type: str | None, size: int | None = None) -> Shown:
    """Return how to show a payload of ``content_type``: ``content`` is the payload, or when
    ``size`` (the bytes stored) is given, maybe only its first bytes (:data:`MAX_SHOWN` suffice)."""
    data = bytes(content[:MAX_SHOWN])
    size = len(content) if size is None else size
    cut = size > len(data)
    kind, params = media_type(content_type)
    charset = params.get("charset", "utf-8")
    note = ""
    if kind == "application/json" or kind.endswith("+json") or kind.startswith("text/"):
        try:
            text, n = _decode(data, charset, cut)
        except (LookupError, ValueError) as exc:  # (UnicodeError: utf-16 without a BOM, idna, ...)
            note = f"not {charset} text ({type(exc).__name__}): shown as hex"
        else:
            if kind.startswith("text/"):
                return Shown("text", text, size, n)
            if cut:  # the start of a JSON document does not parse
                return Shown("text", text, size, n, f"the first {n} bytes of the JSON: shown as text, not parsed")
            document = text.removeprefix("\ufeff")  # (a byte-order mark is left out, as pgqueue.codec.decode does)
            changed: list[str] = []
            try:
                value = json.loads(document, parse_float=_float_noting(changed), object_pairs_hook=_object_noting(changed))
                pretty = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
            except (ValueError, RecursionError):
                if _json_but_for_big_ints(document):
                    return Shown("text", text, size, n, "JSON with an integer of more than "
                                 f"{sys.get_int_max_str_digits()} digits, which Python does not "
                                 "convert: shown as stored")
                return Shown("text", text, size, n, "not valid JSON: shown as text")
            if changed:  # pretty-printed, it would not say what is stored
                return Shown("text", text, size, n, f"JSON as stored: pretty-printed, {changed[0]} would change")
            try:
                pretty_bytes = len(pretty.encode())
            except UnicodeEncodeError:  # a string escaping a lone surrogate ("\\udc80"): kept escaped
                pretty = json.dumps(value, indent=2, ensure_ascii=True, sort_keys=False)
                pretty_bytes = len(pretty)
            if pretty_bytes > MAX_SHOWN:  # indented, it would not fit: shown as stored, whole
                return Shown("text", text, size, n, f"JSON as stored: pretty-printed it is over {MAX_SHOWN} bytes")
            return Shown("json", pretty, size, n)
    return Shown("hex", hex_dump(data), size, len(data), note)
