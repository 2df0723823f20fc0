CREATE SEQUENCE pgqueue.message_id_seq AS bigint;

-- Live messages: ready, scheduled and leased. Completed messages are deleted,
-- dead ones move to pgqueue.dead_letter.
CREATE TABLE pgqueue.message (
    id           bigint  NOT NULL DEFAULT pg_catalog.nextval('pgqueue.message_id_seq'),
    queue_id     integer NOT NULL,
    dequeue_at   bigint  NOT NULL,
    locked_until bigint,
    attempts     integer NOT NULL DEFAULT 0,
    created_at   bigint  NOT NULL,
    content      bytea   NOT NULL,
    content_type text,
    state        bytea,
    last_error   text,
    claim_id     bigint,
    CONSTRAINT message_pkey PRIMARY KEY (id)
);
ALTER SEQUENCE pgqueue.message_id_seq OWNED BY pgqueue.message.id;

-- Deliverable and scheduled messages by (dequeue_at, id); leased messages are not in it.
CREATE INDEX message_ready_idx ON pgqueue.message (queue_id, dequeue_at, id)
    WHERE locked_until IS NULL;
-- Leased messages by lease expiry, so that an expired lease is one probe too.
CREATE INDEX message_leased_idx ON pgqueue.message (queue_id, locked_until, id)
    WHERE locked_until IS NOT NULL;
-- Messages held by a Spark claim.
CREATE INDEX message_claim_idx ON pgqueue.message (claim_id, id)
    WHERE claim_id IS NOT NULL;

COMMENT ON TABLE pgqueue.message IS 'pgqueue: live messages (ready, scheduled, leased); use the pgqueue.message_* functions to change them';
COMMENT ON COLUMN pgqueue.message.dequeue_at IS 'epoch ms after which the message may be delivered; past or negative values jump the queue (priority)';
COMMENT ON COLUMN pgqueue.message.locked_until IS 'epoch ms at which the current lease runs out; NULL when not leased';
COMMENT ON COLUMN pgqueue.message.attempts IS 'deliveries so far; the fencing token for complete/heartbeat/defer/fail';
COMMENT ON COLUMN pgqueue.message.content_type IS 'how content is encoded (e.g. application/json); NULL for raw bytes';
COMMENT ON COLUMN pgqueue.message.state IS 'checkpoint state saved by message_defer';
COMMENT ON COLUMN pgqueue.message.claim_id IS
    'the Spark claim (pgqueue.spark_claim.id) that holds the message, NULL if none; a claimed message has locked_until 253402300799999 (year 9999)';
