"""README "From other languages": the Node examples (examples/node) run against the real server
with the drivers installed from npm here, for `pg` and for `postgres` (postgres.js). Strings,
JSON and bytes arrive unchanged and come back decoded by their content type; messages sent by
Python are read by Node. A control shows the pitfall the README warns of: a JS string sent to
message_create (bytea) is changed."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

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
    for name in ("package.json", *DRIVERS.values()):
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
    text, js, raw, later = (pending[ids[k]] for k in ("text", "json", "bytes", "later"))
    assert (text.content, text.content_type) == ("C:\\temp \\x4869 ✓".encode(), "text/plain; charset=utf-8")
    assert js.content_type == "application/json; task=send_email"
    assert js.payload == {"to": "a@example.com", "dir": "C:\\temp"}  # decoded by the Python client too
    assert (raw.content, raw.content_type) == (bytes([0, 1, 92, 120, 255]), None)
    assert later.dequeue_at is not None and later.dequeue_at > text.dequeue_at  # type: ignore[operator]

    seen = node(node_dir, dsn, DRIVERS[driver], "consume", "emails")
    assert isinstance(seen, list)
    got = {int(s["id"]): s for s in seen}
    assert set(got) == {from_python, ids["text"], ids["json"], ids["bytes"]}  # not the scheduled one
    assert got[from_python]["payload"] == {"from": "python", "path": "C:\\temp"}
    assert got[ids["text"]]["payload"] == "C:\\temp \\x4869 ✓"
    assert (got[ids["json"]]["task"], got[ids["json"]]["payload"]) == ("send_email", {"to": "a@example.com",
                                                                                     "dir": "C:\\temp"})
    assert got[ids["bytes"]]["payload"] == {"base64": "AAFceP8="}
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
