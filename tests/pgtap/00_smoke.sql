BEGIN;
SELECT plan(2);
SELECT has_schema('pgqueue');
SELECT is((SELECT count(*) FROM pgqueue.queue_list() WHERE queue = 'default'), 1::bigint, 'default queue exists');
SELECT * FROM finish();
ROLLBACK;
