-- pgmq (a peer): read one message and delete it in the same call (pgmq.pop), its delete mode.
SELECT * FROM pgmq.pop('bench');
