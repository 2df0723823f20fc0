-- pgqueue 0.1 -> 0.2: what the Spark integration (python/pgqueue/spark) needs.
--
-- Consuming (spark.readStream): a consumer (a stable name per queue) CLAIMS ready messages. A
-- claim is numbered by the consumer's claim sequence (1, 2, 3, ... with no gaps); Spark's
-- offsets are those numbers. A claimed message stays in pgqueue.message with
--   * claim_id = the claim (pgqueue.spark_claim.id), found through message_claim_idx;
--   * locked_until = 253402300799999 (9999-12-31 23:59:59.999 UTC), a lease that never runs
--     out: it sits at the far end of message_leased_idx, so message_dequeue never sees it, it
--     is never dead-lettered, and queue_stats counts it as leased;
--   * attempts + 1, so no token handed out by an earlier lease matches it any more.
-- Acknowledging up to a sequence number deletes the claimed messages; releasing a consumer's
-- claims makes its messages deliverable again (at their old place in the queue).
--
-- Producing (df.write, commitMode=job): each Spark task attempt stages its rows under
-- (write_id, partition, attempt); the driver publishes the winning attempts once
-- (pgqueue.spark_publish_log) through pgqueue._queue_admit, the path of message_create_batch.
--
-- Reading (spark.read): a non-destructive snapshot of a queue split into id ranges.
--
-- Index probes: a claim takes its messages through message_ready_idx and message_leased_idx as
-- message_dequeue does (LIMIT, FOR UPDATE SKIP LOCKED); acks, releases and claimed reads go
-- through message_claim_idx (claim_id, id); snapshot reads are id range scans of the primary
-- keys of pgqueue.message and pgqueue.dead_letter.
--
-- Locking discipline (extends the one above pgqueue._queue_admit in 0.1):
--   (1885827445, queue id) SHARED before touching message rows, taken first: spark_claim only
--       tries it (like message_dequeue), spark_ack, spark_release, spark_consumer_open and
--       spark_publish (through _queue_admit) wait for it. So queue_drop, which takes it
--       EXCLUSIVE before deleting the queue's messages and spark_* rows, cannot deadlock with
--       them. Row locks on pgqueue.spark_consumer are taken only after it.
--   (1885827447, consumer id) EXCLUSIVE, session level: held by the one Spark query that
--       consumes as this consumer (spark_consumer_open, until spark_consumer_close or the end
--       of the session). spark_release refuses a consumer whose lock another session holds.
-- New error codes (README "Error codes"): PQ005 consumer in use, PQ006 undefined consumer,
-- PQ007 staged rows missing.
--
-- 0.1 functions re-created here (same signatures, CREATE OR REPLACE): queue_drop also drops the
-- queue's consumers and claims; message_complete/heartbeat/defer/fail ignore claimed messages.
-- tests/test_spark_sql.py fails if a copy drifts from its 0.1 original in anything else.

\echo Use "ALTER EXTENSION pgqueue UPDATE TO '0.2'" to load this file. \quit

-------------------------------------------------------------------------------
-- Tables
-------------------------------------------------------------------------------

ALTER TABLE pgqueue.message ADD COLUMN claim_id bigint;
ALTER TABLE pgqueue.message ADD CONSTRAINT message_claim_check
    CHECK (claim_id IS NULL OR coalesce(locked_until = 253402300799999, false));

CREATE INDEX message_claim_idx ON pgqueue.message (claim_id, id)
    WHERE claim_id IS NOT NULL;

COMMENT ON COLUMN pgqueue.message.claim_id IS
    'the Spark claim (pgqueue.spark_claim.id) that holds the message, NULL if none; a claimed message has locked_until 253402300799999 (year 9999)';

CREATE SEQUENCE pgqueue.spark_consumer_id_seq AS integer;

-- One row per Spark consumer of a queue: its claim sequence and how far it acknowledged.
CREATE TABLE pgqueue.spark_consumer (
    id         integer NOT NULL DEFAULT pg_catalog.nextval('pgqueue.spark_consumer_id_seq'),
    queue_id   integer NOT NULL,
    name       text    NOT NULL,
    next_seq   bigint  NOT NULL DEFAULT 1,
    acked_seq  bigint  NOT NULL DEFAULT 0,
    created_at bigint  NOT NULL,
    CONSTRAINT spark_consumer_pkey PRIMARY KEY (id),
    CONSTRAINT spark_consumer_queue_name_key UNIQUE (queue_id, name),
    CONSTRAINT spark_consumer_name_check CHECK (name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$'),
    CONSTRAINT spark_consumer_seq_check CHECK (acked_seq >= 0 AND acked_seq < next_seq)
);
ALTER SEQUENCE pgqueue.spark_consumer_id_seq OWNED BY pgqueue.spark_consumer.id;

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
    'pgqueue: one row per spark_publish that moved staged rows into a queue, keyed by its publish key';

-- Consumers, claims and the publish log must survive pg_dump (a restored consumer resumes
-- where it was; a replayed publish stays a no-op). Staging is in-flight work of running Spark
-- jobs, which publish into the database they staged in, never into a restored copy: not dumped.
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_consumer', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_consumer_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_claim', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_claim_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('pgqueue.spark_publish_log', '');

-------------------------------------------------------------------------------
-- Internal helpers
-------------------------------------------------------------------------------

-- The locked_until of a claimed message: 9999-12-31 23:59:59.999 UTC, a lease that never ends.
CREATE FUNCTION pgqueue._spark_claimed_until()
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN 253402300799999;

-- Check a consumer name: 22004 if NULL, 42602 if it breaks the rule.
CREATE FUNCTION pgqueue._spark_check_consumer(p_consumer text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_consumer IS NULL THEN
        RAISE EXCEPTION 'consumer name must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF p_consumer !~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$' THEN
        RAISE EXCEPTION 'invalid consumer name %', quote_literal(left(p_consumer, 120))
            USING ERRCODE = '42602',
                  HINT = 'A consumer name has 1 to 100 characters from A-Z a-z 0-9 _ . : - and does not start with . : or -.';
    END IF;
END;
$$;

-- Lock the queue for a Spark operation: wait for its shared lock (p_wait) or try it, then read
-- the queue again (a drop may just have ended). Returns NULL if p_wait is false and the lock is
-- taken EXCLUSIVE (a drop or a max_size change is running).
CREATE FUNCTION pgqueue._spark_queue_lock(p_queue text, p_wait boolean)
RETURNS pgqueue.queue
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
BEGIN
    IF p_wait THEN
        PERFORM pgqueue._queue_lock_shared(v_queue.id);
    ELSIF NOT pg_try_advisory_xact_lock_shared(1885827445, v_queue.id) THEN
        RETURN NULL;
    END IF;
    SELECT q.* INTO v_queue FROM pgqueue.queue q WHERE q.id = v_queue.id;
    IF NOT FOUND THEN
        PERFORM pgqueue._queue_missing(p_queue);
    END IF;
    RETURN v_queue;
END;
$$;

-- The consumer row, locked FOR UPDATE; created if missing and p_create, else PQ006.
-- Call with the queue's shared lock held.
CREATE FUNCTION pgqueue._spark_consumer_row(p_queue pgqueue.queue, p_consumer text, p_create boolean)
RETURNS pgqueue.spark_consumer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_consumer pgqueue.spark_consumer;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    SELECT c.* INTO v_consumer FROM pgqueue.spark_consumer c
     WHERE c.queue_id = p_queue.id AND c.name = p_consumer
       FOR UPDATE;
    IF FOUND THEN
        RETURN v_consumer;
    END IF;
    IF NOT p_create THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" does not exist', p_consumer, p_queue.name
            USING ERRCODE = 'PQ006',
                  HINT = 'A consumer is created by its first pgqueue.spark_consumer_open() or pgqueue.spark_claim(); list them with pgqueue.spark_consumers().';
    END IF;
    INSERT INTO pgqueue.spark_consumer (queue_id, name, created_at)
    VALUES (p_queue.id, p_consumer, pgqueue.now_ms())
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT c.* INTO STRICT v_consumer FROM pgqueue.spark_consumer c
     WHERE c.queue_id = p_queue.id AND c.name = p_consumer
       FOR UPDATE;
    RETURN v_consumer;
END;
$$;

-- The id of a consumer, NULL if there is none (no lock, no error).
CREATE FUNCTION pgqueue._spark_consumer_id(p_queue text, p_consumer text)
RETURNS integer
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT c.id FROM pgqueue.spark_consumer c JOIN pgqueue.queue q ON q.id = c.queue_id
     WHERE q.name = p_queue AND c.name = p_consumer;
END;

-------------------------------------------------------------------------------
-- Consuming: consumers, claims, acknowledgements
-------------------------------------------------------------------------------

-- Open a consumer for one Spark query: create it if needed, hold its session lock, return acked_seq.
CREATE FUNCTION pgqueue.spark_consumer_open(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue := pgqueue._spark_queue_lock(p_queue, true);
    v_consumer pgqueue.spark_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, true);
BEGIN
    IF NOT pg_try_advisory_lock(1885827447, v_consumer.id) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Only one Spark query may consume as a consumer at a time: stop the other query or use another consumer name.';
    END IF;
    RETURN v_consumer.acked_seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumer_open(text, text) IS
    'Create the Spark consumer if needed and hold its lock for this session (PQ005 if another session holds it); returns the acknowledged claim sequence number';

-- Give up this session's hold on a consumer (closing the session does it too).
CREATE FUNCTION pgqueue.spark_consumer_close(p_queue text, p_consumer text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_id integer := pgqueue._spark_consumer_id(p_queue, p_consumer);
    v_released boolean := false;
BEGIN
    IF v_id IS NULL THEN
        RETURN false;
    END IF;
    -- every spark_consumer_open of this session took the lock once; give back all of them
    WHILE EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted
                     AND l.classid = 1885827447 AND l.objid = v_id AND l.objsubid = 2) LOOP
        EXIT WHEN NOT pg_advisory_unlock(1885827447, v_id);
        v_released := true;
    END LOOP;
    RETURN v_released;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumer_close(text, text) IS
    'Release this session''s hold on a Spark consumer taken by spark_consumer_open; false if it held none';

-- Claim up to p_max_messages deliverable messages for a consumer; returns the claim's sequence number.
--
-- Takes expired leases first, then ready messages by (dequeue_at, id), as message_dequeue does,
-- with FOR UPDATE SKIP LOCKED; p_max_id (if not NULL) leaves out messages with a larger id.
-- A lease that ran out max_attempts times is dead-lettered, as by message_dequeue. Returns NULL
-- and claims nothing when no message is due (or a drop of the queue is running); creates the
-- consumer if needed. Errors: 22023 (p_max_messages outside 1..1000000), PQ001/42602/22004.
CREATE FUNCTION pgqueue.spark_claim(
    p_queue        text,
    p_consumer     text,
    p_max_messages integer,
    p_max_id       bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer pgqueue.spark_consumer;
    v_now      bigint := pgqueue.now_ms();
    v_dead     bigint;
    v_ids      bigint[];
    v_claim_id bigint;
BEGIN
    IF p_max_messages IS NULL OR p_max_messages < 1 OR p_max_messages > 1000000 THEN
        RAISE EXCEPTION 'p_max_messages must be between 1 and 1000000, got %',
                        coalesce(p_max_messages::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    -- Never wait: if a drop holds the queue, there is nothing to claim.
    v_queue := pgqueue._spark_queue_lock(p_queue, false);
    IF v_queue IS NULL THEN
        RETURN NULL;
    END IF;
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, true);

    IF v_queue.max_attempts IS NOT NULL THEN
        FOR v_dead IN
            SELECT m.id FROM pgqueue.message m
             WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
               AND m.locked_until <= v_now AND m.attempts >= v_queue.max_attempts
             ORDER BY m.locked_until, m.id
             LIMIT 1000
               FOR UPDATE SKIP LOCKED
        LOOP
            PERFORM pgqueue._dead_letter(v_dead, 'lease expired', v_now);
        END LOOP;
    END IF;

    v_ids := ARRAY(
        SELECT c.id FROM (
            SELECT e.id FROM (
                SELECT m.id FROM pgqueue.message m
                 WHERE m.queue_id = v_queue.id AND m.locked_until IS NOT NULL
                   AND m.locked_until <= v_now
                   AND (v_queue.max_attempts IS NULL OR m.attempts < v_queue.max_attempts)
                   AND (p_max_id IS NULL OR m.id <= p_max_id)
                 ORDER BY m.locked_until, m.id
                 LIMIT p_max_messages
                   FOR UPDATE SKIP LOCKED) e
            UNION ALL
            SELECT r.id FROM (
                SELECT m.id FROM pgqueue.message m
                 WHERE m.queue_id = v_queue.id AND m.locked_until IS NULL
                   AND m.dequeue_at <= v_now
                   AND (p_max_id IS NULL OR m.id <= p_max_id)
                 ORDER BY m.dequeue_at, m.id
                 LIMIT p_max_messages
                   FOR UPDATE SKIP LOCKED) r
        ) c
        LIMIT p_max_messages);
    IF cardinality(v_ids) = 0 THEN
        RETURN NULL;
    END IF;

    v_claim_id := nextval('pgqueue.spark_claim_id_seq');
    UPDATE pgqueue.message m
       SET locked_until = pgqueue._spark_claimed_until(), attempts = m.attempts + 1,
           claim_id = v_claim_id
     WHERE m.id = ANY (v_ids);
    INSERT INTO pgqueue.spark_claim (id, consumer_id, seq, n, min_id, max_id, claimed_at)
    SELECT v_claim_id, v_consumer.id, v_consumer.next_seq, cardinality(v_ids), min(u.id), max(u.id), v_now
      FROM unnest(v_ids) AS u(id);
    UPDATE pgqueue.spark_consumer c SET next_seq = c.next_seq + 1 WHERE c.id = v_consumer.id;
    RETURN v_consumer.next_seq;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_claim(text, text, integer, bigint) IS
    'Claim up to p_max_messages deliverable messages (id <= p_max_id if given) for a Spark consumer, hiding them from message_dequeue; returns the claim sequence number, NULL if nothing was due';

-- The highest sequence number of a consumer's claims not acknowledged yet, NULL if none.
CREATE FUNCTION pgqueue.spark_pending_seq(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT max(k.seq) FROM pgqueue.spark_claim k
     WHERE k.consumer_id = pgqueue._spark_consumer_id(p_queue, p_consumer);
END;

COMMENT ON FUNCTION pgqueue.spark_pending_seq(text, text) IS
    'Highest sequence number among the Spark consumer''s claims that are not acknowledged yet; NULL if there is none';

-- The open claims of a consumer with p_after_seq < seq <= p_up_to_seq, by seq.
CREATE FUNCTION pgqueue.spark_claims(p_queue text, p_consumer text, p_after_seq bigint, p_up_to_seq bigint)
RETURNS TABLE (seq bigint, n integer, min_id bigint, max_id bigint, claimed_at bigint)
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT k.seq, k.n, k.min_id, k.max_id, k.claimed_at
      FROM pgqueue.spark_claim k
     WHERE k.consumer_id = pgqueue._spark_consumer_id(p_queue, p_consumer)
       AND k.seq > p_after_seq AND k.seq <= p_up_to_seq
     ORDER BY k.seq;
END;

COMMENT ON FUNCTION pgqueue.spark_claims(text, text, bigint, bigint) IS
    'Open claims of a Spark consumer with p_after_seq < seq <= p_up_to_seq: sequence number, message count and id range when claimed, claim time (epoch ms)';

-- The messages of a consumer's claims p_after_seq < seq <= p_up_to_seq with p_min_id <= id <= p_max_id.
CREATE FUNCTION pgqueue.spark_claimed(
    p_queue     text,
    p_consumer  text,
    p_after_seq bigint,
    p_up_to_seq bigint,
    p_min_id    bigint DEFAULT NULL,
    p_max_id    bigint DEFAULT NULL)
RETURNS TABLE (id bigint, claim_seq bigint, content bytea, content_type text, attempts integer,
               dequeue_at bigint, created_at bigint, state bytea, last_error text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_claim record;
BEGIN
    -- one bounded range scan of message_claim_idx per claim
    FOR v_claim IN
        SELECT k.id, k.seq FROM pgqueue.spark_claim k
         WHERE k.consumer_id = pgqueue._spark_consumer_id(p_queue, p_consumer)
           AND k.seq > p_after_seq AND k.seq <= p_up_to_seq
         ORDER BY k.seq
    LOOP
        RETURN QUERY
        SELECT m.id, v_claim.seq, m.content, m.content_type, m.attempts, m.dequeue_at,
               m.created_at, m.state, m.last_error
          FROM pgqueue.message m
         WHERE m.claim_id = v_claim.id
           AND m.id >= coalesce(p_min_id, -9223372036854775808)
           AND m.id <= coalesce(p_max_id, 9223372036854775807)
         ORDER BY m.id;
    END LOOP;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_claimed(text, text, bigint, bigint, bigint, bigint) IS
    'Messages held by a Spark consumer''s claims p_after_seq < seq <= p_up_to_seq, optionally within an id range; reading changes nothing';

-- Acknowledge a consumer's claims up to p_up_to_seq: delete their messages; returns how many.
--
-- Idempotent: claims at or below the acknowledged position are gone already. Errors: 22023 if
-- p_up_to_seq is beyond the consumer's last claim, PQ006 for an unknown consumer.
CREATE FUNCTION pgqueue.spark_ack(p_queue text, p_consumer text, p_up_to_seq bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer pgqueue.spark_consumer;
    v_claims   bigint[];
    v_count    bigint;
BEGIN
    PERFORM pgqueue._not_null(p_up_to_seq, 'p_up_to_seq');
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._spark_queue_lock(p_queue, true);
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, false);
    IF p_up_to_seq >= v_consumer.next_seq THEN
        RAISE EXCEPTION 'cannot acknowledge claim % of consumer "%": its last claim is %',
                        p_up_to_seq, p_consumer, v_consumer.next_seq - 1
            USING ERRCODE = '22023',
                  HINT = 'Acknowledge only sequence numbers that pgqueue.spark_claim() returned.';
    END IF;
    IF p_up_to_seq <= v_consumer.acked_seq THEN
        RETURN 0;
    END IF;
    v_claims := ARRAY(SELECT k.id FROM pgqueue.spark_claim k
                       WHERE k.consumer_id = v_consumer.id AND k.seq <= p_up_to_seq
                       ORDER BY k.seq);
    DELETE FROM pgqueue.message m WHERE m.claim_id = ANY (v_claims);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    DELETE FROM pgqueue.spark_claim k WHERE k.id = ANY (v_claims);
    UPDATE pgqueue.spark_consumer c SET acked_seq = p_up_to_seq WHERE c.id = v_consumer.id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_ack(text, text, bigint) IS
    'Acknowledge a Spark consumer''s claims up to sequence number p_up_to_seq: delete their messages; idempotent; returns how many were deleted';

-- Give back the messages of every open claim of a consumer (one that will not come back).
--
-- The messages become deliverable again at their old place in the queue (dequeue_at kept,
-- attempts kept); the consumer's acknowledged position moves to its last claim. Errors: PQ005
-- if a session holds the consumer (its query is running), PQ006 for an unknown consumer.
CREATE FUNCTION pgqueue.spark_release(p_queue text, p_consumer text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue    pgqueue.queue;
    v_consumer pgqueue.spark_consumer;
    v_claims   bigint[];
    v_count    bigint;
BEGIN
    PERFORM pgqueue._spark_check_consumer(p_consumer);
    v_queue := pgqueue._spark_queue_lock(p_queue, true);
    v_consumer := pgqueue._spark_consumer_row(v_queue, p_consumer, false);
    IF NOT pg_try_advisory_xact_lock(1885827447, v_consumer.id) THEN
        RAISE EXCEPTION 'consumer "%" of queue "%" is in use by another session', p_consumer, p_queue
            USING ERRCODE = 'PQ005',
                  HINT = 'Stop the Spark query that consumes as it first; release is for consumers that will not come back.';
    END IF;
    v_claims := ARRAY(SELECT k.id FROM pgqueue.spark_claim k
                       WHERE k.consumer_id = v_consumer.id ORDER BY k.seq);
    UPDATE pgqueue.message m SET locked_until = NULL, claim_id = NULL
     WHERE m.claim_id = ANY (v_claims);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    DELETE FROM pgqueue.spark_claim k WHERE k.id = ANY (v_claims);
    UPDATE pgqueue.spark_consumer c SET acked_seq = c.next_seq - 1 WHERE c.id = v_consumer.id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_release(text, text) IS
    'Give back the messages of every open claim of a Spark consumer that will not come back: they become deliverable again; PQ005 if its query is running; returns how many';

-- The Spark consumers with their positions, open claims and whether a session holds them.
CREATE FUNCTION pgqueue.spark_consumers(p_queue text DEFAULT NULL)
RETURNS TABLE (queue text, consumer text, acked_seq bigint, next_seq bigint, claims bigint,
               claimed bigint, oldest_claim_at bigint, active boolean)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF p_queue IS NOT NULL THEN
        PERFORM pgqueue._queue_get(p_queue);
    END IF;
    RETURN QUERY
    SELECT q.name, c.name, c.acked_seq, c.next_seq, s.claims, s.claimed, s.oldest,
           EXISTS (SELECT 1 FROM pg_locks l
                    WHERE l.locktype = 'advisory' AND l.granted
                      AND l.database = (SELECT d.oid FROM pg_database d
                                         WHERE d.datname = current_database())
                      AND l.classid = 1885827447 AND l.objid = c.id AND l.objsubid = 2)
      FROM pgqueue.spark_consumer c
      JOIN pgqueue.queue q ON q.id = c.queue_id
     CROSS JOIN LATERAL (SELECT count(*) AS claims, coalesce(sum(k.n), 0)::bigint AS claimed,
                                min(k.claimed_at) AS oldest
                           FROM pgqueue.spark_claim k WHERE k.consumer_id = c.id) s
     WHERE p_queue IS NULL OR q.name = p_queue
     ORDER BY q.name, c.name;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_consumers(text) IS
    'Spark consumers (of one queue or all): acknowledged and next sequence numbers, open claims, messages they took, oldest claim time (epoch ms), whether a session holds them';

-------------------------------------------------------------------------------
-- Reading: non-destructive snapshots
-------------------------------------------------------------------------------

-- The id range a snapshot of a queue covers: from the smallest to the largest live (and dead) id.
CREATE FUNCTION pgqueue.spark_snapshot_range(p_queue text, p_include_dead boolean DEFAULT false)
RETURNS TABLE (min_id bigint, max_id bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pgqueue._queue_get(p_queue);
    -- two probes of each primary key; the range is shared by every queue, the scans filter
    RETURN QUERY
    SELECT CASE WHEN coalesce(p_include_dead, false)
                THEN least((SELECT min(m.id) FROM pgqueue.message m),
                           (SELECT min(d.id) FROM pgqueue.dead_letter d))
                ELSE (SELECT min(m.id) FROM pgqueue.message m) END,
           CASE WHEN coalesce(p_include_dead, false)
                THEN greatest((SELECT max(m.id) FROM pgqueue.message m),
                              (SELECT max(d.id) FROM pgqueue.dead_letter d))
                ELSE (SELECT max(m.id) FROM pgqueue.message m) END;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_snapshot_range(text, boolean) IS
    'The id range [min_id, max_id] that a snapshot of the queue covers (NULLs if there is nothing); planned once, split into partitions';

-- The messages (and dead letters) of a queue with p_min_id <= id <= p_max_id, by id; changes nothing.
--
-- status is ready (expired leases too, as queue_stats counts them), scheduled, leased, claimed
-- (by a Spark consumer) or dead.
CREATE FUNCTION pgqueue.spark_snapshot(
    p_queue        text,
    p_min_id       bigint,
    p_max_id       bigint,
    p_include_dead boolean DEFAULT false)
RETURNS TABLE (id bigint, status text, content bytea, content_type text, attempts integer,
               dequeue_at bigint, created_at bigint, locked_until bigint, last_error text,
               dead_at bigint, state bytea)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_queue pgqueue.queue := pgqueue._queue_get(p_queue);
    v_now   bigint := pgqueue.now_ms();
BEGIN
    PERFORM pgqueue._not_null(p_min_id, 'p_min_id');
    PERFORM pgqueue._not_null(p_max_id, 'p_max_id');
    RETURN QUERY
    SELECT m.id,
           CASE WHEN m.claim_id IS NOT NULL THEN 'claimed'
                WHEN m.locked_until IS NULL AND m.dequeue_at <= v_now THEN 'ready'
                WHEN m.locked_until IS NULL THEN 'scheduled'
                WHEN m.locked_until <= v_now THEN 'ready'
                ELSE 'leased' END,
           m.content, m.content_type, m.attempts, m.dequeue_at, m.created_at, m.locked_until,
           m.last_error, NULL::bigint, m.state
      FROM pgqueue.message m
     WHERE m.id >= p_min_id AND m.id <= p_max_id AND m.queue_id = v_queue.id
     ORDER BY m.id;
    IF coalesce(p_include_dead, false) THEN
        RETURN QUERY
        SELECT d.id, 'dead'::text, d.content, d.content_type, d.attempts, d.dequeue_at,
               d.created_at, NULL::bigint, d.last_error, d.dead_at, d.state
          FROM pgqueue.dead_letter d
         WHERE d.id >= p_min_id AND d.id <= p_max_id AND d.queue_id = v_queue.id
         ORDER BY d.id;
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_snapshot(text, bigint, bigint, boolean) IS
    'Messages of a queue with p_min_id <= id <= p_max_id and their status (ready, scheduled, leased, claimed; dead letters too if asked), by id; changes nothing';

-------------------------------------------------------------------------------
-- Producing: staging and publishing (commitMode=job)
-------------------------------------------------------------------------------

-- Stage rows of one Spark task attempt; p_first numbers them (p_first, p_first + 1, ...).
CREATE FUNCTION pgqueue.spark_stage(
    p_write_id     uuid,
    p_partition    integer,
    p_attempt      bigint,
    p_first        bigint,
    p_contents     bytea[],
    p_content_type text     DEFAULT NULL,
    p_dequeue_ats  bigint[] DEFAULT NULL,
    p_delays_ms    bigint[] DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_n integer := cardinality(p_contents);
BEGIN
    PERFORM pgqueue._not_null(p_write_id, 'p_write_id');
    PERFORM pgqueue._not_null(p_partition, 'p_partition');
    PERFORM pgqueue._not_null(p_attempt, 'p_attempt');
    PERFORM pgqueue._not_null(p_first, 'p_first');
    PERFORM pgqueue._not_null(p_contents, 'p_contents');
    IF p_first < 0 OR (v_n > 0 AND p_first - 1 > 9223372036854775807 - v_n) THEN
        RAISE EXCEPTION 'p_first must be >= 0 and number every row within bigint, got % for % row(s)', p_first, v_n
            USING ERRCODE = '22023';
    END IF;
    IF array_ndims(p_contents) > 1 OR array_ndims(p_dequeue_ats) > 1 OR array_ndims(p_delays_ms) > 1 THEN
        RAISE EXCEPTION 'batch arrays must be one-dimensional'
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_contents, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message content must not be NULL (element %)', array_position(p_contents, NULL)
            USING ERRCODE = '22004',
                  HINT = 'Send an empty bytea for an empty message.';
    END IF;
    IF cardinality(p_dequeue_ats) <> v_n OR cardinality(p_delays_ms) <> v_n THEN
        RAISE EXCEPTION 'p_dequeue_ats and p_delays_ms must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_delays_ms) AS u(d) WHERE u.d < 0) THEN
        RAISE EXCEPTION 'delays must be >= 0 ms'
            USING ERRCODE = '22023';
    END IF;
    BEGIN
        INSERT INTO pgqueue.spark_staging (write_id, partition, attempt, n, dequeue_at, delay_ms,
                                           staged_at, content, content_type)
        SELECT p_write_id, p_partition, p_attempt, p_first + (u.ord - 1), u.dequeue_at, u.delay_ms,
               pgqueue.to_epoch(now()), u.content, p_content_type
          FROM unnest(p_contents, p_dequeue_ats, p_delays_ms)
               WITH ORDINALITY AS u(content, dequeue_at, delay_ms, ord);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'rows % to % of partition % attempt % of write % are staged already',
                        p_first, p_first + (v_n - 1), p_partition, p_attempt, p_write_id
            USING ERRCODE = '22023',
                  HINT = 'Number the rows of an attempt once (p_first); a retried task is a new attempt.';
    END;
    RETURN v_n;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_stage(uuid, integer, bigint, bigint, bytea[], text, bigint[], bigint[]) IS
    'Stage messages of one Spark task attempt (write_id, partition, attempt), numbered from p_first, until spark_publish; one content type, per-message due times (epoch ms) and delays (ms from publication)';

-- Move the staged rows of the winning task attempts into a queue, once per publish key.
--
-- p_partitions[i] won with attempt p_attempts[i], which staged p_counts[i] rows. All rows go in
-- one statement through pgqueue._queue_admit (the queue's shared lock, max_size, then NOTIFY),
-- as message_create_batch; ids follow (partition, row) order. The write's staging rows (losers
-- too) are deleted. Returns how many were published, NULL if the key was published before
-- (then only the staging rows are deleted). Errors: 22004/22023 for bad arrays, PQ007 if the
-- staged rows differ from p_counts, PQ003 if the queue is full, PQ001 if it does not exist.
CREATE FUNCTION pgqueue.spark_publish(
    p_publish_key text,
    p_queue       text,
    p_write_id    uuid,
    p_partitions  integer[],
    p_attempts    bigint[],
    p_counts      bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_queue   pgqueue.queue;
    v_now     bigint := pgqueue.to_epoch(now());
    v_clock   bigint := pgqueue.now_ms();
    v_count   bigint;
    v_bad     record;
BEGIN
    PERFORM pgqueue._not_null(p_publish_key, 'p_publish_key');
    IF length(p_publish_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'p_publish_key must have 1 to 200 characters, got %', length(p_publish_key)
            USING ERRCODE = '22023';
    END IF;
    PERFORM pgqueue._not_null(p_write_id, 'p_write_id');
    PERFORM pgqueue._not_null(p_partitions, 'p_partitions');
    PERFORM pgqueue._not_null(p_attempts, 'p_attempts');
    PERFORM pgqueue._not_null(p_counts, 'p_counts');
    IF array_ndims(p_partitions) > 1 OR array_ndims(p_attempts) > 1 OR array_ndims(p_counts) > 1
       OR cardinality(p_attempts) <> cardinality(p_partitions)
       OR cardinality(p_counts) <> cardinality(p_partitions) THEN
        RAISE EXCEPTION 'p_partitions, p_attempts and p_counts must be one-dimensional and of the same length'
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_partitions, NULL) IS NOT NULL OR array_position(p_attempts, NULL) IS NOT NULL
       OR array_position(p_counts, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'p_partitions, p_attempts and p_counts must not contain NULL'
            USING ERRCODE = '22004';
    END IF;
    IF (SELECT count(DISTINCT u.p) FROM unnest(p_partitions) AS u(p)) <> cardinality(p_partitions) THEN
        RAISE EXCEPTION 'each partition must have exactly one winning attempt'
            USING ERRCODE = '22023';
    END IF;
    v_queue := pgqueue._queue_get(p_queue);

    IF EXISTS (SELECT 1 FROM pgqueue.spark_publish_log l WHERE l.publish_key = p_publish_key) THEN
        DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
        RETURN NULL;
    END IF;

    SELECT w.p AS partition, w.a AS attempt, w.c AS expected,
           (SELECT count(*) FROM pgqueue.spark_staging s
             WHERE s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a) AS staged
      INTO v_bad
      FROM unnest(p_partitions, p_attempts, p_counts) AS w(p, a, c)
     WHERE w.c <> (SELECT count(*) FROM pgqueue.spark_staging s
                    WHERE s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'partition % attempt % of write % staged % row(s), expected %',
                        v_bad.partition, v_bad.attempt, p_write_id, v_bad.staged, v_bad.expected
            USING ERRCODE = 'PQ007',
                  HINT = 'The staging rows were deleted or never committed: run the write again.';
    END IF;
    v_count := (SELECT coalesce(sum(u.c), 0) FROM unnest(p_counts) AS u(c));

    -- a concurrent publish of the same key waits here and then finds it taken
    INSERT INTO pgqueue.spark_publish_log (publish_key, write_id, queue_id, n, published_at)
    VALUES (p_publish_key, p_write_id, v_queue.id, v_count, v_clock)
    ON CONFLICT (publish_key) DO NOTHING;
    IF NOT FOUND THEN
        DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
        RETURN NULL;
    END IF;

    v_queue := pgqueue._queue_admit(p_queue, v_count);
    IF v_count > 0 THEN
        INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type)
        SELECT v_queue.id,
               coalesce(s.dequeue_at,
                        v_clock + CASE WHEN s.delay_ms IS NOT NULL  -- saturate, never overflow
                                       THEN least(s.delay_ms, 9223372036854775807 - v_clock) END,
                        v_now),
               v_now,
               s.content, s.content_type
          FROM unnest(p_partitions, p_attempts) AS w(p, a)
          JOIN pgqueue.spark_staging s
            ON s.write_id = p_write_id AND s.partition = w.p AND s.attempt = w.a
         ORDER BY w.p, s.n;
        IF v_queue.notify THEN
            PERFORM pg_notify('pgqueue.' || v_queue.name, v_queue.name);
        END IF;
    END IF;
    DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_publish(text, text, uuid, integer[], bigint[], bigint[]) IS
    'Publish the staged rows of the winning Spark task attempts into a queue in one transaction, once per publish key (NULL if already published), and delete the write''s staging rows; returns how many';

-- Delete the staging rows of a write (an aborted Spark job); returns how many.
CREATE FUNCTION pgqueue.spark_discard(p_write_id uuid)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    PERFORM pgqueue._not_null(p_write_id, 'p_write_id');
    DELETE FROM pgqueue.spark_staging s WHERE s.write_id = p_write_id;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_discard(uuid) IS
    'Delete the staging rows of a Spark write that will not be published (an aborted job); returns how many';

-- Delete staging rows staged before p_before (epoch ms): writes whose driver died.
CREATE FUNCTION pgqueue.spark_staging_purge(p_before bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count bigint;
BEGIN
    PERFORM pgqueue._not_null(p_before, 'p_before');
    DELETE FROM pgqueue.spark_staging s WHERE s.staged_at < p_before;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_staging_purge(bigint) IS
    'Delete staging rows staged before p_before (epoch ms), left by Spark jobs whose driver died; returns how many';

-------------------------------------------------------------------------------
-- Queues: queue_drop also drops the queue's Spark consumers and claims
-------------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION pgqueue.queue_drop(p_queue text)
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
    DELETE FROM pgqueue.spark_claim k
     WHERE k.consumer_id IN (SELECT c.id FROM pgqueue.spark_consumer c WHERE c.queue_id = v_id);
    DELETE FROM pgqueue.spark_consumer c WHERE c.queue_id = v_id;
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue.queue_drop(text) IS
    'Drop a queue with its messages, dead letters and Spark consumers; returns false if it did not exist';

-------------------------------------------------------------------------------
-- Leases: a claim is not a lease
-------------------------------------------------------------------------------

-- The attempts value of a claimed message is visible (spark_claimed, spark_snapshot) but was
-- never handed out as a lease token: complete, heartbeat, defer and fail treat it as stale
-- (false, nothing changes). The bodies are those of 0.1 plus "AND m.claim_id IS NULL";
-- tests/test_spark_sql.py checks that they differ from 0.1 in nothing else.

CREATE OR REPLACE FUNCTION pgqueue.message_complete(p_id bigint, p_attempts integer)
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
     WHERE m.id = p_id AND m.attempts = p_attempts AND m.locked_until IS NOT NULL
       AND m.claim_id IS NULL;
    RETURN FOUND;
END;
$$;

CREATE OR REPLACE FUNCTION pgqueue.message_heartbeat(p_id bigint, p_attempts integer, p_lock_ms bigint DEFAULT NULL)
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
       AND m.claim_id IS NULL
       AND q.id = m.queue_id;
    RETURN FOUND;
END;
$$;

CREATE OR REPLACE FUNCTION pgqueue.message_defer(
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
     WHERE m.id = p_id AND m.attempts = p_attempts AND m.locked_until IS NOT NULL
       AND m.claim_id IS NULL;
    RETURN FOUND;
END;
$$;

CREATE OR REPLACE FUNCTION pgqueue.message_fail(
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
       AND m.claim_id IS NULL
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
