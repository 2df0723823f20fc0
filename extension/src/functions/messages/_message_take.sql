-- Lock up to p_limit deliverable messages of a queue and return their ids in delivery order: the
-- one dequeue probe, shared by message_dequeue, spark_claim and (p_turns) the grouped dequeue.
--
-- Expired leases first (overdue work), then ready messages by (dequeue_at, id): two bounded
-- index probes (message_leased_idx, message_ready_idx) under one LIMIT, so the second runs only
-- for the room the first leaves, both FOR UPDATE SKIP LOCKED (never waiting on another
-- consumer). A take of one message runs the expired-lease probe unless its session ran it on
-- the queue within the last 20 ms and found nothing, and always when no ready message is left;
-- otherwise the ready probe alone (see the loop below). A lease that ran out p_max_attempts
-- times is locked too but goes to the dead letters (a poison message must not loop forever);
-- the probe is then repeated for the room it leaves, leaving out the rows this call has locked
-- already (SKIP LOCKED does not skip a transaction's own locks), and the ids of p_skip (the
-- caller's earlier rounds in this transaction: a lease it gave may have run out already). Each
-- round dead-letters at least one row, so it ends. p_max_id (if not NULL) leaves out messages with a larger id. The caller
-- holds the queue's lock stripe.
-- p_turns (a queue with message groups, from message_dequeue): the ready probe is
-- message_turn_idx by (turn_at, id) instead, the messages whose group's turn it is; turn keys are
-- in microseconds (pgqueue._turn_key), so that probe's bound (the clock), cap and margin are in
-- microseconds too. The take and the candidate probe are one statement for each kind of ready
-- key: a branch under a one-time filter is never run but is still set up at every execution
-- (5 us a call, measured); and the take of one message has a statement of its own, without the
-- aggregate that orders several ids (6-8 us a call, measured).
--
-- The session hints: where this session's probes start, a key below which no message can be
-- delivered, so that the btree descends straight past the entries of finished messages that
-- vacuum has not removed yet, because it has not come round or because a snapshot holds it back
-- (docs/performance.md, "Held snapshots"): H, a (dequeue_at, id) for the ready probe (a
-- (turn_at, id) with p_turns), and L, a (locked_until, id) for the expired-lease probe. Kept per
-- session and queue in the setting pgqueue.hint_<queue id> (pgqueue.turn_hint_<queue id> with
-- p_turns: the keys are in other units) as the text of a bigint[], a space and its hashtext: no
-- row, so no dead tuples and no contention; transactional, so a rolled-back dequeue gets its old
-- hints back; written only when it changed.
--   * H and L only move to candidates C and D (the first visible ready row, the first visible
--     lease, locked or not, each capped 5 ms (a turn 6 ms) below the clock read before they were found; the
--     cap alone when there is none) once every transaction with an xid below X has ended, and
--     only if the first visible row from H (from L) is still at C (at D) or beyond then: a
--     producer that commits a row below C meanwhile is found first. X is this call's xid, which
--     the take assigns after the candidates were found. A call that takes nothing keeps no
--     candidate (an empty poll of a queue with nothing ready stays read-only), unless its
--     candidate probe found a ready row (one more than 5 ms old) that the take then did not get
--     (locked or taken by another consumer meanwhile, or left out by p_max_id or p_skip): it
--     assigns an xid itself, after the probes, and keeps it. A session whose takes keep losing
--     that race would otherwise never move its hints, and one that starts during a held
--     snapshot walks from the bottom of the index on every call (a grouped queue of 100 groups:
--     45-78 ms a call, in which the others take every ready turn its snapshot saw,
--     docs/performance.md). The caller's transaction keeps that xid to its end: one that goes
--     on after an empty dequeue, or stays idle, holds back vacuum as any writer does, and is
--     set aside by the other sessions' hints after 200 ms (pgqueue's client and worker poll in
--     transactions of their own). Keys written with the clock (a default
--     dequeue_at, a lease's locked_until, a turn handed on) are read after the writer's xid is
--     assigned (pgqueue._write_clock; a turn is handed on after the hand-off's DELETE or UPDATE),
--     so a writer with an xid above X writes keys above the candidates. Nor before the
--     candidates are 20 ms old (by p_now): waiting is always safe, and the candidate probe (one
--     statement, 5% of an ungrouped delete-mode call's server time, 13% of a grouped one's) runs
--     at most 50 times a second in a session. Each of 15 busy sessions calls about every 3 ms,
--     so a 3-ms wait still ran it on nearly every call: 20 ms gave 1.07-1.30x the delete-mode
--     rate at 15 clients, and the same under a held snapshot (docs/performance.md).
--   * Messages placed below the clock (a priority or past dequeue_at, defer or fail to an earlier
--     time, spark_release, requeue, plain SQL, a lease running out in the past, a turn key below
--     the clock) advance the queue's lock stripe afterwards (trigger message_placed_low); a
--     session that sees it move probes from the bottom, at that call and at every call after
--     it until its hints (F too) start again from the bottom, once the transactions with xids below
--     that call's xid have ended (or been set aside).
--   * A transaction that holds up a candidate for more than 200 ms (an idle session with an xid,
--     a long writer) is set aside, with R, where H and L stood then; when it ends the session
--     starts again from its R at its next call that decides (one with ripe candidates or none,
--     within 20 ms, below), so its rows, visible from then on, are found (not when it rolled
--     back, e.g. ended by idle_in_transaction_session_timeout: its rows never become visible, and
--     under a held snapshot each session's walk back from R over message_leased_idx visits the
--     heap for every lease completed since, docs/performance.md; nor beyond the last second
--     when it holds no lock on pgqueue's tables: the look, below, raises its R). Its keys written
--     with the clock are at or above R: H (L) last moved to a candidate once every xid below
--     that candidate's X had ended, and this one had not, so its xid came after X and its clock
--     readings after the candidate was found (placed-low writes signal the stripe, and a
--     restart from the bottom for that signal does not wait for the transactions set aside, so
--     it sets the R of each one with an xid below the restart's to the bottom: that one may
--     have placed the row, which becomes visible when it ends). Each keeps
--     its own R, so that a short one set aside while an idle session is (case b) costs a walk
--     from where the hints stood when the short one was set aside, not from the idle one's. It
--     used to start again from the bottom: under a held snapshot each such end sent every session
--     over all the dead entries of the hold, and a dequeue that ran 200 ms on two busy cores was
--     enough to set it off (issue 12's 1-s stalls).
--   * F, the fast start: the ready key of the message this session took last. The statement of
--     the ready probe alone (a take of one message while the session's last look for expired
--     leases is less than 20 ms old, below) starts at F instead of H when F is above H, the
--     stripe has not moved and this call ran no candidate probe; if it finds nothing, the
--     statement with both probes runs from H at once. Every other statement starts at H. H
--     trails the head of the queue by the 20-40 ms of deliveries the candidates wait, and under
--     a held snapshot each probe from H visits the heap for every entry of those deliveries
--     (about 100 heap buffers a call at 7,000 deliveries a second, docs/performance.md); F
--     trails it by the deliveries of the other sessions since this one's last call. The price:
--     a message that becomes deliverable below F (a late commit, another transaction's
--     rollback) may wait for this session until its next look, at most 20 ms, as an expired
--     lease may. A session's own rolled-back take restores its F with the rest of the state,
--     at or below the messages that take gave, so it finds those at once. F goes back with H:
--     to the bottom at a restart, to H when a transaction set aside has ended.
-- Layout: [1] backend pid, [2:3] H, [4:5] C, [6] when C and D were found (epoch ms, 0: none),
-- [7] the xid to wait for, [8] stripe value seen, [9] the xid to wait for before a restart from
-- the bottom (0: none), [10:11] L, [12:13] D, [14:15] F, [16] n, the number set aside,
-- [17:16+n] their xids, then n times R: the H and L of when it was set aside (4 values).
CREATE FUNCTION pgqueue._message_take(
    p_queue_id     integer,
    p_limit        integer,
    p_now          bigint,
    p_max_attempts integer,
    p_max_id       bigint,
    p_turns        boolean DEFAULT false,
    p_skip         bigint[] DEFAULT '{}')
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
-- No SET clauses of its own: its two callers, message_dequeue and spark_claim, run it with
-- theirs (each SET clause is a GUC save and restore at every call: these four cost 4.2 us of
-- about 148 a delete-mode dequeue, docs/performance.md), and tests/pgtap/10_schema.sql checks
-- that every function calling it sets all four:
--   * search_path = pg_catalog, pg_temp (so every name below resolves as if pinned here);
--   * plan_cache_mode = force_generic_plan: custom plans would be re-planned on every call (a
--     LIMIT parameter makes the generic plan look dear to the plan cache); the generic plans
--     are the same index probes and save half the call;
--   * enable_seqscan = off, enable_bitmapscan = off: every probe here is an ordered walk of one
--     index that stops at its first rows, whatever the statistics say. Under a held snapshot a
--     VACUUM counts the dead entries it may not remove into the indexes' reltuples (every lease
--     completed since the hold began, in message_leased_idx), while the table's statistics say
--     almost nothing is leased; the generic plan of the candidate statement then found the
--     first lease by a Bitmap Heap Scan or a Seq Scan and a Sort of the whole table, 47-65 ms a
--     call, until statistics changed again: lease mode fell to 0.11x under issue 12's 2-minute
--     holds (tests/test_index_probes.py).
AS $$
DECLARE
    -- (Every expression below, a DECLARE default too, is prepared anew in each transaction: the
    -- common path runs as few as it can. The booleans start NULL, which IF takes as false.)
    c_min      CONSTANT bigint := -9223372036854775808;
    v_need     integer := p_limit;
    v_ids      bigint[];
    v_not      bigint[] := coalesce(p_skip, '{}');  -- p_skip and what this call locked
    v_acks     bigint[];  -- message_complete_and_dequeue's acknowledgements (pgqueue.ack_call) ...
    v_ack_keys numeric[]; -- ... and their (id, attempts token) pairs as id * 2^32 + token
    v_araw     text;
    v_found    bigint[];
    v_dead_ids bigint[];
    v_dead     bigint;
    v_name     text := CASE WHEN p_turns THEN 'pgqueue.turn_hint_' ELSE 'pgqueue.hint_' END || p_queue_id;
    -- the ready probe's bound: p_now, or for turns the clock in microseconds, read before the
    -- snapshot as p_now was (a turn handed on within this millisecond is due)
    v_due      bigint := CASE WHEN p_turns THEN pgqueue._turn_key(p_now, true) ELSE p_now END;
    v_raw      text := current_setting(v_name, true);
    v_s        bigint[];
    v_e        bigint;
    v_snap     pg_snapshot;
    v_mine     bigint := pg_current_xact_id_if_assigned()::text::bigint;
    v_xip      bigint[];
    v_x        bigint;
    v_oldest   bigint;
    v_long     bigint[];  -- the xids set aside ...
    v_longr    bigint[];  -- ... and their R, 4 values each (read from the state on deciding calls)
    v_j        integer;
    v_reset    boolean;   -- the stripe moved: start again from the bottom
    v_ended    boolean;   -- a transaction set aside has ended: start again from its R
    v_settle   boolean;
    v_moved    boolean;
    v_ripe     boolean;  -- may H and L move to C and D (the candidates are old enough)?
    v_new      boolean;
    v_k_at     bigint;
    v_k_id     bigint;
    v_d_at     bigint;
    v_d_id     bigint;
    v_xmax     bigint;
    v_cap      bigint;
    v_b        bigint[];  -- this call's probe bounds: H (ready or turn) and L (lease)
    v_one      bigint;    -- the take of one message: its id, and whether it goes to the dead letters
    v_one_dead boolean;
    v_lraw     text;
    v_last     bigint;    -- a one-message take: when this session last looked for expired leases ...
    v_look     boolean;   -- ... whether this call looks (NULL: not decided yet) ...
    v_looked   boolean;   -- ... and whether it looked and found none
    v_src      integer;
    v_fast     boolean;   -- this call's take of one message starts at F
    v_probed   boolean;   -- this call ran the candidate probe (from H) ...
    v_real     boolean;   -- ... and found a ready row (not the cap alone)
    v_one_k    bigint;    -- the ready key of a one-message take
    v_iraw     text;      -- the look for set-aside transactions that hold no lock on pgqueue: when ...
    v_ilast    bigint;    -- ... this session last looked, and ...
    v_idle     bigint[];  -- ... which it found so
BEGIN
    -- Bring the hints up to date (see the header). A value without its checksum (hashtext of the
    -- array's text, written after it) starts afresh, never an error: so does anything a session
    -- sets by hand unless it forges the checksum of text that is not a bigint[]. (The checksum
    -- replaced two regular expressions that checked the text: 4 us a call, measured.)
    v_s := CASE WHEN hashtext(split_part(v_raw, ' ', 1))::text = split_part(v_raw, ' ', 2)
                THEN split_part(v_raw, ' ', 1)::bigint[] END;
    IF v_s IS NULL OR v_s[1] <> pg_backend_pid()
       OR NOT (CASE WHEN v_s[16] BETWEEN 0 AND 10000 THEN cardinality(v_s) = 16 + 5 * v_s[16] ELSE false END) THEN
        -- [8], the stripe value seen, starts at the stripe's value now: a fresh state probes
        -- from the bottom anyway, and a row placed low by a transaction that advanced the
        -- stripe before this read had its xid before this call's, which H waits for before it
        -- moves (the stripes start at a random value, queue_lock.sql: from 0, every session's
        -- first call would restart from the bottom for nothing)
        v_s := ARRAY[pg_backend_pid(), c_min, c_min, 0, 0, 0, 0,
                     coalesce(pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)), 0),
                     0, c_min, c_min, 0, 0, c_min, c_min, 0];
    END IF;
    v_e := coalesce(pg_sequence_last_value(pgqueue._lock_stripe(p_queue_id)), 0);
    v_snap := pg_current_snapshot();  -- taken after the stripe was read
    -- every xid below v_xmax that is still running is in the snapshot's list
    v_xmax := pg_snapshot_xmax(v_snap)::text::bigint;
    -- a message was placed below the clock: this call probes from the bottom (and records the
    -- move once it has an xid, below)
    v_moved := v_e <> v_s[8];
    -- A clock set back (an NTP step, a clock that ran ahead and was corrected): H and L were
    -- capped below the clock of their time and F is a key this session took, so one above this
    -- call's bound says the clock reads earlier than it did, and the rows keyed with it since (a
    -- default dequeue_at, a lease, a turn) may lie below them: the hints start afresh, as a new
    -- session's do (without this a consumer's session delivered none of the messages enqueued
    -- after such a step until the clock came back past its hint, tests/test_fifo_and_priority.py;
    -- docs/guarantees.md, faults, says what a session idle across the step may still miss).
    IF v_s[2] > v_due OR v_s[10] > p_now OR v_s[14] > v_due THEN
        v_s[2] := c_min; v_s[3] := c_min; v_s[6] := 0; v_s[10] := c_min; v_s[11] := c_min;
        v_s[14] := c_min; v_s[15] := c_min;
        -- and the R of each transaction set aside (where H and L go back to when it ends): R above
        -- the clock too, so a row such a transaction keyed with the clock now and committed
        -- after H had passed it was never found (a review)
        IF v_s[16] > 0 THEN
            v_s[17 + v_s[16] : 16 + 5 * v_s[16]] := array_fill(c_min, ARRAY[(4 * v_s[16])::integer]);
        END IF;
    END IF;
    -- Candidates 20 ms old or more (compared as "v_s[6] <= p_now - 20", not "p_now - v_s[6] >=
    -- 20": a state set by hand must not make the subtraction overflow).
    v_ripe := v_s[6] <> 0 AND v_xmax > v_s[7] AND v_s[6] <= p_now - 20;
    -- v_oldest: the oldest transaction in progress that is not set aside (nor this one). With
    -- nothing set aside that is the snapshot's xmin. Otherwise a set-aside xid has ended when
    -- it is not in the snapshot's list of running xids (they are all below its xmax), and
    -- v_oldest is found from that list only when a check below reads it (else it stays NULL,
    -- which those checks take as false). Plain expressions and loops: no SQL statement.
    -- Only a deciding call reads the transactions set aside and what runs: one whose candidates
    -- are ripe, that has none (it runs the candidate probe), or whose restart from the bottom
    -- may be due. Every other call (nine in ten at 15 busy sessions) carries the state as it
    -- is, at the cost of this one expression: each expression that a PL/pgSQL call evaluates
    -- is prepared again in each transaction (about 62 a delete-mode call, with 330 catalog
    -- cache lookups), and the ones below, run on every call while an idle session held an xid,
    -- were what issue 12's case b cost delete mode (docs/performance.md, "Case (b): the
    -- set-aside path's expressions"). So a transaction set aside that has ended is seen
    -- at the next deciding call, within 20 ms, as a late commit below F is.
    IF v_ripe OR v_s[6] = 0 OR (v_s[9] <> 0 AND v_xmax > v_s[9]) THEN
        v_long := v_s[17 : 16 + v_s[16]];
        v_longr := v_s[17 + v_s[16] : 16 + 5 * v_s[16]];
        IF v_s[16] > 0 THEN
            -- the running xids, ascending (pg_current_snapshot sorts them; this transaction's own
            -- is never among them)
            v_xip := coalesce(string_to_array(nullif(split_part(v_snap::text, ':', 3), ''), ','), '{}')::bigint[];
            -- one expression when none of them has ended (the common case), else a loop
            IF NOT v_xip @> v_long THEN
                v_long := '{}';
                v_longr := '{}';
                FOR i IN 1 .. v_s[16] LOOP
                    v_x := v_s[16 + i];
                    v_j := 17 + v_s[16] + 4 * (i - 1);  -- its R
                    IF pg_visible_in_snapshot(v_x::text::xid8, v_snap) THEN
                        -- it has ended: H and L go back to its R, unless it rolled back (nothing it
                        -- wrote becomes visible; an unknown status counts as committed)
                        IF pg_xact_status(v_x::text::xid8) IS DISTINCT FROM 'aborted' THEN
                            v_ended := true;
                            IF (v_s[v_j], v_s[v_j + 1]) < (v_s[2], v_s[3]) THEN
                                v_s[2] := v_s[v_j]; v_s[3] := v_s[v_j + 1];
                            END IF;
                            IF (v_s[v_j + 2], v_s[v_j + 3]) < (v_s[10], v_s[11]) THEN
                                v_s[10] := v_s[v_j + 2]; v_s[11] := v_s[v_j + 3];
                            END IF;
                        END IF;
                    ELSE
                        v_long := v_long || v_x;
                        v_longr := v_longr || v_s[v_j : v_j + 3];
                    END IF;
                END LOOP;
            END IF;
            -- The look (at most once a second a session and queue, by p_now, in the setting
            -- <v_name>_look, on a deciding call; a value that is not a time within that second is as
            -- good as none, so a session can only make itself look more often; every 100 ms cost
            -- delete mode a tenth of its rate under case b, docs/performance.md): a transaction set
            -- aside that holds no lock on any relation of pgqueue's schema has written no row of
            -- pgqueue.message (every write locks the table first and keeps the lock to its end), and
            -- every key it writes from now on comes from a clock read after it took such a lock
            -- (pgqueue._write_clock and the lease's clock come after a statement on pgqueue's
            -- tables; a key placed more than 5 ms below its writer's clock signals the stripe), so
            -- after p_now, which was read before pg_locks was (pgqueue._idle_xids). Its R rises to
            -- p_now less the 5-ms margin: when an idle session's transaction (case b) ends, the
            -- hints go back over a second of deliveries at most, not over all of its hold. A
            -- transaction that has ended keeps its R.
            IF cardinality(v_long) > 0 THEN
                v_iraw := current_setting(v_name || '_look', true);
                v_ilast := CASE WHEN length(v_iraw) BETWEEN 1 AND 18 AND ltrim(v_iraw, '0123456789') = ''
                                THEN v_iraw::bigint END;
                IF NOT coalesce(v_ilast > p_now - 1000 AND v_ilast <= p_now, false) THEN
                    v_idle := pgqueue._idle_xids(v_long);
                    FOR i IN 1 .. cardinality(v_long) LOOP
                        IF v_long[i] = ANY (v_idle) THEN
                            -- (the ready keys' margin, as the candidates' cap: 5 ms, 6,000 us for turns)
                            IF (v_longr[4 * i - 3], v_longr[4 * i - 2])
                               < (v_due - CASE WHEN p_turns THEN 6000 ELSE 5 END, c_min) THEN
                                v_longr[4 * i - 3 : 4 * i - 2] :=
                                    ARRAY[v_due - CASE WHEN p_turns THEN 6000 ELSE 5 END, c_min];
                            END IF;
                            IF (v_longr[4 * i - 1], v_longr[4 * i]) < (p_now - 5, c_min) THEN
                                v_longr[4 * i - 1 : 4 * i] := ARRAY[p_now - 5, c_min];
                            END IF;
                        END IF;
                    END LOOP;
                    v_iraw := set_config(v_name || '_look', p_now::text, false);
                END IF;
            END IF;
            IF v_ripe OR (v_s[9] <> 0 AND v_xmax > v_s[9]) THEN
                -- the oldest running xid not set aside: the list and the xids set aside are both
                -- ascending, so when those are the list's first ones (an idle session's xid is
                -- older than every busy one's), it is the next one; else a loop
                IF v_xip[1 : cardinality(v_long)] = v_long THEN
                    v_oldest := coalesce(v_xip[cardinality(v_long) + 1], v_xmax);
                ELSE
                    v_oldest := v_xmax;
                    FOREACH v_x IN ARRAY v_xip LOOP
                        IF v_x < v_oldest AND v_x <> ALL (v_long) THEN
                            v_oldest := v_x;
                        END IF;
                    END LOOP;
                END IF;
            END IF;
        ELSE
            v_oldest := pg_snapshot_xmin(v_snap)::text::bigint;
        END IF;
        IF v_s[9] <> 0 AND v_xmax > v_s[9] AND v_oldest >= v_s[9] THEN
            v_reset := true;
            -- a transaction set aside with an xid below the restart's may have placed the row: the
            -- restart did not wait for it, so its end sends H and L back to the bottom (its R)
            FOR i IN 1 .. cardinality(v_long) LOOP
                IF v_long[i] < v_s[9] THEN
                    v_longr[4 * i - 3 : 4 * i] := ARRAY[c_min, c_min, c_min, c_min];
                END IF;
            END LOOP;
            v_s[9] := 0;
        END IF;
        IF v_reset THEN
            -- F too: a row placed low that the moving call did not take lies below F, which a
            -- take from F would pass (a review: a priority message waited behind later ones)
            v_s[2] := c_min; v_s[3] := c_min; v_s[6] := 0; v_s[10] := c_min; v_s[11] := c_min;
            v_s[14] := c_min; v_s[15] := c_min;
            v_ripe := false;
        ELSIF v_ended THEN  -- (H and L are back at its R, above)
            -- and F no higher than H: what the transaction wrote, visible now, lies at or above
            -- its R, and may lie below F (a review: a priority message it placed, after a
            -- restart had sent its R to the bottom, was passed by a take from F)
            IF (v_s[14], v_s[15]) > (v_s[2], v_s[3]) THEN
                v_s[14] := v_s[2]; v_s[15] := v_s[3];
            END IF;
            v_s[6] := 0;
            v_ripe := false;
        END IF;
        IF v_ripe THEN  -- may H and L move to C and D?
            IF v_oldest >= v_s[7] THEN
                v_settle := true;
            ELSIF v_s[6] < pgqueue.now_ms() - 200 THEN  -- set aside what holds them up
                IF v_xip IS NULL THEN
                    v_xip := coalesce(string_to_array(nullif(split_part(v_snap::text, ':', 3), ''), ','), '{}')::bigint[];
                END IF;
                FOREACH v_x IN ARRAY v_xip LOOP
                    IF v_x < v_s[7] AND v_x <> ALL (v_long) THEN
                        v_long := v_long || v_x;
                        v_longr := v_longr || ARRAY[v_s[2], v_s[3], v_s[10], v_s[11]];  -- its R: H and L before they move
                    END IF;
                END LOOP;
                v_settle := true;
            END IF;
        END IF;
        -- the list back into the state
        v_s := v_s[1:15] || cardinality(v_long)::bigint || v_long || v_longr;
    END IF;
    IF v_s[6] = 0 OR v_settle THEN
        v_probed := true;
        -- the first visible ready row from H and the first visible lease from L, locked or
        -- not (p_now was read before this snapshot), in one statement (one for each kind of
        -- ready key; the lease probe is pgqueue._message_first_lease, inlined); both bounded by
        -- the clock, as the candidates are capped below it (unbounded, the lease probe would
        -- walk the entries of every lease completed within the lease time)
        IF p_turns THEN
            SELECT t.turn_at, t.id, l.locked_until, l.id INTO v_k_at, v_k_id, v_d_at, v_d_id
              FROM (SELECT) AS one
              LEFT JOIN LATERAL (
                    SELECT m.turn_at, m.id FROM pgqueue.message m
                     WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL AND m.locked_until IS NULL
                       AND (m.turn_at, m.id) >= (v_s[2], v_s[3]) AND m.turn_at <= v_due
                     ORDER BY m.turn_at, m.id
                     LIMIT 1) AS t ON true
              LEFT JOIN LATERAL pgqueue._message_first_lease(p_queue_id, v_s[10], v_s[11], p_now) AS l ON true;
        ELSE
            SELECT r.dequeue_at, r.id, l.locked_until, l.id INTO v_k_at, v_k_id, v_d_at, v_d_id
              FROM (SELECT) AS one
              LEFT JOIN LATERAL (
                    SELECT m.dequeue_at, m.id FROM pgqueue.message m
                     WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                       AND (m.dequeue_at, m.id) >= (v_s[2], v_s[3]) AND m.dequeue_at <= v_due
                     ORDER BY m.dequeue_at, m.id
                     LIMIT 1) AS r ON true
              LEFT JOIN LATERAL pgqueue._message_first_lease(p_queue_id, v_s[10], v_s[11], p_now) AS l ON true;
        END IF;
        IF v_settle THEN  -- nothing visible in [H, C) or in [L, D): they move up
            IF v_k_at IS NULL OR (v_k_at, v_k_id) >= (v_s[4], v_s[5]) THEN
                v_s[2] := v_s[4]; v_s[3] := v_s[5];
            END IF;
            IF v_d_at IS NULL OR (v_d_at, v_d_id) >= (v_s[12], v_s[13]) THEN
                v_s[10] := v_s[12]; v_s[11] := v_s[13];
            END IF;
            v_s[6] := 0;
        END IF;
        -- new candidates, none above the cap (5 ms below the clock for ready keys; for turn keys,
        -- in microseconds, 6 ms: a writer counts a key as at the clock when its millisecond is
        -- at least 5 below its own, so a turn key p_dequeue_at * 1000 may lie up to 5,999 us below
        -- a clock in the same millisecond; with 5,000 a hint passed such a row, a review);
        -- recorded with this call's xid below
        v_cap := v_due - CASE WHEN p_turns THEN 6000 ELSE 5 END;
        v_real := v_k_at < v_cap;
        IF v_k_at IS NULL OR v_k_at >= v_cap THEN
            v_k_at := v_cap; v_k_id := c_min;
        END IF;
        IF v_d_at IS NULL OR v_d_at >= p_now - 5 THEN
            v_d_at := p_now - 5; v_d_id := c_min;
        END IF;
        v_new := (v_k_at, v_k_id) > (v_s[2], v_s[3]) OR (v_d_at, v_d_id) > (v_s[10], v_s[11]);
    END IF;
    -- From the bottom when the stripe moved, and on every call until the restart it records is
    -- done (v_s[9], once every transaction with an xid below that call's has ended or been set
    -- aside): a row placed low that the moving call could not see yet (its writer committed
    -- later) or did not take (it took one message, or another) is below H. Probing from H then,
    -- a session took later messages first, and an idle one found nothing while any older
    -- transaction stayed open, however unrelated (a review: seconds, for as long as it stayed).
    v_b := CASE WHEN v_moved OR v_s[9] <> 0 THEN ARRAY[c_min, c_min, c_min, c_min]
                ELSE ARRAY[v_s[2], v_s[3], v_s[10], v_s[11]] END;
    -- the fast start F (see the header), for the statement of the ready probe alone
    v_fast := p_limit = 1 AND NOT v_moved AND v_s[9] = 0 AND v_probed IS NULL AND (v_s[14], v_s[15]) > (v_b[1], v_b[2]);
    LOOP
        -- A take of one message looks for expired leases unless this session looked on this
        -- queue within the last 20 ms and found none (setting pgqueue.lease_check_<queue id>:
        -- when it last did, by p_now; a value that is not a time within those 20 ms is as good
        -- as none, so a session can only make itself look more often), and always when no
        -- ready message is left; a look that finds one leaves the setting alone, so a backlog
        -- of expired leases still goes first, one look a call. Otherwise a statement with the
        -- ready probe alone: the second probe under the UNION ALL is a plan node set up at every
        -- execution though it finds nothing almost always (docs/performance.md, "The
        -- expired-lease probe on fewer calls").
        IF v_need = 1 AND v_look IS NULL THEN
            v_lraw := current_setting('pgqueue.lease_check_' || p_queue_id, true);
            v_last := CASE WHEN length(v_lraw) BETWEEN 1 AND 18 AND ltrim(v_lraw, '0123456789') = ''
                           THEN v_lraw::bigint END;
            v_look := NOT coalesce(v_last > p_now - 20 AND v_last <= p_now, false);
        END IF;
        IF v_need = 1 AND NOT v_look THEN
            IF p_turns THEN
                SELECT m.id, m.turn_at INTO v_one, v_one_k FROM pgqueue.message m
                 WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL AND m.locked_until IS NULL
                   AND (m.turn_at, m.id) >= (CASE WHEN v_fast THEN v_s[14] ELSE v_b[1] END,
                                             CASE WHEN v_fast THEN v_s[15] ELSE v_b[2] END)
                   AND m.turn_at <= v_due
                   AND m.id <> ALL (v_not)
                   AND (p_max_id IS NULL OR m.id <= p_max_id)
                 ORDER BY m.turn_at, m.id
                 LIMIT 1
                   FOR UPDATE SKIP LOCKED;
            ELSE
                SELECT m.id, m.dequeue_at INTO v_one, v_one_k FROM pgqueue.message m
                 WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                   AND (m.dequeue_at, m.id) >= (CASE WHEN v_fast THEN v_s[14] ELSE v_b[1] END,
                                                CASE WHEN v_fast THEN v_s[15] ELSE v_b[2] END)
                   AND m.dequeue_at <= v_due
                   AND m.id <> ALL (v_not)
                   AND (p_max_id IS NULL OR m.id <= p_max_id)
                 ORDER BY m.dequeue_at, m.id
                 LIMIT 1
                   FOR UPDATE SKIP LOCKED;
            END IF;
            IF v_one IS NULL THEN
                v_look := true;  -- nothing ready: the statement with both probes (from H)
                v_fast := false;
                CONTINUE;
            END IF;
            v_found := ARRAY[v_one];
            -- F follows the takes, but a take from F moves it only once it is 32 ids behind (or
            -- above the id taken): a state written at every call cost more than the walk it
            -- saves when nothing is held (docs/performance.md)
            IF v_fast IS NOT TRUE OR v_s[15] < v_one - 32 OR v_s[15] > v_one THEN
                v_s[14] := v_one_k; v_s[15] := v_one;
            END IF;
            v_dead_ids := NULL;
        -- one statement for each kind of ready key, so that each plan has only the probes it
        -- runs, and for one message one without the aggregate (its sort is set up at every
        -- execution: 6-8 us of a one-message call, measured)
        ELSE
            IF v_acks IS NULL THEN
                -- (once a call, on the statements with the expired-lease probe) the messages
                -- message_complete_and_dequeue acknowledges in the same call: a lease of the
                -- caller's that ran out and that nobody took is still the caller's, to be
                -- completed, not handed out again or dead-lettered by its own take (a review: a
                -- finished message on its last attempt went to the dead letters). Only in the
                -- expired-lease probe and only with the caller's token: a message that another
                -- consumer leased since (a stale acknowledgement) is handed out as ever, and
                -- the ready probe, which never finds a lease, does not compare every row it
                -- visits with up to 10,000 ids (a review: 10,000 acknowledgements and 10,000
                -- takes ran 823 ms, against about 510 ms as two calls)
                v_araw := current_setting('pgqueue.ack_call', true);  -- (ids, a space, tokens)
                v_acks := coalesce(nullif(split_part(v_araw, ' ', 1), '')::bigint[], '{}');
                IF cardinality(v_acks) > 0 THEN
                    -- (built here, where a statement with the expired-lease probe runs, not by
                    -- every acknowledging call: 4.6 us a call, a review)
                    v_ack_keys := ARRAY(SELECT a.i::numeric * 4294967296 + a.t
                                          FROM unnest(v_acks, coalesce(nullif(split_part(v_araw, ' ', 2), '')::integer[], '{}')) AS a(i, t));
                END IF;
            END IF;
            IF p_turns AND v_need = 1 THEN
                SELECT c.id, c.dead, c.src, c.k INTO v_one, v_one_dead, v_src, v_one_k
                  FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                              coalesce(m.attempts >= p_max_attempts, false) AS dead
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                          AND (m.locked_until, m.id) >= (v_b[3], v_b[4])
                                          AND m.locked_until <= p_now
                                          AND m.id <> ALL (v_not)
                                          AND (m.id <> ALL (v_acks) OR m.id::numeric * 4294967296 + m.attempts <> ALL (v_ack_keys))
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.locked_until, m.id
                                        LIMIT 1
                                          FOR UPDATE SKIP LOCKED) e
                        UNION ALL
                        SELECT * FROM (SELECT 1, m.turn_at, m.id, false
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL
                                          AND m.locked_until IS NULL
                                          AND (m.turn_at, m.id) >= (v_b[1], v_b[2])
                                          AND m.turn_at <= v_due
                                          AND m.id <> ALL (v_not)
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.turn_at, m.id
                                        LIMIT 1
                                          FOR UPDATE SKIP LOCKED) t
                        LIMIT 1) c;
                v_found := CASE WHEN v_one IS NULL OR v_one_dead THEN '{}' ELSE ARRAY[v_one] END;
                v_dead_ids := CASE WHEN v_one_dead THEN ARRAY[v_one] END;
                v_looked := v_src IS DISTINCT FROM 0;  -- no expired lease found
                IF v_src = 1 THEN
                    v_s[14] := v_one_k; v_s[15] := v_one;
                END IF;
            ELSIF p_turns THEN
                SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
                       array_agg(c.id) FILTER (WHERE c.dead)
                  INTO v_found, v_dead_ids
                  FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                              coalesce(m.attempts >= p_max_attempts, false) AS dead
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                          AND (m.locked_until, m.id) >= (v_b[3], v_b[4])
                                          AND m.locked_until <= p_now
                                          AND m.id <> ALL (v_not)
                                          AND (m.id <> ALL (v_acks) OR m.id::numeric * 4294967296 + m.attempts <> ALL (v_ack_keys))
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.locked_until, m.id
                                        LIMIT v_need
                                          FOR UPDATE SKIP LOCKED) e
                        UNION ALL
                        SELECT * FROM (SELECT 1, m.turn_at, m.id, false
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.turn_at IS NOT NULL
                                          AND m.locked_until IS NULL
                                          AND (m.turn_at, m.id) >= (v_b[1], v_b[2])
                                          AND m.turn_at <= v_due
                                          AND m.id <> ALL (v_not)
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.turn_at, m.id
                                        LIMIT v_need
                                          FOR UPDATE SKIP LOCKED) t
                        LIMIT v_need) c;
            ELSIF v_need = 1 THEN
                SELECT c.id, c.dead, c.src, c.k INTO v_one, v_one_dead, v_src, v_one_k
                  FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                              coalesce(m.attempts >= p_max_attempts, false) AS dead
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                          AND (m.locked_until, m.id) >= (v_b[3], v_b[4])
                                          AND m.locked_until <= p_now
                                          AND m.id <> ALL (v_not)
                                          AND (m.id <> ALL (v_acks) OR m.id::numeric * 4294967296 + m.attempts <> ALL (v_ack_keys))
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.locked_until, m.id
                                        LIMIT 1
                                          FOR UPDATE SKIP LOCKED) e
                        UNION ALL
                        SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                          AND (m.dequeue_at, m.id) >= (v_b[1], v_b[2])
                                          AND m.dequeue_at <= v_due
                                          AND m.id <> ALL (v_not)
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.dequeue_at, m.id
                                        LIMIT 1
                                          FOR UPDATE SKIP LOCKED) r
                        LIMIT 1) c;
                v_found := CASE WHEN v_one IS NULL OR v_one_dead THEN '{}' ELSE ARRAY[v_one] END;
                v_dead_ids := CASE WHEN v_one_dead THEN ARRAY[v_one] END;
                v_looked := v_src IS DISTINCT FROM 0;  -- no expired lease found
                IF v_src = 1 THEN
                    v_s[14] := v_one_k; v_s[15] := v_one;
                END IF;
            ELSE
                SELECT coalesce(array_agg(c.id ORDER BY c.src, c.k, c.id) FILTER (WHERE NOT c.dead), '{}'),
                       array_agg(c.id) FILTER (WHERE c.dead)
                  INTO v_found, v_dead_ids
                  FROM (SELECT * FROM (SELECT 0 AS src, m.locked_until AS k, m.id,
                                              coalesce(m.attempts >= p_max_attempts, false) AS dead
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NOT NULL
                                          AND (m.locked_until, m.id) >= (v_b[3], v_b[4])
                                          AND m.locked_until <= p_now
                                          AND m.id <> ALL (v_not)
                                          AND (m.id <> ALL (v_acks) OR m.id::numeric * 4294967296 + m.attempts <> ALL (v_ack_keys))
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.locked_until, m.id
                                        LIMIT v_need
                                          FOR UPDATE SKIP LOCKED) e
                        UNION ALL
                        SELECT * FROM (SELECT 1, m.dequeue_at, m.id, false
                                         FROM pgqueue.message m
                                        WHERE m.queue_id = p_queue_id AND m.locked_until IS NULL
                                          AND (m.dequeue_at, m.id) >= (v_b[1], v_b[2])
                                          AND m.dequeue_at <= v_due
                                          AND m.id <> ALL (v_not)
                                          AND (p_max_id IS NULL OR m.id <= p_max_id)
                                        ORDER BY m.dequeue_at, m.id
                                        LIMIT v_need
                                          FOR UPDATE SKIP LOCKED) r
                        LIMIT v_need) c;
            END IF;
        END IF;
        v_ids := v_ids || v_found;  -- NULL || an array is the array
        EXIT WHEN v_dead_ids IS NULL;
        v_not := v_not || v_found;
        FOREACH v_dead IN ARRAY v_dead_ids LOOP
            -- the reason, and the error of the message's last failure after it (a handler
            -- that failed with an error, then hung or crashed: the error is what tells why)
            PERFORM pgqueue._dead_letter(v_dead, (SELECT 'lease expired' || coalesce('; last error: ' || m.last_error, '')
                                                    FROM pgqueue.message m WHERE m.id = v_dead), p_now);
        END LOOP;
        IF p_turns THEN
            -- a dead letter hands its group's turn on (pgqueue._message_left) at the clock,
            -- above this call's bound: the repeated probe takes it too, as it takes a ready
            -- message of another group (a row that is not yet visible stays unseen either way)
            v_due := pgqueue._turn_key(p_now, true);
        END IF;
        v_need := p_limit - cardinality(v_ids);
        EXIT WHEN v_need = 0;
    END LOOP;
    -- X: an xid the take assigned (locking rows), so after the candidate probes, or, when the
    -- probe found a ready row and new candidates and the take took nothing, one assigned here
    -- (on about one call in 20 ms of a session and queue at most, as the candidates then wait to
    -- ripen; more often when the caller rolls back, which restores the state; see the header).
    -- Without one (an empty poll of a queue with nothing ready, or a transaction that had its
    -- xid before this call) no new candidate is kept and a stripe move is seen again by the
    -- next call.
    v_x := CASE WHEN v_mine IS NOT NULL THEN NULL
                WHEN v_real AND v_new THEN pg_current_xact_id()::text::bigint
                ELSE pg_current_xact_id_if_assigned()::text::bigint END;
    IF v_x IS NOT NULL THEN
        IF v_moved THEN
            v_s[8] := v_e;
            v_s[9] := v_x;
        END IF;
        IF v_new THEN
            v_s[4] := greatest(v_k_at, v_s[2]);
            v_s[5] := CASE WHEN (v_k_at, v_k_id) > (v_s[2], v_s[3]) THEN v_k_id ELSE v_s[3] END;
            v_s[12] := greatest(v_d_at, v_s[10]);
            v_s[13] := CASE WHEN (v_d_at, v_d_id) > (v_s[10], v_s[11]) THEN v_d_id ELSE v_s[11] END;
            v_s[6] := pgqueue.now_ms();
            v_s[7] := v_x;
        END IF;
    END IF;
    IF v_looked AND v_last IS DISTINCT FROM p_now THEN
        -- (transactional, as the hints: after a rollback the session looks again)
        v_lraw := set_config('pgqueue.lease_check_' || p_queue_id, p_now::text, false);
    END IF;
    -- written only when it changed (most calls change nothing)
    IF v_s::text IS DISTINCT FROM split_part(v_raw, ' ', 1) THEN
        v_raw := v_s::text;
        v_raw := set_config(v_name, v_raw || ' ' || hashtext(v_raw), false);
    END IF;
    RETURN v_ids;
END;
$$;

COMMENT ON FUNCTION pgqueue._message_take(integer, integer, bigint, integer, bigint, boolean, bigint[]) IS
    'pgqueue internal: lock up to p_limit deliverable messages (expired leases first, then by dequeue_at, id, or with p_turns by turn_at, id), dead-lettering poison leases; ids in delivery order';
