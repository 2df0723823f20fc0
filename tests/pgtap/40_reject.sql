-- message_reject (issue 16): a leased message goes to the dead letters at once, whatever
-- max_attempts says; a stale token changes nothing; its errors and their SQLSTATEs.
BEGIN;
SELECT plan(14);

SELECT pgqueue.queue_create('r', p_max_attempts => 5);
CREATE TEMP TABLE lease AS
SELECT d.id, d.attempts FROM (SELECT pgqueue.message_create('r', 'bad'), pgqueue.message_create('r', 'good')) c,
       LATERAL pgqueue.message_dequeue('r', 2, 600000) d;

SELECT is(pgqueue.message_reject(id, attempts + 1, 'stale'), false, 'a stale token: false')
  FROM lease WHERE id = (SELECT min(id) FROM lease);
SELECT is((SELECT count(*) FROM pgqueue.dead_letter), 0::bigint, 'a stale token: nothing dead');
SELECT is(pgqueue.message_reject(id, attempts, 'unknown task "x"'), true, 'reject: true')
  FROM lease WHERE id = (SELECT min(id) FROM lease);
SELECT is((SELECT row(d.id, d.attempts, d.last_error, convert_from(d.content, 'UTF8'))::text FROM pgqueue.dead_letter d),
          (SELECT row(id, 1, 'unknown task "x"', 'bad')::text FROM lease WHERE id = (SELECT min(id) FROM lease)),
          'reject: dead at attempt 1 of 5, with the error');
SELECT is((SELECT count(*) FROM pgqueue.message WHERE id = (SELECT min(id) FROM lease)), 0::bigint,
          'reject: the message is gone from the queue');
SELECT is(pgqueue.message_reject(id, attempts, 'again'), false, 'reject twice: false')
  FROM lease WHERE id = (SELECT min(id) FROM lease);
SELECT is(pgqueue.message_reject((SELECT max(id) FROM lease) + 1000, 1, 'x'), false, 'an unknown id: false');
SELECT is(pgqueue.message_complete(id, attempts), true, 'the other lease is untouched')
  FROM lease WHERE id = (SELECT max(id) FROM lease);
-- a message not leased (ready) cannot be rejected
SELECT is(pgqueue.message_reject(pgqueue.message_create('r', 'ready'), 0, 'x'), false, 'a ready message: false');
SELECT throws_ok($$SELECT pgqueue.message_reject(NULL, 1, 'x')$$, '22004', 'message id must not be NULL', 'NULL id');
SELECT throws_ok($$SELECT pgqueue.message_reject(1, NULL, 'x')$$, '22004', 'attempts token must not be NULL', 'NULL token');
-- a NULL error is allowed, and keeps the error the message's last failure gave it
SELECT pgqueue.queue_create('r_null', p_max_attempts => 5, p_retry_base_ms => 0);
CREATE TEMP TABLE first_lease AS
SELECT d.id, d.attempts FROM (SELECT pgqueue.message_create('r_null', 'x')) c,
       LATERAL pgqueue.message_dequeue('r_null', 1, 600000) d;
SELECT pgqueue.message_fail(id, attempts, 'first') FROM first_lease;
CREATE TEMP TABLE second_lease AS SELECT d.id, d.attempts FROM pgqueue.message_dequeue('r_null', 1, 600000) d;
SELECT is((SELECT count(*) FROM second_lease s JOIN first_lease f USING (id) WHERE s.attempts = 2), 1::bigint,
          'a NULL error: the failed message is leased again, at attempt 2');
SELECT is(pgqueue.message_reject(id, attempts, NULL), true, 'a NULL error is allowed') FROM second_lease;
SELECT is((SELECT row(d.attempts, d.last_error)::text FROM pgqueue.dead_letter d JOIN first_lease USING (id)),
          row(2, 'first')::text, 'a NULL error keeps the last failure''s');

SELECT * FROM finish();
ROLLBACK;
