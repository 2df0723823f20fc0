-- pgqueue: the lease cycle as a worker runs it with acknowledge-and-fetch: one statement (one
-- transaction) per message, completing the client's previous message with its attempts token
-- and leasing the next one for 30 s (start with -D aid=0 -D atok=0: a stale acknowledgement,
-- left out by "NOT stale").
SELECT id AS aid, attempts AS atok
  FROM pgqueue.message_complete_and_dequeue(ARRAY[:aid::bigint], ARRAY[:atok::integer], :queue, 1, 30000)
 WHERE NOT stale \gset
