"""Model-based fuzz of the message-group promises (docs/guarantees.md, "Message groups"; README,
"Message groups and idempotent enqueue"). Nothing else drives the group semantics at random:
tests/test_fuzz_sql.py fuzzes bad inputs and table invariants.

A hypothesis state machine runs one grouped queue per example (group_concurrency n drawn from
1, 2, 3; max_attempts 3) through random steps from three consumer sessions: enqueue (one message
or a batch; with a group of four or none; due now, a priority, a past dequeue_at or a
dequeue_at 60 ms ahead), message_dequeue with a lease (1 to 4 messages), with a 1 ms lease (the
step waits until it ran out) and in delete mode, message_complete, message_complete_batch,
message_complete_and_dequeue, message_fail (with the queue's back-off, now, later, earlier),
message_defer, message_reject, message_heartbeat, a lease running out (locked_until set in
the past, as tests/test_client_groups.py does), message_cancel, a transaction holding its
dequeue open while another session dequeues (then committed or rolled back), and waits. A
second run (LockedGroupMachine, test_message_groups_keep_their_promises_behind_locks) adds a
dequeue that waits for a lock another session holds in an open transaction (docs/locking.md):
the queue's stripe (queue_alter, queue_drop rolled back) or a group's lock (an enqueue into the
group), with enqueues into other groups while it waits; the holder then commits or rolls back.
Fencing tokens are kept after their message moved on, so stale acknowledgements are fuzzed too.

The model is what the docs promise. After every step it is compared with pgqueue.message and
pgqueue.dead_letter (read by a fourth session), and:

1. In flight: at most n messages of a group leased at once, counted in the table (live leases)
   and in the model (handed out in lease mode and not finished, an expired lease included: it
   is handed out again, never the next one); within a held transaction the model counts its
   uncommitted leases as well. A group's turns (the messages that hold one: in flight, or
   waiting with it) never exceed n either: a turn is handed on only where the group has room.
2. Order within a group: a turn, once held, is kept until the message leaves (failed, deferred,
   expired: "Retries"), and each turn handed on goes to the first of the group's waiting
   messages by (dequeue_at, id) at that moment ("Order within a group"): no message that was
   already waiting without a turn precedes it, while a message added later with an earlier
   dequeue_at waits behind the turn holder. Checked on every turn handed on, and again on every
   message handed out (the same rule from the delivery's side). With n = 1 the model predicts the
   holder of each group's turn outright: the same message until it leaves (completed, cancelled,
   delivered in delete mode, dead-lettered: "Dead letters" pass the turn on), then the first
   of the rest. A message handed out is due (dequeue_at not ahead of the clock: "a turn handed to
   a scheduled message waits until it is due").
3. Nothing lost or duplicated: the live ids of the table are the model's, each leased or not,
   with the model's attempts; a message leaves only by a step that removes it (a dead letter
   by a take only for a lease that ran out max_attempts times); no delivery hands out a message
   twice or one under a live lease; each fencing call answers as its token says (docs,
   "Lease and fencing rules": an expired lease not yet handed out again still belongs to its
   holder); the dead letters are exactly the model's.
4. No stall: a group with messages always has a turn; after a message of the group leaves (or
   a lease of one message hands one out) a group left with room and waiting messages gets a
   turn ("when one leaves the queue"; with n > 1 a group may have fewer than n in flight only
   after a further round of a dequeue of several or a further take of
   message_complete_and_dequeue, docs "In flight"). At the end of each example every lease is given
   back (message_defer), everything becomes due, and repeated dequeues must drain every group;
   every message live then is handed out once, and every message ever enqueued ended completed,
   delivered, cancelled or dead-lettered.

Not asserted, as the docs do not promise it: order between groups, fairness between consumers,
completion order within a group when n > 1 (nor the order in which the group's turn holders
are handed out), that a dequeue of several fills a group's room (see "In flight").

Turns are read from pgqueue.message.turn_at, whose documented meaning (its column comment) is
the one of the docs: set while the message has its group's turn; NULL while it waits behind
earlier messages of its group. With n > 1 whether a dequeue of several hands a turn on is left
open by the docs, so the model learns each turn handed on from the table and checks that it
was the first waiting message's (and that none was taken back); with n = 1 it predicts them.

A violation this fuzz found (session 52): a message enqueued into a group that a further round
of a dequeue had left below its limit got the turn at once, ahead of the group's earlier waiting
messages (pgqueue._message_insert now hands that turn to the first waiting message);
test_a_message_enqueued_into_a_group_below_its_limit_waits_behind_the_groups_earlier_ones
reproduces the state deterministically. GroupMachine reaches it only by timing (a turn falling
due between two rounds of one dequeue; a dequeue that waits on a group's lock between its
rounds runs into its lock_timeout there and changes nothing); LockedGroupMachine reaches it
(a group below its limit with messages waiting, BELOW_THE_LIMIT) through its dequeue that waits
for a group's lock, and its run fails unless it does (LOCK_SITUATIONS).

Runs: PGQUEUE_FUZZ_EXAMPLES scales the number of examples (default: CI-sized, well under a
minute); the examples are derandomized unless PGQUEUE_FUZZ_RANDOM=1 (as tests/test_fuzz_sql.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, Phase, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from helpers import wait_for_lock_waiters

Conn = psycopg.Connection[Any]

SCALE = float(os.environ.get("PGQUEUE_FUZZ_EXAMPLES", "1"))
FUZZ = settings(
    deadline=None,
    derandomize=os.environ.get("PGQUEUE_FUZZ_RANDOM") != "1",
    database=None,
    # no shrinking: the steps depend on the clock (leases, scheduled messages), so a shrunk run
    # need not fail the same way; a failure's message lists the example's steps instead
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    max_examples=max(1, int(60 * SCALE)),
    stateful_step_count=80,
    print_blob=True,
)

#: four groups on spread lock stripes (hashtext & 255: c 58, b 160, a 177, d 250), so that calls
#: handing several groups' turns on take their locks in an order that matters
GROUPS = ("a", "b", "c", "d")
CONSUMERS = 3
MAX_ATTEMPTS = 3
LEASE_MS = 600_000  # never runs out by itself: a lease runs out only when a step makes it
RETRY_BASE_MS = 20
RETRY_CAP_MS = 160
SOON_MS = 60  # "a short future dequeue_at"
#: the situations of GroupMachine.dequeue_behind_a_lock (REQUIRED_SITUATIONS)
WAITED_ON_THE_STRIPE = "a dequeue waited on its queue's stripe (queue_alter or queue_drop in an open transaction)"
WAITED_ON_A_GROUPS_LOCK = "a dequeue waited on a group's lock (an enqueue into the group in an open transaction)"
BELOW_THE_LIMIT = "a group below its limit with messages waiting (after a dequeue of several)"
#: GROUPS from the lowest lock stripe to the highest
GROUPS_BY_STRIPE = ("c", "b", "a", "d")

_queue_numbers = itertools.count(1)


@dataclass
class Msg:
    """One message as the model knows it."""

    id: int
    group: str | None
    created: int  # the step that enqueued it
    dequeue_at: int | None = None  # None: read from the table at the end of the step ...
    due_range: tuple[int, int] = (0, 0)  # ... which must be within this range
    attempts: int = 0
    leased: bool = False  # handed out in lease mode and not finished (locked_until is set)
    expired: bool = False  # ... and the lease ran out
    turn: bool = False  # holds its group's turn (grouped messages only)
    granted: int = -1  # the step in which it got the turn ...
    grant_key: tuple[int, int] = (0, 0)  # ... and its (dequeue_at, id) then
    end: str = ""  # how it left: completed, delivered (delete mode), cancelled, dead

    @property
    def live(self) -> bool:
        return not self.end

    def key(self) -> tuple[int, int]:
        assert self.dequeue_at is not None
        return (self.dequeue_at, self.id)


@dataclass(frozen=True)
class Delivery:
    """A message handed out in lease mode to a consumer, with its fencing token."""

    consumer: int
    id: int
    token: int


@dataclass
class Step:
    """What one step did, and the groups as they were before it."""

    no: int
    kind: str
    turnless: dict[str, list[int]]  # each group's live messages without a turn, before the step
    holders: dict[str, set[int]]  # ... and those with one
    takes: bool = False  # a take ran: it may dead-letter a lease that ran out max_attempts times
    created: list[int] = field(default_factory=list)
    delivered: list[int] = field(default_factory=list)  # handed out, in either mode
    gone: list[int] = field(default_factory=list)  # handed out in delete mode
    fill: set[str] = field(default_factory=set)  # groups whose room must be filled by the end


def _rows(cur: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in cur.fetchall()]


class GroupMachine(RuleBasedStateMachine):
    """The state machine; the test gives it its sessions (class attributes of a subclass)."""

    conns: list[Conn]
    observer: Conn
    stats: Counter[str]

    def __init__(self) -> None:
        super().__init__()
        self.msgs: dict[int, Msg] = {}
        self.deliveries: list[Delivery] = []
        self.log: list[str] = []
        self.step_no = 0
        self.queue = ""
        self.queue_id = 0
        self.n = 0
        self.busy = False  # a step is running (still set after a step failed: no drain then)

    # -- helpers -----------------------------------------------------------------------------

    def record(self, text: str) -> None:
        self.log.append(f"[{self.step_no}] {text}")
        note(self.log[-1])

    def fail(self, what: str) -> None:
        tail = "\n".join(self.log[-60:])
        state = "\n".join(f"  {m}" for m in self.msgs.values() if m.live)
        raise AssertionError(f"{what}\n(queue {self.queue}, group_concurrency {self.n})\n"
                             f"steps (last 60):\n{tail}\nlive messages in the model:\n{state}")

    def seen(self, what: str) -> None:
        """Count a situation worth reaching (printed at the end of the test, and a hypothesis event)."""
        event(what)
        self.stats[what] += 1

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.fail(what)

    def clock(self) -> int:
        row = self.observer.execute("SELECT pgqueue.now_ms()").fetchone()
        assert row is not None
        return int(row[0])

    def live(self, group: str | None = None) -> list[Msg]:
        return [m for m in self.msgs.values() if m.live and (group is None or m.group == group)]

    def begin(self, kind: str, takes: bool = False) -> Step:
        self.step_no += 1
        self.busy = True
        turnless = {g: [m.id for m in self.live(g) if not m.turn] for g in GROUPS}
        holders = {g: {m.id for m in self.live(g) if m.turn} for g in GROUPS}
        return Step(self.step_no, kind, turnless, holders, takes)

    def at(self, when: str) -> int | None:
        """A dequeue_at for an enqueue: None (due now), a priority, a past time or a short future."""
        if when == "now":
            return None
        if when.startswith("priority"):
            return -1 - int(when[-1])  # pgqueue.priority_dequeue_at
        return self.clock() + (SOON_MS if when == "soon" else -1000)

    def created(self, step: Step, ids: list[int], groups: list[str | None], ats: list[int | None],
                t0: int, t1: int) -> None:
        self.check(len(ids) == len(set(ids)) and ids == sorted(ids) and not set(ids) & set(self.msgs),
                   f"enqueue returned ids {ids}: not new, distinct and in input order")
        for i, g, a in zip(ids, groups, ats, strict=True):
            m = Msg(i, g, step.no, due_range=(t0, t1) if a is None else (a, a))
            self.msgs[i] = m
            step.created.append(i)
        self.record(f"{step.kind}: {list(zip(ids, groups, ats, strict=True))}")

    def handed_out(self, step: Step, consumer: int, rows: list[tuple[Any, ...]], mode: str,
                   hands_on: bool = False) -> None:
        """Check and apply a dequeue's rows (id, attempts, dequeue_at); ``hands_on``: a lease of
        one message, which hands its group's turn on (a dequeue of several need not: "In flight")."""
        ids = [r[0] for r in rows]
        self.record(f"{step.kind} by consumer {consumer}: {[(r[0], r[1]) for r in rows]}")
        self.check(len(ids) == len(set(ids)), f"one call handed a message out twice: {ids}")
        now = self.clock()
        for msg_id, attempts, dequeue_at in rows:
            m = self.msgs.get(msg_id)
            self.check(m is not None and m.live, f"handed out message {msg_id}, which is not live in the model: {m}")
            assert m is not None
            self.check(not m.leased or m.expired, f"handed out message {msg_id} again while its lease is live")
            self.check(not (m.leased and m.attempts >= MAX_ATTEMPTS),
                       f"message {msg_id}'s lease ran out at max_attempts: handed out instead of dead-lettered")
            self.check(attempts == m.attempts + 1, f"message {msg_id} handed out with attempts {attempts}, "
                                                   f"the model has {m.attempts} before")
            self.check(dequeue_at == m.dequeue_at, f"message {msg_id} handed out with dequeue_at {dequeue_at}, "
                                                   f"the model has {m.dequeue_at}")
            self.check(dequeue_at <= now, f"message {msg_id} handed out before it was due ({dequeue_at} > {now})")
            first = not m.leased  # not an expired lease handed out again
            if not first:
                self.seen("an expired lease handed out again")
            m.attempts = attempts
            step.delivered.append(msg_id)
            if mode == "delete":
                m.end, m.leased, m.expired = "delivered", False, False
                step.gone.append(msg_id)
                if m.group is not None:
                    step.fill.add(m.group)  # it left with its turn (got in this step, if not before)
            else:
                m.leased, m.expired = True, mode == "short"
                self.deliveries.append(Delivery(consumer, msg_id, attempts))
                if m.group is not None and first and hands_on:
                    step.fill.add(m.group)

    def taken_dead(self, step: Step, conn: Conn) -> set[int]:
        """The leases that ran out max_attempts times and that a take dead-lettered, as ``conn``
        sees them (applied to the model)."""
        candidates = [m.id for m in self.leases() if m.expired and m.attempts >= MAX_ATTEMPTS]
        dead = {r[0] for r in conn.execute("SELECT id FROM pgqueue.dead_letter WHERE id = ANY (%s)", (candidates,))}
        for i in sorted(dead):
            self.record(f"message {i} dead-lettered by a take (its lease ran out at max_attempts)")
            self.seen("a take dead-lettered a lease that ran out")
            self.left(step, self.msgs[i], "dead")
        return dead

    def current(self, d: Delivery) -> bool:
        m = self.msgs[d.id]
        return m.live and m.leased and m.attempts == d.token

    def acknowledged(self, step: Step, ds: list[Delivery]) -> set[int]:
        """Apply a batch of acknowledgements in order; the ids completed. (message_complete_batch
        reports an id listed twice at each of its places, or at none if one of them completed it.)"""
        done = set()
        for d in ds:
            if self.current(d):
                self.left(step, self.msgs[d.id], "completed")
                done.add(d.id)
            else:
                self.seen("a stale acknowledgement")
        return done

    def left(self, step: Step, m: Msg, end: str) -> None:
        had_turn = m.turn
        m.end, m.leased, m.expired = end, False, False
        if m.group is not None and had_turn:
            step.fill.add(m.group)

    def pick(self, pick: int) -> Delivery:
        return self.deliveries.pop(pick % len(self.deliveries))

    def leases(self) -> list[Msg]:
        return [m for m in self.live() if m.leased]

    # -- the check after every step ---------------------------------------------------------------

    def sync(self, step: Step) -> None:
        rows = _rows(self.observer.execute(
            "SELECT id, group_key, dequeue_at, locked_until IS NOT NULL, locked_until > pgqueue.now_ms(), attempts, "
            "turn_at IS NOT NULL FROM pgqueue.message WHERE queue_id = %s", (self.queue_id,)))
        obs = {r[0]: r for r in rows}
        dead = {r[0] for r in self.observer.execute("SELECT id FROM pgqueue.dead_letter WHERE queue_id = %s",
                                                    (self.queue_id,))}
        live = {m.id for m in self.live()}
        for i in sorted(obs.keys() - live):
            self.fail(f"message {i} is in the table, the model has it {self.msgs[i].end or 'unknown'}"
                      if i in self.msgs else f"message {i} is in the table, never enqueued by the model")
        for i in sorted(live - obs.keys()):
            m = self.msgs[i]
            if i in dead and step.takes and m.leased and m.expired and m.attempts >= MAX_ATTEMPTS:
                self.record(f"message {i} dead-lettered by a take (its lease ran out at max_attempts)")
                self.seen("a take dead-lettered a lease that ran out")
                self.left(step, m, "dead")
            else:
                self.fail(f"message {i} is gone from the table (lost): {m}, in dead letters: {i in dead}")
        model_dead = {m.id for m in self.msgs.values() if m.end == "dead"}
        self.check(dead == model_dead, f"dead letters {sorted(dead)}, the model has {sorted(model_dead)}")
        for i, (_, group, dequeue_at, leased, lease_live, attempts, _turn) in obs.items():
            m = self.msgs[i]
            if m.dequeue_at is None:
                lo, hi = m.due_range
                self.check(lo - 1 <= dequeue_at <= hi + 1, f"message {i}: dequeue_at {dequeue_at} not in [{lo}, {hi}]")
                m.dequeue_at = dequeue_at
            self.check((group, dequeue_at, leased, attempts) == (m.group, m.dequeue_at, m.leased, m.attempts),
                       f"message {i} in the table: group {group}, dequeue_at {dequeue_at}, leased {leased}, "
                       f"attempts {attempts}; the model: {m}")
            self.check(not leased or lease_live != m.expired,
                       f"message {i}: lease live {lease_live}, the model has it expired {m.expired}")
        self.check_turns(step, obs)
        self.busy = False

    def check_turns(self, step: Step, obs: dict[int, tuple[Any, ...]]) -> None:
        n = self.n
        for g in GROUPS:
            ms = self.live(g)
            for m in ms:
                self.check(not m.turn or obs[m.id][6], f"message {m.id} of group {g} lost its turn")
            # (2) each turn handed on in this step went to the first waiting message at that moment
            new = [i for i in step.created if self.msgs[i].group == g]
            candidates = step.turnless[g] + new
            granted = [i for i in candidates if (self.msgs[i].live and obs[i][6]) or i in step.gone]
            waiting = [i for i in candidates if self.msgs[i].live and not obs[i][6]]
            for x in granted:
                mx = self.msgs[x]
                for p in waiting:
                    mp = self.msgs[p]
                    if mp.key() >= mx.key():
                        continue
                    if not (p in step.turnless[g] or (p in new and x in new and p < x)):
                        continue  # p came after x had the turn: it waits behind it
                    self.fail(f"group {g}: the turn went to message {x} {mx.key()} while message {p} "
                              f"{mp.key()}, earlier by (dequeue_at, id), waited without one")
            for x in granted:
                mx = self.msgs[x]
                mx.turn, mx.granted, mx.grant_key = True, step.no, mx.key()
            if granted:
                self.record(f"group {g}: turn handed to {granted}")
            # (2) again, from the side of each message handed out
            for i in step.delivered:
                md = self.msgs[i]
                if md.group != g:
                    continue
                self.check(md.turn, f"message {i} of group {g} handed out without its group's turn")
                for mp in ms:
                    if obs[mp.id][6] or mp.key() >= md.grant_key:
                        continue
                    existed = mp.created < md.granted or (mp.created == md.granted == md.created and mp.id < md.id)
                    if not existed:
                        self.seen("handed out ahead of a later message with an earlier dequeue_at (it waits behind)")
                    self.check(not existed, f"group {g}: message {i} {md.grant_key} handed out while message "
                                            f"{mp.id} {mp.key()}, earlier and waiting when {i} got the turn, "
                                            f"still waits without one")
            # (1) in flight, and the turns
            leased = sum(m.leased for m in ms)
            live_leases = sum(bool(obs[m.id][4]) for m in ms)
            holders = [m for m in ms if m.turn]
            self.check(leased <= n and live_leases <= n,
                       f"group {g}: {leased} leased ({live_leases} live) with group_concurrency {n}")
            self.check(len(holders) <= n, f"group {g}: {len(holders)} turns {[m.id for m in holders]}, "
                                          f"group_concurrency {n}")
            # (4) no stall; the room filled after a message of the group left
            waiting_now = [m for m in ms if not m.turn]
            self.check(not waiting_now or bool(holders),
                       f"group {g} stalls: messages {[m.id for m in waiting_now]} wait and none has the turn")
            if n > 1 and waiting_now and not any(not m.leased for m in holders) and leased < n:
                self.seen(BELOW_THE_LIMIT)
            if n > 1 and g in step.fill:
                self.check(not waiting_now or any(not m.leased for m in holders) or leased >= n,
                           f"group {g}: room for a turn left after step {step.kind}, messages "
                           f"{[m.id for m in waiting_now]} wait without one")
            if n == 1 and ms:
                still = [i for i in step.holders[g] if self.msgs[i].live]
                if still:
                    expected = still[0]
                elif step.holders[g] or not new:
                    expected = min(ms, key=Msg.key).id
                else:
                    expected = min(new)
                self.check([m.id for m in holders] == [expected],
                           f"group {g}: the turn is with {[m.id for m in holders]}, the model expects {expected}")

    # -- rules ---------------------------------------------------------------------------------
    # No preconditions: hypothesis replays a run's choices, and which rules could run would depend
    # on the clock (what a dequeue found due); a rule without a target does nothing instead.

    @initialize(n=st.sampled_from([1, 2, 3]))
    def create_queue(self, n: int) -> None:
        self.n = n
        self.queue = f"fuzz_groups_{os.getpid()}_{next(_queue_numbers)}"
        self.conns[0].execute(
            "SELECT pgqueue.queue_create(%s, p_lock_ms => %s, p_max_attempts => %s, p_retry_base_ms => %s, "
            "p_retry_cap_ms => %s, p_group_concurrency => %s)",
            (self.queue, LEASE_MS, MAX_ATTEMPTS, RETRY_BASE_MS, RETRY_CAP_MS, n))
        row = self.conns[0].execute("SELECT id FROM pgqueue.queue WHERE name = %s", (self.queue,)).fetchone()
        assert row is not None
        self.queue_id = row[0]
        self.seen(f"group_concurrency {n}")
        self.record(f"queue_create {self.queue} group_concurrency {n}")

    groups = st.sampled_from(GROUPS + GROUPS[:2] + (None,))
    whens = st.sampled_from(["now", "now", "now", "priority0", "priority1", "past", "soon"])
    consumers = st.integers(0, CONSUMERS - 1)

    @rule(consumer=consumers, group=groups, when=whens)
    def enqueue(self, consumer: int, group: str | None, when: str) -> None:
        step = self.begin("enqueue")
        at = self.at(when)
        t0 = self.clock()
        row = self.conns[consumer].execute("SELECT pgqueue.message_create(%s, 'x'::bytea, %s::bigint, p_group => %s)",
                                           (self.queue, at, group)).fetchone()
        assert row is not None
        self.created(step, [row[0]], [group], [at], t0, self.clock())
        self.sync(step)

    @rule(consumer=consumers, items=st.lists(st.tuples(groups, whens), min_size=1, max_size=5))
    def enqueue_batch(self, consumer: int, items: list[tuple[str | None, str]]) -> None:
        step = self.begin("enqueue batch")
        ats = [self.at(w) for _, w in items]
        groups = [g for g, _ in items]
        t0 = self.clock()
        ids = [r[0] for r in self.conns[consumer].execute(
            "SELECT * FROM pgqueue.message_create_batch(%s, %s::bytea[], p_dequeue_ats => %s::bigint[], "
            "p_groups => %s::text[])", (self.queue, [b"x"] * len(items), ats, groups))]
        self.created(step, ids, groups, ats, t0, self.clock())
        self.sync(step)

    def dequeue_step(self, consumer: int, limit: int, mode: str) -> list[int]:
        step = self.begin(f"dequeue {mode} {limit}", takes=True)
        lock = {"lease": LEASE_MS, "short": 1, "delete": 0}[mode]
        rows = _rows(self.conns[consumer].execute(
            "SELECT id, attempts, dequeue_at FROM pgqueue.message_dequeue(%s, %s, %s)", (self.queue, limit, lock)))
        if mode == "short":
            time.sleep(0.005)  # the 1 ms leases have run out
        self.handed_out(step, consumer, rows, mode, hands_on=mode != "delete" and limit == 1)
        self.sync(step)
        return [r[0] for r in rows]

    @rule(consumer=consumers, limit=st.integers(1, 4), mode=st.sampled_from(["lease", "lease", "short", "delete"]))
    def dequeue(self, consumer: int, limit: int, mode: str) -> None:
        self.dequeue_step(consumer, limit, mode)

    def complete_step(self, d: Delivery) -> None:
        step = self.begin("complete")
        row = self.conns[d.consumer].execute("SELECT pgqueue.message_complete(%s, %s)", (d.id, d.token)).fetchone()
        assert row is not None
        self.record(f"complete {d} -> {row[0]}")
        self.check(row[0] == self.current(d), f"message_complete{d} returned {row[0]}: "
                                              f"the model has {self.msgs[d.id]}")
        if row[0]:
            self.left(step, self.msgs[d.id], "completed")
        self.sync(step)

    @rule(pick=st.integers(0, 1 << 20))
    def complete(self, pick: int) -> None:
        if self.deliveries:
            self.complete_step(self.pick(pick))

    @rule(picks=st.lists(st.integers(0, 1 << 20), min_size=1, max_size=3))
    def complete_batch(self, picks: list[int]) -> None:
        ds = [self.pick(p) for p in picks if self.deliveries]
        if not ds:
            return
        step = self.begin("complete batch")
        row = self.conns[ds[0].consumer].execute("SELECT pgqueue.message_complete_batch(%s::bigint[], %s::integer[])",
                                                 ([d.id for d in ds], [d.token for d in ds])).fetchone()
        assert row is not None
        self.record(f"complete batch {ds} -> stale {row[0]}")
        done = self.acknowledged(step, ds)
        stale = [d.id for d in ds if d.id not in done]
        self.check(list(row[0]) == stale, f"message_complete_batch: stale {row[0]}, the model expects {stale}")
        self.sync(step)

    @rule(consumer=consumers, limit=st.integers(1, 3), acks=st.integers(0, 3), delete=st.booleans())
    def complete_and_dequeue(self, consumer: int, limit: int, acks: int, delete: bool) -> None:
        mine = [d for d in self.deliveries if d.consumer == consumer][:acks]
        for d in mine:
            self.deliveries.remove(d)
        step = self.begin("complete and dequeue", takes=True)
        rows = _rows(self.conns[consumer].execute(
            "SELECT id, attempts, dequeue_at, stale FROM pgqueue.message_complete_and_dequeue("
            "%s::bigint[], %s::integer[], %s, %s, %s)",
            ([d.id for d in mine], [d.token for d in mine], self.queue, limit, 0 if delete else LEASE_MS)))
        self.record(f"complete and dequeue: acks {mine}")
        # the call's dequeue runs before its acknowledgements (a lease of theirs that ran out may be
        # handed out first, making the acknowledgement stale)
        self.handed_out(step, consumer, [r[:3] for r in rows if not r[3]], "delete" if delete else "lease")
        self.taken_dead(step, self.observer)  # ... or dead-letter it, if it ran out max_attempts times
        done = self.acknowledged(step, mine)
        stale = [(d.id, d.token) for d in mine if d.id not in done]
        self.check([(r[0], r[1]) for r in rows if r[3]] == stale,
                   f"message_complete_and_dequeue: stale {[r[:2] for r in rows if r[3]]}, the model expects {stale}")
        self.sync(step)

    @rule(pick=st.integers(0, 1 << 20), how=st.sampled_from(["backoff", "backoff", "now", "soon", "past"]))
    def fail_message(self, pick: int, how: str) -> None:
        if not self.deliveries:
            return
        d = self.pick(pick)
        step = self.begin("fail")
        t0 = self.clock()
        at = {"backoff": None, "now": t0, "soon": t0 + SOON_MS, "past": t0 - 1000}[how]
        row = self.conns[d.consumer].execute("SELECT pgqueue.message_fail(%s, %s, 'boom', %s::bigint)",
                                             (d.id, d.token, at)).fetchone()
        t1 = self.clock()
        assert row is not None
        self.record(f"fail {d} {how} -> {row[0]}")
        self.check(row[0] == self.current(d), f"message_fail{d} returned {row[0]}: the model has {self.msgs[d.id]}")
        if row[0]:
            m = self.msgs[d.id]
            if d.token >= MAX_ATTEMPTS:
                self.left(step, m, "dead")
            else:
                m.leased = m.expired = False
                back = min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** (d.token - 1))
                m.dequeue_at, m.due_range = None, (t0 + back // 2, t1 + back) if at is None else (at, at)
        self.sync(step)

    @rule(pick=st.integers(0, 1 << 20), how=st.sampled_from(["now", "soon", "priority"]))
    def defer(self, pick: int, how: str) -> None:
        if self.deliveries:
            self.defer_step(self.pick(pick), how)

    def defer_step(self, d: Delivery, how: str) -> None:
        step = self.begin("defer")
        t0 = self.clock()
        at = {"now": None, "soon": t0 + SOON_MS, "priority": -2}[how]
        row = self.conns[d.consumer].execute("SELECT pgqueue.message_defer(%s, %s, %s::bigint)",
                                             (d.id, d.token, at)).fetchone()
        t1 = self.clock()
        assert row is not None
        self.record(f"defer {d} {how} -> {row[0]}")
        self.check(row[0] == self.current(d), f"message_defer{d} returned {row[0]}: the model has {self.msgs[d.id]}")
        if row[0]:
            m = self.msgs[d.id]
            m.leased = m.expired = False
            m.dequeue_at, m.due_range = None, (t0, t1) if at is None else (at, at)
        self.sync(step)

    @rule(pick=st.integers(0, 1 << 20))
    def reject(self, pick: int) -> None:
        if not self.deliveries:
            return
        d = self.pick(pick)
        step = self.begin("reject")
        row = self.conns[d.consumer].execute("SELECT pgqueue.message_reject(%s, %s, 'no')", (d.id, d.token)).fetchone()
        assert row is not None
        self.record(f"reject {d} -> {row[0]}")
        self.check(row[0] == self.current(d), f"message_reject{d} returned {row[0]}: the model has {self.msgs[d.id]}")
        if row[0]:
            self.left(step, self.msgs[d.id], "dead")
        self.sync(step)

    @rule(pick=st.integers(0, 1 << 20))
    def heartbeat(self, pick: int) -> None:
        if not self.deliveries:
            return
        d = self.deliveries[pick % len(self.deliveries)]  # the delivery stays held
        step = self.begin("heartbeat")
        row = self.conns[d.consumer].execute("SELECT pgqueue.message_heartbeat(%s, %s, %s)",
                                             (d.id, d.token, LEASE_MS)).fetchone()
        assert row is not None
        self.record(f"heartbeat {d} -> {row[0]}")
        self.check(row[0] == self.current(d), f"message_heartbeat{d} returned {row[0]}: "
                                              f"the model has {self.msgs[d.id]}")
        if row[0]:
            self.msgs[d.id].expired = False
        self.sync(step)

    @rule(pick=st.integers(0, 1 << 20))
    def lease_runs_out(self, pick: int) -> None:
        running = sorted((m for m in self.leases() if not m.expired), key=lambda m: m.id)
        if not running:
            return
        m = running[pick % len(running)]
        step = self.begin("lease runs out")
        got = self.observer.execute("UPDATE pgqueue.message SET locked_until = pgqueue.now_ms() - 1 "
                                    "WHERE id = %s AND locked_until IS NOT NULL RETURNING id", (m.id,)).fetchall()
        self.record(f"lease of {m.id} runs out")
        self.check(len(got) == 1, f"message {m.id} was not leased in the table")
        m.expired = True
        self.sync(step)

    @rule(picks=st.lists(st.integers(0, 1 << 20), min_size=1, max_size=3), gone=st.booleans())
    def cancel(self, picks: list[int], gone: bool) -> None:
        live = sorted(m.id for m in self.live())
        if not live:
            return
        ids = sorted({live[p % len(live)] for p in picks})
        ended = sorted(m.id for m in self.msgs.values() if not m.live)
        if gone and ended:
            ids.append(ended[picks[0] % len(ended)])  # a message that left: nothing to cancel
        step = self.begin("cancel")
        got = [r[0] for r in self.conns[picks[0] % CONSUMERS].execute(
            "SELECT id FROM pgqueue.message_cancel(%s, %s::bigint[])", (self.queue, ids))]
        self.record(f"cancel {ids} -> {got}")
        expected = sorted(i for i in ids if self.msgs[i].live and (not self.msgs[i].leased or self.msgs[i].expired))
        self.check(got == expected, f"message_cancel({ids}) removed {got}, the model expects {expected} "
                                    "(ready, scheduled or with an expired lease)")
        for i in got:
            self.left(step, self.msgs[i], "cancelled")
        self.sync(step)

    @rule(a=consumers, other=st.integers(1, CONSUMERS - 1), limit_a=st.integers(1, 3), limit_b=st.integers(1, 3),
          complete_inside=st.booleans(), commit=st.booleans())
    def held_transaction(self, a: int, other: int, limit_a: int, limit_b: int, complete_inside: bool,
                         commit: bool) -> None:
        """Session a dequeues in a transaction it holds open (and may complete one message in it)
        while session b dequeues; then a commits or rolls back. b's dequeue may wait on a group's
        lock that a holds: its lock_timeout ends the wait, and the call changes nothing."""
        b = (a + other) % CONSUMERS
        step = self.begin("held transaction", takes=True)
        saved = {m.id: dataclasses.replace(m) for m in self.live()}
        held = len(self.deliveries)
        ca, cb = self.conns[a], self.conns[b]
        ca.execute("BEGIN")
        rows = _rows(ca.execute("SELECT id, attempts, dequeue_at FROM pgqueue.message_dequeue(%s, %s, %s)",
                                (self.queue, limit_a, LEASE_MS)))
        self.handed_out(step, a, rows, "lease")
        ours = {r[0] for r in rows} | self.taken_dead(step, ca)  # (seen by a alone until it commits)
        mine = self.deliveries[held:]
        if complete_inside and mine:
            row = ca.execute("SELECT pgqueue.message_complete(%s, %s)", (mine[0].id, mine[0].token)).fetchone()
            assert row is not None
            self.record(f"complete {mine[0]} inside the transaction -> {row[0]}")
            self.check(row[0] is True, f"message_complete{mine[0]} in the transaction that leased it returned {row[0]}")
            self.left(step, self.msgs[mine[0].id], "completed")
        fill_a, step.fill = step.fill, set()
        self.seen("a dequeue beside another session's open transaction that dequeued")
        try:
            rows_b = _rows(cb.execute("SELECT id, attempts, dequeue_at FROM pgqueue.message_dequeue(%s, %s, %s)",
                                      (self.queue, limit_b, LEASE_MS)))
        except psycopg.errors.LockNotAvailable:
            self.record(f"consumer {b}'s dequeue waited on a lock of the open transaction (lock_timeout)")
            self.seen("held transaction: the other dequeue timed out on a lock")
            rows_b = []
        self.handed_out(step, b, rows_b, "lease")
        self.taken_dead(step, self.observer)
        for g in GROUPS:  # a's uncommitted leases count too
            leased = sum(m.leased for m in self.live(g))
            self.check(leased <= self.n, f"group {g}: {leased} leased, the open transaction's included, "
                                         f"group_concurrency {self.n}")
        ca.execute("COMMIT" if commit else "ROLLBACK")
        self.record("commit" if commit else "rollback")
        if commit:
            self.deliveries = [d for d in self.deliveries if not (complete_inside and mine and d == mine[0])]
            step.fill |= fill_a
        else:  # what a did is undone
            for i in ours:
                self.msgs[i] = saved[i]
            self.deliveries = [d for d in self.deliveries if d not in mine]
            step.delivered = [i for i in step.delivered if i not in ours]
        self.sync(step)

    @rule(ms=st.sampled_from([5, 25, 70]))
    def wait(self, ms: int) -> None:
        step = self.begin(f"wait {ms} ms")
        time.sleep(ms / 1000)
        self.record(f"waited {ms} ms")
        self.sync(step)

    # -- the end of an example ---------------------------------------------------------------

    def teardown(self) -> None:
        try:
            for c in self.conns:
                if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    c.execute("ROLLBACK")
            if self.queue and not self.busy:
                self.drain()
        finally:
            if self.queue:
                self.conns[0].execute("SELECT pgqueue.queue_drop(%s)", (self.queue,))

    def drain(self) -> None:
        """(4) Every lease given back, everything due: repeated dequeues drain every group; (3)
        every message live then is handed out once, and every message ended somewhere."""
        self.record("drain")
        for m in sorted(self.leases(), key=lambda m: m.id):
            self.defer_step(Delivery(0, m.id, m.attempts), "now")
        self.deliveries = []
        due = max((m.key()[0] for m in self.live()), default=0)
        while (left := due - self.clock()) >= 0:
            time.sleep(left / 1000 + 0.002)
        step = self.begin("all due")
        self.sync(step)
        start = {m.id for m in self.live()}
        handed: list[int] = []
        idle = 0
        for call in itertools.count():
            if not self.live():
                break
            self.check(call < 20 + 4 * len(start), "the drain does not end")
            ids = self.dequeue_step(call % CONSUMERS, call % 4 + 1, "lease")
            handed += ids
            if not ids:
                idle += 1
                stuck = {g: [m.id for m in self.live(g)] for g in GROUPS if self.live(g)}
                self.check(idle <= 5, f"nothing handed out, all due and no lease held: groups stall {stuck}")
                time.sleep(0.025)
                continue
            idle = 0
            for d in [d for d in self.deliveries if d.id in ids]:
                self.deliveries.remove(d)
                self.complete_step(d)
        self.check(sorted(handed) == sorted(start), f"the drain handed out {sorted(handed)}, "
                                                    f"the messages live were {sorted(start)}")
        row = self.observer.execute("SELECT count(*) FROM pgqueue.message WHERE queue_id = %s",
                                    (self.queue_id,)).fetchone()
        self.check(row == (0,), f"{row} messages left in the table after the drain")
        ends = {m.id: m.end for m in self.msgs.values()}
        self.check(all(ends.values()), f"messages not ended: {[i for i, e in ends.items() if not e]}")
        self.record(f"ended: { {e: sum(v == e for v in ends.values()) for e in set(ends.values())} }")

class LockedGroupMachine(GroupMachine):
    """GroupMachine with a step that makes a dequeue wait for a lock: run on its own
    (test_message_groups_keep_their_promises_behind_locks), so that GroupMachine's run, and what
    it reaches, stays as it was. Its queues have a group concurrency other than 1, where a lease
    hands its group's turn on, under the group's lock: the waits and the states it is for."""

    @initialize(n=st.sampled_from([2, 3]))
    def create_queue(self, n: int) -> None:
        super().create_queue(n)

    @rule(holder=GroupMachine.consumers, other=st.integers(1, CONSUMERS - 1), limit=st.integers(1, 4),
          lock=st.sampled_from(["queue_alter", "queue_drop", "group", "group", "group"]),
          group=st.sampled_from([*GROUPS, "highest ready", "highest ready"]),
          meanwhile=st.one_of(st.lists(st.sampled_from(GROUPS), max_size=3),
                              st.tuples(st.sampled_from(GROUPS), st.integers(2, 4)).map(lambda t: [t[0]] * t[1])),
          commit=st.booleans(), shape=st.sampled_from(["drawn", "drawn", "session 52"]))
    def dequeue_behind_a_lock(self, holder: int, other: int, limit: int, lock: str, group: str,
                              meanwhile: list[str], commit: bool, shape: str) -> None:
        """Session ``holder`` holds, in an open transaction, a lock a message_dequeue needs:
        the queue's stripe (docs/locking.md: a queue_alter of the group concurrency, to the
        value it has, or a queue_drop, rolled back) or a group's lock (an enqueue into the
        group, which a dequeue handing that group's turn on waits for). Session b's dequeue of
        ``limit`` messages (no lock_timeout) runs on a thread; once it waits for a group's lock
        the third session enqueues into other groups (``meanwhile``; an enqueue that would wait
        for a lock the dequeue holds runs into its lock_timeout and makes nothing), the holder
        commits or rolls back (a drop: rolls back), and the dequeue goes on. A dequeue that
        does not wait for the stripe fails the step (docs/locking.md, rule 1). Its
        further rounds may then leave a group below its limit with messages waiting (docs,
        "In flight"), the state the steps after check the promises in. ``group`` "highest
        ready": the highest-stripe group with a turn holder due and not leased (the session-52
        reproduction's shape: the dequeue hands that group's message out and waits for its lock
        to hand its turn on, and its further round, with a meanwhile group of a lower stripe
        among the turns, may not hand that group's turn on). ``shape`` "session 52" draws that
        shape whatever else was drawn: a group's lock, a dequeue of 4, three messages into the
        lowest-stripe other group meanwhile."""
        b = (holder + other) % CONSUMERS
        third = 3 - holder - b
        if shape == "session 52":  # (the reproduction's shape, whatever the rest drew)
            lock, group, limit = "group", "highest ready", 4
        step = self.begin(f"dequeue behind a lock ({lock})", takes=True)
        if group == "highest ready":  # the group whose turn a dequeue hands on last, if it hands a message out
            now = self.clock()
            ready = [m.group for m in self.live() if m.turn and not m.leased and (m.dequeue_at or now) <= now]
            if not ready and shape == "session 52":  # one more message of the highest group, to hand out
                t1 = self.clock()
                row = self.conns[third].execute("SELECT pgqueue.message_create(%s, 'x'::bytea, p_group => %s)",
                                                (self.queue, GROUPS_BY_STRIPE[-1])).fetchone()
                assert row is not None
                self.created(step, [row[0]], [GROUPS_BY_STRIPE[-1]], [None], t1, self.clock())
            group = max(ready or GROUPS, key=GROUPS_BY_STRIPE.index)
        if shape == "session 52":  # three messages into the lowest other group while the dequeue waits
            meanwhile = [min(set(GROUPS) - {group}, key=GROUPS_BY_STRIPE.index)] * 3
        ch, cb = self.conns[holder], self.conns[b]
        ch.execute("BEGIN")
        held: list[tuple[list[int], list[str | None], list[int | None], int, int]] = []
        t0 = self.clock()
        if lock == "queue_alter":
            ch.execute("SELECT pgqueue.queue_alter(%s, p_group_concurrency => %s)", (self.queue, self.n))
        elif lock == "queue_drop":
            ch.execute("SELECT pgqueue.queue_drop(%s)", (self.queue,))
            commit = False
        else:
            row = ch.execute("SELECT pgqueue.message_create(%s, 'x'::bytea, p_group => %s)",
                             (self.queue, group)).fetchone()
            assert row is not None
            held.append(([row[0]], [group], [None], t0, self.clock()))
        self.record(f"consumer {holder} holds {lock} {group if lock == 'group' else ''} in an open transaction")
        outcome: list[object] = []

        def dequeue() -> None:
            try:
                with cb.transaction():
                    cb.execute("SET LOCAL lock_timeout = '20s'")
                    outcome.append(_rows(cb.execute(
                        "SELECT id, attempts, dequeue_at FROM pgqueue.message_dequeue(%s, %s, %s)",
                        (self.queue, limit, LEASE_MS))))
            except psycopg.Error as exc:
                outcome.append(exc)

        thread = threading.Thread(target=dequeue)
        thread.start()
        waited = False
        try:
            deadline = time.monotonic() + 10
            while thread.is_alive() and time.monotonic() < deadline:
                row = self.observer.execute("SELECT %s = ANY (pg_blocking_pids(%s))",
                                            (ch.info.backend_pid, cb.info.backend_pid)).fetchone()
                if row is not None and row[0]:
                    waited = True
                    break
                thread.join(0.002)
            if waited:
                if lock != "group":
                    self.seen(WAITED_ON_THE_STRIPE)
                elif self.observer.execute(  # (the waiter holds the tuple lock of the row it waits for)
                        "SELECT EXISTS (SELECT FROM pg_locks WHERE pid = %s AND locktype = 'tuple' "
                        "AND relation = 'pgqueue.message_group_lock'::regclass)", (cb.info.backend_pid,)).fetchone() == (True,):
                    self.seen(WAITED_ON_A_GROUPS_LOCK)
                else:  # (another of the open enqueue's rows: not counted as the group's lock)
                    self.seen("a dequeue waited for another session's open enqueue, not on a group's lock")
                for g in meanwhile if lock == "group" else []:  # (behind a stripe an enqueue waits too)
                    if g == group:
                        continue  # (it would wait for the holder: its lock_timeout, nothing made)
                    t1 = self.clock()
                    try:
                        row = self.conns[third].execute("SELECT pgqueue.message_create(%s, 'x'::bytea, p_group => %s)",
                                                        (self.queue, g)).fetchone()
                    except psycopg.errors.LockNotAvailable:
                        self.record(f"consumer {third}'s enqueue into {g} waited on the dequeue's lock (lock_timeout)")
                        continue
                    assert row is not None
                    self.created(step, [row[0]], [g], [None], t1, self.clock())
            elif lock != "group":
                self.fail(f"the dequeue did not wait for the queue's stripe held by {lock}: {outcome}")
        finally:
            ch.execute("COMMIT" if commit else "ROLLBACK")
            thread.join(30)
        self.record(("commit" if commit else "rollback") + f" of consumer {holder}'s transaction")
        self.check(not thread.is_alive(), "the dequeue did not end once the lock was given back")
        if commit:
            for ids, groups_, ats, lo, hi in held:
                self.created(step, ids, groups_, ats, lo, hi)
        rows = outcome[0] if outcome else None
        if not isinstance(rows, list):
            self.fail(f"the dequeue behind {lock} failed: {rows!r}")
        assert isinstance(rows, list)
        for msg_id, _, dequeue_at in rows:  # (made in this step: sync has not read their dequeue_at yet)
            m = self.msgs.get(msg_id)
            if m is not None and m.dequeue_at is None:
                lo, hi = m.due_range
                self.check(lo - 1 <= dequeue_at <= hi + 1, f"message {msg_id}: dequeue_at {dequeue_at} not in [{lo}, {hi}]")
                m.dequeue_at = dequeue_at
        self.handed_out(step, b, rows, "lease", hands_on=limit == 1)
        self.sync(step)


#: What a run of the default size must reach at least once (in 60 examples of 80 steps each was
#: reached 11 to 587 times alone, 7 to 785 times after tests/test_index_probes.py, session 67).
#: Not required: a take that dead-letters a lease that ran out max_attempts times (11 times
#: alone, 0 after tests/test_index_probes.py until a run of 160 steps: its leases must run
#: out three times, which the clock decides), the other dequeue's lock wait behind the open
#: transaction (lock_timeout) and a group left below its limit with messages waiting after a
#: dequeue of several (both 0 times: LockedGroupMachine's run reaches the second, and dequeues
#: that wait for a lock, LOCK_SITUATIONS).
REQUIRED_SITUATIONS = (
    "a stale acknowledgement", "an expired lease handed out again",
    "handed out ahead of a later message with an earlier dequeue_at (it waits behind)",
    "a dequeue beside another session's open transaction that dequeued",
    "group_concurrency 1", "group_concurrency 2", "group_concurrency 3",
)


def test_message_groups_keep_their_promises(dsn: str) -> None:
    _run_until_reached(dsn, GroupMachine, FUZZ, REQUIRED_SITUATIONS)


#: What the run of LockedGroupMachine must reach at least once: a dequeue that waits for each
#: kind of lock, and a group left below its limit with messages waiting (reached 0 times by
#: GroupMachine, whose other dequeue behind an open transaction gives up at its lock_timeout).
#: (session 69, in 20 examples of 50 steps: 23, 16 and 39 times derandomized; 8 to 61, 4 to 28
#: and 12 to 63 times in three runs with PGQUEUE_FUZZ_RANDOM=1)
LOCK_SITUATIONS = (
    WAITED_ON_THE_STRIPE, WAITED_ON_A_GROUPS_LOCK,
    BELOW_THE_LIMIT,
)
LOCK_FUZZ = settings(FUZZ, max_examples=max(1, int(20 * SCALE)), stateful_step_count=50)


def test_message_groups_keep_their_promises_behind_locks(dsn: str) -> None:
    """GroupMachine's promises checked with dequeues that wait for a lock another session holds
    (LockedGroupMachine.dequeue_behind_a_lock), and in the states they leave."""
    _run_until_reached(dsn, LockedGroupMachine, LOCK_FUZZ, LOCK_SITUATIONS)


def _run_until_reached(dsn: str, machine_class: type[GroupMachine], fuzz: settings,
                       required: tuple[str, ...]) -> None:
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(CONSUMERS)]
    observer = psycopg.connect(dsn, autocommit=True)
    try:
        for c in conns:
            c.execute("SET lock_timeout = '100ms'")  # see GroupMachine.held_transaction
        stats: Counter[str] = Counter()
        machine = type("Machine", (machine_class,), {"conns": conns, "observer": observer, "stats": stats})
        run_state_machine_as_test(machine, settings=fuzz)
        print("situations reached:", dict(sorted(stats.items())))
        # The situations the promises are about must be reached (a change to the steps or the
        # extension that no longer reaches one would leave the test green: a review). The steps
        # depend on the clock, so a busy machine reaches some less often: up to two more runs,
        # each with more steps an example (other examples, derandomized all the same).
        for steps in (fuzz.stateful_step_count * 3 // 2, fuzz.stateful_step_count * 2):
            if SCALE < 1 or all(stats[s] for s in required):
                break
            run_state_machine_as_test(machine, settings=settings(fuzz, stateful_step_count=steps))
            print(f"situations reached, with a run of {steps} steps an example:", dict(sorted(stats.items())))
        if SCALE >= 1:
            assert not {s for s in required if not stats[s]}, dict(stats)
    finally:
        for c in [*conns, observer]:
            c.close()


def test_a_message_enqueued_into_a_group_below_its_limit_waits_behind_the_groups_earlier_ones(dsn: str) -> None:
    """docs/guarantees.md, "Message groups": with n other than 1, a lease that a further round of
    a message_dequeue of several hands out gives its group the next turn only if the call holds
    the group's lock (or may take it in stripe order); "otherwise the group's next turn waits
    until a message of the group leaves". And "the group's next message is the first of its
    waiting messages by (dequeue_at, id)". A producer's message enqueued into such a group took
    the room at once and was handed out ahead of the group's earlier waiting message (until
    session 52: pgqueue._message_insert now gives that turn to the first waiting message).

    The reproduction (group_concurrency 2; group lo on stripe 2, hi on stripe 240):
      S0: message_create('q', 'h1', p_group => 'epsilon')                -- hi, has the turn
      S1: BEGIN; message_create('q', 'h2', p_group => 'epsilon')          -- holds hi's lock
      S2: message_dequeue('q', 3, 600000)                                 -- h1; waits for hi's lock
      S0: message_create('q', 'l1', p_group => 'eta'); ... 'l2' ...       -- lo: l1 the turn, l2 waits
      S1: COMMIT   -- S2: round 2 hands out l1 (and h2): lo's stripe is below hi's, no turn handed on
      S0: message_create('q', 'l3', p_group => 'eta')                     -- gets the turn (room)
      S0: message_dequeue('q', 5, 600000)                                 -- l3, while l2 waits
    """
    with psycopg.connect(dsn, autocommit=True) as s0:
        s0.execute("SELECT pgqueue.queue_create('q', p_group_concurrency => 2, p_lock_ms => 600000)")
        stripes = dict(_rows(s0.execute("SELECT g, hashtext(g) & 255 FROM unnest(ARRAY['eta', 'epsilon']) g")))
        if stripes != {"eta": 2, "epsilon": 240}:  # (the set-up's failures are not the expected one)
            pytest.fail(f"stripes {stripes}")
        s0.execute("SELECT pgqueue.message_create('q', 'h1', p_group => 'epsilon')")
        got: list[str] = []

        def dequeue() -> None:
            with psycopg.connect(dsn, autocommit=True) as s2:
                got.extend(r[0] for r in s2.execute(
                    "SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('q', 3, 600000)"))

        s2 = threading.Thread(target=dequeue)
        with psycopg.connect(dsn) as s1:
            s1.execute("SELECT pgqueue.message_create('q', 'h2', p_group => 'epsilon')")
            s2.start()
            wait_for_lock_waiters(s0, 1)
            s0.execute("SELECT pgqueue.message_create('q', 'l1', p_group => 'eta')")
            s0.execute("SELECT pgqueue.message_create('q', 'l2', p_group => 'eta')")
        s2.join(20)
        if sorted(got) != ["h1", "h2", "l1"]:  # round 2 handed out l1, with no turn handed on for eta
            pytest.fail(f"the dequeue handed out {got}")
        s0.execute("SELECT pgqueue.message_create('q', 'l3', p_group => 'eta')")
        nxt = [r[0] for r in s0.execute("SELECT convert_from(content, 'UTF8') FROM pgqueue.message_dequeue('q', 5, 600000)")]
        assert "l3" not in nxt, f"l3 handed out ({nxt}) while l2, enqueued before it, waits without a turn"
        assert nxt == ["l2"], nxt  # l2 has the turn l3's enqueue found room for; l1 and l2 fill the limit
