-- pgmq (a peer): its lease mode in batches, two statements (two transactions): read :batch
-- messages with a 30 s visibility timeout, then delete them with one call.
SELECT coalesce(array_agg(msg_id), '{}') AS ids FROM pgmq.read('bench', 30, :batch) \gset
SELECT count(*) FROM pgmq.delete('bench', :ids::bigint[]);
