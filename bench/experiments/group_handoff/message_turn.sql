-- Message turn (queue 3, pgqueue 0.4's design): delete the first message that has its group's
-- turn, give the turn to the group's next message.
WITH d AS (DELETE FROM gh.message m
            WHERE m.id = (SELECT x.id FROM gh.message x
                           WHERE x.queue_id = 3 AND x.turn_at IS NOT NULL AND x.turn_at <= 9000000000000000
                           ORDER BY x.turn_at, x.id LIMIT 1 FOR UPDATE SKIP LOCKED)
           RETURNING m.*),
u AS (UPDATE gh.message n SET turn_at = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
       WHERE n.id = (SELECT w.id FROM gh.message w
                      WHERE w.queue_id = 3 AND w.group_key = (SELECT d.group_key FROM d) AND w.turn_at IS NULL
                      ORDER BY w.dequeue_at, w.id LIMIT 1))
SELECT * FROM d;
