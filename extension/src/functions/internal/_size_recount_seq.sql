-- The recount window of a queue's stripe for max_size: pgqueue.queue_size_recount_<id & 63>, NULL
-- until a count of a capped queue on the stripe found 10,000 messages or more; then (the time until which
-- that queue is not counted again, in epoch ms) * 2^20 + ((queue id >> 6) & (2^20 - 1)), set by
-- pgqueue._queue_reserve. One regclass constant per sequence, as in pgqueue._lock_stripe.
CREATE FUNCTION pgqueue._size_recount_seq(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.queue_size_recount_0'::regclass, 'pgqueue.queue_size_recount_1'::regclass,
    'pgqueue.queue_size_recount_2'::regclass, 'pgqueue.queue_size_recount_3'::regclass,
    'pgqueue.queue_size_recount_4'::regclass, 'pgqueue.queue_size_recount_5'::regclass,
    'pgqueue.queue_size_recount_6'::regclass, 'pgqueue.queue_size_recount_7'::regclass,
    'pgqueue.queue_size_recount_8'::regclass, 'pgqueue.queue_size_recount_9'::regclass,
    'pgqueue.queue_size_recount_10'::regclass, 'pgqueue.queue_size_recount_11'::regclass,
    'pgqueue.queue_size_recount_12'::regclass, 'pgqueue.queue_size_recount_13'::regclass,
    'pgqueue.queue_size_recount_14'::regclass, 'pgqueue.queue_size_recount_15'::regclass,
    'pgqueue.queue_size_recount_16'::regclass, 'pgqueue.queue_size_recount_17'::regclass,
    'pgqueue.queue_size_recount_18'::regclass, 'pgqueue.queue_size_recount_19'::regclass,
    'pgqueue.queue_size_recount_20'::regclass, 'pgqueue.queue_size_recount_21'::regclass,
    'pgqueue.queue_size_recount_22'::regclass, 'pgqueue.queue_size_recount_23'::regclass,
    'pgqueue.queue_size_recount_24'::regclass, 'pgqueue.queue_size_recount_25'::regclass,
    'pgqueue.queue_size_recount_26'::regclass, 'pgqueue.queue_size_recount_27'::regclass,
    'pgqueue.queue_size_recount_28'::regclass, 'pgqueue.queue_size_recount_29'::regclass,
    'pgqueue.queue_size_recount_30'::regclass, 'pgqueue.queue_size_recount_31'::regclass,
    'pgqueue.queue_size_recount_32'::regclass, 'pgqueue.queue_size_recount_33'::regclass,
    'pgqueue.queue_size_recount_34'::regclass, 'pgqueue.queue_size_recount_35'::regclass,
    'pgqueue.queue_size_recount_36'::regclass, 'pgqueue.queue_size_recount_37'::regclass,
    'pgqueue.queue_size_recount_38'::regclass, 'pgqueue.queue_size_recount_39'::regclass,
    'pgqueue.queue_size_recount_40'::regclass, 'pgqueue.queue_size_recount_41'::regclass,
    'pgqueue.queue_size_recount_42'::regclass, 'pgqueue.queue_size_recount_43'::regclass,
    'pgqueue.queue_size_recount_44'::regclass, 'pgqueue.queue_size_recount_45'::regclass,
    'pgqueue.queue_size_recount_46'::regclass, 'pgqueue.queue_size_recount_47'::regclass,
    'pgqueue.queue_size_recount_48'::regclass, 'pgqueue.queue_size_recount_49'::regclass,
    'pgqueue.queue_size_recount_50'::regclass, 'pgqueue.queue_size_recount_51'::regclass,
    'pgqueue.queue_size_recount_52'::regclass, 'pgqueue.queue_size_recount_53'::regclass,
    'pgqueue.queue_size_recount_54'::regclass, 'pgqueue.queue_size_recount_55'::regclass,
    'pgqueue.queue_size_recount_56'::regclass, 'pgqueue.queue_size_recount_57'::regclass,
    'pgqueue.queue_size_recount_58'::regclass, 'pgqueue.queue_size_recount_59'::regclass,
    'pgqueue.queue_size_recount_60'::regclass, 'pgqueue.queue_size_recount_61'::regclass,
    'pgqueue.queue_size_recount_62'::regclass, 'pgqueue.queue_size_recount_63'::regclass])[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._size_recount_seq(integer) IS
    'pgqueue internal: the sequence that keeps a capped queue''s recount window (pgqueue.queue_size_recount_<id & 63>)';
