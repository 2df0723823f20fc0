-- The wait floor that the ordered hand-off (a queue of group concurrency 1: pgqueue._message_left,
-- and its copies in message_dequeue and message_complete) records on the message it gives the
-- turn, the key (p_at, p_id), for the group's next hand-off: where that one's probe of the
-- group's waiting messages may start (message_group_wait_idx, by (dequeue_at, id)). Under a
-- held snapshot the group's first entries there are those of every message handed a turn since
-- the hold began (each turn is an UPDATE; the old version's entry can be neither removed nor
-- marked dead), so a probe from the group's first entry visited them all, and a probe of the
-- group's messages with the turn (message_group_turn_idx, the room) did the same: with 10
-- groups a grouped dequeue fell to a tenth of its rate (docs/performance.md, "Message groups
-- under a held snapshot"). The floor is the session hints' protocol (pgqueue._message_take) for
-- one group, carried from turn to turn on the message holding it: no row of its own (a row
-- updated at every hand-off would pile up versions under the hold just as the entries do).
--
-- Layout: [1:2] V, the floor: no message of the group waits below it (none is visible, and none
-- can become visible) unless one was placed below the clock since [6]; [3:4] C, the candidate
-- for the next V; [5] X, an xid: C becomes V once every transaction with an xid below X has
-- ended; [6] the queue's lock stripe as read before the hand-off's statement (p_stripe).
-- The floor p_floor of the message leaving holds if the stripe was still at its [6] when read
-- before the statement (p_stripe) and again after its snapshot, where the hand-off's statement
-- checks it (pgqueue._wait_floor_ok) before it gives a turn by the floor: its probe then started
-- at V, and (p_at, p_id) is the group's first waiting message that the snapshot sees. p_xmin is
-- that snapshot's xmin, passed by the statement (so that it is the probe's snapshot whether or
-- not this function is inlined: a VOLATILE SQL function that is not inlined takes a snapshot of
-- its own under READ COMMITTED). (Not a read of the stripe here: an argument that calls a
-- volatile function and is used more than once keeps an SQL function from being inlined, and
-- this one, not inlined, cost a grouped delete-mode dequeue a third of its rate: measured.)
--   * C is the key of the message given the turn, or the clock less 5 ms if that is lower (a
--     turn given to a scheduled message): every other message of the group that this snapshot
--     sees waiting comes after it. X is the hand-off's own xid, and the clock its transaction's
--     start (transaction_timestamp), before X: a transaction with an xid above X got it later,
--     and writes its keys from its clock read after that (pgqueue._write_clock), at or above
--     C, or more than 5 ms below its clock, which advances the stripe (trigger
--     message_placed_low) after it got its xid. So that advance must come after the stripe
--     value this floor records: a new candidate is taken only when the stripe was read before
--     X was assigned (p_pre: message_dequeue reads it before its take, if the transaction had
--     no xid yet; a completion passes the one its lease read, if its xid came after the
--     lease's: pgqueue._wait_floor_leased) and is still the value read before the statement
--     (p_stripe); else none (the floor is carried, or starts from the group's first entry
--     with no candidate). A stripe
--     read after X (a first version read it in the hand-off's DELETE, after the take's row
--     lock had assigned X) let a producer with a later xid place a message below C, advance
--     the stripe before that read and commit after the candidate became the floor: the floor
--     passed it (a review; specs/group_wait_floor.spec). (Nor is X the snapshot's xmax: that
--     is the last xid to end plus one, and a transaction still running may have an xid at or
--     above it.) A transaction with an xid below X may have written a key below C and commit
--     later: once every one of them has ended, what they wrote is visible, and a probe from V
--     finds it first.
--   * So at a later hand-off with the floor holding that may take a new candidate: once every
--     xid below X has ended (p_xmin is X or above), V moves to C, or to the key found by this
--     probe from V if that is lower (a late commit below C), and a new candidate is taken;
--     until then, and at every hand-off that may take none, the floor is carried as it is (V
--     does not move: a hand-off without a new candidate would have to record the old one
--     again, which it may, but does not yet). With the floor not holding (a message placed
--     low, a changed concurrency, none recorded) V is the group's first entry.
--   * While the floor holds, the group's one message with the turn is the one leaving: each
--     turn it records was given by the ordered hand-off, which gives it only when no other
--     message of the group has it, under group concurrency 1; every other way a turn is given
--     (a producer's enqueue, pgqueue._message_group_next) looks for a message with the turn
--     and sees the one leaving until the hand-off commits; and a change of the concurrency
--     advances the stripe (queue_alter). The hand-off then skips that probe of the group's
--     turns.
-- What it does not cover: new candidates are taken by message_dequeue's delete mode and by
-- message_complete after a lease of message_dequeue (and by _message_left when they call it);
-- a completion in the lease's transaction or in one that had its xid before the lease's, a
-- lease taken in a transaction that had an xid already (message_complete_and_dequeue's
-- further takes, after its acknowledgements; its first take records the stripe), and the batch
-- acknowledgements (which pass no floor) carry floors or start from the group's first entry.
-- And a transaction that holds an xid for the whole hold (issue 12's case b, an idle session)
-- keeps every candidate from becoming the floor, so the group's probes walk back to the floor
-- of when it began, as they did from the first entry before (the session hints set such a
-- transaction aside; the floor does not).
CREATE FUNCTION pgqueue._wait_floor_next(p_floor bigint[], p_stripe bigint, p_pre bigint, p_xmin bigint,
                                         p_at bigint, p_id bigint)
RETURNS bigint[]
LANGUAGE sql VOLATILE
RETURN CASE
    -- the floor holds, and its candidate waits for the transactions before X, or this hand-off
    -- may take no new one: carried as it is
    WHEN coalesce(p_floor[6] = p_stripe, false)
         AND (p_xmin < p_floor[5] OR NOT coalesce(p_pre = p_stripe, false))
        THEN p_floor
    -- no floor that holds, and no new candidate: from the group's first entry
    WHEN NOT coalesce(p_pre = p_stripe, false)
        THEN ARRAY[-9223372036854775808, -9223372036854775808, -9223372036854775808, -9223372036854775808,
                   0, p_stripe]::bigint[]
    -- V: the group's first entry if there is no floor that holds, else C (or the key found, if
    -- lower); then a new candidate
    ELSE CASE WHEN NOT coalesce(p_floor[6] = p_stripe, false)
                  THEN ARRAY[-9223372036854775808, -9223372036854775808]::bigint[]
              WHEN (p_floor[3], p_floor[4]) <= (p_at, p_id) THEN p_floor[3:4]
              ELSE ARRAY[p_at, p_id] END
         || CASE WHEN ((pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp()) * 1000000)::bigint / 1000 - 5,
                       -9223372036854775808) <= (p_at, p_id)
                 THEN ARRAY[(pg_catalog.date_part('epoch', pg_catalog.transaction_timestamp()) * 1000000)::bigint / 1000 - 5,
                            -9223372036854775808]
                 ELSE ARRAY[p_at, p_id] END
         || ARRAY[pg_catalog.pg_current_xact_id()::text::bigint, p_stripe]
    END;

COMMENT ON FUNCTION pgqueue._wait_floor_next(bigint[], bigint, bigint, bigint, bigint, bigint) IS
    'pgqueue internal: the wait floor the ordered hand-off records on the message it gives its group''s turn (where the group''s next hand-off starts its probe)';
