-- The exactness mark of a queue's stripe for max_size: pgqueue.queue_size_exact_<id & 63>, NULL
-- until the first REPEATABLE READ or SERIALIZABLE producer of a capped queue on the stripe sets it
-- to its xid; from then on the stripe's capped queues add every admission to their
-- pgqueue.queue_size row (pgqueue._queue_reserve). One regclass constant per sequence, as in
-- pgqueue._lock_stripe.
CREATE FUNCTION pgqueue._size_exact_seq(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.queue_size_exact_0'::regclass, 'pgqueue.queue_size_exact_1'::regclass,
    'pgqueue.queue_size_exact_2'::regclass, 'pgqueue.queue_size_exact_3'::regclass,
    'pgqueue.queue_size_exact_4'::regclass, 'pgqueue.queue_size_exact_5'::regclass,
    'pgqueue.queue_size_exact_6'::regclass, 'pgqueue.queue_size_exact_7'::regclass,
    'pgqueue.queue_size_exact_8'::regclass, 'pgqueue.queue_size_exact_9'::regclass,
    'pgqueue.queue_size_exact_10'::regclass, 'pgqueue.queue_size_exact_11'::regclass,
    'pgqueue.queue_size_exact_12'::regclass, 'pgqueue.queue_size_exact_13'::regclass,
    'pgqueue.queue_size_exact_14'::regclass, 'pgqueue.queue_size_exact_15'::regclass,
    'pgqueue.queue_size_exact_16'::regclass, 'pgqueue.queue_size_exact_17'::regclass,
    'pgqueue.queue_size_exact_18'::regclass, 'pgqueue.queue_size_exact_19'::regclass,
    'pgqueue.queue_size_exact_20'::regclass, 'pgqueue.queue_size_exact_21'::regclass,
    'pgqueue.queue_size_exact_22'::regclass, 'pgqueue.queue_size_exact_23'::regclass,
    'pgqueue.queue_size_exact_24'::regclass, 'pgqueue.queue_size_exact_25'::regclass,
    'pgqueue.queue_size_exact_26'::regclass, 'pgqueue.queue_size_exact_27'::regclass,
    'pgqueue.queue_size_exact_28'::regclass, 'pgqueue.queue_size_exact_29'::regclass,
    'pgqueue.queue_size_exact_30'::regclass, 'pgqueue.queue_size_exact_31'::regclass,
    'pgqueue.queue_size_exact_32'::regclass, 'pgqueue.queue_size_exact_33'::regclass,
    'pgqueue.queue_size_exact_34'::regclass, 'pgqueue.queue_size_exact_35'::regclass,
    'pgqueue.queue_size_exact_36'::regclass, 'pgqueue.queue_size_exact_37'::regclass,
    'pgqueue.queue_size_exact_38'::regclass, 'pgqueue.queue_size_exact_39'::regclass,
    'pgqueue.queue_size_exact_40'::regclass, 'pgqueue.queue_size_exact_41'::regclass,
    'pgqueue.queue_size_exact_42'::regclass, 'pgqueue.queue_size_exact_43'::regclass,
    'pgqueue.queue_size_exact_44'::regclass, 'pgqueue.queue_size_exact_45'::regclass,
    'pgqueue.queue_size_exact_46'::regclass, 'pgqueue.queue_size_exact_47'::regclass,
    'pgqueue.queue_size_exact_48'::regclass, 'pgqueue.queue_size_exact_49'::regclass,
    'pgqueue.queue_size_exact_50'::regclass, 'pgqueue.queue_size_exact_51'::regclass,
    'pgqueue.queue_size_exact_52'::regclass, 'pgqueue.queue_size_exact_53'::regclass,
    'pgqueue.queue_size_exact_54'::regclass, 'pgqueue.queue_size_exact_55'::regclass,
    'pgqueue.queue_size_exact_56'::regclass, 'pgqueue.queue_size_exact_57'::regclass,
    'pgqueue.queue_size_exact_58'::regclass, 'pgqueue.queue_size_exact_59'::regclass,
    'pgqueue.queue_size_exact_60'::regclass, 'pgqueue.queue_size_exact_61'::regclass,
    'pgqueue.queue_size_exact_62'::regclass, 'pgqueue.queue_size_exact_63'::regclass])[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._size_exact_seq(integer) IS
    'pgqueue internal: the sequence that marks a queue''s stripe exact for max_size (pgqueue.queue_size_exact_<id & 63>)';
