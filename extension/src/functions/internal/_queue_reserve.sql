-- Reserve room for p_count new messages in a capped queue (max_size), or raise PQ003.
--
-- Producers of a capped queue take turns on its pgqueue.queue_size row (FOR UPDATE, which writes
-- no new row version). The row keeps an upper bound on the queue's live messages, recounted
-- exactly (bounded by max_size) only when the bound says "full", in one of two forms:
--   * mark NOT NULL: the bound is upper + (E - mark), where E is the enqueued counter of the
--     queue's stripe (pgqueue.queue_counters: sequences) now and mark what it was when upper was
--     counted. Every admission counts its messages as enqueued before it commits (the callers of
--     pgqueue._queue_admit), and while it holds the row lock, so every admission since the count
--     is in the difference (other queues of the stripe only make the bound looser). An admission
--     writes nothing: under a held snapshot a row written at every admission piles up dead
--     versions that every producer walks (docs/performance.md, "Capped queues under a held
--     snapshot"). A recount runs in a snapshot taken after the lock (READ COMMITTED), when every
--     earlier admission has committed.
--   * mark NULL ("exact"): upper itself is the bound, and every admission adds to it (an
--     UPDATE), as before 0.4. A REPEATABLE READ or SERIALIZABLE producer counts in its
--     transaction's snapshot, which misses admissions that committed after it; an UPDATE by each
--     of them makes its FOR UPDATE raise 40001 instead (specs/rr_backpressure.spec), an
--     admission that writes nothing would not. So the first such producer of a capped queue
--     marks the queue's stripe exact (until queue_create gives the stripe to a new queue): it sets pgqueue.queue_size_exact_<id & 63> to its
--     xid while it holds the row lock, then raises 40001. Producers read the mark after taking
--     the row lock, so every later admission on the stripe is exact, and every one before it
--     ended before the lock was taken, so before that transaction ended. Its retry, and any
--     producer whose snapshot sees the marking transaction ended, counts exactly; one whose
--     snapshot does not raises 40001 too (specs/capped_mixed.spec).
--
-- The recount window: a count reads up to max_size + 1 index entries (and the heap where the
-- visibility map is not set), so a queue kept at its cap, where producers outrun consumers, used
-- to count itself at nearly every admission, holding the row lock while it did (about 20 ms an
-- admission with a cap of 100,000). A count that finds the queue full (no room for one message), with 10,000 messages or
-- more, now sets the queue's window, pgqueue.queue_size_recount_<id & 63> (a sequence, because a refusal rolls back
-- what its transaction wrote): until ten times the count's duration (at most 1 s) after it ended,
-- an admission that the bound cannot prove fits is refused without counting. So counting takes
-- at most about a tenth of the time, and a refusal may come up to that long after consumers made
-- room; the cap itself is never exceeded. The window names the queue (id >> 6 in its low 20
-- bits, the time in epoch ms above them), so another queue of the stripe ignores it. A smaller
-- count sets no window (a cap below 10,000 never has one): such a queue is counted whenever the
-- bound says "full", as before. Nor does a count that admits: had it set a window, an admission
-- rolled back (by its caller, or by an error after it, such as a bad group) would leave the old
-- "full" bound under a window and refuse the next producers for up to 1 s with room to spare. A queue whose pgqueue.queue_size row is gone (queue_alter of
-- max_size) is counted at once.
--
-- p_count 0 reserves nothing: it waits for the admissions in progress (their producers hold the
-- row lock to their commit) and returns holding the lock. message_create calls it before it looks
-- for an idempotency key a second time on a capped queue: a producer of the same key between its
-- admission and its commit holds room the first look could not see it take, so the full queue
-- would refuse (PQ003) the call that should return that producer's id (specs/idempotent_create.spec).
-- A queue without its row gets one that a later admission recounts (mark above the counter),
-- inserted the way an admission inserts it, so that it waits for a producer inserting it too
-- (READ COMMITTED; under REPEATABLE READ the second look cannot see a new message anyway).
--
-- SECURITY DEFINER so that producers need no privilege on pgqueue.queue_size or the sequences:
-- back-pressure must not depend on a row the producers it limits can write. It reads max_size
-- itself. EXECUTE is revoked from PUBLIC and granted to producers by docs/grants.sql.
CREATE FUNCTION pgqueue._queue_reserve(p_queue_id integer, p_count bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_name    text;
    v_max     bigint;
    v_upper   bigint;
    v_mark    bigint;
    v_found   boolean;
    v_rc      boolean := current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable');
    v_exact   bigint;
    v_enq     bigint;
    v_bound   bigint;
    v_counted boolean := false;
    v_window  bigint;
    v_t0      double precision;
    v_took    double precision;
BEGIN
    IF p_count = 0 THEN
        -- the queue's lock stripe first, as every writer takes it (docs/locking.md, rule 1; the
        -- callers of an admission hold it already): a row made for a queue being dropped would
        -- outlive it. Under REPEATABLE READ no row is made: this snapshot may predate a drop.
        PERFORM pgqueue._queue_lock(p_queue_id);
    END IF;
    SELECT q.name, q.max_size INTO v_name, v_max FROM pgqueue.queue q WHERE q.id = p_queue_id;
    IF v_max IS NULL OR p_count < 0 THEN
        RETURN;
    END IF;
    IF p_count = 0 THEN
        -- wait for the admissions in progress (see the header)
        PERFORM FROM pgqueue.queue_size s WHERE s.queue_id = p_queue_id FOR UPDATE;
        IF NOT FOUND AND v_rc THEN
            INSERT INTO pgqueue.queue_size (queue_id, upper, mark)
            VALUES (p_queue_id, 0, 9223372036854775807)  -- recounted by the next admission
                ON CONFLICT (queue_id) DO NOTHING;
            PERFORM FROM pgqueue.queue_size s WHERE s.queue_id = p_queue_id FOR UPDATE;
        END IF;
        RETURN;
    END IF;
    SELECT s.upper, s.mark INTO v_upper, v_mark FROM pgqueue.queue_size s
     WHERE s.queue_id = p_queue_id FOR UPDATE;
    v_found := FOUND;
    IF NOT v_found THEN
        INSERT INTO pgqueue.queue_size (queue_id, upper) VALUES (p_queue_id, 0)
            ON CONFLICT (queue_id) DO NOTHING;
        PERFORM FROM pgqueue.queue_size s WHERE s.queue_id = p_queue_id FOR UPDATE;  -- recounted below
    END IF;
    -- read under the row lock (see the header)
    v_exact := pg_sequence_last_value(pgqueue._size_exact_seq(p_queue_id));
    IF NOT v_rc AND (v_exact IS NULL
                     OR NOT pg_visible_in_snapshot(v_exact::text::xid8, pg_current_snapshot())) THEN
        -- unset, or above every transaction id of this cluster, where it would never become
        -- visible: a plain install restored from another cluster (pg_dump copies the sequence)
        IF v_exact IS NULL OR v_exact > txid_current() THEN
            PERFORM setval(pgqueue._size_exact_seq(p_queue_id), txid_current());
        END IF;
        RAISE EXCEPTION 'could not serialize access to the size of capped queue "%"', v_name
            USING ERRCODE = '40001',
                  HINT = 'Retry the transaction: an admission may have committed after its snapshot.';
    END IF;
    v_enq := coalesce(pg_sequence_last_value(pgqueue._count_seq(p_queue_id, 0)), 0)
           + coalesce(pg_sequence_last_value(pgqueue._count_seq(p_queue_id, 6)), 0);
    -- (a counter below the mark, which only a reset of an unused stripe's counters by
    -- queue_create or a row inserted by a call with p_count 0 could cause, is recounted)
    v_bound := CASE WHEN NOT v_found OR v_enq < v_mark THEN NULL
                    WHEN v_mark IS NULL THEN v_upper
                    ELSE v_upper + (v_enq - v_mark) END;
    IF v_bound IS NULL OR v_bound + p_count > v_max THEN
        -- inside the queue's recount window (see the header): refused without counting
        v_window := pg_sequence_last_value(pgqueue._size_recount_seq(p_queue_id));
        v_t0 := date_part('epoch', clock_timestamp()) * 1000;
        IF v_bound IS NOT NULL AND v_window & 1048575 = (p_queue_id >> 6) & 1048575
           AND (v_window >> 20) > v_t0 AND (v_window >> 20) <= v_t0 + 1000 THEN
            RAISE EXCEPTION 'queue "%" is full (max_size %): % more message(s) refused',
                            v_name, v_max, p_count
                USING ERRCODE = 'PQ003',
                      DETAIL = format('The queue is counted again in %s ms (a count of 10,000 messages or more is repeated at most once in ten times its duration).',
                                      ceil((v_window >> 20) - v_t0)),
                      HINT = 'Back off and retry later, or raise max_size with pgqueue.queue_alter().';
        END IF;
        v_bound := pgqueue._queue_count(p_queue_id, least(v_max, 9223372036854775806) + 1);
        v_counted := true;
        v_took := date_part('epoch', clock_timestamp()) * 1000 - v_t0;
        -- a count that found the queue full (smaller counts are cheap, and a plan or a cold
        -- cache could make one look dear); one that found room sets none: its bound is written
        -- in the row and rolls back with the admission if its transaction does. Full means no
        -- room for one message, whatever p_count: a batch too large for the room left (or a
        -- producer calling this function with a huge p_count, again and again) would refuse
        -- the single messages that fit for the whole window (a security review)
        IF v_bound >= 10000 AND v_bound >= v_max THEN
            PERFORM setval(pgqueue._size_recount_seq(p_queue_id),
                           (ceil(v_t0 + v_took + least(10 * v_took, 1000))::bigint << 20)
                           | ((p_queue_id >> 6) & 1048575));
        END IF;
    END IF;
    IF v_bound + p_count > v_max THEN
        RAISE EXCEPTION 'queue "%" is full (max_size %): % more message(s) refused',
                        v_name, v_max, p_count
            USING ERRCODE = 'PQ003',
                  HINT = 'Back off and retry later, or raise max_size with pgqueue.queue_alter().';
    END IF;
    IF v_exact IS NOT NULL THEN
        UPDATE pgqueue.queue_size s SET upper = v_bound + p_count, mark = NULL
         WHERE s.queue_id = p_queue_id;
    ELSIF v_counted OR v_mark IS NULL THEN
        -- a new count, or a bound kept the exact way until now: from here on upper + (E - mark)
        UPDATE pgqueue.queue_size s SET upper = v_bound, mark = v_enq
         WHERE s.queue_id = p_queue_id;
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION pgqueue._queue_reserve(integer, bigint) FROM PUBLIC;

COMMENT ON FUNCTION pgqueue._queue_reserve(integer, bigint) IS
    'pgqueue internal: admit p_count messages into a capped queue or raise PQ003 (0: wait for the admissions in progress); the only writer of pgqueue.queue_size';
