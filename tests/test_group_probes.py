"""Message groups (issue 14): every grouped dequeue is a bounded index probe too.

The method of tests/test_index_probes.py, for queues with group_concurrency 1 and 0: a near-empty
grouped queue "base" and a queue "q" with the same deliverable messages (READY groups of one
message, each with its turn) plus a fixture of 100,000 rows, dequeued with auto_explain on. On
every call the messages handed out must come through message_turn_idx (or message_leased_idx),
no statement may scan pgqueue.message or sort it, and the buffers of the nested statements
(the probe, the lease or delete, the next turn of each group handed out) stay of the same order
as on the near-empty queue. The fixtures are the shapes a scan of groups would pay for: 100k
groups whose turn comes later, one group of 100k messages (whose next turn each call hands on),
and 50k groups whose turn is in flight or scheduled, each with a message waiting behind it.
"""

from __future__ import annotations

import re
from pathlib import Path

from typing import Any

import psycopg
import pytest

from helpers import PlanCapture, index_names, plan_violations, walk
from test_index_probes import Measured

pytestmark = pytest.mark.slow

N = 100_000
READY = 1_500
CALLS = 7
MODES = [("lease", None), ("delete", 0)]
LIMITS = [1, 100]
RATIO, SLACK = 3, 40


def rows(queue: str, n: int, *, group: str, dequeue_at: str, turn_at: str = "NULL",
         locked_until: str = "NULL", attempts: str = "0") -> str:
    """INSERT ... SELECT of n messages of a grouped queue; expressions may use g (1..n) and now_ms."""
    return f"""
        INSERT INTO pgqueue.message (queue_id, dequeue_at, locked_until, attempts, created_at, content,
                                     group_key, turn_at)
        SELECT q.id, {dequeue_at}, {locked_until}, {attempts}, t.now_ms,
               convert_to(repeat('x', 200) || g, 'UTF8'), {group}, {turn_at}
          FROM generate_series(1, {n}) g,
               (SELECT id FROM pgqueue.queue WHERE name = '{queue}') q,
               (SELECT pgqueue.now_ms() AS now_ms) t
    """


# Each fixture keeps the invariants the functions keep: turn_at (epoch us) >= dequeue_at (ms), one
# message at most of a group waiting with its turn, the others behind it (turn_at NULL).
FIXTURES: dict[str, tuple[str, ...]] = {
    # 100k groups, each with its turn, after the deliverable ones
    "100k_groups": (rows("q", N, group="'g' || g", dequeue_at="t.now_ms - 500000 + g",
                         turn_at="(t.now_ms - 500000 + g) * 1000"),),
    # one group of 100k: its first message has the turn first, so every call hands on the next turn
    "one_huge_group": (rows("q", 1, group="'big'", dequeue_at="t.now_ms - 86400000",
                            turn_at="(t.now_ms - 900000) * 1000"),
                       rows("q", N - 1, group="'big'", dequeue_at="t.now_ms - 86400000 + g")),
    # 50k groups whose turn is in flight (leased for an hour), a message waiting behind each
    "turns_in_flight": (rows("q", N // 2, group="'f' || g", dequeue_at="t.now_ms - 86400000 + g",
                             turn_at="(t.now_ms - 86400000 + g) * 1000", locked_until="t.now_ms + 3600000 + g",
                             attempts="1"),
                        rows("q", N // 2, group="'f' || g", dequeue_at="t.now_ms - 86400000 + g")),
    # 50k groups whose turn is scheduled in an hour, a message waiting behind each
    "turns_scheduled": (rows("q", N // 2, group="'s' || g", dequeue_at="t.now_ms + 3600000 + g",
                             turn_at="(t.now_ms + 3600000 + g) * 1000"),
                        rows("q", N // 2, group="'s' || g", dequeue_at="t.now_ms + 3600000 + g")),
}


def measure(dsn: str, queue: str, lock_ms: int | None, limit: int) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        capture = PlanCapture(conn)
        calls = [capture.run("SELECT id, attempts FROM pgqueue.message_dequeue(%s, %s, %s)", (queue, limit, lock_ms))
                 for _ in range(CALLS)]
    for call in calls:
        assert len(call.rows) == limit, f"{queue} limit {limit}: the fixture ran dry"
    return calls


def per_statement(calls: list[Any]) -> dict[str, int]:
    return Measured("", 0, calls).per_statement()


@pytest.mark.parametrize("concurrency", [1, 0])
@pytest.mark.parametrize("name", list(FIXTURES))
def test_grouped_dequeue_is_an_index_probe(conn: psycopg.Connection[Any], dsn: str, name: str,
                                           concurrency: int) -> None:
    for queue in ("base", "q"):
        conn.execute("SELECT pgqueue.queue_create(%s, p_group_concurrency => %s)", (queue, concurrency))
        conn.execute(rows(queue, READY, group="'d' || g", dequeue_at="t.now_ms - 600000 + g",
                          turn_at="(t.now_ms - 600000 + g) * 1000"))
    conn.execute("VACUUM ANALYZE pgqueue.message")
    baseline = [measure(dsn, "base", lock_ms, limit) for limit in LIMITS for _, lock_ms in MODES]
    for stmt in FIXTURES[name]:
        conn.execute(stmt)
    conn.execute("VACUUM ANALYZE pgqueue.message")
    indexes = index_names(conn)
    problems: list[str] = []
    i = 0
    for limit in LIMITS:
        for mode, lock_ms in MODES:
            calls = measure(dsn, "q", lock_ms, limit)
            base = baseline[i]
            i += 1
            for n, call in enumerate(calls, 1):
                problems += [f"{mode} limit {limit} call {n}: {p}"
                             for p in plan_violations(call.nested, indexes, required_indexes=["message_turn_idx"])]
            bound = RATIO * max(c.nested_buffers for c in base[1:]) + SLACK
            worst = max(c.nested_buffers for c in calls[1:])
            if worst > bound:
                problems.append(f"{mode} limit {limit}: {worst} buffers in all, bound {bound}")
            base_per = per_statement(base)
            for text, n in per_statement(calls).items():
                if n > RATIO * base_per.get(text, 0) + SLACK:
                    problems.append(f"{mode} limit {limit}: {n} buffers (near-empty {base_per.get(text, 0)}) "
                                    f"in: {text[:140]}")
    assert not problems, "\n".join(problems)
    if name == "one_huge_group":
        # the huge group got its turns one at a time: never more than one waiting with it
        waiting = conn.execute("SELECT count(*) FROM pgqueue.message WHERE group_key = 'big' "
                               "AND turn_at IS NOT NULL AND locked_until IS NULL").fetchone()
        assert waiting is not None and waiting[0] <= 1


#: The calls that hand a group its next turn or decide whether a new message gets one, each
#: running pgqueue._message_group_room's probes under the group's lock.
TURN_DECISIONS = {
    "complete": "SELECT pgqueue.message_complete(%s::bigint, %s::integer)",
    "enqueue": "SELECT pgqueue.message_create('stale', '\\x00'::bytea, p_group => %s)",
}


@pytest.mark.parametrize("concurrency", [1, 2])
@pytest.mark.parametrize("name", list(TURN_DECISIONS))
def test_a_turn_decision_probes_its_group_however_stale_the_statistics(
        conn: psycopg.Connection[Any], dsn: str, name: str, concurrency: int) -> None:
    """Statistics gathered while nothing was leased say message_leased_idx is empty. A generic
    plan built on them counted a group's messages in flight by walking the whole queue's range of
    message_leased_idx (Index Cond: queue_id, Filter: the group): a cost that grew with every
    lease in flight in the queue, paid on every complete, fail or enqueue of a grouped message.
    Whatever the statistics say, the room probes must stay on the group's own entries of
    message_group_turn_idx. (A queue of group concurrency 1 has a hand-off statement of its own.)"""
    conn.execute("SELECT pgqueue.queue_create('stale', p_group_concurrency => %s)", (concurrency,))
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('stale', "
                 "ARRAY(SELECT '\\x00'::bytea FROM generate_series(1, 6000)), "
                 "p_groups => ARRAY(SELECT 'g' || (i % 3000) FROM generate_series(1, 6000) i))")
    conn.execute("ANALYZE pgqueue.message")  # nothing leased yet
    leased = conn.execute("SELECT d.id, d.attempts, m.group_key FROM pgqueue.message_dequeue('stale', 2500, 600000) d "
                          "JOIN pgqueue.message m ON m.id = d.id").fetchall()
    assert len(leased) == 2500
    with psycopg.connect(dsn, autocommit=True) as session:
        session.execute("SET plan_cache_mode = force_generic_plan")  # the plan a session keeps
        capture = PlanCapture(session)
        for msg_id, attempts, group in leased[:3]:
            args = (msg_id, attempts) if name == "complete" else (group,)
            call = capture.run(TURN_DECISIONS[name], args)
            room = [st for st in call.nested if "turn_at IS NOT NULL" in st.text]
            assert room, [st.text[:80] for st in call.nested]
            for st in room:
                scans = {node.get("Index Name") or node["Node Type"] for node in walk(st.plan)
                         if node.get("Relation Name") == "message"}
                # the hand-off (pgqueue._message_group_next) holds the room probes in the WHERE
                # of the UPDATE that gives the turn: the row by id, the group's first waiting
                if st.text.lstrip().startswith("UPDATE"):
                    scans -= {"ModifyTable", "message_pkey", "message_group_wait_idx"}
                assert scans == {"message_group_turn_idx"}, (name, scans)


#: The ordered hand-off (a queue of group concurrency 1): pgqueue._message_left's UPDATE, which
#: message_dequeue (one message, delete mode) and message_complete run themselves to save the
#: call (docs/performance.md, "The ordered hand-off without a call"). The plan tests above see
#: the copies only through the calls they run; this keeps the three the same statement.
HAND_OFF_COPIES = ["_message_left", "message_dequeue", "message_complete"]


def _hand_off(name: str) -> str:
    source = (Path(__file__).resolve().parent.parent / "extension/src/functions/messages"
              / f"{name}.sql").read_text()
    found = re.findall(r"UPDATE pgqueue\.message m\s+SET turn_at = .*?ORDER BY t\.turn_at LIMIT 1\) IS NULL",
                       source, re.S)
    assert len(found) == 1, (name, len(found))
    text = re.sub(r"OPERATOR\(pg_catalog\.([=<>]+)\)", r"\1", found[0])
    text = re.sub(r"--[^\n]*", "", text)
    text = re.sub(r"\b(p_queue_id|v_queue_id)\b", "QUEUE", text)
    text = re.sub(r"\b(p_group|v_group_key|v_group)\b", "GROUP", text)
    text = re.sub(r"\b(p_floor|v_floor)\b", "FLOOR", text)
    text = re.sub(r"\b(p_pre|v_pre)\b", "PRE", text)
    text = text.replace("pg_catalog.", "")
    text = re.sub(r"\(\s+", "(", text)
    return " ".join(text.split())


def test_the_ordered_hand_off_is_one_statement_in_its_three_places() -> None:
    statements = {name: _hand_off(name) for name in HAND_OFF_COPIES}
    assert len(set(statements.values())) == 1, statements
    text = statements["_message_left"]
    assert "ORDER BY w.dequeue_at, w.id" in text
    # the room's probe of the group's turns starts at the session's floor of the group's turn
    # keys (pgqueue._group_floor_get), for the stripe read with the leaving message
    assert ("ELSE (SELECT t.turn_at FROM pgqueue.message t WHERE t.queue_id = QUEUE AND t.group_key = GROUP "
            "AND t.turn_at IS NOT NULL AND t.turn_at >= (SELECT pgqueue._group_floor_get(QUEUE, GROUP, v_seen)) "
            "ORDER BY t.turn_at LIMIT 1) IS NULL") in text
    # the probe of the waiting messages starts at the group's wait floor, and the room's probe
    # is skipped while it holds (pgqueue._wait_floor_next)
    assert "(w.dequeue_at, w.id) >= (CASE WHEN FLOOR[6] = v_seen THEN FLOOR[1]" in text
    assert "AND CASE WHEN FLOOR[6] = v_seen THEN (SELECT pgqueue._wait_floor_ok(FLOOR, QUEUE)) ELSE (SELECT t.turn_at" in text


def _hand_off_buffers(call: Any) -> int:
    """The buffers of a call's ordered hand-off (the UPDATE that gives the group's next turn)."""
    found = [st.buffers for st in call.nested if "wait_floor = pgqueue._wait_floor_next" in st.text]
    assert len(found) == 1, [" ".join(st.text.split())[:80] for st in call.nested]
    return found[0]


@pytest.mark.parametrize("mode", ["delete", "lease"])
def test_the_ordered_hand_off_stays_flat_under_a_held_snapshot(
        conn: psycopg.Connection[Any], dsn: str, mode: str) -> None:
    """Under a held snapshot every turn handed on leaves the entry of the message's old version
    (no turn yet) in message_group_wait_idx, where it can be neither removed nor marked dead, and
    every message that had the turn leaves its entries in message_group_turn_idx: a hand-off that
    probed the group from its first entry visited all of them, one heap fetch each, and with 10
    groups a grouped dequeue fell to 0.11x its rate (docs/performance.md, "Message groups under
    a held snapshot"). The hand-off starts at the group's wait floor instead, carried on the
    message with the turn (pgqueue._wait_floor_next), and skips the probe of the group's turns
    while the floor holds: its buffers after 1,500 deliveries of the group under a REPEATABLE
    READ snapshot that read pgqueue.queue (issue 12's case c) stay those of the first ones.
    The deliveries come from another session than the measured calls: the floor is the
    group's, not a session's. Delete mode: message_dequeue's hand-off. Lease + complete, the
    lease and the completion in transactions of their own: message_complete's hand-off, which
    takes its new candidates with the stripe its lease recorded (pgqueue._wait_floor_leased)."""
    conn.execute("SELECT pgqueue.queue_create('floor', p_group_concurrency => 1)")
    # (1 kB a message: a few rows a page, so that each entry visited is a page of its own)
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('floor', "
                 "ARRAY(SELECT convert_to(repeat('x', 1000), 'UTF8') FROM generate_series(1, 3000)), "
                 "p_groups => array_fill('g'::text, ARRAY[3000]))")

    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as leaser:
        def deliver(run: Any) -> Any:
            """One delivery of the group's message with the turn, which hands it on: the call
            with the hand-off (the lease, in lease mode, from another session)."""
            if mode == "delete":
                return run("SELECT d.id FROM pgqueue.message_dequeue('floor', 1, 0) d", ())
            (got,) = leaser.execute("SELECT d.id, d.attempts "
                                    "FROM pgqueue.message_dequeue('floor', 1, 60000) d").fetchall()
            return run("SELECT pgqueue.message_complete(%s, %s)", got)

        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute("SELECT count(*) FROM pgqueue.queue")  # the snapshot and its lock, held
        with psycopg.connect(dsn, autocommit=True) as measured, \
             psycopg.connect(dsn, autocommit=True) as bulk:
            capture = PlanCapture(measured)
            first = [_hand_off_buffers(deliver(capture.run)) for _ in range(3)]
            for _ in range(1500):
                deliver(lambda q, a: bulk.execute(q, a).fetchall())
            later = [_hand_off_buffers(deliver(capture.run)) for _ in range(3)]
    left = conn.execute("SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
                        "WHERE q.name = 'floor'").fetchone()
    assert left == (3000 - 1506,)
    # (without the floor: 20 buffers a hand-off at first and 462-465 after the 1,500
    # deliveries in delete mode, 20-23 and 244-249 in lease mode; measured)
    assert max(later) <= 2 * max(first) + 20, (first, later)


def _room_buffers(call: Any) -> int:
    """The buffers of the probes of a group's turns in a call: the room's statement
    (pgqueue._message_group_room) and the UPDATEs that hold the room (the hand-offs)."""
    return sum(st.buffers for st in call.nested if "t.turn_at IS NOT NULL" in st.text
               or "m.turn_at IS NOT NULL AND m.turn_at >= (SELECT v_floor)" in st.text)


@pytest.mark.parametrize("mode", ["delete", "lease"])
def test_a_group_its_consumers_keep_up_with_stays_flat_under_a_held_snapshot(
        conn: psycopg.Connection[Any], dsn: str, mode: str) -> None:
    """A group its consumers keep up with holds one message or none: each enqueue finds it
    empty and asks whether its message may have the turn at once (pgqueue._message_group_room),
    and each delivery's hand-off finds nothing waiting and looks again under the group's lock.
    Under a held snapshot message_group_turn_idx keeps an entry for every message of the group
    delivered since the hold began, and those probes walked all of them: with 10 groups at 1,000
    messages a second the producer's latency rose from 0.4 ms to 700 ms-2.5 s over a 40-s hold
    (docs/performance.md). They start at the session's floor of the group's turn keys instead
    (pgqueue._group_floor_get), kept when a probe under the group's lock found the group empty:
    the producer's probes and the consumer's after 2,000 deliveries of the group under a
    REPEATABLE READ snapshot that read pgqueue.queue (issue 12's case c) stay those of the first
    ones. The producer and the consumer are sessions of their own, as in production."""
    conn.execute("SELECT pgqueue.queue_create('keepup', p_group_concurrency => 1)")
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as producer, \
         psycopg.connect(dsn, autocommit=True) as consumer:
        produce, consume = PlanCapture(producer), PlanCapture(consumer)

        def cycle(measured: bool) -> tuple[int, int]:
            """One message into the empty group and its delivery: the probes' buffers."""
            made = produce.run("SELECT pgqueue.message_create('keepup', '\\x01'::bytea, p_group => 'g')") \
                if measured else None
            if not measured:
                producer.execute("SELECT pgqueue.message_create('keepup', '\\x01'::bytea, p_group => 'g')")
            run = consume.run if measured else (lambda q, a=None: consumer.execute(q, a).fetchall())
            if mode == "delete":
                got = run("SELECT d.id FROM pgqueue.message_dequeue('keepup', 1, 0) d")
            else:
                leased = consumer.execute("SELECT d.id, d.attempts FROM pgqueue.message_dequeue('keepup', 1, 60000) d").fetchall()
                assert len(leased) == 1
                got = run("SELECT pgqueue.message_complete(%s, %s)", leased[0])
            if not measured:
                return 0, 0
            assert len(got.rows) == 1 and made is not None
            return _room_buffers(made), _room_buffers(got)

        for _ in range(3):
            cycle(False)  # (the sessions' plans and floors)
        holder.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        holder.execute("SELECT count(*) FROM pgqueue.queue")  # the snapshot and its lock, held
        first = [cycle(True) for _ in range(3)]
        for _ in range(2000):
            cycle(False)
        later = [cycle(True) for _ in range(3)]
    assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)
    # Measured (enqueue's probes, delivery's): with the floor, delete mode 4 and 10 at first, 6
    # and 13 after; lease mode 4 and 14-16, then 6-10 and 20-32 (an enqueue keeps a new floor at
    # most every 10 ms, a hand-off every 20: the probes walk the entries of that long). Without
    # it (pgqueue._group_floor_at answering NULL): delete mode 4 and 8, then 68 and 104; lease
    # mode 4 and 14, then 602-606 and 1,210-1,226. Those grow with the deliveries.
    for side in (0, 1):
        assert max(c[side] for c in later) <= 2 * max(c[side] for c in first) + 30, (side, first, later)


def group_floor(session: psycopg.Connection[Any], queue: str, group: str) -> str | None:
    """The floor of ``group``'s turn keys that ``session`` keeps for ``queue`` (its setting,
    ``stripe/floor/xid/group``; None or '' when it keeps none)."""
    found = session.execute("SELECT current_setting('pgqueue.group_floor_' || q.id || '_' || (hashtext(%s) & 255), true) "
                            "FROM pgqueue.queue q WHERE q.name = %s", (group, queue)).fetchone()
    assert found is not None, f"no queue {queue!r}"
    return found[0]  # type: ignore[no-any-return]


def test_a_turn_given_below_a_sessions_group_floor_is_still_seen(conn: psycopg.Connection[Any], dsn: str) -> None:
    """A session's floor of a group's turn keys holds only while the queue's lock stripe is
    where it was: a message enqueued with an explicit dequeue_at below the clock (a priority)
    into the empty group gets the turn with that low key, below the floor another session
    kept, and advances the stripe (trigger message_placed_low). That session's next enqueue
    into the group must see it: its message waits behind it, and the group has one message
    with the turn. (With the stripe not checked, the second enqueue probed from the floor,
    missed the priority message and gave its own the turn too: two in flight with a limit of
    one; shown with the check removed.)"""
    conn.execute("SELECT pgqueue.queue_create('lowturn', p_group_concurrency => 1)")
    with psycopg.connect(dsn, autocommit=True) as producer, psycopg.connect(dsn, autocommit=True) as other:
        producer.execute("SELECT pgqueue.message_create('lowturn', 'a'::bytea, p_group => 'g')")
        assert len(other.execute("SELECT id FROM pgqueue.message_dequeue('lowturn', 1, 0)").fetchall()) == 1
        producer.execute("SELECT pgqueue.message_create('lowturn', 'b'::bytea, p_group => 'h')")  # (another group)
        kept = group_floor(producer, "lowturn", "g")
        assert kept is not None and kept.endswith("/g"), kept  # the floor is there
        other.execute("SELECT pgqueue.message_create('lowturn', 'priority'::bytea, "
                      "p_dequeue_at => pgqueue.priority_dequeue_at(5), p_group => 'g')")
        producer.execute("SELECT pgqueue.message_create('lowturn', 'c'::bytea, p_group => 'g')")
    turns = conn.execute("SELECT convert_from(m.content, 'UTF8'), m.turn_at IS NOT NULL FROM pgqueue.message m "
                         "WHERE m.group_key = 'g' ORDER BY m.id").fetchall()
    assert turns == [("priority", True), ("c", False)], turns
    got = conn.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('lowturn', 10, 60000) "
                       "ORDER BY 1").fetchall()
    assert got == [("b",), ("priority",)], got


def test_a_turn_keyed_just_below_the_clock_is_not_below_the_group_floor(conn: psycopg.Connection[Any],
                                                                        dsn: str) -> None:
    """An enqueue with an explicit dequeue_at less than 5 ms below its clock (read in whole
    milliseconds, pgqueue._write_clock) is marked as keyed with the clock and advances no stripe.
    Into an empty group it gets the turn with that key, and its own room probe has just kept a
    floor: the floor must not be above the key. A first version took the clock in microseconds
    less 5 ms: with the enqueue and the probe in one millisecond, the message's key (the
    millisecond less 5) was up to 1 ms below the floor, the next enqueue into the group probed
    from the floor, missed it, and got the turn as well (a review; with that floor this test
    failed)."""
    conn.execute("SELECT pgqueue.queue_create('justbelow', p_group_concurrency => 1)")
    with psycopg.connect(dsn, autocommit=True) as producer:
        for i in range(40):
            producer.execute("SELECT pgqueue.message_create('justbelow', 'a'::bytea, "
                             "p_dequeue_at => pgqueue.now_ms() - 5, p_group => %s)", (f"g{i}",))
            producer.execute("SELECT pgqueue.message_create('justbelow', 'b'::bytea, p_group => %s)", (f"g{i}",))
    doubled = conn.execute("SELECT group_key, count(*) FROM pgqueue.message WHERE turn_at IS NOT NULL "
                           "GROUP BY group_key HAVING count(*) > 1").fetchall()
    assert doubled == [], doubled
    assert conn.execute("SELECT count(*) FROM pgqueue.message WHERE turn_at IS NOT NULL").fetchone() == (40,)


def test_a_group_floor_kept_by_a_prepared_transaction_that_rolled_back_is_not_used() -> None:
    """PREPARE TRANSACTION keeps the transaction's settings as a commit does. A delivery that
    left its group empty keeps a floor above the message it took; prepared and then rolled back
    (ROLLBACK PREPARED), the message is back with the turn below that floor, which the session
    still has: the floor records the xid that kept it and counts only once that committed (or
    in its own transaction), so the session's next enqueue into the group sees the message and
    waits behind it (a review: without the xid it got the turn as well). A server of its own:
    prepared transactions need max_prepared_transactions."""
    from pgqueue.embedded import EmbeddedPostgres
    with EmbeddedPostgres(settings={"max_prepared_transactions": "2"}) as pg, \
            psycopg.connect(pg.dsn(), autocommit=True) as admin:
        admin.execute("CREATE EXTENSION pgqueue")
        admin.execute("SELECT pgqueue.queue_create('prepared', p_group_concurrency => 1)")
        admin.execute("SELECT pgqueue.message_create('prepared', 'first'::bytea, p_group => 'g')")
        with psycopg.connect(pg.dsn(), autocommit=True) as consumer:
            consumer.execute("BEGIN")
            got = consumer.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('prepared', 1, 0)").fetchall()
            assert got == [("first",)]
            consumer.execute("PREPARE TRANSACTION 'pgqueue_floor'")
            kept = group_floor(consumer, "prepared", "g")
            assert kept is not None and kept.endswith("/g"), kept  # kept by the prepare
            consumer.execute("ROLLBACK PREPARED 'pgqueue_floor'")
            consumer.execute("SELECT pgqueue.message_create('prepared', 'second'::bytea, p_group => 'g')")
        turns = admin.execute("SELECT convert_from(content, 'UTF8'), turn_at IS NOT NULL FROM pgqueue.message "
                              "WHERE group_key = 'g' ORDER BY id").fetchall()
    assert turns == [("first", True), ("second", False)], turns


@pytest.mark.parametrize("undo", ["rollback", "savepoint"])
def test_a_group_floor_kept_by_a_delivery_that_rolled_back_is_gone_with_it(conn: psycopg.Connection[Any],
                                                                            dsn: str, undo: str) -> None:
    """A delivery that leaves its group empty keeps a floor of the group's turn keys above the
    message it took (its own DELETE hides it from its probe). If its transaction rolls back, or
    a savepoint it took before, the message is back with the turn, below that floor: the floor
    must go too (the setting is transactional, to the savepoint), or the session's next enqueue
    into the group would probe from above the message, miss it, and give its own message the
    turn as well."""
    conn.execute("SELECT pgqueue.queue_create('rolled', p_group_concurrency => 1)")
    conn.execute("SELECT pgqueue.message_create('rolled', 'first'::bytea, p_group => 'g')")
    with psycopg.connect(dsn) as consumer:
        if undo == "savepoint":
            consumer.execute("SAVEPOINT before")
        got = consumer.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('rolled', 1, 0)").fetchall()
        assert got == [("first",)]
        inside = group_floor(consumer, "rolled", "g")
        assert inside is not None and inside.endswith("/g"), inside  # kept
        if undo == "savepoint":
            consumer.execute("ROLLBACK TO SAVEPOINT before")
        else:
            consumer.rollback()
        assert group_floor(consumer, "rolled", "g") in (None, ""), "the floor outlived its rollback"
        consumer.execute("SELECT pgqueue.message_create('rolled', 'second'::bytea, p_group => 'g')")
        consumer.commit()
    turns = conn.execute("SELECT convert_from(content, 'UTF8'), turn_at IS NOT NULL FROM pgqueue.message "
                         "WHERE group_key = 'g' ORDER BY id").fetchall()
    assert turns == [("first", True), ("second", False)], turns


#: The enqueues whose key look-ups (and room probes) run in the emptied-table test: a grouped
#: queue (pgqueue._message_insert), and a capped queue with a key window, whose key message_create
#: checks before it asks for room (pgqueue._message_key_taken), then _message_insert again.
EMPTIED_ENQUEUES = {
    "grouped": ("SELECT pgqueue.queue_create('emptied', p_group_concurrency => 1, p_key_window_ms => 3600000)",
                {"turn_at IS NOT NULL", "message key", "message_key key"}),
    "capped": ("SELECT pgqueue.queue_create('emptied', p_max_size => 1000000, p_key_window_ms => 3600000)",
               {"message key", "message_key key", "capped pre-check"}),
}


def _emptied_scan_problems(st: Any) -> list[str]:
    """The scans of pgqueue.message and pgqueue.message_key in a statement that are not bounded
    index probes: a Seq Scan, an index scan without an Index Cond (a walk of the whole index),
    and any scan of message_key_until_idx (every unexpired key of the queue, Index Cond queue_id
    alone): a key is looked up in message_key_pkey."""
    problems: list[str] = []
    where = " ".join(st.text.split())[:160]
    for node in walk(st.plan):
        index = node.get("Index Name", "")
        if node.get("Relation Name") not in ("message", "message_key") and not index.startswith("message"):
            continue
        kind = node["Node Type"]
        if kind == "Seq Scan":
            problems.append(f"Seq Scan on {node.get('Relation Name')} in: {where}")
        if kind in ("Index Scan", "Index Only Scan", "Bitmap Index Scan") and "Index Cond" not in node:
            problems.append(f"{kind} using {index} without an Index Cond in: {where}")
        if index == "message_key_until_idx":
            problems.append(f"{kind} using message_key_until_idx (not message_key_pkey) in: {where}")
    return problems


def _key_probes(st: Any) -> set[str]:
    """Which key look-ups a statement holds, each seen through the index it must probe."""
    indexes = {node.get("Index Name") for node in walk(st.plan)}
    text = " ".join(st.text.split())
    found: set[str] = set()
    if "turn_at IS NOT NULL" in text:
        found.add("turn_at IS NOT NULL")
    if "pgqueue.message m" in text and "idem_key = p_key" in text and "message_idem_key_idx" in indexes:
        found.add("message key")
    if "pgqueue.message_key k" in text and "message_key_pkey" in indexes:
        found.add("message_key key")
    if "pgqueue.message m" in text and "pgqueue.message_key k" in text:  # both, one snapshot
        found.add("capped pre-check")
    return found


@pytest.mark.parametrize("kind", list(EMPTIED_ENQUEUES))
def test_an_enqueue_planned_on_an_emptied_table_still_probes_by_index(conn: psycopg.Connection[Any], dsn: str,
                                                                      kind: str) -> None:
    """A queue that drained, then a VACUUM (or an ANALYZE of the empty tables): pgqueue.message
    and pgqueue.message_key are recorded with 0 rows and truncated to nothing. Planned then, the
    room probes of a grouped enqueue and the look-ups of an idempotency key were Seq Scans, and
    the session's generic plan kept them: each message of a batch scanned every message inserted
    before it (a batch of 10,000 ran 25-32 s against 1-2 s, quadratic). Under enable_seqscan =
    off the key's look-up in message_key walked message_key_until_idx instead (Index Cond:
    queue_id alone, a tie of costs on an empty table): every unexpired key of the queue, 7.2-8.3
    ms a create at 60,000 keys (0.23-0.29 on a new session; keyed_create.py). A capped queue's
    check of the key before it asks for room (in message_create, which has no SET clause) was a
    Seq Scan of both. Whatever the statistics, every one is an index probe: an Index Cond, and
    message_key by message_key_pkey."""
    create_queue, probes = EMPTIED_ENQUEUES[kind]
    conn.execute(create_queue)
    grouped = kind == "grouped"
    # the queue drains: its messages leave, their keys are kept, then their windows end
    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('emptied', "
                 "ARRAY(SELECT '\\x00'::bytea FROM generate_series(1, 200)), "
                 "p_groups => %s, p_keys => ARRAY(SELECT 'old' || i FROM generate_series(1, 200) i))",
                 ([f"g{i}" for i in range(200)] if grouped else None,))
    assert len(conn.execute("SELECT * FROM pgqueue.message_dequeue('emptied', 200, 0)").fetchall()) == 200
    assert conn.execute("SELECT count(*) FROM pgqueue.message_key").fetchone() == (200,)
    conn.execute("DELETE FROM pgqueue.message")
    conn.execute("DELETE FROM pgqueue.message_key")
    conn.execute("VACUUM pgqueue.message, pgqueue.message_key")
    assert conn.execute("SELECT relpages FROM pg_class WHERE oid IN ('pgqueue.message'::regclass, "
                        "'pgqueue.message_key'::regclass)").fetchall() == [(0,), (0,)]
    with psycopg.connect(dsn, autocommit=True) as session:
        capture = PlanCapture(session)
        seen: set[str] = set()
        problems: list[str] = []
        for i in range(8):  # the custom plans, then the generic one the session keeps
            call = capture.run("SELECT pgqueue.message_create('emptied', '\\x00'::bytea, p_group => %s, p_key => %s)",
                               (f"g{i % 2}" if grouped else None, f"k{i}"))
            for st in call.nested:
                seen |= _key_probes(st)
                problems += [f"call {i + 1}: {p}" for p in _emptied_scan_problems(st)]
        assert not problems, "\n".join(problems)
        assert seen == probes, seen  # (the room probes and the key's look-ups ran)
