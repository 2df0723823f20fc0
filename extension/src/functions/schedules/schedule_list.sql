-- Every schedule, by name, with its queue and next slot (epoch ms).
CREATE FUNCTION pgqueue.schedule_list()
RETURNS TABLE (name text, queue text, every_ms bigint, cron text, content bytea, content_type text,
               missed text, next_run bigint, created_at timestamptz)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT s.name, q.name, s.every_ms, s.cron, s.content, s.content_type, s.missed, s.next_run, s.created_at
      FROM pgqueue.schedule s JOIN pgqueue.queue q ON q.id = s.queue_id
     ORDER BY s.name;
END;

COMMENT ON FUNCTION pgqueue.schedule_list() IS
    'Every schedule by name: its queue, interval or cron expression, content, missed-slot policy and next slot (epoch ms)';
