-- pgqueue 0.1: the core message queue.
--
-- Design (shared/seeds/001 and 004): one table of live messages ordered by a BIGINT
-- "dequeue_at" (epoch milliseconds) and a sequence id, so that one ascending key carries
-- both the schedule and the priority. Every dequeue is an index probe:
--   * message_ready_idx  (queue_id, dequeue_at, id) WHERE locked_until IS NULL
--       holds deliverable and scheduled messages; leased messages are not in it;
--   * message_leased_idx (queue_id, locked_until, id) WHERE locked_until IS NOT NULL
--       holds leased messages ordered by lease expiry, so an expired lease is one probe too;
--   * dead letters live in their own table and never cost a dequeue anything.
-- Every object is schema-qualified. PL/pgSQL functions pin search_path; SQL functions with a
-- SQL-standard body (RETURN ... / BEGIN ATOMIC) bind every name when they are created, so no
-- object a user creates later can hijack them, and without a SET clause the planner can inline
-- them into the hot paths.
-- Error codes are listed in README.md ("Error codes").

\echo Use "CREATE EXTENSION pgqueue" to load this file. \quit

-------------------------------------------------------------------------------
-- Tables
-------------------------------------------------------------------------------

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
    CONSTRAINT queue_pkey PRIMARY KEY (id),
    CONSTRAINT queue_name_key UNIQUE (name),
    CONSTRAINT queue_name_check CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$'),
    CONSTRAINT queue_lock_ms_check CHECK (lock_ms > 0),
    CONSTRAINT queue_max_attempts_check CHECK (max_attempts IS NULL OR max_attempts > 0),
    CONSTRAINT queue_retry_check CHECK (retry_base_ms >= 0 AND retry_cap_ms >= retry_base_ms),
    CONSTRAINT queue_max_size_check CHECK (max_size IS NULL OR max_size > 0)
);
ALTER SEQUENCE pgqueue.queue_id_seq OWNED BY pgqueue.queue.id;

COMMENT ON TABLE pgqueue.queue IS 'pgqueue: one row per queue with its settings; change it with queue_create/queue_alter/queue_drop';

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
    CONSTRAINT message_pkey PRIMARY KEY (id)
);
ALTER SEQUENCE pgqueue.message_id_seq OWNED BY pgqueue.message.id;

CREATE INDEX message_ready_idx ON pgqueue.message (queue_id, dequeue_at, id)
    WHERE locked_until IS NULL;
CREATE INDEX message_leased_idx ON pgqueue.message (queue_id, locked_until, id)
    WHERE locked_until IS NOT NULL;

COMMENT ON TABLE pgqueue.message IS 'pgqueue: live messages (ready, scheduled, leased); use the pgqueue.message_* functions to change them';
COMMENT ON COLUMN pgqueue.message.dequeue_at IS 'epoch ms after which the message may be delivered; past or negative values jump the queue (priority)';
COMMENT ON COLUMN pgqueue.message.locked_until IS 'epoch ms at which the current lease runs out; NULL when not leased';
COMMENT ON COLUMN pgqueue.message.attempts IS 'deliveries so far; the fencing token for complete/heartbeat/defer/fail';
COMMENT ON COLUMN pgqueue.message.content_type IS 'how content is encoded (e.g. application/json); NULL for raw bytes';
COMMENT ON COLUMN pgqueue.message.state IS 'checkpoint state saved by message_defer';

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

-- Upper bound on the number of live messages of a queue that has max_size.
-- Derived data (recounted when missing or when it says "full"), so not dumped.
CREATE TABLE pgqueue.queue_size (
    queue_id integer NOT NULL,
    upper    bigint  NOT NULL,
    CONSTRAINT queue_size_pkey PRIMARY KEY (queue_id)
);

COMMENT ON TABLE pgqueue.queue_size IS 'pgqueue internal: cached upper bound of live messages per capped queue';

-- pg_dump must keep the queue's contents and settings (landscape.md, failure 10).
SELECT pg_catalog.pg_extension_config_dump('pgqueue.queue', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.queue_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.message', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.message_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.dead_letter', '');

-------------------------------------------------------------------------------
-- Time
-------------------------------------------------------------------------------

-- Convert a timestamp to epoch milliseconds (floor).
CREATE FUNCTION pgqueue.to_epoch(p_ts timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN floor(EXTRACT(EPOCH FROM (p_ts AT TIME ZONE 'UTC')) * 1000)::bigint;

COMMENT ON FUNCTION pgqueue.to_epoch(timestamptz) IS
    'Convert a timestamptz to BIGINT milliseconds since the Unix epoch (floor)';

-- Convert epoch milliseconds back to a timestamp.
CREATE FUNCTION pgqueue.from_epoch(p_ms bigint)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN to_timestamp(p_ms / 1000.0);

COMMENT ON FUNCTION pgqueue.from_epoch(bigint) IS
    'Convert BIGINT milliseconds since the Unix epoch to a timestamptz';

-- The current wall-clock time in epoch milliseconds (leases and due times use this).
CREATE FUNCTION pgqueue.now_ms()
RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN pgqueue.to_epoch(clock_timestamp());

COMMENT ON FUNCTION pgqueue.now_ms() IS
    'Current wall-clock time (clock_timestamp) in epoch milliseconds, the clock of leases and due times';

-- Map a priority (0 = lowest of the prioritised, larger = sooner) onto dequeue_at.
CREATE FUNCTION pgqueue.priority_dequeue_at(p_priority integer)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_priority < 0 THEN
        RAISE EXCEPTION 'priority must be >= 0, got %', p_priority
            USING ERRCODE = '22023',
                  HINT = 'Priorities run from 0 upwards; larger values are delivered first.';
    END IF;
    RETURN -1::bigint - p_priority;
END;
$$;

COMMENT ON FUNCTION pgqueue.priority_dequeue_at(integer) IS
    'dequeue_at for a prioritised message: -1 - priority, so it is ahead of every normal message and larger priorities go first';

-------------------------------------------------------------------------------
-- Internal helpers
-------------------------------------------------------------------------------

-- Raise the right error for a queue name that was not found: invalid name or unknown queue.
CREATE FUNCTION pgqueue._queue_missing(p_queue text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_queue IS NULL THEN
        RAISE EXCEPTION 'queue name must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        RAISE EXCEPTION 'invalid queue name %', quote_literal(left(p_queue, 100))
            USING ERRCODE = '42602',
                  HINT = 'A queue name has 1 to 48 characters from A-Z a-z 0-9 _ . - and does not start with . or -.';
    END IF;
    RAISE EXCEPTION 'queue "%" does not exist', p_queue
        USING ERRCODE = 'PQ001',
              HINT = 'Create it with pgqueue.queue_create(); list queues with pgqueue.queue_list().';
END;
$$;

-- Fetch a queue's settings row, raising PQ001/42602/22004 if there is none.
CREATE FUNCTION pgqueue._queue_get(p_queue text)
RETURNS pgqueue.queue
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
BEGIN
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    RETURN v_queue;
END;
$$;

-- Count the live messages of a queue, stopping at p_stop (an index-only bounded count).
CREATE FUNCTION pgqueue._queue_count(p_queue_id integer, p_stop bigint)
RETURNS bigint
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message m
                                  WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                  LIMIT p_stop) r)
         + (SELECT count(*) FROM (SELECT 1 FROM pgqueue.message m
                                  WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                  LIMIT p_stop) l);
END;

-- Locking discipline (transaction-level advisory locks, released at commit or rollback):
--   (1885827445, queue id) SHARED is taken by every operation before it touches any message or
--       dead-letter row of the queue: producers, consumers (message_dequeue only tries, so it
--       never waits), complete/heartbeat/defer/fail, requeue and purge. queue_drop, and
--       queue_alter when max_size changes, take it EXCLUSIVE before touching any row. So drop
--       waits for in-flight work while holding nothing anyone else waits for: no deadlock with a
--       transaction that consumes and produces on the same queue, and no orphan messages.
--   (1885827446, queue id) EXCLUSIVE is taken by producers of a capped queue (max_size), so
--       they take turns and the cap is never exceeded. Uncapped queues pay one shared lock only.

-- Take the queue's shared lock (blocking) for the rest of the transaction.
CREATE FUNCTION pgqueue._queue_lock_shared(p_queue_id integer)
RETURNS void
LANGUAGE sql VOLATILE
RETURN pg_advisory_xact_lock_shared(1885827445, p_queue_id);

-- Admit p_count new messages into a queue: take its shared lock, enforce max_size, and return
-- the queue's settings (read again after the lock, since a drop or alter may just have ended).
CREATE FUNCTION pgqueue._queue_admit(p_queue text, p_count bigint)
RETURNS pgqueue.queue
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
    v_upper bigint;
BEGIN
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1885827445, v_queue.id);
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.id = v_queue.id;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF v_queue.max_size IS NULL OR p_count = 0 THEN
        RETURN v_queue;
    END IF;

    PERFORM pg_advisory_xact_lock(1885827446, v_queue.id);
    SELECT s.upper INTO v_upper FROM pgqueue.queue_size s WHERE s.queue_id = v_queue.id;
    -- The cached value only grows with inserts while consumers shrink the real size, so it is
    -- an upper bound; recount exactly (bounded by max_size) only when the bound says "full".
    IF v_upper IS NULL OR v_upper + p_count > v_queue.max_size THEN
        v_upper := pgqueue._queue_count(v_queue.id, least(v_queue.max_size, 9223372036854775806) + 1);
    END IF;
    IF v_upper + p_count > v_queue.max_size THEN
        RAISE EXCEPTION 'queue "%" is full (max_size %): % more message(s) refused',
                        p_queue, v_queue.max_size, p_count
            USING ERRCODE = 'PQ003',
                  HINT = 'Back off and retry later, or raise max_size with pgqueue.queue_alter().';
    END IF;
    INSERT INTO pgqueue.queue_size AS s (queue_id, upper)
    VALUES (v_queue.id, v_upper + p_count)
    ON CONFLICT (queue_id) DO UPDATE SET upper = EXCLUDED.upper;
    RETURN v_queue;
END;
$$;

-- Exponential back-off with equal jitter for the n-th failed attempt: d = min(cap, base * 2^(n-1)),
-- result uniformly in [d/2, d].
CREATE FUNCTION pgqueue._backoff_ms(p_attempts integer, p_base_ms bigint, p_cap_ms bigint)
RETURNS bigint
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    SELECT (d / 2 + floor(random() * (d - d / 2 + 1)))::bigint
      FROM (SELECT least(p_cap_ms::float8,
                         p_base_ms * power(2::float8, least(greatest(p_attempts - 1, 0), 60)))::bigint AS d) s;
END;

-- Move one locked message to the dead letters.
CREATE FUNCTION pgqueue._dead_letter(p_id bigint, p_error text, p_now bigint)
RETURNS void
LANGUAGE sql VOLATILE
BEGIN ATOMIC
    WITH d AS (
        DELETE FROM pgqueue.message m WHERE m.id = p_id
        RETURNING m.id, m.queue_id, m.dequeue_at, m.attempts, m.created_at,
                  m.content, m.content_type, m.state, m.last_error
    )
    INSERT INTO pgqueue.dead_letter
        (id, queue_id, dequeue_at, attempts, created_at, dead_at,
         content, content_type, state, last_error)
    SELECT d.id, d.queue_id, d.dequeue_at, d.attempts, d.created_at, p_now,
           d.content, d.content_type, d.state, coalesce(p_error, d.last_error)
      FROM d;
END;

-- Check that an argument that must not be NULL is not.
CREATE FUNCTION pgqueue._not_null(p_value anyelement, p_name text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', p_name USING ERRCODE = '22004';
    END IF;
END;
$$;

-- Check a lease length in milliseconds (p_allow_zero: 0 means delete on dequeue).
CREATE FUNCTION pgqueue._check_lock_ms(p_lock_ms bigint, p_allow_zero boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_lock_ms < 0 OR (p_lock_ms = 0 AND NOT p_allow_zero) OR p_lock_ms > 31536000000 THEN
        RAISE EXCEPTION 'lock_ms must be % and at most 31536000000 (a year), got %',
                        CASE WHEN p_allow_zero THEN '>= 0' ELSE '> 0' END, p_lock_ms
            USING ERRCODE = '22023',
                  HINT = 'lock_ms is the lease length in milliseconds; 0 (dequeue only) deletes on delivery.';
    END IF;
END;
$$;

-- Validate queue options shared by queue_create and queue_alter.
CREATE FUNCTION pgqueue._check_queue_options(
    p_lock_ms bigint, p_max_attempts integer, p_retry_base_ms bigint,
    p_retry_cap_ms bigint, p_max_size bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgqueue._check_lock_ms(p_lock_ms, false);
    IF p_max_attempts < 0 THEN
        RAISE EXCEPTION 'max_attempts must be >= 0 (0 = unlimited), got %', p_max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF p_retry_base_ms < 0 OR p_retry_cap_ms < 0 OR p_retry_cap_ms < p_retry_base_ms
       OR p_retry_cap_ms > 31536000000 THEN
        RAISE EXCEPTION 'retry back-off needs 0 <= retry_base_ms <= retry_cap_ms <= 31536000000, got % and %',
                        p_retry_base_ms, p_retry_cap_ms
            USING ERRCODE = '22023';
    END IF;
    IF p_max_size < 0 THEN
        RAISE EXCEPTION 'max_size must be >= 0 (0 = unbounded), got %', p_max_size
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-------------------------------------------------------------------------------
-- Queues
-------------------------------------------------------------------------------

-- Create a queue.
CREATE FUNCTION pgqueue.queue_create(
    p_queue         text,
    p_lock_ms       bigint  DEFAULT 30000,
    p_max_attempts  integer DEFAULT NULL,
    p_retry_base_ms bigint  DEFAULT 1000,
    p_retry_cap_ms  bigint  DEFAULT 3600000,
    p_max_size      bigint  DEFAULT NULL,
    p_notify        boolean DEFAULT false,
    p_if_not_exists boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgqueue._not_null(p_queue, 'queue name');
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    PERFORM pgqueue._not_null(p_lock_ms, 'lock_ms');
    PERFORM pgqueue._not_null(p_retry_base_ms, 'retry_base_ms');
    PERFORM pgqueue._not_null(p_retry_cap_ms, 'retry_cap_ms');
    PERFORM pgqueue._not_null(p_notify, 'notify');
    PERFORM pgqueue._not_null(p_if_not_exists, 'if_not_exists');
    PERFORM pgqueue._check_queue_options(p_lock_ms, p_max_attempts, p_retry_base_ms,
                                         p_retry_cap_ms, p_max_size);
    BEGIN
        INSERT INTO pgqueue.queue (name, lock_ms, max_attempts, retry_base_ms, retry_cap_ms,
                                   max_size, notify)
        VALUES (p_queue, p_lock_ms, nullif(p_max_attempts, 0), p_retry_base_ms, p_retry_cap_ms,
                nullif(p_max_size, 0), p_notify);
    EXCEPTION WHEN unique_violation THEN
        IF p_if_not_exists THEN
            RETURN;
        END IF;
        RAISE EXCEPTION 'queue "%" already exists', p_queue
            USING ERRCODE = 'PQ002',
                  HINT = 'Use pgqueue.queue_alter() to change it, or p_if_not_exists => true.';
    END;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_create(text, bigint, integer, bigint, bigint, bigint, boolean, boolean) IS
    'Create a queue: lease lock_ms, max_attempts (NULL/0 = unlimited), retry back-off base and cap (ms), max_size (NULL/0 = unbounded), notify';

-- Change a queue's settings; NULL leaves a setting as it is, 0 clears max_attempts/max_size.
CREATE FUNCTION pgqueue.queue_alter(
    p_queue         text,
    p_lock_ms       bigint  DEFAULT NULL,
    p_max_attempts  integer DEFAULT NULL,
    p_retry_base_ms bigint  DEFAULT NULL,
    p_retry_cap_ms  bigint  DEFAULT NULL,
    p_max_size      bigint  DEFAULT NULL,
    p_notify        boolean DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
BEGIN
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF p_max_size IS NOT NULL THEN
        -- wait for in-flight producers so that the new cap counts every message
        PERFORM pg_advisory_xact_lock(1885827445, v_queue.id);
    END IF;
    PERFORM pgqueue._check_queue_options(
        coalesce(p_lock_ms, v_queue.lock_ms), p_max_attempts,
        coalesce(p_retry_base_ms, v_queue.retry_base_ms),
        coalesce(p_retry_cap_ms, v_queue.retry_cap_ms), p_max_size);
    UPDATE pgqueue.queue q
       SET lock_ms       = coalesce(p_lock_ms, q.lock_ms),
           max_attempts  = CASE WHEN p_max_attempts IS NULL THEN q.max_attempts
                                ELSE nullif(p_max_attempts, 0) END,
           retry_base_ms = coalesce(p_retry_base_ms, q.retry_base_ms),
           retry_cap_ms  = coalesce(p_retry_cap_ms, q.retry_cap_ms),
           max_size      = CASE WHEN p_max_size IS NULL THEN q.max_size
                                ELSE nullif(p_max_size, 0) END,
           notify        = coalesce(p_notify, q.notify)
     WHERE q.id = v_queue.id;
    IF p_max_size IS NOT NULL THEN
        DELETE FROM pgqueue.queue_size s WHERE s.queue_id = v_queue.id;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_alter(text, bigint, integer, bigint, bigint, bigint, boolean) IS
    'Change a queue''s settings; NULL keeps a setting, 0 makes max_attempts unlimited or max_size unbounded';

-- Drop a queue with its messages and dead letters; false if it did not exist.
CREATE FUNCTION pgqueue.queue_drop(p_queue text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id integer;
BEGIN
    PERFORM pgqueue._not_null(p_queue, 'queue name');
    IF p_queue = 'default' THEN
        RAISE EXCEPTION 'the default queue cannot be dropped'
            USING ERRCODE = 'PQ004',
                  HINT = 'Empty it instead: complete or purge its messages.';
    END IF;
    IF p_queue !~ '^[A-Za-z0-9_][A-Za-z0-9_.-]{0,47}$' THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    SELECT q.id INTO v_id FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- wait for in-flight work on this queue; new work waits for us (or, dequeue, skips)
    PERFORM pg_advisory_xact_lock(1885827445, v_id);
    DELETE FROM pgqueue.queue q WHERE q.id = v_id;
    IF NOT FOUND THEN
        RETURN false;  -- dropped by someone else meanwhile
    END IF;
    DELETE FROM pgqueue.message m WHERE m.queue_id = v_id AND m.locked_until IS NULL;
    DELETE FROM pgqueue.message m WHERE m.queue_id = v_id AND m.locked_until IS NOT NULL;
    DELETE FROM pgqueue.dead_letter d WHERE d.queue_id = v_id;
    DELETE FROM pgqueue.queue_size s WHERE s.queue_id = v_id;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_drop(text) IS
    'Drop a queue with its messages and dead letters; returns false if it did not exist';

-- List the queues and their settings.
CREATE FUNCTION pgqueue.queue_list()
RETURNS TABLE (queue text, lock_ms bigint, max_attempts integer, retry_base_ms bigint,
               retry_cap_ms bigint, max_size bigint, notify boolean, created_at timestamptz)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT q.name, q.lock_ms, q.max_attempts, q.retry_base_ms, q.retry_cap_ms,
           q.max_size, q.notify, q.created_at
      FROM pgqueue.queue q
     ORDER BY q.name;
END;

COMMENT ON FUNCTION pgqueue.queue_list() IS 'List every queue with its settings, by name';

-- Count a queue's messages by state.
CREATE FUNCTION pgqueue.queue_stats(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, dead bigint,
               oldest_ready_age_ms bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint := pgqueue.now_ms();
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name,
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now)
         + (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NOT NULL AND m.locked_until <= v_now),
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at > v_now),
           (SELECT count(*) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NOT NULL AND m.locked_until > v_now),
           (SELECT count(*) FROM pgqueue.dead_letter d WHERE d.queue_id = q.id),
           (SELECT v_now - greatest(m.dequeue_at, m.created_at) FROM pgqueue.message m
             WHERE m.queue_id = q.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now
             ORDER BY m.dequeue_at, m.id LIMIT 1)
      FROM pgqueue.queue q
     WHERE p_queue IS NULL OR q.name = p_queue
     ORDER BY q.name;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_stats(text) IS
    'Per queue: ready (incl. expired leases), scheduled, leased and dead counts, and how long the next ready message has waited (ms)';

-- When the next message of a queue becomes deliverable (epoch ms), NULL if none is waiting.
CREATE FUNCTION pgqueue.queue_next_due(p_queue text DEFAULT 'default')
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    RETURN least(
        (SELECT m.dequeue_at FROM pgqueue.message m
          WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL
          ORDER BY m.dequeue_at, m.id LIMIT 1),
        (SELECT m.locked_until FROM pgqueue.message m
          WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
          ORDER BY m.locked_until, m.id LIMIT 1));
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_next_due(text) IS
    'Epoch ms at which the next message of the queue becomes deliverable (scheduled or lease expiry); NULL if the queue is empty';

-------------------------------------------------------------------------------
-- Producing
-------------------------------------------------------------------------------

-- Enqueue one message; returns its id.
CREATE FUNCTION pgqueue.message_create(
    p_queue        text,
    p_content      bytea,
    p_dequeue_at   bigint DEFAULT NULL,
    p_content_type text   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
    v_now   bigint := pgqueue.to_epoch(now());
    v_id    bigint;
BEGIN
    IF p_content IS NULL THEN
        RAISE EXCEPTION 'message content must not be NULL'
            USING ERRCODE = '22004',
                  HINT = 'Send an empty bytea for an empty message.';
    END IF;
    -- Fast path (uncapped queue): look up, take the shared lock, and insert only if the queue
    -- still exists uncapped in the INSERT's own snapshot, taken after the lock.
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
    IF FOUND AND v_queue.max_size IS NULL THEN
        PERFORM pg_advisory_xact_lock_shared(1885827445, v_queue.id);
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
        SELECT v_queue.id, coalesce(p_dequeue_at, v_now), v_now, p_content, p_content_type
         WHERE EXISTS (SELECT 1 FROM pgqueue.queue q WHERE q.id = v_queue.id AND q.max_size IS NULL)
        RETURNING id INTO v_id;
    END IF;
    IF v_id IS NULL THEN
        -- unknown queue (raises), capped queue, or a drop/alter got in first: full admission
        v_queue := pgqueue._queue_admit(p_queue, 1);
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
        VALUES (v_queue.id, coalesce(p_dequeue_at, v_now), v_now, p_content, p_content_type)
        RETURNING id INTO v_id;
    END IF;
    IF v_queue.notify THEN
        PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
    END IF;
    RETURN v_id;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create(text, bytea, bigint, text) IS
    'Enqueue a message; dequeue_at NULL = now, future = scheduled, past or negative = ahead of normal messages (priority); returns the id';

-- Enqueue one message on the default queue.
CREATE FUNCTION pgqueue.message_create(p_content bytea)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN pgqueue.message_create('default', p_content, NULL::bigint, NULL::text);

COMMENT ON FUNCTION pgqueue.message_create(bytea) IS
    'Enqueue a message on the default queue; returns the id';

-- Enqueue many messages in one statement; returns their ids in input order.
CREATE FUNCTION pgqueue.message_create_batch(
    p_queue         text,
    p_contents      bytea[],
    p_dequeue_at    bigint   DEFAULT NULL,
    p_content_type  text     DEFAULT NULL,
    p_dequeue_ats   bigint[] DEFAULT NULL,
    p_content_types text[]   DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue;
    v_now   bigint := pgqueue.to_epoch(now());
    v_n     integer := cardinality(p_contents);
BEGIN
    IF p_contents IS NULL THEN
        RAISE EXCEPTION 'p_contents must not be NULL'
            USING ERRCODE = '22004',
                  HINT = 'Pass an empty array to enqueue nothing.';
    END IF;
    IF array_ndims(p_contents) > 1 OR array_ndims(p_dequeue_ats) > 1 OR array_ndims(p_content_types) > 1 THEN
        RAISE EXCEPTION 'batch arrays must be one-dimensional'
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_contents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message content must not be NULL (element %)', array_position(p_contents, NULL)
            USING ERRCODE = '22004',
                  HINT = 'Send an empty bytea for an empty message.';
    END IF;
    IF cardinality(p_dequeue_ats) <> v_n OR cardinality(p_content_types) <> v_n THEN
        RAISE EXCEPTION 'p_dequeue_ats and p_content_types must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    v_queue := pgqueue._queue_admit(p_queue, v_n);
    IF v_n = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
    SELECT v_queue.id, coalesce(u.dequeue_at, p_dequeue_at, v_now), v_now, u.content,
           coalesce(u.content_type, p_content_type)
      FROM unnest(p_contents, p_dequeue_ats, p_content_types)
           WITH ORDINALITY AS u(content, dequeue_at, content_type, n)
     ORDER BY u.n
    RETURNING id;
    IF v_queue.notify THEN
        PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create_batch(text, bytea[], bigint, text, bigint[], text[]) IS
    'Enqueue many messages in one statement (all or none); per-message dequeue_ats/content_types override the scalars; returns ids in input order';

-------------------------------------------------------------------------------
-- Consuming
-------------------------------------------------------------------------------

-- Hand out up to p_limit deliverable messages, with a lease (p_lock_ms > 0) or deleting them (0).
CREATE FUNCTION pgqueue.message_dequeue(
    p_queue   text    DEFAULT 'default',
    p_limit   integer DEFAULT 1,
    p_lock_ms bigint  DEFAULT NULL)
RETURNS TABLE (id bigint, content bytea, attempts integer, dequeue_at bigint, state bytea,
               content_type text, created_at bigint, locked_until bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- Custom plans would be re-planned on every call (a LIMIT parameter makes the generic plan look
-- dear to the plan cache); the generic plans are the same index probes and save half the call.
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_queue   pgqueue.queue;
    v_now     bigint := pgqueue.now_ms();
    v_lock_ms bigint;
    v_dead    bigint;
    v_dead_ids bigint[];
    v_ids     bigint[];
BEGIN
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.name = p_queue;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    IF p_limit IS NULL THEN
        RAISE EXCEPTION 'p_limit must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF p_limit < 1 OR p_limit > 10000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 10000, got %', p_limit
            USING ERRCODE = '22023';
    END IF;
    v_lock_ms := coalesce(p_lock_ms, v_queue.lock_ms);
    IF v_lock_ms < 0 OR v_lock_ms > 31536000000 THEN
        PERFORM pgqueue._check_lock_ms(v_lock_ms, true);  -- raises
    END IF;
    -- Never wait: if a drop (or a max_size change) holds the queue, there is nothing to hand out.
    IF NOT pg_try_advisory_xact_lock_shared(1885827445, v_queue.id) THEN
        RETURN;
    END IF;

    -- Expired leases first (overdue work): one bounded probe of message_leased_idx. Those whose
    -- lease ran out max_attempts times go to the dead letters instead: a poison message must not
    -- loop forever. Then ready messages by (dequeue_at, id) through message_ready_idx, only if
    -- the first probe left room.
    SELECT coalesce(array_agg(e.id ORDER BY e.locked_until, e.id)
                      FILTER (WHERE v_queue.max_attempts IS NULL OR e.attempts < v_queue.max_attempts), '{}'),
           coalesce(array_agg(e.id) FILTER (WHERE e.attempts >= v_queue.max_attempts), '{}')
      INTO v_ids, v_dead_ids
      FROM (SELECT m.id, m.attempts, m.locked_until FROM pgqueue.message m
             WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
               AND m.locked_until <= v_now
             ORDER BY m.locked_until, m.id
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) e;
    FOREACH v_dead IN ARRAY v_dead_ids LOOP
        PERFORM pgqueue._dead_letter(v_dead, 'lease expired', v_now);
    END LOOP;
    IF cardinality(v_ids) < p_limit THEN
        v_ids := v_ids || ARRAY(
            SELECT m.id FROM pgqueue.message m
             WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL AND m.dequeue_at <= v_now
             ORDER BY m.dequeue_at, m.id
             LIMIT p_limit - cardinality(v_ids)
               FOR UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;

    IF v_lock_ms = 0 THEN
        RETURN QUERY
        WITH d AS (
            DELETE FROM pgqueue.message m WHERE m.id = ANY (v_ids)
            RETURNING m.id, m.content, m.attempts + 1 AS attempts, m.dequeue_at, m.state,
                      m.content_type, m.created_at, NULL::bigint AS locked_until)
        SELECT * FROM d ORDER BY array_position(v_ids, d.id);
    ELSE
        RETURN QUERY
        WITH u AS (
            UPDATE pgqueue.message m
               SET locked_until = v_now + v_lock_ms, attempts = m.attempts + 1
             WHERE m.id = ANY (v_ids)
            RETURNING m.id, m.content, m.attempts, m.dequeue_at, m.state,
                      m.content_type, m.created_at, m.locked_until)
        SELECT * FROM u ORDER BY array_position(v_ids, u.id);
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_dequeue(text, integer, bigint) IS
    'Hand out up to p_limit deliverable messages (expired leases first, then by dequeue_at, id) without waiting on other consumers; p_lock_ms NULL = queue lease, 0 = delete on dequeue';

-- Acknowledge a leased message: delete it. False if the token is stale.
CREATE FUNCTION pgqueue.message_complete(p_id bigint, p_attempts integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id, 'message id');
        PERFORM pgqueue._not_null(p_attempts, 'attempts token');
    END IF;
    -- the queue's shared lock before the row lock (see the locking discipline above)
    PERFORM pg_advisory_xact_lock_shared(1885827445, m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    DELETE FROM pgqueue.message m
     WHERE m.id = p_id AND m.attempts = p_attempts AND m.locked_until IS NOT NULL;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_complete(bigint, integer) IS
    'Complete (delete) a leased message; returns false and changes nothing if the attempts token is stale';

-- Extend a lease by p_lock_ms from now (NULL: the queue's lock_ms). False if the token is stale.
CREATE FUNCTION pgqueue.message_heartbeat(p_id bigint, p_attempts integer, p_lock_ms bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id, 'message id');
        PERFORM pgqueue._not_null(p_attempts, 'attempts token');
    END IF;
    -- the queue's shared lock before the row lock (see the locking discipline above)
    PERFORM pg_advisory_xact_lock_shared(1885827445, m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    PERFORM pgqueue._check_lock_ms(p_lock_ms, false);
    UPDATE pgqueue.message m
       SET locked_until = pgqueue.now_ms() + coalesce(p_lock_ms, q.lock_ms)
      FROM pgqueue.queue q
     WHERE m.id = p_id AND m.attempts = p_attempts AND m.locked_until IS NOT NULL
       AND q.id = m.queue_id;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_heartbeat(bigint, integer, bigint) IS
    'Extend a lease to now + p_lock_ms (NULL = the queue''s lock_ms); returns false if the attempts token is stale';

-- Give a leased message back for later, keeping its row, attempts and (new) checkpoint state.
CREATE FUNCTION pgqueue.message_defer(
    p_id         bigint,
    p_attempts   integer,
    p_dequeue_at bigint,
    p_state      bytea DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id, 'message id');
        PERFORM pgqueue._not_null(p_attempts, 'attempts token');
    END IF;
    -- the queue's shared lock before the row lock (see the locking discipline above)
    PERFORM pg_advisory_xact_lock_shared(1885827445, m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    UPDATE pgqueue.message m
       SET locked_until = NULL,
           dequeue_at   = coalesce(p_dequeue_at, pgqueue.now_ms()),
           state        = coalesce(p_state, m.state)
     WHERE m.id = p_id AND m.attempts = p_attempts AND m.locked_until IS NOT NULL;
    RETURN FOUND;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_defer(bigint, integer, bigint, bytea) IS
    'Release a leased message until p_dequeue_at (NULL = now), keeping attempts; p_state (if not NULL) replaces the checkpoint state; false if the token is stale';

-- Report a failed attempt: retry after the queue's back-off, or dead-letter after max_attempts.
CREATE FUNCTION pgqueue.message_fail(
    p_id         bigint,
    p_attempts   integer,
    p_error      text,
    p_dequeue_at bigint DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now   bigint := pgqueue.now_ms();
    v_queue pgqueue.queue;
BEGIN
    IF p_id IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_id, 'message id');
        PERFORM pgqueue._not_null(p_attempts, 'attempts token');
    END IF;
    -- the queue's shared lock before the row lock (see the locking discipline above)
    PERFORM pg_advisory_xact_lock_shared(1885827445, m.queue_id) FROM pgqueue.message m WHERE m.id = p_id;
    SELECT q.* INTO v_queue
      FROM pgqueue.message m JOIN pgqueue.queue q ON q.id = m.queue_id
     WHERE m.id = p_id AND m.attempts = p_attempts AND m.locked_until IS NOT NULL
       FOR UPDATE OF m;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_queue.max_attempts IS NOT NULL AND p_attempts >= v_queue.max_attempts THEN
        PERFORM pgqueue._dead_letter(p_id, p_error, v_now);
    ELSE
        UPDATE pgqueue.message m
           SET locked_until = NULL,
               dequeue_at   = coalesce(p_dequeue_at,
                                       v_now + pgqueue._backoff_ms(p_attempts, v_queue.retry_base_ms,
                                                                   v_queue.retry_cap_ms)),
               last_error   = p_error
         WHERE m.id = p_id;
    END IF;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.message_fail(bigint, integer, text, bigint) IS
    'Fail a leased message: retry after exponential back-off with jitter (or at p_dequeue_at), or move it to the dead letters once attempts reach max_attempts; false if the token is stale';

-------------------------------------------------------------------------------
-- Dead letters
-------------------------------------------------------------------------------

-- Dead letters with their queue's name, readable with plain SQL.
CREATE VIEW pgqueue.dead_letters AS
SELECT d.id, q.name AS queue, d.content, d.content_type, d.state, d.attempts, d.last_error,
       d.created_at, d.dead_at, pgqueue.from_epoch(d.dead_at) AS dead_time
  FROM pgqueue.dead_letter d
  JOIN pgqueue.queue q ON q.id = d.queue_id;

COMMENT ON VIEW pgqueue.dead_letters IS
    'pgqueue dead letters: queue, content, attempts, last error and when (dead_at epoch ms, dead_time)';

-- Put dead letters back on their queue as new messages (fresh id, attempts 0); returns how many.
CREATE FUNCTION pgqueue.dead_letter_requeue(
    p_queue      text,
    p_ids        bigint[] DEFAULT NULL,
    p_dequeue_at bigint   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint := pgqueue.to_epoch(now());
    v_ids   bigint[];
BEGIN
    PERFORM pgqueue._queue_lock_shared(v_queue.id);
    v_ids := ARRAY(SELECT d.id FROM pgqueue.dead_letter d
                    WHERE d.queue_id = v_queue.id AND (p_ids IS NULL OR d.id = ANY (p_ids))
                    ORDER BY d.id
                      FOR UPDATE);
    PERFORM pgqueue._queue_admit(p_queue, cardinality(v_ids));
    -- A fresh id keeps fencing sound: no token handed out before can match the new message.
    WITH d AS (
        DELETE FROM pgqueue.dead_letter d WHERE d.id = ANY (v_ids)
        RETURNING d.id, d.created_at, d.content, d.content_type, d.state, d.last_error
    )
    INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, state, last_error)
    SELECT v_queue.id, coalesce(p_dequeue_at, v_now), d.created_at, d.content, d.content_type,
           d.state, d.last_error
      FROM d ORDER BY d.id;
    IF cardinality(v_ids) > 0 AND v_queue.notify THEN
        PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
    END IF;
    RETURN cardinality(v_ids);
END;
$$;

COMMENT ON FUNCTION pgqueue.dead_letter_requeue(text, bigint[], bigint) IS
    'Move dead letters of a queue (all, or the ids given) back to it as new messages with attempts 0; returns how many';

-- Delete dead letters of a queue (all, the ids given, and/or those dead before p_before ms).
CREATE FUNCTION pgqueue.dead_letter_purge(
    p_queue  text,
    p_ids    bigint[] DEFAULT NULL,
    p_before bigint   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_count bigint;
BEGIN
    PERFORM pgqueue._queue_lock_shared(v_queue.id);
    DELETE FROM pgqueue.dead_letter d
     WHERE d.queue_id = v_queue.id
       AND (p_ids IS NULL OR d.id = ANY (p_ids))
       AND (p_before IS NULL OR d.dead_at < p_before);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.dead_letter_purge(text, bigint[], bigint) IS
    'Delete dead letters of a queue: all, the ids given, and/or those dead before p_before (epoch ms); returns how many';

-------------------------------------------------------------------------------
-- Dump and restore of the default queue's settings
-------------------------------------------------------------------------------

-- CREATE EXTENSION makes the "default" queue; pg_restore then loads the dumped row for it.
-- Turn that insert into an update so that the dumped settings win and the restore succeeds.
CREATE FUNCTION pgqueue._queue_restore_default()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgqueue.queue q
       SET lock_ms = NEW.lock_ms, max_attempts = NEW.max_attempts,
           retry_base_ms = NEW.retry_base_ms, retry_cap_ms = NEW.retry_cap_ms,
           max_size = NEW.max_size, notify = NEW.notify, created_at = NEW.created_at
     WHERE q.name = NEW.name AND q.id = NEW.id;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER queue_restore_default
    BEFORE INSERT ON pgqueue.queue
    FOR EACH ROW WHEN (NEW.name = 'default')
    EXECUTE FUNCTION pgqueue._queue_restore_default();

-------------------------------------------------------------------------------
-- The default queue
-------------------------------------------------------------------------------

SELECT pgqueue.queue_create('default');
