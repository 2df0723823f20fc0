-- The lock stripe of a queue: pgqueue.queue_lock_<id & 63> (docs/locking.md). One regclass
-- constant per stripe, so that each is a recorded dependency (pg_dump of a plain install then
-- creates the sequences before this function).
CREATE FUNCTION pgqueue._lock_stripe(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (ARRAY[
    'pgqueue.queue_lock_0'::regclass, 'pgqueue.queue_lock_1'::regclass,
    'pgqueue.queue_lock_2'::regclass, 'pgqueue.queue_lock_3'::regclass,
    'pgqueue.queue_lock_4'::regclass, 'pgqueue.queue_lock_5'::regclass,
    'pgqueue.queue_lock_6'::regclass, 'pgqueue.queue_lock_7'::regclass,
    'pgqueue.queue_lock_8'::regclass, 'pgqueue.queue_lock_9'::regclass,
    'pgqueue.queue_lock_10'::regclass, 'pgqueue.queue_lock_11'::regclass,
    'pgqueue.queue_lock_12'::regclass, 'pgqueue.queue_lock_13'::regclass,
    'pgqueue.queue_lock_14'::regclass, 'pgqueue.queue_lock_15'::regclass,
    'pgqueue.queue_lock_16'::regclass, 'pgqueue.queue_lock_17'::regclass,
    'pgqueue.queue_lock_18'::regclass, 'pgqueue.queue_lock_19'::regclass,
    'pgqueue.queue_lock_20'::regclass, 'pgqueue.queue_lock_21'::regclass,
    'pgqueue.queue_lock_22'::regclass, 'pgqueue.queue_lock_23'::regclass,
    'pgqueue.queue_lock_24'::regclass, 'pgqueue.queue_lock_25'::regclass,
    'pgqueue.queue_lock_26'::regclass, 'pgqueue.queue_lock_27'::regclass,
    'pgqueue.queue_lock_28'::regclass, 'pgqueue.queue_lock_29'::regclass,
    'pgqueue.queue_lock_30'::regclass, 'pgqueue.queue_lock_31'::regclass,
    'pgqueue.queue_lock_32'::regclass, 'pgqueue.queue_lock_33'::regclass,
    'pgqueue.queue_lock_34'::regclass, 'pgqueue.queue_lock_35'::regclass,
    'pgqueue.queue_lock_36'::regclass, 'pgqueue.queue_lock_37'::regclass,
    'pgqueue.queue_lock_38'::regclass, 'pgqueue.queue_lock_39'::regclass,
    'pgqueue.queue_lock_40'::regclass, 'pgqueue.queue_lock_41'::regclass,
    'pgqueue.queue_lock_42'::regclass, 'pgqueue.queue_lock_43'::regclass,
    'pgqueue.queue_lock_44'::regclass, 'pgqueue.queue_lock_45'::regclass,
    'pgqueue.queue_lock_46'::regclass, 'pgqueue.queue_lock_47'::regclass,
    'pgqueue.queue_lock_48'::regclass, 'pgqueue.queue_lock_49'::regclass,
    'pgqueue.queue_lock_50'::regclass, 'pgqueue.queue_lock_51'::regclass,
    'pgqueue.queue_lock_52'::regclass, 'pgqueue.queue_lock_53'::regclass,
    'pgqueue.queue_lock_54'::regclass, 'pgqueue.queue_lock_55'::regclass,
    'pgqueue.queue_lock_56'::regclass, 'pgqueue.queue_lock_57'::regclass,
    'pgqueue.queue_lock_58'::regclass, 'pgqueue.queue_lock_59'::regclass,
    'pgqueue.queue_lock_60'::regclass, 'pgqueue.queue_lock_61'::regclass,
    'pgqueue.queue_lock_62'::regclass, 'pgqueue.queue_lock_63'::regclass])[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._lock_stripe(integer) IS
    'pgqueue internal: the sequence whose relation lock guards a queue (docs/locking.md)';
