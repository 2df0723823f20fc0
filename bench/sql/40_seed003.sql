-- Reference design "seed 003": the batch queue of "Devious SQL: Message Queuing Using Native
-- PostgreSQL" (Crunchy Data blog, Devious SQL series): an identity-keyed table; a worker takes
-- a batch with
--   DELETE FROM queue_table USING (SELECT * FROM queue_table LIMIT n FOR UPDATE SKIP LOCKED) q
--   WHERE q.id = queue_table.id RETURNING queue_table.*
-- inside its transaction (bench/pgbench/seed003_dequeue_batch.sql). As in the article, the batch
-- is taken in no particular order (no ORDER BY, so no index but the primary key).
CREATE SCHEMA seed003;

CREATE TABLE seed003.queue_table (
    id         int NOT NULL PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    queue_time timestamptz DEFAULT now(),
    payload    text
);
