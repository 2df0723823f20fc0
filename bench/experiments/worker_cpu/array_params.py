"""What psycopg's list dumper costs a call: the worker's tokens as Python lists or as array literals.

Runs ``SELECT %(ids)s::bigint[], %(attempts)s::integer[]`` CALLS times with 4 ids and 4 attempts
counts, once passed as lists (psycopg's list dumper looks at every element to choose the array's
type) and once as array literals (``'{1,2,3,4}'``, which the casts parse), three rounds
alternated, and prints the client process's CPU time a call (time.process_time). pgqueue's
acknowledgements pass the literals (``pgqueue._core._token_arrays``).

Usage: .venv/bin/python bench/experiments/worker_cpu/array_params.py DSN [CALLS]
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable

import psycopg

QUERY = "SELECT %(ids)s::bigint[], %(attempts)s::integer[]"
IDS = [123456 + i for i in range(4)]
ATTEMPTS = [1, 1, 1, 1]


def as_lists() -> dict[str, object]:
    return {"ids": IDS, "attempts": ATTEMPTS}


def as_literals() -> dict[str, object]:
    return {"ids": "{" + ",".join(map(str, IDS)) + "}", "attempts": "{" + ",".join(map(str, ATTEMPTS)) + "}"}


def main(dsn: str, calls: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(3):
            ways: list[tuple[str, Callable[[], dict[str, object]]]] = [("lists", as_lists), ("literals", as_literals)]
            for name, params in ways:
                cur = conn.cursor()
                c0 = time.process_time()
                for _ in range(calls):
                    cur.execute(QUERY, params()).fetchall()
                print(f"{name}: {(time.process_time() - c0) / calls * 1e6:.1f} us a call", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5000)
