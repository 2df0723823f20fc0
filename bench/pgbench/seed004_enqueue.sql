-- Seed 004: enqueue one element.
INSERT INTO seed004.payloads (attempts, value) VALUES (0, '{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'::bytea);
