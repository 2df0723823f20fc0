"""The SQL of the Spark integration (extension 0.2), without Spark: claims, acknowledgements,
releases, snapshots, staging and publishing, the upgrade from 0.1, dump/restore, and the
index-probe guarantee of the new statements."""

from __future__ import annotations

import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from conftest import Server, admin_execute, create_database, drop_database
from helpers import PlanCapture, index_names, pg_bindir, plan_violations, snapshot, sqlstate_of
from spark_helpers import fill, one

Conn = psycopg.Connection[Any]
CLAIMED_UNTIL = 253402300799999
BIN = pg_bindir()


def claimed_ids(conn: Conn, queue: str, consumer: str, after: int, up_to: int) -> list[int]:
    return [r[0] for r in conn.execute("SELECT id FROM pgqueue.spark_claimed(%s, %s, %s, %s) ORDER BY id",
                                       (queue, consumer, after, up_to)).fetchall()]


# ---------------------------------------------------------------------------------------
# Claims
# ---------------------------------------------------------------------------------------


def test_claims_hide_messages_from_dequeue_and_ack_deletes_them(conn: Conn) -> None:
    ids = fill(conn, "q", 10)
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'etl', 4)") == 1
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'etl', 4)") == 2
    assert claimed_ids(conn, "q", "etl", 0, 1) == ids[:4]
    assert claimed_ids(conn, "q", "etl", 0, 2) == ids[:8]
    # claimed: leased forever, attempts + 1, invisible to ordinary consumers
    assert conn.execute("SELECT DISTINCT locked_until, attempts FROM pgqueue.message WHERE claim_id IS NOT NULL"
                        ).fetchall() == [(CLAIMED_UNTIL, 1)]
    got = [r[0] for r in conn.execute("SELECT id FROM pgqueue.message_dequeue('q', 100, 0)").fetchall()]
    assert got == ids[8:]
    assert one(conn, "SELECT leased FROM pgqueue.queue_stats('q')") == 8
    # nothing more to claim
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'etl', 4)") is None
    assert one(conn, "SELECT pgqueue.spark_pending_seq('q', 'etl')") == 2
    assert conn.execute("SELECT seq, n, min_id, max_id FROM pgqueue.spark_claims('q', 'etl', 0, 9)").fetchall() == [
        (1, 4, ids[0], ids[3]), (2, 4, ids[4], ids[7])]
    # ack is idempotent and only deletes what it covers
    assert one(conn, "SELECT pgqueue.spark_ack('q', 'etl', 1)") == 4
    assert one(conn, "SELECT pgqueue.spark_ack('q', 'etl', 1)") == 0
    assert one(conn, "SELECT pgqueue.spark_ack('q', 'etl', 0)") == 0
    assert claimed_ids(conn, "q", "etl", 0, 2) == ids[4:8]
    assert one(conn, "SELECT pgqueue.spark_ack('q', 'etl', 2)") == 4
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    assert one(conn, "SELECT pgqueue.spark_pending_seq('q', 'etl')") is None
    assert conn.execute("SELECT acked_seq, next_seq, claims FROM pgqueue.spark_consumers('q')").fetchall() == [(2, 3, 0)]
    # acknowledging a claim that was never made is an error
    assert sqlstate_of(conn, "SELECT pgqueue.spark_ack('q', 'etl', 3)") == "22023"


def test_claim_order_bounds_and_schedule(conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('q')")
    now = one(conn, "SELECT pgqueue.now_ms()")
    later = one(conn, "SELECT pgqueue.message_create('q', 'later', %s)", (now + 3_600_000,))
    normal = one(conn, "SELECT pgqueue.message_create('q', 'normal')")
    urgent = one(conn, "SELECT pgqueue.message_create('q', 'urgent', pgqueue.priority_dequeue_at(5))")
    newest = one(conn, "SELECT pgqueue.message_create('q', 'newest')")
    # an expired lease comes first, as in message_dequeue
    leased = one(conn, "SELECT id FROM pgqueue.message_dequeue('q', 1, 1)")
    assert leased == urgent
    conn.execute("SELECT pg_sleep(0.01)")
    # p_max_id leaves out newer messages (the AvailableNow bound)
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'c', 10, %s)", (urgent,)) == 1
    assert claimed_ids(conn, "q", "c", 0, 1) == sorted([urgent, normal])
    assert one(conn, "SELECT attempts FROM pgqueue.message WHERE id = %s", (urgent,)) == 2
    # the lease holder's token no longer matches: it cannot complete the claimed message
    assert one(conn, "SELECT pgqueue.message_complete(%s, 1)", (urgent,)) is False
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'c', 10)") == 2
    assert claimed_ids(conn, "q", "c", 1, 2) == [newest]  # the scheduled one is not due
    assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE id = %s AND claim_id IS NULL", (later,)) == 1


def test_two_consumers_and_dequeue_never_share_a_message(pg_server: Server, dsn: str, conn: Conn) -> None:
    ids = fill(conn, "q", 3000)
    seen: dict[str, list[int]] = {}
    errors: list[BaseException] = []

    def spark_consumer(name: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                got: list[int] = []
                while (seq := one(c, "SELECT pgqueue.spark_claim('q', %s, 50)", (name,))) is not None:
                    got += claimed_ids(c, "q", name, seq - 1, seq)
                seen[name] = got
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def dequeuer() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                got: list[int] = []
                while rows := c.execute("SELECT id FROM pgqueue.message_dequeue('q', 50, 0)").fetchall():
                    got += [r[0] for r in rows]
                seen["dequeue"] = got
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=spark_consumer, args=(n,)) for n in ("a", "b")]
    threads.append(threading.Thread(target=dequeuer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    merged = seen["a"] + seen["b"] + seen["dequeue"]
    assert sorted(merged) == ids, "every message went to exactly one consumer"


def test_claim_from_a_starting_position(conn: Conn) -> None:
    """Issue 17: p_from (a stream's startingPosition, epoch ms) claims only messages created at or
    after it, priority ones and expired leases included; the others stay for other consumers."""
    conn.execute("SELECT pgqueue.queue_create('q', p_max_attempts => 5)")
    old = fill(conn, "q", 5)
    conn.execute("UPDATE pgqueue.message SET created_at = created_at - 3600000, dequeue_at = dequeue_at - 3600000")
    old_prio = one(conn, "SELECT pgqueue.message_create('q', 'old prio', pgqueue.priority_dequeue_at(5))")
    conn.execute("UPDATE pgqueue.message SET created_at = created_at - 3600000 WHERE id = %s", (old_prio,))
    start = one(conn, "SELECT pgqueue.now_ms()")
    new = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('q', %s)", ([b"n0", b"n1", b"n2"],))]
    prio = one(conn, "SELECT pgqueue.message_create('q', 'new prio', pgqueue.priority_dequeue_at(1))")
    leased = one(conn, "SELECT pgqueue.message_create('q', 'new leased')")
    conn.execute("UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1, attempts = 1 WHERE id = %s", (leased,))
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'late', 100, NULL, %s)", (start,)) == 1
    assert claimed_ids(conn, "q", "late", 0, 1) == sorted([leased, prio, *new])
    assert conn.execute("SELECT seq, n FROM pgqueue.spark_claims('q', 'late', 0, 9)").fetchall() == [(1, 5)]
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'late', 100, NULL, %s)", (start,)) is None
    # left out, not taken: an ordinary consumer (or a stream from the earliest) still gets them
    got = [r[0] for r in conn.execute("SELECT id FROM pgqueue.message_dequeue('q', 100, 0)")]
    assert got == [old_prio, *old]
    # p_max_id still bounds it; a position in the future claims nothing yet
    later = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('q', %s)", ([b"a", b"b"],))]
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'late', 100, %s, %s)", (later[0], start)) == 2
    assert claimed_ids(conn, "q", "late", 1, 2) == later[:1]
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'late', 100, NULL, pgqueue.now_ms() + 60000)") is None
    # a poison lease created after the position goes to the dead letters, as with message_dequeue
    conn.execute("UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1, attempts = 99 WHERE id = %s",
                 (later[1],))
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'late', 100, NULL, %s)", (start,)) is None
    assert one(conn, "SELECT count(*) FROM pgqueue.dead_letter WHERE id = %s", (later[1],)) == 1


def test_release_gives_messages_back(conn: Conn) -> None:
    ids = fill(conn, "q", 6)
    conn.execute("SELECT pgqueue.spark_claim('q', 'gone', 4)")
    conn.execute("SELECT pgqueue.spark_claim('q', 'gone', 1)")
    assert one(conn, "SELECT pgqueue.spark_release('q', 'gone')") == 5
    assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE claim_id IS NOT NULL OR locked_until IS NOT NULL") == 0
    assert conn.execute("SELECT acked_seq, next_seq, claims FROM pgqueue.spark_consumers('q')").fetchall() == [(2, 3, 0)]
    # deliverable again, in their old order
    assert [r[0] for r in conn.execute("SELECT id FROM pgqueue.message_dequeue('q', 10, 0)").fetchall()] == ids
    assert sqlstate_of(conn, "SELECT pgqueue.spark_release('q', 'nobody')") == "PQ006"
    assert sqlstate_of(conn, "SELECT pgqueue.spark_ack('q', 'nobody', 1)") == "PQ006"


def test_a_consumer_in_use_cannot_be_opened_or_released(dsn: str, conn: Conn) -> None:
    fill(conn, "q", 3)
    with psycopg.connect(dsn, autocommit=True) as holder:
        assert one(holder, "SELECT pgqueue.spark_consumer_open('q', 'etl')") == 0
        assert one(holder, "SELECT pgqueue.spark_claim('q', 'etl', 10)") == 1
        assert conn.execute("SELECT consumer, active FROM pgqueue.spark_consumers()").fetchall() == [("etl", True)]
        assert sqlstate_of(conn, "SELECT pgqueue.spark_consumer_open('q', 'etl')") == "PQ005"
        assert sqlstate_of(conn, "SELECT pgqueue.spark_release('q', 'etl')") == "PQ005"
        assert one(conn, "SELECT pgqueue.spark_consumer_open('q', 'other')") == 0  # another name is free
        assert one(holder, "SELECT pgqueue.spark_consumer_close('q', 'etl')") is True
        assert one(holder, "SELECT pgqueue.spark_consumer_close('q', 'etl')") is False
        assert one(conn, "SELECT pgqueue.spark_consumer_open('q', 'etl')") == 0
        assert sqlstate_of(holder, "SELECT pgqueue.spark_release('q', 'etl')") == "PQ005"
    # the session that holds it may release it
    assert one(conn, "SELECT pgqueue.spark_release('q', 'etl')") == 3


def test_a_consumer_in_use_is_claimed_for_only_by_its_session(dsn: str, conn: Conn) -> None:
    """spark_claim from another session while a Spark query holds the consumer is PQ005 and
    claims nothing (it claimed, the hand-caller's spark_ack of it was then PQ005, and the
    query's next latestOffset handed the claim out again as pending: a review); the holder
    claims, and anyone may once nobody holds it."""
    fill(conn, "q", 5)
    with psycopg.connect(dsn, autocommit=True) as holder:
        assert one(holder, "SELECT pgqueue.spark_consumer_open('q', 'etl')") == 0
        assert sqlstate_of(conn, "SELECT pgqueue.spark_claim('q', 'etl', 10)") == "PQ005"
        assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE claim_id IS NOT NULL") == 0
        assert one(holder, "SELECT pgqueue.spark_pending_seq('q', 'etl')") is None
        assert one(holder, "SELECT pgqueue.spark_claim('q', 'etl', 2)") == 1
        assert one(conn, "SELECT pgqueue.spark_claim('q', 'other', 1)") == 1  # another name is free
        assert one(holder, "SELECT pgqueue.spark_consumer_close('q', 'etl')") is True
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'etl', 10)") == 2
    assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE claim_id IS NOT NULL") == 5


def test_a_consumer_in_use_is_acknowledged_only_by_its_session(dsn: str, conn: Conn) -> None:
    """spark_ack from another session while a Spark query holds the consumer is PQ005 and
    deletes nothing (it deleted the claims of a micro-batch the query had not read yet, and the
    batch read fewer rows with no error: a review); the holder acknowledges, and anyone may once
    nobody holds it."""
    fill(conn, "q", 5)
    with psycopg.connect(dsn, autocommit=True) as holder:
        assert one(holder, "SELECT pgqueue.spark_consumer_open('q', 'etl')") == 0
        assert one(holder, "SELECT pgqueue.spark_claim('q', 'etl', 2)") == 1
        assert one(holder, "SELECT pgqueue.spark_claim('q', 'etl', 3)") == 2
        assert sqlstate_of(conn, "SELECT pgqueue.spark_ack('q', 'etl', 2)") == "PQ005"
        assert sqlstate_of(conn, "SELECT pgqueue.spark_ack('q', 'etl', 1)") == "PQ005"
        assert one(conn, "SELECT count(*) FROM pgqueue.message WHERE claim_id IS NOT NULL") == 5
        assert one(holder, "SELECT pgqueue.spark_ack('q', 'etl', 1)") == 2
        assert one(holder, "SELECT pgqueue.spark_consumer_close('q', 'etl')") is True
    assert one(conn, "SELECT pgqueue.spark_ack('q', 'etl', 2)") == 3
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0


def test_argument_errors(conn: Conn) -> None:
    fill(conn, "q", 1)
    cases = {
        "SELECT pgqueue.spark_claim('q', 'c', 0)": "22023",
        "SELECT pgqueue.spark_claim('q', 'c', 1000001)": "22023",
        "SELECT pgqueue.spark_claim('q', 'c', NULL)": "22004",
        "SELECT pgqueue.spark_claim('q', NULL, 1)": "22004",
        "SELECT pgqueue.spark_claim('q', '-bad', 1)": "42602",
        "SELECT pgqueue.spark_claim('q', repeat('x', 101), 1)": "42602",
        "SELECT pgqueue.spark_claim('nope', 'c', 1)": "PQ001",
        "SELECT pgqueue.spark_claim('bad name', 'c', 1)": "42602",
        "SELECT pgqueue.spark_ack('q', 'c', NULL)": "22004",
        "SELECT pgqueue.spark_snapshot('q', NULL, 1)": "22004",
        # (NULL was taken for false: a snapshot that asked NULL left the dead letters out)
        "SELECT pgqueue.spark_snapshot('q', 0, 1, NULL)": "22004",
        "SELECT pgqueue.spark_snapshot_range('q', NULL)": "22004",
        "SELECT pgqueue.spark_snapshot_range('nope', NULL)": "PQ001",
        "SELECT pgqueue.spark_consumer_open('nope', 'c')": "PQ001",
    }
    assert {q: sqlstate_of(conn, q) for q in cases} == cases


def test_queue_drop_removes_consumers_and_claims(conn: Conn) -> None:
    fill(conn, "q", 5)
    fill(conn, "keep", 5)
    conn.execute("SELECT pgqueue.spark_claim('q', 'etl', 3)")
    conn.execute("SELECT pgqueue.spark_claim('keep', 'etl', 3)")
    assert one(conn, "SELECT pgqueue.queue_drop('q')") is True
    assert conn.execute("SELECT queue, consumer, claims FROM pgqueue.spark_consumers()").fetchall() == [("keep", "etl", 1)]
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_claim") == 1
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 5
    # a queue of the same name starts afresh
    fill(conn, "q", 1)
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'etl', 3)") == 1


def test_queue_drop_waits_for_an_ack_in_flight(dsn: str, conn: Conn) -> None:
    """An ack holds the queue's shared lock: drop waits for it, then removes everything."""
    fill(conn, "q", 5)
    conn.execute("SELECT pgqueue.spark_claim('q', 'etl', 5)")
    with psycopg.connect(dsn) as acker:
        assert one(acker, "SELECT pgqueue.spark_ack('q', 'etl', 1)") == 5  # transaction left open
        done = threading.Event()

        def drop() -> None:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("SELECT pgqueue.queue_drop('q')")
            done.set()

        t = threading.Thread(target=drop)
        t.start()
        assert not done.wait(0.5), "drop must wait for the acknowledging transaction"
        acker.commit()
        t.join(10)
    assert done.is_set()
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_consumer") == 0


# ---------------------------------------------------------------------------------------
# Snapshots
# ---------------------------------------------------------------------------------------


def test_snapshot_statuses_and_changes_nothing(conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('q', p_max_attempts => 1)")
    fill(conn, "other", 3)
    now = one(conn, "SELECT pgqueue.now_ms()")
    conn.execute("SELECT pgqueue.message_create_batch('q', %s)", ([b"r"] * 6,))
    conn.execute("SELECT pgqueue.message_create('q', 's', %s)", (now + 3_600_000,))
    dead_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('q', 1, 60000)").fetchone()  # type: ignore[misc]
    conn.execute("SELECT pgqueue.message_fail(%s, %s, 'boom')", (dead_id, token))
    conn.execute("SELECT pgqueue.message_dequeue('q', 2, 60000)")
    conn.execute("SELECT pgqueue.spark_claim('q', 'etl', 1)")
    before = snapshot(conn)
    lo, hi = conn.execute("SELECT min_id, max_id FROM pgqueue.spark_snapshot_range('q', true)").fetchone()  # type: ignore[misc]
    rows = conn.execute("SELECT status, count(*) FROM pgqueue.spark_snapshot('q', %s, %s, true) "
                        "GROUP BY 1 ORDER BY 1", (lo, hi)).fetchall()
    assert rows == [("claimed", 1), ("dead", 1), ("leased", 2), ("ready", 2), ("scheduled", 1)]
    no_dead = conn.execute("SELECT count(*) FROM pgqueue.spark_snapshot('q', %s, %s)", (lo, hi)).fetchone()
    assert no_dead == (6,)
    # split ranges add up
    parts = [(lo, lo + 3), (lo + 4, hi)]
    assert sum(one(conn, "SELECT count(*) FROM pgqueue.spark_snapshot('q', %s, %s, true)", p) for p in parts) == 7
    assert snapshot(conn) == before
    conn.execute("SELECT pgqueue.queue_create('empty')")
    assert conn.execute("SELECT * FROM pgqueue.spark_snapshot('empty', %s, %s)", (lo, hi)).fetchall() == []


# ---------------------------------------------------------------------------------------
# Staging and publishing
# ---------------------------------------------------------------------------------------


def stage(conn: Conn, write_id: str, partition: int, attempt: int, contents: list[bytes], **arrays: Any) -> None:
    conn.execute("SELECT pgqueue.spark_stage(%s, %s, %s, 0, %s, %s, %s, %s, %s, %s)",
                 (write_id, partition, attempt, contents, arrays.get("type"), arrays.get("ats"), arrays.get("delays"),
                  arrays.get("groups"), arrays.get("keys")))


def test_publish_moves_winners_once(conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('q', p_notify => true)")
    conn.execute('LISTEN "pgqueue.q"')
    w = str(uuid.uuid4())
    stage(conn, w, 0, 10, [b"p0-a", b"p0-b"], type="text/plain; charset=utf-8")
    stage(conn, w, 0, 11, [b"p0-a", b"p0-b"])  # a retry of partition 0 that lost
    stage(conn, w, 1, 12, [b"p1-a"], delays=[60_000])
    now = one(conn, "SELECT pgqueue.now_ms()")
    assert one(conn, "SELECT pgqueue.spark_publish('k1', 'q', %s, '{1,0}', '{12,10}', '{1,2}')", (w,)) == 3
    rows = conn.execute("SELECT convert_from(content, 'UTF8'), content_type, dequeue_at > %s + 50000 "
                        "FROM pgqueue.message ORDER BY id", (now,)).fetchall()
    assert rows == [("p0-a", "text/plain; charset=utf-8", False), ("p0-b", "text/plain; charset=utf-8", False),
                    ("p1-a", None, True)]
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    assert [n.channel for n in conn.notifies(timeout=1, stop_after=1)] == ["pgqueue.q"]
    # the same key again: nothing more, only its staging rows go
    stage(conn, w, 0, 10, [b"again"])
    assert one(conn, "SELECT pgqueue.spark_publish('k1', 'q', %s, '{0}', '{10}', '{1}')", (w,)) is None
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 3
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0


def test_publish_errors_publish_nothing(conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('q', p_max_size => 2)")
    w = str(uuid.uuid4())
    stage(conn, w, 0, 1, [b"a", b"b", b"c"])
    publish = "SELECT pgqueue.spark_publish('k', 'q', %s, %s, %s, %s)"
    assert sqlstate_of(conn, publish, (w, [0], [1], [2])) == "PQ007"       # rows missing
    assert sqlstate_of(conn, publish, (w, [0, 0], [1, 2], [3, 0])) == "22023"  # two winners
    assert sqlstate_of(conn, publish, (w, [0], [1, 2], [3])) == "22023"    # lengths differ
    assert sqlstate_of(conn, publish, (w, [0], [None], [3])) == "22004"
    assert sqlstate_of(conn, publish, (w, [0], [1], [3])) == "PQ003"       # queue full
    assert sqlstate_of(conn, "SELECT pgqueue.spark_publish('k', 'nope', %s, '{0}', '{1}', '{3}')", (w,)) == "PQ001"
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_publish_log") == 0
    assert one(conn, "SELECT pgqueue.spark_discard(%s)", (w,)) == 3
    # an empty write publishes nothing, once
    assert one(conn, "SELECT pgqueue.spark_publish('empty', 'q', %s, '{}', '{}', '{}')", (w,)) == 0
    assert one(conn, "SELECT pgqueue.spark_publish('empty', 'q', %s, '{}', '{}', '{}')", (w,)) is None


def test_publish_into_a_grouped_queue_keeps_group_order_and_turns(conn: Conn) -> None:
    """Issue 14: a Spark write fills a grouped queue as message_create_batch(..., p_groups) does."""
    conn.execute("SELECT pgqueue.queue_create('g', p_group_concurrency => 1)")
    w = str(uuid.uuid4())
    # partition 1 is published after partition 0, whatever order the tasks staged in
    stage(conn, w, 1, 2, [b"a3", b"b2"], groups=["a", "b"])
    stage(conn, w, 0, 1, [b"a1", b"a2", b"b1", b"loner"], groups=["a", "a", "b", None])
    assert one(conn, "SELECT pgqueue.spark_publish('g1', 'g', %s, '{0,1}', '{1,2}', '{4,2}')", (w,)) == 6
    rows = conn.execute("SELECT convert_from(content, 'UTF8'), group_key, turn_at IS NOT NULL "
                        "FROM pgqueue.message ORDER BY id").fetchall()
    assert rows == [("a1", "a", True), ("a2", "a", False), ("b1", "b", True), ("loner", None, True),
                    ("a3", "a", False), ("b2", "b", False)]
    # one of each group at a time, in order: the heads first, then what their completion hands on
    got = conn.execute("SELECT id, attempts, convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('g', 10, 60000)"
                       ).fetchall()
    assert sorted(r[2] for r in got) == ["a1", "b1", "loner"]
    for mid, attempts, _ in got:
        assert one(conn, "SELECT pgqueue.message_complete(%s, %s)", (mid, attempts)) is True
    got = conn.execute("SELECT id, attempts, convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('g', 10, 60000)"
                       ).fetchall()
    assert sorted(r[2] for r in got) == ["a2", "b2"]
    # the streaming read of a grouped queue is still refused (claims would break the order)
    assert sqlstate_of(conn, "SELECT pgqueue.spark_claim('g', 'etl', 10)") == "0A000"


def test_publish_with_idempotency_keys_inserts_each_key_once(conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('q')")
    live = one(conn, "SELECT pgqueue.message_create('q', 'before', p_key => 'k1')")
    w = str(uuid.uuid4())
    stage(conn, w, 0, 1, [b"x1", b"x2", b"x2 again", b"nokey"], keys=["k1", "k2", "k2", None])
    assert one(conn, "SELECT pgqueue.spark_publish('p1', 'q', %s, '{0}', '{1}', '{4}')", (w,)) == 4
    rows = conn.execute("SELECT id, convert_from(content, 'UTF8'), idem_key FROM pgqueue.message ORDER BY id").fetchall()
    assert [r[1:] for r in rows] == [("before", "k1"), ("x2", "k2"), ("nokey", None)]
    assert rows[0][0] == live
    # another write (a Spark retry under a new write id, say) with the same keys adds nothing keyed
    w2 = str(uuid.uuid4())
    stage(conn, w2, 0, 1, [b"x1", b"x2"], keys=["k1", "k2"])
    assert one(conn, "SELECT pgqueue.spark_publish('p2', 'q', %s, '{0}', '{1}', '{2}')", (w2,)) == 2
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 3
    # once the keyed message is gone (no key window), its key enqueues again
    conn.execute("DELETE FROM pgqueue.message WHERE idem_key = 'k2'")
    w3 = str(uuid.uuid4())
    stage(conn, w3, 0, 1, [b"x2 later"], keys=["k2"])
    assert one(conn, "SELECT pgqueue.spark_publish('p3', 'q', %s, '{0}', '{1}', '{1}')", (w3,)) == 1
    assert one(conn, "SELECT convert_from(content, 'UTF8') FROM pgqueue.message WHERE idem_key = 'k2'") == "x2 later"


def test_groups_and_keys_are_checked(conn: Conn) -> None:
    conn.execute("SELECT pgqueue.queue_create('q')")
    w = str(uuid.uuid4())
    q = "SELECT pgqueue.spark_stage(%s, 0, 0, 0, %s, p_groups => %s, p_keys => %s)"
    for groups, keys in (([""], None), (["g" * 201], None), (None, [""]), (None, ["k" * 201]),
                         (["a", "b"], None), (None, ["a", "b"]), ([["a"]], None)):
        assert sqlstate_of(conn, q, (w, [b"a"], groups, keys)) == "22023", (groups, keys)
    assert sqlstate_of(conn, q, (w, [b"a"], ["g" * 200], ["k" * 200])) is None  # 200 is the most
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 1
    # a group for a queue without groups: nothing is published, not even the publish key
    assert sqlstate_of(conn, "SELECT pgqueue.spark_publish('k', 'q', %s, '{0}', '{0}', '{1}')", (w,)) == "22023"
    assert one(conn, "SELECT count(*) FROM pgqueue.message") == 0
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_publish_log") == 0


def test_stage_refuses_a_due_time_and_a_delay_for_one_row(conn: Conn) -> None:
    """Which of the two would win is nobody's guess (the connector refuses such a row too): 22023,
    nothing staged; a due time for one row and a delay for another is fine."""
    w = str(uuid.uuid4())
    both = "SELECT pgqueue.spark_stage(%s, 0, 0, 0, %s, NULL, %s, %s)"
    assert sqlstate_of(conn, both, (w, [b"a", b"b"], [None, 5], [1000, 2000])) == "22023"
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 0
    stage(conn, w, 0, 0, [b"a", b"b"], ats=[None, 5], delays=[1000, None])
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging WHERE write_id = %s", (w,)) == 2

def test_stage_checks_its_arrays(conn: Conn) -> None:
    w = str(uuid.uuid4())
    q = "SELECT pgqueue.spark_stage(%s, 0, 0, 0, %s, %s, %s, %s)"
    assert sqlstate_of(conn, q, (w, [b"a", None], None, None, None)) == "22004"
    assert sqlstate_of(conn, q, (w, [b"a"], None, [1, 2], None)) == "22023"
    assert sqlstate_of(conn, q, (w, [b"a"], None, None, [-1])) == "22023"
    assert sqlstate_of(conn, q, (None, [b"a"], None, None, None)) == "22004"
    assert one(conn, "SELECT pgqueue.spark_staging_purge(pgqueue.now_ms() + 1)") == 0
    stage(conn, w, 0, 0, [b"x"])
    assert one(conn, "SELECT pgqueue.spark_staging_purge(pgqueue.now_ms() + 1000)") == 1


# ---------------------------------------------------------------------------------------
# Index probes
# ---------------------------------------------------------------------------------------

N = 100_000


def test_claim_ack_and_reads_are_index_probes(dsn: str, conn: Conn) -> None:
    """Next to 100,000 messages that a claim must not pay for (scheduled ones of the queue,
    another queue's messages leased by its workers), claims go through message_ready_idx,
    acknowledgements, releases and claimed reads through message_claim_idx, snapshot partitions
    through the primary key: no Seq Scan of pgqueue.message, no full-index walk, no sort of it."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    conn.execute("SELECT pgqueue.queue_create('other')")
    conn.execute(f"""
        INSERT INTO pgqueue.message (queue_id, dequeue_at, locked_until, attempts, created_at, content)
        SELECT q.id, pgqueue.now_ms() + CASE WHEN q.name = 'q' THEN 3600000 ELSE -86400000 END + g,
               CASE WHEN q.name = 'q' THEN NULL ELSE pgqueue.now_ms() + 3600000 + g END,
               CASE WHEN q.name = 'q' THEN 0 ELSE 1 END,
               pgqueue.now_ms(), convert_to(repeat('x', 100) || g, 'UTF8')
          FROM generate_series(1, {N // 2}) g, pgqueue.queue q WHERE q.name IN ('q', 'other')""")
    conn.execute("SELECT pgqueue.message_create_batch('q', %s)", ([b"work"] * 300,))
    conn.execute("ANALYZE pgqueue.message")
    indexes = index_names(conn)
    with psycopg.connect(dsn, autocommit=True) as c:
        capture = PlanCapture(c)
        problems: list[str] = []
        for seq in range(1, 7):  # past the generic-plan decision of PL/pgSQL
            call = capture.run("SELECT pgqueue.spark_claim('q', 'etl', 50)")
            assert call.rows == [(seq,)]
            problems += plan_violations(call.nested, indexes, required_indexes=["message_ready_idx"])
            call = capture.run("SELECT count(*) FROM pgqueue.spark_claimed('q', 'etl', %s, %s)", (seq - 1, seq))
            assert call.rows == [(50,)]
            problems += plan_violations(call.nested, indexes, required_indexes=["message_claim_idx"])
        for seq in range(1, 7):
            call = capture.run("SELECT pgqueue.spark_ack('q', 'etl', %s)", (seq,))
            assert call.rows == [(50,)]
            problems += plan_violations(call.nested, indexes, required_indexes=["message_claim_idx"])
        lo, hi = one(c, "SELECT min_id FROM pgqueue.spark_snapshot_range('q')"), one(
            c, "SELECT max_id FROM pgqueue.spark_snapshot_range('q')")
        call = capture.run("SELECT count(*) FROM pgqueue.spark_snapshot('q', %s, %s)", (hi - 999, hi))
        problems += plan_violations(call.nested, indexes, required_indexes=["message_pkey"])
        assert lo is not None
        # a claim to release (the 300 messages above are acknowledged): with none, v_claims is
        # empty, the UPDATE's condition folds to false, and any partial index "fits" its plan
        conn.execute("SELECT pgqueue.message_create('q', 'to release')")
        assert one(conn, "SELECT pgqueue.spark_claim('q', 'gone', 1)") == 1
        call = capture.run("SELECT pgqueue.spark_release('q', 'gone')")
        problems += plan_violations(call.nested, indexes, required_indexes=["message_claim_idx"])
    assert not problems, "\n".join(problems)


def test_claim_from_a_starting_position_is_an_index_probe(dsn: str, conn: Conn) -> None:
    """A claim with p_from next to a backlog of 100,000 ready messages created before it (and
    1,000 older priority ones, 500 older ones scheduled to come due after it) starts at p_from in
    message_ready_idx: no walk of the backlog; what it steps over are the older priority messages
    and the older ones that came due after p_from (the cost docs/spark says)."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    conn.execute(f"""
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content)
        SELECT q.id, CASE WHEN g <= 1000 THEN -1 - g % 7
                          WHEN g <= 1500 THEN pgqueue.now_ms() + 100 + g % 100
                          ELSE pgqueue.now_ms() - 7200000 + g END,
               pgqueue.now_ms() - 3600000, convert_to(repeat('x', 100) || g, 'UTF8')
          FROM generate_series(1, {N + 1500}) g, pgqueue.queue q WHERE q.name = 'q'""")
    start = one(conn, "SELECT pgqueue.now_ms()")
    conn.execute("SELECT pgqueue.message_create_batch('q', %s)", ([b"work"] * 300,))
    conn.execute("ANALYZE pgqueue.message")
    time.sleep(0.3)  # the scheduled ones are due now
    indexes = index_names(conn)
    with psycopg.connect(dsn, autocommit=True) as c:
        capture = PlanCapture(c)
        problems: list[str] = []
        for seq in range(1, 7):  # past the generic-plan decision of PL/pgSQL
            call = capture.run("SELECT pgqueue.spark_claim('q', 'etl', 50, NULL, %s)", (start,))
            assert call.rows == [(seq,)]
            problems += plan_violations(call.nested, indexes, required_indexes=["message_ready_idx"],
                                        max_filtered=1000)
        assert one(c, "SELECT pgqueue.spark_claim('q', 'etl', 50, NULL, %s)", (start,)) is None
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------
# Upgrade from 0.1 and dump/restore
# ---------------------------------------------------------------------------------------

@pytest.fixture
def empty_db(pg_server: Server) -> Iterator[str]:
    name = f"upgrade_{uuid.uuid4().hex[:8]}"
    admin_execute(pg_server, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield name
    drop_database(pg_server, name)


def test_messages_of_0_1_can_be_claimed_after_the_upgrade(pg_server: Server, empty_db: str) -> None:
    """The catalog after each upgrade is tests/test_upgrade.py's; here: Spark claims 0.1's messages."""
    with psycopg.connect(pg_server.dsn(empty_db), autocommit=True) as old:
        old.execute("CREATE EXTENSION pgqueue VERSION '0.1'")
        ids = fill(old, "q", 3)
        leased = one(old, "SELECT id FROM pgqueue.message_dequeue('q', 1, 60000)")
        old.execute("ALTER EXTENSION pgqueue UPDATE")  # to the default version, through every script
        assert one(old, "SELECT pgqueue.spark_claim('q', 'etl', 10)") == 1
        assert claimed_ids(old, "q", "etl", 0, 1) == [i for i in ids if i != leased]


def test_dump_restore_keeps_consumers_and_claims(pg_server: Server, dbname: str, conn: Conn,
                                                 tmp_path: Path) -> None:
    ids = fill(conn, "q", 5)
    conn.execute("SELECT pgqueue.spark_claim('q', 'etl', 2)")
    conn.execute("SELECT pgqueue.spark_claim('q', 'etl', 2)")
    conn.execute("SELECT pgqueue.spark_ack('q', 'etl', 1)")
    w = str(uuid.uuid4())
    stage(conn, w, 0, 0, [b"x"])
    assert one(conn, "SELECT pgqueue.spark_publish('k', 'q', %s, '{0}', '{0}', '{1}')", (w,)) == 1
    stage(conn, w, 0, 1, [b"in flight"])
    dump = tmp_path / "db.dump"
    env = pg_server.libpq_env()
    for argv in ([str(BIN / "pg_dump"), "-Fc", "-f", str(dump), "-d", dbname],):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr
    restored = f"{dbname}_r"
    admin_execute(pg_server, sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(restored)))
    try:
        proc = subprocess.run([str(BIN / "pg_restore"), "-d", restored, str(dump)], env=env,
                              capture_output=True, text=True, check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr
        with psycopg.connect(pg_server.dsn(restored), autocommit=True) as r:
            assert r.execute("SELECT consumer, acked_seq, next_seq, claims FROM pgqueue.spark_consumers()"
                             ).fetchall() == [("etl", 1, 3, 1)]
            assert claimed_ids(r, "q", "etl", 1, 2) == ids[2:4]
            assert one(r, "SELECT count(*) FROM pgqueue.spark_staging") == 0  # not dumped, by design
            assert one(r, "SELECT pgqueue.spark_publish('k', 'q', %s, '{0}', '{1}', '{1}')", (w,)) is None
            assert one(r, "SELECT pgqueue.spark_claim('q', 'etl', 10)") == 3  # the sequences go on
            assert one(r, "SELECT pgqueue.spark_ack('q', 'etl', 3)") == 4
    finally:
        drop_database(pg_server, restored)


def test_template_database_is_at_the_default_version(pg_server: Server, template_db: str) -> None:
    """The suite runs against the newest SQL (pgqueue.control's default_version), Spark's included."""
    control = (EXTENSION.parent / "pgqueue.control").read_text()
    default = re.search(r"^default_version = '([^']+)'", control, re.M)
    assert default is not None and default.group(1) not in ("0.1",)
    name = create_database(pg_server, template_db, prefix="ver")
    try:
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as c:
            assert one(c, "SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'") == default.group(1)
    finally:
        drop_database(pg_server, name)


# ---------------------------------------------------------------------------------------
# The 0.1 functions that 0.2 redefines, the fuzzer's findings
# ---------------------------------------------------------------------------------------

EXTENSION = Path(__file__).resolve().parents[1] / "extension"
def test_lease_calls_ignore_claimed_messages(conn: Conn) -> None:
    """The attempts value of a claimed message is no lease token: each lease call returns false."""
    fill(conn, "q", 1)
    assert one(conn, "SELECT pgqueue.spark_claim('q', 'etl', 1)") == 1
    msg_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message").fetchone()  # type: ignore[misc]
    before = snapshot(conn)
    for call in ("SELECT pgqueue.message_heartbeat(%s, %s, 1000)", "SELECT pgqueue.message_defer(%s, %s, 0, 'x')",
                 "SELECT pgqueue.message_fail(%s, %s, 'boom')", "SELECT pgqueue.message_complete(%s, %s)"):
        assert one(conn, call, (msg_id, token)) is False, call
    assert snapshot(conn) == before


def test_staging_and_publishing_edge_values(conn: Conn) -> None:
    w = str(uuid.uuid4())
    big = 9223372036854775806
    assert sqlstate_of(conn, "SELECT pgqueue.spark_stage(%s, 0, 1, %s, ARRAY['a', 'b', 'c']::bytea[])", (w, big)) == "22023"
    assert sqlstate_of(conn, "SELECT pgqueue.spark_stage(%s, 0, 1, -1, ARRAY['a']::bytea[])", (w,)) == "22023"
    assert sqlstate_of(conn, "SELECT pgqueue.spark_stage(%s, 0, 1, %s, ARRAY['a', 'b']::bytea[])", (w, big)) is None
    assert sqlstate_of(conn, "SELECT pgqueue.spark_stage(%s, 0, 1, %s, ARRAY['a']::bytea[])", (w, big)) == "22023"
    assert one(conn, "SELECT count(*) FROM pgqueue.spark_staging") == 2
    for key in ("", "k" * 201):
        assert sqlstate_of(conn, "SELECT pgqueue.spark_publish(%s, 'default', %s, '{}', '{}', '{}')", (key, w)) == "22023"
    w2 = str(uuid.uuid4())
    conn.execute("SELECT pgqueue.spark_stage(%s, 0, 1, 0, ARRAY['far']::bytea[], p_delays_ms => ARRAY[9223372036854775807])",
                 (w2,))
    assert one(conn, "SELECT pgqueue.spark_publish('far', 'default', %s, '{0}', '{1}', '{1}')", (w2,)) == 1
    assert one(conn, "SELECT dequeue_at FROM pgqueue.message") == 9223372036854775807
