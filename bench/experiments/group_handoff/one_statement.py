"""Print a variant of pgqueue.message_dequeue and of the trigger function pgqueue._message_removed
(CREATE OR REPLACE) in which a grouped queue's one-message delete-mode dequeue (group concurrency
1) takes the group's lock and then deletes the message and hands the group's turn on in one
statement, instead of the trigger's chain of calls (_message_removed -> _message_group_next ->
_message_group_lock, the hand-off's UPDATE through SPI). The trigger still fires and returns at
once for that message (a transaction-local setting names it).

A measurement of what issue 14's next step could save (docs/performance.md, "Message groups"),
not a build to ship: it is a copy of the two functions with their other paths untouched, the
group is looked up by a probe of its own (a real one would come from the take), and nothing but
a grouped delete-mode dequeue of one message is changed. Used by one_statement.sh.

Usage: python3 bench/experiments/group_handoff/one_statement.py > /tmp/one_statement.sql
"""
import pathlib
import sys

SRC = pathlib.Path(__file__).resolve().parents[3] / "extension/src/functions/messages"

ONE = """            IF cardinality(v_ids) = 1 AND v_groups = 1 THEN
                SELECT m.group_key INTO v_group FROM pgqueue.message m WHERE m.id = v_ids[1];
                v_turned := pgqueue._message_group_lock(v_queue_id, v_group);
                v_turned := set_config('pgqueue.handed_off', v_ids[1]::text, true) IS NOT NULL;
                RETURN QUERY
                WITH d AS (
                    DELETE FROM pgqueue.message m WHERE m.id = v_ids[1]
                       AND nextval(pgqueue._count_seq(v_queue_id, 1)) > 0
                       AND (m.locked_until IS NULL OR nextval(pgqueue._count_seq(v_queue_id, 5)) > 0)
                    RETURNING m.id, m.content, m.attempts + 1 AS attempts, m.dequeue_at, m.state,
                              m.content_type, m.created_at, NULL::bigint AS locked_until),
                u AS (
                    UPDATE pgqueue.message n SET turn_at = pgqueue._turn_key(n.dequeue_at, true)
                     WHERE v_group IS NOT NULL
                       AND n.id = (SELECT w.id FROM pgqueue.message w
                                    WHERE w.queue_id = v_queue_id AND w.group_key = v_group
                                      AND w.turn_at IS NULL
                                    ORDER BY w.dequeue_at, w.id
                                    LIMIT 1)
                       AND NOT EXISTS (SELECT 1 FROM pgqueue.message t
                                        WHERE t.queue_id = v_queue_id AND t.group_key = v_group
                                          AND t.turn_at IS NOT NULL AND t.id <> v_ids[1]))
                SELECT * FROM d;
            ELSIF cardinality(v_ids) = 1 THEN
"""

SKIP = """BEGIN
    IF current_setting('pgqueue.handed_off', true) = OLD.id::text THEN
        RETURN NULL;  -- message_dequeue handed the turn on itself
    END IF;
"""


def function(name: str) -> str:
    text = (SRC / f"{name}.sql").read_text().split("COMMENT ON FUNCTION")[0]
    return text.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def main() -> None:
    dequeue = function("message_dequeue")
    anchor = "        IF v_lock_ms = 0 THEN\n            IF cardinality(v_ids) = 1 THEN\n"
    if anchor not in dequeue:
        raise SystemExit("message_dequeue.sql has changed: update one_statement.py")
    dequeue = dequeue.replace(anchor, "        IF v_lock_ms = 0 THEN\n" + ONE, 1)
    removed = function("_message_removed")
    if removed.count("BEGIN\n") != 1:
        raise SystemExit("_message_removed.sql has changed: update one_statement.py")
    removed = removed.replace("BEGIN\n", SKIP, 1)
    sys.stdout.write(dequeue + ";\n" + removed + ";\n")


if __name__ == "__main__":
    main()
