"""Rate-limit re-base under bursts (a review, session 86): CONSUMERS consumers take from a
rate-limited queue in synchronized bursts separated by idle gaps, so that they find the queue idle
together and re-base its slot counter at once (pgqueue._rate_take). A burst lost slots when it
delivered more than the counter rose past the slot due at its release plus the catch-up
allowance: every message handed out takes a slot above the re-base floor, so more than that
means a setval wrote over slots another consumer had taken.

usage: DSN=... burst.py RATE CONSUMERS LIMIT SECONDS [GAPS_MS]   e.g. burst.py 100 8 5 30
  DSN      a database with the pgqueue extension (default "host=/var/run/postgresql
           dbname=rate_rebase"); queue "rq" is made afresh and dropped at the end
  GAPS_MS  the idle gaps to choose from, comma-separated (default 51,55,60,80,120,300)
Prints the bursts that lost slots (at most 10), then a summary line.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import psycopg

DSN = os.environ.get("DSN", "host=/var/run/postgresql dbname=rate_rebase")
RATE, CONSUMERS, LIMIT = (int(a) for a in sys.argv[1:4])
SECONDS = float(sys.argv[4])
GAPS = [int(x) for x in (sys.argv[5] if len(sys.argv) > 5 else "51,55,60,80,120,300").split(",")]
BURST_MS = 30
ALLOWANCE = (RATE + 19) // 20  # the catch-up allowance (pgqueue._rate_room)
QUEUE = "rq"


def main() -> None:
    admin = psycopg.connect(DSN, autocommit=True)
    admin.execute("SELECT pgqueue.queue_drop(%s)", (QUEUE,))
    admin.execute("SELECT pgqueue.queue_create(%s, p_rate_limit => %s)", (QUEUE, RATE))
    row = admin.execute("SELECT id FROM pgqueue.queue WHERE name = %s", (QUEUE,)).fetchone()
    assert row is not None
    seq = f"pgqueue.queue_rate_{row[0] & 63}"
    n = int(RATE * SECONDS * 2 + CONSUMERS * LIMIT * 10 + 1000)
    admin.execute("SELECT count(*) FROM pgqueue.message_create_batch(%s, array_fill('x'::bytea, ARRAY[%s]))",
                  (QUEUE, n))
    delivered: list[int] = []
    lock = threading.Lock()
    start, end = threading.Barrier(CONSUMERS + 1), threading.Barrier(CONSUMERS + 1)
    stop = threading.Event()
    burst_end = [0.0]
    errors: list[BaseException] = []

    def consumer() -> None:
        try:
            with psycopg.connect(DSN, autocommit=True) as c:
                while True:
                    start.wait()
                    if stop.is_set():
                        return
                    first = True
                    while first or time.monotonic() < burst_end[0]:
                        first = False
                        got = c.execute("SELECT id FROM pgqueue.message_dequeue(%s, %s, 0)", (QUEUE, LIMIT)).fetchall()
                        with lock:
                            delivered.extend(r[0] for r in got)
                    end.wait()
        except BaseException as exc:  # (reported below)
            errors.append(exc)
            start.abort()
            end.abort()

    threads = [threading.Thread(target=consumer) for _ in range(CONSUMERS)]
    for t in threads:
        t.start()
    bursts: list[tuple[int, int, int]] = []  # (the release's slot, the counter after it, delivered)
    until = time.monotonic() + SECONDS
    while time.monotonic() < until:
        time.sleep(random.choice(GAPS) / 1000)
        now = admin.execute("SELECT pgqueue.now_ms()").fetchone()
        assert now is not None
        before = len(delivered)
        burst_end[0] = time.monotonic() + BURST_MS / 1000
        start.wait()
        end.wait()
        counter = admin.execute("SELECT pg_sequence_last_value(%s::regclass)", (seq,)).fetchone()
        assert counter is not None
        bursts.append((now[0] * RATE // 1000, counter[0], len(delivered) - before))
    stop.set()
    start.wait()
    for t in threads:
        t.join()
    assert not errors, errors
    lost = [(slot, last, d) for slot, last, d in bursts if d > last - slot + ALLOWANCE]
    for slot, last, d in lost[:10]:
        print(f"lost slots: delivered {d} > counter {last} - slot at the release {slot} + allowance {ALLOWANCE}")
    print(f"rate {RATE} consumers {CONSUMERS} limit {LIMIT}: {len(bursts)} bursts, {len(delivered)} delivered, "
          f"{len(lost)} lost slots")
    admin.execute("SELECT pgqueue.queue_drop(%s)", (QUEUE,))


if __name__ == "__main__":
    main()
