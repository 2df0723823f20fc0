-- CREATE EXTENSION makes the "default" queue; pg_restore then loads the dumped row for it.
-- Turn that insert into an update so that the dumped settings win and the restore succeeds.
-- Every setting of pgqueue.queue is copied: one left out would silently come back at its
-- default after a restore (tests/test_dump_restore.py checks that none is missing).
CREATE FUNCTION pgqueue._queue_restore_default()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE pgqueue.queue q
       SET lock_ms = NEW.lock_ms, max_attempts = NEW.max_attempts,
           retry_base_ms = NEW.retry_base_ms, retry_cap_ms = NEW.retry_cap_ms,
           max_size = NEW.max_size, notify = NEW.notify, created_at = NEW.created_at,
           group_concurrency = NEW.group_concurrency, key_window_ms = NEW.key_window_ms,
           rate_limit = NEW.rate_limit
     WHERE q.name = NEW.name AND q.id = NEW.id;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END;
$$;
