-- Flat queue (queue 2): delete the first ready message.
DELETE FROM gh.message m
 WHERE m.id = (SELECT x.id FROM gh.message x WHERE x.queue_id = 2 AND x.locked_until IS NULL
                ORDER BY x.dequeue_at, x.id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING m.*;
