-- Seed 003: take and delete a batch of :batch rows in one statement.
DELETE FROM seed003.queue_table
USING (
    SELECT * FROM seed003.queue_table LIMIT :batch FOR UPDATE SKIP LOCKED
) q
WHERE q.id = queue_table.id RETURNING queue_table.*;
