"""message_cancel against message_complete_batch on a queue of group concurrency 2, both single
autocommit calls started together (a random offset of 0-3 ms), N times.

Each round: g0 has two leases and a message waiting for its turn (W), g3 a lease and a ready
message with its turn (X). The cancel lists W and X; the batch completes the leases of g3 and
g0, so it holds g3's lock while it hands g0's turn to W. Before session 54 the cancel locked W
with its other rows first and then asked for g3's lock: a deadlock between two single calls
(a review's script: 151 in 2,000 rounds; after the fix 0 in 2,000).

Usage: race.py N [DSN]  (DSN: a server where the role may create databases; the database
"race" is dropped and made again)
"""

from __future__ import annotations

import collections
import random
import sys
import threading
import time
from typing import Any

import psycopg

DSN = sys.argv[2] if len(sys.argv) > 2 else "host=/tmp/dl/pg port=5491 user=postgres"


def main(rounds: int) -> None:
    with psycopg.connect(DSN + " dbname=postgres", autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS race")
        admin.execute("CREATE DATABASE race")
    dsn = DSN + " dbname=race"
    setup = psycopg.connect(dsn, autocommit=True)
    setup.execute("CREATE EXTENSION pgqueue")
    setup.execute("SELECT pgqueue.queue_create('qc2', p_lock_ms => 60000, p_group_concurrency => 2)")

    def make(group: str) -> int:
        row = setup.execute("SELECT pgqueue.message_create('qc2', 'x'::bytea, NULL, NULL, %s)", (group,)).fetchone()
        assert row is not None
        return int(row[0])

    outcomes: collections.Counter[tuple[str, str | None]] = collections.Counter()
    contexts: dict[str, str] = {}

    def call(conn: psycopg.Connection[Any], name: str, statement: str, args: tuple[Any, ...],
             start: threading.Barrier) -> None:
        start.wait()
        time.sleep(random.random() * 0.003)
        try:
            conn.execute(statement, args).fetchall()
            outcomes[(name, "ok")] += 1
        except psycopg.Error as exc:
            outcomes[(name, exc.sqlstate)] += 1
            contexts[name] = (exc.diag.context or str(exc)).splitlines()[-1]

    canceller = psycopg.connect(dsn, autocommit=True)
    completer = psycopg.connect(dsn, autocommit=True)
    for _ in range(rounds):
        setup.execute("SELECT pgqueue.message_cancel('qc2', ARRAY(SELECT id FROM pgqueue.message))")
        setup.execute("DELETE FROM pgqueue.message")  # the leases the cancel leaves
        lease_g0 = make("g0")
        make("g0")
        lease_g3 = make("g3")
        tokens: dict[int, int] = dict(setup.execute("SELECT id, attempts FROM pgqueue.message_dequeue('qc2', 3)").fetchall())
        ready_g3 = make("g3")
        waiting_g0 = make("g0")
        start = threading.Barrier(2)
        threads = [
            threading.Thread(target=call, args=(canceller, "cancel", "SELECT count(*) FROM pgqueue.message_cancel('qc2', %s)",
                                                ([waiting_g0, ready_g3],), start)),
            threading.Thread(target=call, args=(completer, "complete_batch", "SELECT pgqueue.message_complete_batch(%s, %s)",
                                                ([lease_g3, lease_g0], [tokens[lease_g3], tokens[lease_g0]]), start)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print("rounds", rounds, dict(outcomes))
    print(contexts)


if __name__ == "__main__":
    main(int(sys.argv[1]))
