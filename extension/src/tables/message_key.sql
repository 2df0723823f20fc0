-- Idempotency keys of messages that have left the queue (completed, delivered in delete mode,
-- acknowledged by Spark, cancelled), kept for the queue's key_window_ms: until then an enqueue
-- with the same key returns the old id (pgqueue._message_insert). Written by
-- pgqueue._message_left; windows that have ended are removed as new ones are written, and
-- queue_drop removes a queue's.
CREATE TABLE pgqueue.message_key (
    queue_id integer NOT NULL,
    idem_key text    NOT NULL,
    id       bigint  NOT NULL,
    until    bigint  NOT NULL,
    CONSTRAINT message_key_pkey PRIMARY KEY (queue_id, idem_key)
);
CREATE INDEX message_key_until_idx ON pgqueue.message_key (queue_id, until);

COMMENT ON TABLE pgqueue.message_key IS
    'pgqueue: idempotency keys of messages that have left the queue, taken until "until" (epoch ms)';
