-- Dead letters with their queue's name, readable with plain SQL. queue_id (last, added in 0.4)
-- lets a reader page through one queue's letters by index: a filter on the name joins the queue
-- first, and PostgreSQL then sorts all of the queue's letters before the first page; with
-- queue_id = (SELECT id FROM pgqueue.queue WHERE name = ...) it walks dead_letter_queue_idx in
-- (dead_at, id) order and stops at the page's end (the clients' and the dashboard's queries).
CREATE VIEW pgqueue.dead_letters AS
SELECT d.id, q.name AS queue, d.content, d.content_type, d.state, d.attempts, d.last_error,
       d.created_at, d.dead_at, pgqueue.from_epoch(d.dead_at) AS dead_time, d.queue_id
  FROM pgqueue.dead_letter d
  JOIN pgqueue.queue q ON q.id = d.queue_id;

COMMENT ON VIEW pgqueue.dead_letters IS
    'pgqueue dead letters: queue, content, attempts, last error and when (dead_at epoch ms, dead_time); filter on queue_id for an index walk';
