-- Count one message of a kind (pgqueue._count_seq) for a queue; always true, so that a statement
-- can count in its WHERE or RETURNING clause without a statement of its own. nextval writes no
-- row version and is not rolled back.
CREATE FUNCTION pgqueue._counted(p_queue_id integer, p_kind integer)
RETURNS boolean
LANGUAGE sql VOLATILE
RETURN pg_catalog.nextval(pgqueue._count_seq(p_queue_id, p_kind)) > 0;

COMMENT ON FUNCTION pgqueue._counted(integer, integer) IS
    'pgqueue internal: add one to a queue''s counter of a kind (0 enqueued .. 5 expired); always true';
