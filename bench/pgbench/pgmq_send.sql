-- pgmq (a peer, when the server has it): send one message (its own API, pgmq.send) to the
-- queue "bench"; the same 85-byte JSON document the other designs enqueue.
SELECT * FROM pgmq.send('bench', '{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'::jsonb);
