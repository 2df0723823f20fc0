-- pgqueue: the lease cycle as `pgqueue worker` runs it with a no-op handler: one
-- message_complete_and_dequeue call (one transaction) completes the client's previous batch with
-- their attempts tokens and leases the next :batch messages for 30 s (start with -D aids={}
-- -D atoks={}; -D batch=4 is the worker's default concurrency).
SELECT coalesce(array_agg(id), '{}') AS aids, coalesce(array_agg(attempts), '{}') AS atoks
  FROM pgqueue.message_complete_and_dequeue(:aids::bigint[], :atoks::integer[], :queue, :batch, 30000)
 WHERE NOT stale \gset
