"""Invariant 6: bad input gets its documented SQLSTATE and changes nothing.

22004 a NULL where a value is required; PQ001 unknown queue; 42602 invalid queue name;
22023 invalid parameter value (p_limit outside 1..10000, negative or zero lease, bad options);
PQ003 queue full; PQ002 queue exists; PQ004 the default queue cannot be dropped.

All cases run against one prepared database (queues with ready, leased, scheduled and dead
messages, a full queue); each compares every pgqueue table before and after the call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from conftest import Server, create_database, drop_database
from helpers import snapshot, sqlstate_of

Conn = psycopg.Connection[Any]

LEASED = "(SELECT min(id) FROM pgqueue.message WHERE locked_until IS NOT NULL)"
TOKEN = "(SELECT min(attempts) FROM pgqueue.message WHERE locked_until IS NOT NULL)"


@pytest.fixture(scope="module")
def prepared(pg_server: Server, template_db: str) -> Iterator[Conn]:
    name = create_database(pg_server, template_db, prefix="bad")
    try:
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as conn:
            conn.execute("SELECT pgqueue.queue_create('q', p_max_attempts => 1)")
            conn.execute("SELECT pgqueue.message_create_batch('q', ARRAY['a', 'b', 'c']::bytea[])")
            conn.execute("SELECT pgqueue.message_create('q', 'later', pgqueue.now_ms() + 3600000)")
            conn.execute("SELECT pgqueue.message_create('default', 'd')")
            msg_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('q', 1, 600000)").fetchone()  # type: ignore[misc]
            conn.execute("SELECT pgqueue.message_fail(%s, %s, 'dead')", (msg_id, token))  # max_attempts 1: dead
            conn.execute("SELECT pgqueue.message_dequeue('q', 1, 600000)")               # one leased
            # a capped queue that is full, with a dead letter that would not fit back
            conn.execute("SELECT pgqueue.queue_create('full', p_max_size => 2, p_max_attempts => 1)")
            conn.execute("SELECT pgqueue.message_create('full', 'x')")
            msg_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('full', 1, 600000)").fetchone()  # type: ignore[misc]
            conn.execute("SELECT pgqueue.message_fail(%s, %s, 'dead')", (msg_id, token))
            conn.execute("SELECT pgqueue.message_create_batch('full', ARRAY['y', 'z']::bytea[])")
            # a capped queue with room for exactly one more
            conn.execute("SELECT pgqueue.queue_create('almost', p_max_size => 3)")
            conn.execute("SELECT pgqueue.message_create_batch('almost', ARRAY['1', '2']::bytea[])")
            counts = conn.execute("SELECT count(*) FILTER (WHERE locked_until IS NOT NULL), count(*) "
                                  "FROM pgqueue.message").fetchone()
            assert counts == (1, 8)
            assert conn.execute("SELECT count(*) FROM pgqueue.dead_letter").fetchone() == (2,)
            yield conn
    finally:
        drop_database(pg_server, name)


NULLS = [
    ("message_create content", "SELECT pgqueue.message_create('q', NULL::bytea)"),
    ("message_create default-queue content", "SELECT pgqueue.message_create(NULL::bytea)"),
    ("message_create queue", "SELECT pgqueue.message_create(NULL::text, 'x'::bytea)"),
    ("message_create_batch contents", "SELECT pgqueue.message_create_batch('q', NULL::bytea[])"),
    ("message_create_batch element", "SELECT pgqueue.message_create_batch('q', ARRAY['a', NULL]::bytea[])"),
    ("message_create_batch queue", "SELECT pgqueue.message_create_batch(NULL, ARRAY['a']::bytea[])"),
    ("message_dequeue queue", "SELECT * FROM pgqueue.message_dequeue(NULL)"),
    ("message_dequeue limit", "SELECT * FROM pgqueue.message_dequeue('q', NULL)"),
    ("message_complete id", f"SELECT pgqueue.message_complete(NULL, {TOKEN})"),
    ("message_complete token", f"SELECT pgqueue.message_complete({LEASED}, NULL)"),
    ("message_heartbeat id", f"SELECT pgqueue.message_heartbeat(NULL, {TOKEN}, 1000)"),
    ("message_heartbeat token", f"SELECT pgqueue.message_heartbeat({LEASED}, NULL, 1000)"),
    ("message_defer id", f"SELECT pgqueue.message_defer(NULL, {TOKEN}, 0)"),
    ("message_defer token", f"SELECT pgqueue.message_defer({LEASED}, NULL, 0)"),
    ("message_fail id", f"SELECT pgqueue.message_fail(NULL, {TOKEN}, 'e')"),
    ("message_fail token", f"SELECT pgqueue.message_fail({LEASED}, NULL, 'e')"),
    ("queue_create name", "SELECT pgqueue.queue_create(NULL)"),
    ("queue_create lock_ms", "SELECT pgqueue.queue_create('new', p_lock_ms => NULL)"),
    ("queue_alter name", "SELECT pgqueue.queue_alter(NULL, p_lock_ms => 1000)"),
    ("queue_drop name", "SELECT pgqueue.queue_drop(NULL)"),
    ("queue_next_due name", "SELECT pgqueue.queue_next_due(NULL)"),
    ("dead_letter_requeue name", "SELECT pgqueue.dead_letter_requeue(NULL)"),
    ("dead_letter_purge name", "SELECT pgqueue.dead_letter_purge(NULL)"),
]

UNKNOWN = [
    "SELECT pgqueue.message_create('nope', 'x')",
    "SELECT pgqueue.message_create_batch('nope', ARRAY['x']::bytea[])",
    "SELECT * FROM pgqueue.message_dequeue('nope')",
    "SELECT * FROM pgqueue.message_dequeue('nope', 5, 0)",
    "SELECT pgqueue.queue_alter('nope', p_lock_ms => 1000)",
    "SELECT pgqueue.queue_alter('nope', p_max_size => 10)",
    "SELECT * FROM pgqueue.queue_stats('nope')",
    "SELECT pgqueue.queue_next_due('nope')",
    "SELECT pgqueue.dead_letter_requeue('nope')",
    "SELECT pgqueue.dead_letter_purge('nope')",
    f"SELECT pgqueue.message_create('{'x' * 48}', 'x')",  # the longest valid name, unknown
]

BAD_NAMES = ["", "x" * 49, "it's", "a;b", "a b", "ünïcode", "队列", ".dot", "-dash", 'a"b',
             "tab\there", "new\nline", "DROP TABLE pgqueue.message; --", "a/b", "a$b"]
NAME_CALLS = [
    "SELECT pgqueue.queue_create(%s)",
    "SELECT pgqueue.message_create(%s, 'x'::bytea)",
    "SELECT * FROM pgqueue.message_dequeue(%s)",
    "SELECT pgqueue.queue_alter(%s, p_lock_ms => 1000)",
]
ONE_BAD_NAME_CALLS = [
    "SELECT pgqueue.message_create_batch(%s, ARRAY['x']::bytea[])",
    "SELECT * FROM pgqueue.queue_stats(%s)",
    "SELECT pgqueue.queue_next_due(%s)",
    "SELECT pgqueue.dead_letter_requeue(%s)",
    "SELECT pgqueue.dead_letter_purge(%s)",
    "SELECT pgqueue.queue_drop(%s)",
]

INVALID = [
    ("limit 0", "SELECT * FROM pgqueue.message_dequeue('q', 0)"),
    ("limit -1", "SELECT * FROM pgqueue.message_dequeue('q', -1, 0)"),
    ("limit 10001", "SELECT * FROM pgqueue.message_dequeue('q', 10001)"),
    ("limit max int", "SELECT * FROM pgqueue.message_dequeue('q', 2147483647, 0)"),
    ("dequeue negative lock_ms", "SELECT * FROM pgqueue.message_dequeue('q', 1, -1)"),
    ("dequeue lock_ms over a year", "SELECT * FROM pgqueue.message_dequeue('q', 1, 31536000001)"),
    ("heartbeat negative lock_ms", f"SELECT pgqueue.message_heartbeat({LEASED}, {TOKEN}, -1)"),
    ("heartbeat zero lock_ms", f"SELECT pgqueue.message_heartbeat({LEASED}, {TOKEN}, 0)"),
    ("queue_create lock_ms 0", "SELECT pgqueue.queue_create('new', p_lock_ms => 0)"),
    ("queue_create negative lock_ms", "SELECT pgqueue.queue_create('new', p_lock_ms => -5)"),
    ("queue_create negative max_attempts", "SELECT pgqueue.queue_create('new', p_max_attempts => -1)"),
    ("queue_create negative retry base", "SELECT pgqueue.queue_create('new', p_retry_base_ms => -1)"),
    ("queue_create base above cap", "SELECT pgqueue.queue_create('new', p_retry_base_ms => 10, p_retry_cap_ms => 5)"),
    ("queue_create negative max_size", "SELECT pgqueue.queue_create('new', p_max_size => -1)"),
    ("queue_alter negative lock_ms", "SELECT pgqueue.queue_alter('q', p_lock_ms => -1)"),
    ("queue_alter negative max_size", "SELECT pgqueue.queue_alter('q', p_max_size => -1)"),
    ("queue_alter cap below base", "SELECT pgqueue.queue_alter('q', p_retry_cap_ms => 1, p_retry_base_ms => 2)"),
    ("negative priority", "SELECT pgqueue.priority_dequeue_at(-1)"),
    ("batch of two dimensions", "SELECT pgqueue.message_create_batch('q', ARRAY[['a', 'b'], ['c', 'd']]::bytea[])"),
    ("batch dequeue_ats too short", "SELECT pgqueue.message_create_batch('q', ARRAY['a', 'b']::bytea[], "
                                    "p_dequeue_ats => ARRAY[1]::bigint[])"),
]

OTHER = [
    ("PQ003", "SELECT pgqueue.message_create('full', 'x')"),
    ("PQ003", "SELECT pgqueue.message_create_batch('full', ARRAY['x']::bytea[])"),
    ("PQ003", "SELECT pgqueue.message_create_batch('almost', ARRAY['1', '2']::bytea[])"),  # all or none
    ("PQ003", "SELECT pgqueue.dead_letter_requeue('full')"),
    ("PQ002", "SELECT pgqueue.queue_create('q')"),
    ("PQ002", "SELECT pgqueue.queue_create('default')"),
    ("PQ002", "SELECT pgqueue.queue_create('full', p_max_size => 1000)"),
    ("PQ004", "SELECT pgqueue.queue_drop('default')"),
]

CASES = (
    [pytest.param(sql_, None, "22004", id=f"22004 {name}") for name, sql_ in NULLS]
    + [pytest.param(sql_, None, "PQ001", id=f"PQ001 {sql_[7:60]}") for sql_ in UNKNOWN]
    + [pytest.param(call, (bad,), "42602", id=f"42602 {call[7:40]} {bad[:20]!r}")
       for call in NAME_CALLS for bad in BAD_NAMES]
    + [pytest.param(call, (bad,), "42602", id=f"42602 {call[7:40]} {bad!r}")
       for call in ONE_BAD_NAME_CALLS for bad in ("", "x" * 49, "a;b")]
    + [pytest.param(sql_, None, "22023", id=f"22023 {name}") for name, sql_ in INVALID]
    + [pytest.param(sql_, None, code, id=f"{code} {sql_[7:70]}") for code, sql_ in OTHER]
)


@pytest.mark.parametrize(("query", "params", "sqlstate"), CASES)
def test_bad_input_is_refused_and_changes_nothing(prepared: Conn, query: str, params: tuple[Any, ...] | None,
                                                  sqlstate: str) -> None:
    before = snapshot(prepared)
    assert sqlstate_of(prepared, query, params) == sqlstate
    assert snapshot(prepared) == before


@pytest.mark.parametrize("query", [q for _, q in NULLS] + UNKNOWN)
def test_refused_inside_a_transaction_rolls_back_with_it(prepared: Conn, query: str) -> None:
    """In the caller's transaction the error aborts it: after the rollback nothing has changed,
    including the messages the caller created before the bad call."""
    before = snapshot(prepared)
    with pytest.raises(psycopg.Error):
        with prepared.transaction():
            prepared.execute("SELECT pgqueue.message_create('q', 'in the same transaction')")
            prepared.execute(query)
    assert snapshot(prepared) == before


def test_valid_odd_names_are_accepted(prepared: Conn) -> None:
    """The boundary on the other side: the longest name and every allowed character."""
    for name in ("x" * 48, "A.b-c_9", "_underscore", "9lives"):
        prepared.execute("SELECT pgqueue.queue_create(%s)", (name,))
        assert prepared.execute("SELECT pgqueue.message_create(%s, 'x')", (name,)).fetchone() is not None
        assert prepared.execute("SELECT count(*) FROM pgqueue.message_dequeue(%s, 1, 0)", (name,)).fetchone() == (1,)
        assert prepared.execute("SELECT pgqueue.queue_drop(%s)", (name,)).fetchone() == (True,)
