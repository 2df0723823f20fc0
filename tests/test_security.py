"""Security: hostile objects cannot hijack pgqueue, and a database owner who is not a superuser
can install and use it.

Hostile objects: an unprivileged role (mallory) plants, in the schema public, functions that
shadow the catalog's (now, clock_timestamp, random, floor, to_timestamp, the advisory lock and
NOTIFY functions, and polymorphic ones that an exact-type overload would beat: unnest,
cardinality, array_position, array_ndims), operators that always say "equal" or "true"
(= on bigint/integer/text, <= and < on bigint, + on bigint), and tables named like ours
(message, queue, dead_letter) with the same columns and decoy rows. The victim, a superuser,
also has temp tables of those names, and runs with search_path = pg_temp, public, pg_catalog.
Every hostile function and operator records each call in public.hijack_log.

The same scenario of every public function runs in a clean database and in the hostile one:
the results are the same, the clock is the real one, and hijack_log stays empty. The control
test shows that the hostile setup is potent: the very body of pgqueue.message_create without
its SET search_path clause is hijacked by it.
"""

from __future__ import annotations

import inspect
import os
import re
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from conftest import REPO, Server, admin_execute, create_database, drop_database

Conn = psycopg.Connection[Any]
HOSTILE_PATH = "pg_temp, public, pg_catalog"
FAR_PAST = "2000-01-01 00:00:00+00"


def one(conn: Conn, query: str, params: tuple[Any, ...] = ()) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


# -- the hostile objects ------------------------------------------------------------------------

#: (signature, return type, returned value): each logs its call and returns a plausible lie.
HOSTILE_FUNCTIONS = [
    ("now()", "timestamptz", f"'{FAR_PAST}'::timestamptz"),
    ("clock_timestamp()", "timestamptz", f"'{FAR_PAST}'::timestamptz"),
    ("statement_timestamp()", "timestamptz", f"'{FAR_PAST}'::timestamptz"),
    ("random()", "double precision", "0.5"),
    ("floor(numeric)", "numeric", "0"),
    ("floor(double precision)", "double precision", "0"),
    ("to_timestamp(double precision)", "timestamptz", f"'{FAR_PAST}'::timestamptz"),
    ("timezone(text, timestamptz)", "timestamp", "'2000-01-01'::timestamp"),
    ("pg_advisory_xact_lock_shared(integer, integer)", "void", "NULL"),
    ("pg_try_advisory_xact_lock_shared(integer, integer)", "boolean", "true"),
    ("pg_advisory_xact_lock(integer, integer)", "void", "NULL"),
    ("pg_notify(text, text)", "void", "NULL"),
    # the isolation level message_create and message_complete read (their fast paths, in READ
    # COMMITTED only): the lie would take them under REPEATABLE READ too
    ("current_setting(text)", "text", "'read committed'"),
    ("nextval(regclass)", "bigint", "1"),
    ("cardinality(bytea[])", "integer", "0"),
    ("cardinality(bigint[])", "integer", "0"),
    ("array_ndims(bytea[])", "integer", "1"),
    ("array_position(bytea[], bytea)", "integer", "NULL"),
    ("quote_literal(text)", "text", "'x'"),
    ("left(text, integer)", "text", "'x'"),
    # message_create's recorded lock stripe (setting pgqueue.stripe_<the name in hex>, its one-statement path)
    ("current_setting(text, boolean)", "text", "'A'"),
    ("set_config(text, text, boolean)", "text", "'A'"),
    ("ascii(text)", "integer", "65"),
    ("encode(bytea, text)", "text", "'x'"),
    ("textsend(text)", "bytea", "'\\x78'::bytea"),
    ("chr(integer)", "text", "'A'"),
]
#: (operator, left, right, function returning the lie)
HOSTILE_OPERATORS = [
    ("=", "bigint", "bigint", "true"),
    ("=", "integer", "integer", "true"),
    ("=", "text", "text", "true"),
    ("<=", "bigint", "bigint", "true"),
    ("<", "bigint", "bigint", "true"),
    ("+", "bigint", "bigint", "0::bigint"),
    (">=", "bigint", "bigint", "true"),
    (">", "bigint", "bigint", "true"),
    ("-", "bigint", "integer", "0::bigint"),
    # (a name that set_config takes: the lie must not end a control's call before it is logged)
    ("||", "text", "text", "'pgqueue.x'::text"),
    ("<>", "text", "text", "false"),  # NOT IN (...) resolves <>: message_complete wrote one before a9fdab5
    ("<", "text", "text", "true"),
    ("-", "integer", "integer", "1"),
    ("&", "integer", "integer", "1"),
    (">=", "integer", "integer", "true"),
    ("<>", "integer", "integer", "false"),
    ("+", "integer", "integer", "1"),
]


def hostile_returns(op: str, left: str) -> str:
    """What a hostile operator returns: the same type as the catalog's operator it shadows."""
    return left if op in ("+", "-", "&") else "text" if op == "||" else "boolean"


SHADOWED_TABLES = ("message", "queue", "dead_letter")


def plant_hostile_objects(admin: Conn, mallory: Conn) -> None:
    """As mallory (no privileges but CREATE on public), plant everything; admin prepares."""
    admin.execute(sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(mallory.info.user)))
    mallory.execute("CREATE TABLE public.hijack_log (what text NOT NULL, at timestamptz DEFAULT pg_catalog.clock_timestamp())")
    mallory.execute("GRANT INSERT, SELECT ON public.hijack_log TO PUBLIC")
    for signature, returns, value in HOSTILE_FUNCTIONS:
        name, args = signature.split("(", 1)
        params = ", ".join(f"a{i} {t.strip()}" for i, t in enumerate(args.rstrip(")").split(",")) if t.strip())
        body = "PERFORM 1;" if returns == "void" else f"RETURN {value};"
        mallory.execute(f"""
            CREATE FUNCTION public.{name}({params}) RETURNS {returns} LANGUAGE plpgsql VOLATILE AS $f$
            BEGIN
                INSERT INTO public.hijack_log (what) VALUES ('{name}');
                {body}
            END $f$""")
    for n, (op, left, right, value) in enumerate(HOSTILE_OPERATORS):
        mallory.execute(f"""
            CREATE FUNCTION public.hostile_op_{n}(a {left}, b {right}) RETURNS {hostile_returns(op, left)}
            LANGUAGE plpgsql VOLATILE AS $f$
            BEGIN
                INSERT INTO public.hijack_log (what) VALUES ('operator {op} ({left}, {right})');
                RETURN {value};
            END $f$""")
        mallory.execute(f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, "
                        f"FUNCTION = public.hostile_op_{n})")
    # tables named like ours, with the same columns, full of decoys
    for table in SHADOWED_TABLES:
        columns = admin.execute(
            "SELECT string_agg(quote_ident(attname) || ' ' || format_type(atttypid, atttypmod), ', ' ORDER BY attnum) "
            "FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
            (f"pgqueue.{table}",)).fetchone()[0]  # type: ignore[index]
        mallory.execute(f"CREATE TABLE public.{table} ({columns})")
        mallory.execute(f"GRANT ALL ON public.{table} TO PUBLIC")
    decoys(mallory, "public")
    # a type named like the catalog's: a PL/pgSQL variable declared `text` in a function without a
    # pinned search_path became it (message_create's v_set did: a review), its CHECK run at each
    # assignment (last: the shadowed tables above are made with the catalog's text)
    mallory.execute("""
        CREATE FUNCTION public.hostile_text_check(v pg_catalog.text) RETURNS boolean LANGUAGE plpgsql VOLATILE AS $f$
        BEGIN
            INSERT INTO public.hijack_log (what) VALUES ('domain text');
            RETURN true;
        END $f$""")
    mallory.execute("CREATE DOMAIN public.text AS pg_catalog.text CHECK (public.hostile_text_check(VALUE))")


def decoys(conn: Conn, schema: str) -> None:
    """Rows that would show up if pgqueue read these tables: queues 1..20, ready decoy messages."""
    conn.execute(f"INSERT INTO {schema}.queue (id, name, lock_ms, retry_base_ms, retry_cap_ms, notify, created_at, "
                 "group_concurrency, key_window_ms) "
                 "SELECT g, 'sec', 1, 0, 0, false, '2000-01-01', 0, 1 FROM generate_series(1, 20) g")
    conn.execute(f"INSERT INTO {schema}.message (id, queue_id, dequeue_at, attempts, created_at, content) "
                 "SELECT 1000000 + g, g % 20 + 1, -9000000000000000000, 0, 0, 'decoy' FROM generate_series(1, 200) g")
    conn.execute(f"INSERT INTO {schema}.dead_letter (id, queue_id, dequeue_at, attempts, created_at, dead_at, content) "
                 "SELECT 2000000 + g, g % 20 + 1, 0, 1, 0, 0, 'decoy' FROM generate_series(1, 200) g")


def hostile_session(conn: Conn) -> None:
    """The victim's own session: temp tables named like ours, and the hostile search_path."""
    for table in SHADOWED_TABLES:
        conn.execute(f"CREATE TEMP TABLE {table} (LIKE pgqueue.{table})")
    decoys(conn, "pg_temp")
    conn.execute(f"SET search_path = {HOSTILE_PATH}")
    assert one(conn, "SHOW search_path") == HOSTILE_PATH
    # premise: unqualified names in this session now resolve to the hostile objects
    assert one(conn, "SELECT now()").year == 2000
    assert one(conn, "SELECT count(*) FROM message") == 200  # the temp decoys
    assert one(conn, "SELECT 1::bigint = 2::bigint") is True
    conn.execute("TRUNCATE public.hijack_log")


# -- the scenario -------------------------------------------------------------------------------


class Transcript:
    """What a scenario saw, with ids relative to the first one and clock values checked and dropped."""

    def __init__(self, conn: Conn) -> None:
        self.conn = conn
        self.steps: list[tuple[str, Any]] = []
        self.base_id: int | None = None
        self.clock_errors: list[str] = []

    def rel(self, msg_id: int | None) -> int | None:
        if msg_id is None:
            return None
        if self.base_id is None:
            self.base_id = msg_id
        return msg_id - self.base_id

    def clock(self, what: str, value: int | None, offset_ms: int = 0, slack_ms: int = 120_000) -> None:
        """value must be about real now + offset (a hijacked clock would be decades off)."""
        real = time.time() * 1000 + offset_ms
        if value is None or abs(value - real) > slack_ms:
            self.clock_errors.append(f"{what}: {value} is not about {real:.0f}")

    def step(self, name: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        rows = self.conn.execute(query, params).fetchall()
        self.steps.append((name, rows))
        return rows


def scenario(conn: Conn) -> Transcript:
    """Call every public function (Spark ones too, if installed) and keep what they return."""
    t = Transcript(conn)
    s = t.step
    s("queue_create", "SELECT pgqueue.queue_create('sec', p_lock_ms => 60000, p_max_attempts => 2, "
                      "p_retry_base_ms => 0, p_retry_cap_ms => 0, p_max_size => 100, p_notify => true)")
    s("queue_create existing", "SELECT pgqueue.queue_create('sec', p_if_not_exists => true)")
    ids = [t.rel(r[0]) for r in conn.execute(
        "SELECT * FROM pgqueue.message_create_batch('sec', ARRAY['a', 'b', 'c']::bytea[], NULL, 'text/plain', "
        "NULL, ARRAY[NULL, 'application/json', NULL])").fetchall()]
    t.steps.append(("message_create_batch", ids))
    t.steps.append(("message_create", [t.rel(one(conn, "SELECT pgqueue.message_create('sec', 'd'::bytea)"))]))
    t.steps.append(("priority", [t.rel(one(conn, "SELECT pgqueue.message_create('sec', 'urgent'::bytea, "
                                                 "pgqueue.priority_dequeue_at(5))"))]))
    later = one(conn, "SELECT pgqueue.now_ms()") + 3_600_000
    t.steps.append(("scheduled", [t.rel(one(conn, "SELECT pgqueue.message_create('sec', 'later'::bytea, %s)", (later,)))]))
    t.steps.append(("default queue", [t.rel(one(conn, "SELECT pgqueue.message_create('on default'::bytea)"))]))
    t.steps.append(("text", [t.rel(one(conn, "SELECT pgqueue.message_create_text('default', 'C:\\x41')"))]))
    t.steps.append(("json", [t.rel(one(conn, "SELECT pgqueue.message_create_json('default', '{\"a\": 1}', NULL, 't')"))]))
    peeked = conn.execute("SELECT id, convert_from(content, 'UTF8'), content_type, attempts "
                          "FROM pgqueue.message_peek('default', 10)").fetchall()
    t.steps.append(("message_peek", [(t.rel(i), c, ct, a) for i, c, ct, a in peeked]))
    cancelled = conn.execute("SELECT id, convert_from(content, 'UTF8') FROM pgqueue.message_cancel('default', %s)",
                             ([r[0] for r in peeked[1:]],)).fetchall()
    t.steps.append(("message_cancel", [(t.rel(i), c) for i, c in cancelled]))
    t.clock("now_ms", one(conn, "SELECT pgqueue.now_ms()"))
    created = conn.execute("SELECT created_at FROM pgqueue.message").fetchall()
    for (c,) in created:
        t.clock("created_at", c)
    s("stats", "SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats()")
    t.clock("queue_next_due", one(conn, "SELECT pgqueue.queue_next_due('default')"))

    leased = conn.execute("SELECT id, convert_from(content, 'UTF8'), attempts, content_type, locked_until "
                          "FROM pgqueue.message_dequeue('sec', 2)").fetchall()
    t.steps.append(("lease", [(t.rel(i), c, a, ct) for i, c, a, ct, _ in leased]))
    for *_, until in leased:
        t.clock("locked_until", until, 60_000)
    (urgent, _, tok_u, _, _), (a, _, tok_a, _, _) = leased
    s("heartbeat", "SELECT pgqueue.message_heartbeat(%s, %s, 120000)", (urgent, tok_u))
    # the scenario's own SQL must not meet the hostile operators either: OPERATOR(pg_catalog.=)
    t.clock("heartbeat lease", one(conn, "SELECT locked_until FROM pgqueue.message "
                                         "WHERE id OPERATOR(pg_catalog.=) %s::bigint", (urgent,)), 120_000)
    s("heartbeat batch", "SELECT pgqueue.message_heartbeat_batch(ARRAY[%s, -1]::bigint[], ARRAY[%s, 1]::integer[], 180000)",
      (urgent, tok_u))
    t.clock("heartbeat batch lease", one(conn, "SELECT locked_until FROM pgqueue.message "
                                               "WHERE id OPERATOR(pg_catalog.=) %s::bigint", (urgent,)), 180_000)
    s("complete", "SELECT pgqueue.message_complete(%s, %s)", (urgent, tok_u))
    s("complete stale", "SELECT pgqueue.message_complete(%s, %s)", (urgent, tok_u))
    s("complete batch stale", "SELECT pgqueue.message_complete_batch(ARRAY[%s]::bigint[], ARRAY[%s]::integer[])",
      (urgent, tok_u))
    s("heartbeat stale", "SELECT pgqueue.message_heartbeat(%s, %s)", (a, tok_a + 1))
    s("defer", "SELECT pgqueue.message_defer(%s, %s, NULL, 'checkpoint'::bytea)", (a, tok_a))
    again = conn.execute("SELECT id, attempts, convert_from(state, 'UTF8') FROM pgqueue.message_dequeue('sec', 1, 60000)").fetchall()
    t.steps.append(("dequeue deferred", [(t.rel(i), at, st) for i, at, st in again]))
    s("fail", "SELECT pgqueue.message_fail(%s, %s, 'first')", (again[0][0], again[0][1]))
    third = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('sec', 1, 60000)").fetchall()
    t.steps.append(("dequeue retried", [(t.rel(i), at) for i, at in third]))
    s("fail to dead", "SELECT pgqueue.message_fail(%s, %s, 'second')", third[0])
    s("reject stale", "SELECT pgqueue.message_reject(%s, %s, 'no')", third[0])
    dead = conn.execute("SELECT id, queue, convert_from(content, 'UTF8'), attempts, last_error, dead_at "
                        "FROM pgqueue.dead_letters ORDER BY id").fetchall()
    t.steps.append(("dead letters", [(t.rel(i), q, c, at, e) for i, q, c, at, e, _ in dead]))
    for *_, dead_at in dead:
        t.clock("dead_at", dead_at)
    s("stats 2", "SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats('sec')")
    s("requeue", "SELECT pgqueue.dead_letter_requeue('sec')")
    s("requeued attempts", "SELECT convert_from(content, 'UTF8'), attempts, convert_from(state, 'UTF8'), last_error "
                           "FROM pgqueue.message WHERE content = 'a'")
    s("fail again", "SELECT pgqueue.message_fail(id, attempts, 'x', 0) FROM pgqueue.message_dequeue('sec', 1, 60000)")
    s("fail again to dead", "SELECT pgqueue.message_fail(id, attempts, 'y') FROM pgqueue.message_dequeue('sec', 1, 60000)")
    s("purge", "SELECT pgqueue.dead_letter_purge('sec', p_before => pgqueue.now_ms() + 1000)")
    taken = conn.execute("SELECT id, convert_from(content, 'UTF8'), attempts FROM pgqueue.message_dequeue('sec', 10, 0)").fetchall()
    t.steps.append(("delete mode", [(t.rel(i), c, at) for i, c, at in taken]))
    s("stats 3", "SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats()")
    s("stats exact", "SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats_exact()")
    s("counters", "SELECT queue, enqueued, delivered, completed, failed, dead_lettered, expired, shared "
                  "FROM pgqueue.queue_counters('sec')")
    s("schedule_create", "SELECT pgqueue.schedule_create('sec-tick', 'sec', 'tick'::bytea, 60000, NULL, NULL, 'all', "
                         "pgqueue.now_ms() OPERATOR(pg_catalog.-) 90000) > 0, pgqueue.schedule_create('sec-cron', 'sec', 'c'::bytea, "
                         "NULL, '*/5 * * * *') > 0")
    s("schedule_run", "SELECT schedule, count(*) FROM pgqueue.schedule_run() GROUP BY 1 ORDER BY 1")
    s("schedule_list", "SELECT name, queue, every_ms, cron, missed FROM pgqueue.schedule_list()")
    t.clock("schedule next_run", one(conn, "SELECT next_run FROM pgqueue.schedule_list() WHERE name OPERATOR(pg_catalog.=) 'sec-tick'"), 30_000)
    s("schedule_drop", "SELECT pgqueue.schedule_drop('sec-tick'), pgqueue.schedule_drop('sec-cron')")
    s("queue_alter", "SELECT pgqueue.queue_alter('sec', p_max_size => 1)")
    s("list", "SELECT queue, lock_ms, max_attempts, retry_base_ms, retry_cap_ms, max_size, notify FROM pgqueue.queue_list()")
    try:
        with conn.transaction():
            conn.execute("SELECT pgqueue.message_create('sec', 'over the cap')")
        t.steps.append(("back-pressure", "accepted"))
    except psycopg.Error as exc:
        t.steps.append(("back-pressure", exc.sqlstate))
    s("to_epoch", "SELECT pgqueue.to_epoch('2020-02-29 12:34:56.789+00'::timestamptz), "
                  "pgqueue.to_epoch('1969-12-31 23:59:59.9995+00'::timestamptz)")
    s("from_epoch", "SELECT pgqueue.from_epoch(1582979696789) = '2020-02-29 12:34:56.789+00'::timestamptz")
    s("priority_dequeue_at", "SELECT pgqueue.priority_dequeue_at(0), pgqueue.priority_dequeue_at(7)")
    # (by name: the signature grew a p_from in 0.4, and this check, by the 0.2 signature, then
    # skipped every Spark call while the scenario's source still named them all)
    if one(conn, "SELECT to_regproc('pgqueue.spark_claim') IS NOT NULL"):
        s("spark queue", "SELECT pgqueue.queue_create('spark')")
        s("spark batch", "SELECT count(*) FROM pgqueue.message_create_batch('spark', ARRAY['s1', 's2', 's3']::bytea[])")
        s("spark open", "SELECT pgqueue.spark_consumer_open('spark', 'etl')")
        s("spark claim", "SELECT pgqueue.spark_claim('spark', 'etl', 2)")
        s("spark claimed", "SELECT claim_seq, convert_from(content, 'UTF8'), attempts FROM pgqueue.spark_claimed('spark', 'etl', 0, 1)")
        s("spark claims", "SELECT seq, n FROM pgqueue.spark_claims('spark', 'etl', 0, 10)")
        s("spark pending", "SELECT pgqueue.spark_pending_seq('spark', 'etl')")
        s("spark ack", "SELECT pgqueue.spark_ack('spark', 'etl', 1)")
        s("spark snapshot", "SELECT status, convert_from(content, 'UTF8') FROM pgqueue.spark_snapshot('spark', "
                            "(SELECT min_id FROM pgqueue.spark_snapshot_range('spark')), "
                            "(SELECT max_id FROM pgqueue.spark_snapshot_range('spark')))")
        s("spark stage", "SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000001', 0, 1, 0, ARRAY['p']::bytea[])")
        s("spark publish", "SELECT pgqueue.spark_publish('k', 'spark', '00000000-0000-0000-0000-000000000001', '{0}', '{1}', '{1}')")
        s("spark discard", "SELECT pgqueue.spark_discard('00000000-0000-0000-0000-000000000001')")
        s("spark staging purge", "SELECT pgqueue.spark_staging_purge(pgqueue.now_ms() + 1000)")
        s("spark consumers", "SELECT queue, consumer, acked_seq, next_seq, claims, active FROM pgqueue.spark_consumers()")
        s("spark close", "SELECT pgqueue.spark_consumer_close('spark', 'etl')")
        s("spark release", "SELECT pgqueue.spark_release('spark', 'etl')")
        s("spark drop", "SELECT pgqueue.queue_drop('spark')")
    # message groups and idempotency keys (issue 14): turns, the next turn, windows, the trigger
    s("group queue", "SELECT pgqueue.queue_create('grp', p_group_concurrency => 1, p_key_window_ms => 60000)")
    s("group batch", "SELECT count(*) FROM pgqueue.message_create_batch('grp', ARRAY['g1', 'g2', 'h1']::bytea[], "
                     "p_groups => ARRAY['g', 'g', 'h'], p_keys => ARRAY['k1', 'k2', 'k3'])")
    s("same key", "SELECT pgqueue.message_create('grp', 'again'::bytea, p_group => 'g', p_key => 'k1') "
                  "OPERATOR(pg_catalog.=) (SELECT m.id FROM pgqueue.message m WHERE m.idem_key OPERATOR(pg_catalog.=) 'k1')")
    s("group dequeue", "SELECT convert_from(content, 'UTF8'), attempts FROM pgqueue.message_dequeue('grp', 10, 0)")
    s("group next turn", "SELECT convert_from(content, 'UTF8'), attempts FROM pgqueue.message_dequeue('grp', 10, 0)")
    s("key window", "SELECT pgqueue.message_create('grp', 'x'::bytea, p_key => 'k1') "
                    "OPERATOR(pg_catalog.=) (SELECT k.id FROM pgqueue.message_key k WHERE k.idem_key OPERATOR(pg_catalog.=) 'k1')")
    s("group next due", "SELECT pgqueue.queue_next_due('grp') IS NULL")
    s("group stats", "SELECT group_key, waiting, in_flight FROM pgqueue.queue_group_stats('grp', 5)")
    s("group drop", "SELECT pgqueue.queue_drop('grp')")
    # leased messages of a group, without a key, completed: message_complete hands the turn on
    # itself in its unpinned body (group_concurrency 1, READ COMMITTED), a branch nothing above
    # runs; two of group l in flight under a limit lowered to 1, so that its check for a turn
    # still held meets a row (l2) when l1 is completed, and m1, another group's, in flight too
    s("group lease queue", "SELECT pgqueue.queue_create('grpl', p_group_concurrency => 2)")
    s("group lease batch", "SELECT count(*) FROM pgqueue.message_create_batch('grpl', "
                           "ARRAY['l1', 'l2', 'l3', 'm1']::bytea[], p_groups => ARRAY['l', 'l', 'l', 'm'])")
    held = {c: (i, at) for i, at, c in conn.execute(
        "SELECT id, attempts, convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('grpl', 10, 60000)").fetchall()}
    t.steps.append(("group lease", sorted((c, t.rel(i), at) for c, (i, at) in held.items())))
    s("group lower limit", "SELECT pgqueue.queue_alter('grpl', p_group_concurrency => 1)")
    s("group complete", "SELECT pgqueue.message_complete(%s, %s)", held["l1"])
    s("group turn still held", "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('grpl', 10, 0)")
    s("group complete last", "SELECT pgqueue.message_complete(%s, %s)", held["l2"])
    s("group turn handed on", "SELECT convert_from(content, 'UTF8'), attempts FROM pgqueue.message_dequeue('grpl', 10, 0)")
    s("group lease drop", "SELECT pgqueue.queue_drop('grpl')")
    # a key on a capped queue: message_create looks the key up itself, in its unpinned body,
    # before it asks for room (the branch the keyed creates above, on uncapped queues, skip):
    # taken by a live message, then kept for the window after its message left
    s("capped key queue", "SELECT pgqueue.queue_create('capk', p_max_size => 5, p_key_window_ms => 60000)")
    create_keyed = "SELECT pgqueue.message_create('capk', 'k'::bytea, p_key => 'ck')"
    keyed = one(conn, create_keyed)
    live = one(conn, create_keyed)
    s("capped key delivered", "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('capk', 10, 0)")
    kept = one(conn, create_keyed)
    t.steps.append(("capped key", [t.rel(keyed), live == keyed, kept == keyed]))
    s("capped key drop", "SELECT pgqueue.queue_drop('capk')")
    # a given dequeue_at on an uncapped queue: the fast path compares it with the clock (above,
    # only a capped queue or NULL dequeue_ats took the fast path's checks)
    s("uncapped queue", "SELECT pgqueue.queue_create('plain')")
    s("uncapped scheduled", "SELECT pgqueue.message_create('plain', 'p'::bytea, pgqueue.priority_dequeue_at(1)) > 0, "
                            "pgqueue.message_create('plain', 's'::bytea, pgqueue.now_ms() OPERATOR(pg_catalog.+) 60000) > 0")
    s("uncapped dequeue", "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('plain', 10, 0)")
    s("uncapped drop", "SELECT pgqueue.queue_drop('plain')")
    s("ack-fetch queue", "SELECT pgqueue.queue_create('ackf'), pgqueue.message_create('ackf', 'x'::bytea) > 0")
    s("complete and dequeue", "SELECT convert_from(content, 'UTF8'), attempts, stale "
                              "FROM pgqueue.message_complete_and_dequeue(ARRAY[0]::bigint[], ARRAY[1], 'ackf', 5, 0)")
    s("ack-fetch drop", "SELECT pgqueue.queue_drop('ackf')")
    s("queue_drop", "SELECT pgqueue.queue_drop('sec')")
    s("final stats", "SELECT queue, ready, scheduled, leased, dead FROM pgqueue.queue_stats()")
    s("final tables", "SELECT (SELECT count(*) FROM pgqueue.message), (SELECT count(*) FROM pgqueue.dead_letter), "
                      "(SELECT count(*) FROM pgqueue.queue)")
    return t


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def role(pg_server: Server) -> Iterator[str]:
    """A LOGIN role without any privilege (cluster-wide, so named per run and dropped after)."""
    name = f"pgq_mallory_{os.getpid()}"
    admin_execute(pg_server, sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture
def hostile_db(pg_server: Server, template_db: str, role: str) -> Iterator[str]:
    name = create_database(pg_server, template_db, prefix="hostile")
    try:
        with psycopg.connect(pg_server.dsn(name), autocommit=True) as admin, \
             psycopg.connect(pg_server.dsn(name, user=role), autocommit=True) as mallory:
            assert one(mallory, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
            plant_hostile_objects(admin, mallory)
        yield name
    finally:
        drop_database(pg_server, name)
        # the role owns objects only in that database, dropped above


# -- tests --------------------------------------------------------------------------------------


def test_hostile_objects_change_nothing(pg_server: Server, conn: Conn, hostile_db: str) -> None:
    clean = scenario(conn)
    assert not clean.clock_errors, clean.clock_errors

    with psycopg.connect(pg_server.dsn(hostile_db), autocommit=True) as victim:
        hostile_session(victim)
        hostile = scenario(victim)
        calls = victim.execute("SELECT what, count(*) FROM public.hijack_log GROUP BY 1 ORDER BY 1").fetchall()
        decoys_left = [one(victim, f"SELECT count(*) FROM {schema}.{table}")
                       for schema in ("public", "pg_temp") for table in SHADOWED_TABLES]
    assert calls == [], f"hostile objects were called: {calls}"
    assert not hostile.clock_errors, hostile.clock_errors
    assert len(hostile.steps) == len(clean.steps)
    for (name, got), (_, expected) in zip(hostile.steps, clean.steps):
        assert got == expected, f"{name}: {got!r} under hostile objects, {expected!r} without"
    # premise: the scenario did things (a transcript of errors would compare equal too)
    steps = dict(clean.steps)
    assert steps["complete"] == [(True,)] and steps["complete stale"] == [(False,)]
    assert steps["back-pressure"] == "PQ003"
    assert steps["to_epoch"] == [(1582979696789, -1)]
    assert steps["heartbeat"] == [(True,)] and steps["heartbeat batch"] == [([-1],)]
    assert steps["spark claim"] == [(1,)] and steps["spark ack"] == [(2,)], "premise: the Spark calls ran"
    assert [c for c, *_ in steps["group lease"]] == ["l1", "l2", "m1"]
    assert steps["group complete"] == steps["group complete last"] == [(True,)]
    assert steps["group turn still held"] == [] and steps["group turn handed on"] == [("l3", 1)]
    assert steps["capped key"][1:] == [True, True]  # found taken: live, then kept
    assert steps["uncapped scheduled"] == [(True, True)] and steps["uncapped dequeue"] == [("p",)]
    assert decoys_left == [200, 20, 200] * 2, "the decoy tables were touched"


def test_the_scenario_calls_every_public_function(conn: Conn) -> None:
    """So that a function added later is added to the scenario too."""
    public = {r[0] for r in conn.execute(
        "SELECT DISTINCT proname FROM pg_proc WHERE pronamespace = 'pgqueue'::regnamespace AND proname !~ '^_'")}
    called = set(re.findall(r"pgqueue\.([a-z_]+)\(", inspect.getsource(scenario)))
    assert public - called == set()


def test_control_an_unpinned_copy_of_a_pgqueue_function_is_hijacked(hostile_db: str, pg_server: Server) -> None:
    """The hostile setup is potent: message_create_batch's own body, created without its
    SET search_path clause, calls the hostile now() and cardinality() (which says the batch is
    empty, so nothing is enqueued). So a pgqueue function that lost its pin would fail
    test_hostile_objects_change_nothing."""
    with psycopg.connect(pg_server.dsn(hostile_db), autocommit=True) as victim:
        definition = one(victim, "SELECT pg_get_functiondef('pgqueue.message_create_batch(text,bytea[],bigint,text,"
                                 "bigint[],text[],text[],text[])'::regprocedure)")
        unpinned, n = re.subn(r"\n\s*SET search_path TO [^\n]*", "", definition)
        assert n == 1, definition
        unpinned = unpinned.replace("FUNCTION pgqueue.message_create_batch(", "FUNCTION pg_temp.unpinned_create_batch(")
        victim.execute(unpinned)
        hostile_session(victim)
        ids = victim.execute("SELECT * FROM pg_temp.unpinned_create_batch('default', ARRAY['x'::bytea])").fetchall()
        calls = [r[0] for r in victim.execute("SELECT DISTINCT what FROM public.hijack_log ORDER BY 1").fetchall()]
    assert {"now", "cardinality"} <= set(calls), calls
    assert ids == []  # the hostile cardinality() made the batch look empty


def test_control_message_create_is_safe_by_its_qualified_names(hostile_db: str, pg_server: Server) -> None:
    """message_create has no SET search_path clause (its cost, docs/performance.md): it is safe
    because every name and operator in it is qualified. Its own body with the qualifications
    taken out (`pg_catalog.now()` -> `now()`, `OPERATOR(pg_catalog.=)` -> `=`, ...) calls the
    hostile clock and operators."""
    with psycopg.connect(pg_server.dsn(hostile_db), autocommit=True) as victim:
        definition = one(victim, "SELECT pg_get_functiondef('pgqueue.message_create(text,bytea,bigint,text,text,text)'::regprocedure)")
        assert "SET search_path" not in definition
        bare, n = re.subn(r"OPERATOR\(pg_catalog\.([^)]+)\)", r"\1", definition)
        bare, m = re.subn(r"pg_catalog\.", "", bare)
        assert n >= 6 and m >= 3, (n, m)
        bare = bare.replace("FUNCTION pgqueue.message_create(", "FUNCTION pg_temp.bare_message_create(")
        victim.execute(bare)
        hostile_session(victim)
        msg_id = one(victim, "SELECT pg_temp.bare_message_create('default', 'x'::bytea)")
        calls = {r[0] for r in victim.execute("SELECT DISTINCT what FROM public.hijack_log").fetchall()}
    assert msg_id is not None
    # (the recorded lock stripe: the setting read, its value made a stripe and compared with the
    # queue's, and the isolation level compared, go through the hostile ones as well)
    assert {"now", "operator = (text, text)", "current_setting", "ascii", "operator - (integer, integer)",
            "operator & (integer, integer)", "operator < (text, text)"} <= calls, calls


def test_no_dynamic_sql_in_any_function(conn: Conn) -> None:
    """No function body runs EXECUTE (dynamic SQL) but _queue_quiesce, whose one statement is built
    from a name it computes itself (ALTER SEQUENCE of the queue's lock stripe): no user input can
    become SQL text. (search_path pinning and the SECURITY DEFINER list are checked by
    tests/pgtap/10_schema.sql.)"""
    bodies = conn.execute("""
        SELECT p.oid::regprocedure::text, p.prosrc FROM pg_proc p
         WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosqlbody IS NULL""").fetchall()
    assert len(bodies) >= 10  # premise: the PL/pgSQL functions are there
    dynamic = [name for name, src in bodies
               if re.search(r"\bEXECUTE\b", re.sub(r"--[^\n]*", "", src), re.IGNORECASE)]
    assert dynamic == ["pgqueue._queue_quiesce(integer)"]


# -- installation by a database owner who is not a superuser ------------------------------------


@pytest.fixture
def owner(pg_server: Server) -> Iterator[tuple[str, str]]:
    """A non-superuser role and a database it owns (without the extension)."""
    name = f"pgq_owner_{os.getpid()}"
    db = f"owned_{os.getpid()}"
    admin_execute(pg_server,
                  sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE").format(sql.Identifier(name)),
                  sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(sql.Identifier(db), sql.Identifier(name)))
    try:
        yield name, db
    finally:
        drop_database(pg_server, db)
        admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def test_a_database_owner_who_is_not_superuser_installs_and_uses_it(pg_server: Server, owner: tuple[str, str]) -> None:
    role, db = owner
    with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
        assert one(conn, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user") is False
        conn.execute("CREATE EXTENSION pgqueue")
        assert one(conn, "SELECT extowner::regrole::text FROM pg_extension WHERE extname = 'pgqueue'") == role
        assert one(conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'pgqueue'::regnamespace "
                         "AND proowner <> current_user::regrole") == 0
        # the whole life of a message, as that role
        conn.execute("SELECT pgqueue.queue_create('jobs', p_max_attempts => 1, p_max_size => 10)")
        ids = [r[0] for r in conn.execute("SELECT * FROM pgqueue.message_create_batch('jobs', ARRAY['a', 'b', 'c']::bytea[])")]
        first = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1, 60000)").fetchone()
        assert first is not None and first[0] == ids[0]
        assert one(conn, "SELECT pgqueue.message_heartbeat(%s, %s, 1000)", first) is True
        assert one(conn, "SELECT pgqueue.message_complete(%s, %s)", first) is True
        second = conn.execute("SELECT id, attempts FROM pgqueue.message_dequeue('jobs', 1, 60000)").fetchone()
        assert one(conn, "SELECT pgqueue.message_fail(%s, %s, 'boom')", second) is True  # max_attempts 1: dead
        assert conn.execute("SELECT queue, ready, leased, dead FROM pgqueue.queue_stats('jobs')").fetchall() == [("jobs", 1, 0, 1)]
        assert one(conn, "SELECT pgqueue.dead_letter_requeue('jobs')") == 1
        taken = conn.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('jobs', 10, 0) ORDER BY 1").fetchall()
        assert taken == [("b",), ("c",)]
        assert one(conn, "SELECT pgqueue.queue_drop('jobs')") is True
        # and so can an upgrade from the first release, if there is a later one
        versions = [r[0] for r in conn.execute(
            "SELECT version FROM pg_available_extension_versions WHERE name = 'pgqueue' "
            "ORDER BY string_to_array(version, '.')::int[]")]
        if len(versions) > 1:
            conn.execute("DROP EXTENSION pgqueue")
            conn.execute(sql.SQL("CREATE EXTENSION pgqueue VERSION {}").format(sql.Literal(versions[0])))
            conn.execute("SELECT pgqueue.message_create('kept across the upgrade'::bytea)")
            conn.execute("ALTER EXTENSION pgqueue UPDATE")
            assert one(conn, "SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'") == versions[-1]
            assert one(conn, "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('default', 1, 0)") \
                == "kept across the upgrade"


# -- the schema: pgqueue never installs into a schema someone else made (review defect 1) --------

PLANT = """CREATE FUNCTION pgqueue._not_null(p_value text, p_name text) RETURNS void
           LANGUAGE sql AS $$ SELECT NULL::void $$"""


@pytest.fixture
def squatter(pg_server: Server) -> Iterator[tuple[str, str]]:
    """A role with CREATE on a fresh database (as granted by many setups) and that database."""
    name = f"pgq_squatter_{os.getpid()}"
    db = f"squatted_{os.getpid()}"
    admin_execute(pg_server,
                  sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER").format(sql.Identifier(name)),
                  sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(db)),
                  sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(sql.Identifier(db), sql.Identifier(name)))
    try:
        yield name, db
    finally:
        drop_database(pg_server, db)
        admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def _sqlstate(conn: psycopg.Connection[Any], statement: str) -> str | None:
    try:
        conn.execute(statement)  # type: ignore[arg-type]
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def test_create_extension_refuses_a_schema_another_role_made(pg_server: Server, squatter: tuple[str, str]) -> None:
    role, db = squatter
    with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
        conn.execute("CREATE SCHEMA pgqueue")
        conn.execute(PLANT)
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as admin:  # a superuser installs
        assert _sqlstate(admin, "CREATE EXTENSION pgqueue") == "PQ008"
        assert one(admin, "SELECT count(*) FROM pg_extension WHERE extname = 'pgqueue'") == 0
        # even once the superuser owns the schema, the planted function stops the install
        admin.execute("ALTER SCHEMA pgqueue OWNER TO CURRENT_USER")
        assert _sqlstate(admin, "CREATE EXTENSION pgqueue") == "PQ008"
        admin.execute("DROP FUNCTION pgqueue._not_null(text, text)")
        # and so does a CREATE right left to others on the schema
        admin.execute(sql.SQL("GRANT CREATE ON SCHEMA pgqueue TO {}").format(sql.Identifier(role)))
        assert _sqlstate(admin, "CREATE EXTENSION pgqueue") == "PQ008"
        admin.execute(sql.SQL("REVOKE CREATE ON SCHEMA pgqueue FROM {}").format(sql.Identifier(role)))
        admin.execute("CREATE EXTENSION pgqueue")
        assert one(admin, "SELECT nspowner = (SELECT oid FROM pg_roles WHERE rolname = current_user) "
                          "FROM pg_namespace WHERE nspname = 'pgqueue'") is True


def test_objects_an_old_update_gave_a_superuser_are_named_with_their_fix(
        pg_server: Server, owner: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """The released updates to 0.2 and 0.3 do not refuse a role other than the extension's
    owner: run by a superuser, they left their new tables and functions the superuser's, and
    then the owner's update to 0.4 failed, 42501 "permission denied for table spark_claim" (at
    `pgqueue install`'s LOCK TABLE, or in the script), while a superuser's was refused (PQ008):
    nobody could update (a review). The update script says which objects and what mends it
    (PQ008), `pgqueue install` gives the statements, and after them it updates."""
    from pgqueue import installer
    from pgqueue.cli import main

    role, db = owner
    with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgqueue VERSION '0.1'")
        conn.execute("SELECT pgqueue.message_create('kept'::bytea)")
    admin_execute_in(pg_server, db, sql.SQL("ALTER EXTENSION pgqueue UPDATE TO '0.2'"),
                     sql.SQL("ALTER EXTENSION pgqueue UPDATE TO '0.3'"))
    with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
        try:
            conn.execute("ALTER EXTENSION pgqueue UPDATE")
        except psycopg.Error as exc:
            assert exc.sqlstate == "PQ008" and "pgqueue's objects are owned by" in str(exc), exc
            assert "pgqueue.spark_claim" in str(exc), exc
        else:
            raise AssertionError("the update went through")
        capsys.readouterr()
        assert main(["install", "--dsn", pg_server.dsn(db, user=role)]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert f"where the extension's owner is {role}" in err and f"give them to {role}" in err, err
        assert one(conn, "SELECT extversion FROM pg_extension WHERE extname = 'pgqueue'") == "0.3"
    with psycopg.connect(pg_server.dsn(db), autocommit=True) as admin:  # the statements it names
        for _, _, statement in admin.execute(installer._FOREIGN_MEMBERS).fetchall():
            assert statement in err, (statement, err)
            admin.execute(statement)
    with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
        assert "upgraded from 0.3 to 0.4" in installer.install(conn, report=lambda line: None)
        assert one(conn, "SELECT count(*) FROM pgqueue.message") == 1
        assert one(conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgqueue'::regnamespace "
                         "AND relowner <> current_user::regrole") == 0


def test_a_schema_the_install_makes_keeps_no_create_from_default_privileges(
        pg_server: Server, owner: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """The installing role's default privileges for new schemas (ALTER DEFAULT PRIVILEGES ... GRANT
    CREATE ON SCHEMAS, as some setups have for an application role) gave the schema that
    CREATE EXTENSION or the plain install made CREATE for others, and the schema check refused
    it, PQ008, with a hint to revoke it from a schema the failed install had taken with it: such
    a database could not install pgqueue at all (a review). The install takes that CREATE back,
    with a warning (CREATE EXTENSION shows no notice), and keeps the rest of those privileges; a CREATE on a schema made before the
    install is still refused."""
    from pgqueue import installer

    role, db = owner
    other = f"pgq_default_acl_{os.getpid()}"
    admin_execute(pg_server, sql.SQL("CREATE ROLE {}").format(sql.Identifier(other)))
    try:
        with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES GRANT CREATE, USAGE ON SCHEMAS TO {}").format(
                sql.Identifier(other)))
            conn.execute("ALTER DEFAULT PRIVILEGES GRANT CREATE ON SCHEMAS TO PUBLIC")
            notices: list[str] = []
            conn.add_notice_handler(lambda diag: notices.append(f"{diag.severity_nonlocalized}: {diag.message_primary}"))

            def privileges() -> set[tuple[str, str]]:
                return set(conn.execute(
                    "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END, a.privilege_type "
                    "FROM pg_namespace n, aclexplode(n.nspacl) a "
                    "WHERE n.nspname = 'pgqueue' AND a.grantee <> n.nspowner").fetchall())

            for install in ("CREATE EXTENSION pgqueue", "plain", "pgqueue install --plain"):
                notices.clear()
                capsys.readouterr()
                if install == "plain":
                    installer.install(conn, "plain", report=lambda line: None)
                elif install == "pgqueue install --plain":  # the command prints them (it showed none: a review)
                    from pgqueue.cli import main

                    assert main(["install", "--plain", "--dsn", pg_server.dsn(db, user=role)]) == 0
                    err = capsys.readouterr().err
                    notices = [line.replace("pgqueue: warning: ", "WARNING: ") for line in err.splitlines()]
                else:
                    conn.execute(install)
                assert privileges() == {(other, "USAGE")}, install
                assert sorted(notices) == sorted(
                    f"WARNING: schema pgqueue: CREATE revoked from {who}, which the default privileges of role {role} "
                    "granted on new schemas" for who in ("PUBLIC", other)), (install, notices)
                conn.execute("SELECT pgqueue.message_create('works'::bytea)")
                installer.uninstall(conn, report=lambda line: None)  # (the extension's schema too)
            # a schema made before the install, which others could use meanwhile: refused as before
            conn.execute("CREATE SCHEMA pgqueue")
            assert _sqlstate(conn, "CREATE EXTENSION pgqueue") == "PQ008"
            assert privileges() == {(other, "USAGE"), (other, "CREATE"), ("PUBLIC", "CREATE")}
    finally:
        with psycopg.connect(pg_server.dsn(db), autocommit=True) as admin:  # (else the role cannot be dropped)
            admin.execute(sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} REVOKE ALL ON SCHEMAS FROM PUBLIC, {}").format(
                sql.Identifier(role), sql.Identifier(other)))
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(other)))  # (its grants)
        admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(other)))


def test_owner_only_objects_take_no_privilege_from_default_privileges(pg_server: Server, owner: tuple[str, str]) -> None:
    """The installing role's default privileges on tables, sequences and functions (ALTER DEFAULT
    PRIVILEGES ... GRANT ALL ON TABLES / SEQUENCES / FUNCTIONS TO an application role, as some
    managed setups have; functions: the six SECURITY DEFINER ones were that role's to run, and
    with them the owner's rights: a second review) gave
    that role write access to pgqueue.queue_size on a fresh install and a plain install, while the
    0.3 -> 0.4 update took it back: the two catalogs differed, and the role could bypass
    max_size by writing the accounting row (a review). Every way of installing now leaves
    queue_size, its sequences and message_group_lock to the owner alone, keeps the other default
    grants (pgqueue.message's shows that they applied), and ends with the same privileges."""
    from pgqueue import installer

    role, db = owner
    other = f"pgq_default_tables_{os.getpid()}"
    admin_execute(pg_server, sql.SQL("CREATE ROLE {}").format(sql.Identifier(other)))
    owner_only = ("SELECT c.relname::text, c.relacl::text FROM pg_class c "
                  "WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind IN ('r', 'S') "
                  "AND (c.relname = 'message_group_lock' OR left(c.relname::text, 10) = 'queue_size') ORDER BY 1")
    # the SECURITY DEFINER functions: their owner's rights to anyone who may run them (a review)
    definer_acls = ("SELECT p.oid::regprocedure::text, p.proacl::text FROM pg_proc p "
                    "WHERE p.pronamespace = 'pgqueue'::regnamespace AND p.prosecdef ORDER BY 1")
    every_acl = ("SELECT c.relname::text, c.relacl::text FROM pg_class c "
                 "WHERE c.relnamespace = 'pgqueue'::regnamespace AND c.relkind IN ('r', 'S', 'v') "
                 "AND c.relname <> 'install' ORDER BY 1")
    try:
        with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
            for kind in ("TABLES", "SEQUENCES", "FUNCTIONS"):
                conn.execute(sql.SQL("ALTER DEFAULT PRIVILEGES GRANT ALL ON {} TO {}").format(
                    sql.SQL(kind), sql.Identifier(other)))
            acls: dict[str, list[tuple[str, str]]] = {}
            for install in ("CREATE EXTENSION pgqueue", "0.3, then ALTER EXTENSION pgqueue UPDATE", "plain"):
                if install == "plain":
                    installer.install(conn, "plain", report=lambda line: None)
                elif install.startswith("0.3"):
                    conn.execute("CREATE EXTENSION pgqueue VERSION '0.3'")
                    conn.execute("SELECT pgqueue.queue_create('capped', p_max_size => 2)")
                    conn.execute("SELECT pgqueue.message_create('capped', 'in flight'::bytea)")
                    conn.execute("ALTER EXTENSION pgqueue UPDATE")
                else:
                    conn.execute(install)
                rows = conn.execute(owner_only).fetchall()  # type: ignore[arg-type]
                assert len(rows) == 2 + 2 * 64, (install, len(rows))
                assert [acl for _, acl in rows if acl is not None and other in acl] == [], install
                message_acl = one(conn, "SELECT relacl::text FROM pg_class WHERE oid = 'pgqueue.message'::regclass")
                assert other in message_acl, (install, message_acl)  # (the default privileges applied)
                definers = conn.execute(definer_acls).fetchall()  # type: ignore[arg-type]
                assert len(definers) == 6 and [f for f, acl in definers if other in (acl or "")] == [], \
                    (install, definers)
                assert other in one(conn, "SELECT proacl::text FROM pg_proc WHERE oid = "  # (applied there too)
                                          "'pgqueue.message_create(text, bytea, bigint, text, text, text)'::regprocedure")
                acls[install] = conn.execute(every_acl).fetchall() + definers  # type: ignore[arg-type,operator]
                installer.uninstall(conn, report=lambda line: None)
            assert acls["0.3, then ALTER EXTENSION pgqueue UPDATE"] == acls["CREATE EXTENSION pgqueue"]
            assert acls["plain"] == acls["CREATE EXTENSION pgqueue"]
    finally:
        with psycopg.connect(pg_server.dsn(db), autocommit=True) as admin:  # (else the role cannot be dropped)
            for kind in ("TABLES", "SEQUENCES"):
                admin.execute(sql.SQL("ALTER DEFAULT PRIVILEGES FOR ROLE {} REVOKE ALL ON {} FROM {}").format(
                    sql.Identifier(role), sql.SQL(kind), sql.Identifier(other)))
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(other)))
        admin_execute(pg_server, sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(other)))


def test_restore_into_a_schema_another_role_made_fails_loudly(pg_server: Server, squatter: tuple[str, str],
                                                              tmp_path: Any) -> None:
    import subprocess

    from helpers import pg_bindir
    role, db = squatter
    source = create_database(pg_server, "template0", prefix="dumped")
    try:
        with psycopg.connect(pg_server.dsn(source), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgqueue")
            conn.execute("SELECT pgqueue.message_create('kept'::bytea)")
        dump = tmp_path / "pgqueue.dump"
        env = pg_server.libpq_env()
        subprocess.run([str(pg_bindir() / "pg_dump"), "-Fc", "-f", str(dump), "-d", source],
                       env=env, check=True, capture_output=True)
        with psycopg.connect(pg_server.dsn(db, user=role), autocommit=True) as conn:
            conn.execute("CREATE SCHEMA pgqueue")
            conn.execute(PLANT)
        proc = subprocess.run([str(pg_bindir() / "pg_restore"), "-d", db, str(dump)],
                              env=env, capture_output=True, text=True, check=False)
        assert proc.returncode != 0
        assert "holds objects pgqueue did not create" in proc.stderr
        with psycopg.connect(pg_server.dsn(db), autocommit=True) as admin:
            assert one(admin, "SELECT count(*) FROM pg_extension WHERE extname = 'pgqueue'") == 0
    finally:
        drop_database(pg_server, source)


# -- the plain install binds nothing from the installer's search_path ---------------------------

#: Operators that beat the catalog's for the argument types the install script and the
#: SQL-standard bodies use (an exact match wins over one that needs a cast): text || integer
#: (the comments of the stripes and counters, made in DO blocks), double precision * integer
#: (now_ms), numeric * integer (to_epoch), bigint / numeric (0.3's from_epoch), bigint / double
#: precision (from_epoch beyond the days an interval holds). Each logs its call and returns the
#: right value, so that nothing but the log tells; but the last returns 0, so that the call of
#: from_epoch that reaches it (22008 when nothing is bound) returns, and its log row stays.
CAST_BEATING_OPERATORS = [
    ("||", "text", "integer", "text", "a OPERATOR(pg_catalog.||) b::text"),
    ("*", "double precision", "integer", "double precision", "a OPERATOR(pg_catalog.*) b::double precision"),
    ("*", "numeric", "integer", "numeric", "a OPERATOR(pg_catalog.*) b::numeric"),
    ("/", "bigint", "numeric", "numeric", "a::numeric OPERATOR(pg_catalog./) b"),
    ("/", "bigint", "double precision", "double precision", "0::double precision"),
]


def plant_cast_beating_operators(pg_server: Server, dbname: str, mallory: str) -> None:
    admin_execute_in(pg_server, dbname, sql.SQL("GRANT CREATE ON SCHEMA public TO {}").format(sql.Identifier(mallory)))
    with psycopg.connect(pg_server.dsn(dbname, user=mallory), autocommit=True) as conn:
        conn.execute("CREATE TABLE public.hijack_log (what text NOT NULL, by_role text NOT NULL)")
        conn.execute("GRANT INSERT, SELECT ON public.hijack_log TO PUBLIC")
        for n, (op, left, right, returns, value) in enumerate(CAST_BEATING_OPERATORS):
            conn.execute(f"""
                CREATE FUNCTION public.planted_{n}(a {left}, b {right}) RETURNS {returns}
                LANGUAGE plpgsql VOLATILE AS $f$
                BEGIN
                    INSERT INTO public.hijack_log VALUES ('{op} ({left}, {right})', current_user);
                    RETURN {value};
                END $f$""")
            conn.execute(f"CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, "
                         f"FUNCTION = public.planted_{n})")


def admin_execute_in(pg_server: Server, dbname: str, *statements: sql.Composable) -> None:
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as conn:
        for stmt in statements:
            conn.execute(stmt)


def hijacks(pg_server: Server, dbname: str) -> list[tuple[str, str]]:
    """Use pgqueue as the superuser (default search_path) and return what the planted operators logged."""
    with psycopg.connect(pg_server.dsn(dbname), autocommit=True) as conn:
        assert one(conn, "SHOW search_path") == '"$user", public'
        conn.execute("SELECT pgqueue.now_ms(), pgqueue.to_epoch(pg_catalog.now()), pgqueue.from_epoch(0)")
        with pytest.raises(psycopg.errors.DatetimeFieldOverflow):  # (a planted bigint / double precision returns)
            conn.execute("SELECT pgqueue.from_epoch(9223372036854775807)")
        conn.execute("SELECT pgqueue.message_create('default', 'x'::bytea)")
        assert conn.execute("SELECT count(*) FROM pgqueue.message_dequeue('default', 1, 0)").fetchone() == (1,)
        return [(str(w), str(b)) for w, b in conn.execute("SELECT DISTINCT what, by_role FROM public.hijack_log ORDER BY 1")]


@pytest.mark.parametrize("options", [("-v", "ON_ERROR_STOP=1", "-1"), ()], ids=["psql -1", "no options"])
def test_a_plain_install_binds_nothing_another_role_planted_in_public(pg_server: Server, role: str,
                                                                     options: tuple[str, ...]) -> None:
    """Review defect (0.4, security review): the plain install ran with the installer's
    search_path, so operators a role with CREATE on public planted ran as the installer (a
    superuser here) during the install, and stayed bound in now_ms, to_epoch and from_epoch for
    everyone who called them. The script pins search_path for its transaction, which is one
    statement (a DO block) however psql runs it: without -1 the pin did not hold before."""
    import subprocess

    from helpers import pg_bindir
    from pgqueue.installer import sql_version

    db = create_database(pg_server, "template0", prefix="plainhostile")
    try:
        plant_cast_beating_operators(pg_server, db, role)
        # premise: the planted operators do beat the catalog's in this search_path
        with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
            assert one(conn, "SELECT 'n'::text || 1") == "n1"
            assert one(conn, "SELECT count(*) FROM public.hijack_log") == 1
            conn.execute("TRUNCATE public.hijack_log")
        script = REPO / "python" / "pgqueue" / "sql" / f"pgqueue--{sql_version()}.sql"
        proc = subprocess.run([str(pg_bindir() / "psql"), "-X", "-q", *options, "-d", db,
                               "-f", str(script)], env=pg_server.libpq_env(), capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stderr
        assert hijacks(pg_server, db) == []
    finally:
        drop_database(pg_server, db)


def test_a_plain_upgrade_binds_nothing_another_role_planted_in_public(pg_server: Server, role: str) -> None:
    """The same for a plain install of release 0.1 upgraded by `pgqueue install` through every
    step script (each starts with extension/src/schema.sql, which pins search_path)."""
    import subprocess

    from helpers import pg_bindir
    from pgqueue.installer import install

    db = create_database(pg_server, "template0", prefix="plainhostile")
    try:
        script = REPO / "python" / "pgqueue" / "sql" / "pgqueue--0.1.sql"
        proc = subprocess.run([str(pg_bindir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-d", db,
                               "-f", str(script)], env=pg_server.libpq_env(), capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, proc.stderr
        plant_cast_beating_operators(pg_server, db, role)
        with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
            install(conn, "plain", report=lambda _: None)
            assert one(conn, "SELECT version FROM pgqueue.install") != "0.1"
        assert hijacks(pg_server, db) == []
    finally:
        drop_database(pg_server, db)


def test_plain_steps_run_by_psql_without_its_options_bind_nothing_planted(pg_server: Server, role: str) -> None:
    """A review's case: the step scripts run by psql without -1 or ON_ERROR_STOP. The guard's
    refusal did not stop psql, which ran the step statement by statement, unpinned: the new
    now_ms bound a planted `* (float8, integer)`, and the version stayed the one before. Each
    step is one statement now: pinned, and recorded."""
    import subprocess

    from helpers import pg_bindir
    from pgqueue.installer import sql_version

    sql_dir = REPO / "python" / "pgqueue" / "sql"
    db = create_database(pg_server, "template0", prefix="plainhostile")
    try:
        def psql(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(pg_bindir() / "psql"), "-X", "-q", *args, "-d", db],
                                  env=pg_server.libpq_env(), capture_output=True, text=True, check=False)

        proc = psql("-v", "ON_ERROR_STOP=1", "-1", "-f", str(sql_dir / "pgqueue--0.1.sql"))
        assert proc.returncode == 0, proc.stderr
        plant_cast_beating_operators(pg_server, db, role)
        for step in ("0.1--0.2", "0.2--0.3", f"0.3--{sql_version()}"):
            proc = psql("-f", str(sql_dir / f"pgqueue--{step}.sql"))
            assert proc.returncode == 0 and "ERROR" not in proc.stderr, (step, proc.stderr)
        with psycopg.connect(pg_server.dsn(db), autocommit=True) as conn:
            assert one(conn, "SELECT version FROM pgqueue.install") == sql_version()
        assert hijacks(pg_server, db) == []
    finally:
        drop_database(pg_server, db)


# -- a connection string's password is never echoed --------------------------------------------

#: URIs libpq cannot parse; it quotes the whole URI (or the token) in its error, password included.
MALFORMED_URIS = [
    "postgresql://mallory:TopSecret1@[::1/db",  # unterminated IPv6 address
    "postgresql://mallory:TopSecret2@[]/db",  # empty IPv6 address
    "postgresql://mallory:TopSecret3@[::1]x/db",  # a character after the address
    "postgresql://mallory:Top%zzSecret4@localhost/db",  # a bad percent-encoding in the password
    'postgresql://mallory:Top"Secret5@[]/db',  # a quote in the password, then an empty address
    "postgresql://mallory:Top Secret6@localhost/db",  # a space in the password
    "postgresql://mallory@localhost/db?password=Top Secret7",  # ... in a query parameter
    "postgresql://mallory:TopSecret8%00x@localhost/db",  # %00 in the password
    "host=localhost password=Top Secret9 dbname=db",  # key/value: a word without its "="
]


@pytest.mark.parametrize("uri", MALFORMED_URIS)
def test_a_malformed_connection_string_is_reported_without_its_password(capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        uri: str) -> None:
    """A typo in $PGQUEUE_DSN (a worker under systemd, a CI job) must not put the password in the
    logs: the CLI says the connection string is invalid, and why, without quoting it."""
    from pgqueue.cli import main

    monkeypatch.setenv("PGQUEUE_DSN", uri)
    for argv in (["stats"], ["stats", "--dsn", uri], ["--version"], ["worker", uri, "default", "os:getcwd"],
                 ["metrics", "--once"]):
        main(argv)
        out, err = capsys.readouterr()
        assert "Secret" not in out + err, (argv, out, err)
        assert "invalid connection string" in err or "not connected (invalid connection string" in out, (argv, out,
                                                                                                        err)
    # ... nor the library's own errors (what a program's log gets from a Worker or a Queue), nor
    # the cause they keep, which a traceback prints
    from pgqueue.errors import PgQueueError, translating

    with pytest.raises(PgQueueError) as raised, translating():
        psycopg.connect(uri)
    chain = [raised.value, raised.value.__cause__, raised.value.__context__ if not raised.value.__suppress_context__
             else None]
    assert all("Secret" not in str(e) for e in chain if e is not None), [str(e) for e in chain]


# -- what the CLI prints cannot drive the operator's terminal -----------------------------------


def test_listings_print_no_terminal_control_sequences(capsys: pytest.CaptureFixture[str], conn: Conn,
                                                      dsn: str) -> None:
    """Payloads come from producers and errors from handlers (often quoting their input): printed
    raw by `pgqueue dead list`, an escape sequence in one drives the terminal of whoever lists
    them (OSC 52 writes the clipboard, OSC 0 the title, CSI 8m hides what follows; U+202E turns
    the rest of the line around)."""
    from pgqueue import Queue
    from pgqueue.cli import main

    queue = Queue(conn, "default")
    queue.enqueue("\x1b]52;c;ZWNobyBoaQ==\x07\x1b[8m")
    (m,) = queue.dequeue()
    conn.execute("SELECT pgqueue.message_reject(%s, %s, %s)", (m.id, m.attempts, "bad \x1b]0;pwned\x07 \u202e"))
    assert main(["dead", "list", "default", "--dsn", dsn]) == 0
    out, _ = capsys.readouterr()
    assert not any(c in out for c in ("\x1b", "\x07", "\u202e")), repr(out)
    assert "\\x1b]52;c;" in out and "\\u202e" in out  # shown escaped, not dropped
