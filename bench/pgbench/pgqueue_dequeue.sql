-- pgqueue: dequeue one message in delete mode (p_lock_ms => 0: deleted as it is delivered).
SELECT * FROM pgqueue.message_dequeue(:queue, 1, 0);
