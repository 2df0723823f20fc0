-- The rate-limit sequence of a queue: pgqueue.queue_rate_<id & 63> (a queue with a rate limit has
-- it to itself: queue_create and queue_alter refuse a second rate-limited queue on a stripe). One
-- regclass constant per sequence, as in pgqueue._lock_stripe.
CREATE FUNCTION pgqueue._rate_seq(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.queue_rate_0'::regclass, 'pgqueue.queue_rate_1'::regclass,
    'pgqueue.queue_rate_2'::regclass, 'pgqueue.queue_rate_3'::regclass,
    'pgqueue.queue_rate_4'::regclass, 'pgqueue.queue_rate_5'::regclass,
    'pgqueue.queue_rate_6'::regclass, 'pgqueue.queue_rate_7'::regclass,
    'pgqueue.queue_rate_8'::regclass, 'pgqueue.queue_rate_9'::regclass,
    'pgqueue.queue_rate_10'::regclass, 'pgqueue.queue_rate_11'::regclass,
    'pgqueue.queue_rate_12'::regclass, 'pgqueue.queue_rate_13'::regclass,
    'pgqueue.queue_rate_14'::regclass, 'pgqueue.queue_rate_15'::regclass,
    'pgqueue.queue_rate_16'::regclass, 'pgqueue.queue_rate_17'::regclass,
    'pgqueue.queue_rate_18'::regclass, 'pgqueue.queue_rate_19'::regclass,
    'pgqueue.queue_rate_20'::regclass, 'pgqueue.queue_rate_21'::regclass,
    'pgqueue.queue_rate_22'::regclass, 'pgqueue.queue_rate_23'::regclass,
    'pgqueue.queue_rate_24'::regclass, 'pgqueue.queue_rate_25'::regclass,
    'pgqueue.queue_rate_26'::regclass, 'pgqueue.queue_rate_27'::regclass,
    'pgqueue.queue_rate_28'::regclass, 'pgqueue.queue_rate_29'::regclass,
    'pgqueue.queue_rate_30'::regclass, 'pgqueue.queue_rate_31'::regclass,
    'pgqueue.queue_rate_32'::regclass, 'pgqueue.queue_rate_33'::regclass,
    'pgqueue.queue_rate_34'::regclass, 'pgqueue.queue_rate_35'::regclass,
    'pgqueue.queue_rate_36'::regclass, 'pgqueue.queue_rate_37'::regclass,
    'pgqueue.queue_rate_38'::regclass, 'pgqueue.queue_rate_39'::regclass,
    'pgqueue.queue_rate_40'::regclass, 'pgqueue.queue_rate_41'::regclass,
    'pgqueue.queue_rate_42'::regclass, 'pgqueue.queue_rate_43'::regclass,
    'pgqueue.queue_rate_44'::regclass, 'pgqueue.queue_rate_45'::regclass,
    'pgqueue.queue_rate_46'::regclass, 'pgqueue.queue_rate_47'::regclass,
    'pgqueue.queue_rate_48'::regclass, 'pgqueue.queue_rate_49'::regclass,
    'pgqueue.queue_rate_50'::regclass, 'pgqueue.queue_rate_51'::regclass,
    'pgqueue.queue_rate_52'::regclass, 'pgqueue.queue_rate_53'::regclass,
    'pgqueue.queue_rate_54'::regclass, 'pgqueue.queue_rate_55'::regclass,
    'pgqueue.queue_rate_56'::regclass, 'pgqueue.queue_rate_57'::regclass,
    'pgqueue.queue_rate_58'::regclass, 'pgqueue.queue_rate_59'::regclass,
    'pgqueue.queue_rate_60'::regclass, 'pgqueue.queue_rate_61'::regclass,
    'pgqueue.queue_rate_62'::regclass, 'pgqueue.queue_rate_63'::regclass])[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._rate_seq(integer) IS
    'pgqueue internal: the rate-limit sequence of a queue (pgqueue.queue_rate_<id & 63>)';
