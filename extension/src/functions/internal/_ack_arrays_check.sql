-- The argument checks of an acknowledgement of many messages: 22004 for a NULL array or element,
-- 22023 for arrays of two dimensions or of different lengths, or more than 10000 ids.
-- message_complete_batch runs them first; message_complete_and_dequeue runs them before its take,
-- so that a refused call hands nothing out and counts no delivery.
CREATE FUNCTION pgqueue._ack_arrays_check(p_ids bigint[], p_attempts integer[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_ids IS NULL OR p_attempts IS NULL THEN
        PERFORM pgqueue._not_null(p_ids IS NULL, 'message ids'::text);
        PERFORM pgqueue._not_null(p_attempts IS NULL, 'attempts tokens'::text);
    END IF;
    IF array_ndims(p_ids) > 1 OR array_ndims(p_attempts) > 1 THEN
        RAISE EXCEPTION 'message ids and attempts tokens must be one-dimensional arrays'
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_ids) <> cardinality(p_attempts) THEN
        RAISE EXCEPTION 'p_ids has % element(s) but p_attempts has %', cardinality(p_ids), cardinality(p_attempts)
            USING ERRCODE = '22023',
                  HINT = 'Pass one attempts token per message id, in the same order.';
    END IF;
    IF cardinality(p_ids) > 10000 THEN
        RAISE EXCEPTION 'at most 10000 messages per call, got %', cardinality(p_ids)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(p_ids, NULL) IS NOT NULL OR array_position(p_attempts, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'message ids and attempts tokens must not contain NULL'
            USING ERRCODE = '22004';
    END IF;
END;
$$;

COMMENT ON FUNCTION pgqueue._ack_arrays_check(bigint[], integer[]) IS
    'pgqueue internal: raise 22004 / 22023 for the id and token arrays of an acknowledgement of many messages';
