-- Seed 000: writer.sql.
INSERT INTO seed000.queue (element_identifier, time_inserted, payload)
VALUES (gen_random_uuid(), current_timestamp, '{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}');
