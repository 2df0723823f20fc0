-- A message with an idempotency key, or one that had its group's turn, left the queue: keep its
-- key for the queue's window and give its group the next turn (pgqueue._message_removed). Other
-- messages pay for the WHEN clause only, and so does a grouped message whose turn message_dequeue
-- hands on itself (it names the message in the transaction-local setting pgqueue.handed_off).
CREATE TRIGGER message_removed
    AFTER DELETE ON pgqueue.message
    FOR EACH ROW WHEN (OLD.idem_key IS NOT NULL
                       OR (OLD.group_key IS NOT NULL AND OLD.turn_at IS NOT NULL
                           AND current_setting('pgqueue.handed_off', true) IS DISTINCT FROM OLD.id::text))
    EXECUTE FUNCTION pgqueue._message_removed();
