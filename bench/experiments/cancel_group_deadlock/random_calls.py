"""Randomized single-call autocommit race on grouped queues (concurrency 1 and 2, keys).

Counts 40P01 by the pair of calls in the deadlock DETAIL.

What it measures: NWORKERS threads (plus one thread that alters qg2 every 0.5 s) each run a
seeded random mix of single pgqueue calls in autocommit (create, create_batch, dequeue,
complete_and_dequeue, complete, complete_batch, heartbeat, heartbeat_batch, fail, reject, defer,
dead_letter_requeue and cancel) on two grouped queues, qg1 (group concurrency 1) and qg2 (group
concurrency 2), with message keys, for SECONDS seconds. It prints the calls made, the deadlocks
(SQLSTATE 40P01) by victim call and by the pair of calls named in the error DETAIL, the other
errors, and the deadlocks by call set read from the part of the server log written during the
run. CANCELFN picks the cancel under test: "new" is pgqueue.message_cancel, "old" is
pgqueue.message_cancel_old, loaded from the file given by --cancel-old-sql.

Usage: random_calls.py SECONDS SEED NWORKERS CANCELFN(new|old) [DB]
           [--dsn DSN] [--log SERVER_LOG] [--cancel-old-sql FILE]

DSN is a server where the role may create databases (the database DB, default "race", is
dropped and made again, with the pgqueue extension); SERVER_LOG is that server's log file.

From a review in session 54 (the deadlock between message_cancel and the grouped-queue calls).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg

DEFAULT_DSN = "host=/tmp/dl/pg port=5491 user=postgres"
DEFAULT_LOG = "/tmp/dl/pg/log"
DEFAULT_CANCEL_OLD_SQL = "/tmp/rv_s54/cancel_old.sql"

QUEUES = {
    "qg1": dict(p_lock_ms=150, p_max_attempts=3, p_group_concurrency=1, p_key_window_ms=300),
    "qg2": dict(p_lock_ms=150, p_max_attempts=3, p_group_concurrency=2, p_key_window_ms=300),
}
QW = ["qg1", "qg2"]
lk = threading.Lock()
calls: collections.Counter[str] = collections.Counter()
dead: collections.Counter[str] = collections.Counter()
pairs: collections.Counter[tuple[str, ...]] = collections.Counter()
errs: collections.Counter[tuple[str, str | None, str]] = collections.Counter()
details: list[tuple[str, ...]] = []
NAMES = [
    ("message_cancel_old", "cancel"),
    ("message_cancel", "cancel"),
    ("message_create_batch", "create_batch"),
    ("message_create", "create"),
    ("message_complete_and_dequeue", "cad"),
    ("message_complete_batch", "complete_batch"),
    ("message_complete", "complete"),
    ("message_heartbeat_batch", "heartbeat_batch"),
    ("message_heartbeat", "heartbeat"),
    ("message_dequeue", "dequeue"),
    ("message_fail", "fail"),
    ("message_reject", "reject"),
    ("message_defer", "defer"),
    ("dead_letter_requeue", "requeue"),
    ("queue_alter", "alter"),
]


@dataclass(frozen=True)
class Config:
    dsn: str
    db: str
    dur: float
    seed: int
    nw: int
    fn: str
    log: str
    cancel_old_sql: str | None  # the SQL text, only for the 'old' variant

    def conninfo(self, dbname: str) -> str:
        return f"{self.dsn} dbname={dbname}"


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(
        description="Randomized single-call autocommit race on grouped queues; counts 40P01 by call pair."
    )
    p.add_argument("duration", type=float, help="seconds to run")
    p.add_argument("seed", type=int, help="random seed")
    p.add_argument("workers", type=int, help="number of worker threads (an alterer thread is added)")
    p.add_argument(
        "cancelfn",
        choices=("new", "old"),
        help="new: pgqueue.message_cancel; old: pgqueue.message_cancel_old (loaded from --cancel-old-sql)",
    )
    p.add_argument("db", nargs="?", default="race", help="database to drop and create (default: %(default)s)")
    p.add_argument("--dsn", default=DEFAULT_DSN, help="server connection string, without dbname (default: %(default)s)")
    p.add_argument("--log", default=DEFAULT_LOG, help="the server's log file (default: %(default)s)")
    p.add_argument(
        "--cancel-old-sql",
        default=DEFAULT_CANCEL_OLD_SQL,
        help="SQL file defining pgqueue.message_cancel_old, read only for 'old' (default: %(default)s)",
    )
    a = p.parse_args(argv)
    cancel_old_sql = None
    if a.cancelfn == "old":
        try:
            with open(a.cancel_old_sql) as f:
                cancel_old_sql = f.read()
        except OSError as e:
            p.error(f"--cancel-old-sql: cannot read {a.cancel_old_sql}: {e.strerror}")
    return Config(
        dsn=a.dsn,
        db=a.db,
        dur=a.duration,
        seed=a.seed,
        nw=a.workers,
        fn="message_cancel" if a.cancelfn == "new" else "message_cancel_old",
        log=a.log,
        cancel_old_sql=cancel_old_sql,
    )


def callname(q: str) -> str:
    for k, v in NAMES:
        if k in q:
            if v == "dequeue" and ", 0)" in q:
                return "dequeue_del"
            if v == "cad" and ", 0)" in q:
                return "cad_del"
            return v
    return q[:40]


def admin(cfg: Config) -> None:
    c = psycopg.connect(cfg.conninfo("postgres"), autocommit=True)
    c.execute(f"DROP DATABASE IF EXISTS {cfg.db}")
    c.execute(f"CREATE DATABASE {cfg.db}")
    c.close()
    c = psycopg.connect(cfg.conninfo(cfg.db), autocommit=True)
    c.execute("CREATE EXTENSION pgqueue")
    if cfg.cancel_old_sql is not None:
        c.execute(cfg.cancel_old_sql)
    for q, kw in QUEUES.items():
        args = ", ".join(f"{k} => %({k})s" for k in kw)
        c.execute(f"SELECT pgqueue.queue_create(%(q)s, {args})", dict(q=q, **kw))
    c.close()


def call(conn: psycopg.Connection[Any], name: str, q: str, sql: Any, args: Any) -> Any:
    try:
        rows = conn.execute(sql, args).fetchall()
        with lk:
            calls[name] += 1
        return rows
    except psycopg.Error as e:
        with lk:
            calls[name] += 1
            if e.sqlstate == "40P01":
                dead[name] += 1
                det = e.diag.message_detail or ""
                qs = re.findall(r"Process \d+: (.*)", det)
                pair = tuple(sorted(callname(x) for x in qs))
                pairs[pair] += 1
                details.append((name, q, det.replace("\n", " | "), (e.diag.context or "").replace("\n", " | ")))
            else:
                errs[(name, e.sqlstate, str(e).splitlines()[0][:40])] += 1
        return None


def lit(v: int | str | None) -> str:
    return "NULL" if v is None else repr(v) if isinstance(v, int) else "'" + v + "'"


def worker(cfg: Config, wid: int) -> None:
    rnd = random.Random(cfg.seed * 100 + wid)
    conn = psycopg.connect(cfg.conninfo(cfg.db), autocommit=True)
    conn.execute("SET deadlock_timeout = '300ms'")
    leases: list[Any] = []
    stop = time.time() + cfg.dur
    keyspace = [f"k{i}" for i in range(30)]
    groups = [f"g{i}" for i in range(6)]
    while time.time() < stop:
        q = rnd.choice(QW)
        op = rnd.random()
        if op < 0.16:
            key = rnd.choice(keyspace) if rnd.random() < 0.4 else None
            grp = rnd.choice(groups) if rnd.random() < 0.85 else None
            at = None
            r = rnd.random()
            if r < 0.1:
                at = int(time.time() * 1000) + rnd.randint(50, 400)
            call(
                conn, "create", q, "SELECT pgqueue.message_create(%s, 'x'::bytea, %s, NULL, %s, %s)", (q, at, grp, key)
            )
        elif op < 0.26:
            n = rnd.randint(1, 12)
            keys = None
            grps = None
            if rnd.random() < 0.5:
                keys = [rnd.choice(keyspace + [None] * 30) for _ in range(n)]
                if len(set(k for k in keys if k)) != len([k for k in keys if k]):
                    keys = None
            if rnd.random() < 0.85:
                grps = [rnd.choice(groups + [None]) for _ in range(n)]
            call(
                conn,
                "create_batch",
                q,
                "SELECT pgqueue.message_create_batch(%s, %s, p_groups => %s, p_keys => %s)",
                (q, [b"y"] * n, grps, keys),
            )
        elif op < 0.46:
            n = rnd.choice([1, 1, 2, 5, 20])
            lm = 0 if rnd.random() < 0.3 else None
            name = "dequeue_del" if lm == 0 else "dequeue"
            rows = call(conn, name, q, f"SELECT id, attempts FROM pgqueue.message_dequeue(%s, %s, {lit(lm)})", (q, n))
            if rows and lm is None:
                leases.extend((q, i, a) for i, a in rows)
        elif op < 0.52:
            mine = [lease for lease in leases if lease[0] == q][: rnd.randint(0, 3)]
            for lease in mine:
                leases.remove(lease)
            lm = 0 if rnd.random() < 0.2 else None
            rows = call(
                conn,
                "cad_del" if lm == 0 else "cad",
                q,
                f"SELECT id, attempts, stale FROM pgqueue.message_complete_and_dequeue(%s, %s, %s, %s, {lit(lm)})",
                ([lease[1] for lease in mine], [lease[2] for lease in mine], q, rnd.choice([1, 3])),
            )
            if rows and lm is None:
                leases.extend((q, i, a) for i, a, s in rows if not s)
        elif op < 0.76 and leases:
            lq, i, a = leases.pop(rnd.randrange(len(leases)))
            r = rnd.random()
            if r < 0.2:
                call(conn, "complete", lq, "SELECT pgqueue.message_complete(%s,%s)", (i, a))
            elif r < 0.45:
                batch = [(lq, i, a)] + [
                    leases.pop(rnd.randrange(len(leases))) for _ in range(min(len(leases), rnd.randint(0, 9)))
                ]
                rnd.shuffle(batch)
                call(
                    conn,
                    "complete_batch",
                    lq,
                    "SELECT pgqueue.message_complete_batch(%s,%s)",
                    ([b[1] for b in batch], [b[2] for b in batch]),
                )
            elif r < 0.55:
                batch = [(lq, i, a)] + [
                    leases.pop(rnd.randrange(len(leases))) for _ in range(min(len(leases), rnd.randint(0, 9)))
                ]
                rnd.shuffle(batch)
                rows = call(
                    conn,
                    "heartbeat_batch",
                    lq,
                    "SELECT pgqueue.message_heartbeat_batch(%s,%s)",
                    ([b[1] for b in batch], [b[2] for b in batch]),
                )
                if rows:
                    stale = set(rows[0][0] or [])
                    leases.extend(b for b in batch if b[1] not in stale)
            elif r < 0.68:
                call(
                    conn,
                    "fail",
                    lq,
                    "SELECT pgqueue.message_fail(%s,%s,'e', %s)",
                    (i, a, int(time.time() * 1000) + rnd.choice([0, 100])),
                )
            elif r < 0.74:
                call(conn, "reject", lq, "SELECT pgqueue.message_reject(%s,%s,'r')", (i, a))
            elif r < 0.82:
                call(
                    conn,
                    "defer",
                    lq,
                    "SELECT pgqueue.message_defer(%s,%s,%s)",
                    (i, a, int(time.time() * 1000) + rnd.choice([0, 50, 200])),
                )
            else:
                rows = call(conn, "heartbeat", lq, "SELECT pgqueue.message_heartbeat(%s,%s)", (i, a))
                if rows and rows[0][0]:
                    leases.append((lq, i, a))
        elif op < 0.80:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM pgqueue.dead_letter WHERE queue_id=(select id from pgqueue.queue where name=%s)"
                    " ORDER BY random() LIMIT %s",
                    (q, rnd.randint(1, 5)),
                ).fetchall()
            ]
            if ids:
                call(conn, "requeue", q, "SELECT pgqueue.dead_letter_requeue(%s, %s)", (q, ids))
        elif op < 0.99:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM pgqueue.message WHERE queue_id=(select id from pgqueue.queue where name=%s)"
                    " ORDER BY (group_key IS NOT NULL AND turn_at IS NULL) DESC, random() LIMIT %s",
                    (q, rnd.randint(1, 6)),
                ).fetchall()
            ]
            if ids:
                call(conn, "cancel", q, f"SELECT count(*) FROM pgqueue.{cfg.fn}(%s, %s)", (q, ids))
        else:
            time.sleep(rnd.random() * 0.02)
    conn.close()


def alterer(cfg: Config) -> None:
    conn = psycopg.connect(cfg.conninfo(cfg.db), autocommit=True)
    stop = time.time() + cfg.dur
    rnd = random.Random(cfg.seed)
    while time.time() < stop:
        time.sleep(0.5)
        call(conn, "alter", "qg2", "SELECT pgqueue.queue_alter('qg2', p_lock_ms => %s)", (rnd.choice([150, 200]),))


def main(argv: list[str] | None = None) -> None:
    cfg = parse_args(argv)
    off0 = os.path.getsize(cfg.log)
    admin(cfg)
    ts = [threading.Thread(target=worker, args=(cfg, i)) for i in range(cfg.nw)]
    ts.append(threading.Thread(target=alterer, args=(cfg,)))
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(f"fn {cfg.fn} duration {time.time() - t0:.1f}s seed {cfg.seed} workers {cfg.nw}")
    print("total calls", sum(calls.values()), "deadlocks", sum(dead.values()))
    print("calls:", dict(sorted(calls.items())))
    print("deadlocks by victim:", dict(dead))
    print("deadlocks by pair:", dict(pairs))
    print("other errors:", dict(errs))
    logp: collections.Counter[Any] = collections.Counter()
    with open(cfg.log, errors="replace") as f:
        f.seek(off0)
        text = f.read()
    for blk in text.split("ERROR:  deadlock detected")[1:]:
        blk = blk.split("STATEMENT:")[0]
        qs = re.findall(r"Process \d+: (.*)", blk)
        logp[tuple(sorted(callname(x) for x in qs))] += 1
    print("deadlocks by call set (server log):", dict(logp))
    for d in details[:6]:
        print("DL", *d, sep=" :: ")


if __name__ == "__main__":
    main()
