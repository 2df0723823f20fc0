CREATE SEQUENCE pgqueue.schedule_id_seq AS integer;

-- Periodic messages: each row enqueues its content on its queue at every slot of its interval
-- or cron expression (UTC). pgqueue.schedule_run() enqueues the due slots; next_run is the next
-- slot not yet enqueued, advanced in the transaction that enqueues, under the row's lock, so a
-- slot is enqueued once however many schedulers run (docs: README "Periodic jobs").
CREATE TABLE pgqueue.schedule (
    id           integer     NOT NULL DEFAULT pg_catalog.nextval('pgqueue.schedule_id_seq'),
    name         text        NOT NULL,
    queue_id     integer     NOT NULL,
    every_ms     bigint,
    cron         text,
    content      bytea       NOT NULL,
    content_type text,
    missed       text        NOT NULL DEFAULT 'latest',
    next_run     bigint      NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_run     bigint,
    CONSTRAINT schedule_pkey PRIMARY KEY (id),
    CONSTRAINT schedule_name_key UNIQUE (name),
    CONSTRAINT schedule_kind_check CHECK ((every_ms IS NULL) <> (cron IS NULL)),
    CONSTRAINT schedule_every_check CHECK (every_ms IS NULL OR every_ms >= 1000),
    CONSTRAINT schedule_missed_check CHECK (missed IN ('latest', 'all'))
);
ALTER SEQUENCE pgqueue.schedule_id_seq OWNED BY pgqueue.schedule.id;
-- Due schedules by next_run; and a queue's schedules, which queue_drop deletes. (No foreign key to
-- pgqueue.queue: both are extension configuration tables, whose data a parallel pg_restore (-j)
-- loads in any order with the key already in place, and the schedules failed to load. The key's
-- guarantees are kept by schedule_create, which locks the queue's row, and queue_drop.)
CREATE INDEX schedule_next_run_idx ON pgqueue.schedule (next_run);
CREATE INDEX schedule_queue_idx ON pgqueue.schedule (queue_id);
-- The schedules that a run which read a later clock advanced: found after the server's clock was
-- set back (pgqueue.schedule_run), an index probe that finds nothing otherwise.
CREATE INDEX schedule_last_run_idx ON pgqueue.schedule (last_run);

COMMENT ON TABLE pgqueue.schedule IS 'pgqueue: periodic messages (interval or cron, UTC); change them with schedule_create/schedule_drop, enqueue due slots with schedule_run';
COMMENT ON COLUMN pgqueue.schedule.next_run IS 'epoch ms of the next slot not yet enqueued';
COMMENT ON COLUMN pgqueue.schedule.last_run IS 'epoch ms (the clock when it began) of the schedule_run that last set next_run; NULL: none yet';
COMMENT ON COLUMN pgqueue.schedule.missed IS 'slots missed while no scheduler ran: latest = one message for them all, all = one per slot';
