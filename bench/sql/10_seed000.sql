-- Reference design "seed 000": the minimal queue of Christoph Bussler's article "Implementing
-- Queues in PostgreSQL (Part 1: Design and Measurement)" (Medium, August 2022,
-- https://chbussler.medium.com/implementing-queues-in-postgresql-3f6e9ab724fa), which measured
-- it with pgbench at 15 clients. One table of UUID, insert timestamp and a JSON payload;
-- enqueue is a plain INSERT, dequeue a DELETE of the oldest element picked by a FOR UPDATE
-- SKIP LOCKED subquery (bench/pgbench/seed000_*.sql). Written from the article's text; the only
-- change is the schema name. docs/design.md says what pgqueue took from it.
CREATE SCHEMA seed000;

CREATE TABLE seed000.queue (
    element_identifier uuid PRIMARY KEY,
    time_inserted      timestamp,
    payload            json
);

CREATE INDEX time_inserted_idx ON seed000.queue (time_inserted ASC);
