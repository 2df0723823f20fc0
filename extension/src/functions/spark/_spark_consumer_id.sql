-- The id of a consumer, NULL if there is none (no lock, no error).
CREATE FUNCTION pgqueue._spark_consumer_id(p_queue text, p_consumer text)
RETURNS integer
LANGUAGE sql STABLE
BEGIN ATOMIC
    SELECT c.id FROM pgqueue.spark_consumer c JOIN pgqueue.queue q ON q.id = c.queue_id
     WHERE q.name = p_queue AND c.name = p_consumer;
END;
