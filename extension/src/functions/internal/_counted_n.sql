-- Count p_n messages of kind 0 (enqueued), 1 (delivered) or 2 (completed) for a queue in at most
-- 31 + p_n / 32 nextval calls: p_n % 32 on the kind's sequence and p_n / 32 on its companion
-- that counts by 32 (pgqueue._count_seq kind + 6); always true. For batches: one nextval costs
-- about 1 us, so counting a batch of 1000 one by one cost 6-8% of message_create_batch.
CREATE FUNCTION pgqueue._counted_n(p_queue_id integer, p_kind integer, p_n bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- planned once: a custom plan for each p_n would inline _count_seq again each time (see _counted)
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_one regclass := pgqueue._count_seq(p_queue_id, p_kind);
    v_32  regclass := pgqueue._count_seq(p_queue_id, p_kind + 6);
BEGIN
    PERFORM nextval(v_one) FROM generate_series(1, p_n % 32);
    PERFORM nextval(v_32) FROM generate_series(1, p_n / 32);
    RETURN true;
END;
$$;

COMMENT ON FUNCTION pgqueue._counted_n(integer, integer, bigint) IS
    'pgqueue internal: add p_n to a queue''s counter of kind 0 (enqueued), 1 (delivered) or 2 (completed) in at most 31 + p_n / 32 nextval calls';
