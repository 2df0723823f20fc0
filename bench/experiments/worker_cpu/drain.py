"""Where the worker's time goes, end to end (issue 13's "worker >= 2x pgmq read + delete").

Fills the queue 'bench' with N messages, starts 4 ``pgqueue worker DSN bench bench.noop:handle
--concurrency C`` processes (as bench/worker_e2e.py does), and, between the moments when 90% and
10% of the backlog are left, reads the CPU time (user + system, from /proc) of the worker
processes and of the server's processes (those of the user running the server). Prints the
drain rate and the CPU per message of each side.

Usage (root or the server's user, from the repository root, a database with pgqueue and a queue
named 'bench', the server on the same machine):
    .venv/bin/python bench/experiments/worker_cpu/drain.py DSN [N] [CONCURRENCY] [ROUNDS] [SERVER_USER] [HANDLER]

HANDLER defaults to bench.noop:handle (a plain function: the worker runs it on its handler
threads); bench.noop:handle_async is the same as a coroutine (run as a task on the event loop).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def cpu_seconds(pids: list[int]) -> float:
    ticks = 0
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ticks += int(fields[11]) + int(fields[12])  # utime, stime
        except FileNotFoundError:
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def server_pids(user: str) -> list[int]:
    out = subprocess.run(["pgrep", "-u", user, "postgres"], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def drain(dsn: str, n: int, concurrency: int, server_user: str, handler: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgqueue.message, pgqueue.queue_size, pgqueue.dead_letter")
        conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('bench', "
                     "array_fill('\\x0102'::bytea, ARRAY[%s::int]))", [n])
        conn.execute("VACUUM ANALYZE pgqueue.message")
        argv = [sys.executable, "-m", "pgqueue", "worker", dsn, "bench", handler,
                "--concurrency", str(concurrency), "--quiet"]
        procs = [subprocess.Popen(argv, cwd=REPO) for _ in range(4)]
        marks: dict[str, tuple[float, int, float, float]] = {}
        try:
            while "b" not in marks:
                row = conn.execute("SELECT count(*) FROM pgqueue.message").fetchone()
                left = int(row[0]) if row else 0
                now = (time.perf_counter(), left, cpu_seconds([p.pid for p in procs]),
                       cpu_seconds(server_pids(server_user)))
                if left <= 0.9 * n and "a" not in marks:
                    marks["a"] = now
                if left <= 0.1 * n:
                    marks["b"] = now
                if any(p.poll() is not None for p in procs):
                    raise SystemExit("a worker exited")
                time.sleep(0.05)
        finally:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait()
    (ta, la, wa, sa), (tb, lb, wb, sb) = marks["a"], marks["b"]
    done = la - lb
    return (f"{done / (tb - ta):,.0f} msg/s; worker CPU {(wb - wa) / done * 1e6:.0f} us/msg; "
            f"server CPU {(sb - sa) / done * 1e6:.0f} us/msg")


def main(argv: list[str]) -> None:
    dsn = argv[0]
    n = int(argv[1]) if len(argv) > 1 else 80_000
    concurrency = int(argv[2]) if len(argv) > 2 else 4
    rounds = int(argv[3]) if len(argv) > 3 else 3
    user = argv[4] if len(argv) > 4 else "postgres"
    handler = argv[5] if len(argv) > 5 else "bench.noop:handle"
    for r in range(rounds):
        print(f"round {r + 1}: {drain(dsn, n, concurrency, user, handler)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
