-- The lock stripe of a queue: pgqueue.queue_lock_<id & 63> (docs/locking.md).
CREATE FUNCTION pgqueue._lock_stripe(p_queue_id integer)
RETURNS regclass
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (CAST('{pgqueue.queue_lock_0,pgqueue.queue_lock_1,pgqueue.queue_lock_2,pgqueue.queue_lock_3,'
    'pgqueue.queue_lock_4,pgqueue.queue_lock_5,pgqueue.queue_lock_6,pgqueue.queue_lock_7,'
    'pgqueue.queue_lock_8,pgqueue.queue_lock_9,pgqueue.queue_lock_10,pgqueue.queue_lock_11,'
    'pgqueue.queue_lock_12,pgqueue.queue_lock_13,pgqueue.queue_lock_14,pgqueue.queue_lock_15,'
    'pgqueue.queue_lock_16,pgqueue.queue_lock_17,pgqueue.queue_lock_18,pgqueue.queue_lock_19,'
    'pgqueue.queue_lock_20,pgqueue.queue_lock_21,pgqueue.queue_lock_22,pgqueue.queue_lock_23,'
    'pgqueue.queue_lock_24,pgqueue.queue_lock_25,pgqueue.queue_lock_26,pgqueue.queue_lock_27,'
    'pgqueue.queue_lock_28,pgqueue.queue_lock_29,pgqueue.queue_lock_30,pgqueue.queue_lock_31,'
    'pgqueue.queue_lock_32,pgqueue.queue_lock_33,pgqueue.queue_lock_34,pgqueue.queue_lock_35,'
    'pgqueue.queue_lock_36,pgqueue.queue_lock_37,pgqueue.queue_lock_38,pgqueue.queue_lock_39,'
    'pgqueue.queue_lock_40,pgqueue.queue_lock_41,pgqueue.queue_lock_42,pgqueue.queue_lock_43,'
    'pgqueue.queue_lock_44,pgqueue.queue_lock_45,pgqueue.queue_lock_46,pgqueue.queue_lock_47,'
    'pgqueue.queue_lock_48,pgqueue.queue_lock_49,pgqueue.queue_lock_50,pgqueue.queue_lock_51,'
    'pgqueue.queue_lock_52,pgqueue.queue_lock_53,pgqueue.queue_lock_54,pgqueue.queue_lock_55,'
    'pgqueue.queue_lock_56,pgqueue.queue_lock_57,pgqueue.queue_lock_58,pgqueue.queue_lock_59,'
    'pgqueue.queue_lock_60,pgqueue.queue_lock_61,pgqueue.queue_lock_62,pgqueue.queue_lock_63}' AS regclass[]))[(p_queue_id & 63) + 1];

COMMENT ON FUNCTION pgqueue._lock_stripe(integer) IS
    'pgqueue internal: the sequence whose relation lock guards a queue (docs/locking.md)';
