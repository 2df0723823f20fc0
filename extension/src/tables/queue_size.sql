-- Upper bound on the number of live messages of a queue that has max_size.
-- Derived data (recounted when missing or when it says "full"), so not dumped. Only the
-- extension's owner writes it, through pgqueue._queue_reserve (docs/locking.md): back-pressure
-- must not depend on rows that the producers it limits could write.
CREATE TABLE pgqueue.queue_size (
    queue_id integer NOT NULL,
    upper    bigint  NOT NULL,
    CONSTRAINT queue_size_pkey PRIMARY KEY (queue_id)
);

COMMENT ON TABLE pgqueue.queue_size IS 'pgqueue internal: cached upper bound of live messages per capped queue';
