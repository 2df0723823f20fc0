-- Seed 004: dequeue one element (the single-element statement, with LIMIT 1 inlined).
DELETE FROM seed004.payloads
WHERE id IN
  ( SELECT p1.id
    FROM seed004.payloads AS p1
    WHERE p1.state = 'enqueued'
    ORDER BY p1.modified_at ASC
    FOR UPDATE SKIP LOCKED
    LIMIT 1
  )
RETURNING value;
