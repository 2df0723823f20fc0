-- The message that holds an idempotency key of a queue: the live message with the key, else the
-- one that left with it within the queue's key window (pgqueue.message_key); NULL if none.
CREATE FUNCTION pgqueue._message_key_holder(p_queue_id integer, p_key text)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN coalesce(
    (SELECT m.id FROM pgqueue.message m WHERE m.queue_id = p_queue_id AND m.idem_key = p_key),
    -- a key kept by a message that left within its window, whatever the window is now (a window
    -- changed to 0 applies to the messages that leave after the change)
    (SELECT k.id FROM pgqueue.message_key k
      WHERE k.queue_id = p_queue_id AND k.idem_key = p_key AND k.until > pgqueue.now_ms()));

COMMENT ON FUNCTION pgqueue._message_key_holder(integer, text) IS
    'pgqueue internal: the id of the message holding an idempotency key (live, or within the key window); NULL if none';
