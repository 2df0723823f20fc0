-- pgqueue: enqueue one message (queue given by -D queue=...).
SELECT pgqueue.message_create(:queue, '{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'::bytea);
