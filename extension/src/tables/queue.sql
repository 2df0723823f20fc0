CREATE SEQUENCE pgqueue.queue_id_seq AS integer;

-- One row per queue, with the queue's settings.
CREATE TABLE pgqueue.queue (
    id            integer     NOT NULL DEFAULT pg_catalog.nextval('pgqueue.queue_id_seq'),
    name          text        NOT NULL,
    lock_ms       bigint      NOT NULL DEFAULT 30000,
    max_attempts  integer,
    retry_base_ms bigint      NOT NULL DEFAULT 1000,
    retry_cap_ms  bigint      NOT NULL DEFAULT 3600000,
    max_size      bigint,
    notify        boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    group_concurrency integer,
    key_window_ms bigint      NOT NULL DEFAULT 0,
    rate_limit    integer,
    CONSTRAINT queue_pkey PRIMARY KEY (id),
    CONSTRAINT queue_name_key UNIQUE (name),
    CONSTRAINT queue_name_check CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$'),
    CONSTRAINT queue_lock_ms_check CHECK (lock_ms > 0),
    CONSTRAINT queue_max_attempts_check CHECK (max_attempts IS NULL OR max_attempts > 0),
    CONSTRAINT queue_retry_check CHECK (retry_base_ms >= 0 AND retry_cap_ms >= retry_base_ms),
    CONSTRAINT queue_max_size_check CHECK (max_size IS NULL OR max_size > 0),
    CONSTRAINT queue_group_concurrency_check CHECK (group_concurrency IS NULL OR group_concurrency >= 0),
    CONSTRAINT queue_key_window_check CHECK (key_window_ms >= 0),
    CONSTRAINT queue_rate_limit_check CHECK (rate_limit IS NULL OR rate_limit > 0)
);
ALTER SEQUENCE pgqueue.queue_id_seq OWNED BY pgqueue.queue.id;

COMMENT ON TABLE pgqueue.queue IS 'pgqueue: one row per queue with its settings; change it with queue_create/queue_alter/queue_drop';
COMMENT ON COLUMN pgqueue.queue.group_concurrency IS
    'NULL: no message groups; else messages are served by group in turn, at most this many of a group in flight (0: no limit)';
COMMENT ON COLUMN pgqueue.queue.rate_limit IS
    'at most this many messages handed out a second by message_dequeue, all consumers together (NULL: no limit)';
COMMENT ON COLUMN pgqueue.queue.key_window_ms IS
    'how long (ms) an idempotency key stays taken after its message was completed or delivered (0: only while it is live)';

-- At most one rate-limited queue per rate sequence (pgqueue.queue_rate_<id & 63>): two sharing
-- one would read each other's slots, and neither limit would hold. An index, not a check in
-- queue_create / queue_alter, so that it holds for concurrent callers and old snapshots alike
-- (they raise 22023 for it).
CREATE UNIQUE INDEX queue_rate_stripe_key ON pgqueue.queue ((id & 63)) WHERE rate_limit IS NOT NULL;
