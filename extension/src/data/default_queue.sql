-- The default queue.
SELECT pgqueue.queue_create('default');
