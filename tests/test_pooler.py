"""pgqueue through PgBouncer in transaction mode (README, "Behind a connection pooler").

Such a pooler lends a server connection to one client for one transaction, then to another.
psycopg prepares a statement on the server session after its 5th run, under a name such as
``_pg3_0``: behind PgBouncer 1.18 (Debian 12's, and any up to 1.20, or a later one with
``max_prepared_statements = 0``) two clients' ``_pg3_0`` met on a shared server
connection ("prepared statement "_pg3_0" already exists"), or one's was missing on the next
connection lent. A review ran two Workers of 4 slots through it: both threads died after 48 of
2,000 messages; ``pgqueue metrics`` scrapes answered ``pgqueue_up 0``, ``pgqueue stats --watch``
ended with exit 1. The connections pgqueue opens itself now turn prepared statements off when
their backend pid is not their server process's (the pooler's made-up pid), and a worker whose
LISTEN connection goes through a pooler says that wake-ups reach it only in session mode.

PgBouncer is a test dependency (scripts/bootstrap.sh installs Debian's): without it these tests
fail, they never skip. It runs as the server does (as root: as the ``postgres`` user).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from conftest import Server
from pgqueue import AsyncQueue, AsyncWorker, Message, Queue, Worker, _connect
from pgqueue.metrics import QueueMetrics
from pgqueue.embedded import _drop_privileges, _unprivileged_user
from test_worker import PGQUEUE, Started, make_queue, stop_and_time, wait_for

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


@dataclass(frozen=True)
class Bouncer:
    port: int
    log: Path

    def dsn(self, server: Server, dbname: str) -> str:
        return make_conninfo("", host="127.0.0.1", port=str(self.port), dbname=dbname, user=server.user,
                             connect_timeout="10")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def bouncer(pg_server: Server) -> Iterator[Bouncer]:
    """PgBouncer in transaction mode in front of the test server, 2 server connections a database."""
    assert Path(PGBOUNCER).exists(), "pgbouncer is missing: scripts/bootstrap.sh installs Debian's package"
    base = Path(tempfile.mkdtemp(prefix="pgqueue-pgbouncer-"))
    user = _unprivileged_user()  # (PgBouncer refuses to run as root)
    port = _free_port()
    log = base / "pgbouncer.log"
    # auth_type any: the server's user of each database entry logs in, whatever the client says
    (base / "pgbouncer.ini").write_text(f"""[databases]
* = host={pg_server.host} port={pg_server.port} user={pg_server.user}
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
logfile = {log}
""")
    if user is not None:
        shutil.chown(base, user, user)
        for path in base.iterdir():
            shutil.chown(path, user, user)
    proc = subprocess.Popen(_drop_privileges(user, [PGBOUNCER, str(base / "pgbouncer.ini")]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read() if proc.stdout is not None else ""
                    raise AssertionError(f"pgbouncer did not start: {out} {log.read_text() if log.exists() else ''}")
                time.sleep(0.05)
        yield Bouncer(port, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pooled_dsn(bouncer: Bouncer, pg_server: Server, dbname: str) -> str:
    return bouncer.dsn(pg_server, dbname)


def test_pgqueue_connections_through_the_pooler_prepare_no_statement(pooled_dsn: str, dsn: str) -> None:
    with _connect.connect(pooled_dsn, autocommit=True) as conn:
        assert conn.prepare_threshold is None and _connect.behind_pooler(conn)
        assert conn.info.backend_pid != conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    with _connect.connect(pooled_dsn) as conn:  # (a transaction of its own: none left open)
        assert conn.prepare_threshold is None
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with _connect.connect(pooled_dsn, prepare_threshold=3) as conn:  # the caller's choice stands
        assert conn.prepare_threshold == 3 and not _connect.behind_pooler(conn)
    with _connect.connect(dsn) as conn:  # straight to the server: psycopg's default
        assert conn.prepare_threshold == 5 and not _connect.behind_pooler(conn)

    async def run() -> tuple[int | None, bool, int | None]:
        async with await _connect.connect_async(pooled_dsn, autocommit=True) as pooled, \
                await _connect.connect_async(dsn) as direct:
            return pooled.prepare_threshold, _connect.behind_pooler(pooled), direct.prepare_threshold

    assert asyncio.run(run()) == (None, True, 5)


def test_clients_through_the_pooler_share_its_server_connections_without_an_error(pooled_dsn: str) -> None:
    """Four threads, each a Queue of its own connection string, enqueue, take and complete
    through 2 server connections: more than 5 runs of each statement (psycopg's threshold)."""
    make_queue(pooled_dsn)
    taken: list[int] = []
    errors: list[BaseException] = []

    def client(n: int) -> None:
        try:
            with Queue(pooled_dsn, "jobs") as queue:
                for i in range(15):
                    queue.enqueue_many([f"{n}-{i}-a", f"{n}-{i}-b"])
                    msgs = queue.dequeue(2, lock_ms=30_000)
                    queue.complete_many(msgs)
                    taken.extend(m.id for m in msgs)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    with Queue(pooled_dsn, "jobs") as queue:  # (a take may have found the others' messages leased)
        rest = queue.dequeue(100, lock_ms=0)
    assert len(taken) + len(rest) == len({*taken, *(m.id for m in rest)}) == 120


@pytest.mark.parametrize("kind", ["Worker", "AsyncWorker"])
def test_workers_through_the_pooler_handle_every_message_once(pooled_dsn: str, kind: str,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pgqueue")
    make_queue(pooled_dsn).enqueue_many([str(i) for i in range(400)])
    handled: list[int] = []
    lock = threading.Lock()

    def handle(msg: Message) -> None:
        with lock:
            handled.append(msg.id)

    async def handle_async(msg: Message) -> None:
        handle(msg)

    workers = [Started(Worker(Queue(pooled_dsn, "jobs"), handle, concurrency=4, poll_max=0.2)
                       if kind == "Worker" else
                       AsyncWorker(AsyncQueue(pooled_dsn, "jobs"), handle_async, concurrency=4, poll_max=0.2))
               for _ in range(2)]
    try:
        wait_for(lambda: len(handled) >= 400 or any(not w.thread.is_alive() for w in workers), timeout=120,
                 what="the 400 messages")
    finally:
        for w in workers:
            stop_and_time(w)
    assert not [e for w in workers for e in w.errors], [e for w in workers for e in w.errors]
    assert len(handled) == len(set(handled)) == 400
    warned = [r.getMessage() for r in caplog.records if "goes through a connection pooler" in r.getMessage()]
    assert len(warned) == 2 and "only if the pooler runs in session mode" in warned[0], warned  # (one a worker)


def test_the_commands_through_the_pooler(pooled_dsn: str) -> None:
    """`pgqueue stats --watch` ended with exit 1 after 5 refreshes, `pgqueue metrics` answered
    `pgqueue_up 0` to some scrapes (a review): each reads on one connection again and again."""
    make_queue(pooled_dsn).enqueue_many(["a", "b"])
    proc = subprocess.run(["timeout", "--signal=INT", "4", str(PGQUEUE), "stats", "--watch", "0.1"],
                          env={**os.environ, "PGQUEUE_DSN": pooled_dsn}, capture_output=True, text=True,
                          timeout=60, check=False)
    assert "error" not in proc.stderr.lower(), proc.stderr
    assert proc.stdout.count("jobs") >= 10, proc.stdout  # (a refresh every 0.1 s for 4 s)
    metrics = QueueMetrics(pooled_dsn, min_interval=0)
    try:
        for _ in range(12):
            out = metrics.render()
            assert "pgqueue_up 1" in out and metrics.error is None, (out, metrics.error)
    finally:
        metrics.close()


def test_a_scrape_through_a_saturated_pooler_ends_within_its_timeout(pooled_dsn: str) -> None:
    """The check that turns prepared statements off waits for a server connection as any query
    does: with both of the pool's server connections held by open transactions, a metrics
    scrape with a 2-s timeout hung in it past the timeout (up to PgBouncer's query_wait_timeout,
    120 s: a review). It runs within the reading's limits now: pgqueue_up 0 in seconds."""
    make_queue(pooled_dsn)
    holders = [psycopg.connect(pooled_dsn) for _ in range(2)]  # (each transaction holds a server connection)
    try:
        for holder in holders:
            holder.execute("SELECT 1")  # (a transaction begins: not autocommit)
        metrics = QueueMetrics(pooled_dsn, timeout=2)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(metrics.render()), daemon=True)
        started = time.monotonic()
        reader.start()
        reader.join(30)
        took = time.monotonic() - started
        assert not reader.is_alive(), "the scrape still waits after 30 s"
        assert "pgqueue_up 0" in out[0] and took < 15, (took, out)
        metrics.close()
    finally:
        for holder in holders:
            holder.close()
