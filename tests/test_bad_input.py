"""Invariant 6, from a client's side: a refused call aborts the caller's transaction, and its
rollback leaves every pgqueue table as it was, the caller's own earlier work included.

Where bad input is tested (one suite per behaviour):
- which call gets which SQLSTATE and message (22004, 22023, 42602, PQ001-PQ004), for every
  error path of every public function, and that a refused call changes nothing:
  tests/pgtap/20_errors.sql (pgTAP's throws_ok serves that best);
- refusals as steps of a scenario (max_size back-pressure, requeue into a full queue, no NOTIFY):
  sql/ (pg_regress);
- here, what needs a client: the state of the caller's transaction after a refusal; the client's
  error classes are in test_client.py, random calls of every function in test_fuzz_sql.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from conftest import Server, create_database, drop_database
from helpers import assert_only_counted, snapshot

Conn = psycopg.Connection[Any]


@pytest.fixture(scope="module")
def prepared(pg_server: Server, template_db: str) -> Iterator[Conn]:
    """Queue q with ready, leased and dead messages; queue full at its max_size."""
    name = create_database(pg_server, template_db, prefix="bad")
    try:
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as conn:
            conn.execute("SELECT pgqueue.queue_create('q', p_max_attempts => 1)")
            conn.execute("SELECT pgqueue.message_create_batch('q', ARRAY['a', 'b', 'c']::bytea[])")
            msg_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('q', 1, 600000)").fetchone()  # type: ignore[misc]
            conn.execute("SELECT pgqueue.message_fail(%s, %s, 'dead')", (msg_id, token))  # max_attempts 1: dead
            conn.execute("SELECT pgqueue.message_dequeue('q', 1, 600000)")               # one leased
            conn.execute("SELECT pgqueue.queue_create('full', p_max_size => 1)")
            conn.execute("SELECT pgqueue.message_create('full', 'x')")
            yield conn
    finally:
        drop_database(pg_server, name)


#: One refused call of each kind (the full matrix is pgTAP's).
REFUSED = [
    pytest.param("SELECT pgqueue.message_create('q', NULL::bytea)", "22004", id="22004 NULL"),
    pytest.param("SELECT * FROM pgqueue.message_dequeue('q', 0)", "22023", id="22023 invalid value"),
    pytest.param("SELECT pgqueue.message_create('a;b', 'x')", "42602", id="42602 invalid name"),
    pytest.param("SELECT pgqueue.message_create('nope', 'x')", "PQ001", id="PQ001 unknown queue"),
    pytest.param("SELECT pgqueue.queue_create('q')", "PQ002", id="PQ002 queue exists"),
    pytest.param("SELECT pgqueue.message_create_batch('full', ARRAY['y', 'z']::bytea[])", "PQ003", id="PQ003 queue full"),
    pytest.param("SELECT pgqueue.queue_drop('default')", "PQ004", id="PQ004 protected queue"),
]


@pytest.mark.parametrize(("query", "sqlstate"), REFUSED)
def test_a_refusal_aborts_the_callers_transaction(prepared: Conn, query: str, sqlstate: str) -> None:
    """The error is not caught inside pgqueue: the caller's transaction is aborted (the next
    statement fails with 25P02), and after the rollback nothing has changed, including the
    message the caller created before the bad call."""
    before = snapshot(prepared)
    with pytest.raises(psycopg.Error) as refused, prepared.transaction():
        prepared.execute("SELECT pgqueue.message_create('q', 'in the same transaction')")
        try:
            prepared.execute(query)
        except psycopg.Error as exc:
            assert exc.sqlstate == sqlstate, exc  # refused for its own reason, not any error
            assert prepared.info.transaction_status == TransactionStatus.INERROR
            prepared.execute("SELECT 1")  # refused: the transaction is aborted
        raise AssertionError(f"not refused: {query}")
    assert refused.value.sqlstate == "25P02"
    assert prepared.info.transaction_status == TransactionStatus.IDLE
    # the message created before the refusal stays counted, and nothing else moved
    assert_only_counted(prepared, before, "q", ["enqueued"])


#: A rate-limited queue "limited" and, 64 ids on, queue "q64" on the same rate stripe (id & 63).
SHARED_RATE_STRIPE = ("SELECT pgqueue.queue_create('limited', p_rate_limit => 10)",
                      # past 64 queues a new queue takes the next id: pad until it is limited's stripe
                      """DO $$
                         DECLARE i integer := 0;
                         BEGIN
                             LOOP
                                 EXIT WHEN (SELECT count(*) FROM pgqueue.queue) >= 64
                                       AND ((SELECT last_value FROM pgqueue.queue_id_seq) + 1) & 63
                                         = (SELECT id & 63 FROM pgqueue.queue WHERE name = 'limited');
                                 i := i + 1;
                                 PERFORM pgqueue.queue_create('pad_' || i);
                             END LOOP;
                         END $$""",
                      "SELECT pgqueue.queue_create('q64')")

#: queue_alter calls whose values are refused, on queue q (no groups) or one that does not exist,
#: with the set-up they need and the queue a producer has in flight meanwhile.
REFUSED_ALTERS = [
    pytest.param("SELECT pgqueue.queue_alter('q', p_max_size => -1)", "22023", (), "q", id="negative max_size"),
    pytest.param("SELECT pgqueue.queue_alter('q', p_group_concurrency => 3)", "22023", (), "q",
                 id="groups on a queue without"),
    pytest.param("SELECT pgqueue.queue_alter('q', p_max_size => 5, p_lock_ms => 0)", "22023", (), "q",
                 id="lock_ms 0"),
    pytest.param("SELECT pgqueue.queue_alter('nope', p_max_size => 5)", "PQ001", (), "q", id="unknown queue"),
    # (its check ran after the wait: found by a review of the docs against the code, session 43)
    pytest.param("SELECT pgqueue.queue_alter('q64', p_max_size => 5, p_rate_limit => 5)", "22023",
                 SHARED_RATE_STRIPE, "q64", id="rate limit on a shared stripe"),
]


@pytest.mark.parametrize(("query", "sqlstate", "setup", "busy"), REFUSED_ALTERS)
def test_a_refused_queue_alter_does_not_wait_for_the_work_in_flight(
        prepared: Conn, pg_server: Server, query: str, sqlstate: str, setup: tuple[str, ...], busy: str) -> None:
    """A new max_size or group_concurrency waits for the producers and consumers in flight on
    the queue (and holds new ones off while it waits); a value that is refused is refused
    first, at once, with its own SQLSTATE, also under REPEATABLE READ (which such a change
    refuses with PQ009 only once its values are good)."""
    dbname = prepared.info.dbname
    for statement in setup:
        prepared.execute(statement)  # type: ignore[arg-type]
    if setup == SHARED_RATE_STRIPE:
        assert prepared.execute("SELECT count(DISTINCT id & 63) FROM pgqueue.queue "
                                "WHERE name IN ('limited', 'q64')").fetchone() == (1,)
    with psycopg.connect(pg_server.dsn(dbname)) as producer, \
            psycopg.connect(pg_server.dsn(dbname), autocommit=True) as alter:
        producer.execute("SELECT pgqueue.message_create(%s, 'in flight')", (busy,))  # open transaction
        alter.execute("SET lock_timeout = '2s'")
        for isolation in ("READ COMMITTED", "REPEATABLE READ"):
            with pytest.raises(psycopg.Error) as refused, alter.transaction():
                alter.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
                alter.execute(query)
            assert refused.value.sqlstate == sqlstate, (isolation, refused.value)
        producer.rollback()


@pytest.mark.parametrize("isolation", ["REPEATABLE READ", "SERIALIZABLE"])
def test_a_new_key_into_a_capped_key_window_queue_outside_read_committed_is_pq009_first(
        conn: Conn, isolation: str) -> None:
    """A new idempotency key into a queue with key_window_ms is refused outside READ COMMITTED
    (PQ009: no retry can make it succeed), also on a capped queue, and before its room is asked
    for: there the admission answered 40001 (and set the queue's recount mark, a sequence that
    no rollback undoes), then PQ003 for good once the queue was full, to message_create,
    message_create_batch and spark_publish alike (a review). A key already taken still returns
    its message's id."""
    conn.execute("SELECT pgqueue.queue_create('kw', p_max_size => 1, p_key_window_ms => 60000)")
    taken = conn.execute("SELECT pgqueue.message_create('kw', 'x', p_key => 'taken')").fetchone()
    write_id = "00000000-0000-0000-0000-000000000066"
    conn.execute("SELECT pgqueue.spark_stage(%s, 0, 0, 0, ARRAY['s']::bytea[], p_keys => ARRAY['new'])", (write_id,))
    before = snapshot(conn)
    mark = "SELECT pg_sequence_last_value(pgqueue._size_exact_seq(id)) FROM pgqueue.queue WHERE name = 'kw'"
    assert conn.execute(mark).fetchone() == (None,)
    calls = ["SELECT pgqueue.message_create('kw', 'y', p_key => 'new')",
             "SELECT pgqueue.message_create_batch('kw', ARRAY['y', 'z']::bytea[], p_keys => ARRAY['taken', 'new'])",
             f"SELECT pgqueue.spark_publish('p', 'kw', '{write_id}', '{{0}}', '{{0}}', '{{1}}')"]
    for _ in range(2):  # (the second time is where PQ003 came, for good)
        for call in calls:
            with pytest.raises(psycopg.Error) as refused, conn.transaction():
                conn.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")  # type: ignore[arg-type]
                conn.execute(call)  # type: ignore[arg-type]
            assert refused.value.sqlstate == "PQ009", (call, refused.value)
    assert snapshot(conn) == before
    assert conn.execute(mark).fetchone() == (None,)
    with conn.transaction():
        conn.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")  # type: ignore[arg-type]
        assert conn.execute("SELECT pgqueue.message_create('kw', 'again', p_key => 'taken')").fetchone() == taken
