-- Reference design "seed 004": the Haskell library hasql-queue as Jonathan Fischoff's post
-- "Introducing hasql-queue" describes it (https://hackage.haskell.org/package/hasql-queue):
-- the schema its migrate creates, with bytea payloads; a sequence (not a timestamp) orders
-- the queue and a partial index holds the enqueued elements. Enqueue is
-- INSERT ... VALUES (0, $1) or, for a batch, INSERT ... SELECT 0, * FROM unnest($1); dequeue
-- is DELETE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT $1) RETURNING.
CREATE SCHEMA seed004;

CREATE TYPE seed004.state_t AS ENUM ('enqueued', 'failed');

CREATE SEQUENCE seed004.modified_index START 1;

CREATE TABLE seed004.payloads (
    id          BIGSERIAL PRIMARY KEY,
    attempts    int NOT NULL DEFAULT 0,
    state       seed004.state_t NOT NULL DEFAULT 'enqueued',
    modified_at int8 NOT NULL DEFAULT nextval('seed004.modified_index'),
    value       bytea NOT NULL
);

CREATE INDEX active_modified_at_idx ON seed004.payloads USING btree (modified_at)
    WHERE (state = 'enqueued');
