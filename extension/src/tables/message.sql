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
    group_key    text,
    turn_at      bigint,
    idem_key     text,
    write_mark   boolean,
    wait_floor   bigint[],
    CONSTRAINT message_pkey PRIMARY KEY (id)
);
ALTER SEQUENCE pgqueue.message_id_seq OWNED BY pgqueue.message.id;

-- Deliverable and scheduled messages by (dequeue_at, id); leased messages are not in it.
CREATE INDEX message_ready_idx ON pgqueue.message (queue_id, dequeue_at, id)
    WHERE locked_until IS NULL;
-- Leased messages by lease expiry, so that an expired lease is one probe too.
CREATE INDEX message_leased_idx ON pgqueue.message (queue_id, locked_until, id)
    WHERE locked_until IS NOT NULL;
-- Message groups (queues with group_concurrency set): the messages whose group's turn it is,
-- waiting to be handed out, by (turn_at, id): the probe of a grouped dequeue.
CREATE INDEX message_turn_idx ON pgqueue.message (queue_id, turn_at, id)
    WHERE turn_at IS NOT NULL AND locked_until IS NULL;
-- A group's messages that wait for their turn, in delivery order: the next one to get it.
CREATE INDEX message_group_wait_idx ON pgqueue.message (queue_id, group_key, dequeue_at, id)
    WHERE group_key IS NOT NULL AND turn_at IS NULL;
-- A group's messages that have their turn (handed out, or waiting with it): how many are in flight.
-- By turn key, so that a probe can start at the session's floor of the group's turn keys
-- (pgqueue._group_floor_get) and descend past the entries a held snapshot keeps of the group's
-- earlier deliveries.
CREATE INDEX message_group_turn_idx ON pgqueue.message (queue_id, group_key, turn_at)
    WHERE group_key IS NOT NULL AND turn_at IS NOT NULL;
-- Idempotent enqueue: one live message per (queue, key).
CREATE UNIQUE INDEX message_idem_key_idx ON pgqueue.message (queue_id, idem_key)
    WHERE idem_key IS NOT NULL;
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
COMMENT ON COLUMN pgqueue.message.group_key IS
    'the message group (queues with group_concurrency): in order within it, served in turn with the other groups; NULL: a group of its own';
COMMENT ON COLUMN pgqueue.message.turn_at IS
    'grouped queues: set while the message has its group''s turn (waiting to be handed out from turn_at on, or in flight); NULL while it waits behind earlier messages of its group';
COMMENT ON COLUMN pgqueue.message.idem_key IS
    'idempotency key: while the message is live (and the queue''s key_window_ms after it left), enqueueing the same key returns this id';
COMMENT ON COLUMN pgqueue.message.write_mark IS
    'pgqueue internal: set (INSERT) or flipped (UPDATE) by a pgqueue function whose write keyed the row at or above its own clock reading less 5 ms; a write that leaves it NULL or unchanged is checked by the triggers message_placed_low';
COMMENT ON COLUMN pgqueue.message.wait_floor IS
    'pgqueue internal: grouped queues of group concurrency 1, on the message with its group''s turn: where the group''s next hand-off may start its probe of the waiting messages, and the candidate for the one after (pgqueue._wait_floor_next), then while leased the lock stripe read before the lease''s xid, and that xid (pgqueue._wait_floor_leased); NULL: from the group''s first entry';
