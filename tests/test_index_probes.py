"""Invariant 1: every dequeue is a bounded index probe.

Each test builds a fixture of 100,000 rows that a dequeue must not pay for (scheduled, leased,
dead, in another queue) or may only touch at its head (a large ready backlog, a backlog of
expired leases), then dequeues with auto_explain loaded (log_nested_statements shows the plans of
the statements inside message_dequeue) and checks, on every call:

* a call that handed out ready messages found them through message_ready_idx, one that handed
  out expired leases through message_leased_idx;
* no Seq Scan, Bitmap scan or full-index walk of pgqueue.message, and no Sort over it;
* the shared buffers of the nested statements, in total and statement by statement, are of the
  same order as on a near-empty queue that hands out the same kind of messages.

Two tests break the setup on purpose (no ready index; a ready index that is not partial) and
show that the same checks then fail: the checks are not vacuous.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from helpers import Call, PlanCapture, index_names, plan_violations, walk
from pgqueue import _sql
from pgqueue.dashboard import _sql as dashboard_sql

pytestmark = pytest.mark.slow

N = 100_000            # rows in each fixture
READY = 1_500          # deliverable messages of the measured queues
EXPIRED = 3            # expired leases of the measured queues: the first calls hand them out,
                       # every later call runs the ready probe too
CALLS = 7              # calls per session: 5 custom plans, then the generic-plan decision
MODES = [("lease", None), ("delete", 0)]
LIMITS = [1, 100]
# A dequeue's nested statements read a handful of buffers per message handed out, on the
# near-empty queue and on the 100k fixture alike (one index level more at most): measured ~15
# for limit 1 and ~500-1,100 for limit 100, in total; each statement is also bounded on its own.
# A scan of a fixture reads every heap page: ~4,000 buffers (100k rows of ~250 bytes), and an
# index walk over 100k non-deliverable entries ~3,000: far above these bounds.
RATIO, SLACK = 3, 40


def _message_rows(queue: str, n: int, *, dequeue_at: str, locked_until: str = "NULL",
                  attempts: str = "0") -> str:
    """INSERT ... SELECT of n messages; the expressions may use g (1..n) and now_ms."""
    return f"""
        INSERT INTO pgqueue.message (queue_id, dequeue_at, locked_until, attempts, created_at, content)
        SELECT q.id, {dequeue_at}, {locked_until}, {attempts}, t.now_ms,
               convert_to(repeat('x', 200) || g, 'UTF8')
          FROM generate_series(1, {n}) g,
               (SELECT id FROM pgqueue.queue WHERE name = '{queue}') q,
               (SELECT pgqueue.now_ms() AS now_ms) t
    """


def add_deliverable(conn: psycopg.Connection[Any], queue: str, kind: str) -> None:
    """A near-empty working queue: READY ready messages ("ready") or READY expired leases
    ("expired"), plus EXPIRED expired leases handed out first."""
    if kind == "ready":
        conn.execute(_message_rows(queue, READY, dequeue_at="t.now_ms - 600000 + g"))
    else:
        conn.execute(_message_rows(queue, READY, dequeue_at="t.now_ms - 900000 + g",
                                   locked_until="t.now_ms - 30000 + g", attempts="1"))
    conn.execute(_message_rows(queue, EXPIRED, dequeue_at="t.now_ms - 900000 + g",
                               locked_until="t.now_ms - 60000 + g", attempts="1"))


@dataclass(frozen=True)
class Fixture:
    """The 100,000 rows added to queue "q" (or next to it), and what the dequeues hand out
    meanwhile ("ready" or "expired" leases); the near-empty queue hands out the same kind, so
    that both run the same statements."""

    kind: str
    statements: tuple[str, ...]


FIXTURES: dict[str, Fixture] = {
    "scheduled": Fixture("ready", (_message_rows("q", N, dequeue_at="t.now_ms + 3600000 + g"),)),
    # leased long ago: if they were in the ready index they would sort before every ready message
    "leased": Fixture("ready", (_message_rows("q", N, dequeue_at="t.now_ms - 86400000 + g",
                                              locked_until="t.now_ms + 3600000 + g", attempts="1"),)),
    "dead_letters": Fixture("ready", (f"""
        INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, attempts, created_at, dead_at,
                                         content, last_error)
        SELECT nextval('pgqueue.message_id_seq'), q.id, t.now_ms - 86400000 + g, 5,
               t.now_ms - 86400000, t.now_ms - 3600000 + g,
               convert_to(repeat('x', 200) || g, 'UTF8'), 'boom'
          FROM generate_series(1, {N}) g,
               (SELECT id FROM pgqueue.queue WHERE name = 'q') q,
               (SELECT pgqueue.now_ms() AS now_ms) t
    """,)),
    "other_queue_backlog": Fixture("ready", (
        "SELECT pgqueue.queue_create('other')",
        _message_rows("other", N, dequeue_at="t.now_ms - 86400000 + g"),
    )),
    # the head of the backlog is handed out: older than the queue's own ready messages
    "ready_backlog": Fixture("ready", (_message_rows("q", N, dequeue_at="t.now_ms - 86400000 + g"),)),
    # consumers crashed: a backlog of expired leases, each still below max_attempts
    "expired_lease_backlog": Fixture("expired", (_message_rows("q", N, dequeue_at="t.now_ms - 86400000 + g",
                                                               locked_until="t.now_ms - 3600000 + g",
                                                               attempts="1"),)),
}


@dataclass
class Measured:
    """CALLS dequeues of one mode and limit in one session, with their nested plans."""

    mode: str
    limit: int
    calls: list[Call]

    @property
    def warm(self) -> list[Call]:
        return self.calls[1:]  # the first call of a session also fills caches

    @property
    def buffers(self) -> int:
        """Worst total shared buffers of the nested statements of a warm call."""
        return max(c.nested_buffers for c in self.warm)

    def per_statement(self) -> dict[str, int]:
        """Worst shared buffers of each nested statement (by its text) over the warm calls."""
        worst: dict[str, int] = {}
        for call in self.warm:
            per: dict[str, int] = {}
            for st in call.nested:
                key = " ".join(st.text.split())
                per[key] = per.get(key, 0) + st.buffers
            for key, n in per.items():
                worst[key] = max(worst.get(key, 0), n)
        return worst


def measure(dsn: str, queue: str, mode: str, lock_ms: int | None, limit: int) -> Measured:
    """Dequeue CALLS times in a new session with auto_explain on; return every call's plans."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        capture = PlanCapture(conn)
        calls = [capture.run("SELECT id, attempts FROM pgqueue.message_dequeue(%s, %s, %s)", (queue, limit, lock_ms))
                 for _ in range(CALLS)]
    for call in calls:
        assert len(call.rows) == limit, f"{queue} {mode} limit {limit}: the fixture ran dry"
    return Measured(mode, limit, calls)


def measure_all(dsn: str, queue: str) -> list[Measured]:
    """Measure every mode and limit, in this order, each in its own session."""
    return [measure(dsn, queue, mode, lock_ms, limit) for limit in LIMITS for mode, lock_ms in MODES]


def plan_problems(conn: psycopg.Connection[Any], m: Measured, *, small_table: bool) -> list[str]:
    """Plan violations of every call. A call that handed out a ready message (attempts now 1)
    must have found it through message_ready_idx; one that handed out an expired lease
    (attempts now 2 or more), through message_leased_idx."""
    indexes = index_names(conn)
    out = []
    for i, call in enumerate(m.calls, 1):
        required = sorted({"message_ready_idx" if r[1] == 1 else "message_leased_idx" for r in call.rows})
        out += [f"{m.mode} limit {m.limit} call {i}: {p}"
                for p in plan_violations(call.nested, indexes, small_table=small_table,
                                         required_indexes=required)]
    return out


def buffer_problems(base: Measured, fixture: Measured) -> list[str]:
    """Buffers of the fixture's dequeue beyond RATIO x the near-empty queue's + SLACK, in total
    and per nested statement."""
    out = []
    bound = RATIO * base.buffers + SLACK
    if fixture.buffers > bound:
        out.append(f"{fixture.mode} limit {fixture.limit}: {fixture.buffers} buffers in all, "
                   f"near-empty queue {base.buffers}, bound {bound}")
    base_per = base.per_statement()
    for text, n in fixture.per_statement().items():
        bound = RATIO * base_per.get(text, 0) + SLACK
        if n > bound:
            out.append(f"{fixture.mode} limit {fixture.limit}: {n} buffers (near-empty queue "
                       f"{base_per.get(text, 0)}, bound {bound}) in: {text[:140]}")
    return out


def message_rows(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = 'pgqueue.message'::regclass").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(params=[None, 5], ids=["unlimited_attempts", "max_attempts"])
def max_attempts(request: pytest.FixtureRequest) -> int | None:
    return request.param  # type: ignore[no-any-return]


def prepare(conn: psycopg.Connection[Any], max_attempts: int | None, kind: str) -> None:
    """Queues "base" (stays near-empty) and "q" (gets the fixture), same settings and contents."""
    for name in ("base", "q"):
        conn.execute("SELECT pgqueue.queue_create(%s, p_max_attempts => %s)", (name, max_attempts))
        add_deliverable(conn, name, kind)
    conn.execute("VACUUM ANALYZE pgqueue.message")


def run_fixture(conn: psycopg.Connection[Any], dsn: str, fixture: Fixture) -> tuple[list[str], list[str]]:
    """Measure "base", add the fixture, measure "q"; return (plan problems, buffer problems)."""
    baseline = measure_all(dsn, "base")
    for stmt in fixture.statements:
        conn.execute(stmt)
    conn.execute("VACUUM ANALYZE pgqueue.message")
    conn.execute("VACUUM ANALYZE pgqueue.dead_letter")
    # Dead letters live in their own table, so with that fixture pgqueue.message is as small as
    # the baseline's and the planner may rightly scan its few pages: there the plan check is
    # that the probes use their indexes and dead letters are never read; buffers say the rest.
    small = message_rows(conn) < N
    plans: list[str] = []
    buffers: list[str] = []
    for base, m in zip(baseline, measure_all(dsn, "q")):
        plans += plan_problems(conn, m, small_table=small)
        buffers += buffer_problems(base, m)
    return plans, buffers


@pytest.mark.parametrize("name", list(FIXTURES))
def test_dequeue_is_an_index_probe(conn: psycopg.Connection[Any], dsn: str, max_attempts: int | None,
                                   name: str) -> None:
    prepare(conn, max_attempts, FIXTURES[name].kind)
    plans, buffers = run_fixture(conn, dsn, FIXTURES[name])
    big = conn.execute("SELECT (SELECT count(*) FROM pgqueue.message) "
                       "+ (SELECT count(*) FROM pgqueue.dead_letter)").fetchone()
    assert big is not None and big[0] >= N
    assert not plans + buffers, "\n".join(plans + buffers)


def test_checks_fail_without_the_ready_index(conn: psycopg.Connection[Any], dsn: str, max_attempts: int | None) -> None:
    """Without message_ready_idx the dequeue scans: the plan and buffer checks must say so."""
    conn.execute("DROP INDEX pgqueue.message_ready_idx")
    prepare(conn, max_attempts, "ready")
    plans, buffers = run_fixture(conn, dsn, FIXTURES["other_queue_backlog"])
    assert any("no index scan using message_ready_idx" in p for p in plans), plans
    assert any("Seq Scan on message" in p or "Bitmap" in p for p in plans), plans
    for mode, _ in MODES:
        for limit in LIMITS:  # every mode and limit reads the whole table
            assert any(b.startswith(f"{mode} limit {limit}: ") for b in buffers), buffers


def test_checks_fail_with_a_ready_index_that_is_not_partial(conn: psycopg.Connection[Any], dsn: str,
                                                            max_attempts: int | None) -> None:
    """A ready index that also holds leased messages still gives an Index Scan using
    message_ready_idx, but the probe wades through 100k leases: the buffer check (and the
    filtered-rows check) must catch it."""
    conn.execute("DROP INDEX pgqueue.message_ready_idx")
    conn.execute("CREATE INDEX message_ready_idx ON pgqueue.message (queue_id, dequeue_at, id)")
    prepare(conn, max_attempts, "ready")
    plans, buffers = run_fixture(conn, dsn, FIXTURES["leased"])
    assert not [p for p in plans if "no index scan" in p], plans
    assert any("filtered out" in p for p in plans), plans
    for mode, _ in MODES:
        for limit in LIMITS:
            assert any(b.startswith(f"{mode} limit {limit}: ") for b in buffers), buffers


#: The calls that act on a leased message by its id, each with (id, attempts) to fill in.
ACKNOWLEDGEMENTS = {
    "complete": "SELECT pgqueue.message_complete(%s::bigint, %s::integer)",
    "complete_batch": "SELECT pgqueue.message_complete_batch(ARRAY[%s]::bigint[], ARRAY[%s]::integer[])",
    "heartbeat": "SELECT pgqueue.message_heartbeat(%s::bigint, %s::integer, 60000)",
    "heartbeat_batch": "SELECT pgqueue.message_heartbeat_batch(ARRAY[%s]::bigint[], ARRAY[%s]::integer[], 60000)",
    "defer": "SELECT pgqueue.message_defer(%s::bigint, %s::integer, NULL)",
    "fail": "SELECT pgqueue.message_fail(%s::bigint, %s::integer, 'boom')",
    "reject": "SELECT pgqueue.message_reject(%s::bigint, %s::integer, 'bad')",
}


@pytest.mark.parametrize("name", list(ACKNOWLEDGEMENTS))
def test_an_acknowledgement_is_a_primary_key_probe_however_stale_the_statistics(
        conn: psycopg.Connection[Any], dsn: str, name: str) -> None:
    """Statistics gathered while nothing was leased say message_leased_idx is empty. A generic
    plan built on them walked that whole index for the id (Index Cond: locked_until IS NOT NULL
    AND id = $1) on every acknowledgement: a cost that grows with the leases in flight and, under
    a held snapshot, with every lease since it began. Each must find its message through
    message_pkey, whatever the statistics say."""
    conn.execute("SELECT pgqueue.queue_create('acks')")
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('acks', "
                 "ARRAY(SELECT '\\x00'::bytea FROM generate_series(1, 3000)))")
    conn.execute("ANALYZE pgqueue.message")  # nothing leased yet
    leased = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('acks', 2000, 60000)").fetchall()
    with psycopg.connect(dsn, autocommit=True) as acker:
        acker.execute("SET plan_cache_mode = force_generic_plan")  # the plan a session keeps
        capture = PlanCapture(acker)
        for msg_id, attempts in leased[:3]:
            call = capture.run(ACKNOWLEDGEMENTS[name], (msg_id, attempts))
            scans = {node.get("Index Name") or node["Node Type"]
                     for st in call.nested for node in walk(st.plan)
                     if node.get("Relation Name") == "message" and node["Node Type"] != "ModifyTable"}
            assert scans == {"message_pkey"}, (name, scans)


def _emptied_table_calls(conn: psycopg.Connection[Any], dsn: str, kind: str) -> list[Call]:
    """Make pgqueue.message and pgqueue.message_key look empty to the planner (a queue that
    drained, then a VACUUM: 0 rows and 0 pages recorded), then run every consumer call eight
    times on a new session (five custom plans, then the generic one the session keeps) with a
    few messages in the table, and return the calls with their plans."""
    for table in GUARDED:
        conn.execute(f"ALTER TABLE pgqueue.{table} SET (autovacuum_enabled = off)")  # a database of its own
    conn.execute("SELECT pgqueue.queue_create('emptied', p_group_concurrency => %s, p_key_window_ms => %s)",
                 (1 if kind == "grouped" else None, 60000 if kind == "keyed" else 0))
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('emptied', "
                 "ARRAY(SELECT '\\x00'::bytea FROM generate_series(1, 200)))")
    conn.execute("DELETE FROM pgqueue.message")
    for table in GUARDED:
        conn.execute(f"VACUUM pgqueue.{table}")
    assert conn.execute("SELECT relpages, reltuples FROM pg_class WHERE oid = 'pgqueue.message'::regclass"
                        ).fetchone() == (0, 0)
    calls: list[Call] = []
    with psycopg.connect(dsn, autocommit=True) as session:
        capture = PlanCapture(session)

        def run(query: str, params: Any = None) -> Call:
            calls.append(capture.run(query, params))
            return calls[-1]

        def take() -> Any:
            rows = run("SELECT id, attempts FROM pgqueue.message_dequeue('emptied', 1, 60000)").rows
            assert rows, "nothing to take"
            return rows[0]

        for i in range(8):
            for j in range(11):
                conn.execute("SELECT pgqueue.message_create('emptied', '\\x00'::bytea, p_group => %s, p_key => %s)",
                             (f"g{i}.{j}" if kind == "grouped" else None, f"k{i}.{j}" if kind == "keyed" else None))
            if kind == "grouped":  # a second message in the first one's group: its completion hands the turn on
                conn.execute("SELECT pgqueue.message_create('emptied', '\\x00'::bytea, p_group => %s)", (f"g{i}.0",))
            run("SELECT pgqueue.message_complete(%s, %s)", take())
            a, a_att = take()
            run("SELECT pgqueue.message_heartbeat(%s, %s, 60000)", (a, a_att))
            beats = run("SELECT pgqueue.message_heartbeat_batch(%s::bigint[], %s::integer[], 60000)",
                        ([a, -1], [a_att, 1]))
            assert beats.rows == [([-1],)], beats.rows
            run("SELECT pgqueue.message_defer(%s, %s, NULL)", take())
            run("SELECT pgqueue.message_fail(%s, %s, 'boom')", take())
            run("SELECT pgqueue.message_reject(%s, %s, 'bad')", take())  # to the dead letters
            (a, a_att), (b, b_att) = take(), take()
            run("SELECT pgqueue.message_complete_batch(ARRAY[%s, %s]::bigint[], ARRAY[%s, %s]::integer[])",
                (a, b, a_att, b_att))
            # more than 8 ids (eight no message has): the rows locked through a probe each, then deleted
            (a, a_att), (b, b_att) = take(), take()
            unknown = list(range(-8, 0))
            big = run("SELECT pgqueue.message_complete_batch(%s::bigint[], %s::integer[])",
                      ([a, *unknown, b], [a_att, *[1] * 8, b_att]))
            assert big.rows == [(unknown,)], big.rows
            run("SELECT id FROM pgqueue.message_complete_and_dequeue(ARRAY[%s]::bigint[], ARRAY[%s]::integer[], "
                "'emptied', 1, 60000)", take())
            last = conn.execute("SELECT max(id) FROM pgqueue.message").fetchone()
            run("SELECT id FROM pgqueue.message_cancel('emptied', ARRAY[%s]::bigint[])", last)
            run("SELECT pgqueue.queue_next_due('emptied')")
            run("SELECT id FROM pgqueue.message_peek('emptied', 3)")
            if kind == "plain":  # (a Spark consumer reads a queue without groups)
                if i == 0:
                    run("SELECT pgqueue.spark_consumer_open('emptied', 'etl')")
                seq = run("SELECT pgqueue.spark_claim('emptied', 'etl', 2)").rows[0][0]
                run("SELECT id FROM pgqueue.spark_claimed('emptied', 'etl', 0, %s)", (seq,))
                run("SELECT pgqueue.spark_ack('emptied', 'etl', %s)", (seq,))
                run("SELECT pgqueue.spark_claim('emptied', 'etl', 1)")
                run("SELECT pgqueue.spark_release('emptied', 'etl')")
            conn.execute("DELETE FROM pgqueue.message")
    return calls


#: The tables whose probes the consumer calls must keep index probes on an emptied table.
GUARDED = ("message", "message_key")


def _index_walk(node: dict[str, Any]) -> bool:
    """An index scan of a guarded table without an Index Cond: a walk of the whole index, which
    enable_seqscan = off gives in place of a Seq Scan where the statement offers no probe (the
    outer side of a join planned for a table of one row), as costly. (A custom plan for an empty
    array, ANY ('{}'), matches nothing: the planner may take any index for it.)"""
    return (node["Node Type"] in ("Index Scan", "Index Only Scan") and "Index Cond" not in node
            and "ANY ('{}'" not in node.get("Filter", ""))


def _bitmap_by_id(node: dict[str, Any]) -> bool:
    """A Bitmap Heap Scan whose bitmaps are all probes of message_pkey by id (id = ANY (...)): as
    bounded as an Index Scan of it, one probe an id. The planner takes it for a few ids on an
    emptied table where the row estimates tip (message_cancel's look-ups, seen from session 81's
    build on); a bitmap of any other index, or of a condition on anything but the ids, is still
    a problem."""
    bitmaps = [n for n in walk(node) if n["Node Type"] == "Bitmap Index Scan"]
    return bool(bitmaps) and all(n.get("Index Name") == "message_pkey"
                                 and n.get("Index Cond", "").startswith("(id = ") for n in bitmaps)


#: A statement each kind of queue must have run (so that the test reached it).
EMPTIED_REACHED = {
    "plain": ["m.claim_id = ANY (v_claims)", "m.claim_id = v_claim.id"],  # Spark's ack and release, claimed rows
    "grouped": ["turn_at = pgqueue._turn_key(m.dequeue_at, true)"],
    "keyed": ["DELETE FROM pgqueue.message_key"],
}
#: ... and every kind: message_complete_batch's two paths (up to 8 ids, more).
EMPTIED_REACHED_BATCH = ["DELETE FROM pgqueue.message m WHERE m.id = v_ids[", "LATERAL (SELECT l.id FROM pgqueue.message l"]


@pytest.mark.parametrize("kind", ["plain", "grouped", "keyed"])
def test_the_consumer_calls_planned_on_an_emptied_table_still_probe_by_index(
        conn: psycopg.Connection[Any], dsn: str, kind: str) -> None:
    """A queue that drained, then a VACUUM (or an ANALYZE of the empty table): pgqueue.message is
    recorded with 0 rows. Planned then, with a page or so of messages in it, the acknowledgement's
    DELETE by id, the other calls' look-ups by id, the hand-off's probes of a group, the
    idempotency keys' clean-up, queue_next_due's and message_peek's first rows, and Spark's
    acknowledgement and release were Seq Scans, and the session's generic plan kept them when the
    queue filled again: 60,000 messages later a lease + complete took 8.6-9.0 ms against 0.7-0.8 on
    a new session (docs/performance.md). Whatever the statistics, each is an index probe, and
    not a walk of a whole index (what enable_seqscan = off alone may give instead)."""
    calls = _emptied_table_calls(conn, dsn, kind)
    scans: dict[str, set[str]] = {}  # top-level call -> the scan nodes of the guarded tables
    texts, problems = [], set()
    for call in calls:
        top = call.top.text.split("pgqueue.", 1)[1].split("(", 1)[0]
        for st in call.nested:
            text = " ".join(st.text.split())
            texts.append(text)
            for node in walk(st.plan):
                if node.get("Relation Name") in GUARDED and node["Node Type"] != "ModifyTable":
                    by_id = node["Node Type"] == "Bitmap Heap Scan" and _bitmap_by_id(node)
                    scans.setdefault(top, set()).add("Index Scan" if by_id else node["Node Type"])
                    if node["Node Type"] in ("Seq Scan", "Bitmap Heap Scan") and not by_id:
                        problems.add(f"{top}: {node['Node Type']} on {node['Relation Name']} in: {text[:150]}")
                    elif _index_walk(node):
                        problems.add(f"{top}: {node['Node Type']} using {node['Index Name']} walks it "
                                     f"({node.get('Index Cond', 'no Index Cond')}; Filter {node.get('Filter')}) "
                                     f"in: {text[:150]}")
    assert not problems, "\n".join(sorted(problems))
    called = {"message_dequeue", "message_complete", "message_heartbeat", "message_heartbeat_batch",
              "message_defer", "message_fail",
              "message_reject", "message_complete_batch", "message_complete_and_dequeue", "message_cancel",
              "queue_next_due", "message_peek"}
    if kind == "plain":
        called |= {"spark_claim", "spark_claimed", "spark_ack", "spark_release"}
    assert {top for top, nodes in scans.items() if nodes & {"Index Scan", "Index Only Scan"}} >= called, scans
    missing = [f for f in EMPTIED_REACHED[kind] + EMPTIED_REACHED_BATCH if not any(f in t for t in texts)]
    assert not missing, missing


def _lease_and_complete(conn: psycopg.Connection[Any], queue: str, batches: int) -> None:
    """Lease and complete 100 messages of queue at a time, a transaction per batch."""
    conn.execute(f"""
        DO $$
        DECLARE v_ids bigint[]; v_att integer[];
        BEGIN
            FOR i IN 1..{batches} LOOP
                SELECT array_agg(d.id), array_agg(d.attempts) INTO v_ids, v_att
                  FROM pgqueue.message_dequeue('{queue}', 100, 30000) d;
                PERFORM pgqueue.message_complete_batch(v_ids, v_att);
                COMMIT;
            END LOOP;
        END $$""")


@contextlib.contextmanager
def _stale_lease_statistics(conn: psycopg.Connection[Any], dsn: str, queue: str,
                            concurrency: int | None) -> Iterator[None]:
    """Build the state of issue 12's lease-mode collapse on a new queue of 60,000 messages (spread
    over 1,000 groups if concurrency is given): leases completed before a held REPEATABLE READ
    snapshot, more completed under it, then a VACUUM, which removes the first and counts the dead
    entries of the others into message_leased_idx's reltuples. The snapshot is held until the
    block ends. Autovacuum stays off the table for the fixture: had it removed the leases
    completed before the hold, the fixture's VACUUM would find nothing to remove, skip the index
    pass and leave reltuples as it was (a flake seen once in CI)."""
    conn.execute("ALTER TABLE pgqueue.message SET (autovacuum_enabled = off)")  # a database of its own
    conn.execute("SELECT pgqueue.queue_create(%s, p_group_concurrency => %s)", (queue, concurrency))
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch(%s, "
                 "ARRAY(SELECT '\\x00'::bytea FROM generate_series(1, 60000)), "
                 "p_groups => CASE WHEN %s THEN ARRAY(SELECT 'g' || g %% 1000 FROM generate_series(1, 60000) g) END)",
                 (queue, concurrency is not None))
    conn.execute("VACUUM ANALYZE pgqueue.message")  # nothing leased yet
    _lease_and_complete(conn, queue, 50)  # died before the hold: the VACUUM removes these
    with psycopg.connect(dsn) as holder:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute("SELECT count(*) FROM pg_class")  # the snapshot, held until the block ends
        _lease_and_complete(conn, queue, 400)
        conn.execute("VACUUM pgqueue.message")
        row = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'pgqueue.message_leased_idx'::regclass"
                           ).fetchone()
        assert row is not None and row[0] >= 30000, row  # the completed leases, counted
        yield


@pytest.mark.parametrize(("lock_ms", "concurrency"), [(30000, None), (0, None), (30000, 1)],
                         ids=["lease", "delete", "grouped_lease"])
def test_the_probes_stay_index_probes_after_a_vacuum_under_a_held_snapshot(
        conn: psycopg.Connection[Any], dsn: str, lock_ms: int, concurrency: int | None) -> None:
    """Issue 12's lease-mode collapse: 35 and 90 s into a 2-minute held snapshot, the run's
    autovacuum removed what had died before the hold and counted the entries of every lease
    completed since, dead but not removable, into message_leased_idx's reltuples. With that
    count, the generic plan of the candidate statement (pgqueue._message_take) probed for the
    first lease by a Bitmap Heap Scan and a Sort, or a Seq Scan and a Sort, of the whole table:
    47-65 ms a call, the rate down to 0.11-0.13x, and still there after the hold. The statement
    runs on a session's first call; it must stay an index probe whatever such statistics say
    (the take runs with enable_seqscan and enable_bitmapscan off). In a queue with message groups
    (1,000 groups, one in flight each), so must the hand-off's probes of each group.
    Each call is made twice: with the session's lease-check mark cleared, so that it runs the
    expired-lease probe, and with the mark set to the clock in the same statement, so that it
    runs the ready probe alone (pgqueue._message_take looks for expired leases at most every
    20 ms while it finds none)."""
    mark = ("SELECT set_config('pgqueue.lease_check_' || q.id, {}, false) AS v FROM pgqueue.queue q "
            "WHERE q.name = 'held'")
    dequeue = ("SELECT d.id, d.attempts FROM ({}) s, "
               "LATERAL pgqueue.message_dequeue('held', 1, %s + 0 * length(s.v)) d")
    with _stale_lease_statistics(conn, dsn, "held", concurrency):
        indexes = index_names(conn)
        with psycopg.connect(dsn, autocommit=True) as consumer:
            capture = PlanCapture(consumer)
            calls, skips, acks = [], [], []
            for _ in range(3):
                for out, value in ((calls, "''"), (skips, "pgqueue.now_ms()::text")):
                    out.append(capture.run(dequeue.format(mark.format(value)), (lock_ms,)))
                    if lock_ms and out[-1].rows:  # in a grouped queue, this hands the group its next turn
                        acks.append(capture.run("SELECT pgqueue.message_complete(%s, %s)", out[-1].rows[0]))
    assert all(len(c.rows) == 1 for c in calls + skips) and all(a.rows == [(True,)] for a in acks)
    texts = [" ".join(st.text.split()) for st in calls[0].nested]
    assert any("_message_first_lease" in t for t in texts), texts  # the candidate statement ran
    ready = "message_ready_idx" if concurrency is None else "message_turn_idx"
    problems = [p for c in calls
                for p in plan_violations(c.nested, indexes, required_indexes=[ready, "message_leased_idx"])]
    problems += [p for c in skips for p in plan_violations(c.nested, indexes, required_indexes=[ready])]
    # (a machine that stalls 20 ms inside one statement makes a skip look: one of three suffices)
    assert any("locked_until IS NOT NULL" not in " ".join(st.text for st in c.nested) for c in skips), \
        "no call ran the ready probe alone"
    problems += [p for a in acks for p in plan_violations(a.nested, indexes, required_indexes=["message_pkey"])]
    if concurrency is not None:  # the hand-off ran, and was checked
        assert any("turn_at = pgqueue._turn_key" in " ".join(st.text.split()) for a in acks for st in a.nested)
    assert not problems, "\n".join(problems)


def test_the_other_readers_stay_index_probes_after_a_vacuum_under_a_held_snapshot(
        conn: psycopg.Connection[Any], dsn: str) -> None:
    """The same state as above (leases completed under a held snapshot, then a VACUUM that
    counted their dead entries into message_leased_idx's reltuples), for the readers other than
    message_dequeue that probe both indexes: queue_next_due (the worker's sleep), message_peek
    and a Spark claim with a starting position (pgqueue._spark_take_from). Each must still find
    the first lease and the first ready message by an ordered index walk."""
    with _stale_lease_statistics(conn, dsn, "held", None):
        indexes = index_names(conn)
        with psycopg.connect(dsn, autocommit=True) as reader:
            capture = PlanCapture(reader)
            # CALLS calls each: the custom plans, then the plan cache's generic-plan decision
            calls = {name: [capture.run(query) for _ in range(CALLS)] for name, query in [
                ("queue_next_due", "SELECT pgqueue.queue_next_due('held')"),
                ("message_peek", "SELECT id FROM pgqueue.message_peek('held', 5)"),
                ("spark_claim", "SELECT pgqueue.spark_claim('held', 'etl', 5, NULL, 0)")]}
    assert all(c.rows[0][0] is not None for c in calls["queue_next_due"] + calls["spark_claim"])
    assert all(len(c.rows) == 5 for c in calls["message_peek"])
    problems = [f"{name}: {p}" for name, cs in calls.items() for c in cs
                for p in plan_violations(c.nested, indexes, required_indexes=["message_ready_idx"],
                                         untouched=())]
    probed = {name: {node.get("Index Name") for c in cs for st in c.nested for node in walk(st.plan)}
              for name, cs in calls.items()}
    problems += [f"{name}: message_leased_idx not probed ({sorted(map(str, used))})"
                 for name, used in probed.items() if "message_leased_idx" not in used]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("concurrency", [None, 1], ids=["plain", "grouped"])
def test_a_session_whose_takes_find_nothing_still_moves_its_hints_under_a_held_snapshot(
        conn: psycopg.Connection[Any], dsn: str, concurrency: int | None) -> None:
    """A session that starts during a held snapshot probes from the bottom of the ready index
    (message_turn_idx in a grouped queue) over every entry the hold keeps, one heap fetch each.
    When its take then finds nothing, because another consumer has locked every ready message
    its probe saw (with 100 groups under issue 12's hold, the others leased every ready turn in
    the 45-78 ms of such a walk), the call used to keep no candidate: it had no xid to confirm
    one with, so the session walked from the bottom again at every call. It now assigns an xid
    itself when its probe found a ready row that its take did not get: once the transaction
    holding that row up has been set aside (200 ms), the hints move past the dead entries,
    though the session still takes nothing. A poll of a queue with nothing ready stays read-only."""
    conn.execute("SELECT pgqueue.queue_create('race', p_group_concurrency => %s)", (concurrency,))
    # (1 kB a message: a few rows a page, so that the walk from the bottom visits many pages)
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('race', "
                 "ARRAY(SELECT convert_to(repeat('x', 1000), 'UTF8') FROM generate_series(1, 1501)), "
                 "p_groups => CASE WHEN %s THEN array_fill('g'::text, ARRAY[1501]) END)",
                 (concurrency is not None,))
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn) as locker, \
         psycopg.connect(dsn, autocommit=True) as bulk:
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute("SELECT count(*) FROM pg_class")  # the snapshot, held (issue 12's case a)
        for _ in range(1500):  # (one at a time: a group of one has one turn at a time)
            assert bulk.execute("SELECT count(*) FROM pgqueue.message_dequeue('race', 1, 0)").fetchone() == (1,)
        # the last message, taken in a transaction that stays open
        assert locker.execute("SELECT count(*) FROM pgqueue.message_dequeue('race', 1, 0)").fetchone() == (1,)
        with psycopg.connect(dsn, autocommit=True) as fresh:
            capture = PlanCapture(fresh)

            def poll() -> Call:
                return capture.run("SELECT d.id FROM pgqueue.message_dequeue('race', 1, 0) d")

            first = poll()
            time.sleep(0.25)  # the locker holds the candidate up: set aside after 200 ms
            settle = poll()
            later = [poll() for _ in range(3)]
            assert all(not c.rows for c in [first, settle, *later])
            locker.rollback()
            time.sleep(0.03)
            found = poll()  # the message the locker gave back lies at or above the hints
        # an empty poll of a queue with nothing ready: no xid (the read-only poll)
        with psycopg.connect(dsn) as idle:
            assert idle.execute("SELECT count(*) FROM pgqueue.message_dequeue('race', 1, 0)").fetchone() == (0,)
            assert idle.execute("SELECT pg_current_xact_id_if_assigned()").fetchone() == (None,)
    assert len(found.rows) == 1
    # (measured: 465-469 buffers for the first poll, 235-238 for the one that settles, then 13-15;
    # without the xid of the empty take, 681 for each later poll)
    walk_from_bottom = first.nested_buffers
    assert walk_from_bottom > 200, walk_from_bottom
    assert max(c.nested_buffers for c in later) * 10 < walk_from_bottom, \
        (walk_from_bottom, settle.nested_buffers, [c.nested_buffers for c in later])


DEAD_PAGES = {  # the queries that read a page of one queue's dead letters, and their parameters
    "client first page": (_sql.DEAD_LETTERS, {}),
    "client page after": (_sql.DEAD_LETTERS_AFTER, {"dead_at": 10_000, "id": 10_000}),
    "dashboard first page": (dashboard_sql.DEAD_LETTERS_SHOWN, {"shown": 100}),
    "dashboard page after": (dashboard_sql.DEAD_LETTERS_SHOWN_AFTER, {"shown": 100, "dead_at": 10_000, "id": 10_000}),
    "dashboard page before": (dashboard_sql.DEAD_LETTERS_SHOWN_BEFORE, {"shown": 100, "dead_at": 30_000, "id": 30_000}),
}


@pytest.mark.parametrize("plan_cache_mode", ["force_custom_plan", "force_generic_plan"])
@pytest.mark.parametrize("name", list(DEAD_PAGES))
def test_a_page_of_dead_letters_is_an_index_walk(conn: psycopg.Connection[Any], name: str,
                                                   plan_cache_mode: str) -> None:
    """A page of one queue's dead letters (the client's ``dead_letters`` and the dashboard's
    pages) walks dead_letter_queue_idx in (dead_at, id) order and stops at the page's end: no
    Sort, and the scan of pgqueue.dead_letter returns no more rows than the page. Filtered on
    the view's queue name (before session 46) PostgreSQL sorted all of the queue's letters past
    the cursor (78 ms at 200,000 letters, against 0.14 ms)."""
    conn.execute("SELECT pgqueue.queue_create('dead_a'), pgqueue.queue_create('dead_b')")
    conn.execute("INSERT INTO pgqueue.dead_letter (id, queue_id, dequeue_at, content, attempts, created_at, dead_at) "
                 "SELECT g, q.id, 0, 'x', 3, 0, g FROM generate_series(1, 40000) g "
                 "JOIN pgqueue.queue q ON q.name = CASE WHEN g % 2 = 0 THEN 'dead_a' ELSE 'dead_b' END")
    conn.execute("ANALYZE pgqueue.dead_letter")
    query, extra = DEAD_PAGES[name]
    conn.execute(f"SET plan_cache_mode = {plan_cache_mode}")
    params = {"queue": "dead_a", "limit": 50, **extra}
    # The plan of the prepared statement as it ran (auto_explain): an EXPLAIN with parameters
    # plans with their values whatever plan_cache_mode says, so it never showed the generic plan
    # (a review of the tests)
    call = PlanCapture(conn).run(query, params, prepare=True)
    assert len(call.rows) == 50 and {r[1] for r in call.rows} == {"dead_a"}
    plan = call.top.plan
    nodes = list(walk(plan))
    assert not [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")], plan
    scans = [n for n in nodes if n.get("Relation Name") == "dead_letter"]
    assert [n.get("Index Name") for n in scans] == ["dead_letter_queue_idx"], plan
    assert scans[0]["Actual Rows"] <= 50, plan
    # the plan is the one asked for: a custom plan compares with the queue's name, a generic one
    # with a parameter
    conditions = " ".join(str(n.get("Index Cond", "")) + str(n.get("Filter", "")) for n in nodes)
    assert ("'dead_a'" in conditions) == (plan_cache_mode == "force_custom_plan"), conditions
