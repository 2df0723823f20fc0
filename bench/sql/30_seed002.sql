-- Reference design "seed 002": the experiment of Marko Tiikkaja's blog post "Queues, queues,
-- they all fall down" (15 January 2015), which measured how to hand out a table of items to
-- concurrent workers, each item exactly once, by four claiming strategies (naive FOR UPDATE,
-- advisory locks, SKIP LOCKED; random offset is not reproduced), each in a two-transaction version
-- (claim: state 0 -> 1 and commit; then process: 1 -> 2) and a single-transaction version
-- (claim straight to 2 and commit after processing). The claiming statements are in
-- bench/workflows.py; the advisory-lock claim needs a loop, so it is a function here.
--
-- The article does not show its schema; this one keeps the available items in a partial index
-- so that the first available item is one index probe for every strategy.
CREATE SCHEMA seed002;

CREATE TABLE seed002.item (
    itemid bigint   NOT NULL,
    state  smallint NOT NULL DEFAULT 0,   -- 0 available, 1 claimed (two-transaction), 2 processed
    CONSTRAINT item_pkey PRIMARY KEY (itemid)
);

CREATE INDEX item_available_idx ON seed002.item (itemid) WHERE state = 0;

-- Claim the first available item under a session advisory lock and set its state to p_state.
-- Candidates come in itemid order and pg_try_advisory_lock skips those another worker holds.
-- The race the article describes (a snapshot taken before another worker committed still
-- shows the item available, and that worker has already released its lock) is caught by the
-- UPDATE, which re-checks the row's latest version: a lost race costs a retry, counted in races.
-- The caller releases the advisory lock (the article's "hold" and "batch release" variants).
CREATE FUNCTION seed002.claim_advisory(p_state smallint, OUT itemid bigint, OUT races integer)
AS $$
DECLARE
    v_id bigint;
BEGIN
    races := 0;
    FOR v_id IN SELECT i.itemid FROM seed002.item i WHERE i.state = 0 ORDER BY i.itemid LOOP
        IF pg_try_advisory_lock(v_id) THEN
            UPDATE seed002.item i SET state = p_state WHERE i.itemid = v_id AND i.state = 0;
            IF FOUND THEN
                itemid := v_id;
                RETURN;
            END IF;
            PERFORM pg_advisory_unlock(v_id);
            races := races + 1;
        END IF;
    END LOOP;
END;
$$ LANGUAGE plpgsql;
