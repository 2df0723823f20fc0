-- pgmq (a peer): its lease mode, two statements (two transactions): read one message with a
-- 30 s visibility timeout, then delete it.
SELECT msg_id FROM pgmq.read('bench', 30, 1) \gset
SELECT pgmq.delete('bench', :msg_id::bigint);
