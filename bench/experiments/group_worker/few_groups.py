"""How fast one `pgqueue.Worker` drains a queue whose messages are in fewer groups than it has
slots: with a group limit of 1 only one message of a group is deliverable at a time, and the
next becomes deliverable when the previous one is acknowledged.

Usage (a server where the role may create databases; the database `group_worker` is made anew):
    .venv/bin/python bench/experiments/group_worker/few_groups.py [CONNINFO] [MESSAGES] [GROUPS...]

Prints, for each number of groups, the messages a second of a worker of 4 slots with a no-op
handler (defaults: "host=/var/run/postgresql", 300 messages, groups 1 2 1000), on a queue of
group_concurrency 1 and, for one group, 0 (no limit).
"""

from __future__ import annotations

import sys
import threading
import time

import psycopg
from psycopg.conninfo import make_conninfo

from pgqueue import Message, Queue, Worker


def drain(server: str, concurrency: int, messages: int, groups: int) -> float:
    with psycopg.connect(make_conninfo(server, dbname="postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS group_worker")
        conn.execute("CREATE DATABASE group_worker")
    dsn = make_conninfo(server, dbname="group_worker")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgqueue")
    queue = Queue(dsn, "g")
    queue.create(group_concurrency=concurrency)
    queue.enqueue_many(list(range(messages)), groups=[f"g{i % groups}" for i in range(messages)])
    done: list[int] = []

    def handle(msg: Message) -> None:
        done.append(msg.id)

    worker = Worker(queue, handle, concurrency=4, handle_signals=False)
    started = time.monotonic()
    thread = threading.Thread(target=worker.run)
    thread.start()
    while len(done) < messages and time.monotonic() - started < 300:
        time.sleep(0.005)
    took = time.monotonic() - started
    worker.stop()
    thread.join()
    queue.close()
    return len(done) / took


def main() -> None:
    server = sys.argv[1] if len(sys.argv) > 1 else "host=/var/run/postgresql"
    messages = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    counts = [int(a) for a in sys.argv[3:]] or [1, 2, 1000]
    for groups in counts:
        print(f"group_concurrency 1, {groups} group(s): {drain(server, 1, messages, groups):,.0f} messages/s", flush=True)
    print(f"group_concurrency 0, 1 group: {drain(server, 0, messages, 1):,.0f} messages/s", flush=True)
    with psycopg.connect(make_conninfo(server, dbname="postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS group_worker")


if __name__ == "__main__":
    main()
