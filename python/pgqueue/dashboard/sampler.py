"""The dashboard's own history: a background thread samples every queue's counts (and the
extension's counters, where it has them) every few seconds and keeps the last hour, so that
the charts need no Prometheus.

Throughput comes from the extension's per-queue counters when the database has
``pgqueue.queue_counters()``; without them it is estimated from the samples: per queue, the net
change of its live messages per second and the dead letters added per second; for all queues
together, messages enqueued per second (the growth of the message id sequence) and messages
that left the queues (enqueued minus the growth of the live ones: completed, deleted on
dequeue, cancelled or dead-lettered).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import psycopg

from pgqueue.client import all_counters, all_stats
from pgqueue.dashboard import _sql
from pgqueue.errors import PgQueueError
from pgqueue.message import QueueStats

log = logging.getLogger("pgqueue.dashboard")

#: The counters of pgqueue.QueueCounters the throughput chart shows, in this order.
COUNTERS = ("enqueued", "delivered", "completed", "failed", "dead_lettered", "expired")

#: application_name of the dashboard's sessions (left out of the sessions it shows).
APPLICATION_NAME = "pgqueue-dashboard"

#: The longest interval between samples, in seconds: a day (the page refreshes as often, and a
#: browser's timer takes at most about 24.8 days; a thread's wait, about 292 years).
MAX_INTERVAL = 86400.0
#: The shortest, in seconds: 1e-20 made the history's length overflow (a traceback), and 0.0001
#: sampled the database without a pause, where the page refreshes once a second at most (a review).
MIN_INTERVAL = 0.1
#: The most samples kept: with an interval under ``history / MAX_SAMPLES`` (1 s for the hour) the
#: samples kept are that far apart, but for the newest, which each pass replaces. At 0.1 s the
#: hour was 36,001 samples, 0.7 kB a queue each, all of them read by every chart's refresh.
MAX_SAMPLES = 3600
#: The most samples a chart's refresh reads (``/api/history``; the full hour at 3,600 was about
#: 2 MB of JSON a queue each second: a review). Where more are kept (over 1,000: an interval
#: under about 3.6 s for the hour) it reads every 2nd, 4th, 8th ... sample kept and the newest:
#: the same ones at each refresh but for the newest (a choice counted back from the newest
#: moved by one sample at each pass, and the lines shifted at every refresh). 1,000: all of the
#: 721 samples of the default 5 s (720 halved them), every 4th of the 3,601 under 1 s.
MAX_POINTS = 1000


@dataclass(frozen=True)
class Sample:
    """What one pass saw: when (epoch seconds), each queue's counts, the last message id and the
    extension's counters per queue (None where the database cannot say)."""

    t: float
    stats: dict[str, QueueStats]
    last_id: int | None
    counters: dict[str, dict[str, int]] | None
    shared: frozenset[str] = frozenset()  # queues whose counters also count another queue's messages
    stripes: dict[str, int] = field(default_factory=dict)  # the counter stripe of each queue in shared


@dataclass
class Sampler:
    """Sample ``connect()``'s database every ``interval`` seconds (from :data:`MIN_INTERVAL`,
    0.1, to :data:`MAX_INTERVAL`, a day), keeping ``history`` seconds. ``bound``, if given, is entered
    with the connection around each pass: the dashboard's runs the pass in a transaction with
    its statement_timeout and lock_timeout (set for that transaction alone, never for the
    session, which a transaction-mode pooler would lend to other clients)."""

    connect: Callable[[], psycopg.Connection[Any]]
    interval: float = 5.0
    history: float = 3600.0
    bound: Callable[[psycopg.Connection[Any]], AbstractContextManager[Any]] | None = None
    samples: deque[Sample] = field(init=False)
    error: str | None = field(default=None, init=False)  # the last pass's failure, for the page
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _conn: psycopg.Connection[Any] | None = field(default=None, init=False)
    _added: int = field(default=0, init=False)  # samples appended (not replacing the newest) so far

    def __post_init__(self) -> None:
        if not MIN_INTERVAL <= self.interval <= MAX_INTERVAL:  # (else the thread's wait dies: OverflowError)
            raise ValueError(f"the sample interval must be from {MIN_INTERVAL:g} to {MAX_INTERVAL:g} seconds, "
                             f"got {self.interval}")
        # (two at least: a rate is the change between two samples; an interval longer than the
        # history kept one, and the throughput chart stayed empty for ever)
        self.samples = deque(maxlen=max(2, min(MAX_SAMPLES, int(self.history / self.interval)) + 1))
        self._spacing = self.history / MAX_SAMPLES if self.history / self.interval > MAX_SAMPLES else 0.0

    def start(self) -> None:
        """Sample now, then every ``interval`` seconds on a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="pgqueue-dashboard-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its connection."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._conn is not None:
            self._conn.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.tick()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def tick(self) -> Sample | None:
        """Take one sample (reconnecting if needed) and return it, or None if it failed."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self.connect()
            conn = self._conn
            with self.bound(conn) if self.bound is not None else nullcontext():
                sample = take_sample(conn)
        except Exception as exc:  # the page shows it; the next pass tries again
            self.error = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            log.warning("dashboard sampler: %s", self.error)
            if self._conn is not None and self._conn.broken:
                self._conn = None
            return None
        with self._lock:
            self.keep(sample)
            self.error = None
        return sample

    def keep(self, sample: Sample) -> None:
        """Add a sample to those kept (call under the lock): it replaces the newest while that one
        is less than the spacing after the one before it (:data:`MAX_SAMPLES`), so that all but
        the newest are at least the spacing apart."""
        kept = self.samples
        if len(kept) >= 2 and 0 <= kept[-1].t - kept[-2].t < self._spacing:
            kept[-1] = sample
        else:
            kept.append(sample)
            self._added += 1

    def snapshot(self, most: int | None = None) -> list[Sample]:
        """Return the samples kept, oldest first; with ``most``, at most that many of them,
        evenly apart, the newest always among them (the rates between two of them are the
        averages over the samples left out: the counters only grow).

        Those are every n-th sample ever kept (by the count of samples added), n the smallest
        power of two that leaves few enough, and the newest: each call returns the same ones as
        the call before, but for the newest, one more as time goes on and the oldest as it
        leaves the history, so that a chart refreshed every second does not shift; when more
        samples make n double, every other one of them goes."""
        with self._lock:
            kept = list(self.samples)
            first = self._added - len(kept)  # the count of the oldest kept
        if most is None or len(kept) <= most:
            return kept
        if most < 2:
            raise ValueError(f"most must be 2 at least, got {most}")
        step = 2
        while -(-len(kept) // step) > most - 1:  # (at most that many multiples of step, and the newest)
            step *= 2
        chosen = [s for i, s in enumerate(kept[:-1]) if (first + i) % step == 0]
        return [*chosen, kept[-1]]


def take_sample(conn: psycopg.Connection[Any]) -> Sample:
    """Read every queue's counts, the last message id and the counters, if any. In a transaction
    of the caller's (the sampler's ``bound``) too: what a role may not read is read in a
    savepoint (a transaction of its own outside one), whose refusal leaves the caller's
    transaction usable."""
    now = time.time()
    stats = {s.queue: s for s in all_stats(conn)}
    last_id: int | None = None
    try:
        with conn.transaction():
            row = conn.execute(_sql.LAST_MESSAGE_ID).fetchone()
        last_id = 0 if row is None or row[0] is None else int(row[0])  # NULL: no id handed out yet
    except psycopg.errors.InsufficientPrivilege:
        pass
    row = conn.execute(_sql.COUNTERS_FUNCTION).fetchone()
    if row is None or not row[0]:
        return Sample(now, stats, last_id, None)
    try:
        with conn.transaction():
            every = all_counters(conn)
    except PgQueueError as exc:
        if exc.sqlstate != "42501":  # a role that may not read the counters: estimate from samples
            raise
        return Sample(now, stats, last_id, None)
    counters = {c.queue: {name: getattr(c, name) for name in COUNTERS} for c in every}
    shared = frozenset(c.queue for c in every if c.shared)
    stripes: dict[str, int] = {}
    if shared:  # the queues of a shared stripe each report its sum: the total counts it once
        stripes = {str(r[0]): int(r[1]) for r in conn.execute(_sql.QUEUE_STRIPES).fetchall() if r[0] in shared}
    return Sample(now, stats, last_id, counters, shared, stripes)


# ---------------------------------------------------------------------------------------------
# Series for the charts
# ---------------------------------------------------------------------------------------------

Point = tuple[float, float]


def depth_series(samples: list[Sample], queue: str | None) -> dict[str, list[Point]]:
    """Return ready, scheduled, leased and dead over time, for one queue or summed over all."""
    out: dict[str, list[Point]] = {"ready": [], "scheduled": [], "leased": [], "dead": []}
    for s in samples:
        chosen = [s.stats[queue]] if queue is not None and queue in s.stats else (
            [] if queue is not None else list(s.stats.values()))
        if queue is not None and not chosen:
            continue
        for name in out:
            out[name].append((s.t, float(sum(getattr(st, name) for st in chosen))))
    return out


def oldest_series(samples: list[Sample], queue: str | None) -> dict[str, list[Point]]:
    """Return the age in seconds of the oldest ready message (0 when none is ready), of one queue
    or the oldest of all queues."""
    points: list[Point] = []
    for s in samples:
        chosen = list(s.stats.values()) if queue is None else [s.stats[queue]] if queue in s.stats else None
        if chosen is None:
            continue
        ages = [st.oldest_ready_age_ms for st in chosen if st.oldest_ready_age_ms is not None]
        points.append((s.t, max(ages, default=0) / 1000))
    return {"oldest ready": points}


def _live(s: Sample, queue: str | None) -> int | None:
    chosen = list(s.stats.values()) if queue is None else [s.stats[queue]] if queue in s.stats else []
    if queue is not None and not chosen:
        return None
    return sum(st.ready + st.scheduled + st.leased for st in chosen)


def _dead(s: Sample, queue: str | None) -> int | None:
    chosen = list(s.stats.values()) if queue is None else [s.stats[queue]] if queue in s.stats else []
    if queue is not None and not chosen:
        return None
    return sum(st.dead for st in chosen)


def throughput_series(samples: list[Sample], queue: str | None) -> tuple[str, dict[str, list[Point]]]:
    """Return where the rates come from ("counters" or "samples") and the rates per second."""
    out: dict[str, list[Point]] = {}
    pairs = list(zip(samples, samples[1:]))
    if samples and samples[-1].counters is not None:
        for a, b in pairs:
            if a.counters is None or b.counters is None:
                continue  # before an upgrade brought the counters
            dt = b.t - a.t
            if dt <= 0:  # the wall clock (t) stepped back, or did not move: no rate to draw
                continue
            names = [queue] if queue is not None else list(b.counters)
            totals: dict[str, float] = {}
            stripes: set[int] = set()  # shared stripes counted (all queues): each once
            for name in names:
                before, after = a.counters.get(name), b.counters.get(name)
                if before is None or after is None:
                    continue
                stripe = b.stripes.get(name) if queue is None else None
                if stripe is not None:
                    if stripe in stripes:
                        continue  # its counters are another queue's, counted already
                    stripes.add(stripe)
                for counter, value in after.items():
                    if counter in before:
                        # a queue dropped and created again starts from zero: no negative rate
                        totals[counter] = totals.get(counter, 0.0) + max(0, value - before[counter]) / dt
            for counter, rate in totals.items():
                out.setdefault(counter, []).append((b.t, rate))
        return "counters", out
    for a, b in pairs:
        dt = b.t - a.t
        live_a, live_b = _live(a, queue), _live(b, queue)
        dead_a, dead_b = _dead(a, queue), _dead(b, queue)
        if live_a is None or live_b is None or dead_a is None or dead_b is None or dt <= 0:
            continue
        if queue is None and a.last_id is not None and b.last_id is not None:
            enqueued = (b.last_id - a.last_id) / dt
            out.setdefault("enqueued", []).append((b.t, enqueued))
            out.setdefault("left the queues", []).append((b.t, max(0.0, enqueued - (live_b - live_a) / dt)))
        else:
            out.setdefault("net change", []).append((b.t, (live_b - live_a) / dt))
        out.setdefault("dead-lettered", []).append((b.t, max(0, dead_b - dead_a) / dt))
    return "samples", out
