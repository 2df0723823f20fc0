-- Messages that failed max_attempts times, or whose lease ran out that often.
CREATE TABLE pgqueue.dead_letter (
    id           bigint  NOT NULL,
    queue_id     integer NOT NULL,
    dequeue_at   bigint  NOT NULL,
    attempts     integer NOT NULL,
    created_at   bigint  NOT NULL,
    dead_at      bigint  NOT NULL,
    content      bytea   NOT NULL,
    content_type text,
    state        bytea,
    last_error   text,
    CONSTRAINT dead_letter_pkey PRIMARY KEY (id)
);
CREATE INDEX dead_letter_queue_idx ON pgqueue.dead_letter (queue_id, dead_at, id);

COMMENT ON TABLE pgqueue.dead_letter IS 'pgqueue: dead letters; read them through the pgqueue.dead_letters view';
