"""README.md's examples, run as a new user would copy them: every SQL block of "The SQL API"
and every Python block of "Python" (client, "Workers", "Monitoring"), in the order they appear,
against a fresh database, each statement succeeding and, where the README shows a result (in a
comment or the prose next to it), that result. The "Error codes" table is checked both ways
against the extension: every SQLSTATE extension/src raises is listed, and every listed one is
raised (the ones PostgreSQL raises for pgqueue's functions by a statement that does, a deadlock
by two transactions that do).

What the examples leave to the reader is supplied here and nothing else: the ids a dequeue
hands out stand in for the README's "say id 42" (a fresh lease for each call that settles one),
``send_email``/``smtp_send`` are stubs that record their calls, a worker's ``run()`` is stopped
by a SIGINT its first handled message sends, and the user's own table ``signups`` exists.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Block:
    """A fenced code block of the README."""

    line: int  # of the opening fence, 1-based
    section: str  # "## X" or "## X / ### Y"
    lang: str
    code: str


def readme_blocks() -> list[Block]:
    """Return the README's fenced code blocks with the section each is in."""
    lines = README.read_text().split("\n")
    blocks: list[Block] = []
    h2 = h3 = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            h2, h3 = line, ""
        elif line.startswith("### "):
            h3 = line
        elif line.startswith("```"):
            end = i + 1
            while not lines[end].startswith("```"):
                end += 1
            section = f"{h2} / {h3}" if h3 else h2
            blocks.append(Block(i + 1, section, line[3:].strip(), "\n".join(lines[i + 1:end])))
            i = end
        i += 1
    return blocks


def sql_statements(code: str) -> list[str]:
    """Split SQL text into statements at semicolons outside quotes and ``--`` comments.

    A comment after a semicolon lands in the next statement's text; matching statements
    (:func:`_code_of`) ignores comments, so that does not matter.
    """
    statements: list[str] = []
    start = 0
    quote: str | None = None
    i = 0
    while i < len(code):
        c = code[i]
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif code.startswith("--", i):
            i = code.find("\n", i)
            if i < 0:
                break
        elif c == ";":
            statements.append(code[start:i + 1])
            start = i + 1
        i += 1
    assert not _code_of(code[start:]), f"SQL after the last semicolon: {code[start:]!r}"
    return [s.strip() for s in statements if _code_of(s)]


def _code_of(statement: str) -> str:
    """The statement without its comments and surplus whitespace."""
    return " ".join(re.sub(r"--[^\n]*", "", statement).split())


MY_SQL_SECTIONS = ("## The SQL API",)
MY_PY_SECTIONS = ("## Python", "## Python / ### Workers", "## Python / ### Monitoring")


def test_readme_has_the_examples_this_file_runs() -> None:
    blocks = readme_blocks()
    assert len([b for b in blocks if b.lang == "sql" and b.section.startswith(MY_SQL_SECTIONS)]) >= 10
    assert len([b for b in blocks if b.lang == "python" and b.section in MY_PY_SECTIONS]) >= 5
    # the Quick start's commands exist and are executable
    quick = next(b for b in blocks if b.section == "## Quick start")
    for script in re.findall(r"^(scripts/\S+)", quick.code, re.MULTILINE):
        assert (REPO / script).is_file() and (REPO / script).stat().st_mode & 0o111, script


def test_sql_splitter_keeps_quotes_and_comments_together() -> None:
    code = "SELECT 'a;b', \"x;y\";   -- one; two\nSELECT 2; -- tail\n-- lone\n"
    assert [_code_of(s) for s in sql_statements(code)] == ["SELECT 'a;b', \"x;y\";", "SELECT 2;"]


# -- the SQL API ---------------------------------------------------------------------------


@dataclass
class Run:
    """What the SQL examples have done so far: the connection and the README's stand-ins."""

    conn: psycopg.Connection[tuple[Any, ...]]
    lease: tuple[int, int] | None = None  # the message "42" (id, attempts) while leased
    second: int | None = None  # "43"
    peeked: list[int] = field(default_factory=list)
    # the server's clock (epoch ms) just before and just after the statement being checked: what
    # it set from now lies between the two (a later read of the clock, after a stall, would not)
    before: int = 0
    after: int = 0

    def one(self, sql: str, *params: object) -> tuple[Any, ...]:
        row = self.conn.execute(sql, params or None).fetchone()
        assert row is not None
        return row

    def fresh_lease(self) -> tuple[int, int]:
        """Lease the next message of 'emails' as the example's "42": attempts must be 1."""
        mid, attempts = self.one("SELECT id, attempts FROM pgqueue.message_dequeue('emails')")
        assert attempts == 1
        return mid, attempts


def msg(run: Run, mid: int) -> dict[str, Any]:
    cur = run.conn.execute(
        "SELECT content, content_type, dequeue_at, attempts, state, last_error, locked_until "
        "FROM pgqueue.message WHERE id = %s", [mid])
    row = cur.fetchone()
    assert row is not None, f"message {mid} is gone"
    assert cur.description is not None
    return dict(zip([d.name for d in cur.description], row, strict=True))


def scalar(rows: Rows) -> Any:
    assert len(rows) == 1 and len(rows[0]) == 1, rows
    return rows[0][0]


def _returns(expected: object) -> Callable[[Rows, Run], None]:
    def check(rows: Rows, run: Run) -> None:
        value = scalar(rows)
        assert (value, type(value)) == (expected, type(expected))
    return check


def is_id(rows: Rows, run: Run) -> None:
    assert isinstance(scalar(rows), int) and scalar(rows) > 0


def _queue_list(rows: Rows, run: Run) -> None:
    by_name = {r[0]: r for r in rows}
    assert set(by_name) == {"default", "emails"}
    assert by_name["emails"][2] is None  # queue_alter(p_max_attempts => 0) cleared the limit
    assert by_name["emails"][5] == 100000 and by_name["emails"][6] is True


def _stats(rows: Rows, run: Run) -> None:
    assert {r[0] for r in rows} >= {"emails"} and all(r[1:5] == (0, 0, 0, 0) for r in rows)


def _counters(rows: Rows, run: Run) -> None:
    assert len(rows[0]) == 8 and all(r[1:7] == (0,) * 6 for r in rows)


def _content(expected: bytes, content_type: str | None) -> Callable[[Rows, Run], None]:
    def check(rows: Rows, run: Run) -> None:
        m = msg(run, scalar(rows))
        assert (bytes(m["content"]), m["content_type"]) == (expected, content_type)
    return check


def _later(rows: Rows, run: Run) -> None:
    m = msg(run, scalar(rows))
    assert run.before + 3_600_000 <= m["dequeue_at"] <= run.after + 3_600_000


def _priority(rows: Rows, run: Run) -> None:
    assert msg(run, scalar(rows))["dequeue_at"] == -11  # priority_dequeue_at(p) = -1 - p


def _default_queue(rows: Rows, run: Run) -> None:
    name = run.one("SELECT q.name FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
                   "WHERE m.id = %s", scalar(rows))[0]
    assert name == "default"


def _batch_in_order(n: int) -> Callable[[Rows, Run], None]:
    def check(rows: Rows, run: Run) -> None:
        ids = [r[0] for r in rows]
        assert len(ids) == n and ids == sorted(ids)
    return check


def _first_dequeue(rows: Rows, run: Run) -> None:
    # "say id 42, attempts 1": the priority message enqueued above comes first
    assert len(rows) == 1 and rows[0][1] == 1 and bytes(rows[0][2]) == b"urgent"
    run.lease = (rows[0][0], rows[0][1])


def _settled(rows: Rows, run: Run) -> None:
    assert scalar(rows) is True
    run.lease = None


def _batch_complete(rows: Rows, run: Run) -> None:
    assert scalar(rows) == []  # both tokens current: "{}"
    run.lease = run.second = None


def _complete_and_dequeue(rows: Rows, run: Run) -> None:
    fresh = [r for r in rows if not r[3]]
    assert len(fresh) == 1 and not [r for r in rows if r[3]], rows  # no stale acknowledgement
    run.lease = (fresh[0][0], fresh[0][1])
    assert fresh[0][1] == 1


def _heartbeat(rows: Rows, run: Run) -> None:
    assert scalar(rows) is True and run.lease is not None
    m = msg(run, run.lease[0])
    assert run.before + 60_000 <= m["locked_until"] <= run.after + 60_000


def _heartbeat_batch(rows: Rows, run: Run) -> None:
    assert scalar(rows) == [] and run.lease is not None and run.second is not None  # both tokens current
    for mid in (run.lease[0], run.second):
        m = msg(run, mid)
        assert run.before + 60_000 <= m["locked_until"] <= run.after + 60_000
    assert run.one("SELECT pgqueue.message_complete(%s, 1)", run.second) == (True,)  # "43" done with
    run.second = None


def _defer(rows: Rows, run: Run) -> None:
    assert run.lease is not None
    mid = run.lease[0]
    _settled(rows, run)
    m = msg(run, mid)
    assert bytes(m["state"]) == b"checkpoint" and m["attempts"] == 1 and m["locked_until"] is None
    assert run.before + 300_000 <= m["dequeue_at"] <= run.after + 300_000


def _fail(rows: Rows, run: Run) -> None:
    assert run.lease is not None
    mid = run.lease[0]
    _settled(rows, run)
    assert msg(run, mid)["last_error"] == "SMTP timeout"


def _reject(rows: Rows, run: Run) -> None:
    assert run.lease is not None
    mid = run.lease[0]
    _settled(rows, run)
    assert run.one("SELECT last_error FROM pgqueue.dead_letters WHERE id = %s", mid) == ("malformed",)


def _delete_mode(rows: Rows, run: Run) -> None:
    assert rows
    gone = run.one("SELECT count(*) FROM pgqueue.message WHERE id = ANY(%s)", [r[0] for r in rows])
    assert gone == (0,)


def _shipped(rows: Rows, run: Run) -> None:
    assert run.one("SELECT array_agg(order_json) FROM shipped") == ([{"order": 42}],)
    assert run.one("SELECT count(*) FROM pgqueue.message_peek('shipping')") == (0,)


def _peek(rows: Rows, run: Run) -> None:
    assert len(rows) >= 2
    run.peeked = [r[0] for r in rows]


def _cancel(rows: Rows, run: Run) -> None:
    assert [r[0] for r in rows] == sorted(run.peeked[:2])  # the rows removed, by id
    assert run.one("SELECT count(*) FROM pgqueue.message WHERE id = ANY(%s)", run.peeked[:2]) == (0,)


def _keyed_twice(rows: Rows, run: Run) -> None:
    is_id(rows, run)
    again = run.one("SELECT pgqueue.message_create('orders', 'paid', p_group => 'order-42', "
                    "p_key => 'order-42:paid')")
    assert again == (scalar(rows),)  # the key is taken: the live message's id, nothing inserted


def _dead_letters(rows: Rows, run: Run) -> None:
    assert [(r[1], r[2], r[3]) for r in rows] == [("emails", 1, "malformed")]


def _dead_letters_page(rows: Rows, run: Run) -> None:
    assert [(r[1], r[2]) for r in rows] == [(1, "malformed")]


def _schedule_list(rows: Rows, run: Run) -> None:
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        ("nightly", "reports", "0 3 * * *", None, "latest"), ("ping", "ops", None, 60000, "all")]


def _schedule_run(rows: Rows, run: Run) -> None:
    assert [r[0] for r in rows] == ["ping"]  # an interval schedule is due at once; the cron one at 03:00


# A fragment of a statement (comments excluded) -> what the README says it returns. Each
# fragment must match exactly one statement, so an example that changes fails here.
EXPECT: dict[str, Callable[[Rows, Run], None]] = {
    "SELECT * FROM pgqueue.queue_list()": _queue_list,
    "SELECT * FROM pgqueue.queue_stats()": _stats,
    "queue_stats_exact('emails')": _stats,
    "SELECT * FROM pgqueue.queue_counters()": _counters,
    "queue_next_due('emails')": _returns(None),
    "queue_drop('emails_old')": _returns(False),
    "message_create('emails', '{\"to\":\"a@example.com\"}'::bytea)": _content(b'{"to":"a@example.com"}', None),
    "message_create('hello'::bytea)": _default_queue,
    "message_create('emails', 'later',": _later,
    "priority_dequeue_at(10)": _priority,
    "message_create_batch('emails', ARRAY['a','b','c']::bytea[])": _batch_in_order(3),
    "message_create_text('emails', 'C:\\temp\\x41')": _content(b"C:\\temp\\x41", "text/plain; charset=utf-8"),
    "message_create_text('emails', '{\"to\":\"a\"}', NULL, 'application/json')":
        _content(b'{"to":"a"}', "application/json"),
    "message_create_json('emails', '{\"to\":\"a\"}'::jsonb)": _content(b'{"to": "a"}', "application/json"),
    "p_task => 'send_email'": _content(b'{"to": "a"}', "application/json; task=send_email"),
    "SELECT id, attempts, content FROM pgqueue.message_dequeue('emails');": _first_dequeue,
    "message_complete(42, 1)": _settled,
    "message_complete_batch(ARRAY[42, 43]": _batch_complete,
    "message_complete_and_dequeue(ARRAY[42]": _complete_and_dequeue,
    "message_heartbeat(42, 1, 60000)": _heartbeat,
    "message_heartbeat_batch(ARRAY[42, 43]": _heartbeat_batch,
    "message_defer(42, 1,": _defer,
    "message_fail(42, 1, 'SMTP timeout')": _fail,
    "message_reject(42, 1, 'malformed')": _reject,
    "message_dequeue('emails', 100, p_lock_ms => 0)": _delete_mode,
    "COMMIT": _shipped,
    "message_peek('emails', 20)": _peek,
    "message_cancel('emails', ARRAY[42, 43])": _cancel,
    "p_key => 'order-42:paid'": _keyed_twice,
    "p_groups => ARRAY['t1', 't2']": _batch_in_order(2),
    "SELECT id, queue, attempts, last_error, dead_time FROM pgqueue.dead_letters": _dead_letters,
    "(dead_at, id) > (0, 0)": _dead_letters_page,
    "dead_letter_requeue('emails')": _returns(1),
    "dead_letter_purge('emails',": _returns(0),
    "FROM pgqueue.schedule_list()": _schedule_list,
    "SELECT * FROM pgqueue.schedule_run()": _schedule_run,
    "schedule_drop('ping')": _settled,
}

# the calls that act on "message 42": each needs the message leased, with attempts 1
LEASE_CALLS = ("message_complete(42,", "message_complete_batch(ARRAY[42", "message_complete_and_dequeue(ARRAY[42",
               "message_heartbeat(42,", "message_heartbeat_batch(ARRAY[42", "message_defer(42,", "message_fail(42,", "message_reject(42,")


def bind(statement: str, run: Run) -> str:
    """Put the ids this run has for the README's 42 and 43 into a statement."""
    code = _code_of(statement)
    if code.startswith("SELECT id, convert_from(content, 'UTF8') FROM pgqueue.message_cancel"):
        first, second = run.peeked[:2]
        return statement.replace("ARRAY[42, 43]", f"ARRAY[{first}, {second}]")
    if not any(call in code for call in LEASE_CALLS):
        return statement
    if run.lease is None:
        run.lease = run.fresh_lease()
    if "ARRAY[42, 43]" in statement:
        run.second = run.fresh_lease()[0]
        statement = statement.replace("ARRAY[42, 43]", f"ARRAY[{run.lease[0]}, {run.second}]")
    return re.sub(r"(?<=[(\[])42(?=[,\]])", str(run.lease[0]), statement)


def sql_examples() -> list[tuple[Block, str]]:
    return [(b, s) for b in readme_blocks() if b.lang == "sql" and b.section.startswith(MY_SQL_SECTIONS)
            for s in sql_statements(b.code)]


def test_sql_api_examples_run_in_order_with_the_results_shown(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    run = Run(conn)
    used: dict[str, int] = dict.fromkeys(EXPECT, 0)
    for block, statement in sql_examples():
        code = _code_of(statement)
        checks = [key for key in EXPECT if key in code]
        assert len(checks) <= 1, f"README line {block.line}: {code!r} matches {checks}"
        bound = bind(statement, run)
        if checks:
            run.before = run.one("SELECT pgqueue.now_ms()")[0]
        try:
            cur = conn.execute(bound.encode())
        except psycopg.Error as exc:
            pytest.fail(f"README line {block.line} ({block.section}): {code}\nfails: "
                        f"{exc.sqlstate} {exc.diag.message_primary}")
        rows: Rows = cur.fetchall() if cur.description is not None else []
        if checks:
            run.after = run.one("SELECT pgqueue.now_ms()")[0]
        for key in checks:
            used[key] += 1
            try:
                EXPECT[key](rows, run)
            except AssertionError as exc:
                raise AssertionError(f"README line {block.line}: {code}\nreturned {rows}: {exc}") from exc
    missing = [key for key, n in used.items() if n != 1]
    assert not missing, f"README statements not found (or found twice): {missing}"
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_notify_channel_and_folding_as_readme_says(conn: psycopg.Connection[tuple[Any, ...]],
                                                   dsn: str) -> None:
    conn.execute("SELECT pgqueue.queue_create('emails', p_notify => true)")
    conn.execute('LISTEN "pgqueue.emails"')  # as the README writes it
    with psycopg.connect(dsn) as producer:  # one transaction: one notification
        producer.execute("SELECT pgqueue.message_create('emails', 'a')")
        producer.execute("SELECT pgqueue.message_create_batch('emails', ARRAY['b', 'c']::bytea[])")
    # the first as long as a loaded machine takes to deliver it; a second (the transaction's two
    # calls not folded) would come with it, in the same delivery
    got = [(n.channel, n.payload) for n in conn.notifies(timeout=30, stop_after=1)]
    got += [(n.channel, n.payload) for n in conn.notifies(timeout=1)]
    assert got == [("pgqueue.emails", "emails")]


# -- Error codes -----------------------------------------------------------------------------


def error_table() -> dict[str, str]:
    text = README.read_text().split("\n## Error codes\n", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([0-9A-Z]{5})` \| ([^|]+) \|", text, re.MULTILINE)}


def raised_in_source() -> set[str]:
    codes: set[str] = set()
    for path in (REPO / "extension" / "src").rglob("*.sql"):
        codes |= set(re.findall(r"(?:ERRCODE\s*=|SQLSTATE)\s*'([0-9A-Z]{5})'", path.read_text()))
    return codes


# the codes PostgreSQL raises inside pgqueue's functions (or for the calls to them), which the
# table lists too, and a call that raises each (the connection's role is reset after each)
RAISED_BY_POSTGRES = {
    "22008": "SELECT pgqueue.from_epoch(9223372036854775807)",
    "0A000": "SELECT pgqueue.to_epoch('infinity')",
    "22003": "SELECT * FROM pgqueue.message_dequeue('default', 1, '99999999999999999999')",
    # a role without the grants of docs/grants.sql
    "42501": "SET ROLE pg_monitor; SELECT pgqueue.message_create('default', 'x')",
    # a text the database cannot hold (jsonb: \u0000; a LATIN1 database: a character beyond it)
    "22P05": "SELECT pgqueue.message_create_json('default', '{\"a\": \"\\u0000\"}')",
    # a malformed value, read as the call is: JSON that does not parse
    "22P02": "SELECT pgqueue.message_create_json('default', '{\"a\": 1')",
}
# and the one it raises between two transactions, raised by its own test below
RAISED_BY_POSTGRES_IN_RACES = {"40P01": "test_grouped_enqueues_in_opposite_orders_deadlock"}
# and those raised only in a database of another encoding, by the test of another file named here
RAISED_BY_POSTGRES_ELSEWHERE = {
    "22021": ("test_client.py", "test_a_text_that_is_not_utf8_on_a_sql_ascii_database_is_invalid_argument"),
}
# every listed code of the core API, raised the way the table says
TRIGGERS = {
    "PQ001": "SELECT pgqueue.message_create('nope', 'x')",
    "PQ002": "SELECT pgqueue.queue_create('default')",
    "PQ004": "SELECT pgqueue.queue_drop('default')",
    "22004": "SELECT pgqueue.message_create('default', NULL)",
    "22023": "SELECT * FROM pgqueue.message_dequeue('default', 0)",
    "42602": "SELECT pgqueue.queue_create('-bad')",
    "42710": "SELECT pgqueue.schedule_create('s', 'default', 'x', p_every_ms => 60000); "
             "SELECT pgqueue.schedule_create('s', 'default', 'x', p_every_ms => 60000)",
    "-0A000": "SELECT pgqueue.to_epoch('-infinity')",
    **RAISED_BY_POSTGRES,
}


# codes raised and caught inside one function, which never reach a caller (queue_create's
# PQ999 rolls back the subtransaction of its row-lock probe), with the file that catches each
PRIVATE = {"PQ999": "extension/src/functions/queues/queue_create.sql"}


def test_error_codes_table_lists_every_code_raised_and_only_those() -> None:
    listed = set(error_table())
    source = raised_in_source()
    assert source, "no ERRCODE found in extension/src"
    for code, path in PRIVATE.items():  # private only while the raising file catches it
        assert f"WHEN SQLSTATE '{code}'" in (REPO / path).read_text(), code
        assert [p for p in (REPO / "extension" / "src").rglob("*.sql") if code in p.read_text()] == [REPO / path]
    assert source - listed - set(PRIVATE) == set(), "raised but not in README's Error codes"
    assert listed - source - set(RAISED_BY_POSTGRES) - set(RAISED_BY_POSTGRES_IN_RACES) \
        - set(RAISED_BY_POSTGRES_ELSEWHERE) == set(), "listed but never raised"
    for name in RAISED_BY_POSTGRES_IN_RACES.values():
        assert callable(globals().get(name)), name
    for code, (file, name) in RAISED_BY_POSTGRES_ELSEWHERE.items():
        text = (REPO / "tests" / file).read_text()
        assert f"def {name}(" in text and f'"{code}"' in text, (code, file, name)


def test_error_codes_are_the_ones_raised(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    assert {code.lstrip("-") for code in TRIGGERS} <= set(error_table())
    for code, sql in TRIGGERS.items():
        *setup, last = sql.split("; ")
        for stmt in setup:
            conn.execute(stmt.encode())
        with pytest.raises(psycopg.Error) as info:
            conn.execute(last.encode())
        assert info.value.sqlstate == code.lstrip("-"), sql
        conn.execute("RESET ROLE")
    capped = "SELECT pgqueue.queue_create('capped', p_max_size => 1)"
    conn.execute(capped)
    conn.execute("SELECT pgqueue.message_create('capped', 'a')")
    with pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT pgqueue.message_create_batch('capped', ARRAY['b']::bytea[])")
    assert info.value.sqlstate == "PQ003"  # and nothing inserted:
    assert conn.execute("SELECT count(*) FROM pgqueue.message_peek('capped')").fetchone() == (1,)
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    with pytest.raises(psycopg.Error) as info:
        conn.execute("SELECT pgqueue.queue_alter('capped', p_max_size => 5)")
    assert info.value.sqlstate == "PQ009"
    conn.execute("ROLLBACK")


def test_grouped_enqueues_in_opposite_orders_deadlock(dsn: str) -> None:
    """40P01, as the table says: two transactions that each enqueue into two groups of a queue
    with groups, in opposite orders, each holding its first group's lock (docs/locking.md, rule 5);
    PostgreSQL rolls one of them back."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('orders', p_group_concurrency => 1)")
        # the two groups' locks are two stripes (hashtext(group) & 255), not one
        assert admin.execute("SELECT hashtext('a') & 255 <> hashtext('b') & 255").fetchone() == (True,)
    enqueue = "SELECT pgqueue.message_create('orders', 'x', p_group => %s)"
    codes: list[str | None] = []

    def second(conn: psycopg.Connection[tuple[Any, ...]], group: str) -> None:
        try:
            conn.execute(enqueue, (group,))
        except psycopg.Error as exc:
            codes.append(exc.sqlstate)
            conn.rollback()
        else:
            conn.commit()

    with psycopg.connect(dsn) as one, psycopg.connect(dsn) as two:
        one.execute(enqueue, ("a",))
        two.execute(enqueue, ("b",))
        # whichever waits first, the second wait closes the cycle
        waiter = threading.Thread(target=second, args=(one, "b"))
        waiter.start()
        try:
            second(two, "a")
        finally:
            waiter.join(30)
    assert codes == ["40P01"]


# -- Python ------------------------------------------------------------------------------------

# Runs the README's Python blocks in one namespace, in order, as one pasted session would; reads
# them as JSON on stdin and writes one JSON line per block. A block with a worker's run() is
# "armed": the first handler call stops it with SIGINT, as Ctrl-C would (or, if no handler is
# called within 10 s, a timer does, and the block's check fails on its empty calls).
RUNNER = r'''
import faulthandler, json, os, signal, sys, threading
faulthandler.dump_traceback_later(40)  # every thread's stack to stderr before the test's timeout
blocks = json.load(sys.stdin)
calls = []
armed = threading.Event()

def _called(name, value):
    if name != "timeout" or armed.is_set():
        calls.append([name, value])
    if armed.is_set():
        armed.clear()
        os.kill(os.getpid(), signal.SIGINT)

def send_email(payload): _called("send_email", payload)
async def send_email_async(payload): _called("send_email_async", payload)
def smtp_send(**kwargs): _called("smtp_send", kwargs)

namespace = {"__name__": "__readme__", "send_email": send_email, "send_email_async": send_email_async,
             "smtp_send": smtp_send}
for block in blocks:
    print("starting README line %d" % block["line"], flush=True)
    if block["feed"] is not None:  # a message for the worker to handle
        import pgqueue
        with pgqueue.Queue(block["dsn"], "emails") as q:
            q.enqueue(block["feed"])
    ns = dict(namespace) if block["isolated"] else namespace
    calls.clear()
    timer = threading.Timer(10, _called, ["timeout", None])
    timer.daemon = True
    if ".run()" in block["code"]:
        armed.set()
        timer.start()
    exec(compile(block["code"], "README.md line %d" % block["line"], "exec"), ns)
    armed.clear()
    timer.cancel()
    failed = [check for check in block["checks"] if not eval(check, ns)]
    print(json.dumps({"line": block["line"], "calls": calls, "failed": failed}), flush=True)
'''

# what each block must have done, by the first line that identifies it
PY_CHECKS: dict[str, list[str]] = {
    "import psycopg": ["len(ids) == 1000", "lost == []", "len(new) == 10",
                       "[p.id for p in queue.peek(20)] != []"],
}
PY_CALLS: dict[str, Callable[[list[list[Any]]], bool]] = {
    # the priority message is ahead of the others, so receive() gets it
    "import psycopg": lambda calls: calls == [["send_email", {"page": "oncall"}]],
    # receive() in your own transaction, the work in a savepoint
    'with psycopg.connect("dbname=app") as conn:        # your connection, not in autocommit':
        lambda calls: [c[0] for c in calls] == ["send_email"],
    "from pgqueue import Queue, Worker": lambda calls: bool(calls) and calls[0][0] == "send_email",
    "from pgqueue import Tasks": lambda calls: ["smtp_send", {"to": "a@example.com"}] in calls,
    "import asyncio": lambda calls: bool(calls) and calls[0][0] == "send_email_async",
    "from pgqueue import Worker": lambda calls: bool(calls) and calls[0][0] == "send_email",
}


def python_examples() -> list[Block]:
    return [b for b in readme_blocks() if b.lang == "python" and b.section in MY_PY_SECTIONS]


def test_python_examples_run_in_order(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE signups (email text)")  # the user's own table
    blocks = python_examples()
    assert [b.code.split("\n", 1)[0] for b in blocks] == list(PY_CALLS)
    payload = []
    for b in blocks:
        first = b.code.split("\n", 1)[0]
        assert '"dbname=app"' in b.code or "dbname=app" not in b.code
        code = b.code.replace('"dbname=app"', repr(dsn)).replace("port=9470", "port=0")
        payload.append({
            "line": b.line, "code": code, "checks": PY_CHECKS.get(first, []), "dsn": dsn,
            # the async example is a program of its own: its handle must not replace the Worker's
            "isolated": "async def" in code,
            "feed": {"to": "a@example.com"} if ".run()" in code else None,
        })
    try:
        proc = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(payload), capture_output=True,
                              text=True, timeout=50, cwd=REPO, check=False)
    except subprocess.TimeoutExpired as exc:  # which block hung, and every thread's stack at 40 s
        out, err = (x.decode() if isinstance(x, bytes) else x or "" for x in (exc.stdout, exc.stderr))
        pytest.fail(f"the examples ran past 50 s\nstdout:\n{out}\nstderr:\n{err}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["line"] for r in results] == [b.line for b in blocks], proc.stdout
    for b, r in zip(blocks, results, strict=True):
        first = b.code.split("\n", 1)[0]
        assert r["failed"] == [], f"README line {b.line}: {r['failed']}"
        assert PY_CALLS[first](r["calls"]), f"README line {b.line}: handlers called {r['calls']}"
