-- Stage rows of one Spark task attempt; p_first numbers them (p_first, p_first + 1, ...).
--
-- Per row: a due time (epoch ms) or a delay (ms from publication), a message group and an
-- idempotency key (as message_create_batch's p_groups and p_keys; checked again at publication,
-- where a group needs a queue with groups). Errors: 22004 (NULL argument or content), 22023
-- (array lengths, negative delay, a row with both a due time and a delay, a group or key that is
-- empty or longer than 200 characters, rows staged already).
CREATE FUNCTION pgqueue.spark_stage(
    p_write_id     uuid,
    p_partition    integer,
    p_attempt      bigint,
    p_first        bigint,
    p_contents     bytea[],
    p_content_type text     DEFAULT NULL,
    p_dequeue_ats  bigint[] DEFAULT NULL,
    p_delays_ms    bigint[] DEFAULT NULL,
    p_groups       text[]   DEFAULT NULL,
    p_keys         text[]   DEFAULT NULL)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_n integer := cardinality(p_contents);
BEGIN
    PERFORM pgqueue._not_null(p_write_id IS NULL, 'p_write_id'::text);
    PERFORM pgqueue._not_null(p_partition IS NULL, 'p_partition'::text);
    PERFORM pgqueue._not_null(p_attempt IS NULL, 'p_attempt'::text);
    PERFORM pgqueue._not_null(p_first IS NULL, 'p_first'::text);
    PERFORM pgqueue._not_null(p_contents IS NULL, 'p_contents'::text);
    IF p_first < 0 OR (v_n > 0 AND p_first - 1 > 9223372036854775807 - v_n) THEN
        RAISE EXCEPTION 'p_first must be >= 0 and number every row within bigint, got % for % row(s)', p_first, v_n
            USING ERRCODE = '22023';
    END IF;
    IF array_ndims(p_contents) > 1 OR array_ndims(p_dequeue_ats) > 1 OR array_ndims(p_delays_ms) > 1
       OR array_ndims(p_groups) > 1 OR array_ndims(p_keys) > 1 THEN
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
    IF p_dequeue_ats IS NOT NULL AND p_delays_ms IS NOT NULL
       AND EXISTS (SELECT 1 FROM unnest(p_dequeue_ats, p_delays_ms) AS u(a, d)
                    WHERE u.a IS NOT NULL AND u.d IS NOT NULL) THEN
        RAISE EXCEPTION 'row % has both a due time and a delay',
                        (SELECT min(u.n) FROM unnest(p_dequeue_ats, p_delays_ms) WITH ORDINALITY AS u(a, d, n)
                          WHERE u.a IS NOT NULL AND u.d IS NOT NULL)
            USING ERRCODE = '22023',
                  HINT = 'Give a row a due time (p_dequeue_ats) or a delay (p_delays_ms), not both.';
    END IF;
    IF cardinality(p_groups) <> v_n OR cardinality(p_keys) <> v_n THEN
        RAISE EXCEPTION 'p_groups and p_keys must have as many elements as p_contents (%)', v_n
            USING ERRCODE = '22023';
    END IF;
    -- the first bad group or key raises (22023), as message_create_batch would at publication
    PERFORM pgqueue._check_message_key(u.g, 'message group'::text)
       FROM unnest(p_groups) AS u(g) WHERE u.g = '' OR length(u.g) > 200;
    PERFORM pgqueue._check_message_key(u.k, 'idempotency key'::text)
       FROM unnest(p_keys) AS u(k) WHERE u.k = '' OR length(u.k) > 200;
    BEGIN
        INSERT INTO pgqueue.spark_staging (write_id, partition, attempt, n, dequeue_at, delay_ms,
                                           staged_at, content, content_type, group_key, idem_key)
        SELECT p_write_id, p_partition, p_attempt, p_first + (u.ord - 1), u.dequeue_at, u.delay_ms,
               pgqueue.to_epoch(now()), u.content, p_content_type, u.grp, u.key
          FROM unnest(p_contents, p_dequeue_ats, p_delays_ms, p_groups, p_keys)
               WITH ORDINALITY AS u(content, dequeue_at, delay_ms, grp, key, ord);
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION 'rows % to % of partition % attempt % of write % are staged already',
                        p_first, p_first + (v_n - 1), p_partition, p_attempt, p_write_id
            USING ERRCODE = '22023',
                  HINT = 'Number the rows of an attempt once (p_first); a retried task is a new attempt.';
    END;
    RETURN v_n;
END;
$$;

COMMENT ON FUNCTION pgqueue.spark_stage(uuid, integer, bigint, bigint, bytea[], text, bigint[], bigint[], text[], text[]) IS
    'Stage messages of one Spark task attempt (write_id, partition, attempt), numbered from p_first, until spark_publish; one content type, per-message due times (epoch ms), delays (ms from publication), message groups and idempotency keys';
