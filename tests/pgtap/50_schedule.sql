-- Periodic schedules (issue 16): cron parsing, the slots schedule_run enqueues (each once, the
-- missed-slot policies), list and drop, a dropped queue's schedules, and every error's SQLSTATE.
BEGIN;
SELECT plan(120);

-- _cron_next: the first matching minute strictly after a time (UTC)
CREATE TEMP TABLE cron_case (expr text, after timestamptz, want timestamptz);
INSERT INTO cron_case VALUES
    ('* * * * *',       '2026-01-01 10:00:00+00', '2026-01-01 10:01:00+00'),
    ('* * * * *',       '2026-01-01 10:00:30+00', '2026-01-01 10:01:00+00'),
    ('*/15 * * * *',    '2026-01-01 10:07:00+00', '2026-01-01 10:15:00+00'),
    ('0 3 * * *',       '2026-01-01 03:00:00+00', '2026-01-02 03:00:00+00'),
    ('30 23 31 12 *',   '2026-01-01 00:00:00+00', '2026-12-31 23:30:00+00'),
    ('0 0 29 2 *',      '2026-03-01 00:00:00+00', '2028-02-29 00:00:00+00'),
    ('0 9 * * 1',       '2026-01-01 00:00:00+00', '2026-01-05 09:00:00+00'),    -- 2026-01-01 is a Thursday
    ('0 9 * * 7',       '2026-01-01 00:00:00+00', '2026-01-04 09:00:00+00'),    -- 7 is Sunday too
    ('0 9 1 * 1',       '2026-01-01 10:00:00+00', '2026-01-05 09:00:00+00'),    -- day 1 OR Monday
    ('5,10-12/2 8-9 * * *', '2026-01-01 08:11:00+00', '2026-01-01 08:12:00+00'),
    ('5,10-12/2 8-9 * * *', '2026-01-01 09:12:00+00', '2026-01-02 08:05:00+00'),
    ('0 0 1 */6 *',     '2026-02-01 00:00:00+00', '2026-07-01 00:00:00+00'),
    -- a day field that starts with '*' is not restricted: a day must match both fields, so a
    -- step there is a step (2023-11-14 is a Tuesday)
    ('0 0 * * */2',     '2023-11-14 22:13:00+00', '2023-11-16 00:00:00+00'),    -- Thursday (day 4)
    ('0 0 */10 * *',    '2023-11-14 22:13:00+00', '2023-11-21 00:00:00+00'),    -- days 1, 11, 21, 31
    ('0 0 1 * */7',     '2023-11-14 22:13:00+00', '2024-09-01 00:00:00+00'),    -- a 1st that is a Sunday
    ('0 0 29 2 *',      '2096-03-01 00:00:00+00', '2104-02-29 00:00:00+00'),    -- 2100 is not a leap year
    -- n/step: from n to the field's end (5, 25, 45), not n alone
    ('5/20 * * * *',    '2026-01-01 10:06:00+00', '2026-01-01 10:25:00+00'),
    -- a stepped day of the month with a weekday: both must match (days 1, 11, 21, 31 that are
    -- Mondays), not either (it would also fire on Monday 2023-11-20)
    ('0 0 */10 * 1',    '2023-11-14 22:13:00+00', '2023-12-11 00:00:00+00'),
    (E'\t0 0 * * *\n', '2026-01-01 10:00:00+00', '2026-01-02 00:00:00+00');    -- blanks around the fields
SELECT is(pgqueue.from_epoch(pgqueue._cron_next(expr, pgqueue.to_epoch(after))), want, expr || ' after ' || after)
  FROM cron_case ORDER BY expr, after;
SELECT throws_ok($$SELECT pgqueue._cron_next('* * * *', 0)$$, '22023', NULL, 'four fields');
SELECT throws_ok($$SELECT pgqueue._cron_next('60 * * * *', 0)$$, '22023', NULL, 'minute 60');
SELECT throws_ok($$SELECT pgqueue._cron_next('* * 0 * *', 0)$$, '22023', NULL, 'day 0');
SELECT throws_ok($$SELECT pgqueue._cron_next('* * 31 2 *', 0)$$, '22023', NULL, 'February 31st never comes');
SELECT throws_ok($$SELECT pgqueue._cron_next('*/0 * * * *', 0)$$, '22023', NULL, 'step 0');

-- _cron_slots: the same minutes as a chain of _cron_next calls, from one parse; up to p_upto, at
-- most p_limit
SELECT is(pgqueue._cron_slots(expr, pgqueue.to_epoch(after), 9223372036854775807, 40),
          ARRAY(WITH RECURSIVE chain(n, slot) AS (
                    SELECT 1, pgqueue._cron_next(expr, pgqueue.to_epoch(after))
                    UNION ALL SELECT n + 1, pgqueue._cron_next(expr, slot) FROM chain WHERE n < 40)
                SELECT slot FROM chain ORDER BY n),
          expr || ' after ' || after || ': 40 slots as 40 calls of _cron_next')
  FROM cron_case ORDER BY expr, after;
SELECT is(pgqueue._cron_slots('*/20 * * * *', pgqueue.to_epoch('2026-01-01 10:00+00'), pgqueue.to_epoch('2026-01-01 11:00+00'), 10),
          ARRAY(SELECT pgqueue.to_epoch(t) FROM unnest('{2026-01-01 10:20+00,2026-01-01 10:40+00,2026-01-01 11:00+00}'::timestamptz[]) t),
          'slots after p_after, up to and including p_upto');
SELECT is(pgqueue._cron_slots('*/20 * * * *', pgqueue.to_epoch('2026-01-01 10:00+00'), pgqueue.to_epoch('2026-01-01 11:00+00'), 2),
          ARRAY(SELECT pgqueue.to_epoch(t) FROM unnest('{2026-01-01 10:20+00,2026-01-01 10:40+00}'::timestamptz[]) t),
          'at most p_limit');
SELECT is(pgqueue._cron_slots('0 3 * * *', pgqueue.to_epoch('2026-01-01 10:00+00'), pgqueue.to_epoch('2026-01-02 02:59+00'), 10),
          '{}'::bigint[], 'none in the range: empty');
SELECT is(pgqueue._cron_slots('* * * * *', 0, 9223372036854775807, 0), '{}'::bigint[], 'a limit of 0: empty');
SELECT throws_ok($$SELECT pgqueue._cron_slots('* * 31 2 *', 0, 9223372036854775807, 5)$$, '22023', NULL,
                 '_cron_slots: an expression that matches no day in 50 years raises');
SELECT throws_ok($$SELECT pgqueue._cron_slots('* * *', 0, 60000, 5)$$, '22023', NULL, '_cron_slots: three fields');

-- schedule_run: slots from next_run up to now, each once
SELECT pgqueue.queue_create('s');
SELECT ok(pgqueue.schedule_create('tick', 's', 'tick', p_every_ms => 60000, p_missed => 'all',
                                  p_start_at => pgqueue.now_ms() - 150000) > 0, 'an interval schedule, 2.5 minutes late');
SELECT ok(pgqueue.schedule_create('once', 's', 'late', p_every_ms => 60000,
                                  p_start_at => pgqueue.now_ms() - 150000) > 0, 'the same, missed = latest');
SELECT ok(pgqueue.schedule_create('nightly', 's', '{}', p_cron => '0 3 * * *', p_content_type => 'application/json') > 0,
          'a cron schedule');
CREATE TEMP TABLE ran AS SELECT * FROM pgqueue.schedule_run();
SELECT is((SELECT count(*) FROM ran WHERE schedule = 'tick'), 3::bigint, 'all: the three missed slots');
SELECT is((SELECT array_agg(slot - (SELECT min(slot) FROM ran WHERE schedule = 'tick') ORDER BY slot) FROM ran WHERE schedule = 'tick'),
          ARRAY[0, 60000, 120000]::bigint[], 'all: one message per slot');
SELECT is((SELECT count(*) FROM ran WHERE schedule = 'once'), 1::bigint, 'latest: one message for the missed slots');
-- latest on a cron schedule a year behind: one message, the last slot due, found without walking
-- the 525,600 minutes (one _cron_next call each before)
SELECT ok(pgqueue.schedule_create('minutely', 's', 'm', p_cron => '* * * * *',
                                  p_start_at => pgqueue.now_ms() - 366::bigint * 86400000) > 0, 'a cron schedule a year late');
SELECT is((SELECT array_agg(pgqueue.now_ms() - slot < 60000) FROM pgqueue.schedule_run() WHERE schedule = 'minutely'),
          ARRAY[true], 'latest: one message, for the last minute due');
SELECT is(pgqueue.schedule_drop('minutely'), true, 'drop it');
SELECT is((SELECT count(*) FROM ran WHERE schedule = 'nightly'), 0::bigint, 'a cron schedule not yet due');
SELECT is((SELECT count(*) FROM pgqueue.message m JOIN ran ON ran.message_id = m.id WHERE m.content IN ('tick', 'late')),
          4::bigint, 'the messages are on the queue');
SELECT is((SELECT count(*) FROM pgqueue.schedule_run()), 0::bigint, 'a second run: nothing is due');
SELECT ok((SELECT bool_and(next_run > pgqueue.now_ms()) FROM pgqueue.schedule_list()), 'every next slot is in the future');
SELECT is((SELECT next_run - (SELECT max(slot) FROM ran WHERE schedule = 'tick') FROM pgqueue.schedule_list() WHERE name = 'tick'),
          60000::bigint, 'the next slot follows the last one');
SELECT is((SELECT array_agg(name ORDER BY name) FROM pgqueue.schedule_list()), ARRAY['nightly', 'once', 'tick'], 'list: by name');
SELECT is((SELECT row(queue, cron, content_type, missed)::text FROM pgqueue.schedule_list() WHERE name = 'nightly'),
          row('s', '0 3 * * *', 'application/json', 'latest')::text, 'list: the settings');

-- p_limit shared fairly: a schedule an hour behind with 'all' (3,600 slots, the oldest next_run)
-- takes its share of a call, not the whole of it, and the room the others leave in a further pass
SELECT ok(pgqueue.schedule_create('backlog', 's', 'b', p_every_ms => 1000, p_missed => 'all',
                                  p_start_at => pgqueue.now_ms() - 3600000) > 0, 'a schedule an hour behind');
SELECT ok(pgqueue.schedule_create('punctual', 's', 'p', p_every_ms => 60000,
                                  p_start_at => pgqueue.now_ms() - 150000) > 0, 'a schedule due now');
CREATE TEMP TABLE shared AS SELECT * FROM pgqueue.schedule_run(10);
SELECT is((SELECT array_agg(schedule || ' ' || n ORDER BY schedule)
             FROM (SELECT schedule, count(*) AS n FROM shared GROUP BY schedule) c),
          ARRAY['backlog 9', 'punctual 1'], 'limit 10: the schedule due now fires, the backlog has the rest');
SELECT is((SELECT count(*) FROM pgqueue.schedule_run(10) WHERE schedule = 'backlog'), 10::bigint,
          'the next call: the backlog alone, the whole limit');

-- more schedules behind than p_limit: the oldest do not take every call (each call visits the
-- due schedules in random order; B missing 20 calls in a row: (1/3)^20)
SELECT pgqueue.schedule_drop('backlog'); SELECT pgqueue.schedule_drop('punctual');
SELECT pgqueue.schedule_create('behind_a', 's', 'a', p_every_ms => 1000, p_missed => 'all', p_start_at => pgqueue.now_ms() - 3600000);
SELECT pgqueue.schedule_create('behind_c', 's', 'c', p_every_ms => 1000, p_missed => 'all', p_start_at => pgqueue.now_ms() - 3600000);
SELECT pgqueue.schedule_create('due_b', 's', 'b', p_every_ms => 3600000, p_start_at => pgqueue.now_ms() - 1000);
CREATE TEMP TABLE starve (schedule text);
DO $$ BEGIN FOR i IN 1 .. 20 LOOP INSERT INTO starve SELECT r.schedule FROM pgqueue.schedule_run(2) r; END LOOP; END $$;
SELECT is((SELECT count(*) FROM starve WHERE schedule = 'due_b'), 1::bigint, 'p_limit 2, two schedules an hour behind: the third fires too');
SELECT pgqueue.schedule_drop('behind_a'); SELECT pgqueue.schedule_drop('behind_c'); SELECT pgqueue.schedule_drop('due_b');
-- schedules stuck at a full capped queue are visited once a call, not once a pass (each visit
-- is a subtransaction that fails and takes an xid), and a visit tries the first slot alone (one
-- subtransaction, not one for each size a refused batch is halved to: with 11 slots due, 4).
-- Measured in session 52: 42-43 (the call itself 21, counted from another session: 20 for the
-- stuck schedules and its own; the rest xids the set-up above assigned, which this
-- transaction's snapshot counts too); 4 a visit took 103
SELECT pgqueue.queue_create('full_' || i, p_max_size => 1) FROM generate_series(1, 20) i;
SELECT pgqueue.message_create('full_' || i, 'x') FROM generate_series(1, 20) i;
SELECT pgqueue.schedule_create('stuck_' || i, 'full_' || i, 'x', p_every_ms => 1000, p_missed => 'all',
                               p_start_at => pgqueue.now_ms() - 10000) FROM generate_series(1, 20) i;
SELECT pgqueue.schedule_create('long', 's', 'l', p_every_ms => 1000, p_missed => 'all', p_start_at => pgqueue.now_ms() - 36000000);
CREATE TEMP TABLE xids AS SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS before;
SELECT is((SELECT count(*) FROM pgqueue.schedule_run(1000) r WHERE r.schedule = 'long'), 1000::bigint,
          '20 schedules stuck at full queues: the backlog gets the whole limit');
SELECT cmp_ok(pg_snapshot_xmax(pg_current_snapshot())::text::bigint - (SELECT before FROM xids), '<', 50::bigint,
              'and the call took an xid for each stuck schedule about once (not once a pass)');
SELECT pgqueue.queue_drop('full_' || i) FROM generate_series(1, 20) i;
SELECT pgqueue.schedule_drop('long');

-- the server's clock set back: a schedule whose last run read a clock more than a second later
-- gets the next slot the clock now gives (before, it stayed silent until the clock came back to
-- the next_run that run had set); one that never ran keeps its start, a step under a second and
-- another scheduler's later run change nothing
SELECT pgqueue.schedule_create('skew_every', 's', 'e', p_every_ms => 60000, p_start_at => pgqueue.now_ms() - 1000);
SELECT pgqueue.schedule_create('skew_cron', 's', 'c', p_cron => '*/5 * * * *', p_start_at => pgqueue.now_ms() - 600000);
SELECT pgqueue.schedule_create('skew_near', 's', 'n', p_every_ms => 60000, p_start_at => pgqueue.now_ms() - 1000);
CREATE TEMP TABLE clock_before AS SELECT pgqueue.now_ms() AS t;
SELECT is((SELECT count(*) FROM pgqueue.schedule_run() WHERE schedule LIKE 'skew%'), 3::bigint, 'three schedules due fire');
SELECT ok((SELECT bool_and(last_run BETWEEN (SELECT t FROM clock_before) AND pgqueue.now_ms())
             FROM pgqueue.schedule WHERE name LIKE 'skew%'), 'a run records its clock in last_run');
SELECT pgqueue.schedule_create('skew_new', 's', 'w', p_every_ms => 60000, p_start_at => pgqueue.now_ms() + 86400000);
CREATE TEMP TABLE skew AS SELECT name, next_run, last_run FROM pgqueue.schedule WHERE name LIKE 'skew%';
-- as a run that read the clock a day later leaves them (next slots a day on, on the same grid)
UPDATE pgqueue.schedule SET next_run = next_run + 86400000, last_run = last_run + 86400000
 WHERE name IN ('skew_every', 'skew_cron');
UPDATE pgqueue.schedule SET next_run = next_run + 60000, last_run = pgqueue.now_ms() + 500 WHERE name = 'skew_near';
SELECT is((SELECT count(*) FROM pgqueue.schedule_run() WHERE schedule LIKE 'skew%'), 0::bigint,
          'set back: nothing is due, nothing fires');
SELECT ok((SELECT next_run > pgqueue.now_ms() - 5000 AND next_run <= pgqueue.now_ms() + 60000
                  AND (next_run - (SELECT next_run FROM skew WHERE name = 'skew_every')) % 60000 = 0
             FROM pgqueue.schedule WHERE name = 'skew_every'),
          'an interval: its first slot after now, on its grid');
SELECT ok((SELECT next_run > pgqueue.now_ms() - 5000 AND next_run <= pgqueue.now_ms() + 300000 AND next_run % 300000 = 0
             FROM pgqueue.schedule WHERE name = 'skew_cron'),
          'a cron expression: its first match after now');
SELECT ok((SELECT bool_and(last_run <= pgqueue.now_ms()) FROM pgqueue.schedule WHERE name IN ('skew_every', 'skew_cron')),
          'and last_run is this run''s clock');
SELECT is((SELECT next_run FROM pgqueue.schedule WHERE name = 'skew_new'),
          (SELECT next_run FROM skew WHERE name = 'skew_new'), 'a schedule that never ran keeps its start');
SELECT is((SELECT next_run FROM pgqueue.schedule WHERE name = 'skew_near'),
          (SELECT next_run + 60000 FROM skew WHERE name = 'skew_near'), 'a last run under a second ahead: unchanged');
CREATE TEMP TABLE skew_after AS SELECT name, next_run FROM pgqueue.schedule WHERE name LIKE 'skew%';
SELECT is((SELECT count(*) FROM pgqueue.schedule_run() WHERE schedule LIKE 'skew%'), 0::bigint, 'a second run: nothing fires');
SELECT is((SELECT array_agg(s.next_run = a.next_run) FROM pgqueue.schedule s JOIN skew_after a USING (name)),
          ARRAY[true, true, true, true], 'and nothing moves again');
SELECT pgqueue.schedule_drop(n) FROM unnest('{skew_every,skew_cron,skew_near,skew_new}'::text[]) n;
-- A run of another scheduler that began after this one (its last_run ahead of this run's first
-- clock reading, not of the clock read under the row's lock) is no step back: the next slot it
-- set stays. The clock is faked in a savepoint: this run's first reading T, every later one
-- T + 5 s; the other run read T + 3 s. Were the first reading compared, the next slot, more than
-- two intervals ahead of it, would be taken back to one that the other run enqueued already.
SAVEPOINT fake_clock;
CREATE TEMP SEQUENCE fake_clock_calls;
SELECT set_config('pgqueue_test.t', pgqueue.now_ms()::text, true);
SELECT pgqueue.schedule_create('skew_later', 's', 'l', p_every_ms => 60000,
                               p_start_at => current_setting('pgqueue_test.t')::bigint - 1000);
UPDATE pgqueue.schedule SET last_run = current_setting('pgqueue_test.t')::bigint + 3000,
                            next_run = current_setting('pgqueue_test.t')::bigint + 133000
 WHERE name = 'skew_later';
CREATE OR REPLACE FUNCTION pgqueue.now_ms() RETURNS bigint LANGUAGE sql VOLATILE
AS $fake$ SELECT current_setting('pgqueue_test.t')::bigint
                 + CASE WHEN nextval('pg_temp.fake_clock_calls') = 1 THEN 0 ELSE 5000 END $fake$;
SELECT count(*) AS later_fired FROM pgqueue.schedule_run() WHERE schedule = 'skew_later' \gset
SELECT next_run - current_setting('pgqueue_test.t')::bigint AS later_next FROM pgqueue.schedule WHERE name = 'skew_later' \gset
ROLLBACK TO SAVEPOINT fake_clock;
SELECT is(:later_fired::bigint, 0::bigint, 'another scheduler''s later run: nothing fires');
SELECT is(:later_next::bigint, 133000::bigint, 'and the next slot it set stays (no step back)');

-- drop; a dropped queue takes its schedules along
SELECT is(pgqueue.schedule_drop('once'), true, 'drop');
SELECT is(pgqueue.schedule_drop('once'), false, 'drop again: false');
SELECT pgqueue.queue_drop('s');
SELECT is((SELECT count(*) FROM pgqueue.schedule), 0::bigint, 'queue_drop drops its schedules');

-- 'latest' long behind: the last slot due, found by bisection (a review: every minute of January,
-- missed since January 2, was walked slot by slot, 44,640 calls of _cron_next and 16 s a run)
SET LOCAL track_functions = 'pl';
SELECT pgqueue.queue_create('late');
CREATE TEMP TABLE late_case (expr text, next_run timestamptz, now_at timestamptz, want timestamptz, want_next timestamptz);
INSERT INTO late_case VALUES
    ('* * * 1 *',   '2026-01-02 00:00+00', '2026-12-01 00:00+00', '2026-01-31 23:59+00', '2027-01-01 00:00+00'),
    ('30 4 * * 1',  '2026-01-05 04:30+00', '2026-03-15 00:00+00', '2026-03-09 04:30+00', '2026-03-16 04:30+00'),
    ('0 * * * *',   '2026-01-01 00:00+00', '2026-01-01 05:00+00', '2026-01-01 05:00+00', '2026-01-01 06:00+00'),
    ('0 0 1 * *',   '2026-02-01 00:00+00', '2026-02-10 00:00+00', '2026-02-01 00:00+00', '2026-03-01 00:00+00'),
    ('0 0 29 2 *',  '2028-02-29 00:00+00', '2071-06-01 00:00+00', '2068-02-29 00:00+00', '2072-02-29 00:00+00');
CREATE TEMP TABLE late_fired AS
SELECT c.*, f.o_slots, f.o_next
  FROM late_case c,
       LATERAL pgqueue._schedule_fire('late', 'x', NULL, NULL, c.expr, 'latest', pgqueue.to_epoch(c.next_run),
                                      pgqueue.to_epoch(c.now_at), 1000, false) f;
SELECT is(o_slots, ARRAY[pgqueue.to_epoch(want)], 'latest, ' || expr || ' behind since ' || next_run || ': its last slot due')
  FROM late_fired ORDER BY expr;
SELECT is(o_next, pgqueue.to_epoch(want_next), 'latest, ' || expr || ': the slot after it next')
  FROM late_fired ORDER BY expr;
SELECT cmp_ok(pg_stat_get_xact_function_calls('pgqueue._cron_next(text, bigint)'::regprocedure), '<', 500::bigint,
              'latest: a bisection, not a walk over the missed slots');
-- 'all' long behind: the slots from one parse of the expression (a review: a call of _cron_next
-- a slot, 10,000 slots of '* * * * *' in 5.3 s)
CREATE TEMP TABLE calls_before AS
SELECT pg_stat_get_xact_function_calls('pgqueue._cron_next(text, bigint)'::regprocedure) AS n;
CREATE TEMP TABLE all_fired AS
SELECT * FROM pgqueue._schedule_fire('late', 'x', NULL, NULL, '* * * * *', 'all', pgqueue.to_epoch('2026-01-01 00:00+00'),
                                     pgqueue.to_epoch('2026-01-02 00:00+00'), 1000, false);
SELECT is(cardinality(o_slots), 1000, 'all, a day of minutes behind: 1000 slots (the limit)') FROM all_fired;
SELECT is(o_slots, ARRAY(SELECT pgqueue.to_epoch('2026-01-01 00:00+00') + i * 60000 FROM generate_series(0, 999) i),
          'all: each minute in order, from the first one missed') FROM all_fired;
SELECT is(o_next, pgqueue.to_epoch('2026-01-01 00:00+00') + 1000 * 60000, 'all: the slot after the last one next')
  FROM all_fired;
SELECT cmp_ok(pg_stat_get_xact_function_calls('pgqueue._cron_next(text, bigint)'::regprocedure) - (SELECT n FROM calls_before),
              '<=', 2::bigint, 'all: not a call of _cron_next a slot');

-- errors
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'nope', 'c', 1000)$$, 'PQ001', NULL, 'unknown queue');
SELECT throws_ok($$SELECT pgqueue.schedule_create(NULL, 'default', 'c', 1000)$$, '22004', NULL, 'NULL name');
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'default', NULL, 1000)$$, '22004', NULL, 'NULL content');
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'default', 'c')$$, '22023', 'give one of p_every_ms and p_cron', 'neither');
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'default', 'c', 1000, '* * * * *')$$, '22023', NULL, 'both');
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'default', 'c', 999)$$, '22023', NULL, 'under a second');
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'default', 'c', p_cron => 'every minute')$$, '22023', NULL, 'bad cron');
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'default', 'c', 1000, p_missed => 'some')$$, '22023', NULL, 'bad policy');
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'default', 'c', 1000, p_missed => repeat('a', 100000))$$, '22023',
                 'p_missed must be ''latest'' or ''all'', got ''' || repeat('a', 20) || ''' (100000 characters)',
                 'a long bad policy: its start and length');
-- 512 characters are taken (a list of every minute, padded), 513 are not, before any parse
SELECT lives_ok($$SELECT pgqueue.schedule_create('cron512', 'default', 'c',
                                                 p_cron => rpad(array_to_string(ARRAY(SELECT g FROM generate_series(0, 59) g), ',') || ' * * * *', 512, ' '))$$,
                'a cron expression of 512 characters');
SELECT throws_ok($$SELECT pgqueue.schedule_create('x', 'default', 'c', p_cron => repeat('1,', 40000) || '1 * * * *')$$, '22023',
                 'a cron expression has at most 512 characters, got 80009', 'a cron expression of 80,009 characters');
SELECT pgqueue.schedule_create('dup', 'default', 'c', 1000);
SELECT throws_ok($$SELECT pgqueue.schedule_create('dup', 'default', 'c', 1000)$$, '42710', 'schedule "dup" already exists', 'duplicate');
SELECT throws_ok($$SELECT pgqueue.schedule_run(0)$$, '22023', NULL, 'run: limit 0');

-- 'latest' on an interval schedule that missed three slots fires once, at the last slot due (on
-- the schedule's grid, not at the time of the run), and its next slot is one interval on: an
-- hourly job due at :00 stays at :00 after an outage (no test pinned it: a mutation-testing
-- review)
SELECT pgqueue.queue_create('sl');
SELECT pgqueue.schedule_create('late', 'sl', 'x', p_every_ms => 60000,
                               p_start_at => (pgqueue.now_ms() / 60000 - 3) * 60000) > 0 AS created;
CREATE TEMP TABLE late_run AS SELECT * FROM pgqueue.schedule_run() WHERE schedule = 'late';
SELECT is((SELECT count(*) FROM late_run), 1::bigint, 'latest after three missed slots: one message');
SELECT is((SELECT min(slot) % 60000 FROM late_run), 0::bigint, 'latest: its slot is on the schedule''s grid');
SELECT ok((SELECT pgqueue.now_ms() - min(slot) < 60000 FROM late_run), 'latest: the last slot due');
SELECT is((SELECT s.next_run - r.slot FROM pgqueue.schedule_list() s, late_run r WHERE s.name = 'late'),
          60000::bigint, 'latest: the next slot one interval on');
-- a cron schedule's first slot is at or after p_start_at: a start that matches is the first slot
SELECT pgqueue.schedule_create('hourly_from', 'sl', 'x', p_cron => '0 * * * *',
                               p_start_at => pgqueue.to_epoch('2030-01-01 10:00+00')) > 0 AS created;
SELECT is((SELECT pgqueue.from_epoch(next_run) FROM pgqueue.schedule_list() WHERE name = 'hourly_from'),
          '2030-01-01 10:00+00'::timestamptz, 'cron: a p_start_at that matches is the first slot');

SELECT * FROM finish();
ROLLBACK;
