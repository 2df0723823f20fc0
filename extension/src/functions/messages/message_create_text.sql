-- Enqueue a text message; returns its id. For drivers that send strings: the text is stored
-- as UTF-8 bytes exactly as given, with no bytea escape parsing (a string passed as bytea is
-- read as bytea's text form, so '\x4869' would become 'Hi' and '\\' one backslash).
-- p_content_type says what the text is (default plain text, 'text/plain; charset=utf-8', also
-- when NULL: drivers bind every parameter; 'application/json' for JSON kept byte for byte). It
-- is stored as given, but a charset it names must describe the bytes stored, which are UTF-8: a
-- charset parameter (any case, spaces and double quotes around the value ignored, as
-- pgqueue.codec.media_type reads it) must be utf-8, utf8 or utf_8 in any case, or us-ascii,
-- ascii or us_ascii when the text is ASCII (a producer that copies an incoming Content-Type);
-- any other, an ASCII label on a text outside ASCII, or a quoted value with a quote, a
-- backslash or a semicolon inside, is refused with 22023.
-- A content type without a charset is kept as it is (readers take UTF-8 for text/* then).
-- Text in another charset goes to message_create as bytes, with its content type.
-- p_group and p_key are message_create's: the message group and the idempotency key, with its
-- errors (22023 for an empty or over-long one, or a group on a queue without groups).
CREATE FUNCTION pgqueue.message_create_text(
    p_queue        text,
    p_content      text,
    p_dequeue_at   bigint DEFAULT NULL,
    p_content_type text   DEFAULT 'text/plain; charset=utf-8',
    p_group        text   DEFAULT NULL,
    p_key          text   DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_charset text;
    v_bytes   bytea := convert_to(p_content, 'UTF8'::name);
    v_ascii   boolean;
BEGIN
    -- the parameters after the media type: "; name=value" (a parameter without "=" is no
    -- parameter), split at every ";", where pgqueue.codec splits only outside quoted values. So
    -- that this check is never laxer than the codec, a charset's value must be a plain token or
    -- one quoted string without quotes or backslashes inside ('"utf-8"'): then it ends where the
    -- codec's ends. Any other (an unclosed quote, which a ";" inside it would have cut here:
    -- 'charset="utf-8;sig"' accepted, the codec read "utf-8;sig", Python's utf_8_sig, and
    -- dropped a byte-order mark; a review) is refused as a charset it cannot read. A charset
    -- written inside another parameter's quoted value is read here, not by the codec: refused
    -- too (stricter). Read only when a charset may be named and the content type is not the
    -- default (a simple expression, no query, for most calls).
    IF p_content_type IS DISTINCT FROM 'text/plain; charset=utf-8'
       AND strpos(lower(p_content_type), 'charset') > 0 THEN
        -- ASCII: no character (no byte, in a SQL_ASCII database) above 127
        -- (an E'' literal: a plain one with a backslash warned under standard_conforming_strings
        -- = off, a review)
        v_ascii := p_content !~ E'[^\\x01-\\x7f]';
        SELECT CASE WHEN p.raw ~ E'^("[^"\\\\]*"|[^"\\\\]*)$' THEN btrim(p.raw, '"') ELSE p.raw END INTO v_charset
          FROM unnest((string_to_array(p_content_type, ';'))[2:]) AS i(item)
               CROSS JOIN LATERAL (SELECT btrim(substr(i.item, strpos(i.item, '=') + 1), E' \t\r\n\f\v') AS raw) AS p
         WHERE strpos(i.item, '=') > 0
           AND lower(btrim(substr(i.item, 1, strpos(i.item, '=') - 1), E' \t\r\n\f\v')) = 'charset'
           AND (p.raw !~ E'^("[^"\\\\]*"|[^"\\\\]*)$'
                OR (lower(btrim(p.raw, '"')) NOT IN ('utf-8', 'utf8', 'utf_8')
                    AND NOT (v_ascii AND lower(btrim(p.raw, '"')) IN ('us-ascii', 'ascii', 'us_ascii'))))
         LIMIT 1;
    END IF;
    IF v_charset IS NOT NULL THEN
        RAISE EXCEPTION 'content type % names charset %, but message_create_text stores the text as UTF-8%',
                        quote_literal(left(p_content_type, 200))
                        || CASE WHEN length(p_content_type) > 200
                             THEN format(' (%s characters)', length(p_content_type)) ELSE '' END,
                        quote_literal(left(v_charset, 100))
                        || CASE WHEN length(v_charset) > 100 THEN format(' (%s characters)', length(v_charset)) ELSE '' END,
                        CASE WHEN lower(v_charset) IN ('us-ascii', 'ascii', 'us_ascii')
                             THEN ' and the text is not ASCII' ELSE '' END
            USING ERRCODE = '22023',
                  HINT = 'Name charset=utf-8, or no charset; to store bytes in another charset, pass them to pgqueue.message_create with their content type.';
    END IF;
    RETURN pgqueue.message_create(p_queue, v_bytes, p_dequeue_at,
                                  coalesce(p_content_type, 'text/plain; charset=utf-8'), p_group, p_key);
END;
$$;

COMMENT ON FUNCTION pgqueue.message_create_text(text, text, bigint, text, text, text) IS
    'Enqueue a text message stored as UTF-8 exactly as given (no bytea escapes), content type text/plain; charset=utf-8 by default (also for NULL), a charset other than UTF-8 refused (22023; us-ascii taken for ASCII text); p_group: its message group, p_key: idempotency key (the live message''s id if taken); returns the id';
