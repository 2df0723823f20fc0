\set VERBOSITY terse
SET client_min_messages = warning;
-- The Spark integration (0.2): claims as offsets, acknowledgements, releases, snapshots,
-- staging and publishing exactly once.
SELECT pgqueue.queue_create('sp');
SELECT count(*) FROM pgqueue.message_create_batch('sp',
    ARRAY['a', 'b', 'c', 'd', 'e', 'f', 'g']::bytea[]);

-- Opening a consumer creates it and returns its acknowledged position.
SELECT pgqueue.spark_consumer_open('sp', 'etl') AS acked;

-- Claims are numbered 1, 2, ...; claimed messages are leased until the year 9999.
SELECT pgqueue.spark_claim('sp', 'etl', 3) AS seq1, pgqueue.spark_claim('sp', 'etl', 2) AS seq2;
SELECT seq, n, max_id - min_id + 1 AS span FROM pgqueue.spark_claims('sp', 'etl', 0, 10);
SELECT claim_seq, convert_from(content, 'UTF8') AS content, attempts
  FROM pgqueue.spark_claimed('sp', 'etl', 0, 2) ORDER BY id;
SELECT locked_until = 253402300799999 AS until_9999, count(*)
  FROM pgqueue.message WHERE claim_id IS NOT NULL GROUP BY 1;
SELECT pgqueue.spark_pending_seq('sp', 'etl') AS pending;
-- The readers of claims: an unknown queue is PQ001, as everywhere; an unknown consumer of a
-- known queue is PQ006, as for spark_ack and spark_release.
SELECT * FROM pgqueue.spark_claims('no-such-queue', 'etl', 0, 10);
SELECT pgqueue.spark_pending_seq('no-such-queue', 'etl');
SELECT * FROM pgqueue.spark_claimed('no-such-queue', 'etl', 0, 10);
SELECT * FROM pgqueue.spark_claims('sp', 'nobody', 0, 10);
SELECT pgqueue.spark_pending_seq('sp', 'nobody');
SELECT * FROM pgqueue.spark_claimed('sp', 'nobody', 0, 10);

-- Ordinary consumers never see claimed messages.
SELECT convert_from(content, 'UTF8') AS dequeued FROM pgqueue.message_dequeue('sp', 10, 0);
SELECT ready, leased FROM pgqueue.queue_stats('sp');

-- Nothing left to claim.
SELECT pgqueue.spark_claim('sp', 'etl', 10) IS NULL AS nothing_due;

-- Acknowledging deletes what the claims hold; it is idempotent.
SELECT pgqueue.spark_ack('sp', 'etl', 1) AS acked_1, pgqueue.spark_ack('sp', 'etl', 1) AS again;
SELECT consumer, acked_seq, next_seq, claims, claimed, active FROM pgqueue.spark_consumers('sp');

-- Releasing gives the rest back (the holder of the consumer may release it).
SELECT pgqueue.spark_release('sp', 'etl') AS released;
SELECT convert_from(content, 'UTF8') AS dequeued, attempts FROM pgqueue.message_dequeue('sp', 10, 0);
SELECT pgqueue.spark_consumer_close('sp', 'etl') AS closed;
SELECT consumer, acked_seq, next_seq, claims, active FROM pgqueue.spark_consumers();

-- Snapshots: statuses, by id range; reading changes nothing.
SELECT count(*) FROM pgqueue.message_create_batch('sp', ARRAY['r1', 'r2', 'r3']::bytea[]);
SELECT pgqueue.message_create('sp', 'later', pgqueue.now_ms() + 3600000) > 0 AS scheduled;
SELECT count(*) AS leased FROM pgqueue.message_dequeue('sp', 1, 60000);
SELECT pgqueue.spark_claim('sp', 'etl', 1) AS seq;
SELECT (max_id - min_id) AS span FROM pgqueue.spark_snapshot_range('sp');
SELECT status, convert_from(content, 'UTF8') AS content
  FROM pgqueue.spark_snapshot('sp', 0, 1000000) ORDER BY id;
SELECT status, count(*) FROM pgqueue.spark_snapshot('sp', 0, 1000000) GROUP BY 1 ORDER BY 1;

-- A claim is not a lease: its attempts value is no token for the lease calls.
SELECT pgqueue.message_complete(id, attempts) AS completed, pgqueue.message_heartbeat(id, attempts) AS extended,
       pgqueue.message_defer(id, attempts, NULL) AS deferred, pgqueue.message_fail(id, attempts, 'x') AS failed
  FROM pgqueue.message WHERE claim_id IS NOT NULL;

-- Staging and publishing: the winning attempts, once per publish key.
SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000001', 0, 7, 0,
                           ARRAY['p0 lost']::bytea[]) AS staged;
SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000001', 0, 8, 0,
                           ARRAY['p0 won', 'p0 won too']::bytea[], 'text/plain; charset=utf-8') AS staged;
SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000001', 1, 9, 0,
                           ARRAY['p1']::bytea[]) AS staged;
SELECT pgqueue.spark_publish('job-1', 'sp', '00000000-0000-0000-0000-000000000001',
                             '{0,1}', '{8,9}', '{2,1}') AS published;
SELECT pgqueue.spark_publish('job-1', 'sp', '00000000-0000-0000-0000-000000000001',
                             '{0,1}', '{8,9}', '{2,1}') IS NULL AS already_published;
SELECT convert_from(content, 'UTF8') AS content, content_type
  FROM pgqueue.message WHERE convert_from(content, 'UTF8') LIKE 'p%' ORDER BY id;
SELECT count(*) AS staging_left FROM pgqueue.spark_staging;
SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000002', 0, 1, 0, ARRAY['x']::bytea[]) AS staged;
SELECT pgqueue.spark_discard('00000000-0000-0000-0000-000000000002') AS discarded;

-- Errors.
SELECT pgqueue.spark_claim('sp', 'etl', 0);
SELECT pgqueue.spark_claim('sp', NULL, 1);
SELECT pgqueue.spark_claim('sp', 'no space', 1);
SELECT pgqueue.spark_claim('missing', 'etl', 1);
SELECT pgqueue.spark_ack('sp', 'etl', 99);
SELECT pgqueue.spark_ack('sp', 'nobody', 1);
SELECT pgqueue.spark_release('sp', 'nobody');
SELECT pgqueue.spark_publish('job-2', 'sp', '00000000-0000-0000-0000-000000000003', '{0}', '{1}', '{5}');
SELECT pgqueue.spark_publish('job-2', 'sp', '00000000-0000-0000-0000-000000000003', '{0,0}', '{1,2}', '{0,0}');
SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000003', 0, 1, 0, ARRAY['x', NULL]::bytea[]);
SELECT pgqueue.spark_stage('00000000-0000-0000-0000-000000000003', 0, 1, 0, ARRAY['x']::bytea[]),
       pgqueue.spark_stage('00000000-0000-0000-0000-000000000003', 0, 1, 0, ARRAY['x']::bytea[]);
SELECT pgqueue.spark_publish('', 'sp', '00000000-0000-0000-0000-000000000003', '{}', '{}', '{}');
-- a claimed message keeps its endless lease (the spark_* functions set both together; 0.3
-- dropped the CHECK constraint that also guarded hand-made UPDATEs, for its cost on every INSERT)
SELECT count(*) AS claimed_without_endless_lease FROM pgqueue.message
 WHERE claim_id IS NOT NULL AND locked_until IS DISTINCT FROM 253402300799999;
SELECT count(*) > 0 AS some_claimed FROM pgqueue.message WHERE claim_id IS NOT NULL;

-- Dropping a queue drops its consumers and claims.
SELECT pgqueue.queue_drop('sp');
SELECT count(*) AS consumers FROM pgqueue.spark_consumer;
SELECT count(*) AS claims FROM pgqueue.spark_claim;
