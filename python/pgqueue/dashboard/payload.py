"""How the dashboard shows a payload: by its content type, JSON pretty-printed, text as it is,
anything else (raw bytes, an unknown type, bytes that are not what their type says) as a hex
dump. The result is plain text: the templates escape it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pgqueue.codec import media_type

#: Bytes shown of a payload; the rest is summarised.
MAX_SHOWN = 16 * 1024


@dataclass(frozen=True)
class Shown:
    """A payload as the dashboard shows it."""

    kind: str  # "json", "text" or "hex"
    text: str
    size: int  # bytes stored
    truncated: bool
    note: str = ""  # why it is shown as hex, when its type said otherwise


def hex_dump(data: bytes) -> str:
    """Return ``data`` as lines of 16 bytes: offset, hex bytes, printable ASCII."""
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset:offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  |{text}|")
    return "\n".join(lines)


def show(content: bytes, content_type: str | None) -> Shown:
    """Return how to show a payload stored as ``content`` with ``content_type``."""
    data = bytes(content)
    size = len(data)
    truncated = size > MAX_SHOWN
    kind, params = media_type(content_type)
    note = ""
    if kind == "application/json" or kind.endswith("+json") or kind.startswith("text/"):
        try:
            text = data.decode(params.get("charset", "utf-8"))
        except (LookupError, UnicodeDecodeError) as exc:
            note = f"not {params.get('charset', 'utf-8')} text ({type(exc).__name__}): shown as hex"
        else:
            if kind.startswith("text/"):
                return Shown("text", text[:MAX_SHOWN], size, truncated)
            try:
                value = json.loads(text)
            except ValueError:
                note = "not valid JSON: shown as text"
                return Shown("text", text[:MAX_SHOWN], size, truncated, note)
            pretty = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
            return Shown("json", pretty[:MAX_SHOWN], size, len(pretty) > MAX_SHOWN)
    return Shown("hex", hex_dump(data[:MAX_SHOWN]), size, truncated, note)
