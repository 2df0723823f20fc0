"""Upgrades: every earlier released version, filled with messages in every state, is updated
with ALTER EXTENSION pgqueue UPDATE; afterwards its catalog equals a fresh install's and every
message, dead letter and setting is still there and still works."""

from __future__ import annotations

import re
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


def test_versions_are_consistent() -> None:
    """The control file's version is reachable: it has an install script or an upgrade path."""
    versions = released_versions()
    assert versions and versions[-1] == DEFAULT_VERSION, (versions, DEFAULT_VERSION)
    assert (REPO / "extension" / f"pgqueue--{versions[0]}.sql").exists()
    for older, newer in zip(versions, versions[1:]):
        assert (REPO / "extension" / f"pgqueue--{older}--{newer}.sql").exists(), (older, newer)
