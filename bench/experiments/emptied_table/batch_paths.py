"""message_complete_batch's two paths against the one statement it had before session 51.

Up to 8 ids it deletes them one DELETE by id each; more, it locks the rows through a probe by id
each and deletes them by id (see the function). Before, one DELETE joined the table with
unnest(p_ids, p_attempts), which a plan made while pgqueue.message was recorded empty turned
round (a walk of message_pkey at every call). This makes three copies of the installed
function: `join` (that one statement), `loop` (the per-id DELETEs at every size) and `lock` (the
locking statement at every size), and times, inside the server, the call alone on batches just
leased (lease with message_dequeue, COMMIT, time the call, COMMIT), alternating the copies
round by round; then drops the copies.

    python bench/experiments/emptied_table/batch_paths.py DSN BATCH [CALLS] [ROUNDS]

on a throwaway database (it creates a queue 'batch_paths' and drops it at the end; it refuses to
run if one exists). BATCH: 1 to 10000.
"""

from __future__ import annotations

import statistics
import sys

import psycopg

JOIN = """    WITH d AS (
        DELETE FROM pgqueue.message m
         USING unnest(p_ids, p_attempts) AS u(id, attempts)
         WHERE m.id = u.id AND m.attempts = u.attempts AND pgqueue._leased(m.locked_until)
           AND m.claim_id IS NULL
        RETURNING m.id, m.queue_id, m.group_key, m.turn_at, m.idem_key,
                  m.idem_key IS NOT NULL OR (m.group_key IS NOT NULL AND m.turn_at IS NOT NULL) AS left_)
    SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.queue_id), '{}'),
           array_agg(d.id) FILTER (WHERE d.left_),
           array_agg(d.queue_id) FILTER (WHERE d.left_),
           array_agg(d.group_key) FILTER (WHERE d.left_),
           array_agg(d.turn_at) FILTER (WHERE d.left_),
           array_agg(d.idem_key) FILTER (WHERE d.left_)
      INTO v_done, v_queues, v_left, v_lq, v_lg, v_lt, v_lk
      FROM d;
"""
THRESHOLD = "IF cardinality(p_ids) <= 8 THEN"


def copies(source: str) -> dict[str, str]:
    assert source.count(THRESHOLD) == 1, "message_complete_batch has no 8-id threshold"
    start = source.index("    " + THRESHOLD)
    end = source.index("    END IF;\n", source.index("      FROM d;\n")) + len("    END IF;\n")
    named = {
        "join": source[:start] + JOIN + source[end:],
        "loop": source.replace(THRESHOLD, "IF true THEN"),
        "lock": source.replace(THRESHOLD, "IF false THEN"),
    }
    return {name: text.replace("pgqueue.message_complete_batch(", f"pgqueue.message_complete_batch_{name}(", 1)
            for name, text in named.items()}


def timed(conn: psycopg.Connection[tuple[object, ...]], fn: str, batch: int, calls: int) -> float:
    conn.execute(f"""DO $$
        DECLARE v_ids bigint[]; v_att integer[]; t0 timestamptz; tot interval := '0'; st bigint[];
        BEGIN
            FOR i IN 1..{calls} LOOP
                SELECT array_agg(d.id), array_agg(d.attempts) INTO v_ids, v_att
                  FROM pgqueue.message_dequeue('batch_paths', {batch}, 30000) d;
                COMMIT;
                t0 := clock_timestamp();
                st := pgqueue.{fn}(v_ids, v_att);
                tot := tot + (clock_timestamp() - t0);
                COMMIT;
                IF st <> '{{}}' THEN RAISE EXCEPTION 'stale %', st; END IF;
            END LOOP;
            PERFORM set_config('batch_paths.seconds', extract(epoch FROM tot)::text, false);
        END $$""")
    row = conn.execute("SELECT current_setting('batch_paths.seconds')").fetchone()
    assert row is not None
    return float(str(row[0])) / calls * 1e6


def main(dsn: str, batch: int, calls: int, rounds: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_get_functiondef('pgqueue.message_complete_batch(bigint[], integer[])'::regprocedure)"
                           ).fetchone()
        assert row is not None
        made = copies(str(row[0]))
        names = ["message_complete_batch"] + [f"message_complete_batch_{n}" for n in made]
        if conn.execute("SELECT 1 FROM pgqueue.queue WHERE name = 'batch_paths'").fetchone():
            sys.exit("a queue 'batch_paths' exists already: run this on a throwaway database")
        created = False
        try:
            for text in made.values():
                conn.execute(text)
            conn.execute("SELECT pgqueue.queue_create('batch_paths')")
            created = True
            times: dict[str, list[float]] = {n: [] for n in names}
            for r in range(rounds):
                for fn in names if r % 2 == 0 else names[::-1]:
                    conn.execute("SELECT count(*) FROM pgqueue.message_create_batch('batch_paths', "
                                 "ARRAY(SELECT '\\x00'::bytea FROM generate_series(1, %s)))", (batch * calls,))
                    conn.execute("VACUUM ANALYZE pgqueue.message")
                    times[fn].append(timed(conn, fn, batch, calls))
            for fn, ts in times.items():
                print(f"{fn} ({batch} ids): median {statistics.median(ts):.1f} us a call "
                      f"(rounds {', '.join(f'{t:.1f}' for t in ts)})")
        finally:  # the copies, then the queue if this run made it (an error above is not hidden)
            for name in made:
                conn.execute(f"DROP FUNCTION IF EXISTS pgqueue.message_complete_batch_{name}(bigint[], integer[])")
            if created:
                conn.execute("SELECT pgqueue.queue_drop('batch_paths')")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4, 5) or not all(a.isdigit() and int(a) > 0 for a in sys.argv[2:]):
        sys.exit(__doc__)
    if int(sys.argv[2]) > 10000:  # message_dequeue's p_limit and message_complete_batch's ids
        sys.exit("BATCH: at most 10000 ids a call")
    batch = int(sys.argv[2])
    main(sys.argv[1], batch, int(sys.argv[3]) if len(sys.argv) > 3 else max(3, 8000 // batch),
         int(sys.argv[4]) if len(sys.argv) > 4 else 8)
