"""Invariant 3: N concurrent consumers over M messages, each on its own connection.

Every consumer records what it saw; the records are merged and compared with the ids that were
created (the method of Marko Tiikkaja's "Queues, queues, they all fall down", see
docs/design.md): in delete mode every message is delivered exactly once; in lease mode every
message is completed exactly once (message_complete returns true once per id), also when leases
run out and messages are delivered again.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg
import pytest
from helpers import wait_for_lock_waiters

pytestmark = pytest.mark.slow

T = TypeVar("T")
M = 5_000
CONSUMERS = 8
DEADLINE_S = 120


def run_concurrently(workers: list[Callable[[threading.Barrier], T]]) -> list[T]:
    """Start every worker in its own thread at the same moment; return their results (or raise)."""
    barrier = threading.Barrier(len(workers))
    with ThreadPoolExecutor(max_workers=len(workers)) as pool:
        futures = [pool.submit(w, barrier) for w in workers]
        return [f.result(timeout=DEADLINE_S + 60) for f in futures]


def connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, options="-c statement_timeout=30000")


def create_messages(conn: psycopg.Connection[Any], queue: str, n: int) -> list[int]:
    conn.execute("SELECT pgqueue.queue_create(%s, p_if_not_exists => true)", (queue,))
    contents = [f"{queue}-{i}".encode() for i in range(n)]
    ids = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch(%s, %s)", (queue, contents)).fetchall()]
    assert len(set(ids)) == n
    return ids


def queue_is_empty(conn: psycopg.Connection[Any], queue: str) -> bool:
    row = conn.execute(
        "SELECT NOT EXISTS (SELECT 1 FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
        "WHERE q.name = %s)", (queue,)).fetchone()
    assert row is not None
    return bool(row[0])


@dataclass
class Seen:
    """What one consumer saw."""

    delivered: list[tuple[int, int]] = field(default_factory=list)    # (id, attempts)
    completed: list[tuple[int, int, bool]] = field(default_factory=list)  # (id, attempts, result)
    batches: list[list[int]] = field(default_factory=list)


def assert_busy(seen: list[Seen]) -> None:
    """The run was concurrent: most consumers got work."""
    busy = sum(1 for s in seen if s.delivered)
    assert busy >= len(seen) // 2, f"only {busy} of {len(seen)} consumers got messages"


def test_delete_mode_delivers_each_message_exactly_once(dsn: str, conn: psycopg.Connection[Any]) -> None:
    ids = create_messages(conn, "q", M)

    def consumer(limit: int) -> Callable[[threading.Barrier], Seen]:
        def run(barrier: threading.Barrier) -> Seen:
            seen = Seen()
            with connect(dsn) as c:
                barrier.wait()
                end = time.monotonic() + DEADLINE_S
                while time.monotonic() < end:
                    rows = c.execute("SELECT id, attempts FROM pgqueue.message_dequeue('q', %s, 0)", (limit,)).fetchall()
                    if rows:
                        seen.delivered += [(r[0], r[1]) for r in rows]
                        seen.batches.append([r[0] for r in rows])
                    elif queue_is_empty(c, "q"):
                        break
            return seen
        return run

    seen = run_concurrently([consumer(limit) for limit in (1, 2, 3, 5, 7, 10, 1, 10)])
    counts = Counter(i for s in seen for i, _ in s.delivered)
    assert sorted(counts) == ids, "the delivered ids are not the created ones"
    assert [i for i, n in counts.items() if n != 1] == [], "delivered more than once"
    assert all(a == 1 for s in seen for _, a in s.delivered)
    assert all(b == sorted(b) for s in seen for b in s.batches), "a batch is not in (dequeue_at, id) order"
    assert queue_is_empty(conn, "q")
    assert_busy(seen)


def test_in_transaction_consumers_with_rollbacks_process_each_message_once(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Delete-mode dequeue inside the consumer's own transaction, with its own write: a rolled
    back transaction gives its messages back, a committed one consumed them, exactly once."""
    ids = create_messages(conn, "q", M // 2)
    conn.execute("CREATE TABLE done (id bigint NOT NULL, consumer int NOT NULL)")

    def consumer(n: int) -> Callable[[threading.Barrier], Seen]:
        def run(barrier: threading.Barrier) -> Seen:
            seen = Seen()
            rnd = random.Random(n)
            with connect(dsn) as c:
                barrier.wait()
                end = time.monotonic() + DEADLINE_S
                while time.monotonic() < end:
                    rolled_back = rnd.random() < 0.2
                    got: list[int] = []
                    with c.transaction():
                        got = [r[0] for r in c.execute(
                            "SELECT id FROM pgqueue.message_dequeue('q', %s, 0)", (rnd.randint(1, 8),)).fetchall()]
                        c.execute("INSERT INTO done SELECT unnest(%s::bigint[]), %s", (got, n))
                        if rolled_back:
                            raise psycopg.Rollback()
                    if got and not rolled_back:
                        seen.delivered += [(i, 1) for i in got]
                    if not got and queue_is_empty(c, "q"):
                        break
            return seen
        return run

    seen = run_concurrently([consumer(n) for n in range(CONSUMERS)])
    done = Counter(r[0] for r in conn.execute("SELECT id FROM done").fetchall())
    assert sorted(done) == ids
    assert [i for i, n in done.items() if n != 1] == []
    # what the consumers believe they committed is what the table holds
    assert Counter(i for s in seen for i, _ in s.delivered) == done
    assert queue_is_empty(conn, "q")
    assert_busy(seen)


def lease_consumer(dsn: str, queue: str, *, limit: int, lock_ms: int, sleep_s: float = 0.0,
                   sleep_every: int = 1, done: threading.Event | None = None) -> Callable[[threading.Barrier], Seen]:
    """Dequeue with a lease, sleep sleep_s every sleep_every-th batch (letting short leases run
    out), then complete each message; record every delivery and every complete's result."""
    def run(barrier: threading.Barrier) -> Seen:
        seen = Seen()
        with connect(dsn) as c:
            barrier.wait()
            end = time.monotonic() + DEADLINE_S
            n = 0
            while time.monotonic() < end:
                rows = c.execute("SELECT id, attempts FROM pgqueue.message_dequeue(%s, %s, %s)",
                                 (queue, limit, lock_ms)).fetchall()
                if not rows:
                    if (done is None or done.is_set()) and queue_is_empty(c, queue):
                        break
                    time.sleep(0.002)
                    continue
                n += 1
                seen.delivered += [(r[0], r[1]) for r in rows]
                seen.batches.append([r[0] for r in rows])
                if sleep_s and n % sleep_every == 0:
                    time.sleep(sleep_s)
                for msg_id, attempts in rows:
                    ok = c.execute("SELECT pgqueue.message_complete(%s, %s)", (msg_id, attempts)).fetchone()
                    assert ok is not None
                    seen.completed.append((msg_id, attempts, bool(ok[0])))
        return seen
    return run


def check_lease_run(ids: list[int], seen: list[Seen]) -> tuple[int, int]:
    """Merge the consumers' records; return (messages delivered more than once, stale completes)."""
    deliveries: dict[int, list[int]] = {}
    for s in seen:
        for msg_id, attempts in s.delivered:
            deliveries.setdefault(msg_id, []).append(attempts)
    assert sorted(deliveries) == ids, "the delivered ids are not the created ones"
    for msg_id, tokens in deliveries.items():
        # each delivery hands out the next token: 1, 2, 3, ... never one token twice
        assert sorted(tokens) == list(range(1, len(tokens) + 1)), (msg_id, tokens)

    wins = Counter(i for s in seen for i, _, ok in s.completed if ok)
    assert sorted(wins) == ids, "some message was never completed"
    assert [i for i, n in wins.items() if n != 1] == [], "completed more than once"
    stale = 0
    for s in seen:
        for msg_id, attempts, ok in s.completed:
            latest = max(deliveries[msg_id])
            if ok:
                assert attempts == latest, f"message {msg_id}: stale token {attempts} completed (latest {latest})"
            else:
                stale += 1
                assert attempts < latest, f"message {msg_id}: complete with the latest token {attempts} returned false"
    return sum(1 for a in deliveries.values() if len(a) > 1), stale


def test_lease_mode_completes_each_message_exactly_once(dsn: str, conn: psycopg.Connection[Any]) -> None:
    ids = create_messages(conn, "q", M)
    seen = run_concurrently([lease_consumer(dsn, "q", limit=limit, lock_ms=120_000)
                             for limit in (1, 2, 3, 5, 7, 10, 1, 10)])
    redelivered, stale = check_lease_run(ids, seen)
    assert (redelivered, stale) == (0, 0), "no lease ran out, so nothing may be delivered twice"
    assert all(ok for s in seen for _, _, ok in s.completed)
    assert queue_is_empty(conn, "q")
    assert_busy(seen)


def test_lease_mode_with_expiring_leases_completes_each_message_exactly_once(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Three slow consumers take 30 ms leases and sleep past them before completing: their
    messages are delivered again to the fast ones, and their stale completes return false."""
    ids = create_messages(conn, "q", M // 2)
    slow = [lease_consumer(dsn, "q", limit=limit, lock_ms=30, sleep_s=0.12, sleep_every=every)
            for limit, every in ((1, 1), (3, 2), (5, 3))]
    fast = [lease_consumer(dsn, "q", limit=limit, lock_ms=120_000) for limit in (1, 2, 4, 8, 10)]
    seen = run_concurrently(slow + fast)
    redelivered, stale = check_lease_run(ids, seen)
    assert redelivered > 0, "no lease ran out: the test did not exercise redelivery"
    assert stale > 0, "no stale complete happened: the test did not exercise fencing"
    assert queue_is_empty(conn, "q")


def test_concurrent_producers_and_consumers(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Producers commit (or roll back) messages while consumers of both modes drain the queue:
    each committed message is consumed exactly once, a rolled-back one never."""
    conn.execute("SELECT pgqueue.queue_create('q')")
    producers_done = threading.Event()
    produced: list[list[int]] = []
    aborted: list[list[int]] = []

    def producer(n: int) -> Callable[[threading.Barrier], tuple[list[int], list[int]]]:
        def run(barrier: threading.Barrier) -> tuple[list[int], list[int]]:
            ok: list[int] = []
            bad: list[int] = []
            rnd = random.Random(100 + n)
            with connect(dsn) as c:
                barrier.wait()
                while len(ok) < M // 3:
                    size = rnd.randint(1, 20)
                    rollback = rnd.random() < 0.1
                    got: list[int] = []
                    with c.transaction():
                        if rnd.random() < 0.5:
                            got = [r[0] for r in c.execute(
                                "SELECT pgqueue.message_create_batch('q', %s)",
                                ([f"p{n}-{len(ok) + i}".encode() for i in range(size)],)).fetchall()]
                        else:
                            for i in range(size):
                                row = c.execute("SELECT pgqueue.message_create('q', %s)", (f"p{n}-{len(ok) + i}".encode(),)).fetchone()
                                assert row is not None
                                got.append(row[0])
                        if rollback:
                            raise psycopg.Rollback()
                    (bad if rollback else ok).extend(got)
            return ok, bad
        return run

    def finish_producers(workers: list[Callable[[threading.Barrier], tuple[list[int], list[int]]]]) -> list[Callable[[threading.Barrier], Any]]:
        left = [len(workers)]
        lock = threading.Lock()

        def wrap(w: Callable[[threading.Barrier], tuple[list[int], list[int]]]) -> Callable[[threading.Barrier], Any]:
            def run(barrier: threading.Barrier) -> tuple[list[int], list[int]]:
                try:
                    return w(barrier)
                finally:
                    with lock:
                        left[0] -= 1
                        if left[0] == 0:
                            producers_done.set()
            return run
        return [wrap(w) for w in workers]

    def delete_consumer(limit: int) -> Callable[[threading.Barrier], Seen]:
        def run(barrier: threading.Barrier) -> Seen:
            seen = Seen()
            with connect(dsn) as c:
                barrier.wait()
                end = time.monotonic() + DEADLINE_S
                while time.monotonic() < end:
                    rows = c.execute("SELECT id, attempts FROM pgqueue.message_dequeue('q', %s, 0)", (limit,)).fetchall()
                    if rows:
                        seen.delivered += [(r[0], r[1]) for r in rows]
                    elif producers_done.is_set() and queue_is_empty(c, "q"):
                        break
                    else:
                        time.sleep(0.002)
            return seen
        return run

    workers: list[Callable[[threading.Barrier], Any]] = finish_producers([producer(n) for n in range(3)])
    workers += [delete_consumer(limit) for limit in (1, 4, 10)]
    workers += [lease_consumer(dsn, "q", limit=limit, lock_ms=120_000, done=producers_done) for limit in (2, 6)]
    results = run_concurrently(workers)
    for ok, bad in results[:3]:
        produced.append(ok)
        aborted.append(bad)
    seen: list[Seen] = results[3:]

    committed = sorted(i for p in produced for i in p)
    rolled_back = {i for p in aborted for i in p}
    assert len(committed) >= M - 3 and rolled_back, "premise: commits and rollbacks happened"
    consumed = Counter(i for s in seen[:3] for i, _ in s.delivered)
    consumed.update(i for s in seen[3:] for i, _, ok in s.completed if ok)
    assert sorted(consumed) == committed, "consumed ids differ from the committed ones"
    assert [i for i, n in consumed.items() if n != 1] == []
    delivered_any = {i for s in seen for i, _ in s.delivered}
    assert not delivered_any & rolled_back, "a rolled-back message was delivered"
    assert all(ok for s in seen[3:] for _, _, ok in s.completed)
    assert queue_is_empty(conn, "q")
    assert_busy(seen)


def _statement_in_a_thread(dsn: str, statement: str) -> tuple[threading.Thread, list[BaseException | None]]:
    """Run one statement on a connection of its own in a started thread; the list gets None
    when it succeeded, else what it raised."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(statement.encode())
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("names", [("Aq", "aq"), ("a.q", "a-q")])
def test_queues_whose_names_differ_in_case_or_punctuation_do_not_share_a_recorded_stripe(
        dsn: str, names: tuple[str, str]) -> None:
    """message_create records the lock stripe it found a queue on in a session setting keyed by
    the queue's name. Setting names ignore case, and the key had the name's '.' and '-' as '$':
    'Aq' and 'aq', 'a.q' and 'a-q' shared one, so a session enqueueing into both found the
    other queue's stripe recorded at each call and locked it too (ROW EXCLUSIVE, to the end of
    the transaction): a producer of one queue waited behind a queue_drop of the other (a
    review). An enqueue now holds its own queue's stripe alone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = {}
        for name in names:
            conn.execute("SELECT pgqueue.queue_create(%s)", (name,))
            ids[name] = conn.execute("SELECT id FROM pgqueue.queue WHERE name = %s", (name,)).fetchone()[0]  # type: ignore[index]
        assert ids[names[0]] & 63 != ids[names[1]] & 63, ids  # (a database of a few queues)
        for name in (*names, *names):  # each call records its queue's stripe
            conn.execute("SELECT pgqueue.message_create(%s, 'x'::bytea)", (name,))
        for name in names:
            other = names[1] if name == names[0] else names[0]
            conn.execute("SELECT pgqueue.message_create(%s, 'x'::bytea)", (other,))  # the other recorded last
            with conn.transaction():
                conn.execute("SELECT pgqueue.message_create(%s, 'x'::bytea)", (name,))
                held = conn.execute("SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                                    "WHERE l.pid = pg_backend_pid() AND c.relname LIKE 'queue_lock%%' "
                                    "ORDER BY 1").fetchall()
            assert held == [(f"queue_lock_{ids[name] & 63}",)], (name, held)


def test_a_queue_recreated_while_its_drop_commits_gets_a_stripe_of_its_own(dsn: str) -> None:
    """queue_create of a name whose queue_drop has not committed yet: it waits for the drop and
    then makes the queue. It skipped the search for a free stripe because the name was still
    taken, and took the next id on whatever stripe that was: here a rate-limited queue's, so
    the new queue shared its counters, its lock stripe, and could not be rate-limited (a
    review). It searches always now."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('stripe_a', p_rate_limit => 100)")
        conn.execute("SELECT pgqueue.message_create('stripe_a', 'x'::bytea)")
        conn.execute("SELECT pgqueue.queue_create('stripe_r')")
        a_id = conn.execute("SELECT id FROM pgqueue.queue WHERE name = 'stripe_a'").fetchone()[0]  # type: ignore[index]
        last = conn.execute("SELECT last_value FROM pgqueue.queue_id_seq").fetchone()[0]  # type: ignore[index]
        nxt = last + 1 + ((a_id - (last + 1)) % 64)  # the next id on stripe_a's stripe
        conn.execute("SELECT setval('pgqueue.queue_id_seq', %s)", [nxt - 1])
        with psycopg.connect(dsn) as dropper:
            dropper.execute("SELECT pgqueue.queue_drop('stripe_r')")  # not committed yet
            t, created = _statement_in_a_thread(dsn, "SELECT pgqueue.queue_create('stripe_r', p_rate_limit => 5)")
            deadline = time.monotonic() + 10
            while not conn.execute(
                    "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%queue_create(''stripe_r''%')").fetchone()[0]:  # type: ignore[index]
                assert time.monotonic() < deadline, "queue_create never waited for the drop in flight"
                time.sleep(0.02)
            dropper.commit()
            t.join(30)
        assert created == [None], created
        r_id = conn.execute("SELECT id FROM pgqueue.queue WHERE name = 'stripe_r'").fetchone()[0]  # type: ignore[index]
        assert r_id & 63 != a_id & 63
        rows = conn.execute("SELECT queue, enqueued, shared FROM pgqueue.queue_counters() "
                            "WHERE queue IN ('stripe_a', 'stripe_r') ORDER BY queue").fetchall()
        assert rows == [("stripe_a", 1, False), ("stripe_r", 0, False)]


def test_creating_a_queue_that_exists_uses_no_id(dsn: str) -> None:
    """queue_create(p_if_not_exists) of a name taken uses no queue id: an application that
    makes sure of its queue at every start (or every request) does not use the ids up, nor
    touch any stripe's counters. (Refused with PQ002, it uses one, as before.)"""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgqueue.queue_create('ids_kept')")
        # (an alter leaves its transaction's id in the row's xmax: a first fix that told a taken
        # name by xmax 0 used an id at every call after it, a review found)
        conn.execute("SELECT pgqueue.queue_alter('ids_kept', p_lock_ms => 31000)")
        assert conn.execute("SELECT xmax <> '0'::xid FROM pgqueue.queue WHERE name = 'ids_kept'").fetchone() == (True,)
        before = conn.execute("SELECT last_value FROM pgqueue.queue_id_seq").fetchone()
        for _ in range(3):
            conn.execute("SELECT pgqueue.queue_create('ids_kept', p_if_not_exists => true)")
        assert conn.execute("SELECT last_value FROM pgqueue.queue_id_seq").fetchone() == before
        with pytest.raises(psycopg.Error) as info:
            conn.execute("SELECT pgqueue.queue_create('ids_kept')")
        assert info.value.sqlstate == "PQ002"


def test_making_sure_of_a_queue_waits_for_an_alter_in_flight_without_a_stripe(dsn: str) -> None:
    """queue_create(p_if_not_exists) of a queue an open transaction alters: a first fix took the
    last free stripe, then waited on the row, and the altering transaction's next queue_create,
    waiting for that stripe, deadlocked (a review). A name taken is now told by a read: the call
    returns at once, before the alter commits, holding nothing."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        taken = admin.execute("SELECT count(DISTINCT id & 63) FROM pgqueue.queue").fetchone()[0]  # type: ignore[index]
        for i in range(63 - taken):  # one free stripe left
            admin.execute("SELECT pgqueue.queue_create(%s)", [f"fill_{i}"])
        admin.execute("SELECT pgqueue.queue_create('altered')")
    with psycopg.connect(dsn) as alterer:
        alterer.execute("SELECT pgqueue.queue_alter('altered', p_lock_ms => 1000)")
        t, outcome = _statement_in_a_thread(dsn, "SELECT pgqueue.queue_create('altered', p_if_not_exists => true)")
        t.join(10)
        assert outcome == [None], outcome  # at once, the alter still open
        alterer.execute("SELECT pgqueue.queue_create('fresh_after_alter')")  # the free stripe is there
        alterer.commit()


@pytest.mark.parametrize("other", ["SELECT pgqueue.queue_drop('ensured')",
                                   "SELECT pgqueue.queue_alter('ensured', p_max_size => 100)",
                                   "SELECT pgqueue.queue_alter('ensured', p_lock_ms => 5000)"])
def test_making_sure_of_a_queue_in_a_transaction_holds_up_no_drop_or_alter(dsn: str, other: str) -> None:
    """A transaction that makes sure of its queue (queue_create with p_if_not_exists on a name
    taken), then enqueues: it holds no lock on the queue's row, so a drop or an alter of the
    queue in between goes through at once and no deadlock follows. (A first fix of this
    session's locked the row FOR KEY SHARE before the stripe: a drop or a max_size change then
    deadlocked with the enqueue, and every alter waited for the transaction: a review.)"""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('ensured')")
    with psycopg.connect(dsn) as app, psycopg.connect(dsn, autocommit=True) as admin:
        app.execute("SELECT pgqueue.queue_create('ensured', p_if_not_exists => true)")
        admin.execute("SET lock_timeout = '30s'")
        started = time.monotonic()
        admin.execute(other)  # at once: nothing of the app's transaction in the way
        assert time.monotonic() - started < 15  # (a loaded machine's second or two, not a wait for it)
        if "queue_drop" in other:
            with pytest.raises(psycopg.Error) as info:
                app.execute("SELECT pgqueue.message_create('ensured', 'x'::bytea)")
            assert info.value.sqlstate == "PQ001"
        else:
            app.execute("SELECT pgqueue.message_create('ensured', 'x'::bytea)")
            app.commit()


@pytest.mark.parametrize("acknowledged", [8, 20])
def test_a_heartbeat_batch_and_an_acknowledgement_in_other_orders_do_not_deadlock(dsn: str, acknowledged: int) -> None:
    """A worker's heartbeats renew its running handlers in the order it took them, in one
    statement (message_heartbeat_batch); its loop acknowledges the handlers that returned in
    the order they returned (message_complete_batch, or message_complete_and_dequeue). Two
    messages in both, in opposite orders, locked their rows in opposite orders: a review
    measured 8 deadlocks in 8 s here, and 4-15 in 40-60 s of a worker with 500 handlers. Both
    lock the rows in id order whatever order they are given in (up to 8 ids one DELETE each,
    more through the probes by id)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('beats', p_lock_ms => 600000)")
        admin.execute("SELECT count(*) FROM pgqueue.message_create_batch('beats', array_fill('x'::bytea, ARRAY[50]))")
        leased = sorted(admin.execute("SELECT id, attempts FROM pgqueue.message_dequeue('beats', 50)").fetchall())
    assert len(leased) == 50
    stop = time.monotonic() + 4
    seen: Counter[str] = Counter()
    errors: list[BaseException] = []

    def beat() -> None:  # every lease, in id order, autocommit
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < stop:
                try:
                    stale = conn.execute("SELECT pgqueue.message_heartbeat_batch(%s::bigint[], %s::integer[])",
                                         ([i for i, _ in leased], [a for _, a in leased])).fetchone()
                    assert stale == ([],), stale
                    seen["beats"] += 1
                except psycopg.errors.DeadlockDetected:
                    seen["deadlocks"] += 1
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)
                    return

    def acknowledge() -> None:  # some of them in the opposite order, rolled back (kept leased)
        rng = random.Random(7)
        with psycopg.connect(dsn) as conn:
            while time.monotonic() < stop:
                some = sorted(rng.sample(leased, acknowledged), reverse=True)
                try:
                    stale = conn.execute("SELECT pgqueue.message_complete_batch(%s::bigint[], %s::integer[])",
                                         ([i for i, _ in some], [a for _, a in some])).fetchone()
                    assert stale == ([],), stale
                    seen["acknowledgements"] += 1
                except psycopg.errors.DeadlockDetected:
                    seen["deadlocks"] += 1
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)
                    return
                finally:
                    conn.rollback()

    threads = [threading.Thread(target=beat), threading.Thread(target=acknowledge)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert seen["beats"] > 20 and seen["acknowledgements"] > 20 and seen["deadlocks"] == 0, seen


def _in_a_thread(dsn: str, statement: str, params: tuple[Any, ...] = ()) -> tuple[threading.Thread, list[Any]]:
    """Run one statement on an autocommit connection of its own in a started thread; the list
    gets its rows, or the psycopg error it raised."""
    outcome: list[Any] = []

    def run() -> None:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SET deadlock_timeout = '100ms'")
            try:
                outcome.append(c.execute(statement.encode(), params).fetchall())
            except psycopg.Error as exc:
                outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _grouped_cancel_queue(dsn: str, concurrency: int) -> tuple[psycopg.Connection[Any], Callable[[str], int]]:
    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute("SELECT pgqueue.queue_create('cg', p_lock_ms => 600000, p_group_concurrency => %s)", (concurrency,))

    def make(group: str) -> int:
        row = admin.execute("SELECT pgqueue.message_create('cg', 'x'::bytea, NULL, NULL, %s)", (group,)).fetchone()
        assert row is not None
        return int(row[0])

    return admin, make


@pytest.mark.parametrize("other", ["a delete-mode take", "a second cancel"])
def test_a_cancel_waiting_for_a_groups_lock_does_not_deadlock_with_a_take_or_a_cancel(dsn: str, other: str) -> None:
    """A cancel of a message waiting for its turn, held up at its group's lock (a producer's
    open transaction in the group), while the message gets its turn (its group's lease
    completes: concurrency 1 hands it on without the lock) and another call takes it (a
    delete-mode take, which then asks for the group's lock to hand the turn on) or cancels it
    (its rows first, then the lock). The first fix of the cancel's lock order (its waiting
    messages' rows locked, with a wait, under their group's lock) deadlocked with both (a
    review); now it takes rows without waiting and tries again, so the other call goes first."""
    admin, make = _grouped_cancel_queue(dsn, 1)
    lease = make("ga")
    waiting = make("ga")
    (lid, token), = admin.execute("SELECT id, attempts FROM pgqueue.message_dequeue('cg', 1)").fetchall()
    assert lid == lease
    producer = psycopg.connect(dsn)
    producer.execute("SELECT pgqueue.message_create('cg', 'p'::bytea, NULL, NULL, 'ga')")  # holds ga's lock
    cancel, cancelled = _in_a_thread(dsn, "SELECT id FROM pgqueue.message_cancel('cg', %s)", ([waiting],))
    wait_for_lock_waiters(admin, 1)  # the cancel waits for the group's lock (a sleep did not show it)
    complete, completed = _in_a_thread(dsn, "SELECT pgqueue.message_complete(%s, %s)", (lease, token))
    complete.join(0.5)
    statement = ("SELECT id FROM pgqueue.message_dequeue('cg', 1, 0)" if other == "a delete-mode take"
                 else "SELECT id FROM pgqueue.message_cancel('cg', ARRAY[%s]::bigint[])" % waiting)
    second, taken = _in_a_thread(dsn, statement)
    wait_for_lock_waiters(admin, 2)  # and so does the other call, before the producer commits
    producer.commit()
    producer.close()
    for thread in (cancel, second, complete):
        thread.join(30)
        assert not thread.is_alive()
    assert completed == [[(True,)]], completed
    assert not any(isinstance(o, psycopg.Error) for o in cancelled + taken), (cancelled, taken)
    # the message left once, by one of them; the producer's message has the group's turn
    assert sorted(cancelled[0] + taken[0]) == [(waiting,)], (cancelled, taken)
    assert admin.execute("SELECT convert_from(content, 'UTF8'), turn_at IS NOT NULL FROM pgqueue.message").fetchall() == [
        ("p", True)]
    admin.close()


def test_cancels_and_batches_handing_several_groups_turns_on_do_not_deadlock(dsn: str) -> None:
    """message_cancel of a waiting message of g0 and a ready one of g3 against
    message_complete_batch of leases of g3 and g0 (group concurrency 2), started together many
    times: the cancel locked the waiting row first and then asked for g3's lock, which the
    batch held while it handed g0's turn to that row (a review: 151 deadlocks in 2,000 rounds;
    bench/experiments/cancel_group_deadlock/race.py)."""
    admin, make = _grouped_cancel_queue(dsn, 2)
    deadlocks = 0
    for _ in range(150):
        admin.execute("DELETE FROM pgqueue.message")
        lease_g0 = make("g0")
        make("g0")
        lease_g3 = make("g3")
        tokens = dict(admin.execute("SELECT id, attempts FROM pgqueue.message_dequeue('cg', 3)").fetchall())
        ready_g3 = make("g3")
        waiting_g0 = make("g0")
        cancel, cancelled = _in_a_thread(dsn, "SELECT id FROM pgqueue.message_cancel('cg', %s)",
                                         ([waiting_g0, ready_g3],))
        batch, stale = _in_a_thread(dsn, "SELECT pgqueue.message_complete_batch(%s, %s)",
                                    ([lease_g3, lease_g0], [tokens[lease_g3], tokens[lease_g0]]))
        cancel.join(30)
        batch.join(30)
        deadlocks += sum(isinstance(o, psycopg.errors.DeadlockDetected) for o in cancelled + stale)
        assert not any(isinstance(o, psycopg.Error) and not isinstance(o, psycopg.errors.DeadlockDetected)
                       for o in cancelled + stale), (cancelled, stale)
        if isinstance(cancelled[0], list):
            assert sorted(cancelled[0]) == sorted([(waiting_g0,), (ready_g3,)]), cancelled
    assert deadlocks == 0
    admin.close()
