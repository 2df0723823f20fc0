"""Upgrades: every earlier released version, filled with messages in every state, is updated
with ALTER EXTENSION pgqueue UPDATE; afterwards its catalog equals a fresh install's and every
message, dead letter and setting is still there and still works."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from catalog import catalog
from conftest import REPO, Server, admin_execute
from helpers import BusyQueue

from pgqueue.installer import InstallError, install

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
        # checks that it is not due yet apply only to a call that ended before it came due (the
        # clock is read after the call)
        due_at = now_ms(conn) + 5000
        conn.execute("SELECT pgqueue.message_create('live', 'scheduled', %s)", (due_at,))
        if spark:
            conn.execute("SELECT pgqueue.queue_create('etl')")
            conn.execute("SELECT pgqueue.message_create_batch('etl', ARRAY['e1', 'e2', 'e3', 'e4']::bytea[])")
            assert [conn.execute("SELECT pgqueue.spark_claim('etl', 'job', 2)").fetchone() for _ in range(2)] == [(1,), (2,)]
        time.sleep(0.01)  # the 1 ms lease has run out

        conn.execute("ALTER EXTENSION pgqueue UPDATE")

        # ready counts the expired lease; 0.4's counters start at the update
        stats = conn.execute("SELECT ready, scheduled, leased, dead FROM pgqueue.queue_stats('live')").fetchall()
        early = now_ms(conn) < due_at
        assert stats == [(4, 1, 1, 0)] or not early and stats == [(5, 0, 1, 0)], stats
        assert conn.execute("SELECT enqueued, delivered, completed, failed, dead_lettered, expired, shared "
                            "FROM pgqueue.queue_counters('live')").fetchall() == [(0, 0, 0, 0, 0, 0, False)]
        # enqueued after the update: after every old message
        conn.execute("SELECT pgqueue.message_create_batch('live', ARRAY['new 1', 'new 2']::bytea[])")
        got = conn.execute("SELECT id, convert_from(content, 'UTF8'), attempts FROM pgqueue.message_dequeue('live', 10)").fetchall()
        early = now_ms(conn) < due_at
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
            none = conn.execute("SELECT count(*) FROM pgqueue.message_dequeue('live', 10)").fetchone()
            early = now_ms(conn) < due_at
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


@pytest.mark.parametrize("old_version", [v for v in EARLIER if _version_key(v) >= (0, 2)])
def test_the_update_refuses_while_a_spark_query_of_the_old_version_holds_a_consumer(
        pg_server: Server, empty_db: str, old_version: str) -> None:
    """Before 0.4 a Spark query held its consumer with a session advisory lock on (1885827447, id),
    which 0.4 no longer looks at: updated under such a query, a second driver opened the same
    consumer too and each could acknowledge (delete) the other's claims (a review). The update
    refuses (PQ005) while such a hold exists, naming it, changes nothing, and goes through once
    the query has stopped. The same lock taken by a role that could not be a Spark driver (any
    role may take an advisory lock) holds nothing up (a review of the fix)."""
    stranger = f"pq_stranger_{os.getpid()}"
    admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(stranger)),
                  sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER").format(sql.Identifier(stranger)))
    try:
        with psycopg.connect(pg_server.dsn(empty_db), autocommit=True) as conn, \
                psycopg.connect(pg_server.dsn(empty_db), autocommit=True) as driver, \
                psycopg.connect(pg_server.dsn(empty_db, user=stranger), autocommit=True) as other:
            conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(old_version)))
            conn.execute("SELECT pgqueue.queue_create('etl')")
            conn.execute("SELECT pgqueue.message_create_batch('etl', ARRAY['e1', 'e2']::bytea[])")
            conn.execute("SELECT pgqueue.spark_consumer_open('etl', 'idle'), pgqueue.spark_consumer_close('etl', 'idle')")
            driver.execute("SELECT pgqueue.spark_consumer_open('etl', 'job')")
            idle = conn.execute("SELECT id FROM pgqueue.spark_consumer WHERE name = 'idle'").fetchone()
            assert idle is not None
            # a role granted nothing holds the key of a consumer nobody runs, and of one that does not exist
            other.execute("SELECT pg_advisory_lock(1885827447, %s), pg_advisory_lock(1885827447, 4242)", idle)
            with pytest.raises(psycopg.Error) as refused:
                conn.execute("ALTER EXTENSION pgqueue UPDATE")
            assert refused.value.sqlstate == "PQ005"
            assert refused.value.diag.message_primary is not None
            assert refused.value.diag.message_primary.endswith(
                f'or earlier: consumer "job" of queue "etl" (pid {driver.info.backend_pid})'), str(refused.value)
            assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'"
                                ).fetchone() == (old_version,)
            driver.execute("SELECT pgqueue.spark_consumer_close('etl', 'job')")
            conn.execute("ALTER EXTENSION pgqueue UPDATE")  # the stranger's locks hold nothing up
            assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'"
                                ).fetchone() == (DEFAULT_VERSION,)
            conn.execute("SELECT pgqueue.spark_consumer_open('etl', 'job')")
            with pytest.raises(psycopg.Error) as in_use:  # one holder at a time, as before the update
                driver.execute("SELECT pgqueue.spark_consumer_open('etl', 'job')")
            assert in_use.value.sqlstate == "PQ005"
    finally:
        admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(stranger)))


def test_versions_are_consistent() -> None:
    """The control file's version is reachable: it has an install script or an upgrade path."""
    versions = released_versions()
    assert versions and versions[-1] == DEFAULT_VERSION, (versions, DEFAULT_VERSION)
    assert (REPO / "extension" / f"pgqueue--{versions[0]}.sql").exists()
    for older, newer in zip(versions, versions[1:]):
        assert (REPO / "extension" / f"pgqueue--{older}--{newer}.sql").exists(), (older, newer)


# -- upgrading a busy database, and as another role than the extension's owner -----------------

def _update_while_busy(dsn: str, old_version: str, update: Callable[[psycopg.Connection[Any]], None]) -> None:
    """Install old_version, run update while 2 producers and 2 consumers of a capped queue keep
    calling: nobody gets a deadlock (40P01), and the workers go on after the update."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(old_version)))
        conn.execute("SELECT pgqueue.queue_create('busy', p_max_size => 1000, p_lock_ms => 600000)")
    with BusyQueue(dsn) as busy:
        # the premise: they are at work when the update starts (a fixed sleep could update an
        # idle database on a loaded machine)
        assert busy.worked_since(), (busy.done, busy.died)
        with psycopg.connect(dsn, autocommit=True) as conn:
            update(conn)
            assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'").fetchone() == (DEFAULT_VERSION,)
        went_on = busy.worked_since(busy.done.copy())
    assert [k for k in busy.errors if k[0] == "40P01"] == [], busy.errors
    assert not busy.died, busy.died
    assert went_on, "the workers go on after it"


@pytest.mark.skipif(not EARLIER, reason="only one released version so far")
@pytest.mark.parametrize("old_version", EARLIER[-1:])
def test_an_update_blocked_by_a_users_view_names_the_view(pg_server: Server, empty_db: str,
                                                         old_version: str) -> None:
    """A view of the user's over a function the update drops and creates again (its result
    changed) blocks the update; `pgqueue install` said only "cannot drop function ... because
    other objects depend on it" with the server's hint, DROP ... CASCADE, which would drop the
    view silently (a review). The error names the view, and nothing is changed."""
    with psycopg.connect(pg_server.dsn(empty_db), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(old_version)))
        conn.execute("CREATE VIEW public.queues_seen AS SELECT * FROM pgqueue.queue_list()")
        with pytest.raises(InstallError) as refused:
            install(conn, "extension", report=lambda _: None)
        text = str(refused.value)
        assert "view public.queues_seen depends on function pgqueue.queue_list()" in text, text
        assert "CASCADE" not in text and text.endswith(
            f"pgqueue is at version {old_version} (the step that failed changed nothing)"), text
        assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'").fetchone() == (old_version,)
        conn.execute("DROP VIEW public.queues_seen")
        install(conn, "extension", report=lambda _: None)


@pytest.mark.skipif(not EARLIER, reason="only one released version so far")
@pytest.mark.parametrize("old_version", EARLIER)
def test_pgqueue_install_updates_a_busy_database_without_a_deadlock(pg_server: Server, empty_db: str,
                                                                    old_version: str) -> None:
    """`pgqueue install` upgrades a database while producers and consumers keep calling it: the
    update waits for them and they wait for it, and neither is chosen as a deadlock victim. (The
    update scripts alter pgqueue.queue_size, pgqueue.message and pgqueue.queue one after another,
    each in ACCESS EXCLUSIVE mode, while a producer or consumer holds pgqueue.queue and waits for
    one of the others: ALTER EXTENSION UPDATE failed with 40P01 every time, after the deadlock
    detector had also failed some of the workers' calls.)"""
    _update_while_busy(pg_server.dsn(empty_db), old_version,
                       lambda conn: install(conn, "extension", report=lambda _: None))


@pytest.fixture
def owned_db(pg_server: Server) -> Iterator[tuple[str, str]]:
    """A role without superuser and an empty database it owns. Its name needs quoting (capitals),
    as many roles' do: `pgqueue install` quoted the owner's name twice when it set its role."""
    role = f"pq_UpOwner_{os.getpid()}"
    db = f"upowned_{os.getpid()}"
    admin_execute(pg_server,
                  sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)),
                  sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)),
                  sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER").format(sql.Identifier(role)),
                  sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(sql.Identifier(db), sql.Identifier(role)))
    try:
        yield role, db
    finally:
        admin_execute(pg_server,
                      sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)),
                      sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


#: Objects of schema pgqueue whose owner is not the extension's owner.
NOT_THE_OWNERS = """
    SELECT pg_describe_object(o.classid, o.objid, 0), o.owner::regrole::text
      FROM (SELECT 'pg_class'::regclass AS classid, c.oid AS objid, c.relowner AS owner
              FROM pg_class c WHERE c.relnamespace = 'pgqueue'::regnamespace
            UNION ALL
            SELECT 'pg_proc'::regclass, p.oid, p.proowner FROM pg_proc p WHERE p.pronamespace = 'pgqueue'::regnamespace) o,
           pg_extension e
     WHERE e.extname = 'pgqueue' AND o.owner <> e.extowner
     ORDER BY 1"""


@pytest.mark.skipif(not EARLIER, reason="only one released version so far")
@pytest.mark.parametrize("old_version", EARLIER)
def test_pgqueue_install_run_by_a_superuser_updates_as_the_extensions_owner(pg_server: Server,
                                                                           owned_db: tuple[str, str],
                                                                           old_version: str) -> None:
    """The database's owner (no superuser) installed the extension; a superuser (a DBA, a deploy
    job) runs `pgqueue install` to upgrade it. Every object stays the owner's, as after a fresh
    install: before, everything the update made (843 relations, 60 functions, the four SECURITY
    DEFINER ones among them, which then ran as the superuser) was the superuser's, and the owner's
    run of docs/grants.sql stopped at `permission denied for table message_key`."""
    role, db = owned_db
    with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(old_version)))
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (True,)
        install(conn, "extension", report=lambda _: None)
        assert conn.execute("SELECT extversion, pg_get_userbyid(extowner) FROM pg_extension WHERE extname = 'pgqueue'"
                            ).fetchone() == (DEFAULT_VERSION, role)
        wrong = conn.execute(NOT_THE_OWNERS).fetchall()
        assert wrong == [], f"{len(wrong)} objects not the owner's, e.g. {wrong[:3]}"
        assert conn.execute("SELECT current_user").fetchone() != (role,), "the session's role is back"


@pytest.mark.skipif(not EARLIER, reason="only one released version so far")
@pytest.mark.parametrize("old_version", EARLIER[-1:])
def test_alter_extension_update_by_a_superuser_leaves_nothing_to_the_superuser(pg_server: Server,
                                                                             owned_db: tuple[str, str],
                                                                             old_version: str) -> None:
    """README's `ALTER EXTENSION pgqueue UPDATE`, run by a superuser on an extension that the
    database's owner installed: either refused before it changes anything, or every object stays
    the owner's. Now it succeeds and leaves the new objects the superuser's."""
    role, db = owned_db
    with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(old_version)))
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
        try:
            conn.execute("ALTER EXTENSION pgqueue UPDATE")
        except psycopg.Error as exc:
            assert exc.sqlstate == "PQ008", exc
            assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'").fetchone() == (old_version,)
        assert conn.execute(NOT_THE_OWNERS).fetchall() == []


@pytest.mark.skipif(not EARLIER, reason="only one released version so far")
@pytest.mark.parametrize("old_version", EARLIER[-1:])
def test_alter_extension_update_of_a_busy_database_without_a_deadlock(pg_server: Server, empty_db: str,
                                                                      old_version: str) -> None:
    """README's `ALTER EXTENSION pgqueue UPDATE` from the last release while producers and
    consumers keep calling: no deadlock, neither for the update nor for the workers (the update
    script takes every table first)."""
    _update_while_busy(pg_server.dsn(empty_db), old_version,
                       lambda conn: conn.execute("ALTER EXTENSION pgqueue UPDATE").close())
