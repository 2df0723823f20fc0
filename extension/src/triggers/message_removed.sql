-- A message with an idempotency key, or one that had its group's turn, left the queue: keep its
-- key for the queue's window and give its group the next turn (pgqueue._message_removed). Other
-- messages pay for the WHEN clause only.
CREATE TRIGGER message_removed
    AFTER DELETE ON pgqueue.message
    FOR EACH ROW WHEN (OLD.idem_key IS NOT NULL OR (OLD.group_key IS NOT NULL AND OLD.turn_at IS NOT NULL))
    EXECUTE FUNCTION pgqueue._message_removed();
