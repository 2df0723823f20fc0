-- Enqueue the due slots of every schedule (next_run <= now); returns one row per message
-- created: the schedule, the message id and the slot (epoch ms) it stands for.
--
-- Exactly once per slot, however many schedulers call it at once: each due schedule row is
-- locked (SKIP LOCKED: a scheduler never waits for another), after its queue's lock stripe, and
-- its messages and its advanced next_run commit together; a scheduler that finds the row after
-- that commit re-reads it and finds it no longer due. Missed slots (no scheduler ran for a
-- while) follow the schedule's policy: 'latest' enqueues one message for all of them, 'all' one
-- per slot. The next slot is then the first after now. At most p_limit messages a call, shared
-- fairly: the due schedules are visited in random order (so that when more are due than
-- p_limit, each gets its turn over the calls rather than the oldest ones every time), each
-- given an equal share of the room left (ceil(room / schedules left to visit)), so a schedule
-- catching up on a long 'all' backlog takes no more than its share while the others fire on
-- time; the room the others leave goes, in further passes, to the schedules that stopped at
-- their share with slots still due (only those are visited again), and what is left beyond
-- p_limit waits for the next call. A schedule whose queue is capped and full (PQ003) stops at
-- the slot the cap refused, which stays due for a later call to enqueue once there is room;
-- the other schedules are not held up (pgqueue._schedule_fire), it is not visited again in
-- the same call, and a NOTICE with SQLSTATE PQ003 names it (the `pgqueue scheduler` logs it).
-- So does a capped queue whose admission another open transaction holds (a producer's, or
-- another scheduler's run, which holds it to its end): the first of its schedules waits 100 ms
-- at most, and its other schedules wait for a later call without waiting again (each waited
-- 100 ms: twenty schedules on one queue held a run 2 s, past a statement_timeout that then
-- cancelled every schedule's messages; a review), each with its NOTICE.
-- Likewise a queue being dropped or altered (its lock stripe held): its schedules wait for a
-- later call, the others fire, each with its NOTICE; the run waits 100 ms at most once for each
-- lock stripe, which the queues with ids 64 apart share (each queue waited: seven due queues
-- on a stripe held a run 0.7 s, tests/test_schedules.py, long enough for a statement_timeout; a
-- review).
--
-- A server clock set back would leave a schedule silent until the clock came back to the
-- next_run that a run reading the later clock had set (for as long as the step back). So a
-- schedule whose last_run (the clock when the run that last set its next_run began) is more
-- than a second ahead of this run's clock, read again once the row is locked (a run of another
-- scheduler that began after this one may have set it: that is no step back), gets the next slot
-- that the clock now gives: an interval's first slot after now on its grid (next_run less whole
-- intervals), a cron expression's first match after now, when earlier than next_run. A WARNING
-- names it (the server's log keeps it). The slots between now and the old next_run are enqueued
-- again as the clock reaches them; a schedule that has not run yet keeps its p_start_at.
--
-- SECURITY DEFINER, EXECUTE granted by docs/grants.sql (producers, administrators), not PUBLIC:
-- a scheduler locks and advances the schedules' rows, which needs UPDATE on next_run, and with
-- that right plain SQL could set any schedule's next_run to any time (stop every schedule) or
-- hold their rows locked; here a caller can only enqueue the slots that are due, as the
-- schedules say. The messages are created as the extension's owner (the schedules are the
-- administrators', queues and contents included).
CREATE FUNCTION pgqueue.schedule_run(p_limit integer DEFAULT 1000)
RETURNS TABLE (schedule text, message_id bigint, slot bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now   bigint := pgqueue.now_ms();
    v_c     record;
    v_s     record;
    v_locked boolean;
    v_fired record;
    v_made  integer := 0;
    v_i     integer;   -- schedules visited in this pass
    v_share integer;
    v_again integer[];  -- NULL: the first pass, every due schedule; then those to visit again
    v_more  integer[];  -- the schedules that stopped at their share with slots still due
    v_busy  integer[] := '{}';  -- the lock stripes (queue id & 63) that a drop or an alter holds
    v_held  integer[] := '{}';  -- the capped queues whose admission an open transaction holds
    v_lt    text;       -- the caller's lock_timeout, while a queue's stripe waits 100 ms at most
    v_next  bigint;     -- a schedule's next slot after the clock was set back
BEGIN
    IF p_limit IS NULL THEN
        PERFORM pgqueue._not_null(true, 'p_limit'::text);
    END IF;
    IF p_limit < 1 OR p_limit > 100000 THEN
        RAISE EXCEPTION 'p_limit must be between 1 and 100000, got %', p_limit USING ERRCODE = '22023';
    END IF;
    LOOP  -- passes: a further one only for the schedules that stopped at their share
        v_more := '{}';
        v_i := 0;
        FOR v_c IN
            SELECT s.id, s.queue_id, s.name, q.name AS queue, count(*) OVER () AS n
              FROM pgqueue.schedule s JOIN pgqueue.queue q ON q.id = s.queue_id
             WHERE (s.next_run <= v_now OR s.last_run > v_now + 1000)
               AND (v_again IS NULL OR s.id = ANY (v_again))
             ORDER BY CASE WHEN v_again IS NULL THEN random() END, s.next_run, s.id
        LOOP
            -- an equal share of the room left among the schedules left to visit (at least 1)
            v_share := ceil((p_limit - v_made)::numeric / (v_c.n - v_i));
            v_i := v_i + 1;
            -- the queue's lock stripe before the schedule's row, as every writer takes them
            -- (docs/locking.md, rule 1): a queue_drop holding the stripe, whose cascade deletes
            -- the row, never waits for this transaction while it waits for the drop
            -- (specs/schedule_drop.spec)
            -- A queue_drop or a max_size / group_concurrency change (pgqueue._queue_quiesce)
            -- waiting for the queue's work in flight queues this lock behind it: wait 100 ms at
            -- most, then leave the schedule due for a later run (and its queue's other schedules
            -- for this run, and the schedules of every queue on that stripe) so that the other
            -- schedules fire (the subtransaction takes no xid)
            IF v_c.queue_id = ANY (v_held) THEN  -- (its slots stay due: not visited again)
                RAISE NOTICE 'schedule "%" is held: an open transaction holds the admission of its queue "%" (a producer''s, or another scheduler''s run)',
                    v_c.name, v_c.queue
                    USING ERRCODE = 'PQ003',
                          DETAIL = 'Its slots stay due and are enqueued by a later run once the transaction ends.';
                CONTINUE;
            END IF;
            IF (v_c.queue_id & 63) <> ALL (v_busy) THEN
                v_lt := current_setting('lock_timeout');
                IF v_lt = '0' OR v_lt::interval > interval '100 ms' THEN  -- (a caller's shorter one stays)
                    PERFORM set_config('lock_timeout', '100ms', true);
                END IF;
                BEGIN
                    v_locked := pgqueue._queue_lock(v_c.queue_id);
                EXCEPTION WHEN lock_not_available THEN
                    v_busy := v_busy || (v_c.queue_id & 63);
                END;
                PERFORM set_config('lock_timeout', v_lt, true);
            END IF;
            IF (v_c.queue_id & 63) = ANY (v_busy) THEN  -- (its slots stay due: not visited again)
                RAISE NOTICE 'schedule "%" is held: a queue_drop or queue_alter holds the lock stripe of its queue "%"',
                    v_c.name, v_c.queue
                    USING ERRCODE = 'PQ003',
                          DETAIL = 'A drop, or a change of max_size or group_concurrency, of that queue or of another on its stripe waits for their work in flight. Its slots stay due and are enqueued by a later run once it has ended.';
                CONTINUE;
            END IF;
            SELECT s.id, s.name, q.name AS queue, q.max_size, s.every_ms, s.cron, s.content, s.content_type,
                   s.missed, s.next_run, s.last_run
              INTO v_s
              FROM pgqueue.schedule s JOIN pgqueue.queue q ON q.id = s.queue_id
             WHERE s.id = v_c.id AND (s.next_run <= v_now OR s.last_run > v_now + 1000)
               FOR UPDATE OF s SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;  -- another scheduler has it, it is no longer due, or it was dropped
            IF v_s.next_run > v_now THEN
                -- not due, but its last run read a clock more than a second later than this
                -- run's: set back, unless that run began after this one (the clock read now)
                IF v_s.last_run > pgqueue.now_ms() + 1000 THEN
                    v_next := CASE WHEN v_s.cron IS NULL
                                   THEN v_s.next_run - (v_s.next_run - v_now - 1) / v_s.every_ms * v_s.every_ms
                                   ELSE least(v_s.next_run, pgqueue._cron_next(v_s.cron, v_now)) END;
                    UPDATE pgqueue.schedule s SET next_run = v_next, last_run = v_now WHERE s.id = v_s.id;
                    IF v_next < v_s.next_run THEN  -- (a next slot that does not move needs no word)
                        RAISE WARNING 'schedule "%": the server''s clock was set back (its last run read % ms later than now); its next slot moves from % to %',
                            v_s.name, v_s.last_run - v_now, v_s.next_run, v_next
                            USING DETAIL = 'Slots are epoch ms. The slots between now and the old next slot are enqueued again as the clock reaches them.';
                    END IF;
                END IF;
                CONTINUE;
            END IF;
            v_fired := pgqueue._schedule_fire(v_s.queue, v_s.content, v_s.content_type, v_s.every_ms, v_s.cron,
                                              v_s.missed, v_s.next_run, v_now, v_share,
                                              v_s.max_size IS NOT NULL);
            RETURN QUERY SELECT v_s.name, f.id, f.slot FROM unnest(v_fired.o_ids, v_fired.o_slots) AS f(id, slot);
            v_made := v_made + cardinality(v_fired.o_ids);
            UPDATE pgqueue.schedule s SET next_run = v_fired.o_next, last_run = v_now WHERE s.id = v_s.id;
            IF v_fired.o_held THEN
                -- held by a lock on its queue's admission: this queue's other schedules wait too
                v_held := v_held || v_c.queue_id;
                RAISE NOTICE 'schedule "%" is held: an open transaction holds the admission of its queue "%" (a producer''s, or another scheduler''s run)',
                    v_s.name, v_s.queue
                    USING ERRCODE = 'PQ003',
                          DETAIL = format('Its slot %s (epoch ms) stays due and is enqueued by a later run once the transaction ends.',
                                          v_fired.o_next);
            ELSIF v_fired.o_next <= v_now AND cardinality(v_fired.o_ids) < v_share THEN
                -- held by its capped queue, not by p_limit: say so (a NOTICE, for the caller only)
                RAISE NOTICE 'schedule "%" is held: its queue "%" is full (max_size %)',
                    v_s.name, v_s.queue, v_s.max_size
                    USING ERRCODE = 'PQ003',
                          DETAIL = format('Its slot %s (epoch ms) stays due and is enqueued by a later run once the queue has room.',
                                          v_fired.o_next);
            END IF;
            IF cardinality(v_fired.o_ids) = v_share AND v_fired.o_next <= v_now THEN
                v_more := v_more || v_s.id;
            END IF;
            EXIT WHEN v_made >= p_limit;
        END LOOP;
        EXIT WHEN cardinality(v_more) = 0 OR v_made >= p_limit;
        v_again := v_more;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION pgqueue.schedule_run(integer) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue.schedule_run(integer) IS
    'Enqueue the due slots of every schedule, each slot once however many schedulers run (row locks, SKIP LOCKED); returns schedule, message id and slot of each message created';
