-- Count one message of a kind (pgqueue._count_seq) for a queue; always true. nextval writes no
-- row version and is not rolled back. Call it in PL/pgSQL assignments and RETURN expressions,
-- which are planned once per session: inlined into a statement that is planned again and again
-- (a custom plan, a SQL function's body), _count_seq's 576 constants cost about 0.3 ms a plan.
CREATE FUNCTION pgqueue._counted(p_queue_id integer, p_kind integer)
RETURNS boolean
LANGUAGE sql VOLATILE
RETURN pg_catalog.nextval(pgqueue._count_seq(p_queue_id, p_kind)) > 0;

COMMENT ON FUNCTION pgqueue._counted(integer, integer) IS
    'pgqueue internal: add one to a queue''s counter of a kind (0 enqueued .. 5 expired); always true';
