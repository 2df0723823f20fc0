"""Least privilege: the GRANT recipes in docs/grants.sql give a producer, a consumer and an
administrator exactly their rights. Each test logs in as a real non-superuser role and checks
that every allowed call works and every forbidden one fails with insufficient_privilege."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql

from conftest import REPO, Server

GRANTS = REPO / "docs" / "grants.sql"


@dataclass(frozen=True)
class Roles:
    producer: str
    consumer: str
    admin: str
    nobody: str
    dsn: Callable[[str], str]


@pytest.fixture
def roles(pg_server: Server, dbname: str) -> Iterator[Roles]:
    suffix = f"{os.getpid()}_{dbname}"
    names = {kind: f"pq_{kind}_{suffix}" for kind in ("producer", "consumer", "admin", "nobody")}
    with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
        for name in names.values():
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    try:
        apply_recipes(pg_server, dbname, names)
        with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
            owner.execute("SELECT pgqueue.queue_create('jobs', p_max_attempts => 1)")
            owner.execute("SELECT pgqueue.queue_create('capped', p_max_size => 2)")
            owner.execute("SELECT pgqueue.queue_create('limited', p_rate_limit => 100)")
        yield Roles(**names, dsn=lambda role: pg_server.dsn(dbname, user=role))
    finally:
        with psycopg.connect(pg_server.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))
            for name in names.values():
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def apply_recipes(pg_server: Server, dbname: str, names: dict[str, str]) -> None:
    """Run docs/grants.sql as the owner for the producer, consumer and admin of names."""
    proc = subprocess.run(
        ["psql", "-X", "-q", "-d", dbname, "-f", str(GRANTS),
         "-v", f"producer={names['producer']}", "-v", f"consumer={names['consumer']}",
         "-v", f"admin={names['admin']}"],
        env=pg_server.libpq_env(), capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr


def run(dsn: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(statement)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description else []


def denied(dsn: str, statement: str) -> None:
    with pytest.raises(errors.InsufficientPrivilege):
        run(dsn, statement)


def seed(roles: Roles, queue: str = "jobs") -> tuple[int, int]:
    """Enqueue one message as the producer, lease it as the consumer; return (id, attempts)."""
    run(roles.dsn(roles.producer), f"SELECT pgqueue.message_create('{queue}', 'x')")
    rows = run(roles.dsn(roles.consumer), f"SELECT id, attempts FROM pgqueue.message_dequeue('{queue}')")
    assert len(rows) == 1
    return int(rows[0][0]), int(rows[0][1])  # type: ignore[call-overload]


def test_producer_can_enqueue_and_read_stats_only(roles: Roles) -> None:
    p = roles.dsn(roles.producer)
    assert run(p, "SELECT pgqueue.message_create('jobs', 'a') > 0") == [(True,)]
    assert run(p, "SELECT count(*) FROM pgqueue.message_create_batch('jobs', ARRAY['b','c']::bytea[])") == [(2,)]
    assert run(p, "SELECT ready FROM pgqueue.queue_stats('jobs')") == [(3,)]
    assert run(p, "SELECT pgqueue.queue_next_due('jobs') IS NOT NULL") == [(True,)]
    # a rate-limited queue's next due time reads its rate sequence (42501 before the recipe
    # granted SELECT on it); the Python client's check of a queue name is that call
    assert run(p, "SELECT pgqueue.message_create('limited', 'a') > 0") == [(True,)]
    assert run(p, "SELECT pgqueue.queue_next_due('limited') IS NOT NULL") == [(True,)]
    denied(p, "SELECT nextval('pgqueue.queue_rate_0')")  # reads it, cannot take slots
    # max_size accounting works for a producer and still refuses past the cap
    run(p, "SELECT pgqueue.message_create_batch('capped', ARRAY['1','2']::bytea[])")
    with pytest.raises(psycopg.Error) as full:
        run(p, "SELECT pgqueue.message_create('capped', '3')")
    assert full.value.sqlstate == "PQ003"

    denied(p, "SELECT * FROM pgqueue.message_dequeue('jobs')")
    denied(p, "SELECT * FROM pgqueue.message_dequeue('jobs', 1, 0)")
    denied(p, "SELECT content FROM pgqueue.message")          # cannot read payloads
    denied(p, "SELECT pgqueue.queue_drop('jobs')")
    denied(p, "SELECT pgqueue.queue_create('mine')")
    denied(p, "SELECT pgqueue.queue_alter('jobs', p_lock_ms => 1000)")
    denied(p, "SELECT pgqueue.dead_letter_purge('jobs')")
    msg_id, attempts = seed(roles)
    denied(p, f"SELECT pgqueue.message_complete({msg_id}, {attempts})")
    denied(p, f"SELECT pgqueue.message_heartbeat({msg_id}, {attempts}, 1000)")
    denied(p, f"SELECT pgqueue.message_heartbeat_batch(ARRAY[{msg_id}]::bigint[], ARRAY[{attempts}], 1000)")
    denied(p, f"SELECT pgqueue.message_defer({msg_id}, {attempts}, NULL)")
    denied(p, f"SELECT pgqueue.message_fail({msg_id}, {attempts}, 'no')")


def test_consumer_can_consume_but_not_administer(roles: Roles) -> None:
    c = roles.dsn(roles.consumer)
    msg_id, attempts = seed(roles)
    assert run(c, f"SELECT pgqueue.message_heartbeat({msg_id}, {attempts}, 60000)") == [(True,)]
    assert run(c, f"SELECT pgqueue.message_defer({msg_id}, {attempts}, NULL, 'ck')") == [(True,)]
    rows = run(c, "SELECT id, attempts, state FROM pgqueue.message_dequeue('jobs')")
    assert rows == [(msg_id, attempts + 1, b"ck")]
    assert run(c, f"SELECT pgqueue.message_complete({msg_id}, {attempts + 1})") == [(True,)]
    # delete mode, and a failure that dead-letters (max_attempts 1)
    run(roles.dsn(roles.producer), "SELECT pgqueue.message_create_batch('jobs', ARRAY['d','e']::bytea[])")
    assert len(run(c, "SELECT id FROM pgqueue.message_dequeue('jobs', 1, 0)")) == 1
    (dead_id, dead_attempts), = run(c, "SELECT id, attempts FROM pgqueue.message_dequeue('jobs')")
    assert run(c, f"SELECT pgqueue.message_fail({dead_id}, {dead_attempts}, 'poison')") == [(True,)]
    assert run(c, "SELECT dead FROM pgqueue.queue_stats('jobs')") == [(1,)]

    denied(c, "SELECT pgqueue.message_create('jobs', 'x')")
    denied(c, "SELECT pgqueue.queue_drop('jobs')")
    denied(c, "SELECT pgqueue.queue_create('mine')")
    denied(c, "SELECT pgqueue.queue_alter('jobs', p_lock_ms => 1000)")
    denied(c, "SELECT pgqueue.dead_letter_purge('jobs')")
    denied(c, "SELECT pgqueue.dead_letter_requeue('jobs')")
    denied(c, "DELETE FROM pgqueue.dead_letter")
    denied(c, "SELECT id FROM pgqueue.dead_letter")  # what dead-lettering needs is INSERT alone
    assert run(roles.dsn(roles.admin), "SELECT count(*) FROM pgqueue.dead_letter") == [(1,)]


def test_groups_and_keys_need_no_more_than_the_recipes(roles: Roles) -> None:
    """Issue 14: a producer enqueues into groups with idempotency keys, a consumer hands the
    groups' turns on and keeps completed keys for the window, with the recipes' grants only."""
    with psycopg.connect(roles.dsn(roles.admin), autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('grp', p_group_concurrency => 1, p_key_window_ms => 60000)")
    p, c = roles.dsn(roles.producer), roles.dsn(roles.consumer)
    (first,), = run(p, "SELECT pgqueue.message_create('grp', 'a1', p_group => 'a', p_key => 'k1')")
    assert run(p, "SELECT count(*) FROM pgqueue.message_create_batch('grp', ARRAY['a2', 'b1']::bytea[], "
                  "p_groups => ARRAY['a', 'b'], p_keys => ARRAY['k2', 'k3'])") == [(2,)]
    assert run(p, "SELECT pgqueue.message_create('grp', 'again', p_group => 'a', p_key => 'k1')") == [(first,)]
    got = run(c, "SELECT convert_from(content, 'UTF8'), id, attempts FROM pgqueue.message_dequeue('grp', 10)")
    assert sorted(str(g[0]) for g in got) == ["a1", "b1"]
    for _, msg_id, attempts in got:
        assert run(c, f"SELECT pgqueue.message_complete({msg_id}, {attempts})") == [(True,)]
    assert [r[0] for r in run(c, "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('grp', 10, 0)")] == ["a2"]
    # a REPEATABLE READ lease pins the queue's row (pgqueue._queue_pin), with the recipe's grants
    run(p, "SELECT pgqueue.message_create('grp', 'c1', p_group => 'c')")
    with psycopg.connect(c) as rr:
        rr.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        assert [r[0] for r in rr.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('grp', 1)")
                ] == ["c1"]
        rr.rollback()
    # within the window the completed key still answers with its old id
    assert run(p, "SELECT pgqueue.message_create('grp', 'late', p_key => 'k1')") == [(first,)]
    denied(p, "DELETE FROM pgqueue.message_key")
    # a rate-limited queue: the consumer takes its slots (nextval, setval) with the recipe's grants
    with psycopg.connect(roles.dsn(roles.admin), autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('slow', p_rate_limit => 1000)")
    run(p, "SELECT pgqueue.message_create_batch('slow', ARRAY['1', '2', '3']::bytea[])")
    assert len(run(c, "SELECT id FROM pgqueue.message_dequeue('slow', 1, 0)")) == 1
    # a role granted nothing cannot hold a group's lock (it is no advisory lock)
    denied(roles.dsn(roles.nobody), "SELECT pgqueue._message_group_lock(1, 'a')")
    denied(roles.dsn(roles.nobody), "SELECT * FROM pgqueue.message_group_lock FOR UPDATE")
    # a group left with room and a message waiting without a turn (a further round of a dequeue
    # hands no turn on out of stripe order; here by hand): a producer's enqueue into it hands the
    # turn to the waiting message. It needs UPDATE on pgqueue.message, which producers have not:
    # the producer failed with 42501 (a review); it runs as the owner (_message_group_hand).
    with psycopg.connect(roles.dsn(roles.admin), autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('room', p_group_concurrency => 2)")
        admin.execute("SELECT pgqueue.message_create('room', 'w1', p_group => 'g')")
        admin.execute("UPDATE pgqueue.message SET turn_at = NULL WHERE group_key = 'g'")
    run(p, "SELECT pgqueue.message_create('room', 'w2', p_group => 'g')")
    assert [r[0] for r in run(c, "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('room', 10, 0)")
            ] == ["w1", "w2"]
    denied(p, "SELECT id FROM pgqueue.message FOR UPDATE")  # producers still cannot lock messages
    denied(roles.dsn(roles.nobody), "SELECT pgqueue._message_group_hand(1, 'g')")
    # called directly (without the queue's lock stripe that keeps queue_alter out of an enqueue),
    # it reads the limit after the group's lock: behind a lowered limit it hands no turn past it
    with psycopg.connect(roles.dsn(roles.admin), autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('lowered', p_group_concurrency => 3)")
        admin.execute("SELECT pgqueue.message_create_batch('lowered', ARRAY['x1', 'x2']::bytea[], "
                      "p_groups => ARRAY['g', 'g'])")
        assert len(run(c, "SELECT id FROM pgqueue.message_dequeue('lowered', 1, 60000)")) == 1  # x1 in flight
        admin.execute("UPDATE pgqueue.message SET turn_at = NULL WHERE convert_from(content, 'UTF8') = 'x2'")
        (queue_id,), = admin.execute("SELECT id FROM pgqueue.queue WHERE name = 'lowered'").fetchall()
        with psycopg.connect(roles.dsn(roles.admin)) as alter:
            alter.execute("SELECT pgqueue.queue_alter('lowered', p_group_concurrency => 1)")  # holds g's lock
            handed: list[object] = []
            thread = threading.Thread(target=lambda: handed.extend(
                run(p, f"SELECT pgqueue._message_group_hand({queue_id}, 'g')")))
            thread.start()
            time.sleep(0.5)  # (the call waits for the group's lock)
            alter.commit()
            thread.join(30)
        assert handed == [(False,)]
        assert run(c, "SELECT id FROM pgqueue.message_dequeue('lowered', 10, 60000)") == []  # one in flight: the limit


def test_a_producer_retries_a_keyed_create_on_a_full_capped_queue(roles: Roles) -> None:
    """A keyed create on a capped queue looks its key up before it asks for room, in
    pgqueue._message_key_taken (SECURITY INVOKER, EXECUTE left to PUBLIC): it reads the live
    messages' keys and pgqueue.message_key with the producer's own privileges. With the recipe's
    grants alone, the retry of an enqueue that went through returns its id on a full queue, from
    the live message and, after it was completed, from the key kept for the window (42501 if
    EXECUTE on the function, SELECT (idem_key) on pgqueue.message or SELECT on message_key were
    missing; PQ003 if the key were not looked up before the room)."""
    with psycopg.connect(roles.dsn(roles.admin), autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('capkey', p_max_size => 1, p_key_window_ms => 3600000)")
    p, c = roles.dsn(roles.producer), roles.dsn(roles.consumer)
    (first,), = run(p, "SELECT pgqueue.message_create('capkey', 'a', p_key => 'k1')")
    assert run(p, "SELECT pgqueue.message_create('capkey', 'again', p_key => 'k1')") == [(first,)]  # full: live key
    with pytest.raises(psycopg.Error) as full:
        run(p, "SELECT pgqueue.message_create('capkey', 'b', p_key => 'k2')")
    assert full.value.sqlstate == "PQ003"  # a new key still asks for room
    (msg_id, attempts), = run(c, "SELECT id, attempts FROM pgqueue.message_dequeue('capkey')")
    assert run(c, f"SELECT pgqueue.message_complete({msg_id}, {attempts})") == [(True,)]
    (second,), = run(p, "SELECT pgqueue.message_create('capkey', 'b', p_key => 'k2')")  # full again
    # k1's message left: its key is kept in pgqueue.message_key, found before the room is asked for
    assert run(p, "SELECT pgqueue.message_create('capkey', 'late', p_key => 'k1')") == [(first,)]
    assert run(p, "SELECT pgqueue.message_create('capkey', 'again', p_key => 'k2')") == [(second,)]
    assert run(roles.dsn(roles.admin), "SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q "
                                       "ON q.id = m.queue_id WHERE q.name = 'capkey'") == [(1,)]


def test_group_lock_rows_only_for_queues_with_groups(roles: Roles, pg_server: Server, dbname: str) -> None:
    """A producer may call pgqueue._message_group_lock (the recipes grant it), but it makes the
    row of a group's stripe only for a queue with message groups: any other queue id is PQ001
    and a NULL queue id or group 22004, each writing nothing, so no role can fill
    pgqueue.message_group_lock with rows of its own."""
    owner = pg_server.dsn(dbname)
    run(owner, "SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1)")
    (grouped,), = run(owner, "SELECT id FROM pgqueue.queue WHERE name = 'grouped'")
    (plain,), = run(owner, "SELECT id FROM pgqueue.queue WHERE name = 'jobs'")
    p = roles.dsn(roles.producer)
    for queue_id in (plain, 2147483647, -1):
        with pytest.raises(psycopg.Error) as raised:
            run(p, f"SELECT pgqueue._message_group_lock({queue_id}, 'a')")
        assert raised.value.sqlstate == "PQ001", queue_id
    for args, name in ((f"{grouped}, NULL", "p_group"), ("NULL, 'a'", "p_queue_id"),
                       ("NULL, NULL", "p_queue_id")):  # a NULL has no stripe: 22004, nothing written
        with pytest.raises(psycopg.Error) as raised:
            run(p, f"SELECT pgqueue._message_group_lock({args})")
        assert raised.value.sqlstate == "22004", args
        assert raised.value.diag.message_primary == f"{name} must not be NULL", args
    assert run(p, f"SELECT pgqueue._message_group_lock({grouped}, 'a')") == [(True,)]
    assert run(owner, "SELECT queue_id, count(*) FROM pgqueue.message_group_lock GROUP BY 1") == [(grouped, 1)]


def test_admin_can_do_everything(roles: Roles) -> None:
    a = roles.dsn(roles.admin)
    run(a, "SELECT pgqueue.queue_create('ops', p_max_attempts => 1)")
    run(a, "SELECT pgqueue.queue_alter('ops', p_lock_ms => 5000, p_max_size => 10)")
    run(a, "SELECT pgqueue.message_create('ops', 'x')")
    (msg_id, attempts), = run(a, "SELECT id, attempts FROM pgqueue.message_dequeue('ops')")
    assert run(a, f"SELECT pgqueue.message_fail({msg_id}, {attempts}, 'boom')") == [(True,)]
    assert run(a, "SELECT pgqueue.dead_letter_requeue('ops')") == [(1,)]
    (msg_id, attempts), = run(a, "SELECT id, attempts FROM pgqueue.message_dequeue('ops')")
    assert run(a, f"SELECT pgqueue.message_fail({msg_id}, {attempts}, 'boom')") == [(True,)]
    assert run(a, "SELECT pgqueue.dead_letter_purge('ops')") == [(1,)]
    assert run(a, "SELECT pgqueue.queue_drop('ops')") == [(True,)]


def test_a_role_without_grants_can_do_nothing(roles: Roles) -> None:
    n = roles.dsn(roles.nobody)
    denied(n, "SELECT pgqueue.message_create('jobs', 'x')")
    denied(n, "SELECT * FROM pgqueue.message_dequeue('jobs')")
    denied(n, "SELECT * FROM pgqueue.queue_stats()")
    denied(n, "SELECT pgqueue.queue_drop('jobs')")


def test_a_role_granted_nothing_cannot_hold_a_queue(roles: Roles) -> None:
    """Review defect 4: a queue's lock is a relation lock on its stripe (docs/locking.md), which
    needs a privilege; the advisory lock 0.3 used could be held by anyone who can connect."""
    nobody = psycopg.connect(roles.dsn(roles.nobody))
    try:
        # what froze a queue in 0.3: now nothing in pgqueue waits for advisory locks
        nobody.execute("SELECT pg_advisory_lock(1885827445, q) FROM generate_series(1, 100) q")
        nobody.execute("SELECT pg_advisory_lock_shared(1885827445, q) FROM generate_series(1, 100) q")
        nobody.execute("SELECT pg_advisory_lock(1885827447, q) FROM generate_series(1, 100) q")  # 0.3's Spark holds
        nobody.commit()
        for stmt in ("SELECT pg_sequence_last_value('pgqueue.queue_lock_1')",
                     "SELECT pgqueue._queue_quiesce(1)", "SELECT pgqueue._queue_pin(1)",
                     "SELECT pgqueue._queue_reserve(1, 1)"):
            with pytest.raises((errors.InsufficientPrivilege, errors.InFailedSqlTransaction)):
                nobody.execute(stmt)  # type: ignore[arg-type]
            nobody.rollback()
        # with the outsider's session (and its advisory locks) still open, the queue works
        msg_id, attempts = seed(roles)
        assert run(roles.dsn(roles.consumer), f"SELECT pgqueue.message_complete({msg_id}, {attempts})") == [(True,)]
        run(roles.dsn(roles.producer), "SELECT pgqueue.message_create('jobs', 'more')")
        # a Spark consumer can be opened (0.3 said PQ005: "in use"), and once it is held, the
        # outsider cannot take over or fake its hold
        with psycopg.connect(roles.dsn(roles.admin), autocommit=True) as spark:
            assert spark.execute("SELECT pgqueue.spark_consumer_open('jobs', 'etl')").fetchone() == (0,)
            key = spark.execute("SELECT holder_key FROM pgqueue.spark_consumer WHERE name = 'etl'").fetchone()
            assert key is not None and key[0] is not None
            assert nobody.execute("SELECT pg_try_advisory_lock(%s)", key).fetchone() == (False,)
            nobody.commit()
            assert run(roles.dsn(roles.admin), "SELECT consumer, active FROM pgqueue.spark_consumers()") == [("etl", True)]
            assert spark.execute("SELECT pgqueue.spark_consumer_close('jobs', 'etl')").fetchone() == (True,)
        assert run(roles.dsn(roles.admin), "SELECT pgqueue.queue_drop('jobs')") == [(True,)]
    finally:
        nobody.close()


def test_producers_cannot_switch_the_cap_off(roles: Roles) -> None:
    """Review defect 7: max_size accounting is written only by pgqueue._queue_reserve."""
    p = roles.dsn(roles.producer)
    run(p, "SELECT pgqueue.message_create('capped', 'a')")
    denied(p, "UPDATE pgqueue.queue_size SET upper = -1000")
    denied(p, "DELETE FROM pgqueue.queue_size")
    denied(p, "INSERT INTO pgqueue.queue_size VALUES (999, -1000)")
    run(p, "SELECT pgqueue.message_create('capped', 'b')")
    with pytest.raises(psycopg.Error) as full:
        run(p, "SELECT pgqueue.message_create('capped', 'c')")
    assert full.value.sqlstate == "PQ003"
    assert run(roles.dsn(roles.admin), "SELECT ready FROM pgqueue.queue_stats('capped')") == [(2,)]


def test_producers_cannot_take_the_ids_of_other_producers_messages(roles: Roles, pg_server: Server,
                                                                   dbname: str) -> None:
    """Review defect (0.4, security review): a producer had INSERT on every column of
    pgqueue.message, so plain SQL could insert rows with the ids message_id_seq hands out next:
    every other producer's message_create then failed on them (23505) until the sequence passed
    them. The recipe grants INSERT on the columns the enqueue functions write only (nor
    locked_until, attempts, state, last_error, claim_id: a lease or a claim a producer made up)."""
    p = roles.dsn(roles.producer)
    (last,), = run(p, "SELECT pgqueue.message_create('jobs', 'a')")
    denied(p, f"INSERT INTO pgqueue.message (id, queue_id, dequeue_at, created_at, content) "
              f"SELECT g, 1, 0, 0, 'squat' FROM generate_series({last} + 1, {last} + 10) g")
    denied(p, "INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, locked_until) "
              "VALUES (1, 0, 0, 'fake lease', 253402300799999)")
    denied(p, "INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, attempts) VALUES (1, 0, 0, 'x', 9)")
    # every way of enqueueing still works with these columns
    assert [r[0] for r in run(p, "SELECT count(*) FROM pgqueue.message_create_batch('jobs', ARRAY['b', 'c']::bytea[])")] == [2]
    with psycopg.connect(roles.dsn(roles.admin), autocommit=True) as admin:
        admin.execute("SELECT pgqueue.queue_create('grp', p_group_concurrency => 1)")
    run(p, "SELECT pgqueue.message_create('grp', 'g', p_group => 'g', p_key => 'k')")
    run(p, "SELECT pgqueue.message_create_json('jobs', '{}')")
    # an earlier run of the recipe (table-wide INSERT) is narrowed by running it again
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        owner.execute(sql.SQL("GRANT INSERT ON pgqueue.message TO {}").format(sql.Identifier(roles.producer)))
    apply_recipes(pg_server, dbname, {"producer": roles.producer, "consumer": roles.consumer, "admin": roles.admin})
    denied(p, "INSERT INTO pgqueue.message (id, queue_id, dequeue_at, created_at, content) VALUES (1000000, 1, 0, 0, 'x')")
    assert run(p, "SELECT pgqueue.message_create('jobs', 'd') > 0") == [(True,)]


def test_a_producer_cannot_make_a_capped_queue_with_room_look_full(roles: Roles, pg_server: Server,
                                                                    dbname: str) -> None:
    """Review defect (0.4, security review): a count of a capped queue of 10,000 messages or more
    that refused an admission set the queue's recount window whatever the admission's size, so
    a producer calling pgqueue._queue_reserve (granted to producers) with a huge count, or a
    batch larger than the room left, made every producer's single message refused (PQ003,
    without counting) for the window, again and again, while the queue had room. Only a count
    that finds no room for one message sets it now."""
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        owner.execute("SELECT pgqueue.queue_create('big', p_max_size => 20000)")
        owner.execute("SELECT count(*) FROM pgqueue.message_create_batch('big', array_fill('x'::bytea, ARRAY[15000]))")
        (qid,), = owner.execute("SELECT id FROM pgqueue.queue WHERE name = 'big'").fetchall()
    p = roles.dsn(roles.producer)
    # the enqueued counter advanced by hand (USAGE on the counters: they count its enqueues), so
    # that the queue's bound says "full" and an admission must count
    run(p, f"SELECT count(nextval(pgqueue._count_seq({qid}, 0))) FROM generate_series(1, 6000)")
    for _ in range(2):
        with pytest.raises(psycopg.Error) as refused:
            run(p, f"SELECT pgqueue._queue_reserve({qid}, 9000000000000000000)")
        assert refused.value.sqlstate == "PQ003"
        with pytest.raises(psycopg.Error) as batch:
            run(p, "SELECT count(*) FROM pgqueue.message_create_batch('big', array_fill('y'::bytea, ARRAY[5001]))")
        assert batch.value.sqlstate == "PQ003"
        assert run(p, "SELECT pgqueue.message_create('big', 'fits') > 0") == [(True,)]


def test_a_role_that_is_admin_and_spark_keeps_the_admins_rights(roles: Roles, pg_server: Server, dbname: str) -> None:
    """Review defect (0.4): the Spark recipe's REVOKE of table-wide INSERT and UPDATE on
    pgqueue.message (before its column grants) ran after the admin's GRANT, so a role named as
    both lost them: dead_letter_requeue failed with 42501. The admin's grants now come last."""
    proc = subprocess.run(
        ["psql", "-X", "-q", "-d", dbname, "-f", str(GRANTS), "-v", f"producer={roles.producer}",
         "-v", f"consumer={roles.consumer}", "-v", f"admin={roles.admin}", "-v", f"spark={roles.admin}"],
        env=pg_server.libpq_env(), capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    a = roles.dsn(roles.admin)
    assert run(a, "SELECT has_table_privilege('pgqueue.message', 'INSERT'), "
                  "has_table_privilege('pgqueue.message', 'UPDATE')") == [(True, True)]
    mid, token = seed(roles)  # queue jobs: max_attempts 1
    assert run(roles.dsn(roles.consumer), f"SELECT pgqueue.message_fail({mid}, {token}, 'dead')") == [(True,)]
    assert run(a, "SELECT pgqueue.dead_letter_requeue('jobs')") == [(1,)]


def test_consumers_cannot_move_messages_onto_other_ids(roles: Roles, pg_server: Server, dbname: str) -> None:
    """Review defect (0.4, security review): the consumer recipe granted UPDATE on every column
    of pgqueue.message, so plain SQL could move messages onto the ids message_id_seq hands out
    next (`UPDATE ... SET id = ...`), and every producer's message_create failed on them (23505).
    It now grants UPDATE of the columns the consumer's functions write only."""
    c = roles.dsn(roles.consumer)
    seed(roles)
    run(roles.dsn(roles.producer), "SELECT pgqueue.message_create('jobs', 'y')")
    denied(c, "UPDATE pgqueue.message SET id = id + 1000")
    denied(c, "UPDATE pgqueue.message SET queue_id = queue_id")
    denied(c, "UPDATE pgqueue.message SET content = 'forged'")
    # what the consumer's calls write still works: lease, heartbeat, defer, fail, complete
    (mid, token), = run(c, "SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1, 60000)")
    assert run(c, f"SELECT pgqueue.message_heartbeat({mid}, {token}, 60000)") == [(True,)]
    assert run(c, f"SELECT pgqueue.message_heartbeat_batch(ARRAY[{mid}]::bigint[], ARRAY[{token}], 60000)") == [([],)]
    assert run(c, f"SELECT pgqueue.message_defer({mid}, {token}, 0)") == [(True,)]
    (mid, token), = run(c, "SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1, 60000)")
    assert run(c, f"SELECT pgqueue.message_fail({mid}, {token}, 'boom')") == [(True,)]
    # an earlier run of the recipe (table-wide UPDATE) is narrowed by running it again
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        owner.execute(sql.SQL("GRANT UPDATE ON pgqueue.message TO {}").format(sql.Identifier(roles.consumer)))
    apply_recipes(pg_server, dbname, {"producer": roles.producer, "consumer": roles.consumer, "admin": roles.admin})
    denied(c, "UPDATE pgqueue.message SET id = id + 1000")
    # and 0.3's recipe read of the dead letters' ids (0.4 grants queue_id only) is taken back
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        owner.execute(sql.SQL("GRANT SELECT (id, queue_id) ON pgqueue.dead_letter TO {}").format(
            sql.Identifier(roles.consumer)))
    apply_recipes(pg_server, dbname, {"producer": roles.producer, "consumer": roles.consumer, "admin": roles.admin})
    denied(c, "SELECT id FROM pgqueue.dead_letter")
    assert run(c, "SELECT count(queue_id) FROM pgqueue.dead_letter") == [(1,)]


def test_the_admin_recipe_cannot_plant_triggers(roles: Roles, pg_server: Server, dbname: str) -> None:
    """Review defect (0.4, security review): the admin recipe granted ALL on the tables, TRIGGER
    included, so the admin role could put a trigger on pgqueue.message whose function then ran
    as whoever enqueued, the extension's owner (a superuser) too. Nor REFERENCES (a foreign key
    of its own to pgqueue.queue would hold queue_drop up)."""
    a = roles.dsn(roles.admin)
    denied(a, "CREATE TRIGGER planted BEFORE INSERT ON pgqueue.message "
              "FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()")
    denied(a, "CREATE TRIGGER planted BEFORE UPDATE ON pgqueue.queue "
              "FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()")
    assert run(a, "SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind = 'r' "
                  "AND (has_table_privilege(c.oid, 'TRIGGER') OR has_table_privilege(c.oid, 'REFERENCES'))") == [(0,)]
    # it still administers (test_admin_can_do_everything), and a recipe run before this one is narrowed
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        owner.execute(sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA pgqueue TO {}").format(sql.Identifier(roles.admin)))
    apply_recipes(pg_server, dbname, {"producer": roles.producer, "consumer": roles.consumer, "admin": roles.admin})
    denied(a, "CREATE TRIGGER planted AFTER INSERT ON pgqueue.message "
              "FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()")
    assert run(a, "SELECT pgqueue.queue_drop('capped')") == [(True,)]


def test_the_recipe_takes_the_definer_functions_back_from_public(roles: Roles, pg_server: Server,
                                                                  dbname: str) -> None:
    """A dump of a plain install restored without its privileges (pg_restore -x) leaves the
    SECURITY DEFINER functions executable by PUBLIC, as PostgreSQL makes every new function: a
    role granted nothing could then fire the schedules or hold a queue's admission row as the
    owner. The recipe revokes them from PUBLIC whatever ran before it (review of session 41)."""
    definer = ("SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pgqueue'::regnamespace "
               "AND p.prosecdef AND has_function_privilege('public', p.oid, 'EXECUTE') ORDER BY 1")
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        owner.execute("SELECT pgqueue.schedule_create('tick', 'jobs', 'x', 60000, p_start_at => pgqueue.now_ms())")
        for (name,) in owner.execute("SELECT p.oid::regprocedure::text FROM pg_proc p "
                                     "WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosecdef").fetchall():
            owner.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {} TO PUBLIC").format(sql.SQL(name)))
        definers = len(owner.execute(definer).fetchall())
        assert definers == 6  # as after a restore without privileges
    # the recipe's header and docs/security.md count them as the catalog does (grants.sql said
    # five after a sixth was added: a review)
    said = {5: "five", 6: "six", 7: "seven", 8: "eight"}[definers]
    assert f"but for {said} SECURITY DEFINER ones" in GRANTS.read_text()
    assert f"SECURITY DEFINER: {said} functions" in (REPO / "docs" / "security.md").read_text()
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        owner.execute(sql.SQL("GRANT USAGE ON SCHEMA pgqueue TO {}").format(sql.Identifier(roles.nobody)))
    assert run(roles.dsn(roles.nobody), "SELECT count(*) FROM pgqueue.schedule_run()") == [(1,)]
    apply_recipes(pg_server, dbname, {"producer": roles.producer, "consumer": roles.consumer, "admin": roles.admin})
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        assert owner.execute(definer).fetchall() == []
    denied(roles.dsn(roles.nobody), "SELECT * FROM pgqueue.schedule_run()")
    denied(roles.dsn(roles.consumer), "SELECT * FROM pgqueue.schedule_run()")
    assert run(roles.dsn(roles.producer), "SELECT count(*) FROM pgqueue.schedule_run()") == [(0,)]  # fired already


def test_the_recipe_takes_the_definer_functions_back_from_default_privileges(roles: Roles, pg_server: Server,
                                                                              dbname: str) -> None:
    """The install takes the SECURITY DEFINER functions back from the roles the owner's default
    privileges on functions name, but a restored dump of a plain install creates them again, and
    those roles had them back: the recipe takes them back from those roles too (a review), also
    when the default privileges are another role's than the owner's, as a superuser's that
    restores and then sets the owner (a second review: the recipe read the owner's only)."""
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
        owner.execute(sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} GRANT EXECUTE ON FUNCTIONS TO {} "
                              "WITH GRANT OPTION").format(sql.Identifier(roles.admin), sql.Identifier(roles.nobody)))
        row = owner.execute("SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgqueue'::regnamespace AND prosecdef "
                            "AND proowner = (SELECT oid FROM pg_roles WHERE rolname = %s)", (roles.admin,)).fetchone()
        assert row == (0,)  # (not the owner's default privileges)
        owner.execute(sql.SQL("GRANT USAGE ON SCHEMA pgqueue TO {}").format(sql.Identifier(roles.nobody)))
        definers = [name for (name,) in owner.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p "
            "WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosecdef").fetchall()]
        assert len(definers) == 6
        for name in definers:  # what the restore's CREATE FUNCTION under those defaults gives
            owner.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {} WITH GRANT OPTION").format(
                sql.SQL(name), sql.Identifier(roles.nobody)))
    try:
        assert run(roles.dsn(roles.nobody), "SELECT count(*) FROM pgqueue.schedule_run()") == [(0,)]
        # (a grant it passed on: the recipe's REVOKE ... CASCADE takes that back too)
        run(roles.dsn(roles.nobody), sql.SQL("GRANT EXECUTE ON FUNCTION pgqueue._queue_quiesce(integer) TO {}").format(
            sql.Identifier(roles.consumer)).as_string())
        apply_recipes(pg_server, dbname, {"producer": roles.producer, "consumer": roles.consumer, "admin": roles.admin})
        denied(roles.dsn(roles.nobody), "SELECT * FROM pgqueue.schedule_run()")
        denied(roles.dsn(roles.consumer), "SELECT pgqueue._queue_quiesce(1)")
        assert run(roles.dsn(roles.producer), "SELECT count(*) FROM pgqueue.schedule_run()") == [(0,)]
    finally:
        with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as owner:
            owner.execute(sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} REVOKE EXECUTE ON FUNCTIONS FROM {}").format(
                sql.Identifier(roles.admin), sql.Identifier(roles.nobody)))


def test_producers_and_consumers_make_sure_of_their_queue(roles: Roles) -> None:
    """queue_create with p_if_not_exists of a queue that exists is a read: a producer or a
    consumer of docs/grants.sql (which may not create queues) may call it at start, also in a
    READ ONLY transaction. (A first fix of session 47 locked the row for every call: 42501
    "permission denied for sequence queue_id_seq" for them, and a READ ONLY transaction refused.)"""
    run(roles.dsn(roles.admin), "SELECT pgqueue.queue_create('jobs', p_if_not_exists => true)")
    for role in (roles.producer, roles.consumer):
        run(roles.dsn(role), "SELECT pgqueue.queue_create('jobs', p_if_not_exists => true)")
        with psycopg.connect(roles.dsn(role)) as conn:
            conn.execute("SET TRANSACTION READ ONLY")
            conn.execute("SELECT pgqueue.queue_create('jobs', p_if_not_exists => true)")
        denied(roles.dsn(role), "SELECT pgqueue.queue_create('not_theirs', p_if_not_exists => true)")


def test_a_consumer_ends_its_own_closed_connections_session_without_a_grant(roles: Roles) -> None:
    """What receive() runs before it settles a message elsewhere once the caller's connection is
    closed (pgqueue._core.end_session: pg_stat_activity and pg_terminate_backend): a role sees its
    own sessions' client address and may end them with no grant (docs/security.md). Another
    role's session is not provably the caller's (its address is hidden from the consumer, and
    the user differs): it is left alone (None), and so would the message be."""
    from pgqueue import _core

    c = roles.dsn(roles.consumer)
    with (psycopg.connect(c, autocommit=True) as caller, psycopg.connect(c, autocommit=True) as other,
          psycopg.connect(roles.dsn(roles.producer), autocommit=True) as producers):
        def end(conn: psycopg.Connection[Any]) -> bool | None:
            session = _core.caller_session(conn.pgconn, conn.info.backend_pid)
            assert session is not None
            call = _core.end_session(session)
            return call.result(other.execute(call.query, call.params).fetchall())

        assert end(producers) is None  # not provably the consumer's: left alone
        assert producers.execute("SELECT 1").fetchone() == (1,)
        assert end(caller) is True
        with pytest.raises(psycopg.OperationalError):
            caller.execute("SELECT 1")
