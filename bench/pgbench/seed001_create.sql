-- Seed 001: message_create (PL/pgSQL), due now.
SELECT seed001.message_create('{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}'::bytea, NULL);
