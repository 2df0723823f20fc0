-- Seed 004: enqueue a batch with unnest (the array is built on the server).
INSERT INTO seed004.payloads (attempts, value)
SELECT 0, * FROM unnest(array_fill('{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'::bytea, ARRAY[:batch::int]));
