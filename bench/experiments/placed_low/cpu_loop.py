"""Server CPU per call of one SQL expression in several databases, alternated.

Usage: python cpu_loop.py N ROUNDS 'SQL expression' DB [DB ...]

One session per database (synchronous_commit off), its backend pinned to CPU 1 (taskset), runs
`DO $$ ... PERFORM <expression>; COMMIT; ... $$` N times per round; the backend's utime + stime
(/proc/PID/stat, clock ticks) over the round, divided by N, is the CPU a call, commit included.
The databases take turns round by round; prints the median and every round of each. Pinning
the backends to one CPU halved the spread between rounds on this 2-core machine.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
from collections.abc import Callable

import psycopg

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


Session = tuple[psycopg.Connection[tuple[object, ...]], int]


def pinned_session(db: str) -> Session:
    """An autocommit session on db (synchronous_commit off) and its backend's pid, pinned to CPU 1."""
    conn = psycopg.connect(f"dbname={db}", autocommit=True)
    conn.execute("SET synchronous_commit = off")
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    subprocess.run(["taskset", "-p", "-c", "1", str(row[0])], check=True, capture_output=True)
    return conn, int(row[0])


def paired_rounds(sessions: list[Session], rounds: int, n: int,
                  run: Callable[[int, int, psycopg.Connection[tuple[object, ...]]], None]) -> None:
    """Run run(database index, round, connection) for both sessions in each round, the order
    swapped every round; print the medians of CPU per call (n calls a run), the median
    difference B - A and how many rounds B used less."""
    a_us: list[float] = []
    b_us: list[float] = []
    for r in range(rounds):
        took = [0.0, 0.0]
        for i in ([0, 1] if r % 2 == 0 else [1, 0]):
            conn, pid = sessions[i]
            before = cpu_seconds(pid)
            run(i, r, conn)
            took[i] = (cpu_seconds(pid) - before) / n * 1e6
        a_us.append(took[0])
        b_us.append(took[1])
    diffs = [b - a for a, b in zip(a_us, b_us)]
    print(f"A median {statistics.median(a_us):.1f} us  B median {statistics.median(b_us):.1f} us  "
          f"B - A median {statistics.median(diffs):+.1f} us  B lower in {sum(d < 0 for d in diffs)} of {rounds}")


def main(argv: list[str]) -> None:
    n, rounds, expression, dbs = int(argv[0]), int(argv[1]), argv[2], argv[3:]
    sessions = {db: pinned_session(db) for db in dbs}
    body = "DO $$ BEGIN FOR i IN 1..{} LOOP PERFORM " + expression + "; COMMIT; END LOOP; END $$"
    for conn, _ in sessions.values():  # warm the plan caches
        conn.execute(body.format(300))
    per_call: dict[str, list[float]] = {db: [] for db in dbs}
    for _ in range(rounds):
        for db, (conn, pid) in sessions.items():
            before = cpu_seconds(pid)
            conn.execute(body.format(n))
            per_call[db].append((cpu_seconds(pid) - before) / n * 1e6)
    for db in dbs:
        print(f"{db} median {statistics.median(per_call[db]):.1f} us  all "
              + " ".join(f"{x:.1f}" for x in per_call[db]))


if __name__ == "__main__":
    main(sys.argv[1:])
