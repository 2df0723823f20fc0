CREATE SEQUENCE pgqueue.spark_consumer_id_seq AS integer;

-- One row per Spark consumer of a queue: its claim sequence and how far it acknowledged.
CREATE TABLE pgqueue.spark_consumer (
    id         integer NOT NULL DEFAULT pg_catalog.nextval('pgqueue.spark_consumer_id_seq'),
    queue_id   integer NOT NULL,
    name       text    NOT NULL,
    next_seq   bigint  NOT NULL DEFAULT 1,
    acked_seq  bigint  NOT NULL DEFAULT 0,
    created_at bigint  NOT NULL,
    holder_pid integer,
    holder_key bigint,
    CONSTRAINT spark_consumer_pkey PRIMARY KEY (id),
    CONSTRAINT spark_consumer_queue_name_key UNIQUE (queue_id, name),
    CONSTRAINT spark_consumer_name_check CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$'),
    CONSTRAINT spark_consumer_seq_check CHECK (acked_seq >= 0 AND acked_seq < next_seq)
);
ALTER SEQUENCE pgqueue.spark_consumer_id_seq OWNED BY pgqueue.spark_consumer.id;

COMMENT ON COLUMN pgqueue.spark_consumer.holder_pid IS
    'the backend that opened the consumer last (spark_consumer_open); it holds the consumer while it holds the session advisory lock holder_key';
COMMENT ON COLUMN pgqueue.spark_consumer.holder_key IS
    'random key of the holder''s session advisory lock, unknown to other roles until it is held (docs/locking.md)';

COMMENT ON TABLE pgqueue.spark_consumer IS
    'pgqueue: Spark consumers of a queue with their claim sequence (next_seq) and acknowledged position (acked_seq); see spark_consumers()';

CREATE SEQUENCE pgqueue.spark_claim_id_seq AS bigint;

-- Claims not acknowledged yet, with what they held when they were made.
CREATE TABLE pgqueue.spark_claim (
    id          bigint  NOT NULL DEFAULT pg_catalog.nextval('pgqueue.spark_claim_id_seq'),
    consumer_id integer NOT NULL,
    seq         bigint  NOT NULL,
    n           integer NOT NULL,
    min_id      bigint  NOT NULL,
    max_id      bigint  NOT NULL,
    claimed_at  bigint  NOT NULL,
    CONSTRAINT spark_claim_pkey PRIMARY KEY (id),
    CONSTRAINT spark_claim_consumer_seq_key UNIQUE (consumer_id, seq)
);
ALTER SEQUENCE pgqueue.spark_claim_id_seq OWNED BY pgqueue.spark_claim.id;

COMMENT ON TABLE pgqueue.spark_claim IS
    'pgqueue: open Spark claims (consumer, sequence number) with the count and id range of the messages they took';

-- Rows of Spark task attempts waiting for the driver to publish them (commitMode=job).
CREATE TABLE pgqueue.spark_staging (
    write_id     uuid    NOT NULL,
    partition    integer NOT NULL,
    attempt      bigint  NOT NULL,
    n            bigint  NOT NULL,
    dequeue_at   bigint,
    delay_ms     bigint,
    staged_at    bigint  NOT NULL,
    content      bytea   NOT NULL,
    content_type text,
    group_key    text,
    idem_key     text,
    CONSTRAINT spark_staging_pkey PRIMARY KEY (write_id, partition, attempt, n)
);

COMMENT ON TABLE pgqueue.spark_staging IS
    'pgqueue: messages staged by Spark task attempts until spark_publish moves the winners into their queue (not dumped: in-flight work)';

-- Publications done, so that each happens once.
CREATE TABLE pgqueue.spark_publish_log (
    publish_key  text    NOT NULL,
    write_id     uuid    NOT NULL,
    queue_id     integer NOT NULL,
    n            bigint  NOT NULL,
    published_at bigint  NOT NULL,
    CONSTRAINT spark_publish_log_pkey PRIMARY KEY (publish_key),
    CONSTRAINT spark_publish_log_key_check CHECK (length(publish_key) BETWEEN 1 AND 200)
);

COMMENT ON TABLE pgqueue.spark_publish_log IS
    'pgqueue: the publications of spark_publish by publish key, so that each happens once; a job-mode write''s row is deleted once its driver knows the outcome, a stream keeps its last micro-batch''s';
