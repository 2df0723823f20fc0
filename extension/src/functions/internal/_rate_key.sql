-- The advisory lock key of a rate-limited queue's re-base from the last slot p_last
-- (pgqueue._rate_take): the queue, its rate, that value, and the queue's created_at to the
-- microsecond (as epoch, whatever the session's TimeZone), which only roles that may read
-- pgqueue.queue know. NULL when the queue is gone (no lock is then taken: the caller's take
-- comes after its dequeue, which saw the queue).
CREATE FUNCTION pgqueue._rate_key(p_queue_id integer, p_rate integer, p_last bigint)
RETURNS bigint
LANGUAGE sql STABLE
RETURN (SELECT hashtextextended(format('pgqueue rate %s %s %s %s', q.id, p_rate, p_last,
                                       extract(epoch FROM q.created_at)), 0)
          FROM pgqueue.queue q WHERE q.id = p_queue_id);

COMMENT ON FUNCTION pgqueue._rate_key(integer, integer, bigint) IS
    'pgqueue internal: the advisory lock key of a rate-limited queue''s re-base from a last slot';
