-- Enqueue a text message; returns its id. For drivers that send strings: the text is stored
-- as UTF-8 bytes exactly as given, with no bytea escape parsing (a string passed as bytea is
-- read as bytea's text form, so '\x4869' would become 'Hi' and '\\' one backslash).
-- p_content_type says what the text is (default plain text; 'application/json' for JSON kept
-- byte for byte). p_group and p_key are message_create's: the message group and the idempotency
-- key, with its errors (22023 for an empty or over-long one, or a group on a queue without
-- groups). A SQL-standard body: bound when created, so no search_path to pin.
CREATE FUNCTION pgqueue.message_create_text(
    p_queue        text,
    p_content      text,
    p_dequeue_at   bigint DEFAULT NULL,
    p_content_type text   DEFAULT 'text/plain; charset=utf-8',
    p_group        text   DEFAULT NULL,
    p_key          text   DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
RETURN pgqueue.message_create(p_queue, pg_catalog.convert_to(p_content, 'UTF8'::name), p_dequeue_at,
                              p_content_type, p_group, p_key);

COMMENT ON FUNCTION pgqueue.message_create_text(text, text, bigint, text, text, text) IS
    'Enqueue a text message stored as UTF-8 exactly as given (no bytea escapes), content type text/plain by default; p_group: its message group, p_key: idempotency key (the live message''s id if taken); returns the id';
