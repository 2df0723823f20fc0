-- Two measurement builds of an enqueue that is a plain INSERT into a view whose INSTEAD rule
-- rewrites it into pgqueue's INSERT (session 42, docs/performance.md): the client's prepared
-- statement then caches the plan of the rewritten INSERT, with no PL/pgSQL call around it.
--   rx.enqueue_b: the queue's look-up, its lock stripe and the enqueued counter inlined into the
--     INSERT ... SELECT (its snapshot is taken before the lock: a queue_drop that commits in
--     between leaves an orphan message, so this is an upper bound, not a design);
--   rx.enqueue_c: the look-up and the lock in a PL/pgSQL function whose second statement reads
--     the queue again after the lock (a new snapshot), as message_create's fast path does.
-- Neither handles capped or grouped queues, keys or other isolation levels.
CREATE SCHEMA IF NOT EXISTS rx;
CREATE OR REPLACE VIEW rx.enqueue_b AS
  SELECT NULL::text AS queue, NULL::bytea AS content, NULL::bigint AS dequeue_at, NULL::text AS content_type, NULL::bigint AS id WHERE false;
CREATE OR REPLACE RULE ins AS ON INSERT TO rx.enqueue_b DO INSTEAD
  INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
  SELECT q.id, coalesce(NEW.dequeue_at, pgqueue._write_clock()), pgqueue.now_ms(), NEW.content, NEW.content_type,
         CASE WHEN NEW.dequeue_at IS NULL OR NEW.dequeue_at >= pgqueue._write_clock() - 5 THEN false END
    FROM pgqueue.queue q
   WHERE q.name = NEW.queue AND pgqueue._queue_lock(q.id) AND pg_catalog.nextval(pgqueue._count_seq(q.id, 0)) > 0
  RETURNING NULL::text, message.content, message.dequeue_at, message.content_type, message.id;

CREATE OR REPLACE FUNCTION rx.enter(p_queue text) RETURNS integer LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS $$
DECLARE v integer; l boolean;
BEGIN
  SELECT q.id, pgqueue._queue_lock(q.id) INTO v, l FROM pgqueue.queue q WHERE q.name = p_queue;
  SELECT q.id INTO v FROM pgqueue.queue q WHERE q.id = v AND q.max_size IS NULL AND q.group_concurrency IS NULL;
  RETURN v;
END $$;
CREATE OR REPLACE VIEW rx.enqueue_c AS
  SELECT NULL::text AS queue, NULL::bytea AS content, NULL::bigint AS dequeue_at, NULL::text AS content_type, NULL::bigint AS id WHERE false;
CREATE OR REPLACE RULE ins AS ON INSERT TO rx.enqueue_c DO INSTEAD
  INSERT INTO pgqueue.message (queue_id, dequeue_at, created_at, content, content_type, write_mark)
  SELECT e.id, coalesce(NEW.dequeue_at, pgqueue._write_clock()), pgqueue.now_ms(), NEW.content, NEW.content_type,
         CASE WHEN NEW.dequeue_at IS NULL OR NEW.dequeue_at >= pgqueue._write_clock() - 5 THEN false END
    FROM (SELECT rx.enter(NEW.queue) AS id) e
   WHERE pg_catalog.nextval(pgqueue._count_seq(e.id, 0)) > 0
  RETURNING NULL::text, message.content, message.dequeue_at, message.content_type, message.id;
