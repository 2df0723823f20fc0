-- pgqueue: the lease cycle, two statements (two transactions): dequeue one message with a
-- 30 s lease, then complete it with the attempts token.
SELECT id, attempts FROM pgqueue.message_dequeue(:queue, 1, 30000) \gset
SELECT pgqueue.message_complete(:id, :attempts);
