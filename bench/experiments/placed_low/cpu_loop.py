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

import psycopg

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def pinned_session(db: str) -> tuple[psycopg.Connection[tuple[object, ...]], int]:
    """An autocommit session on db (synchronous_commit off) and its backend's pid, pinned to CPU 1."""
    conn = psycopg.connect(f"dbname={db}", autocommit=True)
    conn.execute("SET synchronous_commit = off")
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    subprocess.run(["taskset", "-p", "-c", "1", str(row[0])], check=True, capture_output=True)
    return conn, int(row[0])


def main(argv: list[str]) -> None:
    n, rounds, expression, dbs = int(argv[0]), int(argv[1]), argv[2], argv[3:]
    sessions = {db: pinned_session(db) for db in dbs}
    body = "DO $$ BEGIN FOR i IN 1..{} LOOP PERFORM " + expression + "; COMMIT; END LOOP; END $$"
    for conn, _ in sessions.values():  # warm the plan caches
        conn.execute(body.format(300))  # type: ignore[arg-type]
    per_call: dict[str, list[float]] = {db: [] for db in dbs}
    for _ in range(rounds):
        for db, (conn, pid) in sessions.items():
            before = cpu_seconds(pid)
            conn.execute(body.format(n))  # type: ignore[arg-type]
            per_call[db].append((cpu_seconds(pid) - before) / n * 1e6)
    for db in dbs:
        print(f"{db} median {statistics.median(per_call[db]):.1f} us  all "
              + " ".join(f"{x:.1f}" for x in per_call[db]))


if __name__ == "__main__":
    main(sys.argv[1:])
