"""Server CPU per call of one SQL expression in two databases, in paired rounds.

Usage: python pairs.py N ROUNDS 'SQL expression' DB_A DB_B

Like cpu_loop.py (one session per database, synchronous_commit off, backend pinned to CPU 1,
`PERFORM <expression>; COMMIT;` N times a round, utime + stime of the backend), but the two
databases run in the same round, in an order swapped every round, and the difference B - A is
taken round by round: prints both medians, the median difference and how many rounds B used
less. A drift of the machine over the run then lands on both sides of each pair.
"""
from __future__ import annotations

import statistics
import sys

from cpu_loop import cpu_seconds, pinned_session


def main(argv: list[str]) -> None:
    n, rounds, expression, dbs = int(argv[0]), int(argv[1]), argv[2], argv[3:5]
    sessions = [pinned_session(db) for db in dbs]
    body = "DO $$ BEGIN FOR i IN 1..{} LOOP PERFORM " + expression + "; COMMIT; END LOOP; END $$"
    for conn, _ in sessions:  # warm the plan caches
        conn.execute(body.format(300))  # type: ignore[arg-type]
    a_us: list[float] = []
    b_us: list[float] = []
    for r in range(rounds):
        order = [0, 1] if r % 2 == 0 else [1, 0]
        took = [0.0, 0.0]
        for i in order:
            conn, pid = sessions[i]
            before = cpu_seconds(pid)
            conn.execute(body.format(n))  # type: ignore[arg-type]
            took[i] = (cpu_seconds(pid) - before) / n * 1e6
        a_us.append(took[0])
        b_us.append(took[1])
    diffs = [b - a for a, b in zip(a_us, b_us)]
    print(f"A median {statistics.median(a_us):.1f} us  B median {statistics.median(b_us):.1f} us  "
          f"B - A median {statistics.median(diffs):+.1f} us  B lower in {sum(d < 0 for d in diffs)} of {rounds}")


if __name__ == "__main__":
    main(sys.argv[1:])
