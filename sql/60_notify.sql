\set VERBOSITY terse
SET client_min_messages = warning;
-- Notifications: a queue created with p_notify sends NOTIFY "pgqueue.<queue>" (payload: the
-- queue name) when messages are created or requeued, one per transaction; other queues send
-- nothing. A create refused for a full queue (step 11) is here for what it does not send;
-- its SQLSTATE is tested in tests/pgtap/20_errors.sql.
--
-- psql prints a notification with the sender's PID, which changes from run to run, so the
-- notifications are captured with \o into a file (results/60_notify.notifications, with
-- \qecho markers between the steps), read back with \copy, and printed with the PID replaced.

CREATE FUNCTION pg_temp.err(p_sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE p_sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT pgqueue.queue_create('qnotify', p_notify => true, p_max_attempts => 1, p_max_size => 20);
SELECT pgqueue.queue_create('qquiet');
SELECT pgqueue.queue_create('q.dot-ted', p_notify => true);
CREATE TEMP TABLE notifications (n serial, line text);

\o results/60_notify.notifications
LISTEN "pgqueue.qnotify";
LISTEN "pgqueue.qquiet";
LISTEN "pgqueue.q.dot-ted";
\qecho 1. one message
SELECT pgqueue.message_create('qnotify', '\x01') AS ignored \gset
\qecho 2. a batch of three: one notification
SELECT count(*) AS ignored FROM pgqueue.message_create_batch('qnotify', ARRAY['\x01', '\x02', '\x03']::bytea[]) \gset
\qecho 3. three creates and a batch in one transaction: one notification, at commit
BEGIN;
SELECT pgqueue.message_create('qnotify', '\x01') AS ignored \gset
SELECT pgqueue.message_create('qnotify', '\x02') AS ignored \gset
SELECT pgqueue.message_create('qnotify', '\x03', pgqueue.now_ms() + 3600000) AS ignored \gset
SELECT count(*) AS ignored FROM pgqueue.message_create_batch('qnotify', ARRAY['\x04']::bytea[]) \gset
\qecho 3b. (commit)
COMMIT;
\qecho 4. a rolled-back create: nothing
BEGIN;
SELECT pgqueue.message_create('qnotify', '\x01') AS ignored \gset
ROLLBACK;
\qecho 5. a queue without notify: nothing
SELECT pgqueue.message_create('qquiet', '\x01') AS ignored \gset
SELECT count(*) AS ignored FROM pgqueue.message_create_batch('qquiet', ARRAY['\x01']::bytea[]) \gset
\qecho 6. an empty batch: nothing
SELECT count(*) AS ignored FROM pgqueue.message_create_batch('qnotify', '{}'::bytea[]) \gset
\qecho 7. two queues in one transaction: one notification each
BEGIN;
SELECT pgqueue.message_create('qnotify', '\x01') AS ignored \gset
SELECT pgqueue.message_create('q.dot-ted', '\x01') AS ignored \gset
COMMIT;
\qecho 8. dequeue and fail: nothing
SELECT count(*) AS ignored FROM pgqueue.message_dequeue('qnotify', 3) \gset
SELECT count(pgqueue.message_fail(id, attempts, 'dead')) AS ignored FROM pgqueue.message_dequeue('qnotify', 2) \gset
\qecho 9. requeue of two dead letters: one notification
SELECT pgqueue.dead_letter_requeue('qnotify') AS ignored \gset
\qecho 10. requeue with nothing to requeue: nothing
SELECT pgqueue.dead_letter_requeue('qnotify') AS ignored \gset
\qecho 11. a create refused because the queue is full: nothing
SELECT pg_temp.err($$SELECT pgqueue.message_create_batch('qnotify', array_fill('\x01'::bytea, ARRAY[20]))$$) AS step11 \gset
\qecho 12. notify switched on by queue_alter
SELECT pgqueue.queue_alter('qquiet', p_notify => true) AS ignored \gset
SELECT pgqueue.message_create('qquiet', '\x01') AS ignored \gset
\qecho 13. after UNLISTEN: nothing
UNLISTEN *;
SELECT pgqueue.message_create('qnotify', '\x01') AS ignored \gset
\qecho end
\o

\copy notifications (line) FROM 'results/60_notify.notifications'
SELECT n, regexp_replace(line, 'server process with PID [0-9]+',
                         CASE WHEN substring(line FROM 'PID ([0-9]+)')::int = pg_backend_pid()
                              THEN 'this session' ELSE 'another session' END) AS line
  FROM notifications ORDER BY n;
-- Step 11 did fail.
SELECT :'step11' AS step11;

SELECT pgqueue.queue_drop(q) FROM unnest(ARRAY['qnotify', 'qquiet', 'q.dot-ted']) q;
