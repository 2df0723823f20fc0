-- Reference design "seed 001": the scheduled FIFO queue of "Building LonnyMQ", the LonnyMQ
-- project's write-up (https://lonnymq.lonnycorp.com/diy.html), where pgqueue's one sort key
-- comes from (docs/design.md): BIGSERIAL ids, a BIGINT dequeue_after in epoch milliseconds, an
-- index on (dequeue_after, id), and PL/pgSQL message_create / message_dequeue (SELECT ... FOR
-- UPDATE SKIP LOCKED, then DELETE).
--
-- Written from the text of the version of the article we read, with two corrections, both
-- noted where they are made:
--   * to_epoch: the article adds EXTRACT(EPOCH)::BIGINT * 1000 (rounded seconds) and
--     EXTRACT(MILLISECOND) (which already includes the seconds), so its value jumps back at
--     every minute boundary and freshly enqueued messages become invisible for up to a minute.
--     We compute epoch milliseconds directly, still in PL/pgSQL as the article does.
--   * message_create: the article assigns a TIMESTAMPTZ argument to a BIGINT; we convert it.
-- Like the article's, the functions have no SET search_path clause and no argument checks.
CREATE SCHEMA seed001;

CREATE TABLE seed001.message (
    id            BIGSERIAL PRIMARY KEY,
    content       BYTEA  NOT NULL,
    dequeue_after BIGINT NOT NULL
);

CREATE INDEX message_dequeue_ix ON seed001.message (dequeue_after ASC, id ASC);

CREATE FUNCTION seed001.to_epoch(p_timestamp TIMESTAMPTZ)
RETURNS BIGINT AS $$
BEGIN
    RETURN (EXTRACT(EPOCH FROM p_timestamp) * 1000)::BIGINT;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION seed001.message_create(
    p_content       BYTEA,
    p_dequeue_after TIMESTAMPTZ DEFAULT NULL
) RETURNS VOID AS $$
DECLARE
    v_dequeue_after BIGINT;
BEGIN
    v_dequeue_after = CASE
        WHEN p_dequeue_after IS NULL
        THEN seed001.to_epoch(NOW())
        ELSE seed001.to_epoch(p_dequeue_after)
    END;

    INSERT INTO seed001.message (content, dequeue_after)
    VALUES (p_content, v_dequeue_after);
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION seed001.message_dequeue()
RETURNS BYTEA
AS $$
DECLARE
    v_now BIGINT;
    v_message RECORD;
BEGIN
    v_now := seed001.to_epoch(NOW());

    -- Capture a message
    SELECT "id", "content" FROM seed001.message
    WHERE "dequeue_after" <= v_now
    ORDER BY "dequeue_after" ASC, "id" ASC
    LIMIT 1
    FOR UPDATE SKIP LOCKED
    INTO v_message;

    -- If there is nothing to capture return a NULL
    IF v_message."id" IS NULL THEN
        RETURN NULL::BYTEA;
    END IF;

    -- If we've captured a message, delete it and return its content
    DELETE FROM seed001.message
    WHERE "id" = v_message."id";

    RETURN v_message."content";
END;
$$ LANGUAGE plpgsql;
