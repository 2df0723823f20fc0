-- Bare designs of a grouped delete-mode dequeue (issue 14), no pgqueue code: what the hand-off
-- costs by itself. Schema gh, one table of messages for all three queues (as in pgqueue):
--   queue 1, "group table": a row per group in gh.grp with the group's turn; a dequeue locks the
--     first group whose turn is due (SKIP LOCKED), deletes that group's first message and moves
--     the group's turn to the back (an UPDATE of a narrow row);
--   queue 2, "flat": no groups, DELETE of the first ready message (SKIP LOCKED);
--   queue 3, "message turn" (pgqueue 0.4's design): the message whose group has the turn carries
--     turn_at; a dequeue deletes the first such message (SKIP LOCKED) and gives the turn to the
--     group's next message (an UPDATE of a message row, in the same statement).
-- 300,000 messages a queue, 10,000 groups (queues 1 and 3), the same 85-byte payload as bench/.
DROP SCHEMA IF EXISTS gh CASCADE;
CREATE SCHEMA gh;
CREATE TABLE gh.message (
    id           bigserial PRIMARY KEY,
    queue_id     integer NOT NULL,
    group_key    text,
    dequeue_at   bigint  NOT NULL,
    content      bytea   NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    locked_until bigint,
    turn_at      bigint);
CREATE INDEX message_ready_idx ON gh.message (queue_id, dequeue_at, id) WHERE locked_until IS NULL;
-- a group's messages that wait (all of queue 1's; queue 3's without the turn), in delivery order
CREATE INDEX message_wait_idx ON gh.message (queue_id, group_key, dequeue_at, id)
    WHERE group_key IS NOT NULL AND turn_at IS NULL;
CREATE INDEX message_turn_idx ON gh.message (queue_id, turn_at, id) WHERE turn_at IS NOT NULL;
CREATE TABLE gh.grp (
    queue_id  integer,
    group_key text,
    turn_at   bigint NOT NULL,
    PRIMARY KEY (queue_id, group_key));
CREATE INDEX grp_turn_idx ON gh.grp (queue_id, turn_at);
INSERT INTO gh.message (queue_id, group_key, dequeue_at, content)
SELECT q, CASE WHEN q <> 2 THEN 'g' || (g % 10000) END, g,
       convert_to('{"type": "performance test", "topic": "fifo queue read and write, no domain logic involved"}', 'UTF8')
  FROM generate_series(1, 3) q, generate_series(1, 300000) g;
INSERT INTO gh.grp SELECT 1, 'g' || k, k FROM generate_series(0, 9999) k;
UPDATE gh.message SET turn_at = dequeue_at WHERE queue_id = 3 AND dequeue_at <= 10000;
VACUUM ANALYZE gh.message;
VACUUM ANALYZE gh.grp;
