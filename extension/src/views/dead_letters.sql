-- Dead letters with their queue's name, readable with plain SQL.
CREATE VIEW pgqueue.dead_letters AS
SELECT d.id, q.name AS queue, d.content, d.content_type, d.state, d.attempts, d.last_error,
       d.created_at, d.dead_at, pgqueue.from_epoch(d.dead_at) AS dead_time
  FROM pgqueue.dead_letter d
  JOIN pgqueue.queue q ON q.id = d.queue_id;

COMMENT ON VIEW pgqueue.dead_letters IS
    'pgqueue dead letters: queue, content, attempts, last error and when (dead_at epoch ms, dead_time)';
