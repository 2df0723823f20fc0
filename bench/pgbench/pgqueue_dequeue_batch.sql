-- pgqueue: dequeue up to :batch messages in delete mode.
SELECT * FROM pgqueue.message_dequeue(:queue, :batch::int, 0);
