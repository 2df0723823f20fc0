"""Issue 14 from Python: Queue and AsyncQueue create grouped, keyed and rate-limited queues,
enqueue with group= and key= (enqueue_many with groups= and keys=), and the queue serves the
groups in turn; bad groups and keys are InvalidArgument (client-side or 22023)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import psycopg
import pytest

from helpers import deadlock_kind, wait_for_lock_waiters
from pgqueue import AsyncQueue, Queue, errors
from test_cli import run


def test_queue_enqueues_with_groups_and_keys(dsn: str) -> None:
    with Queue(dsn, "orders") as q:
        q.create(group_concurrency=1, key_window_ms=60000, rate_limit=1000)
        first = q.enqueue({"n": 1}, group="a", key="a-1")
        assert q.enqueue({"n": 1, "again": True}, group="a", key="a-1") == first
        ids = q.enqueue_many(["a2", "b1", "b2"], groups=["a", "b", "b"], keys=[None, "b-1", None])
        assert len(set(ids)) == 3 and first not in ids
        got = q.dequeue(10)
        assert sorted(str(m.payload) for m in got) == ["b1", "{'n': 1}"]
        assert q.dequeue(10) == []  # one of each group in flight
        for m in got:
            assert q.complete(m)
        assert sorted(str(m.payload) for m in q.dequeue(10, lock_ms=0)) == ["a2", "b2"]
        # within the window the completed key still answers with the old id
        assert q.enqueue("late", key="a-1") == first
        q.alter(group_concurrency=0, rate_limit=0, key_window_ms=0)
        with pytest.raises(errors.InvalidArgument):
            q.enqueue("x", group="")
        with pytest.raises(errors.InvalidArgument):
            q.enqueue("x", key="k" * 201)
        with pytest.raises(errors.InvalidArgument):
            q.enqueue("x", group=5)  # type: ignore[arg-type]
        with pytest.raises(errors.InvalidArgument):
            q.enqueue_many(["x", "y"], groups=["g"])
        with pytest.raises(errors.InvalidArgument):
            q.enqueue_many(["x"], keys="k")
    with Queue(dsn, "plain") as p:
        p.create()
        with pytest.raises(errors.InvalidArgument):
            p.enqueue("x", group="g")  # the queue has no groups
        with pytest.raises(errors.InvalidArgument):
            p.create(if_not_exists=True, rate_limit=-1)


def test_async_queue_enqueues_with_groups_and_keys(dsn: str) -> None:
    async def main() -> None:
        async with AsyncQueue(dsn, "aorders") as q:
            await q.create(group_concurrency=1, rate_limit=1000)
            first = await q.enqueue("a1", group="a", key="k")
            assert await q.enqueue("a1 again", group="a", key="k") == first
            await q.enqueue_many(["a2", "b1"], groups=["a", "b"], keys=["k2", None])
            # leased: one of each group; in delete mode a message handed out is done, so one call
            # takes the group's next one too, in order
            got = await q.dequeue(10)
            assert sorted(str(m.payload) for m in got) == ["a1", "b1"]
            for m in got:
                assert await q.complete(m)
            assert [m.payload for m in await q.dequeue(10, lock_ms=0)] == ["a2"]
            await q.alter(rate_limit=0)
    asyncio.run(asyncio.wait_for(main(), 60))


def test_group_stats_and_the_cli(capsys: pytest.CaptureFixture[str], dsn: str) -> None:
    with Queue(dsn, "tenants") as q:
        q.create(group_concurrency=1)
        q.enqueue_many(["x"] * 5 + ["y"] * 2 + ["z"], groups=["big"] * 5 + ["small"] * 2 + ["one"])
        assert [m.payload for m in q.dequeue(1)] == ["x"]
        stats = q.group_stats(2)
        assert [(g.group, g.waiting, g.in_flight) for g in stats] == [("big", 4, 1), ("small", 2, 0)]
        assert Queue(dsn, "default").group_stats() == []  # no groups
        with pytest.raises(errors.InvalidArgument):
            q.group_stats(0)
    status, out, _ = run(capsys, "stats", "tenants", "--groups", "3", "--dsn", dsn)
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == ["group", "waiting", "in", "flight"]
    assert [line.split() for line in lines[2:]] == [["big", "4", "1"], ["small", "2", "0"], ["one", "1", "0"]]
    status, out, _ = run(capsys, "stats", "tenants", "--groups", "1", "--json", "--dsn", dsn)
    assert status == 0 and json.loads(out) == [{"group": "big", "waiting": 4, "in_flight": 1}]
    status, _, err = run(capsys, "stats", "--groups", "1", "--dsn", dsn)
    assert status == 2 and "--groups needs a QUEUE" in err


def test_a_key_kept_within_its_window_stays_taken_when_the_window_is_set_to_0(dsn: str) -> None:
    """docs/guarantees.md: a new key_window_ms applies to the messages that leave after it."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('kw', p_key_window_ms => 86400000)")
        first = c.execute("SELECT pgqueue.message_create('kw', 'a', p_key => 'k1')").fetchone()
        assert c.execute("SELECT count(*) FROM pgqueue.message_dequeue('kw', 1, 0)").fetchone() == (1,)
        c.execute("SELECT pgqueue.queue_alter('kw', p_key_window_ms => 0)")
        again = c.execute("SELECT pgqueue.message_create('kw', 'a', p_key => 'k1')").fetchone()
        assert again == first  # the key is still kept: nothing inserted
        assert c.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)


def test_the_retry_of_a_keyed_enqueue_on_a_full_capped_queue_returns_its_id(dsn: str) -> None:
    """docs/guarantees.md: a key that is taken returns the message's id and inserts nothing; the
    cap refuses only what would exceed it, so a full queue does not refuse the retry."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('capk', p_max_size => 2)")
        first = c.execute("SELECT pgqueue.message_create('capk', 'a', p_key => 'k1')").fetchone()
        c.execute("SELECT pgqueue.message_create('capk', 'b', p_key => 'k2')")
        assert c.execute("SELECT pgqueue.message_create('capk', 'a', p_key => 'k1')").fetchone() == first
        with pytest.raises(psycopg.Error) as full:
            c.execute("SELECT pgqueue.message_create('capk', 'c', p_key => 'k3')")
        assert full.value.sqlstate == "PQ003"


def test_a_keyed_enqueue_that_waited_while_its_key_left_is_retried_on_a_statement_of_its_own(dsn: str) -> None:
    """README, "Idempotent enqueue": an enqueue whose insert waited for another producer's
    transaction that created the key and cancelled its message fails with 40001 and inserts
    nothing (specs/idempotent_window.spec); the client runs such a keyed enqueue once more where
    its statement is a transaction of its own (its own connection, a pool's lent one, an async
    queue's), which returns the id that keeps the key; in a caller's transaction it raises
    SerializationFailure, the transaction to be retried."""
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('kwin', p_key_window_ms => 3600000)")

        def race(key: str, enqueue: object) -> tuple[int, object]:
            """A producer's open transaction creates ``key`` while ``enqueue`` (called in a thread)
            waits for it, then cancels its message and commits; the kept id and what ``enqueue``
            returned or raised."""
            out: list[object] = []
            with psycopg.connect(dsn) as creator:
                kept = creator.execute("SELECT pgqueue.message_create('kwin', 'one', p_key => %s)",
                                       (key,)).fetchone()
                assert kept is not None
                t = threading.Thread(target=lambda: out.append(_outcome(enqueue)))
                t.start()
                wait_for_lock_waiters(admin, 1)
                creator.execute("SELECT pgqueue.message_cancel('kwin', ARRAY[%s]::bigint[])", (kept[0],))
                creator.commit()
                t.join(30)
            assert not t.is_alive()
            return int(kept[0]), out[0]

        with Queue(dsn, "kwin") as own:
            kept, got = race("k1", lambda: own.enqueue("two", key="k1"))
            assert got == kept
            kept, got = race("k2", lambda: own.enqueue_many(["x", "two"], keys=[None, "k2"]))
            assert isinstance(got, list) and got[1] == kept
        with ConnectionPool(dsn, min_size=1, max_size=2, open=True) as pool:
            kept, got = race("k3", lambda: Queue(pool, "kwin").enqueue("two", key="k3"))
            assert got == kept
        with psycopg.connect(dsn) as callers:  # a caller's transaction: raised
            kept, got = race("k4", lambda: Queue(callers, "kwin").enqueue("two", key="k4"))
            assert isinstance(got, errors.SerializationFailure), got
            callers.rollback()

        async def in_async() -> object:
            async with AsyncQueue(dsn, "kwin") as queue:
                return await queue.enqueue("two", key="k5")

        kept, got = race("k5", lambda: asyncio.run(in_async()))
        assert got == kept

        async def in_async_pool() -> object:
            async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool:
                return await AsyncQueue(pool, "kwin").enqueue("two", key="k6")

        kept, got = race("k6", lambda: asyncio.run(in_async_pool()))
        assert got == kept
        # no message with any of the keys was left, and none inserted by the retries
        assert admin.execute("SELECT count(*) FROM pgqueue.message WHERE idem_key LIKE 'k_'").fetchone() == (0,)
        admin.execute("SELECT pgqueue.queue_drop('kwin')")


def _outcome(call: object) -> object:
    """What ``call()`` returned, or the exception it raised."""
    assert callable(call)
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 (the outcome is the test's to judge)
        return exc


def test_a_raised_group_concurrency_keeps_the_groups_order(dsn: str) -> None:
    """docs/guarantees.md: a group's next message is the first of its waiting messages, also right
    after queue_alter raised the group's limit and before a new message of the group arrives."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('ord', p_group_concurrency => 1, p_lock_ms => 60000)")
        c.execute("SELECT pgqueue.message_create_batch('ord', ARRAY['a1','a2','a3']::bytea[], "
                  "p_groups => ARRAY['A','A','A'])")
        taken = "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('ord', 5)"
        assert c.execute(taken).fetchall() == [("a1",)]
        c.execute("SELECT pgqueue.queue_alter('ord', p_group_concurrency => 2)")
        c.execute("SELECT pgqueue.message_create('ord', 'a4', p_group => 'A')")
        assert c.execute(taken).fetchall() == [("a2",)]  # the room goes to the first waiting, not a4


def test_a_dead_letter_by_fail_or_by_lease_expiry_hands_its_groups_turn_on(dsn: str) -> None:
    """docs/guarantees.md, "Dead letters": a message dead-lettered at max_attempts by
    message_fail, or by its lease running out, leaves its group and passes the turn to the next
    message of the same group (sql/90_groups.sql shows it for message_reject only)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('gdl', p_group_concurrency => 1, p_max_attempts => 1)")
        c.execute("SELECT pgqueue.message_create_batch('gdl', ARRAY['a1','a2','a3']::bytea[], "
                  "p_groups => ARRAY['A','A','A'])")

        def take(lock_ms: int) -> list[tuple[str, int]]:
            rows = c.execute("SELECT convert_from(content, 'UTF8'), attempts FROM pgqueue.message_dequeue('gdl', 10, %s)",
                             (lock_ms,)).fetchall()
            return [(r[0], r[1]) for r in rows]

        assert take(60000) == [("a1", 1)]
        assert c.execute("SELECT pgqueue.message_fail(m.id, m.attempts, 'boom') FROM pgqueue.message m "
                         "WHERE m.content = 'a1'").fetchone() == (True,)
        assert take(60000) == [("a2", 1)], "a1's dead letter (message_fail at max_attempts) did not hand the turn on"
        c.execute("UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1 WHERE content = 'a2'")
        # the call that dead-letters a2 hands out a3, which a2's dead letter gave the turn
        assert take(60000) == [("a3", 1)], "a2's dead letter (lease expiry at max_attempts) did not hand the turn on"
        dead = c.execute("SELECT convert_from(content, 'UTF8'), last_error FROM pgqueue.dead_letter ORDER BY id").fetchall()
        assert dead == [("a1", "boom"), ("a2", "lease expired")]


def test_a_keyed_batch_on_a_capped_queue_asks_room_for_all_its_rows(dsn: str) -> None:
    """docs/guarantees.md, "Idempotent enqueue": message_create_batch with p_keys asks for room for
    all its rows, taken keys included; refused (PQ003), it inserts nothing."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('capb', p_max_size => 3)")
        first = c.execute("SELECT pgqueue.message_create('capb', 'x', p_key => 'k1')").fetchone()
        c.execute("SELECT pgqueue.message_create('capb', 'y')")  # room for one more
        with pytest.raises(psycopg.Error) as full:
            c.execute("SELECT pgqueue.message_create_batch('capb', ARRAY['x2','z']::bytea[], p_keys => ARRAY['k1','k2'])")
        assert full.value.sqlstate == "PQ003"
        assert c.execute("SELECT count(*), count(*) FILTER (WHERE idem_key = 'k2') FROM pgqueue.message").fetchone() == (2, 0)
        # a batch of one row with the taken key fits: its id back, nothing inserted
        assert c.execute("SELECT * FROM pgqueue.message_create_batch('capb', ARRAY['x3']::bytea[], "
                         "p_keys => ARRAY['k1'])").fetchall() == [first]
        assert c.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (2,)


def test_ended_key_windows_are_deleted_two_per_window_written(dsn: str) -> None:
    """docs/guarantees.md, "Idempotent enqueue": windows that have ended are deleted as new ones
    are written, two per window written; an ended window no longer holds its key."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('kwc', p_key_window_ms => 3600000)")
        c.execute("SELECT pgqueue.message_create_batch('kwc', ARRAY['1','2','3','4']::bytea[], "
                  "p_keys => ARRAY['w1','w2','w3','w4'])")
        assert c.execute("SELECT count(*) FROM pgqueue.message_dequeue('kwc', 10, 0)").fetchone() == (4,)
        windows = "SELECT count(*) FILTER (WHERE until <= pgqueue.now_ms()), count(*) FROM pgqueue.message_key"
        assert c.execute(windows).fetchone() == (0, 4)
        c.execute("UPDATE pgqueue.message_key SET until = 0")  # the four windows end
        for key, left in (("w5", (2, 3)), ("w6", (0, 2)), ("w7", (0, 3))):
            c.execute("SELECT pgqueue.message_create('kwc', 'x', p_key => %s)", (key,))
            assert c.execute("SELECT count(*) FROM pgqueue.message_dequeue('kwc', 10, 0)").fetchone() == (1,)
            assert c.execute(windows).fetchone() == left, key
        # the ended windows held their keys no longer: w1 is a new message
        c.execute("SELECT pgqueue.message_create('kwc', 'again', p_key => 'w1')")
        assert c.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (1,)


def test_order_within_a_group_the_turn_holder_priority_and_a_scheduled_turn(dsn: str) -> None:
    """docs/guarantees.md, "Order within a group": a message added later with an earlier
    dequeue_at waits behind the message holding the turn; when the turn passes on, the group's
    waiting messages go by (dequeue_at, id), so a priority message first; a turn handed to a
    scheduled message waits until it is due (and holds the group while it waits)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('ordp', p_group_concurrency => 1)")

        def create(content: str, group: str, dequeue_at: str = "NULL") -> None:
            c.execute(f"SELECT pgqueue.message_create('ordp', %s::bytea, {dequeue_at}, p_group => %s)",
                      (content.encode(), group))

        def take() -> list[str]:
            """Lease what is deliverable, then complete it (which hands each group's turn on)."""
            rows = c.execute("SELECT id, attempts, convert_from(content, 'UTF8') "
                             "FROM pgqueue.message_dequeue('ordp', 10, 60000)").fetchall()
            for msg_id, attempts, _ in rows:
                assert c.execute("SELECT pgqueue.message_complete(%s, %s)", (msg_id, attempts)).fetchone() == (True,)
            return sorted(r[2] for r in rows)

        create("a1", "A")  # holds A's turn
        create("a2", "A", "pgqueue.now_ms() - 60000")  # added later, due earlier
        create("a3", "A")
        create("a4", "A", "pgqueue.priority_dequeue_at(5)")  # a priority, added last
        create("b1", "B")
        create("b2", "B", "pgqueue.now_ms() + 6000")  # scheduled (past the takes below, however slow)
        create("b3", "B", "pgqueue.now_ms() - 60000")  # due long ago, but behind b2's turn once b2 has it
        assert take() == ["a1", "b1"]
        assert take() == ["a4", "b3"]  # A: the priority first; B: b3 is due before b2
        assert take() == ["a2"]  # B's turn is b2's now, not due yet
        assert take() == ["a3"]
        assert take() == []
        c.execute("SELECT pg_sleep(6.1)")
        assert take() == ["b2"]


@pytest.mark.parametrize("n", [0, 2])
def test_a_failed_message_holds_its_group_until_handed_out_again_whatever_the_limit(dsn: str, n: int) -> None:
    """docs/guarantees.md, "Retries": messages of a group are handed out in (dequeue_at, id)
    order whatever group_concurrency is, so a message failed with back-off (or deferred) keeps
    the group's turn and the group's later messages wait for it, with no limit (0) too; with a
    limit other than 1 they wait until it is handed out again, not until it is completed."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('gretry', p_group_concurrency => %s)", (n,))
        ids = [c.execute("SELECT pgqueue.message_create('gretry', %s::bytea, p_group => 't')",
                         (x.encode(),)).fetchone()[0] for x in "AB"]  # type: ignore[index]

        def take() -> list[tuple[int, int]]:
            return [(r[0], r[1]) for r in c.execute("SELECT id, attempts FROM pgqueue.message_dequeue('gretry', 10, 60000)")]

        assert take() == [(ids[0], 1), (ids[1], 1)]
        retry_at = int(c.execute("SELECT pgqueue.now_ms() + 2500").fetchone()[0])  # type: ignore[index]
        assert c.execute("SELECT pgqueue.message_fail(%s, 1, 'transient', %s)", (ids[0], retry_at)).fetchone() == (True,)
        assert c.execute("SELECT pgqueue.message_complete(%s, 1)", (ids[1],)).fetchone() == (True,)
        later = [c.execute("SELECT pgqueue.message_create('gretry', %s::bytea, p_group => 't')",
                           (x.encode(),)).fetchone()[0] for x in "CD"]  # type: ignore[index]
        assert take() == []  # C and D wait behind A's retry
        while int(c.execute("SELECT pgqueue.now_ms()").fetchone()[0]) < retry_at:  # type: ignore[index]
            time.sleep(0.1)
        first = take()
        assert first[0] == (ids[0], 2)  # A again first, then (room permitting) the next in order
        assert first == [(ids[0], 2), (later[0], 1)] + ([(later[1], 1)] if n == 0 else [])


def test_repeatable_read_acknowledgements_do_not_fail_on_the_removal_of_ended_key_windows(dsn: str) -> None:
    """An acknowledgement of a keyed message removes two ended key windows on the way, the oldest,
    which every session picks: under REPEATABLE READ one that another session removed after the
    snapshot raised 40001, failing the acknowledgement of a different message (a review: 251 of
    3,000 completes of four such consumers). It gives up on the removal instead."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('rrkeys', p_key_window_ms => 1)")
        for key in "abc":
            c.execute("SELECT pgqueue.message_create('rrkeys', %s::bytea, p_key => %s)", (key.encode(), key))
        taken = {str(r[2]): (int(r[0]), int(r[1])) for r in c.execute(
            "SELECT id, attempts, convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('rrkeys', 3, 60000)")}
        assert c.execute("SELECT pgqueue.message_complete(%s, %s)", taken["a"]).fetchone() == (True,)
        time.sleep(0.05)  # a's window has ended
        with psycopg.connect(dsn) as rr:
            rr.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            rr.execute("SELECT 1")  # its snapshot still has a's ended window
            # another session's acknowledgement removes it
            assert c.execute("SELECT pgqueue.message_complete(%s, %s)", taken["b"]).fetchone() == (True,)
            assert rr.execute("SELECT pgqueue.message_complete(%s, %s)", taken["c"]).fetchone() == (True,)
            rr.commit()
        assert c.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (0,)
        # batches acknowledged under REPEATABLE READ still remove the ended windows they leave
        # behind (once a transaction it left n - 2 of a batch of n: 182 of 200 after ten rounds)
        c.execute("SELECT pgqueue.message_create_batch('rrkeys', array_fill('x'::bytea, ARRAY[200]), "
                  "p_keys => ARRAY(SELECT 'b' || g FROM generate_series(1, 200) g))")
        with psycopg.connect(dsn) as rr:
            for _ in range(10):
                rr.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                rr.execute("SELECT count(*) FROM pgqueue.message_complete_batch("
                           "ARRAY(SELECT id FROM pgqueue.message_dequeue('rrkeys', 20, 60000) ORDER BY id), "
                           "ARRAY(SELECT 1 FROM generate_series(1, 20)))")
                rr.commit()
                time.sleep(0.01)  # (the windows of 1 ms end)
        ended = c.execute("SELECT count(*) FROM pgqueue.message_key WHERE until <= pgqueue.now_ms()").fetchone()
        assert ended is not None and int(ended[0]) <= 40, ended
        # the count of windows written is each queue's: a transaction that writes one of another
        # queue first still removes this queue's (it counted both, and removed none of these)
        c.execute("SELECT pgqueue.queue_create('rrkeys2', p_key_window_ms => 1)")
        c.execute("SELECT pgqueue.message_create_batch('rrkeys2', array_fill('y'::bytea, ARRAY[10]), "
                  "p_keys => ARRAY(SELECT 'o' || g FROM generate_series(1, 10) g))")
        c.execute("DELETE FROM pgqueue.message_key")
        c.execute("SELECT pgqueue.message_create_batch('rrkeys', array_fill('x'::bytea, ARRAY[100]), "
                  "p_keys => ARRAY(SELECT 'c' || g FROM generate_series(1, 100) g))")
        with psycopg.connect(dsn) as rr:
            for _ in range(10):
                rr.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                rr.execute("SELECT pgqueue.message_complete(id, attempts) FROM pgqueue.message_dequeue('rrkeys2', 1, 60000)")
                rr.execute("SELECT count(*) FROM pgqueue.message_complete_batch("
                           "ARRAY(SELECT id FROM pgqueue.message_dequeue('rrkeys', 10, 60000) ORDER BY id), "
                           "ARRAY(SELECT 1 FROM generate_series(1, 10)))")
                rr.commit()
                time.sleep(0.01)
        ended = c.execute("SELECT count(*) FROM pgqueue.message_key k JOIN pgqueue.queue q ON q.id = k.queue_id "
                          "WHERE q.name = 'rrkeys' AND k.until <= pgqueue.now_ms()").fetchone()
        assert ended is not None and int(ended[0]) <= 20, ended


def test_a_message_deleted_with_plain_sql_frees_its_key(dsn: str) -> None:
    """docs/guarantees.md, "Idempotent enqueue": the key window is kept by pgqueue's functions, not
    by a trigger, so a message deleted with plain SQL frees its key at once."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT pgqueue.queue_create('kdel', p_key_window_ms => 3600000)")
        first = c.execute("SELECT pgqueue.message_create('kdel', 'x', p_key => 'k')").fetchone()
        assert c.execute("SELECT pgqueue.message_create('kdel', 'x', p_key => 'k')").fetchone() == first
        c.execute("DELETE FROM pgqueue.message WHERE idem_key = 'k'")
        again = c.execute("SELECT pgqueue.message_create('kdel', 'y', p_key => 'k')").fetchone()
        assert again is not None and first is not None and again != first
        assert c.execute("SELECT count(*) FROM pgqueue.message_key").fetchone() == (0,)


@pytest.mark.parametrize("level", ["REPEATABLE READ", "SERIALIZABLE", "READ UNCOMMITTED"])
def test_grouped_calls_in_savepoints_of_one_transaction_do_not_fail_each_other(dsn: str, level: str) -> None:
    """A transaction's own decisions on a group's turns are visible to it, also when a savepoint
    made them (a nested `conn.transaction()`, Django's atomic()): under REPEATABLE READ the second
    grouped call after a released savepoint raised 40001 at every retry, since the lock row's
    last locker was the savepoint's own xid, which the snapshot cannot see. READ UNCOMMITTED runs
    as READ COMMITTED and takes the same path."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('sp', p_group_concurrency => 2, p_lock_ms => 60000)")
        conn.execute("SELECT pgqueue.message_create('sp', 'a', p_group => 'g')")
    with psycopg.connect(dsn) as conn:
        conn.execute(f"SET TRANSACTION ISOLATION LEVEL {level}")
        with conn.transaction():  # a savepoint: the outer transaction began at the SET
            conn.execute("SELECT pgqueue.message_create('sp', 'b', p_group => 'g')")
        with conn.transaction():
            conn.execute("SELECT pgqueue.message_create('sp', 'c', p_group => 'g')")
        with conn.transaction():
            got = conn.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('sp', 2)").fetchall()
        assert sorted(r[0] for r in got) == ["a", "b"]  # two in flight, c waits for a turn
        conn.commit()


def test_batches_of_many_groups_in_opposite_orders_do_not_deadlock(dsn: str) -> None:
    """Two producers enqueue batches over the same groups, one in the reverse order of the other.
    A batch locked its groups' stripes message by message, in its own order: two such batches
    deadlocked (40P01; Spark task-mode writes with groupColumn hit it, a review of the Spark
    source, session 43). It locks them first, in the stripes' order."""
    Queue(dsn, "grouped").create(group_concurrency=1)
    groups = [f"g{i}" for i in range(64)]
    errors_seen: list[BaseException] = []
    barrier = threading.Barrier(2)

    def produce(order: list[str]) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                for _ in range(20):
                    barrier.wait(10)
                    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('grouped', "
                                 "array_fill('x'::bytea, ARRAY[%s]), p_groups => %s)", (len(order), order))
        except BaseException as exc:  # surfaced below
            errors_seen.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=produce, args=(order,)) for order in (groups, groups[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not [e for e in errors_seen if not isinstance(e, threading.BrokenBarrierError)], errors_seen
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgqueue.message").fetchone() == (2 * 20 * 64,)


def _call_noting(dsn: str, results: dict[str, str], name: str, statement: str, params: tuple[object, ...]) -> None:
    """Run one autocommit statement; note "ok" or the psycopg error's class name under ``name``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(statement, params)  # type: ignore[arg-type]
            results[name] = "ok"
        except psycopg.Error as exc:
            results[name] = type(exc).__name__


@pytest.mark.parametrize("consumer_first", ["lower stripe", "higher stripe"])
def test_a_producers_batch_and_a_consumers_batch_take_group_locks_in_one_order(dsn: str, consumer_first: str) -> None:
    """A producer's batch over groups a and b (a on the lower stripe), and a consumer's
    message_complete_batch handing the turns of both on, both waiting on group a's lock (held by
    a third transaction that enqueued into a): when it ends, the two could take the stripes in
    opposite orders and deadlock (40P01; a review of the session's changes, session 43). The
    hand-offs go in stripe order too, whatever the order of the ids and of the rows deleted."""
    Queue(dsn, "gq").create(group_concurrency=1)
    with psycopg.connect(dsn, autocommit=True) as admin:
        a, b = (r[0] for r in admin.execute(
            "SELECT g FROM unnest(ARRAY['alpha', 'beta', 'gamma', 'delta']) g "
            "ORDER BY hashtext(g) & 255 LIMIT 2").fetchall())
        # the consumer's rows: its first id (and the first row) of the higher or the lower stripe
        for group in ((b, a) if consumer_first == "higher stripe" else (a, b)):
            admin.execute("SELECT pgqueue.message_create('gq', 'first', p_group => %s)", (group,))
        leased = admin.execute("SELECT d.id, d.attempts FROM pgqueue.message_dequeue('gq', 2) d ORDER BY d.id").fetchall()
        results: dict[str, str] = {}

        def call(name: str, statement: str, params: tuple[object, ...]) -> None:
            _call_noting(dsn, results, name, statement, params)

        def waiting(n: int) -> None:
            wait_for_lock_waiters(admin, n)

        with psycopg.connect(dsn) as holder:  # an open transaction that enqueued into group a
            holder.execute("SELECT pgqueue.message_create('gq', 'held', p_group => %s)", (a,))
            producer = threading.Thread(target=call, args=(
                "producer", "SELECT pgqueue.message_create_batch('gq', ARRAY['p1', 'p2']::bytea[], p_groups => %s)",
                ([a, b],)))
            producer.start()
            waiting(1)
            consumer = threading.Thread(target=call, args=(
                "consumer", "SELECT pgqueue.message_complete_batch(%s::bigint[], %s::integer[])",
                ([i for i, _ in leased], [t for _, t in leased])))
            consumer.start()
            waiting(2)
        producer.join(20)
        consumer.join(20)
    assert results == {"producer": "ok", "consumer": "ok"}, results


@pytest.mark.parametrize("call", ["message_cancel", "message_dequeue"])
def test_single_calls_that_hand_turns_on_take_group_locks_in_stripe_order(dsn: str, call: str) -> None:
    """A producer's batch over groups lo and hi (lo on the lower stripe, hi the lower key), and a
    single call handing the turns of both on, both waiting on lo's lock (held by a transaction
    that enqueued into lo): message_cancel handed turns on in the order of the ids (hi first
    here), a lease-mode message_dequeue of several in the order of the group keys (hi first),
    and each deadlocked with the batch (40P01; a review of the message life cycle, session 44).
    Now every call takes the groups' locks in stripe order."""
    Queue(dsn, "gq").create(group_concurrency=2)
    with psycopg.connect(dsn, autocommit=True) as admin:
        stripes = dict(admin.execute("SELECT g, hashtext(g) & 255 FROM unnest(ARRAY['alpha', 'beta', 'gamma', "
                                     "'delta', 'epsilon', 'zeta', 'eta', 'theta']) g").fetchall())
        lo, hi = next((x, y) for x in stripes for y in stripes if stripes[x] < stripes[y] and x > y)
        for group in (hi, lo, hi, lo):  # ids: hi's first
            admin.execute("SELECT pgqueue.message_create('gq', 'm', p_group => %s)", (group,))
        first = [r[0] for r in admin.execute("SELECT id FROM pgqueue.message ORDER BY id LIMIT 2")]
        leased: list[tuple[int, int]] = []
        if call == "message_dequeue":  # a consumer holds the first of each; the second of each has a turn
            leased = admin.execute("SELECT d.id, d.attempts FROM pgqueue.message_dequeue('gq', 2) d").fetchall()
            assert sorted(i for i, _ in leased) == first
        results: dict[str, str] = {}

        def run_call(name: str, statement: str, params: tuple[object, ...]) -> None:
            _call_noting(dsn, results, name, statement, params)

        def waiting(n: int) -> None:
            wait_for_lock_waiters(admin, n)

        threads = []
        with psycopg.connect(dsn) as holder:  # an open transaction that enqueued into lo
            holder.execute("SELECT pgqueue.message_create('gq', 'held', p_group => %s)", (lo,))
            if call == "message_dequeue":  # the consumer's acknowledgement waits too (lo first)
                threads.append(threading.Thread(target=run_call, args=(
                    "acknowledgement", "SELECT pgqueue.message_complete_batch(%s::bigint[], %s::integer[])",
                    ([i for i, _ in leased], [t for _, t in leased]))))
            else:
                threads.append(threading.Thread(target=run_call, args=(
                    "producer", "SELECT pgqueue.message_create_batch('gq', ARRAY['p1', 'p2']::bytea[], p_groups => %s)",
                    ([lo, hi],))))
            threads[0].start()
            waiting(1)
            if call == "message_dequeue":
                threads.append(threading.Thread(target=run_call, args=(
                    "call", "SELECT count(*) FROM pgqueue.message_dequeue('gq', 2, 60000)", ())))
            else:
                threads.append(threading.Thread(target=run_call, args=(
                    "call", "SELECT count(*) FROM pgqueue.message_cancel('gq', %s::bigint[])", (first,))))
            threads[1].start()
            waiting(2)
        for thread in threads:
            thread.join(20)
    assert set(results.values()) == {"ok"} and len(results) == 2, results


@pytest.mark.parametrize("call", ["lease", "delete", "complete_and_dequeue delete"])
def test_a_further_round_of_a_dequeue_takes_no_lock_below_one_it_took(dsn: str, call: str) -> None:
    """A message_dequeue of several messages on a queue of group concurrency 2 takes another
    round for the turns its first round handed on, and took the second round's group locks
    after the first's, whatever their stripes: round 1 locks hi's stripe, round 2 lo's (lower),
    while a producer that enqueued into lo waits for hi: 40P01 (docs/locking.md listed it). Now
    a further round locks no stripe below one it locked: lease mode leaves lo's turn to be
    handed on when its message leaves; delete mode gives lo's message back and ends the call.
    message_complete_and_dequeue in delete mode then took the message given back in a further
    take of its own (this transaction's row lock does not make it skip it), and deadlocked the
    same way (a review of the change): it takes no further take in delete mode."""
    lock_ms = 60000 if call == "lease" else 0
    Queue(dsn, "gq").create(group_concurrency=2)
    with psycopg.connect(dsn, autocommit=True) as admin:
        stripes = dict(admin.execute("SELECT g, hashtext(g) & 255 FROM unnest(ARRAY['alpha', 'beta', 'gamma', "
                                     "'delta', 'epsilon', 'zeta', 'eta', 'theta']) g").fetchall())
        lo, hi = sorted(stripes, key=lambda g: stripes[g])[:1] + sorted(stripes, key=lambda g: stripes[g])[-1:]
        for body in ("h1", "h2"):  # h1 has the turn, h2 waits behind it
            admin.execute("SELECT pgqueue.message_create('gq', %s, p_group => %s)", (body, hi))
        results: dict[str, str] = {}
        got: list[str] = []

        def dequeue() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                try:
                    statement = ("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('gq', 3, %s)"
                                 if call != "complete_and_dequeue delete" else
                                 "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_complete_and_dequeue("
                                 "'{}', '{}', 'gq', 3, %s)")
                    got.extend(r[0] for r in conn.execute(statement, (lock_ms,)))
                    results["dequeue"] = "ok"
                except psycopg.Error as exc:
                    results["dequeue"] = type(exc).__name__

        def producer() -> None:  # enqueues into lo (its lock), then into hi
            with psycopg.connect(dsn) as conn:
                try:
                    conn.execute("SELECT pgqueue.message_create('gq', 'p-lo', p_group => %s)", (lo,))
                    conn.execute("SELECT pgqueue.message_create('gq', 'p-hi', p_group => %s)", (hi,))
                    conn.commit()
                    results["producer"] = "ok"
                except psycopg.Error as exc:
                    results["producer"] = type(exc).__name__

        threads = [threading.Thread(target=dequeue), threading.Thread(target=producer)]
        with psycopg.connect(dsn) as holder:  # an open transaction that enqueued into hi
            holder.execute("SELECT pgqueue.message_create('gq', 'held', p_group => %s)", (hi,))
            threads[0].start()  # round 1 takes h1 and waits for hi's lock to hand h2 the turn
            wait_for_lock_waiters(admin, 1)
            admin.execute("SELECT pgqueue.message_create('gq', 'l1', p_group => %s)", (lo,))  # lo's turn
            threads[1].start()  # holds lo's lock, waits for hi's
            wait_for_lock_waiters(admin, 2)
        for thread in threads:
            thread.join(20)
        assert results == {"dequeue": "ok", "producer": "ok"}, results
        left = dict(admin.execute("SELECT convert_from(content, 'UTF8'), turn_at IS NOT NULL "
                                  "FROM pgqueue.message").fetchall())
    if lock_ms:  # round 2 took h2 and l1; lo's turn is handed on when l1 leaves
        assert sorted(got) == ["h1", "h2", "l1"], got
        assert left == {"h1": True, "h2": True, "held": False, "l1": True, "p-hi": False, "p-lo": False}, left
    else:  # l1 given back, with its turn; h2 left and handed hi's turn on
        assert got == ["h1", "h2"], got
        assert left == {"held": True, "l1": True, "p-hi": False, "p-lo": False}, left


def test_a_delete_mode_dequeue_of_one_in_flight_per_group_hands_out_its_limit(dsn: str) -> None:
    """With one in flight per group a delete-mode hand-off takes no group lock while the group
    has a message waiting: further rounds give nothing back then. The first version of the
    rule above counted every hand-off as a lock and handed out 3 a call where 10 were due (two
    groups; a review of the change)."""
    Queue(dsn, "two").create(group_concurrency=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.message_create_batch('two', array_fill('x'::bytea, ARRAY[80]), "
                     "p_groups => (SELECT array_agg(CASE WHEN i % 2 = 0 THEN 'alpha' ELSE 'eta' END) "
                     "FROM generate_series(1, 80) i))")
        sizes = [len(conn.execute("SELECT id FROM pgqueue.message_dequeue('two', 10, 0)").fetchall())
                 for _ in range(8)]
    assert sizes == [10] * 8, sizes


def test_a_keyed_batch_under_repeatable_read_returns_a_live_keys_id_as_a_single_create_does(dsn: str) -> None:
    """Under REPEATABLE READ a batch whose message's key is live returns that message's id, as
    message_create does, even when its group changed after the snapshot: the batch's up-front
    group locks (READ COMMITTED only) would have raised 40001 first."""
    Queue(dsn, "g").create(group_concurrency=1)
    with psycopg.connect(dsn, autocommit=True) as admin, psycopg.connect(dsn) as tx:
        first = admin.execute("SELECT pgqueue.message_create('g', 'a', p_group => 'x', p_key => 'k1')").fetchone()
        tx.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        tx.execute("SELECT 1")  # the snapshot
        admin.execute("SELECT pgqueue.message_create('g', 'b', p_group => 'x')")  # after it, same group
        got = tx.execute("SELECT * FROM pgqueue.message_create_batch('g', ARRAY['a']::bytea[], "
                         "p_groups => ARRAY['x'], p_keys => ARRAY['k1'])").fetchall()
        assert first is not None and got == [first]


def _run_all(threads: list[threading.Thread]) -> None:
    """Start the threads, then wait for each (30 s at most)."""
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)


@pytest.mark.parametrize("concurrency", [2, 0])
def test_complete_and_dequeue_calls_racing_on_few_groups_do_not_deadlock(dsn: str, concurrency: int) -> None:
    """Four consumers acknowledging and fetching in one call (the worker's call) on a queue of
    8 groups with group_concurrency 2 or 0: each call took its groups' locks in two runs (the
    leases' hand-offs, then the acknowledgements'), and such calls deadlocked (40P01; a review
    of the message life cycle measured 3 and 24 in 15 s, and the stock worker logged them).
    Now the leases' turns are handed on with the acknowledgements', all locks in one run."""
    Queue(dsn, "few").create(group_concurrency=concurrency, lock_ms=60000)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pgqueue.message_create_batch('few', array_fill('x'::bytea, ARRAY[4000]), "
                      "p_groups => (SELECT array_agg('grp' || (i % 8)) FROM generate_series(1, 4000) i))")
    stop = time.monotonic() + 6
    seen: dict[str, int] = {"calls": 0, "lock order": 0, "update chain": 0}
    others: list[BaseException] = []
    count = threading.Lock()

    def consumer() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            held: list[tuple[int, int]] = []
            while time.monotonic() < stop:
                try:
                    rows = conn.execute("SELECT id, attempts, stale FROM pgqueue.message_complete_and_dequeue("
                                        "%s::bigint[], %s::integer[], 'few', 3)",
                                        ([i for i, _ in held], [a for _, a in held])).fetchall()
                    held = [(r[0], r[1]) for r in rows if not r[2]]
                    with count:
                        seen["calls"] += 1
                except psycopg.errors.DeadlockDetected as exc:
                    with count:
                        seen[deadlock_kind(exc)] += 1
                    held = []
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    others.append(exc)
                    return

    _run_all([threading.Thread(target=consumer) for _ in range(4)])
    assert not others, others
    # none in every run since the fix; at most one allowed, so that a rare deadlock of a path
    # the fix does not cover (docs/locking.md) does not fail the suite (the build before: 4-8).
    # PostgreSQL's own wait on a row's newer version (helpers.deadlock_kind) is counted apart:
    # about one in 50,000 such calls on 2 busy cores (session 53), at most 3 allowed in the 6 s.
    assert seen["calls"] > 100 and seen["lock order"] <= 1 and seen["update chain"] <= 3, seen
    with psycopg.connect(dsn) as conn:  # no group over its limit, none left without a turn
        over = conn.execute("SELECT count(*) FROM (SELECT group_key FROM pgqueue.message WHERE turn_at IS NOT NULL "
                            "GROUP BY group_key HAVING %s > 0 AND count(*) > %s) o", (concurrency, concurrency)).fetchone()
        stuck = conn.execute("SELECT count(*) FROM (SELECT group_key FROM pgqueue.message GROUP BY group_key "
                             "HAVING count(turn_at) = 0) s").fetchone()
    assert (over, stuck) == ((0,), (0,))


@pytest.mark.parametrize("concurrency", [0, 1, 4])
def test_complete_and_dequeue_hands_out_as_many_as_dequeue_on_few_groups(dsn: str, concurrency: int) -> None:
    """With its leases' turns handed on after the acknowledgements, the worker's call handed
    out one message of a single group where message_dequeue hands out p_limit (its further
    rounds take the turns just handed on): the worker then slept between calls, 6-12x slower
    on such queues (a review of the session's changes). A second take after the
    acknowledgements hands them out; with a limit of 1 it takes the message an
    acknowledgement handed the group's turn to (it handed out nothing: a later review)."""
    Queue(dsn, "one").create(group_concurrency=concurrency)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.message_create_batch('one', array_fill('x'::bytea, ARRAY[20]), "
                     "p_groups => array_fill('g'::text, ARRAY[20]))")
        want = {0: 10, 1: 1, 4: 4}[concurrency]
        rows = conn.execute("SELECT id, attempts, stale FROM pgqueue.message_complete_and_dequeue("
                            "'{}', '{}', 'one', %s, 60000)", (want,)).fetchall()
        assert len(rows) == want and not any(r[2] for r in rows), rows
        ids = [r[0] for r in rows]
        assert ids == sorted(ids)  # in the group's order
        # and with acknowledgements: the next ones, and no group over its limit
        rows = conn.execute("SELECT id, attempts, stale FROM pgqueue.message_complete_and_dequeue("
                            "%s::bigint[], %s::integer[], 'one', %s, 60000)",
                            ([r[0] for r in rows], [r[1] for r in rows], want)).fetchall()
        assert len(rows) == want and not any(r[2] for r in rows), rows
        leased = conn.execute("SELECT count(*) FROM pgqueue.message WHERE locked_until IS NOT NULL").fetchone()
        assert leased == (want,)


def test_a_stale_acknowledgement_does_not_count_its_groups_lock_as_held(dsn: str) -> None:
    """message_complete_and_dequeue's further takes hand turns on only for groups whose locks
    its acknowledgements' run took: a stale acknowledgement (nothing deleted, no lock taken)
    counted, so a further take locked its group after the run, and deadlocked with a batch
    waiting in the other order (a review of the session's changes). Groups: lo on the lower
    stripe, hi on the higher."""
    Queue(dsn, "dl").create(group_concurrency=0, lock_ms=600000)
    with psycopg.connect(dsn, autocommit=True) as admin:
        stripes = dict(admin.execute("SELECT g, hashtext(g) & 255 FROM unnest(ARRAY['alpha', 'beta', 'gamma', "
                                     "'delta', 'epsilon', 'zeta', 'eta', 'theta']) g").fetchall())
        lo, hi = sorted(stripes, key=lambda g: stripes[g])[:1] + sorted(stripes, key=lambda g: stripes[g])[-1:]

        def leased(group: str) -> tuple[int, int]:
            admin.execute("SELECT pgqueue.message_create('dl', 'x', p_group => %s)", (group,))
            row = admin.execute("SELECT id, attempts FROM pgqueue.message_dequeue('dl', 1)").fetchone()
            assert row is not None
            return row[0], row[1]

        stale_one, b_lo, mine, b_hi = leased(lo), leased(lo), leased(hi), leased(hi)
        results: dict[str, str] = {}
        with psycopg.connect(dsn) as producer:  # holds hi's lock
            producer.execute("SELECT pgqueue.message_create('dl', 'p', p_group => %s)", (hi,))
            a = threading.Thread(target=_call_noting, args=(
                dsn, results, "complete_and_dequeue",
                "SELECT count(*) FROM pgqueue.message_complete_and_dequeue(%s::bigint[], %s::integer[], 'dl', 4)",
                ([mine[0], stale_one[0]], [mine[1], 99])))
            a.start()
            wait_for_lock_waiters(admin, 1)
            admin.execute("SELECT pgqueue.message_create('dl', 'turn', p_group => %s)", (lo,))  # lo gets a turn
            b = threading.Thread(target=_call_noting, args=(
                dsn, results, "batch", "SELECT pgqueue.message_complete_batch(%s::bigint[], %s::integer[])",
                ([b_lo[0], b_hi[0]], [b_lo[1], b_hi[1]])))
            b.start()
            wait_for_lock_waiters(admin, 2)
        a.join(20)
        b.join(20)
    assert results == {"complete_and_dequeue": "ok", "batch": "ok"}, results


def test_complete_and_dequeue_never_hands_a_message_out_twice(dsn: str) -> None:
    """A further take is a dequeue of its own: with a lease shorter than the call, it handed a
    lease of the first take out again (ids 1, 1, 2, 1) or dead-lettered it at max_attempts (a
    review of the session's changes). Further takes stop once a lease of the call may have run out."""
    Queue(dsn, "short").create(group_concurrency=0, max_attempts=1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.message_create_batch('short', array_fill('x'::bytea, ARRAY[6]), "
                     "p_groups => array_fill('g'::text, ARRAY[6]))")
        for _ in range(20):
            rows = conn.execute("SELECT id FROM pgqueue.message_complete_and_dequeue('{}', '{}', 'short', 4, 1)").fetchall()
            ids = [r[0] for r in rows]
            assert len(ids) == len(set(ids)), ids
            dead = conn.execute("SELECT count(*) FROM pgqueue.dead_letter WHERE id = ANY (%s)", (ids,)).fetchone()
            assert dead == (0,), ids
            conn.execute("SELECT pgqueue.dead_letter_purge('short')")
            conn.execute("SELECT pgqueue.message_create_batch('short', array_fill('x'::bytea, ARRAY[4]), "
                         "p_groups => array_fill('g'::text, ARRAY[4]))")


def test_acknowledging_one_queue_while_taking_from_another_does_not_deadlock(dsn: str) -> None:
    """message_complete_batch handed turns on by stripe, then id: acknowledgements of queue x1
    with a take from x2 (whose leases' turns the batch hands on too) and the other way round
    locked (x1, stripe) and (x2, stripe) in opposite orders (a review measured 12 deadlocks in
    20 s). They go by stripe, then queue."""
    for name in ("x1", "x2"):
        Queue(dsn, name).create(group_concurrency=0, lock_ms=60000)
    with psycopg.connect(dsn, autocommit=True) as admin:
        for name in ("x1", "x2"):
            admin.execute("SELECT pgqueue.message_create_batch(%s, array_fill('x'::bytea, ARRAY[20000]), "
                          "p_groups => array_fill('c'::text, ARRAY[20000]))", (name,))
    stop = time.monotonic() + 6
    seen: dict[str, int] = {"calls": 0, "lock order": 0, "update chain": 0}
    others: list[BaseException] = []

    def consumer(ack_queue: str, take_queue: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < stop:
                try:
                    held = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue(%s, 1)", (ack_queue,)).fetchall()
                    rows = conn.execute("SELECT id, attempts FROM pgqueue.message_complete_and_dequeue(%s::bigint[], "
                                        "%s::integer[], %s, 1) WHERE NOT stale",
                                        ([i for i, _ in held], [a for _, a in held], take_queue)).fetchall()
                    conn.execute("SELECT pgqueue.message_complete_batch(%s::bigint[], %s::integer[])",
                                 ([i for i, _ in rows], [a for _, a in rows]))
                    seen["calls"] += 1
                except psycopg.errors.DeadlockDetected as exc:
                    seen[deadlock_kind(exc)] += 1
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    others.append(exc)
                    return

    _run_all([threading.Thread(target=consumer, args=pair) for pair in [("x1", "x2"), ("x2", "x1")] * 2])
    assert not others, others
    # at most one: one run of the suite saw one (not seen in a dozen runs since, its path not
    # found); the build before had 6 in the same 6 s. PostgreSQL's update-chain wait apart, as above.
    assert seen["calls"] > 100 and seen["lock order"] <= 1 and seen["update chain"] <= 3, seen
