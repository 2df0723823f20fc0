-- Group table (queue 1): lock the group whose turn is first, delete its first message, move the
-- group's turn to the back.
WITH g AS (SELECT r.queue_id, r.group_key FROM gh.grp r
            WHERE r.queue_id = 1 AND r.turn_at <= 9000000000000000
            ORDER BY r.turn_at LIMIT 1 FOR UPDATE SKIP LOCKED),
d AS (DELETE FROM gh.message m
       WHERE m.id = (SELECT x.id FROM gh.message x
                      WHERE x.queue_id = 1 AND x.group_key = (SELECT g.group_key FROM g) AND x.turn_at IS NULL
                      ORDER BY x.dequeue_at, x.id LIMIT 1)
      RETURNING m.*),
u AS (UPDATE gh.grp r SET turn_at = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
        FROM g WHERE r.queue_id = g.queue_id AND r.group_key = g.group_key)
SELECT * FROM d;
