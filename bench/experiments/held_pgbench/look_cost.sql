-- The cost of the look at pg_locks that pgqueue._message_take runs at most once a second per
-- session while it has transactions set aside (pgqueue._idle_xids on a list of 2 xids: this
-- transaction's, idle as far as pgqueue goes, and a made-up one), run N times in one DO block;
-- prints microseconds a look and the xids found idle (this transaction's).
-- usage: psql "CONNINFO" -v n=2000 -f look_cost.sql   (with the load of interest running beside it)
SELECT set_config('look_cost.n', :'n', false);
DO $$
DECLARE
    v_n integer := current_setting('look_cost.n')::integer;
    v_long bigint[] := ARRAY[txid_current(), 12345];
    v_idle bigint[];
    t0 timestamptz := clock_timestamp();
BEGIN
    FOR i IN 1 .. v_n LOOP
        v_idle := pgqueue._idle_xids(v_long);
    END LOOP;
    RAISE NOTICE 'look: % us each (% looks), idle: %',
        round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / v_n, 1), v_n, v_idle;
END $$;
