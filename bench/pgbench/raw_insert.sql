-- Ceiling: a single-row INSERT into a table whose only index is the primary key.
INSERT INTO bench_raw.message (content) VALUES ('{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'::bytea);
