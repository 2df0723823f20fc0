-- Seed 000 ("Implementing Queues in PostgreSQL, Part 1"): one table of UUID, insert timestamp
-- and a JSON payload; enqueue is a plain INSERT, dequeue a DELETE of the oldest element picked
-- by a FOR UPDATE SKIP LOCKED subquery (bench/pgbench/seed000_*.sql). Written from the seed's
-- text; the only change is the schema name.
CREATE SCHEMA seed000;

CREATE TABLE seed000.queue (
    element_identifier uuid PRIMARY KEY,
    time_inserted      timestamp,
    payload            json
);

CREATE INDEX time_inserted_idx ON seed000.queue (time_inserted ASC);
