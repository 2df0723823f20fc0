-- The lease cycle of bench/pgbench/pgqueue_lease_cycle.sql for the grouped experiments: a dequeue
-- that finds nothing (each group's one turn in flight, or a turn handed on by a transaction that
-- committed after this session's last look: docs/guarantees.md) completes id 0, which changes
-- nothing, instead of ending the client (\gset raises on no row; \aset assigns nothing).
\set id 0
\set attempts 0
SELECT id, attempts FROM pgqueue.message_dequeue(:queue, 1, 30000) \aset
SELECT pgqueue.message_complete(:id, :attempts);
