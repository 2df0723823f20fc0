-- PgQ (a peer, when the server has postgresql-15-pgq3): insert one event into the queue
-- "bench" (pgq.insert_event). PgQ has no per-message dequeue: consumers read batches between
-- ticks and each registered consumer gets every event, so only its enqueue is in the curves.
SELECT pgq.insert_event('bench', 'm', '{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}');
