"""Remove the counting of pgqueue.queue_counters from the hot paths of a source tree, for
bench/experiments/counters/run.sh: the "without" side is the same source as the "with" side
minus these statements, so the comparison measures the counters and nothing else.

Usage: python3 strip_counters.py TREE   (edits TREE/extension/src in place; fails if a statement
it looks for is gone, i.e. the source moved on: update the list below)
"""

from __future__ import annotations

import sys
from pathlib import Path

F = "extension/src/functions/"
REMOVE: list[tuple[str, str, str]] = [
    (F + "messages/message_create.sql",
     "    v_counted := pgqueue._counted(coalesce(v_queue.id, v_queue_id), 0);  -- enqueued (queue_counters)\n", ""),
    (F + "messages/message_create_batch.sql",
     "    PERFORM pgqueue._counted_n(v_queue.id, 0, v_n);  -- enqueued (queue_counters)\n", ""),
    (F + "messages/message_dequeue.sql",
     "    v_delivered := pgqueue._count_seq(v_queue_id, 1);\n    v_expired := pgqueue._count_seq(v_queue_id, 5);\n"
     "    IF cardinality(v_ids) > 32 THEN\n        PERFORM pgqueue._counted_n(v_queue_id, 1, cardinality(v_ids));\n"
     "    END IF;\n", ""),
    (F + "messages/message_dequeue.sql",
     "\n               AND nextval(v_delivered) > 0 AND (m.locked_until IS NULL OR nextval(v_expired) > 0)", ""),
    (F + "messages/message_dequeue.sql",
     "\n                   AND (cardinality(v_ids) > 32 OR nextval(v_delivered) > 0)"
     "\n                   AND (m.locked_until IS NULL OR nextval(v_expired) > 0)", ""),
    (F + "messages/message_dequeue.sql",
     "\n           AND nextval(v_delivered) > 0 AND (m.locked_until IS NULL OR nextval(v_expired) > 0)", ""),
    (F + "messages/message_dequeue.sql",
     "\n               AND (cardinality(v_ids) > 32 OR nextval(v_delivered) > 0)"
     "\n               AND (m.locked_until IS NULL OR nextval(v_expired) > 0)", ""),
    (F + "messages/message_complete.sql",
     "\n    RETURNING m.queue_id INTO v_queue_id;\n    RETURN v_queue_id IS NOT NULL AND pgqueue._counted(v_queue_id, 2);"
     "  -- completed (queue_counters)", ";\n    RETURN FOUND;"),
    (F + "messages/message_complete_batch.sql",
     "    -- completed (queue_counters): one nextval a message, or by queue for more than 32\n"
     "    IF cardinality(v_done) > 32 THEN\n"
     "        PERFORM pgqueue._counted_n(u.q, 2, count(*)) FROM unnest(v_queues) AS u(q) GROUP BY u.q;\n"
     "    ELSE\n        FOREACH v_queue IN ARRAY v_queues LOOP\n            v_counted := pgqueue._counted(v_queue, 2);\n"
     "        END LOOP;\n    END IF;\n", ""),
    (F + "messages/message_fail.sql",
     "        v_counted := pgqueue._counted(v_queue.id, 3);  -- failed (queue_counters)\n", ""),
    (F + "internal/_dead_letter.sql",
     "\n     WHERE pgqueue._counted_dead(d.queue_id, d.locked_until, p_now);  -- queue_counters", ";"),
    (F + "dead_letters/dead_letter_requeue.sql",
     "    PERFORM pgqueue._counted_n(v_queue.id, 0, cardinality(v_ids));  -- enqueued (queue_counters)\n", ""),
]


def main(tree: str) -> None:
    for path, old, new in REMOVE:
        p = Path(tree) / path
        text = p.read_text()
        if text.count(old) != 1:
            sys.exit(f"strip_counters: {path}: the statement to remove is not there once:\n{old}")
        p.write_text(text.replace(old, new))
    d = Path(tree) / (F + "internal/_dead_letter.sql")
    d.write_text(d.read_text().replace("FROM d;;", "FROM d;"))


if __name__ == "__main__":
    main(sys.argv[1])
