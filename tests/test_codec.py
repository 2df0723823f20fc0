"""The payload codec and the pure scheduling logic shared by Queue and AsyncQueue (no server)."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from pgqueue import _core, codec, errors


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("payload", "content", "content_type"),
    [
        (b"\x00\xffraw", b"\x00\xffraw", None),
        (bytearray(b"ba"), b"ba", None),
        (memoryview(b"mv"), b"mv", None),
        (b"", b"", None),
        ("héllo ✓", "héllo ✓".encode(), "text/plain; charset=utf-8"),
        ("", b"", "text/plain; charset=utf-8"),
        ({"a": 1, "b": [True, None]}, b'{"a":1,"b":[true,null]}', "application/json"),
        ([1, "two", 3.5], b'[1,"two",3.5]', "application/json"),
        (42, b"42", "application/json"),
        (None, b"null", "application/json"),
        ({"ünï": "✓"}, '{"ünï":"✓"}'.encode(), "application/json"),
    ],
)
def test_encode_records_the_encoding(payload: object, content: bytes, content_type: str | None) -> None:
    assert codec.encode(payload) == (content, content_type)


@pytest.mark.parametrize(
    "payload",
    [b"raw", "text ✓", {"k": [1, 2, {"n": None}]}, [None], 0, -7, 2.5, True, False, None, "", b"",
     2**64, -(10**300), 1e308, -0.0, 5e-324, {"deep": _nested(500)}],
)
def test_decode_reverses_encode(payload: object) -> None:
    decoded = codec.decode(*codec.encode(payload))
    assert decoded == payload
    assert type(decoded) is type(payload)


def test_json_turns_tuples_into_lists() -> None:
    assert codec.decode(*codec.encode({"t": (1, 2)})) == {"t": [1, 2]}


@pytest.mark.parametrize("payload", [
    object(), {1, 2}, Decimal("1.5"), float("nan"), {"x": float("inf")}, datetime(2024, 1, 1), 10**5000,
    # a lone surrogate has no UTF-8 form (in a str or inside JSON); nesting past the recursion
    # limit cannot be serialised: both raised bare UnicodeEncodeError / RecursionError before
    "\ud800", {"k": ["\udc00"]}, _nested(100_000),
], ids=["object", "set", "decimal", "nan", "inf", "datetime", "huge-int", "surrogate-str", "surrogate-json",
        "too-deep"])
def test_unserialisable_payload_raises(payload: object) -> None:
    with pytest.raises(errors.UnsupportedPayload) as info:
        codec.encode(payload)
    # one class, catchable the three ways a caller may expect
    assert isinstance(info.value, TypeError)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, errors.InvalidArgument)
    assert info.value.sqlstate is None


def test_keys_that_json_writes_alike_are_refused_and_others_become_strings() -> None:
    """{1: "a", "1": "b"} was written with the key "1" twice and came back {"1": "b"}: one entry
    lost, nothing said (a review). Two keys of one object that JSON writes as the same string are
    UnsupportedPayload, however deep the object; keys that stay apart come back as strings."""
    clashing = [{1: "a", "1": "b"}, {None: 1, "null": 2}, {True: 1, "true": 2}, {1.5: 1, "1.5": 2},
                [{"x": ({"1": 1, 1: 2},)}], {"a": [[[{"k": {False: 0, "false": 1}}]]]}]
    for payload in clashing:
        with pytest.raises(errors.UnsupportedPayload, match="are both the JSON key"):
            codec.encode(payload)
    for payload, back in [({1: "a", 2: "b"}, {"1": "a", "2": "b"}), ({None: 1, 1.5: 2, True: 3}, {"null": 1, "1.5": 2, "true": 3}),
                          ({"a": [1, {"b": {3: 4}}, (), {}]}, {"a": [1, {"b": {"3": 4}}, [], {}]}),
                          ([{"1": 1}, {1: 2}], [{"1": 1}, {"1": 2}])]:  # the same key in two objects
        assert codec.decode(*codec.encode(payload)) == back


@pytest.mark.parametrize(
    ("content", "content_type", "expected"),
    [
        (b"abc", None, b"abc"),
        (b"abc", "application/octet-stream", b"abc"),
        (b"abc", "image/png", b"abc"),
        (b'{"a":1}', "APPLICATION/JSON", {"a": 1}),
        (b'{"a":1}', "application/json; charset=utf-8", {"a": 1}),
        (b'{"a":1}', "application/cloudevents+json", {"a": 1}),
        ("é".encode("latin-1"), "text/plain; charset=ISO-8859-1", "é"),
        ("é".encode(), "text/plain", "é"),
        (b"<a/>", "text/xml", "<a/>"),
    ],
)
def test_decode_follows_the_content_type(content: bytes, content_type: str | None, expected: object) -> None:
    assert codec.decode(content, content_type) == expected


@pytest.mark.parametrize(
    ("content", "content_type"),
    [(b"{not json", "application/json"), (b"\xff\xfe", "text/plain; charset=utf-8"), (b"x", "text/plain; charset=nope"),
     (b"{}", "application/json; charset=utf8mb4"),  # an unknown charset on JSON too
     (b"[" * 5000 + b"]" * 5000, "application/json")],  # deeper than the recursion limit
)
def test_decode_rejects_malformed_content(content: bytes, content_type: str) -> None:
    with pytest.raises(ValueError):
        codec.decode(content, content_type)


@pytest.mark.parametrize("charset", ["nope", "undefined", "UNDEFINED"])
def test_a_charset_python_cannot_decode_with_is_an_unknown_charset(charset: str) -> None:
    """``charset=undefined`` (JavaScript's `charset=${enc}` of an unset enc) names Python's
    "undefined" codec, which is found but decodes nothing: it raised "decoding with 'undefined'
    codec failed" (a review); now the same ValueError as a charset Python does not know."""
    for content_type in (f"text/plain; charset={charset}", f"application/json; charset={charset}"):
        with pytest.raises(ValueError, match=r"^unknown charset in content type") as exc:
            codec.decode(b'"hi"', content_type)
        assert str(exc.value) == f"unknown charset in content type {content_type!r}"
    with pytest.raises(UnicodeDecodeError):  # bytes not in a charset that exists: as they were
        codec.decode(b"\xff", "text/plain; charset=utf-8")


def test_json_after_a_byte_order_mark_is_parsed_text_keeps_it() -> None:
    """A UTF-8 byte-order mark before JSON (some Windows tools write one; RFC 8259 lets a parser
    ignore it) made json.loads fail: the message was handed out as its raw bytes (a review).
    In text it is the producer's own character, kept."""
    bom = b"\xef\xbb\xbf"
    assert codec.decode(bom + b'{"a":1}', "application/json") == {"a": 1}
    assert codec.decode(bom + b"[1]", "application/cloudevents+json; charset=utf-8") == [1]
    msg = _core.message_from_row("q", (1, bom + b'{"a":1}', 1, 0, None, "application/json", 0, 10, 0))
    assert msg.payload == {"a": 1}
    assert codec.decode(bom + b"hi", "text/plain; charset=utf-8") == "\ufeffhi"
    with pytest.raises(ValueError):
        codec.decode(bom + bom + b"{}", "application/json")  # one mark, not any number of them
    # and the dashboard and the Spark source read such JSON as the client does (a review)
    from pgqueue.dashboard.payload import show
    from pgqueue.spark._encode import decode_payload

    shown = show(bom + b'{"a": 1}', "application/json")
    assert (shown.kind, shown.note) == ("json", "")
    assert decode_payload(bom + b'{"a":1}', "application/json", "json") == '{"a":1}'


def test_message_with_malformed_content_keeps_its_bytes() -> None:
    row = (1, b"{oops", 1, 0, None, "application/json", 0, 10, 0)
    msg = _core.message_from_row("q", row)
    assert msg.payload == b"{oops"
    assert msg.content_type == "application/json"
    for content, content_type in ((b"{}", "application/json; charset=utf8mb4"),
                                  (b"[" * 5000 + b"]" * 5000, "application/json")):
        msg = _core.message_from_row("q", (1, content, 1, 0, None, content_type, 0, 10, 0))
        assert msg.payload == content  # handed out as its bytes, not an exception for the whole batch


def test_media_type() -> None:
    assert codec.media_type('Text/Plain; Charset="UTF-8"; x') == ("text/plain", {"charset": "UTF-8"})
    assert codec.media_type(None) == ("", {})
    # a semicolon inside a quoted value splits nothing: no charset is named here (a review) ...
    assert codec.media_type('text/plain; name="a;charset=latin-1"') == ("text/plain", {"name": "a;charset=latin-1"})
    # ... and a backslash escapes a quote inside one
    assert codec.media_type('text/plain; name="a\\";charset=x"; charset=utf-8') == (
        "text/plain", {"name": 'a";charset=x', "charset": "utf-8"})
    assert codec.decode(b"caf\xc3\xa9", 'text/plain; title="x;charset=latin-1"') == "caf\u00e9"
    # a backslash escapes only inside a quoted string (RFC 9110): outside one it is a character
    # and the semicolon after it splits; inside one an escaped backslash is one backslash
    assert codec.media_type('text/plain; a=b\\; charset=latin-1') == ("text/plain", {"a": "b\\", "charset": "latin-1"})
    assert codec.media_type('text/plain; a=\\"x;y"z; charset=latin-1') == ("text/plain", {"a": '\\"x;y"z', "charset": "latin-1"})
    assert codec.media_type('text/plain; name="a\\\\"; charset=latin-1') == (
        "text/plain", {"name": "a\\", "charset": "latin-1"})


#: Content types whose parameters the SQL check of message_create_text and the codec might read
#: differently: quotes, semicolons inside them, backslashes, a charset inside another value.
TRICKY_CONTENT_TYPES = [
    'text/plain; charset="utf-8;x"', 'text/plain; charset="utf-8;sig"', 'text/plain; charset="utf-8"";x"',
    'text/plain; charset="utf\\-8"', 'text/plain; charset=utf-8"', 'text/plain; charset="utf-8',
    'text/plain; name="a;charset=latin-1"', 'text/plain; name="a;charset=utf-8"; charset=latin-1',
    'text/plain; name="a\\";charset=latin-1"', 'text/plain; charset="utf-8"', 'text/plain; charset= "UTF8" ',
    'text/plain; CHARSET=us-ascii', 'text/plain; name="x;y"; charset=utf-8', 'text/plain; charset="latin-1";x',
    # Unicode white space around a name or a value, which the server does not trim (str.strip()
    # did: the server stored "\xa0charset=latin-1" and the codec decoded UTF-8 as latin-1)
    'text/plain;\xa0charset=latin-1', 'text/plain; charset\u3000=latin-1', 'text/plain; charset=\x85latin-1',
    'text/plain; \x1ccharset=latin-1', 'text/plain;\xa0charset=utf-8',
    # a backslash outside a quoted string escapes nothing; inside one an escaped backslash
    'text/plain; a=b\\; charset=latin-1', 'text/plain; a=\\"; charset=latin-1"', 'text/plain; a="b\\\\"; charset=latin-1',
]


@pytest.mark.parametrize("text", ["ascii", "caf\u00e9"])
def test_message_create_text_accepts_only_what_the_codec_reads_as_utf8(conn: psycopg.Connection[Any], text: str) -> None:
    """message_create_text stores UTF-8 and refuses (22023) a content type naming another charset;
    what it accepts, the codec must read as UTF-8 (or ASCII for an ASCII text) and decode to the
    text: never laxer than the codec. 'charset="utf-8;sig"' was accepted (its check cut the value
    at the semicolon), and the codec read charset "utf-8;sig", Python's utf_8_sig (a review)."""
    accepted = []
    for content_type in TRICKY_CONTENT_TYPES:
        try:
            with conn.transaction():
                row = conn.execute("SELECT pgqueue.message_create_text('default', %s, NULL, %s)",
                                   (text, content_type)).fetchone()
        except psycopg.errors.InvalidParameterValue:
            continue
        assert row is not None
        accepted.append(content_type)
        charset = codec.media_type(content_type)[1].get("charset")
        assert charset is None or charset.lower() in ("utf-8", "utf8", "utf_8") or (
            text.isascii() and charset.lower() in ("us-ascii", "ascii", "us_ascii")), content_type
        assert codec.decode(text.encode(), content_type) == text, content_type
    assert 'text/plain; charset="utf-8"' in accepted and 'text/plain; charset="utf-8;sig"' not in accepted


def test_json_decodes_as_pythons_json_reads_it_what_the_client_cannot_send_back_included() -> None:
    """``NaN`` and ``Infinity`` (not JSON, RFC 8259, but what Python's own json.dumps writes by
    default: a producer of another program's may well send them) and a number beyond a double's
    range (``1e400``, JSON) decode as Python's json reads them, to float nan and inf: the message
    a handler gets is the value its producer meant, not its bytes. Enqueueing it again is refused
    with UnsupportedPayload, as any such payload is, not sent as what JSON cannot hold."""
    value = codec.decode(b'{"a":NaN,"b":Infinity,"c":-Infinity,"d":1e400,"e":-1e400}', codec.JSON)
    assert isinstance(value, dict) and math.isnan(value["a"])
    assert [value[k] for k in "bcde"] == [math.inf, -math.inf, math.inf, -math.inf]
    with pytest.raises(errors.UnsupportedPayload, match="not JSON compliant"):
        codec.encode(value)
    with pytest.raises(ValueError):  # an integer Python will not convert: not decoded (its bytes in a Message)
        codec.decode(b"1" * 5000, codec.JSON)


def test_json_is_compact_and_readable_by_any_json_parser() -> None:
    content, _ = codec.encode({"a": [1, 2], "b": "ü"})
    assert b" " not in content
    assert json.loads(content.decode("utf-8")) == {"a": [1, 2], "b": "ü"}


# -- scheduling -------------------------------------------------------------------------


def test_priority_maps_like_the_extension() -> None:
    assert _core.dequeue_at_for(priority=0) == -1
    assert _core.dequeue_at_for(priority=9) == -10
    assert _core.dequeue_at_for(priority=_core.MAX_PRIORITY) == -1 - (2**31 - 1)
    for bad in (-1, 2**31, 1.5, True, "1"):
        with pytest.raises(errors.InvalidArgument):
            _core.dequeue_at_for(priority=bad)  # type: ignore[arg-type]


def test_at_accepts_aware_naive_and_epoch_ms() -> None:
    aware = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
    ms = 1893553445678
    assert _core.dequeue_at_for(at=aware) == ms
    assert _core.dequeue_at_for(at=aware.replace(tzinfo=None)) == ms  # naive = UTC
    assert _core.dequeue_at_for(at=aware.astimezone(timezone(timedelta(hours=5)))) == ms
    assert _core.dequeue_at_for(at=ms) == ms
    assert _core.to_epoch_ms(datetime(1969, 12, 31, 23, 59, 59, 999500)) == -1  # floor, like to_epoch
    with pytest.raises(errors.InvalidArgument, match="1970"):  # a time, not a priority
        _core.dequeue_at_for(at=datetime(1969, 12, 31, 23, 59, 59, 999500))
    with pytest.raises(errors.InvalidArgument):
        _core.dequeue_at_for(at=1.5)  # type: ignore[arg-type]


def test_delay_is_relative_to_now() -> None:
    before = int(time.time() * 1000)
    value = _core.dequeue_at_for(delay=timedelta(seconds=30))
    after = int(time.time() * 1000)
    assert value is not None and before + 30000 <= value <= after + 30000
    value = _core.dequeue_at_for(delay=1.5)
    assert value is not None and before + 1500 <= value <= int(time.time() * 1000) + 1500
    assert _core.schedule(delay=timedelta(milliseconds=2500)) == _core.Schedule(delay_ms=2500)
    assert _core.schedule(delay=0) == _core.Schedule(delay_ms=0)
    for bad in (-1, timedelta(seconds=-1), float("nan"), float("inf"), "5", True):
        with pytest.raises(errors.InvalidArgument):
            _core.dequeue_at_for(delay=bad)  # type: ignore[arg-type]


def test_at_most_one_of_delay_at_priority() -> None:
    assert _core.dequeue_at_for() is None
    with pytest.raises(ValueError, match="at most one"):
        _core.dequeue_at_for(delay=1, priority=1)
    with pytest.raises(ValueError, match="delay and at"):
        _core.dequeue_at_for(delay=1, at=5)


def test_error_text() -> None:
    assert _core.error_text("plain") == "plain"
    assert _core.error_text(ValueError("boom")) == "ValueError: boom"
    # one line, the same for the client's fail() and the workers (they cut at different lengths before)
    assert _core.error_text(RuntimeError("line one\n   line two")) == "RuntimeError: line one line two"
    assert _core.error_text(KeyError()) == "KeyError"

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise TypeError("not all arguments converted")

    assert _core.error_text(Unprintable()) == "Unprintable: (its message could not be made: __str__ raised)"
    assert len(_core.error_text(ValueError("x" * 100000))) == _core.MAX_ERROR_CHARS
    assert len(_core.error_text("x" * 100000)) == _core.MAX_ERROR_CHARS


def test_a_fail_sends_its_ascii_twin_where_the_servers_encoding_cannot_hold_its_text() -> None:
    """fail / reject send their ASCII twin in place of the call, decided before anything is sent,
    when the server would refuse the error text (22P05, which aborts a transaction the call runs
    in): its encoding differs from the client's, cannot hold every text, and cannot hold this
    one (or Python has no codec for it). Before, the first try ran in a savepoint, whose rollback
    took other tasks' statements on a shared connection with it (a review)."""
    from types import SimpleNamespace

    def info(server: str = "LATIN1", client: str = "UTF8") -> Any:
        settings = {"server_encoding": server, "client_encoding": client}
        return SimpleNamespace(parameter_status=settings.get)

    msg = _core.message_from_row("q", (1, b"x", 1, 0, None, None, 0, 10, 0))
    cyrillic, accented = _core.fail(msg, "ошибка"), _core.reject(msg, "é")
    assert _core.server_refuses(cyrillic, info())  # LATIN1 cannot hold it
    assert not _core.server_refuses(accented, info())  # it can hold this one
    assert _core.server_refuses(accented, info("WIN1251"))  # no é in Windows Cyrillic
    assert not _core.server_refuses(cyrillic, info("WIN1251"))
    assert _core.server_refuses(accented, info("MULE_INTERNAL"))  # no codec in Python: the twin
    for server, client in (("UTF8", "LATIN1"), ("SQL_ASCII", "UTF8"), ("LATIN1", "LATIN1")):
        assert not _core.server_refuses(cyrillic, info(server, client))
    # where Python's codec takes what PostgreSQL refuses, any text that is not ASCII gets the
    # twin (a review of the fix: 〜 in EUC_JP, most Hangul in EUC_KR, a WIN1251 client's ° on
    # KOI8R went through and aborted the transaction, 25P02)
    wave, hangul, degree = (_core.fail(msg, text) for text in ("10〜20", "똠방각하", "20°"))
    assert _core.server_refuses(wave, info("EUC_JP"))
    assert _core.server_refuses(hangul, info("EUC_KR"))
    assert _core.server_refuses(degree, info("KOI8R", "WIN1251"))
    assert not _core.server_refuses(_core.fail(msg, "plain ascii"), info("EUC_JP"))


def test_outcome_of_a_receive_block() -> None:
    assert _core.outcome(None) == "complete"
    assert _core.outcome(RuntimeError()) == "fail"
    assert _core.outcome(KeyboardInterrupt()) == "release"
    assert _core.outcome(SystemExit()) == "release"


def test_heartbeat_interval_is_a_third_of_the_lease() -> None:
    assert _core.heartbeat_interval(30000) == pytest.approx(10.0)
    assert _core.heartbeat_interval(300) == pytest.approx(0.1)
    assert _core.heartbeat_interval(1) == _core.MIN_HEARTBEAT_INTERVAL


def test_messages_pending_dead_letters_and_schedules_are_hashable_whatever_the_payload() -> None:
    """A dict or list payload made hash() raise TypeError (the dataclass hash included it): a
    message could not go in a set of those in flight. The hash leaves payload out; equality
    still compares it."""
    from pgqueue.message import DeadLetter, Message, Pending, ScheduleEntry, to_datetime

    at = to_datetime(1_700_000_000_000)
    for payload in ({"to": "a@example.com"}, [1, [2]], "text", b"raw", None):
        content, content_type = codec.encode(payload)
        msg = Message(1, "q", payload, 1, None, at, at, at, content, content_type)
        twin = Message(1, "q", codec.decode(content, content_type), 1, None, at, at, at, content, content_type)
        assert msg == twin and hash(msg) == hash(twin) and len({msg, twin}) == 1
        assert msg != Message(2, "q", payload, 1, None, at, at, at, content, content_type)
        assert msg != Message(1, "q", "another", 1, None, at, at, at, content, content_type)  # payload compared
        pending = Pending(1, "q", payload, content, content_type, 1, None, at, None, at, None, None)
        dead = DeadLetter(1, "q", payload, content, content_type, None, 1, "boom", at, at, dead_at_ms=1)
        entry = ScheduleEntry("s", "q", 1000, None, payload, content_type, "latest", at, at)
        assert {pending: 1, dead: 2, entry: 3}[dead] == 2
        assert hash(pending) == hash(Pending(1, "q", payload, content, content_type, 1, None, at, None, at, None, None))
        assert dead == DeadLetter(1, "q", payload, content, content_type, None, 1, "boom", at, at)  # dead_at_ms aside
        assert hash(dead) == hash(DeadLetter(1, "q", payload, content, content_type, None, 1, "boom", at, at))


def test_a_delay_or_time_beyond_a_bigint_is_an_invalid_argument() -> None:
    """delay=1e16 s or at=2**63 ms went to the server, which refused them with 22003 (a plain
    PgQueueError): they are InvalidArgument before anything is sent, and 22003 maps to it."""
    top = 2**63 - 1
    assert _core.to_epoch_ms(top) == top and _core.to_epoch_ms(-(2**63)) == -(2**63)
    assert _core.delay_to_ms(9.2e15) == 9_200_000_000_000_000_000
    for at in (2**63, -(2**63) - 1, 10**30):
        with pytest.raises(errors.InvalidArgument, match="bigint range"):
            _core.to_epoch_ms(at)
        with pytest.raises(errors.InvalidArgument, match="bigint range"):
            _core.purge_dead("q", before=at)
    with pytest.raises(errors.InvalidArgument, match="bigint range"):
        _core.schedule(at=2**63)
    for delay in (1e16, 9.3e15, 10**17, 1e306, 10**309):  # (the last two: OverflowError before)
        with pytest.raises(errors.InvalidArgument, match="at most 9223372036854775807 ms"):
            _core.schedule(delay=delay)
        with pytest.raises(errors.InvalidArgument, match="at most"):
            _core.schedule_create("s", "q", 1, every=delay)
    for delay in (math.inf, -math.inf, math.nan, -(10**309)):
        with pytest.raises(errors.InvalidArgument, match="finite and >= 0"):
            _core.schedule(delay=delay)
    exc = psycopg.errors.NumericValueOutOfRange("bigint out of range")
    translated = errors.translate(exc)
    assert isinstance(translated, errors.InvalidArgument) and isinstance(translated, ValueError)


def test_the_raw_payloads_are_bytes_bytearray_and_memoryview_as_readme_says() -> None:
    """README said any bytes-like payload comes back as bytes; encode takes those three only
    (an array.array is not JSON-serialisable: UnsupportedPayload)."""
    import array
    from pathlib import Path

    for raw in (b"ab", bytearray(b"ab"), memoryview(b"ab")):
        assert codec.encode(raw) == (b"ab", None)
    with pytest.raises(errors.UnsupportedPayload):
        codec.encode(array.array("B", b"ab"))
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert "any bytes-like" not in readme
    assert ("`bytes`, `bytearray` and `memoryview` as `bytes` with no content type (another bytes-like object, "
            "an `array.array` say, is refused") in readme


def test_a_bad_time_or_interval_of_a_schedule_names_its_parameter() -> None:
    """to_epoch_ms and delay_to_ms named ``at`` and ``delay`` whatever the caller's parameter:
    ``purge_dead(before=1.0)`` said "at must be a datetime or epoch milliseconds"."""
    with pytest.raises(errors.InvalidArgument, match=r"^start_at must be a datetime or epoch milliseconds"):
        _core.schedule_create("s", "q", 1, every=60, start_at=1.5)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match=r"^every must be a timedelta or a number of seconds"):
        _core.schedule_create("s", "q", 1, every="60")  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match=r"^every must be finite and >= 0"):
        _core.schedule_create("s", "q", 1, every=-1)
    with pytest.raises(errors.InvalidArgument, match=r"^before must be a datetime"):
        _core.purge_dead("q", before=1.0)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidArgument, match=r"^delay must be finite"):
        _core.schedule(delay=-1)


def test_a_parameter_psycopg_refuses_to_send_is_an_invalid_argument() -> None:
    """psycopg refuses a text with NUL before sending it (a DataError without SQLSTATE), which
    came out as the base PgQueueError: it is InvalidArgument. The client checks its groups, keys
    and queue names first (InvalidQueueName for a name), whatever the call."""
    translated = errors.translate(psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes"))
    assert type(translated) is errors.InvalidArgument and translated.sqlstate is None
    for call in (lambda: _core.stats("a\x00"), lambda: _core.schedule_create("s", "\x00", 1, every=60),
                 lambda: _core.enqueue_many("q\x00", [1])):
        with pytest.raises(errors.InvalidQueueName, match="invalid queue name"):
            call()
