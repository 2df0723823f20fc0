-- Message groups (issue 14): one row per queue and stripe of its groups (hashtext(group) & 255),
-- made on first use. pgqueue._message_group_lock locks a row FOR UPDATE to serialise the
-- decisions about the turns of the groups on that stripe until the end of the transaction.
-- Locking a row writes no new row version (no dead tuples under a held snapshot), and no role
-- but the extension's owner has a privilege on this table, so no role can hold a group's lock
-- on its own (an advisory lock could be taken by anyone). Derived: not dumped, made again on
-- first use; queue_drop removes a queue's rows.
CREATE TABLE pgqueue.message_group_lock (
    queue_id integer NOT NULL,
    stripe   integer NOT NULL,
    CONSTRAINT message_group_lock_pkey PRIMARY KEY (queue_id, stripe)
);

COMMENT ON TABLE pgqueue.message_group_lock IS
    'pgqueue internal: rows locked to serialise the turns of a queue''s message groups (pgqueue._message_group_lock)';
