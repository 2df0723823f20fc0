"""The plain SQL install: pgqueue without extension files on the server.

Every test here works as a role that owns its database and nothing else (no superuser), the
situation on managed PostgreSQL: it installs with `pgqueue install --plain` or `psql -f` of the
generated script, uses the queue, upgrades a plain install made from release 0.1's SQL, dumps
and restores it, uninstalls it; the plain and the extension install have the same catalog; and
every state pgqueue must not install into is refused in one line with a non-zero exit.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from catalog import QUERIES, catalog
from conftest import REPO, Server, admin_execute, drop_database
from helpers import BusyQueue, pg_bindir, snapshot

from pgqueue import Queue
from pgqueue.installer import install, sql_version, uninstall

PLAIN_DIR = REPO / "python" / "pgqueue" / "sql"
CURRENT = sql_version()
Conn = psycopg.Connection[Any]

_numbers = itertools.count(1)


# --------------------------------------------------------------------------------------------
# Fixtures: a non-superuser role and empty databases it owns
# --------------------------------------------------------------------------------------------


@dataclass
class Owner:
    """A login role without superuser, and the empty databases made for it."""

    server: Server
    name: str
    databases: list[str]

    def database(self) -> str:
        """Create an empty database (from template0) owned by this role; return its name."""
        name = f"plain_{os.getpid()}_{next(_numbers)}"
        admin_execute(self.server, sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
            sql.Identifier(name), sql.Identifier(self.name)))
        self.databases.append(name)
        return name

    def dsn(self, dbname: str) -> str:
        return self.server.dsn(dbname, user=self.name)

    def connect(self, dbname: str) -> Conn:
        return psycopg.connect(self.dsn(dbname), autocommit=True)

    def psql(self, dbname: str, *args: str, stop_on_error: bool = True) -> subprocess.CompletedProcess[str]:
        env = self.server.libpq_env()
        env["PGUSER"] = self.name
        stop = ["-v", "ON_ERROR_STOP=1"] if stop_on_error else []
        return subprocess.run([str(pg_bindir() / "psql"), "-X", "-q", *stop, "-d", dbname, *args],
                              env=env, capture_output=True, text=True, timeout=120, check=False)


def _make_role(server: Server, kind: str) -> str:
    name = f"pq_{kind}_{os.getpid()}_{next(_numbers)}"
    admin_execute(server, sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE").format(
        sql.Identifier(name)))
    return name


@pytest.fixture
def owner(pg_server: Server) -> Iterator[Owner]:
    o = Owner(pg_server, _make_role(pg_server, "owner"), [])
    try:
        yield o
    finally:
        for db in o.databases:
            drop_database(pg_server, db)
        admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(o.name)))


@pytest.fixture
def other_role(pg_server: Server, owner: Owner) -> Iterator[str]:
    """Another login role without superuser (dropped after the owner's databases)."""
    name = _make_role(pg_server, "other")
    yield name
    for db in owner.databases:
        drop_database(pg_server, db)
    owner.databases.clear()
    admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def pgqueue(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run the `pgqueue` command line in a child process."""
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    return subprocess.run([sys.executable, "-m", "pgqueue", *argv], capture_output=True, text=True,
                          timeout=300, env=env, check=False)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stdout


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> str:
    """Assert a refusal: exit status 1, one line on stderr holding every word (any case)."""
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word.lower() in lines[0].lower(), (word, lines[0])
    return lines[0]


def one(conn: Conn, query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


def holds(conn: Conn) -> tuple[str | None, str | None]:
    """(extension version, plain install's version) of the database."""
    ext = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'").fetchone()
    plain = None
    if one(conn, "SELECT to_regclass('pgqueue.install') IS NOT NULL"):
        plain = one(conn, "SELECT string_agg(version, ',') FROM pgqueue.install")
    return (None if ext is None else ext[0]), plain


def use_queue(conn: Conn) -> None:
    """Create a queue, enqueue, dequeue with a lease, complete: the queue works."""
    conn.execute("SELECT pgqueue.queue_create('jobs', p_lock_ms => 60000)")
    ids = [r[0] for r in conn.execute("SELECT pgqueue.message_create_batch('jobs', ARRAY['a','b','c']::bytea[])")]
    got = conn.execute("SELECT id, attempts, convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('jobs', 10)").fetchall()
    assert [(r[0], r[2]) for r in got] == list(zip(ids, ["a", "b", "c"]))
    for msg_id, attempts, _ in got:
        assert one(conn, "SELECT pgqueue.message_complete(%s, %s)", (msg_id, attempts)) is True
    assert one(conn, "SELECT ready + leased FROM pgqueue.queue_stats('jobs')") == 0


def install_plain_release(owner: Owner, dbname: str, version: str) -> None:
    """Install a released version's plain script, as psql would (one transaction)."""
    proc = owner.psql(dbname, "-1", "-f", str(PLAIN_DIR / f"pgqueue--{version}.sql"))
    assert proc.returncode == 0, proc.stderr


# --------------------------------------------------------------------------------------------
# Install, use, uninstall
# --------------------------------------------------------------------------------------------


def test_database_owner_installs_plain_uses_and_uninstalls(owner: Owner) -> None:
    db = owner.database()
    dsn = owner.dsn(db)
    out = ok(pgqueue("install", "--plain", "--dsn", dsn))
    assert "installed" in out and "plain" in out and CURRENT in out
    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)
        assert one(conn, "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'pgqueue'") == owner.name
        use_queue(conn)
    # the Python client accepts the plain install (its version check included)
    with Queue(dsn, "jobs") as queue:
        msg_id = queue.enqueue({"hello": "plain"})
        with queue.receive() as msg:
            assert msg is not None and msg.id == msg_id and msg.payload == {"hello": "plain"}
    # a second install changes nothing and says so; plain is picked without being asked
    out = ok(pgqueue("install", "--dsn", dsn))
    assert "already installed" in out and "plain" in out

    refused(pgqueue("uninstall", "--dsn", dsn), "--yes")
    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)
    out = ok(pgqueue("uninstall", "--yes", "--dsn", dsn))
    assert "uninstalled" in out and "plain" in out
    with owner.connect(db) as conn:
        assert one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0
    refused(pgqueue("uninstall", "--yes", "--dsn", dsn), "not installed")


@pytest.mark.parametrize("mode", ["plain", "extension"])
def test_install_and_uninstall_on_a_raw_cursor_connection(owner: Owner, mode: str) -> None:
    """``installer.install(conn)`` on a caller's connection opened with
    ``cursor_factory=psycopg.RawCursor`` (``$1`` placeholders) installs and uninstalls: each step
    failed with "raw queries require a sequence of parameters" (a review)."""
    db = owner.database()
    with psycopg.connect(owner.dsn(db), autocommit=True, cursor_factory=psycopg.RawCursor) as conn:
        install(conn, mode)  # type: ignore[arg-type]
        assert holds(conn) == ((CURRENT, None) if mode == "extension" else (None, CURRENT))
        uninstall(conn, report=lambda _: None)
        assert one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0


def test_psql_f_of_the_generated_script_by_the_non_superuser_owner(owner: Owner) -> None:
    db = owner.database()
    proc = owner.psql(db, "-1", "-f", str(PLAIN_DIR / f"pgqueue--{CURRENT}.sql"))
    assert proc.returncode == 0, proc.stderr
    with owner.connect(db) as conn:
        assert not one(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert holds(conn) == (None, CURRENT)
        use_queue(conn)
        assert one(conn, "SELECT count(*) FROM pgqueue.queue_list() WHERE queue = 'default'") == 1
    out = ok(pgqueue("install", "--dsn", owner.dsn(db)))
    assert "already installed" in out and "plain" in out


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_installs_where_transactions_default_to_another_isolation_level(owner: Owner, pg_server: Server,
                                                                        isolation: str) -> None:
    """README says producers and consumers work under REPEATABLE READ and SERIALIZABLE, so a
    database that defaults to one is a setup pgqueue supports: every way to install works there
    (the default queue was made by queue_create, which refused: "queue_create needs READ
    COMMITTED", a review), and the default queue is what queue_create would have made."""
    dbs = {how: owner.database() for how in ("plain", "extension", "psql")}
    for db in dbs.values():
        admin_execute(pg_server, sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = {}").format(
            sql.Identifier(db), sql.Literal(isolation)))
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(dbs["plain"])))
    ok(pgqueue("install", "--extension", "--dsn", owner.dsn(dbs["extension"])))
    proc = owner.psql(dbs["psql"], "-1", "-f", str(PLAIN_DIR / f"pgqueue--{CURRENT}.sql"))
    assert proc.returncode == 0, proc.stderr
    reference = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(reference)))
    with owner.connect(reference) as conn:
        conn.execute("DELETE FROM pgqueue.queue")
        conn.execute("SELECT setval('pgqueue.queue_id_seq', 1, false)")
        conn.execute("SELECT pgqueue.queue_create('default')")  # at READ COMMITTED
        want = conn.execute("SELECT to_jsonb(q) - 'created_at' FROM pgqueue.queue q").fetchall()
    for how, db in dbs.items():
        with owner.connect(db) as conn:
            assert one(conn, "SHOW transaction_isolation") == isolation
            assert conn.execute("SELECT to_jsonb(q) - 'created_at' FROM pgqueue.queue q").fetchall() == want, how
            counters = conn.execute("SELECT enqueued, delivered, completed FROM pgqueue.queue_counters()").fetchall()
            assert counters == [(0, 0, 0)], how
        with owner.connect(db) as conn, conn.transaction():  # and it works at that level
            conn.execute("SELECT pgqueue.message_create('default', 'x'::bytea)")
        assert len(Queue(owner.dsn(db), "default").dequeue(1)) == 1, how


def test_default_is_the_extension_when_the_server_has_its_files(owner: Owner) -> None:
    db = owner.database()
    out = ok(pgqueue("install", "--dsn", owner.dsn(db)))
    assert "installed" in out and "extension" in out
    with owner.connect(db) as conn:
        assert holds(conn) == (CURRENT, None)
        use_queue(conn)
    out = ok(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)))
    assert "uninstalled" in out and "extension" in out
    with owner.connect(db) as conn:
        assert holds(conn) == (None, None)
        assert one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0


# --------------------------------------------------------------------------------------------
# Upgrade of a plain install
# --------------------------------------------------------------------------------------------

STATES = """
SELECT m.id, convert_from(m.content, 'UTF8'), m.attempts, m.dequeue_at, m.locked_until, m.state
  FROM pgqueue.message m ORDER BY m.id"""


def test_upgrade_a_plain_install_of_release_0_1_with_messages_in_flight(owner: Owner) -> None:
    db = owner.database()
    install_plain_release(owner, db, "0.1")
    with owner.connect(db) as conn:
        assert holds(conn) == (None, "0.1")
        conn.execute("SELECT pgqueue.queue_create('jobs', p_lock_ms => 600000, p_max_attempts => 3)")
        conn.execute("SELECT pgqueue.message_create_batch('jobs', ARRAY['l1','l2','r1','r2','r3']::bytea[])")
        conn.execute("SELECT pgqueue.message_create('jobs', 'later', pgqueue.to_epoch(now() + interval '1 day'))")
        leased = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 2)").fetchall()
        assert len(leased) == 2
        before = conn.execute(STATES).fetchall()

    out = ok(pgqueue("install", "--dsn", owner.dsn(db)))
    steps = [line for line in out.splitlines() if line.startswith("applied")]
    assert len(steps) == 3, out  # 0.1--0.2, 0.2--0.3, 0.3--0.4
    assert f"upgraded from 0.1 to {CURRENT}" in out

    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)
        assert one(conn, "SELECT upgraded_at IS NOT NULL FROM pgqueue.install")
        assert conn.execute(STATES).fetchall() == before
        for msg_id, attempts in leased:  # the leases taken before the upgrade still hold
            assert one(conn, "SELECT pgqueue.message_complete(%s, %s)", (msg_id, attempts)) is True
        ready = conn.execute("SELECT id, attempts, convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('jobs', 10)").fetchall()
        assert [r[2] for r in ready] == ["r1", "r2", "r3"]
        for msg_id, attempts, _ in ready:
            assert one(conn, "SELECT pgqueue.message_complete(%s, %s)", (msg_id, attempts)) is True
        assert one(conn, "SELECT scheduled FROM pgqueue.queue_stats('jobs')") == 1
    # an upgraded plain install has the same catalog as a fresh one
    fresh = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(fresh)))
    assert catalog(owner.dsn(db)) == catalog(owner.dsn(fresh))
    assert "already installed" in ok(pgqueue("install", "--dsn", owner.dsn(db)))


def test_a_plain_script_run_by_psql_without_its_options_is_one_statement(owner: Owner, pg_server: Server) -> None:
    """Every plain script is one DO block, so psql without -1 and without ON_ERROR_STOP runs it
    whole or not at all. Before, the refusal to run outside one transaction (PQ008) did not stop
    psql, which ran the rest statement by statement: a step applied in full while the database
    still said it held the version before, and neither pgqueue install nor uninstall could go on
    from there (a review). Also when the role's search_path is already the one the scripts pin."""
    fresh = owner.database()
    # and the session is left as it was (a setting for the whole session would stay on a server
    # connection that a transaction-mode pooler hands to other clients): it can write after it
    proc = owner.psql(fresh, "-f", str(PLAIN_DIR / f"pgqueue--{CURRENT}.sql"),
                      "-c", "CREATE TABLE public.after_the_script ()", "-c", "SHOW search_path",
                      stop_on_error=False)
    assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stderr
    assert "public" in proc.stdout, proc.stdout  # the pin ended with the script's statement
    with owner.connect(fresh) as conn:
        assert holds(conn) == (None, CURRENT)
        assert one(conn, "SELECT to_regclass('public.after_the_script') IS NOT NULL")
        use_queue(conn)
    assert "already installed" in ok(pgqueue("install", "--dsn", owner.dsn(fresh)))

    old = owner.database()
    install_plain_release(owner, old, "0.1")
    admin_execute(pg_server, sql.SQL("ALTER ROLE {} IN DATABASE {} SET search_path = pg_catalog, pg_temp").format(
        sql.Identifier(owner.name), sql.Identifier(old)))
    before = catalog(owner.dsn(old))
    proc = owner.psql(old, "-f", str(PLAIN_DIR / f"pgqueue--0.3--{CURRENT}.sql"), stop_on_error=False)  # a wrong step
    assert "PQ010" in proc.stderr or "this database holds 0.1" in proc.stderr, proc.stderr
    assert catalog(owner.dsn(old)) == before
    proc = owner.psql(old, "-f", str(PLAIN_DIR / "pgqueue--0.1--0.2.sql"), stop_on_error=False)  # the right one
    assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stderr
    with owner.connect(old) as conn:
        assert holds(conn) == (None, "0.2")
    ok(pgqueue("install", "--dsn", owner.dsn(old)))  # and on from there
    with owner.connect(old) as conn:
        assert holds(conn) == (None, CURRENT)


@pytest.mark.parametrize("script", [f"pgqueue--{CURRENT}.sql", "pgqueue--0.1.sql + pgqueue--0.1--0.2.sql"])
def test_a_plain_script_inside_a_callers_transaction_gives_its_search_path_back(owner: Owner, script: str) -> None:
    """A migration tool runs the script inside its own transaction and goes on in it: the
    script's pin of the search_path (and its marker) held for the rest of that transaction, so
    the tool's next unqualified CREATE TABLE went to pg_catalog and failed, and the install with
    it (a review). The caller's settings are given back when the script ends."""
    db = owner.database()
    first, *rest = [PLAIN_DIR / name for name in script.split(" + ")]
    if rest:
        install_plain_release(owner, db, "0.1")
    run = rest[0] if rest else first
    text = run.read_text()
    with owner.connect(db) as conn:
        conn.autocommit = False
        conn.execute("SET LOCAL search_path = public")
        conn.execute(text.encode())  # type: ignore[call-overload]
        assert one(conn, "SHOW search_path") == "public"
        assert one(conn, "SELECT current_setting('pgqueue.plain_script', true)") in (None, "")
        conn.execute("CREATE TABLE migrated_next (x int)")  # unqualified: the caller's path
        assert one(conn, "SELECT 'public.migrated_next'::regclass IS NOT NULL")
        conn.commit()
        assert holds(conn) == (None, CURRENT if not rest else "0.2")


def test_the_sql_inside_a_plain_script_run_statement_by_statement_records_no_version(
        owner: Owner, tmp_path: Any) -> None:
    """The SQL inside a plain script's DO block, copied out and run by psql statement by
    statement (no -1, no ON_ERROR_STOP): its search_path pin does not hold, so the guard refuses
    (PQ008), psql runs on, and the version record refuses too: such a run never leaves a
    database that says it holds a version, and `pgqueue install` refuses it as half-applied."""
    text = (PLAIN_DIR / f"pgqueue--{CURRENT}.sql").read_text()
    body = text.split("EXECUTE $pgqueue_script$\n", 1)[1].rsplit("\n$pgqueue_script$;", 1)[0]
    inner = tmp_path / "inner.sql"
    inner.write_text(body)
    db = owner.database()
    proc = owner.psql(db, "-f", str(inner), "-c", "CREATE TABLE public.after_the_script ()", stop_on_error=False)
    assert "pgqueue installs in one transaction only" in proc.stderr, proc.stderr[-2000:]
    with owner.connect(db) as conn:
        assert holds(conn) == (None, None)
        assert one(conn, "SELECT to_regclass('public.after_the_script') IS NOT NULL")  # the session as it was
    refused(pgqueue("install", "--dsn", owner.dsn(db)), "a half-applied install")


def test_a_plain_script_that_fails_near_its_end_leaves_nothing_without_psql_s_options(
        owner: Owner, pg_server: Server) -> None:
    """A script that fails at its last statements (here an event trigger refuses the version
    record's table) leaves nothing behind, run by psql without -1 or ON_ERROR_STOP: the error
    is the one raised inside, with its SQLSTATE, message and hint, not a context quoting the
    whole script."""
    db = owner.database()
    refuse = ("CREATE FUNCTION public.refuse_install() RETURNS event_trigger LANGUAGE plpgsql AS $$ "
              "BEGIN IF EXISTS (SELECT FROM pg_event_trigger_ddl_commands() "
              "WHERE object_identity = 'pgqueue.install') THEN "
              "RAISE EXCEPTION 'no install table here' USING ERRCODE = 'P0099', HINT = 'a test'; END IF; END $$; "
              "CREATE EVENT TRIGGER refuse_install ON ddl_command_end WHEN TAG IN ('CREATE TABLE') "
              "EXECUTE FUNCTION public.refuse_install()")
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as admin:
        admin.execute(refuse)
    proc = owner.psql(db, "-f", str(PLAIN_DIR / f"pgqueue--{CURRENT}.sql"), stop_on_error=False)
    assert "ERROR:  no install table here" in proc.stderr and "HINT:  a test" in proc.stderr, proc.stderr
    assert len(proc.stderr) < 2000, proc.stderr
    with owner.connect(db) as conn:
        assert one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as admin:
        admin.execute("DROP EVENT TRIGGER refuse_install")
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))


def test_a_statement_timeout_bounds_a_plain_script_as_one_statement(owner: Owner) -> None:
    """A plain script is one statement: a role's statement_timeout, meant for one statement of
    it, bounds all of it. `pgqueue install` and `pgqueue uninstall` set none for their scripts
    (their lock waits have lock_timeout); psql with one set ends in 57014, nothing made, the error a line or two, not
    the whole script quoted in its context (a review: 358,842 bytes)."""
    db = owner.database()
    slow = make_conninfo(owner.dsn(db), options="-c statement_timeout=50")
    ok(pgqueue("install", "--plain", "--dsn", slow))
    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)
    ext = owner.database()  # CREATE EXTENSION runs a script as one statement too
    ok(pgqueue("install", "--extension", "--dsn", make_conninfo(owner.dsn(ext), options="-c statement_timeout=50")))
    with owner.connect(ext) as conn:
        assert holds(conn) == (CURRENT, None)
    # uninstall too: it runs the install scripts to learn pgqueue's objects (rolled back), then
    # drops them in one statement; it failed with 57014 under 50 ms, 37 ms on a quiet machine
    # for the script alone (a review). 20 ms here, which that run alone takes longer than.
    for name in (db, ext):
        ok(pgqueue("uninstall", "--yes", "--dsn", make_conninfo(owner.dsn(name), options="-c statement_timeout=20")))
        with owner.connect(name) as conn:
            assert one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0
    other = owner.database()
    proc = owner.psql(make_conninfo(owner.dsn(other), options="-c statement_timeout=50"),
                      "-f", str(PLAIN_DIR / f"pgqueue--{CURRENT}.sql"), stop_on_error=False)
    assert "canceling statement due to statement timeout" in proc.stderr, proc.stderr
    assert len(proc.stderr) < 2000, proc.stderr[:3000]
    with owner.connect(other) as conn:
        assert one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0


def test_a_step_script_for_another_version_is_refused_with_pq010(owner: Owner) -> None:
    """Each plain step checks first that the database holds the version it upgrades from: a step
    skipped, run twice, or run on an extension install is refused (PQ010) before it changes
    anything, not halfway through on whichever object it met first."""
    def run_step(dbname: str, step: str) -> psycopg.Error:
        with owner.connect(dbname) as conn:
            with pytest.raises(psycopg.Error) as info, conn.transaction():
                conn.execute((PLAIN_DIR / f"pgqueue--{step}.sql").read_bytes())
            return info.value

    db = owner.database()
    install_plain_release(owner, db, "0.1")
    before = catalog(owner.dsn(db))
    err = run_step(db, f"0.3--{CURRENT}")  # 0.2 and 0.3 skipped
    assert err.sqlstate == "PQ010", err
    assert f"pgqueue--0.3--{CURRENT}.sql upgrades pgqueue 0.3, but this database holds 0.1" in str(err)
    assert catalog(owner.dsn(db)) == before
    proc = owner.psql(db, "-1", "-f", str(PLAIN_DIR / "pgqueue--0.1--0.2.sql"))
    assert proc.returncode == 0, proc.stderr
    err = run_step(db, "0.1--0.2")  # twice
    assert err.sqlstate == "PQ010" and "this database holds 0.2" in str(err), err
    with owner.connect(db) as conn:
        assert holds(conn) == (None, "0.2")
    ext = owner.database()
    ok(pgqueue("install", "--extension", "--dsn", owner.dsn(ext)))
    err = run_step(ext, f"0.3--{CURRENT}")
    assert err.sqlstate == "PQ010", err
    assert "ALTER EXTENSION pgqueue UPDATE" in (err.diag.message_hint or ""), err
    err = run_step(owner.database(), f"0.3--{CURRENT}")  # no pgqueue at all: the schema check says so first
    assert err.sqlstate == "PQ008" and "schema pgqueue does not exist" in str(err), err
    assert "install it first" in (err.diag.message_hint or ""), err


# --------------------------------------------------------------------------------------------
# The plain install and the extension have the same catalog
# --------------------------------------------------------------------------------------------

def test_plain_and_extension_installs_have_the_same_catalog(owner: Owner) -> None:
    plain_db, ext_db = owner.database(), owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(plain_db)))
    with owner.connect(ext_db) as conn:
        conn.execute("CREATE EXTENSION pgqueue")
        assert holds(conn) == (CURRENT, None)
    plain, ext = catalog(owner.dsn(plain_db)), catalog(owner.dsn(ext_db))
    assert len(plain["functions"]) > 20 and plain["indexes"] and plain["constraints"]
    for kind in QUERIES:
        only_plain = [r for r in plain[kind] if r not in ext[kind]]
        only_ext = [r for r in ext[kind] if r not in plain[kind]]
        assert not only_plain and not only_ext, (kind, only_plain, only_ext)
    with owner.connect(plain_db) as conn:  # what was left out is the plain install's alone
        assert one(conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace "
                         "AND relname IN ('install', 'install_pkey')") == 2


def test_the_catalog_sees_each_flag_it_compares(owner: Owner) -> None:
    """A change of each flag the catalog renders shows in the kind that renders it (so that a
    comparison above could fail on it), and the extension records its initial privileges."""
    db = owner.database()
    with owner.connect(db) as conn:
        conn.execute("CREATE EXTENSION pgqueue")
        trigger = one(conn, "SELECT tgname FROM pg_trigger WHERE tgrelid = 'pgqueue.message'::regclass "
                            "AND NOT tgisinternal ORDER BY tgname LIMIT 1")
        seq = one(conn, "SELECT c.oid::regclass::text FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid "
                        "JOIN pg_depend d ON d.objid = c.oid AND d.deptype IN ('a', 'i') "
                        "WHERE c.relnamespace = 'pgqueue'::regnamespace ORDER BY 1 LIMIT 1")
    changes = {
        "trigger_flags": f"ALTER TABLE pgqueue.message DISABLE TRIGGER {trigger}",
        "sequences": f"ALTER SEQUENCE {seq} CACHE 7",
        "dependencies": f"ALTER SEQUENCE {seq} OWNED BY NONE",
        "column_flags": "ALTER TABLE pgqueue.message ALTER COLUMN content SET STATISTICS 7",
        "relation_flags": "ALTER TABLE pgqueue.queue ENABLE ROW LEVEL SECURITY",
        "policies": "CREATE POLICY everyone ON pgqueue.queue USING (true)",
        "rules": "CREATE RULE nothing AS ON UPDATE TO pgqueue.message_group_lock DO INSTEAD NOTHING",
        "statistics": "CREATE STATISTICS pgqueue.both ON queue_id, dequeue_at FROM pgqueue.message",
    }
    before = catalog(owner.dsn(db), extension=True)
    assert before["initial_privileges"], "the extension recorded no initial privileges"
    for kind, change in changes.items():
        with owner.connect(db) as conn:
            conn.execute(change)
        after = catalog(owner.dsn(db), extension=True)
        assert after[kind] != before[kind], (kind, change)
        before = after


# --------------------------------------------------------------------------------------------
# pg_dump / pg_restore
# --------------------------------------------------------------------------------------------


def test_dump_and_restore_of_a_plain_install_keep_the_queue_and_the_version(owner: Owner, tmp_path: Any) -> None:
    src, dst = owner.database(), owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(src)))
    with owner.connect(src) as conn:
        conn.execute("SELECT pgqueue.queue_create('jobs', p_lock_ms => 600000, p_max_attempts => 1)")
        conn.execute("SELECT pgqueue.message_create_batch('jobs', ARRAY['a','b','c','d']::bytea[])")
        conn.execute("SELECT pgqueue.message_create('jobs', 'later', pgqueue.to_epoch(now() + interval '1 day'))")
        leased = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1)").fetchall()
        dead_id, dead_token = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1)").fetchone()  # type: ignore[misc]
        assert one(conn, "SELECT pgqueue.message_fail(%s, %s, 'poison')", (dead_id, dead_token)) is True
        before = snapshot(conn)
        record = conn.execute("SELECT * FROM pgqueue.install").fetchall()
    dump = tmp_path / "plain.dump"
    env = owner.server.libpq_env()
    env["PGUSER"] = owner.name
    proc = subprocess.run([str(pg_bindir() / "pg_dump"), "-Fc", "-f", str(dump), "-d", src],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([str(pg_bindir() / "pg_restore"), "--exit-on-error", "--single-transaction",
                           "-d", dst, str(dump)], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr

    with owner.connect(dst) as conn:
        assert snapshot(conn) == before
        assert conn.execute("SELECT * FROM pgqueue.install").fetchall() == record
        assert one(conn, "SELECT pgqueue.message_complete(%s, %s)", leased[0]) is True
        got = [r[0] for r in conn.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('jobs', 10, 0)")]
        assert got == ["c", "d"]
        assert one(conn, "SELECT count(*) FROM pgqueue.dead_letters WHERE id = %s", (dead_id,)) == 1
        new_id = one(conn, "SELECT pgqueue.message_create('jobs', 'after')")
        assert new_id > max(row[0] for row in before["pgqueue.message"])
    assert "already installed" in ok(pgqueue("install", "--dsn", owner.dsn(dst)))
    assert catalog(owner.dsn(dst)) == catalog(owner.dsn(src))


# --------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------


def test_refuses_a_downgrade(owner: Owner) -> None:
    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    with owner.connect(db) as conn:
        conn.execute("UPDATE pgqueue.install SET version = '99.0'")
    refused(pgqueue("install", "--dsn", owner.dsn(db)), "99.0", "newer", "downgrade")
    with owner.connect(db) as conn:
        assert holds(conn) == (None, "99.0")


def test_never_both_installs_in_one_database(owner: Owner) -> None:
    ext_db, plain_db = owner.database(), owner.database()
    ok(pgqueue("install", "--extension", "--dsn", owner.dsn(ext_db)))
    refused(pgqueue("install", "--plain", "--dsn", owner.dsn(ext_db)), "holds the pgqueue extension", CURRENT)
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(plain_db)))
    refused(pgqueue("install", "--extension", "--dsn", owner.dsn(plain_db)), "holds a plain install", CURRENT)
    with owner.connect(ext_db) as conn:
        assert holds(conn) == (CURRENT, None)
    with owner.connect(plain_db) as conn:
        assert holds(conn) == (None, CURRENT)
        assert one(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'pgqueue'") == 0
        # CREATE EXTENSION by hand says what is there (it named every object as someone else's)
        with pytest.raises(psycopg.Error) as info:
            conn.execute("CREATE EXTENSION pgqueue")
        assert info.value.sqlstate == "PQ008"
        assert str(info.value).startswith("schema pgqueue holds a plain install of pgqueue"), info.value
        assert holds(conn) == (None, CURRENT)
    # psql -f of the plain script into the extension's database fails too, changing nothing
    proc = owner.psql(ext_db, "-1", "-f", str(PLAIN_DIR / f"pgqueue--{CURRENT}.sql"))
    assert proc.returncode != 0 and "already exists" in proc.stderr
    with owner.connect(ext_db) as conn:
        assert holds(conn) == (CURRENT, None)


def test_an_extension_upgrade_by_a_role_that_is_not_its_owner_names_the_owner(owner: Owner,
                                                                              pg_server: Server) -> None:
    """An older extension that a superuser created, upgraded by the database's owner: the refusal
    was ALTER EXTENSION's "must be owner of extension pgqueue" with "connect as the role that is
    to own pgqueue, with CREATE on the database (its owner, say)", which is the role that was
    refused. It names the extension's owner, and changes nothing."""
    db = owner.database()
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgqueue VERSION '0.3'")
        superuser = one(conn, "SELECT current_user")
    line = refused(pgqueue("install", "--dsn", owner.dsn(db)), f"owned by role {superuser}", f"connect as {superuser}")
    assert "database (its owner, say)" not in line
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
        assert holds(conn) == ("0.3", None)


def test_an_uninstall_by_a_role_that_is_not_the_extensions_owner_names_the_owner(owner: Owner,
                                                                                  pg_server: Server) -> None:
    """The extension a superuser created, uninstalled by the database's owner: DROP EXTENSION's
    "must be owner of extension pgqueue" (with a traceback-free exit, but no owner named) became
    one line naming the owner; nothing is dropped."""
    db = owner.database()
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgqueue")
        superuser = one(conn, "SELECT current_user")
    refused(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)), f"owned by role {superuser}",
            f"connect as {superuser}", "only its owner uninstalls it")
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
        assert holds(conn) == (CURRENT, None)


def test_install_as_an_application_role_on_an_up_to_date_plain_install_says_already_installed(
        owner: Owner, other_role: str) -> None:
    """An idempotent deploy step that runs `pgqueue install` as the application's role: on a
    plain install at the client's version that the role may read, "already installed", exit 0,
    as on an extension (it was refused, exit 1, with advice to drop the schema: a review). Not
    when the role may not read the record, nor on an older version, nor when reading it would
    run the owner's code (row security)."""
    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    dsn = owner.server.dsn(db, user=other_role)
    refused(pgqueue("install", "--dsn", dsn), f"owned by role {owner.name}")  # may not read it
    with owner.connect(db) as conn:
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgqueue TO {0}; GRANT SELECT ON pgqueue.install TO {0}").format(
            sql.Identifier(other_role)))
    out = ok(pgqueue("install", "--dsn", dsn))
    assert f"pgqueue {CURRENT} (plain SQL, owned by role {owner.name}) is already installed" in out, out
    # (uninstall is its owner's only: a bare "permission denied for table install" otherwise)
    refused(pgqueue("uninstall", "--yes", "--dsn", dsn), f"owned by role {owner.name}, not by {other_role}",
            f"connect as {owner.name} to uninstall it")
    refused(pgqueue("install", "--extension", "--dsn", dsn), f"owned by role {owner.name}")  # not what it holds
    with owner.connect(db) as conn:
        conn.execute("ALTER TABLE pgqueue.install ENABLE ROW LEVEL SECURITY")
    refused(pgqueue("install", "--dsn", dsn), f"owned by role {owner.name}")
    with owner.connect(db) as conn:
        conn.execute("ALTER TABLE pgqueue.install DISABLE ROW LEVEL SECURITY")
        conn.execute("UPDATE pgqueue.install SET version = '0.3'")
    line = refused(pgqueue("install", "--dsn", dsn), f"owned by role {owner.name}", "it holds pgqueue 0.3")
    assert "drop" not in line, line


def test_refuses_a_schema_pgqueue_made_by_another_role(owner: Owner, other_role: str, pg_server: Server) -> None:
    db = owner.database()
    admin_execute(pg_server, sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(db), sql.Identifier(other_role)))
    with psycopg.connect(pg_server.dsn(db, user=other_role), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA pgqueue")
        conn.execute("CREATE FUNCTION pgqueue.now_ms() RETURNS bigint LANGUAGE sql AS 'SELECT 0::bigint'")
    for mode in ("--plain", "--extension"):
        refused(pgqueue("install", mode, "--dsn", owner.dsn(db)), f"owned by role {other_role}", "schema pgqueue")
    proc = owner.psql(db, "-1", "-f", str(PLAIN_DIR / f"pgqueue--{CURRENT}.sql"))
    assert proc.returncode != 0 and "already exists" in proc.stderr
    refused(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)), "neither", "pgqueue.install")
    with owner.connect(db) as conn:  # nothing changed (the owner may not even look into the schema)
        assert one(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'pgqueue'") == 0
        assert conn.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                            "WHERE n.nspname = 'pgqueue'").fetchall() == []
        assert one(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgqueue'::regnamespace") == 1


def test_upgrade_refuses_a_schema_with_foreign_objects_or_open_to_others(owner: Owner, other_role: str) -> None:
    """The schema check at the top of every step script (PQ008) holds for plain upgrades: the
    step is rolled back and the recorded version stays."""
    db = owner.database()
    install_plain_release(owner, db, "0.1")
    with owner.connect(db) as conn:
        conn.execute(sql.SQL("GRANT CREATE ON SCHEMA pgqueue TO {}").format(sql.Identifier(other_role)))
    refused(pgqueue("install", "--dsn", owner.dsn(db)), "roles other than its owner may create objects")
    with owner.connect(db) as conn:
        assert holds(conn) == (None, "0.1")
    with psycopg.connect(owner.server.dsn(db, user=other_role), autocommit=True) as conn:
        conn.execute("CREATE FUNCTION pgqueue.planted() RETURNS int LANGUAGE sql AS 'SELECT 1'")
    with owner.connect(db) as conn:
        conn.execute(sql.SQL("REVOKE CREATE ON SCHEMA pgqueue FROM {}").format(sql.Identifier(other_role)))
    refused(pgqueue("install", "--dsn", owner.dsn(db)), "holds objects pgqueue did not create", "planted")
    with owner.connect(db) as conn:
        assert holds(conn) == (None, "0.1")
        assert one(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgqueue'::regnamespace "
                         "AND proname = 'queue_next_due'") == 1
        sqlstate = None
        try:
            conn.execute((PLAIN_DIR / "pgqueue--0.1--0.2.sql").read_bytes())
        except psycopg.Error as exc:
            sqlstate = exc.sqlstate
        assert sqlstate == "PQ008"


@pytest.mark.parametrize("damage", ["schema only", "empty record", "unknown version"])
def test_refuses_a_half_applied_install(owner: Owner, damage: str) -> None:
    db = owner.database()
    with owner.connect(db) as conn:
        if damage == "schema only":
            conn.execute("CREATE SCHEMA pgqueue")
            conn.execute("CREATE TABLE pgqueue.queue (id int)")
            words = ["half-applied", "neither", "pgqueue.install"]
        else:
            install = ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
            assert "installed" in install
            if damage == "empty record":
                conn.execute("DELETE FROM pgqueue.install")
                words = ["half-applied", "no version"]
            else:
                conn.execute("UPDATE pgqueue.install SET version = '0.0'")
                words = ["no upgrade path", "0.0", CURRENT]
        before = catalog(owner.dsn(db))
    for mode in ((), ("--plain",)):
        refused(pgqueue("install", *mode, "--dsn", owner.dsn(db)), *words)
    assert catalog(owner.dsn(db)) == before


def test_uninstall_refuses_while_objects_outside_depend_on_pgqueue(owner: Owner) -> None:
    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    with owner.connect(db) as conn:
        conn.execute("CREATE VIEW public.backlog AS SELECT count(*) AS n FROM pgqueue.message")
    refused(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)), "depend", "backlog")
    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)
        conn.execute("DROP VIEW public.backlog")
    ok(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)))


# What a user may make in schema pgqueue of their own, with nothing of pgqueue's under it; and
# what `pgqueue uninstall` must leave of it (every object of the schema, described).
USER_OBJECTS = """
CREATE TYPE pgqueue.mood AS ENUM ('fine', 'grim');
CREATE TABLE pgqueue.notes (id bigserial PRIMARY KEY, body text NOT NULL, mood pgqueue.mood);
INSERT INTO pgqueue.notes (body, mood) VALUES ('keep me', 'fine');
CREATE VIEW pgqueue.recent_notes AS SELECT n.id, n.body FROM pgqueue.notes n;
CREATE FUNCTION pgqueue.note_count() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM pgqueue.notes; END;
"""
USER_OBJECTS_LEFT = ["function pgqueue.note_count()", "index pgqueue.notes_pkey", "sequence pgqueue.notes_id_seq",
                     "table pgqueue.notes", "type pgqueue.mood", "view pgqueue.recent_notes"]


def schema_contents(conn: Conn) -> list[str]:
    """Every relation, index, sequence, function and stand-alone type in schema pgqueue, described."""
    return [r[0] for r in conn.execute("""
        SELECT pg_describe_object(o.classid, o.objid, 0) AS what
          FROM (SELECT 'pg_class'::regclass AS classid, c.oid AS objid FROM pg_class c
                 WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind <> 'c'
                UNION ALL
                SELECT 'pg_proc'::regclass, p.oid FROM pg_proc p WHERE p.pronamespace = 'pgqueue'::regnamespace
                UNION ALL
                SELECT 'pg_type'::regclass, t.oid FROM pg_type t
                 WHERE t.typnamespace = 'pgqueue'::regnamespace AND t.typrelid = 0 AND t.typcategory <> 'A') o
         ORDER BY what""")]


def assert_only_user_objects_left(conn: Conn) -> None:
    assert holds(conn) == (None, None)
    assert schema_contents(conn) == USER_OBJECTS_LEFT
    assert conn.execute("SELECT body, mood::text FROM pgqueue.notes").fetchall() == [("keep me", "fine")]
    assert one(conn, "SELECT pgqueue.note_count()") == 1
    assert one(conn, "SELECT body FROM pgqueue.recent_notes") == "keep me"


def test_uninstall_keeps_what_the_user_made_in_schema_pgqueue(owner: Owner) -> None:
    """A plain uninstall drops pgqueue's objects only, as DROP EXTENSION does: a table, view,
    function or type of the user's in schema pgqueue stays, and so does the schema, named in
    the summary (it was `DROP SCHEMA pgqueue CASCADE`, which dropped them without a word)."""
    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    with owner.connect(db) as conn:
        use_queue(conn)
        conn.execute(USER_OBJECTS)
        # attached to pgqueue's tables, they cannot outlive them (nor do they with DROP EXTENSION)
        conn.execute("CREATE INDEX my_message_idx ON pgqueue.message (created_at)")
        conn.execute("CREATE FUNCTION public.audit() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'")
        conn.execute("CREATE TRIGGER my_audit BEFORE INSERT ON pgqueue.message FOR EACH ROW EXECUTE FUNCTION public.audit()")
    out = ok(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)))
    assert out.count("\n") == 1 and "uninstalled" in out and "plain" in out and "schema pgqueue kept" in out, out
    for what in ("table pgqueue.notes", "view pgqueue.recent_notes", "function pgqueue.note_count()", "type pgqueue.mood"):
        assert what in out, (what, out)
    with owner.connect(db) as conn:
        assert_only_user_objects_left(conn)
        assert one(conn, "SELECT count(*) FROM pg_proc WHERE proname = 'audit'") == 1
    # the schema left is not pgqueue's: both commands say so and touch nothing
    refused(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)), "neither", "pgqueue.install", "SET SCHEMA")
    refused(pgqueue("install", "--dsn", owner.dsn(db)), "neither", "pgqueue.install", "SET SCHEMA")
    with owner.connect(db) as conn:
        assert_only_user_objects_left(conn)
        conn.execute("DROP SCHEMA pgqueue CASCADE")
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))


@pytest.mark.parametrize(("ddl", "named", "undo"), [
    ("CREATE VIEW pgqueue.backlog AS SELECT count(*) AS n FROM pgqueue.message", "view pgqueue.backlog",
     "DROP VIEW pgqueue.backlog"),
    ("CREATE FUNCTION pgqueue.depth() RETURNS bigint LANGUAGE sql BEGIN ATOMIC SELECT count(*) FROM pgqueue.message; END",
     "function pgqueue.depth()", "DROP FUNCTION pgqueue.depth()"),
    ("CREATE TABLE pgqueue.owners (queue_id integer REFERENCES pgqueue.queue (id))",
     "constraint owners_queue_id_fkey on table pgqueue.owners", "DROP TABLE pgqueue.owners"),
    ("CREATE TABLE pgqueue.snapshots (q pgqueue.queue)", "column q of table pgqueue.snapshots",
     "DROP TABLE pgqueue.snapshots"),
    ("CREATE SEQUENCE pgqueue.tickets OWNED BY pgqueue.message.id", "sequence pgqueue.tickets",
     "DROP SEQUENCE pgqueue.tickets"),
], ids=["view", "function", "foreign key", "column", "owned sequence"])
def test_uninstall_refuses_while_the_users_objects_in_schema_pgqueue_depend_on_pgqueue(
        owner: Owner, ddl: str, named: str, undo: str) -> None:
    """Dropping pgqueue's objects would drop these with them: refused, naming them, nothing dropped."""
    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    with owner.connect(db) as conn:
        conn.execute(ddl)
        before = schema_contents(conn)
    line = refused(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)), "depend", named, "nothing was dropped")
    assert "cascade" not in line.lower()
    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)
        assert schema_contents(conn) == before
        conn.execute(undo)
    ok(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)))
    with owner.connect(db) as conn:
        assert one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0


def make_busy(conn: Conn) -> None:
    """Use what pgqueue keeps state for at run time: the stripes' sequences of capped,
    rate-limited and grouped queues, idempotency keys, schedules, Spark consumers, dead letters,
    a queue altered and one dropped."""
    conn.execute("SELECT pgqueue.queue_create('jobs', p_if_not_exists => true)")
    conn.execute("SELECT pgqueue.queue_create('capped', p_max_size => 10, p_max_attempts => 1)")
    conn.execute("SELECT pgqueue.queue_create('limited', p_rate_limit => 5)")
    conn.execute("SELECT pgqueue.queue_create('grouped', p_group_concurrency => 1, p_key_window_ms => 60000)")
    conn.execute("SELECT pgqueue.queue_create('gone')")
    conn.execute("SELECT pgqueue.queue_alter('capped', p_max_size => 20)")
    conn.execute("SELECT pgqueue.queue_drop('gone')")
    conn.execute("SELECT pgqueue.message_create_batch('capped', ARRAY['a','b']::bytea[])")
    conn.execute("SELECT pgqueue.message_create_batch('limited', ARRAY['a','b']::bytea[])")
    conn.execute("SELECT pgqueue.message_create('grouped', 'g', p_group => 'g1', p_key => 'k1')")
    conn.execute("SELECT * FROM pgqueue.message_dequeue('limited', 10)")
    msg_id, attempts = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('capped', 1)").fetchone()  # type: ignore[misc]
    assert one(conn, "SELECT pgqueue.message_fail(%s, %s, 'poison')", (msg_id, attempts)) is True
    conn.execute("SELECT pgqueue.schedule_create('tick', 'jobs', 'x', p_every_ms => 60000)")
    conn.execute("SELECT pgqueue.schedule_run()")
    conn.execute("SELECT pgqueue.spark_consumer_open('jobs', 'reader')")
    assert one(conn, "SELECT count(*) FROM pgqueue.dead_letters") == 1


@pytest.mark.parametrize("how", ["fresh, busy", "0.1", "0.3 by psql", "upgraded from 0.1, busy"])
def test_uninstall_of_every_version_leaves_exactly_the_users_objects(owner: Owner, how: str) -> None:
    """pgqueue's objects are the recorded version's: those of its full script, or of 0.1's and
    the steps after it; an install upgraded from 0.1 has the same as a fresh one. None of them
    is left, nor anything pgqueue made at run time; the user's table is."""
    db = owner.database()
    if how.startswith("fresh"):
        ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
        version = CURRENT
    else:
        install_plain_release(owner, db, "0.1")
        version = "0.1"
        if how.startswith("0.3"):
            for step in ("0.1--0.2", "0.2--0.3"):
                proc = owner.psql(db, "-1", "-f", str(PLAIN_DIR / f"pgqueue--{step}.sql"))
                assert proc.returncode == 0, proc.stderr
            version = "0.3"
        elif how.startswith("upgraded"):
            with owner.connect(db) as conn:
                use_queue(conn)
                conn.execute(USER_OBJECTS)  # there before the upgrade: the steps keep it too
            ok(pgqueue("install", "--dsn", owner.dsn(db)))
            version = CURRENT
    with owner.connect(db) as conn:
        assert holds(conn) == (None, version)
        if how.endswith("busy"):
            make_busy(conn)
        if not how.startswith("upgraded"):
            conn.execute(USER_OBJECTS)
    out = ok(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)))
    assert f"pgqueue {version} (plain SQL) uninstalled" in out and "kept" in out and "pgqueue.notes" in out, out
    with owner.connect(db) as conn:
        assert_only_user_objects_left(conn)


@pytest.mark.parametrize("damage", ["newer", "empty record", "unknown version", "not a version"])
def test_uninstall_of_a_damaged_or_newer_record(owner: Owner, damage: str) -> None:
    """A version newer than the client: it cannot know that version's objects, so it refuses.
    No version, or one no script builds (the refusals of `pgqueue install` point here): the
    objects of every version the client knows are pgqueue's, and nothing else."""
    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    with owner.connect(db) as conn:
        conn.execute(USER_OBJECTS)
        if damage == "newer":
            conn.execute("UPDATE pgqueue.install SET version = '99.0'")
        elif damage == "empty record":
            conn.execute("DELETE FROM pgqueue.install")
        else:  # ("dev": a ValueError from the version's numbers, had the uninstall read them)
            conn.execute("UPDATE pgqueue.install SET version = %s", ["0.0" if damage == "unknown version" else "dev"])
        before = schema_contents(conn)
    if damage == "newer":
        refused(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)), "99.0", "newer", "pip install ./python in a clone")
        with owner.connect(db) as conn:
            assert holds(conn) == (None, "99.0")
            assert schema_contents(conn) == before
        return
    out = ok(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)))
    assert "uninstalled" in out and "pgqueue.notes" in out, out
    with owner.connect(db) as conn:
        assert_only_user_objects_left(conn)


def test_uninstall_without_create_on_the_database_is_refused_in_one_line(owner: Owner, pg_server: Server) -> None:
    """Learning pgqueue's objects runs the install script (rolled back), which needs CREATE on
    the database as the install did: without it, a clear refusal that drops nothing."""
    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    admin_execute(pg_server, sql.SQL("REVOKE CREATE ON DATABASE {} FROM {}").format(
        sql.Identifier(db), sql.Identifier(owner.name)))
    with owner.connect(db) as conn:
        before = schema_contents(conn)
    refused(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)), "CREATE on the database", "nothing was dropped")
    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)
        assert schema_contents(conn) == before


def test_uninstall_without_the_packaged_scripts_drops_nothing(owner: Owner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without its scripts the client cannot tell pgqueue's objects: it must not report an
    uninstall that dropped nothing (every object taken for someone else's) or guess."""
    from pgqueue import installer

    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    monkeypatch.setattr(installer, "_scripts", set)
    with owner.connect(db) as conn:
        before = schema_contents(conn)
        with pytest.raises(installer.InstallError, match="does not contain the plain SQL scripts.*make"):
            installer.uninstall(conn, report=lambda line: None)
        assert holds(conn) == (None, CURRENT)
        assert schema_contents(conn) == before


def test_uninstall_of_the_extension_names_what_depends_on_it(owner: Owner) -> None:
    """DROP EXTENSION's refusal named nothing and hinted at CASCADE, which drops them silently;
    what the user made in the schema stays, named in the summary, as for a plain install."""
    db = owner.database()
    ok(pgqueue("install", "--extension", "--dsn", owner.dsn(db)))
    with owner.connect(db) as conn:
        conn.execute("CREATE VIEW public.backlog AS SELECT count(*) AS n FROM pgqueue.message")
    line = refused(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)), "depend", "view backlog", "nothing was dropped")
    assert "cascade" not in line.lower()
    with owner.connect(db) as conn:
        assert holds(conn) == (CURRENT, None)
        conn.execute("DROP VIEW public.backlog")
        conn.execute(USER_OBJECTS)
    out = ok(pgqueue("uninstall", "--yes", "--dsn", owner.dsn(db)))
    assert "uninstalled" in out and "extension" in out and "schema pgqueue kept" in out, out
    for what in ("table pgqueue.notes", "view pgqueue.recent_notes", "function pgqueue.note_count()", "type pgqueue.mood"):
        assert what in out, (what, out)
    with owner.connect(db) as conn:
        assert_only_user_objects_left(conn)


def test_the_packaged_scripts_are_the_ones_pgqueue_install_reads() -> None:
    from importlib import resources

    from pgqueue.installer import plain_script, plain_steps

    folder = resources.files("pgqueue").joinpath("sql")
    names = sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))
    assert f"pgqueue--{CURRENT}.sql" in names and "pgqueue--0.1.sql" in names
    assert plain_script() == (PLAIN_DIR / f"pgqueue--{CURRENT}.sql").read_text()
    assert [f"{a}--{b}" for a, b in plain_steps("0.1")] == ["0.1--0.2", "0.2--0.3", f"0.3--{CURRENT}"]
    assert plain_steps(CURRENT) == []



# --------------------------------------------------------------------------------------------
# Two installs at once; the GRANT recipes after an upgrade
# --------------------------------------------------------------------------------------------


def _while_blocked(owner: Owner, db: str, call: Callable[[psycopg.Connection[Any]], object],
                   then: Callable[[], None], join: float = 60) -> object:
    """Run ``call`` on a new connection of the owner's, on a thread; once its session waits for a
    lock (or the call has ended), run ``then`` (which lets it go on), and return what the call
    returned or raised."""
    outcome: list[object] = []
    with owner.connect(db) as second:
        pid = second.info.backend_pid

        def run() -> None:
            try:
                outcome.append(call(second))
            except Exception as exc:  # noqa: BLE001 - the test reports it
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        with owner.connect(db) as watch:
            for _ in range(600):
                if one(watch, "SELECT wait_event_type IS NOT DISTINCT FROM 'Lock' FROM pg_stat_activity "
                              "WHERE pid = %s", (pid,)) or not thread.is_alive():
                    break
                thread.join(0.05)
        then()
        thread.join(join)
    assert len(outcome) == 1, outcome
    return outcome[0]


@pytest.mark.parametrize("mode", ["plain", "extension"])
def test_two_installs_at_once_the_second_says_already_installed(owner: Owner, mode: str) -> None:
    """Two `pgqueue install` runs on a database without pgqueue (two deploys starting at once):
    both see no schema; the one whose CREATE SCHEMA (or CREATE EXTENSION) commits second got the
    catalog's 23505 (duplicate key value violates unique constraint "pg_namespace_nspname_index").
    It must look again and say that pgqueue is already installed."""

    from pgqueue import installer

    db = owner.database()
    first = owner.connect(db)
    first.autocommit = False
    if mode == "plain":
        first.execute(installer.plain_script().encode())
    else:
        first.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(CURRENT)))

    def commit() -> None:  # (the second waits for the first's uncommitted catalog row)
        first.commit()
        first.close()

    outcome = _while_blocked(owner, db, lambda second: installer.install(second, mode, report=lambda _: None),  # type: ignore[arg-type]
                             commit)
    assert isinstance(outcome, str), outcome
    assert "already installed" in outcome and mode.replace("plain", "plain SQL") in outcome, outcome
    with owner.connect(db) as conn:
        assert holds(conn) == ((CURRENT, None) if mode == "extension" else (None, CURRENT))


@pytest.mark.parametrize("first_to", ["0.3", CURRENT])
def test_two_upgrades_at_once_each_says_what_it_did(owner: Owner, first_to: str) -> None:
    """Two `pgqueue install` runs upgrading one plain install of 0.1: the second waits for the
    first's lock on pgqueue.install, then applies only the steps left. It said "upgraded from
    0.1" whatever it applied, and told to run the grant recipes again after applying nothing (a
    review)."""

    from pgqueue import installer

    db = owner.database()
    install_plain_release(owner, db, "0.1")
    first = owner.connect(db)
    first.autocommit = False
    first.execute("LOCK TABLE pgqueue.install IN SHARE ROW EXCLUSIVE MODE")  # as an upgrade step begins
    lines: list[str] = []

    def upgrade() -> None:  # (the second has read 0.1 and waits)
        for step in installer.plain_steps("0.1", first_to):
            first.execute((PLAIN_DIR / f"pgqueue--{step[0]}--{step[1]}.sql").read_bytes())
        first.commit()
        first.close()

    summary = _while_blocked(owner, db, lambda second: installer.install(second, "plain", report=lines.append),
                             upgrade, join=120)
    assert isinstance(summary, str), summary
    if first_to == CURRENT:
        assert summary.startswith(f"pgqueue {CURRENT} (plain SQL) is already installed"), summary
        assert "another pgqueue install upgraded it from 0.1 meanwhile" in summary, summary
        assert not any("GRANT" in line for line in lines), lines
    else:
        assert f"upgraded from 0.3 to {CURRENT}" in summary, summary
        assert "another pgqueue install took it from 0.1 to 0.3" in summary, summary
        assert any("GRANT" in line for line in lines), lines
    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)


@contextlib.contextmanager
def _recipe_roles(owner: Owner, db: str, kinds: tuple[str, ...]) -> Iterator[dict[str, str]]:
    """Roles of the given kinds, granted to the owner, with docs/grants.sql run for them by the
    owner in db; the owner's databases and the roles are dropped afterwards."""
    roles = {kind: _make_role(owner.server, kind) for kind in kinds}
    try:
        admin_execute(owner.server, sql.SQL("GRANT {} TO {}").format(
            sql.SQL(", ").join(map(sql.Identifier, roles.values())), sql.Identifier(owner.name)))
        proc = owner.psql(db, *itertools.chain.from_iterable(("-v", f"{k}={v}") for k, v in roles.items()),
                          "-f", str(REPO / "docs" / "grants.sql"))
        assert proc.returncode == 0, proc.stderr
        yield roles
    finally:
        for db_name in owner.databases:
            drop_database(owner.server, db_name)
        owner.databases.clear()
        for role in roles.values():
            admin_execute(owner.server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_an_upgrade_says_to_run_the_grant_recipes_again_and_they_work_on_a_plain_install(owner: Owner) -> None:
    """An upgrade may add tables, sequences and functions, which the roles made with
    docs/grants.sql have no rights on: every producer, consumer and admin call failed with 42501
    after `pgqueue install` upgraded a plain install, and nothing said so. The upgrade says to run
    the recipes again; run by the plain install's owner (no superuser), they work."""
    db = owner.database()
    install_plain_release(owner, db, "0.1")
    out = ok(pgqueue("install", "--dsn", owner.dsn(db)))
    assert f"upgraded from 0.1 to {CURRENT}" in out
    assert "docs/grants.sql" in out, out
    assert "docs/grants.sql" not in ok(pgqueue("install", "--dsn", owner.dsn(db)))  # nothing upgraded, nothing to say
    with _recipe_roles(owner, db, ("producer", "consumer", "admin")) as roles, owner.connect(db) as conn:
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(roles["admin"])))
        conn.execute("SELECT pgqueue.queue_create('jobs')")
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(roles["producer"])))
        msg_id = one(conn, "SELECT pgqueue.message_create('jobs', 'x')")
        conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(roles["consumer"])))
        assert one(conn, "SELECT id FROM pgqueue.message_dequeue('jobs', 1)") == msg_id


@pytest.mark.parametrize("start", ["0.1", "0.3"])
def test_upgrade_a_busy_plain_install_without_a_deadlock(owner: Owner, start: str) -> None:
    """`pgqueue install` upgrades a plain install while producers and consumers keep calling it:
    no step fails on a deadlock with them, and none of their calls is failed as its victim (each
    step altered pgqueue.queue_size, pgqueue.message and pgqueue.queue in turn while a worker held
    one and waited for another: the step's transaction or a worker's call got 40P01)."""
    db = owner.database()
    install_plain_release(owner, db, "0.1")
    for a, b in [("0.1", "0.2"), ("0.2", "0.3")][:["0.1", "0.2", "0.3"].index(start)]:
        proc = owner.psql(db, "-1", "-f", str(PLAIN_DIR / f"pgqueue--{a}--{b}.sql"))
        assert proc.returncode == 0, proc.stderr
    with owner.connect(db) as conn:
        assert holds(conn) == (None, start)
        conn.execute("SELECT pgqueue.queue_create('busy', p_max_size => 1000, p_lock_ms => 600000)")
    with BusyQueue(owner.dsn(db)) as busy:
        # the premise: they are at work when the upgrade starts (a fixed sleep could upgrade an
        # idle database on a loaded machine), and they go on after it
        assert busy.worked_since(), (busy.done, busy.died)
        with owner.connect(db) as conn:
            install(conn, "plain", report=lambda _: None)
            assert holds(conn) == (None, CURRENT)
        went_on = busy.worked_since(busy.done.copy())
    assert [k for k in busy.errors if k[0] == "40P01"] == [], busy.errors
    assert not busy.died, busy.died
    assert went_on, "the workers go on after the upgrade"


@pytest.mark.parametrize("isolation", ["repeatable read", "serializable"])
def test_a_plain_upgrade_under_a_stricter_default_isolation_reads_after_its_locks(
        owner: Owner, isolation: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step of a plain upgrade ran at the session's default isolation: under REPEATABLE
    READ its snapshot came from the step's first query, before the table locks were waited for,
    and the 0.3 -> 0.4 step's DELETE of pgqueue.queue_size failed with 40001 when a producer of
    a capped queue committed meanwhile (a review). It runs at READ COMMITTED now, as the
    extension's upgrade does."""
    from pgqueue import installer

    db = owner.database()
    install_plain_release(owner, db, "0.1")
    for a, b in [("0.1", "0.2"), ("0.2", "0.3")]:
        proc = owner.psql(db, "-1", "-f", str(PLAIN_DIR / f"pgqueue--{a}--{b}.sql"))
        assert proc.returncode == 0, proc.stderr
    stricter = "-c default_transaction_isolation=" + isolation.replace(" ", "\\ ")
    with owner.connect(db) as producer, psycopg.connect(
            owner.server.dsn(db, user=owner.name, options=stricter), autocommit=True) as conn:
        producer.execute("SELECT pgqueue.queue_create('capped', p_max_size => 1000)")
        producer.execute("SELECT pgqueue.message_create('capped', 'before')")
        original = installer._lock_for_upgrade

        def producer_first(c: Any) -> None:
            # a producer of the capped queue commits between the step's first query and its locks
            producer.execute("SELECT pgqueue.message_create('capped', 'meanwhile')")
            original(c)

        monkeypatch.setattr(installer, "_lock_for_upgrade", producer_first)
        assert conn.execute("SHOW default_transaction_isolation").fetchone() == (isolation,)
        install(conn, "plain", report=lambda _: None)
        assert holds(conn) == (None, CURRENT)
    with Queue(owner.dsn(db), "capped") as q:
        assert q.stats().ready == 2


def test_every_recipes_role_starts_the_clients_on_a_plain_install(owner: Owner) -> None:
    """The client, the worker and the command line check the installed version at start
    (pgqueue.check_server), which on a plain install reads pgqueue.install: docs/grants.sql gave
    it to administrators only, and `pgqueue stats`, `pgqueue metrics` and `pgqueue worker` failed
    with 42501 for producers, consumers, monitors and Spark roles."""
    db = owner.database()
    ok(pgqueue("install", "--plain", "--dsn", owner.dsn(db)))
    with _recipe_roles(owner, db, ("producer", "consumer", "admin", "monitor", "spark")) as roles:
        for kind, role in roles.items():
            dsn = owner.server.dsn(db, user=role)
            assert "default" in ok(pgqueue("stats", "--dsn", dsn)), kind
            assert "pgqueue_up 1" in ok(pgqueue("metrics", "--once", "--dsn", dsn)), kind


def test_a_package_without_its_upgrade_scripts_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """A package built without `make` (no scripts), or shipping no step out of a released
    version: the refusal blamed the database's version record and advised dropping every queue
    and message (`pgqueue uninstall --yes`, which then failed for the same missing scripts: a
    review). It names the package; a version no script knows (hand-edited) keeps the old advice."""
    from pgqueue import installer

    for shipped in (set(), {f"pgqueue--{CURRENT}.sql", "pgqueue--0.1.sql"}):
        monkeypatch.setattr(installer, "_scripts", lambda shipped=shipped: shipped)
        with pytest.raises(installer.InstallError) as refused:
            installer.plain_steps("0.1")
        assert "lacks the upgrade scripts from pgqueue 0.1" in str(refused.value), refused.value
        assert "uninstall" not in str(refused.value)
    monkeypatch.undo()
    with pytest.raises(installer.InstallError) as refused:
        installer.plain_steps("0.0")
    assert "no upgrade path from the recorded pgqueue version 0.0" in str(refused.value)


# --------------------------------------------------------------------------------------------
# A review of the installer (session 68)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("first_to", "isolation"), [("0.3", "read committed"), (CURRENT, "repeatable read")])
def test_two_extension_upgrades_at_once_each_says_what_it_did(owner: Owner, pg_server: Server, first_to: str,
                                                             isolation: str) -> None:
    """Two `pgqueue install` runs upgrading one extension of 0.1 (two deploys): the second waits
    for the tables the first holds, then upgrades from where the first left it. Each said
    "pgqueue extension upgraded from 0.1 to 0.4", and told to run the grant recipes again, the
    one that found it upgraded too (under REPEATABLE READ the version read again after the wait
    came from a snapshot taken before it)."""
    from pgqueue import installer

    db = owner.database()
    admin_execute(pg_server, sql.SQL("ALTER DATABASE {} SET default_transaction_isolation = {}").format(
        sql.Identifier(db), sql.Literal(isolation)))
    with owner.connect(db) as conn:
        conn.execute("CREATE EXTENSION pgqueue VERSION '0.1'")
    first = owner.connect(db)
    first.autocommit = False
    first.execute("LOCK TABLE pgqueue.queue IN ACCESS EXCLUSIVE MODE")  # as the first's update begins
    lines: list[str] = []

    def upgrade() -> None:  # (the second has read 0.1 and waits)
        first.execute(sql.SQL("ALTER EXTENSION pgqueue UPDATE TO {}").format(sql.Literal(first_to)))
        first.commit()
        first.close()

    summary = _while_blocked(owner, db, lambda second: installer.install(second, report=lines.append), upgrade,
                             join=120)
    assert isinstance(summary, str), summary
    if first_to == CURRENT:
        assert summary == (f"pgqueue {CURRENT} (extension) is already installed in database {db} "
                           "(another upgrade took it from 0.1 meanwhile)"), summary
        assert not any("GRANT" in line for line in lines), lines
    else:
        assert summary == (f"pgqueue extension upgraded from 0.3 to {CURRENT} in database {db} "
                           "(another upgrade took it from 0.1 to 0.3 meanwhile)"), summary
        assert any("GRANT" in line for line in lines), lines
    with owner.connect(db) as conn:
        assert holds(conn) == (CURRENT, None)


def test_an_install_that_picked_the_extension_finds_a_plain_install_made_meanwhile(owner: Owner) -> None:
    """`pgqueue install` (no mode) on a server with the extension's files picks the extension;
    when a plain install (`psql -f` of the plain script in another deploy step) commits its schema
    first, the CREATE EXTENSION fails on the catalog's unique index and the install looks again.
    It looked again with the mode it had picked, and refused what it would have found installed
    a moment later: "a plain install ... the extension would be a second copy; upgrade it with
    `pgqueue install`", the command just run."""
    from pgqueue import installer

    db = owner.database()
    first = owner.connect(db)
    first.autocommit = False
    first.execute(installer.plain_script().encode())
    with owner.connect(db) as conn:
        assert installer.read_state(conn).available  # the premise: it picks the extension

    def commit() -> None:
        first.commit()
        first.close()

    outcome = _while_blocked(owner, db, lambda second: installer.install(second, report=lambda _: None), commit)
    assert outcome == f"pgqueue {CURRENT} (plain SQL) is already installed in database {db}", outcome
    with owner.connect(db) as conn:
        assert holds(conn) == (None, CURRENT)


def test_an_upgrade_whose_output_cannot_be_written_applies_every_step(owner: Owner) -> None:
    """`pgqueue install` with its output unbuffered (PYTHONUNBUFFERED=1, as many container images
    set it) to a full disk: the first step's line failed to print, which stopped the upgrade
    between its steps (0.1 left at 0.2), exit 1 with nothing said of the step applied. Every step
    is applied; the error line says so, and so does uninstall's."""
    db = owner.database()
    install_plain_release(owner, db, "0.1")
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    env["PYTHONUNBUFFERED"] = "1"
    for argv, done in ((("install",), f"pgqueue (plain SQL) upgraded from 0.1 to {CURRENT} in database {db}"),
                       (("uninstall", "--yes"), f"pgqueue {CURRENT} (plain SQL) uninstalled from database {db}")):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "pgqueue", *argv, "--dsn", owner.dsn(db)], stdout=full,
                                  stderr=subprocess.PIPE, text=True, timeout=300, env=env, check=False)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr == f"pgqueue: error: cannot write the output: No space left on device; done all the same: {done}\n"
        with owner.connect(db) as conn:
            assert holds(conn) == ((None, CURRENT) if argv == ("install",) else (None, None))


@pytest.mark.parametrize("waiting", ["install", "uninstall", "uninstall of the extension"])
def test_an_install_or_uninstall_that_waited_for_an_uninstall_says_so(owner: Owner, waiting: str) -> None:
    """`pgqueue install` (an upgrade) or `pgqueue uninstall` waiting for pgqueue.install while
    another session's `pgqueue uninstall` drops it: it failed with 'schema "pgqueue" does not
    exist', which says nothing of what happened (and came after an upgrade had applied every
    step, from its last look at the version); an extension's uninstall waiting for another's
    DROP EXTENSION, with 'extension "pgqueue" does not exist'. It says pgqueue was uninstalled
    meanwhile."""
    from pgqueue import installer

    db = owner.database()
    if waiting == "uninstall of the extension":
        with owner.connect(db) as conn:
            conn.execute("CREATE EXTENSION pgqueue")
    else:
        install_plain_release(owner, db, "0.1")
    first = owner.connect(db)
    first.autocommit = False
    if waiting == "uninstall of the extension":
        first.execute("DROP EXTENSION pgqueue")
    else:
        first.execute("LOCK TABLE pgqueue.install IN SHARE ROW EXCLUSIVE MODE")  # as an uninstall begins

    def uninstall() -> None:
        first.execute("DROP SCHEMA pgqueue CASCADE")
        first.commit()
        first.close()

    outcome = _while_blocked(owner, db, lambda second: (
        installer.install(second, report=lambda _: None) if waiting == "install"
        else installer.uninstall(second, report=lambda _: None)), uninstall)
    assert isinstance(outcome, installer.InstallError), outcome
    what, tail = (("install", "run `pgqueue install` again to install it") if waiting == "install" else
                  ("uninstall", "nothing left to uninstall"))
    assert str(outcome) == (f"pgqueue was uninstalled from database {db} by another session (`pgqueue uninstall`, "
                               f"say) while this {what} waited for it: {tail}"), outcome
    with owner.connect(db) as conn:
        assert holds(conn) == (None, None)


def test_install_refuses_a_mode_it_does_not_know(owner: Owner) -> None:
    """``install(conn, mode)`` took any mode but "extension" for the plain install: a typo
    ("Extension", "ext") installed the other kind of pgqueue without a word."""
    db = owner.database()
    with owner.connect(db) as conn:
        for mode in ("Extension", "ext", ""):
            with pytest.raises(ValueError, match=f"mode must be 'extension', 'plain' or None .*not {mode!r}"):
                install(conn, mode, report=lambda _: None)  # type: ignore[arg-type]
        assert holds(conn) == (None, None)
        assert one(conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgqueue'") == 0


def test_uninstall_refuses_a_connection_in_a_transaction(owner: Owner) -> None:
    """``install()`` refuses a connection that is not in autocommit mode; ``uninstall()`` ran in
    the caller's transaction and said "uninstalled" of what the caller could still roll back.
    It refuses such a connection too, dropping nothing."""
    from pgqueue import installer

    db = owner.database()
    with owner.connect(db) as conn:
        conn.autocommit = False  # (an install there said "installed" of what the caller's rollback undid)
        with pytest.raises(ValueError, match="pgqueue install needs an autocommit connection"):
            install(conn, "plain", report=lambda _: None)
        conn.rollback()
        conn.autocommit = True
        assert holds(conn) == (None, None)
        install(conn, "plain", report=lambda _: None)
        conn.autocommit = False
        with pytest.raises(ValueError, match="needs an autocommit connection"):
            installer.uninstall(conn, report=lambda _: None)
        conn.rollback()
        conn.autocommit = True
        assert holds(conn) == (None, CURRENT)


# --------------------------------------------------------------------------------------------
# What the installer review left (session 69)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["while its locks were waited for", "just after the first look"])
def test_an_extension_upgrade_that_waited_for_an_uninstall_says_so(owner: Owner, monkeypatch: pytest.MonkeyPatch,
                                                                  when: str) -> None:
    """`pgqueue install` upgrading the extension while another session's `pgqueue uninstall`
    drops it (DROP EXTENSION pgqueue): committed while the upgrade waited for the tables it
    holds, the upgrade failed with the server's bare 'relation "pgqueue.queue" does not exist';
    committed between the upgrade's first look and its transaction, with 'extension "pgqueue"
    does not exist'. It says pgqueue was uninstalled meanwhile (exit 1 from the command line,
    as any InstallError), and makes nothing."""
    from pgqueue import installer

    db = owner.database()
    with owner.connect(db) as conn:
        conn.execute("CREATE EXTENSION pgqueue VERSION '0.1'")
    expected = (f"pgqueue was uninstalled from database {db} by another session (`pgqueue uninstall`, say) while "
                "this install waited for it: run `pgqueue install` again to install it")
    if when == "just after the first look":
        first_look = installer.read_state

        def stale(conn: Conn) -> installer.InstallState:
            state = first_look(conn)
            monkeypatch.setattr(installer, "read_state", first_look)
            with owner.connect(db) as other:
                other.execute("DROP EXTENSION pgqueue")
            return state

        monkeypatch.setattr(installer, "read_state", stale)
        with owner.connect(db) as conn, pytest.raises(installer.InstallError) as raised:
            installer.install(conn, report=lambda _: None)
        outcome: object = raised.value
    else:
        first = owner.connect(db)
        first.autocommit = False
        first.execute("DROP EXTENSION pgqueue")  # (it holds every table of pgqueue's)

        def commit() -> None:
            first.commit()
            first.close()

        outcome = _while_blocked(owner, db, lambda second: installer.install(second, report=lambda _: None), commit)
    assert isinstance(outcome, installer.InstallError), repr(outcome)
    assert str(outcome) == expected, outcome
    with owner.connect(db) as conn:
        assert holds(conn) == (None, None)
        assert one(conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace") == 0


#: `pgqueue install` in a child process whose first try to lock pgqueue's tables for the upgrade
#: is interrupted by a Ctrl-C (SIGINT) noticed once that try's lock_timeout has ended it (its
#: error waiting on the socket), as a Ctrl-C during the tries mostly is.
_CTRL_C_AS_A_TRY_ENDS = """
import os, signal, sys, time
from psycopg import sql, waiting
from pgqueue import cli, installer

real_wait, real_run, armed = waiting.wait, installer._run, []

def run(conn, query, params=None):
    if isinstance(query, sql.Composable) and query.as_string(conn).startswith("LOCK TABLE"):
        armed.append(True)
    return real_run(conn, query, params)

def wait(gen, *args, **kwargs):
    if armed:
        armed.clear()
        next(gen)  # the try's LOCK TABLE is sent
        time.sleep(0.5)  # its lock_timeout (100 ms) ends it
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
    return real_wait(gen, *args, **kwargs)

installer._run, waiting.wait = run, wait
sys.argv[0] = "pgqueue"
cli.console()
"""


def test_ctrl_c_during_an_upgrades_lock_tries_says_nothing_of_psycopg(owner: Owner) -> None:
    """Ctrl-C while `pgqueue install` tries to lock pgqueue's tables for an upgrade (a worker's
    transaction holds one): exit 130, nothing changed, but stderr had psycopg's "query
    cancellation interrupted (LockNotAvailable): closing connection" first (most such Ctrl-Cs:
    psycopg's cancel met the try's own lock_timeout error). Only the command's own line."""
    db = owner.database()
    with owner.connect(db) as conn:
        conn.execute("CREATE EXTENSION pgqueue VERSION '0.1'")
    env = {k: v for k, v in os.environ.items() if k != "PGQUEUE_DSN"}
    with owner.connect(db) as holder:
        holder.autocommit = False
        holder.execute("LOCK TABLE pgqueue.queue IN ACCESS SHARE MODE")  # (a worker's call in flight)
        proc = subprocess.run([sys.executable, "-c", _CTRL_C_AS_A_TRY_ENDS, "install", "--dsn", owner.dsn(db)],
                              capture_output=True, text=True, timeout=120, env=env, check=False)
        holder.rollback()
    assert (proc.returncode, proc.stderr) == (130, "\n"), (proc.returncode, proc.stderr)
    with owner.connect(db) as conn:
        assert holds(conn) == ("0.1", None)


# --------------------------------------------------------------------------------------------
# Mutation testing of the installer (session 70)
# --------------------------------------------------------------------------------------------


def test_refuses_to_downgrade_an_extension(owner: Owner, pg_server: Server) -> None:
    """An extension newer than the client (its version as a newer release's update leaves it)
    is refused in one line, as a plain install is, and not handed to ALTER EXTENSION."""
    db = owner.database()
    ok(pgqueue("install", "--extension", "--dsn", owner.dsn(db)))
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as admin:  # (what a newer release's update leaves)
        admin.execute("UPDATE pg_catalog.pg_extension SET extversion = '99.0' WHERE extname = 'pgqueue'")
    for mode in ((), ("--extension",)):
        refused(pgqueue("install", *mode, "--dsn", owner.dsn(db)), "99.0", "(extension), newer", "refusing to downgrade")
    with owner.connect(db) as conn:
        assert holds(conn) == ("99.0", None)


@pytest.mark.parametrize("kind", ["plain", "extension"])
def test_an_upgrade_that_waited_for_a_newer_clients_upgrade_refuses_to_downgrade(owner: Owner, pg_server: Server,
                                                                               kind: str) -> None:
    """Two deploys upgrading one database of 0.1, the first with a newer client: this one read
    0.1, then waited for the first's locks. Under them it reads the version again, finds it newer
    than itself, and refuses the downgrade, changing nothing. Without that second look a plain
    install was called "no upgrade path ... a half-applied or hand-edited install ... drop it",
    advice that drops every queue and message, and an extension went to ALTER EXTENSION."""
    from pgqueue import installer

    db = owner.database()
    if kind == "plain":
        install_plain_release(owner, db, "0.1")
        first = owner.connect(db)
        first.autocommit = False
        first.execute("LOCK TABLE pgqueue.install IN SHARE ROW EXCLUSIVE MODE")  # as an upgrade step begins
        first.execute("UPDATE pgqueue.install SET version = '99.0'")  # (what a newer release's steps leave)
    else:
        with owner.connect(db) as conn:
            conn.execute("CREATE EXTENSION pgqueue VERSION '0.1'")
        first = psycopg.connect(pg_server.dsn(db))  # (a superuser: to set what a newer update leaves)
        first.execute("LOCK TABLE pgqueue.queue IN ACCESS EXCLUSIVE MODE")  # as the first's update begins
        first.execute("UPDATE pg_catalog.pg_extension SET extversion = '99.0' WHERE extname = 'pgqueue'")

    def commit() -> None:  # (the second has read 0.1 and waits)
        first.commit()
        first.close()

    outcome = _while_blocked(owner, db, lambda second: installer.install(second, report=lambda _: None), commit)
    assert isinstance(outcome, installer.InstallError), repr(outcome)
    assert f"has pgqueue 99.0 ({kind.replace('plain', 'plain SQL')}), newer than this client" in str(outcome), outcome
    assert "refusing to downgrade" in str(outcome), outcome
    with owner.connect(db) as conn:
        assert holds(conn) == (("99.0", None) if kind == "extension" else (None, "99.0"))


def test_an_upgrade_step_that_records_no_version_is_rolled_back_not_run_again(owner: Owner,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A step script that leaves pgqueue.install as it was (a damaged package, a hand-edited
    script) is refused once, rolled back, naming the step: read again, the version it had not
    advanced would have had the same step run again, and again."""
    from pgqueue import installer

    db = owner.database()
    install_plain_release(owner, db, "0.1")
    ran: list[str] = []

    def read(name: str) -> str:
        ran.append(name)
        assert len(ran) < 3, f"the step was run again: {ran}"
        return "CREATE TABLE pgqueue.made_by_the_step (id int)"

    monkeypatch.setattr(installer, "_read", read)
    with owner.connect(db) as conn, pytest.raises(installer.InstallError) as raised:
        installer.install(conn, "plain", report=lambda _: None)
    assert ran == ["pgqueue--0.1--0.2.sql"]
    assert str(raised.value) == ("the upgrade step pgqueue--0.1--0.2.sql left version '0.1' in pgqueue.install instead "
                                 "of 0.2: rolled back")
    with owner.connect(db) as conn:
        assert holds(conn) == (None, "0.1")
        assert one(conn, "SELECT to_regclass('pgqueue.made_by_the_step')") is None


@pytest.mark.parametrize("kind", ["plain", "extension"])
@pytest.mark.parametrize(("first", "then"), [("queue", "message"), ("message", "queue")])
def test_an_upgrade_takes_pgqueues_tables_before_a_step_alters_them(owner: Owner, kind: str, first: str,
                                                                    then: str) -> None:
    """A transaction that changed one of pgqueue's tables (ROW EXCLUSIVE, as a call's UPDATE
    takes it) goes on to read another while `pgqueue install` upgrades from 0.1. The released
    extension step to 0.2 alters pgqueue.message, then waits for pgqueue.queue (a new table's
    foreign key): holding one and waiting for the other, it deadlocked with such a transaction,
    which failed one of them a second later. pgqueue install takes all of pgqueue's tables
    first, letting go of them while one is held, so both go on. (The busy-workers tests meet
    that deadlock only when their calls happen to fall so.) The plain cases check that the
    plain upgrade goes through beside such a transaction too; its step takes pgqueue.queue
    first, and no order of these two tables was found that deadlocks it without the lock."""
    db = owner.database()
    if kind == "plain":
        install_plain_release(owner, db, "0.1")
    else:
        with owner.connect(db) as conn:
            conn.execute("CREATE EXTENSION pgqueue VERSION '0.1'")
    holder = owner.connect(db)
    holder.autocommit = False
    holder.execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(sql.Identifier("pgqueue", first)))

    def go_on() -> None:  # (the upgrade waits for the table the other transaction holds)
        holder.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("pgqueue", then)))
        holder.commit()
        holder.close()

    outcome = _while_blocked(owner, db, lambda second: install(second, report=lambda _: None), go_on, join=120)
    assert isinstance(outcome, str) and f"to {CURRENT}" in outcome, repr(outcome)
    with owner.connect(db) as conn:
        assert holds(conn) == ((None, CURRENT) if kind == "plain" else (CURRENT, None))
