"""Two builds of message_dequeue side by side in one session, call by call.

Usage (as a role that may create functions in schema pgqueue, on a database with pgqueue and a
queue named 'bench'):

    python3 bench/experiments/ab_builds/ab.py DSN TAKE_A DEQUEUE_A TAKE_B DEQUEUE_B [CALLS] [LOCK_MS]

Each of the four files holds one CREATE [OR REPLACE] FUNCTION statement, e.g. the text of
extension/src/functions/messages/_message_take.sql and message_dequeue.sql of two commits
(`git show REV:path`), without their COMMENT ON. The builds are installed beside the real
functions as pgqueue._message_take_a / message_dequeue_a and _b, with session hint settings of
their own (pgqueue.hint_a_<id>, ...), so that two hint formats do not read each other's state.
The queue is topped up to 3 * CALLS + 20,000 ready messages and vacuumed; then one DO block
calls A and B in turn, a transaction each (COMMIT after every call, synchronous_commit off: the
per-transaction set-up of PL/pgSQL expressions and plans is part of what is measured), and
prints the median, 10th percentile and mean of each, in microseconds. Alternating call by call
keeps a noisy machine's drift out of the comparison; an A/A run shows the harness's own spread.
"""
import subprocess
import sys


def renamed(path: str, suffix: str) -> str:
    text = open(path).read()
    text = text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    text = text.replace("pgqueue._message_take(", f"pgqueue._message_take{suffix}(")
    text = text.replace("pgqueue.message_dequeue(", f"pgqueue.message_dequeue{suffix}(")
    text = text.replace("'pgqueue.hint_'", f"'pgqueue.hint{suffix}_'")
    return text.replace("'pgqueue.turn_hint_'", f"'pgqueue.turn_hint{suffix}_'")


STATS = ", ".join(
    f"(SELECT round({agg}::numeric, 1) FROM unnest({arr}) x)"
    for arr in ("ta", "tb")
    for agg in ("percentile_cont(0.5) WITHIN GROUP (ORDER BY x)", "percentile_cont(0.1) WITHIN GROUP (ORDER BY x)",
                "avg(x)"))

BODY = """
SELECT count(*) FROM pgqueue.message_create_batch('bench', array_fill('\\x01'::bytea, ARRAY[200000]))
 WHERE (SELECT count(*) < @MIN@ FROM pgqueue.message);
VACUUM pgqueue.message;
SET synchronous_commit = off;
DO $$ DECLARE t0 timestamptz; ta float8[] := '{}'; tb float8[] := '{}'; BEGIN
  FOR i IN 1..@N@ LOOP
    t0 := clock_timestamp(); PERFORM pgqueue.message_dequeue_a('bench', 1, @LOCK@); COMMIT;
    ta := ta || extract(epoch FROM clock_timestamp() - t0) * 1e6;
    t0 := clock_timestamp(); PERFORM pgqueue.message_dequeue_b('bench', 1, @LOCK@); COMMIT;
    tb := tb || extract(epoch FROM clock_timestamp() - t0) * 1e6;
  END LOOP;
  RAISE NOTICE 'a: median % p10 % mean % | b: median % p10 % mean %', @STATS@;
END $$;
"""


def main(argv: list[str]) -> None:
    dsn, take_a, dequeue_a, take_b, dequeue_b = argv[:5]
    calls = int(argv[5]) if len(argv) > 5 else 6000
    lock_ms = argv[6] if len(argv) > 6 else "0"
    script = (renamed(take_a, "_a") + ";\n" + renamed(dequeue_a, "_a") + ";\n"
              + renamed(take_b, "_b") + ";\n" + renamed(dequeue_b, "_b") + ";\n"
              + BODY.replace("@MIN@", str(3 * calls + 20000)).replace("@N@", str(calls))
              .replace("@LOCK@", lock_ms).replace("@STATS@", STATS))
    out = subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", dsn], input=script, capture_output=True,
                         text=True)
    print((out.stdout + out.stderr).strip().splitlines()[-1])


if __name__ == "__main__":
    main(sys.argv[1:])
