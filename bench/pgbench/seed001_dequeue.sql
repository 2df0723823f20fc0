-- Seed 001: message_dequeue (PL/pgSQL: SELECT ... FOR UPDATE SKIP LOCKED, then DELETE).
SELECT seed001.message_dequeue();
