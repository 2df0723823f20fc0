"""Invariant 5: a queue's contents and settings survive pg_dump / pg_restore into a new, empty
database (the data tables and their sequences are registered with pg_extension_config_dump)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from conftest import Server, admin_execute, drop_database
from helpers import pg_bindir, snapshot

BIN = pg_bindir()
HOUR = 3_600_000
Conn = psycopg.Connection[Any]


def one(conn: Conn, query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def fill(conn: Conn) -> None:
    """Every kind of state a queue can hold."""
    now = one(conn, "SELECT pgqueue.now_ms()")
    conn.execute("SELECT pgqueue.queue_alter('default', p_lock_ms => 12345, p_max_attempts => 7, "
                 "p_retry_base_ms => 50, p_retry_cap_ms => 5000, p_max_size => 100000, p_notify => true)")
    conn.execute("SELECT pgqueue.queue_create('orders.eu-1', p_lock_ms => 999, p_max_attempts => 2, "
                 "p_retry_base_ms => 10, p_retry_cap_ms => 20, p_max_size => 50, p_notify => false)")
    conn.execute("SELECT pgqueue.queue_create('gone')")
    conn.execute("SELECT pgqueue.queue_drop('gone')")  # leaves a gap in the queue ids
    for queue in ("default", "orders.eu-1"):
        conn.execute("SELECT pgqueue.message_create_batch(%s, %s)", (queue, [f"{queue} ready {i}".encode() for i in range(20)]))
        conn.execute("SELECT pgqueue.message_create(%s, %s, %s, 'application/json')", (queue, b'{"scheduled": true}', now + HOUR))
        conn.execute("SELECT pgqueue.message_create(%s, %s, pgqueue.priority_dequeue_at(3))", (queue, b"urgent"))
        conn.execute("SELECT pgqueue.message_create(%s, %s)", (queue, bytes(range(256))))  # binary content
        # leased, with a checkpoint: delivered, deferred with state, delivered again
        msg_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue(%s, 1, 600000)", (queue,)).fetchone()  # type: ignore[misc]
        assert one(conn, "SELECT pgqueue.message_defer(%s, %s, %s, %s)", (msg_id, token, now - HOUR, b"step 3 of 5"))
        conn.execute("SELECT pgqueue.message_dequeue(%s, 3, 600000)", (queue,))
        # a failed one with its last error, waiting for its retry
        msg_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue(%s, 1, 600000)", (queue,)).fetchone()  # type: ignore[misc]
        assert one(conn, "SELECT pgqueue.message_fail(%s, %s, 'timeout', %s)", (msg_id, token, now + HOUR))
    # dead letters
    for _ in range(2):
        msg_id, token = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('orders.eu-1', 1, 600000)").fetchone()  # type: ignore[misc]
        assert one(conn, "SELECT pgqueue.message_fail(%s, %s, 'boom', %s)", (msg_id, token, now - HOUR))
        msg_id, token2 = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('orders.eu-1', 1, 600000)").fetchone()  # type: ignore[misc]
        assert one(conn, "SELECT pgqueue.message_fail(%s, %s, 'boom again')", (msg_id, token2))
    # the newest message ids end up in the dead letters and completed: the sequence must cover them
    ids = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('default', %s, pgqueue.priority_dequeue_at(100))",
                                      ([b"to complete"] * 3,)).fetchall()]
    leased = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('default', 3, 600000)").fetchall()
    assert [r[0] for r in leased] == ids
    for msg_id, token in leased:
        assert one(conn, "SELECT pgqueue.message_complete(%s, %s)", (msg_id, token))


def contents(conn: Conn) -> dict[str, Any]:
    out: dict[str, Any] = dict(snapshot(conn))
    del out["pgqueue.queue_size"]  # derived data, recounted on demand (not dumped by design)
    out["queue_list"] = conn.execute("SELECT * FROM pgqueue.queue_list()").fetchall()
    out["dead_letters"] = conn.execute("SELECT * FROM pgqueue.dead_letters ORDER BY id").fetchall()
    out["stats"] = conn.execute("SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats()").fetchall()
    out["counters"] = conn.execute("SELECT * FROM pgqueue.queue_counters()").fetchall()  # dumped sequences
    return out


def run(argv: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, f"{argv[0]} failed:\n{proc.stdout}\n{proc.stderr}"
    assert "error" not in proc.stderr.lower(), proc.stderr


@pytest.fixture
def restored_name(pg_server: Server, dbname: str) -> Iterator[str]:
    name = f"{dbname}_restored"
    yield name
    drop_database(pg_server, name)


def test_dump_and_restore_keep_everything(pg_server: Server, dbname: str, conn: Conn,
                                          restored_name: str, tmp_path: Path) -> None:
    fill(conn)
    before = contents(conn)
    assert before["pgqueue.message"] and before["pgqueue.dead_letter"], "premise: there is something to keep"
    max_id = one(conn, "SELECT greatest((SELECT max(id) FROM pgqueue.message), (SELECT max(id) FROM pgqueue.dead_letter))")
    seq_last = one(conn, "SELECT last_value FROM pgqueue.message_id_seq")
    assert seq_last > max_id, "premise: the newest ids were completed, so the sequence is ahead of the rows"

    env = pg_server.libpq_env()
    dump = tmp_path / "db.dump"
    run([str(BIN / "pg_dump"), "-Fc", "-f", str(dump), "-d", dbname], env)
    # a new, empty database: not cloned from the template that has the extension
    admin_execute(pg_server, sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(restored_name)))
    with psycopg.connect(pg_server.dsn(restored_name), autocommit=True) as fresh:
        assert one(fresh, "SELECT count(*) FROM pg_extension WHERE extname = 'pgqueue'") == 0
    run([str(BIN / "pg_restore"), "-d", restored_name, str(dump)], env)

    with psycopg.connect(pg_server.dsn(restored_name), autocommit=True) as restored:
        after = contents(restored)
        for key in before:
            assert after[key] == before[key], f"{key} differs after restore"
        # the sequences went on from where they were: new ids are larger than every old one
        assert one(restored, "SELECT last_value FROM pgqueue.message_id_seq") == seq_last
        new_id = one(restored, "SELECT pgqueue.message_create('orders.eu-1', 'after restore')")
        assert new_id > seq_last
        restored.execute("SELECT pgqueue.queue_create('new-queue')")
        queue_ids: dict[str, int] = dict(restored.execute("SELECT name, id FROM pgqueue.queue").fetchall())
        assert queue_ids["new-queue"] > max(v for k, v in queue_ids.items() if k != "new-queue")
        assert queue_ids["new-queue"] > one(conn, "SELECT last_value FROM pgqueue.queue_id_seq")
        # and the restored queue works: the cap (50) is enforced from the restored rows
        live = one(restored, "SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
                             "WHERE q.name = 'orders.eu-1'")
        room = 50 - live
        restored.execute("SELECT pgqueue.message_create_batch('orders.eu-1', %s)", ([b"fill"] * room,))
        with pytest.raises(psycopg.Error) as exc:
            restored.execute("SELECT pgqueue.message_create('orders.eu-1', 'one too many')")
        assert exc.value.sqlstate == "PQ003"
        # the default queue is still the one and only default, with its dumped settings
        assert restored.execute("SELECT lock_ms, max_attempts, notify FROM pgqueue.queue_list() "
                                "WHERE queue = 'default'").fetchall() == [(12345, 7, True)]
