"""Upgrades: every earlier released version, filled with messages in every state, is updated
with ALTER EXTENSION pgqueue UPDATE; afterwards its catalog equals a fresh install's and every
message, dead letter and setting is still there and still works."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from catalog import catalog
from conftest import REPO, Server, admin_execute

CONTROL = (REPO / "pgqueue.control").read_text()
DEFAULT_VERSION = re.search(r"^default_version\s*=\s*'([^']+)'", CONTROL, re.M).group(1)  # type: ignore[union-attr]


#: queue_list's columns in every release (0.4 added group_concurrency, key_window_ms, rate_limit)
QUEUE_LIST_0_1 = ("SELECT queue, lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify, created_at "
                  "FROM pgqueue.queue_list()")

def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def released_versions() -> list[str]:
    """Every version an install or upgrade script names, oldest first."""
    versions: set[str] = set()
    for path in (REPO / "extension").glob("pgqueue--*.sql"):
        versions.update(path.stem.split("--")[1:])
    return sorted(versions, key=_version_key)


EARLIER = [v for v in released_versions() if _version_key(v) < _version_key(DEFAULT_VERSION)]

@pytest.fixture
def empty_db(pg_server: Server) -> Iterator[str]:
    name = f"upgrade_{len(EARLIER)}"
    ident = sql.Identifier(name)
    admin_execute(pg_server, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident),
                  sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(ident))
    yield name
    admin_execute(pg_server, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


# Fill a database with messages in every state, using only the 0.1 API.
FILL = """
SELECT pgqueue.queue_create('jobs', p_lock_ms => 600000, p_max_attempts => 2,
                            p_retry_base_ms => 0, p_retry_cap_ms => 0, p_max_size => 100, p_notify => true);
SELECT pgqueue.queue_alter('default', p_lock_ms => 45000);
SELECT pgqueue.message_create('jobs', 'ready');
SELECT pgqueue.message_create('jobs', 'scheduled', pgqueue.to_epoch(now() + interval '1 day'), 'text/plain');
SELECT pgqueue.message_create('jobs', 'priority', pgqueue.priority_dequeue_at(3));
SELECT pgqueue.message_create_batch('jobs', ARRAY['leased', 'deferred', 'dead']::bytea[]);
"""

STATES = """
SELECT m.id, convert_from(m.content, 'UTF8'), m.content_type, m.attempts, m.dequeue_at,
       m.locked_until, m.state, m.last_error, m.created_at
  FROM pgqueue.message m ORDER BY m.id"""


@pytest.mark.skipif(not EARLIER, reason="only one released version so far")
@pytest.mark.parametrize("old_version", EARLIER)
def test_update_from_every_earlier_version(pg_server: Server, empty_db: str, template_db: str,
                                           old_version: str) -> None:
    dsn = pg_server.dsn(empty_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(old_version)))
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'").fetchone() == (old_version,)
        conn.execute(FILL)  # type: ignore[arg-type]
        # Take the messages through the 0.1 API into every state: priority and ready are
        # dequeued first (by dequeue_at, id); lease them, then move each where it belongs.
        got = conn.execute("SELECT id, attempts, convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('jobs', 5)").fetchall()
        by_content = {str(c): (int(i), int(a)) for i, a, c in got}  # type: ignore[call-overload]
        assert set(by_content) == {"priority", "ready", "leased", "deferred", "dead"}
        for content in ("priority", "ready"):
            conn.execute("SELECT pgqueue.message_defer(%s, %s, NULL)", by_content[content])
        conn.execute("SELECT pgqueue.message_defer(%s, %s, pgqueue.to_epoch(now() + interval '1 hour'), 'checkpoint')",
                     by_content["deferred"])
        dead_id, dead_attempts = by_content["dead"]
        conn.execute("SELECT pgqueue.message_fail(%s, %s, 'first')", (dead_id, dead_attempts))
        # the retry is due at once (no back-off): lease it again and fail it for good
        again = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 3)").fetchall()
        for msg_id, attempts in again:
            if msg_id == dead_id:
                conn.execute("SELECT pgqueue.message_fail(%s, %s, 'poison')", (msg_id, attempts))
            else:
                conn.execute("SELECT pgqueue.message_defer(%s, %s, NULL)", (msg_id, attempts))
        before_messages = conn.execute(STATES).fetchall()  # type: ignore[arg-type]
        before_dead = conn.execute("SELECT id, queue, attempts, last_error FROM pgqueue.dead_letters ORDER BY id").fetchall()
        before_queues = conn.execute(QUEUE_LIST_0_1).fetchall()
        assert [row[1] for row in before_dead] == ["jobs"]
        assert any(row[5] is not None for row in before_messages), "a message must be leased"
        assert any(row[6] == b"checkpoint" for row in before_messages)

        conn.execute("ALTER EXTENSION pgqueue UPDATE")
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'").fetchone() == (DEFAULT_VERSION,)

        assert conn.execute(STATES).fetchall() == before_messages  # type: ignore[arg-type]
        assert conn.execute("SELECT id, queue, attempts, last_error FROM pgqueue.dead_letters ORDER BY id").fetchall() == before_dead
        assert conn.execute(QUEUE_LIST_0_1).fetchall() == before_queues
        # 0.4's columns: no groups, no key window, no rate limit on the queues from before
        assert set(conn.execute("SELECT group_concurrency, key_window_ms, rate_limit FROM pgqueue.queue_list()")
                   .fetchall()) == {(None, 0, None)}
        # ...and the queue still works on the upgraded schema
        leased = next(row for row in before_messages if row[5] is not None)
        assert conn.execute("SELECT pgqueue.message_complete(%s, %s)", (leased[0], leased[3])).fetchone() == (True,)
        assert conn.execute("SELECT pgqueue.dead_letter_requeue('jobs')").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM pgqueue.message_dequeue('jobs', 10, 0)").fetchone() == (3,)  # priority, ready, requeued
        new_id = conn.execute("SELECT pgqueue.message_create('jobs', 'after')").fetchone()
        assert new_id is not None and int(new_id[0]) > max(int(r[0]) for r in before_messages)  # type: ignore[call-overload]
        # the cap (max_size 100) after the upgrade, which empties pgqueue.queue_size: recounted
        live_row = conn.execute("SELECT count(*) FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id "
                                "WHERE q.name = 'jobs'").fetchone()
        assert live_row is not None
        conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('jobs', array_fill('\\x01'::bytea, ARRAY[%s]))",
                     (100 - int(live_row[0]),))
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("SELECT pgqueue.message_create('jobs', 'one too many')")
        assert refused.value.sqlstate == "PQ003"

    assert catalog(dsn, extension=True) == catalog(pg_server.dsn(template_db), extension=True)


def now_ms(conn: psycopg.Connection[tuple[object, ...]]) -> int:
    row = conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint").fetchone()
    assert row is not None
    return int(row[0])  # type: ignore[call-overload]


@pytest.mark.skipif(not EARLIER, reason="only one released version so far")
@pytest.mark.parametrize("old_version", EARLIER)
def test_messages_in_flight_keep_working_after_the_update(pg_server: Server, empty_db: str,
                                                          old_version: str) -> None:
    """A busy queue updated under its workers: a running lease completes with its old token,
    an expired one is redelivered with its attempt counted (and its old token refused), a
    scheduled message comes due, the old messages go out before those enqueued after the
    update, the counts are right, and open Spark claims (0.2 on) are acknowledged, released and
    followed by the next claim number."""
    spark = _version_key(old_version) >= (0, 2)
    with psycopg.connect(pg_server.dsn(empty_db), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(old_version)))
        conn.execute("SELECT pgqueue.queue_create('live', p_lock_ms => 600000, p_max_attempts => 3, "
                     "p_retry_base_ms => 0, p_retry_cap_ms => 0)")
        # the leases first (a dequeue takes by dequeue_at, id): one running, one that runs out
        conn.execute("SELECT pgqueue.message_create_batch('live', ARRAY['running', 'expired']::bytea[])")
        running = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('live', 1)").fetchone()
        expired = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('live', 1, 1)").fetchone()
        assert running is not None and expired is not None and running[1] == expired[1] == 1
        conn.execute("SELECT pgqueue.message_create_batch('live', ARRAY['old 1', 'old 2']::bytea[])")
        conn.execute("SELECT pgqueue.message_create('live', 'priority', pgqueue.priority_dequeue_at(5))")
        # due well after the update (a loaded machine's ALTER EXTENSION UPDATE takes seconds); the
        # checks that it is not due yet run only while that is still so
        due_at = now_ms(conn) + 5000
        conn.execute("SELECT pgqueue.message_create('live', 'scheduled', %s)", (due_at,))
        if spark:
            conn.execute("SELECT pgqueue.queue_create('etl')")
            conn.execute("SELECT pgqueue.message_create_batch('etl', ARRAY['e1', 'e2', 'e3', 'e4']::bytea[])")
            assert [conn.execute("SELECT pgqueue.spark_claim('etl', 'job', 2)").fetchone() for _ in range(2)] == [(1,), (2,)]
        time.sleep(0.01)  # the 1 ms lease has run out

        conn.execute("ALTER EXTENSION pgqueue UPDATE")

        # ready counts the expired lease; 0.4's counters start at the update
        early = now_ms(conn) < due_at - 1000
        stats = conn.execute("SELECT ready, scheduled, leased, dead FROM pgqueue.queue_stats('live')").fetchall()
        assert stats == [(4, 1, 1, 0)] or not early and stats == [(5, 0, 1, 0)], stats
        assert conn.execute("SELECT enqueued, delivered, completed, failed, dead_lettered, expired, shared "
                            "FROM pgqueue.queue_counters('live')").fetchall() == [(0, 0, 0, 0, 0, 0, False)]
        # enqueued after the update: after every old message
        conn.execute("SELECT pgqueue.message_create_batch('live', ARRAY['new 1', 'new 2']::bytea[])")
        early = now_ms(conn) < due_at - 1000
        got = conn.execute("SELECT id, convert_from(content, 'UTF8'), attempts FROM pgqueue.message_dequeue('live', 10)").fetchall()
        late = [c for _, c, _ in got if c == "scheduled"]
        assert not (early and late), got
        assert [c for _, c, _ in got if c not in ("expired", "scheduled")] == ["priority", "old 1", "old 2", "new 1", "new 2"]
        assert [(i, a) for i, c, a in got if c == "expired"] == [(expired[0], 2)]  # its attempt counted
        # tokens: the running lease's still works; the expired lease's old one and a wrong one do not
        assert conn.execute("SELECT pgqueue.message_heartbeat(%s, %s)", running).fetchone() == (True,)
        assert conn.execute("SELECT pgqueue.message_complete(%s, %s)", expired).fetchone() == (False,)
        assert conn.execute("SELECT pgqueue.message_complete(%s, %s)", (running[0], running[1] + 1)).fetchone() == (False,)
        assert conn.execute("SELECT pgqueue.message_complete(%s, %s)", running).fetchone() == (True,)
        assert conn.execute("SELECT pgqueue.message_complete(%s, 2)", (expired[0],)).fetchone() == (True,)
        assert conn.execute("SELECT enqueued, delivered, completed, expired FROM pgqueue.queue_counters('live')"
                            ).fetchall() == [(2, 6 + len(late), 2, 1)]
        # the scheduled message comes due, in this session that has polled the queue since (unless
        # a slow machine got here after it was due, and it went out with the others above)
        if not late:
            early = now_ms(conn) < due_at - 1000
            none = conn.execute("SELECT count(*) FROM pgqueue.message_dequeue('live', 10)").fetchone()
            assert none == (0,) or not early, none
            if none == (0,):
                time.sleep(max(0, due_at - now_ms(conn) + 20) / 1000)
                assert conn.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('live', 10)"
                                    ).fetchall() == [("scheduled",)]
        if spark:
            assert conn.execute("SELECT pgqueue.spark_ack('etl', 'job', 1)").fetchone() == (2,)
            assert conn.execute("SELECT pgqueue.spark_release('etl', 'job')").fetchone() == (2,)
            assert conn.execute("SELECT pgqueue.spark_claim('etl', 'job', 10)").fetchone() == (3,)
            assert conn.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.spark_claimed('etl', 'job', 2, 3) "
                                "ORDER BY id").fetchall() == [("e3",), ("e4",)]


def test_versions_are_consistent() -> None:
    """The control file's version is reachable: it has an install script or an upgrade path."""
    versions = released_versions()
    assert versions and versions[-1] == DEFAULT_VERSION, (versions, DEFAULT_VERSION)
    assert (REPO / "extension" / f"pgqueue--{versions[0]}.sql").exists()
    for older, newer in zip(versions, versions[1:]):
        assert (REPO / "extension" / f"pgqueue--{older}--{newer}.sql").exists(), (older, newer)
