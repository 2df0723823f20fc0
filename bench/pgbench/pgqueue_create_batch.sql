-- pgqueue: enqueue :batch messages in one statement (the array is built on the server).
SELECT count(*) FROM pgqueue.message_create_batch(:queue, array_fill('{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'::bytea, ARRAY[:batch::int]));
