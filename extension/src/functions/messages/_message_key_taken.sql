-- The id of the live message with an idempotency key in a queue, else of the message that had the
-- key within the queue's key_window_ms (pgqueue.message_key), else NULL: message_create's check of
-- a key on a capped queue before it asks for room (a full queue would refuse the retry of an
-- enqueue that went through). Both look-ups in one statement, so in one snapshot (those of
-- pgqueue._message_insert are two statements); its own function for the SET clauses that
-- message_create does without (its common
-- path pays no GUC save and restore; this one runs for a key on a capped queue alone): planned
-- while the tables were recorded empty (a queue that drained, then a VACUUM or ANALYZE), the
-- look-ups were Seq Scans, which the session's generic plan kept (tests/test_group_probes.py).
-- enable_seqscan = off, and message_key by message_key_pkey alone: the key asked for in its
-- order, which only message_key_pkey gives, and enable_sort = off (pgqueue._message_insert).
CREATE FUNCTION pgqueue._message_key_taken(p_queue_id integer, p_key text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_sort = off
AS $$
BEGIN
    RETURN coalesce((SELECT m.id FROM pgqueue.message m
                      WHERE m.queue_id = p_queue_id AND m.idem_key = p_key),
                    (SELECT k.id FROM pgqueue.message_key k  -- kept within its window (pgqueue._message_insert)
                      WHERE k.queue_id = p_queue_id AND k.idem_key >= p_key AND k.idem_key <= p_key
                        AND k.until > pgqueue.now_ms()
                      ORDER BY k.idem_key));
END;
$$;

COMMENT ON FUNCTION pgqueue._message_key_taken(integer, text) IS
    'pgqueue internal: the id of the live message with this key in the queue, or of the message that had it within key_window_ms; NULL if the key is free';
