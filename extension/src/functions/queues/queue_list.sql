-- List the queues and their settings.
CREATE FUNCTION pgqueue.queue_list()
RETURNS TABLE (queue text, lock_ms bigint, max_attempts integer, retry_base_ms bigint,
               retry_cap_ms bigint, max_size bigint, notify boolean, created_at timestamptz)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT q.name, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms,
           q.max_size, q.notify, q.created_at
      FROM pgqueue.queue q
     ORDER BY q.name;
END;

COMMENT ON FUNCTION pgqueue.queue_list() IS 'List every queue with its settings, by name';
