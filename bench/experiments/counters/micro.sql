-- The counters' own cost inside the server, one session (issue 15): the minimum over 7 repeats
-- of loops of each piece, in microseconds a call. Run against a database with pgqueue and a
-- queue named bench, e.g. the one bench/experiments/counters/run.sh leaves behind:
--   psql -X -d counters_with -f bench/experiments/counters/micro.sql
-- (it enqueues 70,000 messages on bench and leaves them there).
\set QUIET on
DO $$
DECLARE
    t0 timestamptz;
    q  integer := (SELECT id FROM pgqueue.queue WHERE name = 'bench');
    ok boolean;
    n  bigint;
    x  float8;
    m  float8[] := array_fill(1e9::float8, ARRAY[6]);
BEGIN
    FOR r IN 1..7 LOOP
        t0 := clock_timestamp();
        FOR i IN 1..5000 LOOP n := nextval('pgqueue.counter_failed_0'); END LOOP;
        m[1] := least(m[1], extract(epoch FROM clock_timestamp() - t0) * 1e6 / 5000);
        t0 := clock_timestamp();
        FOR i IN 1..5000 LOOP ok := pgqueue._counted(q, 3); END LOOP;
        m[2] := least(m[2], extract(epoch FROM clock_timestamp() - t0) * 1e6 / 5000);
        t0 := clock_timestamp();
        FOR i IN 1..100 LOOP ok := pgqueue._counted_n(q, 0, 100); END LOOP;
        m[3] := least(m[3], extract(epoch FROM clock_timestamp() - t0) * 1e6 / 100);
        t0 := clock_timestamp();
        FOR i IN 1..100 LOOP ok := pgqueue._counted_n(q, 0, 1000); END LOOP;
        m[4] := least(m[4], extract(epoch FROM clock_timestamp() - t0) * 1e6 / 100);
        t0 := clock_timestamp();
        FOR i IN 1..10 LOOP PERFORM nextval('pgqueue.counter_failed_0') FROM generate_series(1, 1000); END LOOP;
        m[5] := least(m[5], extract(epoch FROM clock_timestamp() - t0) * 1e6 / 10);
        t0 := clock_timestamp();
        FOR i IN 1..10 LOOP
            PERFORM count(*) FROM pgqueue.message_create_batch('bench', array_fill('{"type": "performance test"}'::bytea, ARRAY[1000]));
        END LOOP;
        m[6] := least(m[6], extract(epoch FROM clock_timestamp() - t0) * 1e6 / 10);
    END LOOP;
    RAISE NOTICE 'us a call (min of 7): nextval %, _counted (one message) %, _counted_n(100) %, _counted_n(1000) %, 1000 nextval one by one %, message_create_batch(1000) %',
        round(m[1]::numeric, 2), round(m[2]::numeric, 2), round(m[3]::numeric, 1), round(m[4]::numeric, 1),
        round(m[5]::numeric, 1), round(m[6]::numeric, 1);
END;
$$;
SELECT setval('pgqueue.counter_failed_0', 1, false);
