-- List the queues and their settings.
CREATE FUNCTION pgqueue.queue_list()
RETURNS TABLE (queue text, lock_ms bigint, max_attempts integer, retry_base_ms bigint,
               retry_cap_ms bigint, max_size bigint, notify boolean, created_at timestamptz,
               group_concurrency integer, key_window_ms bigint, rate_limit integer)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT q.name, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms,
           q.max_size, q.notify, q.created_at, q.group_concurrency, q.key_window_ms, q.rate_limit
      FROM pgqueue.queue q
     ORDER BY q.name;
END;

COMMENT ON FUNCTION pgqueue.queue_list() IS
    'List every queue with its settings, by name (group_concurrency NULL = no message groups, 0 = groups without a limit; rate_limit NULL = none)';
