-- Enqueue a JSON message; returns its id. The value is stored as its jsonb text in UTF-8 with
-- content type application/json (jsonb normalises key order and spacing; send the text to
-- message_create_text with 'application/json' to keep it byte for byte).
-- p_task names the task that a worker's task registry dispatches the message to: it is kept
-- in the content type, 'application/json; task=<p_task>' (the name in double quotes when it
-- holds a ':'), which any producer can also write.
-- Raises 22023 for a task name outside [A-Za-z0-9_.:-] (1 to 200 characters). p_group and
-- p_key are message_create's: the message group and the idempotency key, with its errors
-- (22023 for an empty or over-long one, or a group on a queue without groups).
CREATE FUNCTION pgqueue.message_create_json(
    p_queue      text,
    p_content    jsonb,
    p_dequeue_at bigint DEFAULT NULL,
    p_task       text   DEFAULT NULL,
    p_group      text   DEFAULT NULL,
    p_key        text   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_task IS NOT NULL AND p_task !~ '^[A-Za-z0-9_.:-]{1,200}$' THEN
        -- (its first 100 characters: a 10-MB name was echoed whole, a review)
        RAISE EXCEPTION 'invalid task name %', pg_catalog.quote_literal(pg_catalog.left(p_task, 100))
                        || CASE WHEN pg_catalog.length(p_task) > 100
                             THEN pg_catalog.format(' (%s characters)', pg_catalog.length(p_task)) ELSE '' END
            USING ERRCODE = '22023',
                  HINT = 'A task name has 1 to 200 characters from A-Z a-z 0-9 _ . : -.';
    END IF;
    RETURN pgqueue.message_create(p_queue, pg_catalog.convert_to(p_content::text, 'UTF8'::name), p_dequeue_at,
                                  CASE WHEN p_task IS NULL THEN 'application/json'
                                       -- (quoted when it holds a ':', which a MIME parameter's
                                       -- token may not: the Python client writes the same)
                                       WHEN strpos(p_task, ':') > 0 THEN 'application/json; task="' || p_task || '"'
                                       ELSE 'application/json; task=' || p_task END,
                                  p_group, p_key);
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create_json(text, jsonb, bigint, text, text, text) IS
    'Enqueue a JSON message (content type application/json, with task=<p_task> if given); p_group: its message group, p_key: idempotency key (the live message''s id if taken); returns the id';
