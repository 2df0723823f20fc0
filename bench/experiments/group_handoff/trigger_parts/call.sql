-- A measurement build of pgqueue._message_removed (trigger_parts.sh), not correct: the call alone, no hand-off.
CREATE OR REPLACE FUNCTION pgqueue._message_removed() RETURNS trigger LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    RETURN NULL;
END; $$;
