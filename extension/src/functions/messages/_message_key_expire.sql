-- Remove up to p_limit windows of idempotency keys that have ended (pgqueue.message_key rows
-- whose until has passed), oldest first, skipping rows other sessions hold: pgqueue._message_left's
-- clean-up, two for each window written, so that the table stays as small as the keys of one
-- window. A function of its own so that _message_left can run it plainly under READ COMMITTED
-- and, under REPEATABLE READ or SERIALIZABLE, in a subtransaction that gives up on a
-- serialization failure (see there).
CREATE FUNCTION pgqueue._message_key_expire(p_queue_id integer, p_now bigint, p_limit integer)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    DELETE FROM pgqueue.message_key k
     WHERE (k.queue_id, k.idem_key) IN (SELECT e.queue_id, e.idem_key FROM pgqueue.message_key e
                                         WHERE e.queue_id = p_queue_id AND e.until <= p_now
                                         ORDER BY e.until
                                         LIMIT p_limit
                                           FOR UPDATE SKIP LOCKED);
$$;

COMMENT ON FUNCTION pgqueue._message_key_expire(integer, bigint, integer) IS
    'pgqueue internal: delete up to p_limit ended idempotency-key windows of a queue (pgqueue._message_left)';
