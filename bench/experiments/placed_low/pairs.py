"""Server CPU per call of one SQL expression in two databases, in paired rounds.

Usage: python pairs.py N ROUNDS 'SQL expression' DB_A DB_B

Like cpu_loop.py (one session per database, synchronous_commit off, backend pinned to CPU 1,
`PERFORM <expression>; COMMIT;` N times a round, utime + stime of the backend), but the two
databases run in the same round, in an order swapped every round, and the difference B - A is
taken round by round: prints both medians, the median difference and how many rounds B used
less. A drift of the machine over the run then lands on both sides of each pair.
"""
from __future__ import annotations

import sys

from cpu_loop import paired_rounds, pinned_session  # type: ignore[import-not-found]  # run as a script beside cpu_loop.py


def main(argv: list[str]) -> None:
    n, rounds, expression, dbs = int(argv[0]), int(argv[1]), argv[2], argv[3:5]
    sessions = [pinned_session(db) for db in dbs]
    body = "DO $$ BEGIN FOR i IN 1..{} LOOP PERFORM " + expression + "; COMMIT; END LOOP; END $$"
    for conn, _ in sessions:  # warm the plan caches
        conn.execute(body.format(300))
    paired_rounds(sessions, rounds, n, lambda _i, _r, conn: conn.execute(body.format(n)))


if __name__ == "__main__":
    main(sys.argv[1:])
