"""README "From other languages": the Node examples (examples/node) run against the real server
with the drivers installed from npm here, for `pg` and for `postgres` (postgres.js). Strings,
JSON and bytes arrive unchanged and come back decoded by their content type; messages sent by
Python are read by Node, text in its charset. A message that does not decode is dead-lettered
and the others go on; no message of a batch slower than its leases is done twice. Controls show
the pitfalls the README warns of: a JS string sent to message_create (bytea) is changed, and a
JS array sent by pg for JSON is not JSON."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgqueue import Queue

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "node"
DRIVERS = {"pg": "pg_example.mjs", "postgres": "postgresjs_example.mjs"}


@pytest.fixture(scope="module")
def node_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of examples/node with its drivers installed from npm (package.json pins them)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "node and npm are needed (scripts/bootstrap.sh installs them)"
    work = tmp_path_factory.mktemp("node")
    for name in ("package.json", "content.mjs", *DRIVERS.values()):
        shutil.copy(EXAMPLES / name, work / name)
    proc = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=work,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield work


def url(dsn: str) -> str:
    d = conninfo_to_dict(dsn)
    return f"postgresql://{d['user']}@{d['host']}:{d['port']}/{d['dbname']}"


def node(node_dir: Path, dsn: str, *argv: str) -> object:
    proc = subprocess.run(["node", *argv], cwd=node_dir, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin:/usr/local/bin", "DATABASE_URL": url(dsn)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_node_example(node_dir: Path, dsn: str, driver: str) -> None:
    queue = Queue(dsn, "emails")
    queue.create()
    from_python = queue.enqueue({"from": "python", "path": "C:\\temp"})

    made = node(node_dir, dsn, DRIVERS[driver], "produce", "emails")
    assert isinstance(made, dict)
    ids = {k: int(v) for k, v in made.items()}
    with Queue(dsn, "emails") as q:
        pending = {p.id: p for p in q.peek(10)}
    text, js, lst, raw, later = (pending[ids[k]] for k in ("text", "json", "list", "bytes", "later"))
    assert (text.content, text.content_type) == ("C:\\temp \\x4869 ✓".encode(), "text/plain; charset=utf-8")
    assert js.content_type == "application/json; task=send_email"
    assert js.payload == {"to": "a@example.com", "dir": "C:\\temp"}  # decoded by the Python client too
    # an array as JSON: pg would send a bare JS array as a PostgreSQL array literal
    assert (lst.payload, lst.content_type) == (["a@example.com", "b@example.com"], "application/json")
    assert (raw.content, raw.content_type) == (bytes([0, 1, 92, 120, 255]), None)
    assert later.dequeue_at is not None and later.dequeue_at > text.dequeue_at  # type: ignore[operator]

    seen = node(node_dir, dsn, DRIVERS[driver], "consume", "emails")
    assert isinstance(seen, list)
    got = {int(s["id"]): s for s in seen}
    assert set(got) == {from_python, ids["text"], ids["json"], ids["list"], ids["bytes"]}  # not the scheduled one
    assert got[from_python]["payload"] == {"from": "python", "path": "C:\\temp"}
    assert got[ids["text"]]["payload"] == "C:\\temp \\x4869 ✓"
    assert (got[ids["json"]]["task"], got[ids["json"]]["payload"]) == ("send_email", {"to": "a@example.com",
                                                                                     "dir": "C:\\temp"})
    assert got[ids["bytes"]]["payload"] == {"base64": "AAFceP8="}
    assert got[ids["list"]]["payload"] == ["a@example.com", "b@example.com"]
    assert all(s["completed"] is True for s in seen)
    stats = queue.stats()
    assert (stats.ready, stats.scheduled, stats.leased) == (0, 1, 0)
    queue.close()


def test_control_a_js_string_sent_as_bytea_is_changed(node_dir: Path, dsn: str) -> None:
    """What the README warns of, and the reason for message_create_text."""
    code = ("import pg from 'pg'; const c = new pg.Client({connectionString: process.env.DATABASE_URL});"
            "await c.connect(); const r = await c.query('SELECT pgqueue.message_create($1, $2) AS id',"
            " ['default', String.raw`\\x4869`]); console.log(JSON.stringify(r.rows[0].id)); await c.end();")
    (node_dir / "pitfall.mjs").write_text(code)
    msg_id = int(str(node(node_dir, dsn, "pitfall.mjs")))
    with Queue(dsn) as q:
        [p] = q.peek()
    assert p.id == msg_id and p.content == b"Hi"  # not the six characters that were sent


def node_run(node_dir: Path, dsn: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["node", *argv], cwd=node_dir, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin:/usr/local/bin", "DATABASE_URL": url(dsn)})


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_node_consume_settles_each_message_and_goes_on_after_one_it_cannot_decode(
        node_dir: Path, dsn: str, driver: str) -> None:
    """Session 68: a message whose content is not what its type says (malformed JSON here) threw
    out of the consume loop: the process failed, the messages after it stayed leased until their
    leases ran out, and at every run the bad one (an expired lease, handed out first) stopped
    them again. Now it is dead-lettered with the reason and the others are completed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('emails')")
        [bad] = conn.execute("SELECT pgqueue.message_create('emails', convert_to('{\"to\": ', 'UTF8'), NULL, "
                             "'application/json')").fetchone() or ()
        [good] = conn.execute("SELECT pgqueue.message_create_text('emails', 'after the bad one')").fetchone() or ()

    proc = node_run(node_dir, dsn, DRIVERS[driver], "consume", "emails")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {int(s["id"]): s for s in json.loads(proc.stdout)}
    assert got[good]["payload"] == "after the bad one" and got[good]["completed"] is True
    assert got[bad]["rejected"] is True and "payload" not in got[bad]
    with Queue(dsn, "emails") as q:
        stats = q.stats()
        [letter] = q.dead_letters()
    assert (stats.ready, stats.leased, stats.dead) == (0, 0, 1)
    assert letter.id == bad and "cannot decode" in (letter.last_error or "")


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_node_consume_reads_text_in_its_charset_and_media_types_in_any_case(
        node_dir: Path, dsn: str, driver: str) -> None:
    """Session 68: README says text/* is text in its charset (UTF-8 if none), as the Python
    client reads it, and media types are case-insensitive; the examples decoded every text as
    UTF-8 ('café' in ISO-8859-1 came out as 'caf\\ufffd') and read 'Application/JSON' as raw
    bytes."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('emails')")
        [latin] = conn.execute("SELECT pgqueue.message_create('emails', '\\x636166e9'::bytea, NULL, "
                               "'text/plain; charset=ISO-8859-1')").fetchone() or ()
        [upper] = conn.execute("SELECT pgqueue.message_create('emails', convert_to('{\"a\": 1}', 'UTF8'), NULL, "
                               "'Application/JSON; Task=\"notify\"')").fetchone() or ()
        # labels message_create_text accepts that TextDecoder knows only with a hyphen
        [snake] = conn.execute("SELECT pgqueue.message_create_text('emails', 'naïve', NULL, "
                               "'text/plain; charset=\"utf_8\"')").fetchone() or ()
    with Queue(dsn, "emails") as q:
        python_reads = {p.id: p.payload for p in q.peek()}

    proc = node_run(node_dir, dsn, DRIVERS[driver], "consume", "emails")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {int(s["id"]): s for s in json.loads(proc.stdout)}
    assert got[latin]["payload"] == python_reads[latin] == "café"
    assert got[upper]["payload"] == python_reads[upper] == {"a": 1}
    assert got[upper]["task"] == "notify"
    assert got[snake]["payload"] == python_reads[snake] == "naïve"


def test_control_a_js_array_sent_by_pg_for_json_is_not_json(node_dir: Path, dsn: str) -> None:
    """Why pg_example.mjs sends JSON.stringify(value): pg sends a bare JS array as a PostgreSQL
    array literal, which message_create_json refuses (a plain object it does send as JSON)."""
    code = ("import pg from 'pg'; const c = new pg.Client({connectionString: process.env.DATABASE_URL});"
            "await c.connect(); try { await c.query('SELECT pgqueue.message_create_json($1, $2)',"
            " ['default', ['a@example.com', 'b@example.com']]); console.log('\"accepted\"'); }"
            " catch (e) { console.log(JSON.stringify(e.code)); } finally { await c.end(); }")
    (node_dir / "array_pitfall.mjs").write_text(code)
    assert node(node_dir, dsn, "array_pitfall.mjs") == "22P02"  # invalid input syntax for type json


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_node_produce_is_one_transaction(node_dir: Path, dsn: str, driver: str) -> None:
    """produce made its five enqueues as separate statements: one refused midway (a capped queue
    full after three) left the first three enqueued, and a retry of the run sent them twice.
    They are one transaction now: the run fails and nothing is enqueued."""
    with Queue(dsn, "capped") as q:
        q.create(max_size=3)
    proc = node_run(node_dir, dsn, DRIVERS[driver], "produce", "capped")
    assert proc.returncode != 0 and proc.stdout == "", proc.stdout + proc.stderr
    assert 'queue "capped" is full' in proc.stderr, proc.stderr
    with Queue(dsn, "capped") as q:
        assert q.stats().total == 0


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_node_consume_reads_latin1_and_ascii_as_python_does(node_dir: Path, dsn: str, driver: str) -> None:
    """TextDecoder reads the labels ISO-8859-1, latin-1 and US-ASCII as windows-1252: byte 0x80 of
    latin-1 text came out as '€' where Python reads U+0080, and a byte above 0x7F in "ASCII" text
    was taken as a windows-1252 character where Python refuses it. content.mjs decodes both as
    Python does: latin-1 byte for code point, ASCII with its bytes above 0x7F refused (the message
    is dead-lettered as undecodable)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('emails')")
        [latin] = conn.execute("SELECT pgqueue.message_create('emails', '\\x80e99f'::bytea, NULL, "
                               "'text/plain; charset=latin_1')").fetchone() or ()
        [ascii_ok] = conn.execute("SELECT pgqueue.message_create('emails', '\\x6f6b'::bytea, NULL, "
                                  "'text/plain; charset=US-ASCII')").fetchone() or ()
        [ascii_bad] = conn.execute("SELECT pgqueue.message_create('emails', '\\x80'::bytea, NULL, "
                                   "'text/plain; charset=us-ascii')").fetchone() or ()
    with Queue(dsn, "emails") as q:
        python_reads = {p.id: p.payload for p in q.peek()}
    assert python_reads[latin] == "\x80\xe9\x9f" and python_reads[ascii_ok] == "ok"
    assert python_reads[ascii_bad] == b"\x80"  # not text to Python: its raw content

    proc = node_run(node_dir, dsn, DRIVERS[driver], "consume", "emails")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = {int(s["id"]): s for s in json.loads(proc.stdout)}
    assert got[latin]["payload"] == "\x80\xe9\x9f"
    assert got[ascii_ok]["payload"] == "ok"
    assert got[ascii_bad]["rejected"] is True and "not ASCII" in got[ascii_bad]["error"]


#: Content and content types whose reading content.mjs must share with the Python client (a
#: review found each of these read otherwise by Node, or read where Python refuses).
DECODE_CASES = [
    ("636166c3a9", "text/plain;\u00a0charset=latin1"),  # no charset to Python: UTF-8
    ("636166c3a9", "\u00a0text/plain"),  # not a text type: bytes
    ("feff00680069", "text/plain; charset=utf-16"),  # a big-endian mark, dropped
    ("fffe68006900", "text/plain; charset=utf-16"),
    ("68006900", "text/plain; charset=UTF_16"),  # no mark: little-endian
    ("fffe68006900", "text/plain; charset=utf-16le"),  # a mark of an explicit order is text
    ("feff007b007d", "application/json; charset=utf-16"),
    ("6869", "text/plain; charset="),  # an empty charset names none: refused
    ("6869", 'text/plain; charset="utf-8'),  # an unbalanced quote
    ("80828c9f41", "text/plain; charset=windows-1252"),
    ("61", "text/plain; charset=cp1252"),
    *[(f"{b:02x}", "text/plain; charset=cp1252") for b in (0x81, 0x8D, 0x8F, 0x90, 0x9D)],  # undefined
    ("efbbbf7b7d", "application/json"),
    ("efbbbf6869", "text/plain"),
    ("ff41", "text/plain; charset=ibm819"),  # Python's latin-1 aliases (a leading 0xFF was dropped)
    ("ff80", "text/plain; charset=iso_8859-1:1987"),
    ("ff80", "text/plain; charset=CSISOLatin1"),
    ("".join(f"{b:02x}" for b in range(256) if b not in (0x81, 0x8D, 0x8F, 0x90, 0x9D)),
     "text/plain; charset=windows_1252"),
]

#: Charsets that TextDecoder reads as another (WHATWG: ISO-8859-9 as windows-1254, TIS-620 as
#: windows-874): content.mjs refuses them rather than read 0x80-0x9F as letters Python does not.
REFUSED_BY_NODE = [("80", "text/plain; charset=latin5"), ("80", "text/plain; charset=ISO-8859-9"),
                   ("80", "text/plain; charset=tis-620")]


def test_content_mjs_decodes_as_the_python_client_does(node_dir: Path) -> None:
    """content.mjs's decode against pgqueue.codec.decode on the same bytes: the same value, or
    both refuse (the examples dead-letter what they cannot decode)."""
    from pgqueue import codec

    script = ("import { decode } from './content.mjs';\n"
              "const cases = JSON.parse(process.argv[2]);\n"
              "console.log(JSON.stringify(cases.map(([hex, ct]) => {\n"
              "  try { return { ok: decode(Buffer.from(hex, 'hex'), ct) }; } catch (e) { return { err: String(e) }; }\n"
              "})));\n")
    (node_dir / "decode_cases.mjs").write_text(script)
    proc = subprocess.run(["node", "decode_cases.mjs", json.dumps(DECODE_CASES + REFUSED_BY_NODE)], cwd=node_dir,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    node_reads = json.loads(proc.stdout)
    for case, got in zip(REFUSED_BY_NODE, node_reads[len(DECODE_CASES):], strict=True):
        assert "err" in got and "another charset" in got["err"], (case, got)
        assert isinstance(codec.decode(bytes.fromhex(case[0]), case[1]), str)  # (Python reads it)
    node_reads = node_reads[:len(DECODE_CASES)]
    for (hex_, ctype), got in zip(DECODE_CASES, node_reads, strict=True):
        try:
            value = codec.decode(bytes.fromhex(hex_), ctype)
        except ValueError as exc:
            assert "err" in got, (hex_, ctype, f"Python refuses ({exc}), Node reads", got)
            continue
        if isinstance(value, bytes):
            value = {"base64": base64.b64encode(value).decode()}
        assert got == {"ok": value}, (hex_, ctype, value, got)


def slow_copy(node_dir: Path, driver: str) -> str:
    """The example with work that takes as many milliseconds as its text payload says."""
    script = (node_dir / DRIVERS[driver]).read_text()
    marker = "  // ... do the work here\n"
    assert script.count(marker) == 1
    name = f"slow_{DRIVERS[driver]}"
    (node_dir / name).write_text(script.replace(
        marker, "  await new Promise((done) => setTimeout(done, Number.parseInt(payload)));\n"))
    return name


def consume_while_another_consumer_takes(node_dir: Path, dsn: str, script: str, queue: str, count: int,
                                         after: float) -> tuple[list[dict[str, object]], list[int]]:
    """Run the example's consume; ``after`` seconds after its dequeue, another consumer (Python)
    takes what it can. Returns what the example did and the ids the other consumer was given
    (it completes them)."""
    proc = subprocess.Popen(["node", script, "consume", queue], cwd=node_dir, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={"PATH": "/usr/bin:/bin:/usr/local/bin", "DATABASE_URL": url(dsn)})
    try:
        with Queue(dsn, queue) as q:
            deadline = time.monotonic() + 30
            while q.stats(exact=True).leased < count:
                assert proc.poll() is None and time.monotonic() < deadline, "the example leased nothing"
                time.sleep(0.02)
            time.sleep(after)
            taken = q.dequeue(10, lock_ms=60_000)
            for msg in taken:
                q.complete(msg)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    return json.loads(out), [msg.id for msg in taken]


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_node_consume_keeps_the_leases_of_the_messages_waiting_their_turn(
        node_dir: Path, dsn: str, driver: str) -> None:
    """consume leased up to 100 messages and never renewed a lease: when the work on the first
    ones outlasted the queue's lock_ms, the leases of those still waiting ran out, another
    consumer was handed them, and the example did them too (twice in all). It renews the leases
    of the messages still waiting before each message's work: here 4 messages of 1.2 s of work
    on 2 s leases, and another consumer that looks 2.5 s in is handed none of them."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('slow', p_lock_ms => 2000)")
        ids = [conn.execute("SELECT pgqueue.message_create_text('slow', %s)", (f"1200 #{n}",)).fetchone()[0]
               for n in range(4)]  # type: ignore[index]
    seen, taken = consume_while_another_consumer_takes(node_dir, dsn, slow_copy(node_dir, driver), "slow", 4, 2.5)
    assert taken == []  # none handed out twice
    assert [int(str(s["id"])) for s in seen] == ids
    assert all(s["completed"] is True for s in seen), seen
    with Queue(dsn, "slow") as q:
        assert q.stats(exact=True).total == 0


@pytest.mark.parametrize("driver", list(DRIVERS))
def test_node_consume_skips_a_message_whose_lease_was_lost_while_it_waited(
        node_dir: Path, dsn: str, driver: str) -> None:
    """When the leases did run out (here the first message's work outlasts the lease, 4 s on a
    1 s lease) and another consumer took the messages, the example did the waiting ones as
    well. It checks each lease as it renews it: those found stale are skipped, not worked on."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('slow', p_lock_ms => 1000)")
        first, *waiting = [
            conn.execute("SELECT pgqueue.message_create_text('slow', %s)", (ms,)).fetchone()[0]  # type: ignore[index]
            for ms in ("4000", "0", "0")]
    seen, taken = consume_while_another_consumer_takes(node_dir, dsn, slow_copy(node_dir, driver), "slow", 3, 1.5)
    assert sorted(taken) == sorted([first, *waiting])  # all three ran out, and the other took them
    got = {int(str(s["id"])): s for s in seen}
    assert got[first]["completed"] is False  # its work outlasted the lease: reported, not counted done
    assert all(got[m] == {"id": got[m]["id"], "lost": True} for m in waiting), seen  # not worked on
    with Queue(dsn, "slow") as q:
        assert q.stats(exact=True).total == 0
