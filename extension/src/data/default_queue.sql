-- The default queue, with the table's defaults (queue_create's). Inserted, not created with
-- queue_create, which needs READ COMMITTED for its stripe search (it reads the other queues):
-- an install into a database whose default_transaction_isolation is REPEATABLE READ or
-- SERIALIZABLE was refused. Here the table and every stripe's sequences were made in this
-- transaction: no other queue, and every counter at its start, as queue_create would leave them.
INSERT INTO pgqueue.queue (name) VALUES ('default');
