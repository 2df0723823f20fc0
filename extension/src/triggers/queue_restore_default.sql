-- CREATE EXTENSION makes the "default" queue; pg_restore then loads the dumped row for it:
-- pgqueue._queue_restore_default turns that insert into an update of the existing row.
CREATE TRIGGER queue_restore_default
    BEFORE INSERT ON pgqueue.queue
    FOR EACH ROW WHEN (NEW.name = 'default')
    EXECUTE FUNCTION pgqueue._queue_restore_default();
