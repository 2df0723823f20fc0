"""The values the client hands out: messages, queue statistics, queue settings, dead letters.

Times that the extension keeps as BIGINT epoch milliseconds (``dequeue_at``, ``created_at``,
``locked_until``, ``dead_at``) are aware UTC datetimes here, exact to the millisecond, like
``QueueSettings.created_at``; :func:`to_datetime` converts epoch milliseconds. A priority
message's ``dequeue_at`` is not a time: it is None and ``priority`` says the priority.

Every value is a frozen dataclass: two are equal when all their fields are (``payload``
included; ``DeadLetter.dead_at_ms`` aside), and each is hashable, whatever its payload (a dict,
a list): the hash of a :class:`Message`, :class:`Pending`, :class:`DeadLetter` or
:class:`ScheduleEntry` leaves ``payload`` out (equal values still hash alike: for the first
three it is decoded from ``content`` and ``content_type``, which count; a schedule's name tells
it apart), so a message can go in a set or be a dict's key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from pgqueue.codec import task_of

__all__ = ["Message", "Pending", "QueueCounters", "QueueStats", "QueueSettings", "DeadLetter", "ScheduleEntry", "ScheduledMessage",
           "to_datetime"]


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


_MAX = datetime.max.replace(tzinfo=timezone.utc)
_MIN = datetime.min.replace(tzinfo=timezone.utc)


def to_datetime(epoch_ms: int) -> datetime:
    """Return the aware UTC datetime for epoch milliseconds (exact: no float rounding).

    A time past what ``datetime`` holds (after the year 9999, before the year 1: the server
    takes any bigint, as a delay of millions of days) is clamped to ``datetime.max`` or
    ``datetime.min``, in UTC, so that one such message cannot break the calls that read it.
    """
    try:
        return _EPOCH + timedelta(milliseconds=epoch_ms)
    except OverflowError:
        return _MAX if epoch_ms > 0 else _MIN


@dataclass(frozen=True, slots=True)
class Message:
    """A message handed out by ``dequeue``.

    Attributes:
        id: the message id.
        queue: the queue's name.
        payload: the decoded payload (see :mod:`pgqueue.codec`); the raw ``content`` if it does
            not decode under its content type.
        attempts: deliveries so far, this one included; with ``id`` it is the fencing token
            that ``complete``/``heartbeat``/``defer``/``fail`` check.
        state: the checkpoint state saved by ``defer(state=...)``, or None.
        dequeue_at: when the message became deliverable (aware UTC datetime), or None for a
            priority message.
        priority: the message's priority (enqueued with ``priority=``), or None.
        created_at: when it was enqueued (aware UTC datetime).
        locked_until: when the lease runs out (aware UTC datetime), or None if it was
            dequeued with ``lock_ms=0`` (deleted on delivery).
        content: the stored bytes.
        content_type: how ``content`` is encoded, None for raw bytes.
    """

    id: int
    queue: str
    payload: object = field(hash=False)
    attempts: int
    state: bytes | None
    dequeue_at: datetime | None
    created_at: datetime
    locked_until: datetime | None
    content: bytes
    content_type: str | None
    priority: int | None = None

    @property
    def leased(self) -> bool:
        """True if the message is held under a lease (False if it was deleted on dequeue)."""
        return self.locked_until is not None

    @property
    def task(self) -> str | None:
        """The task the message names (``; task=<name>`` in its content type), or None."""
        return task_of(self.content_type)


@dataclass(frozen=True, slots=True)
class Pending:
    """A message waiting on its queue, as ``peek`` shows it and ``cancel`` returns it.

    It is not leased, so it cannot be completed, deferred or failed (those take a
    :class:`Message` from a dequeue).

    Attributes:
        id: the message id.
        queue: the queue's name.
        payload: the decoded payload (the raw ``content`` if it does not decode).
        content: the stored bytes.
        content_type: how ``content`` is encoded, None for raw bytes.
        attempts: deliveries so far.
        state: its checkpoint state, or None.
        dequeue_at: when it is or was due (aware UTC datetime), None for a priority message.
        priority: its priority, or None.
        created_at: when it was enqueued (aware UTC datetime).
        expired_at: when its last lease ran out, if it was leased and not settled (it is then
            delivered again first), else None.
        last_error: the error of its last failed attempt, or None.
    """

    id: int
    queue: str
    payload: object = field(hash=False)
    content: bytes
    content_type: str | None
    attempts: int
    state: bytes | None
    dequeue_at: datetime | None
    priority: int | None
    created_at: datetime
    expired_at: datetime | None
    last_error: str | None

    @property
    def task(self) -> str | None:
        """The task the message names, or None."""
        return task_of(self.content_type)


@dataclass(frozen=True, slots=True)
class QueueCounters:
    """What happened on a queue since it was created (``pgqueue.queue_counters``).

    Counted with sequences: a call that rolled back stays counted, and after a server crash a
    counter may be up to 32 ahead. ``shared`` is True when another queue counts on the same
    lock stripe (more than 64 queues): then these are the sum of both.

    Attributes:
        queue: the queue's name.
        enqueued: messages enqueued (also requeued dead letters and scheduled slots).
        delivered: messages handed out by a dequeue (lease or delete mode).
        completed: leased messages completed.
        failed: failed attempts that will be retried.
        dead_lettered: messages moved to the dead letters.
        expired: leases that ran out before their holder acknowledged them.
        shared: the counters are shared with another queue.
    """

    queue: str
    enqueued: int
    delivered: int
    completed: int
    failed: int
    dead_lettered: int
    expired: int
    shared: bool


@dataclass(frozen=True, slots=True)
class QueueStats:
    """How many messages a queue holds, by state.

    Attributes:
        queue: the queue's name.
        ready: deliverable now (expired leases included).
        scheduled: due later.
        leased: held by a consumer under a live lease.
        dead: dead letters.
        oldest_ready_age_ms: how long the ready message that has waited longest has waited (ms;
            an expired lease since it ran out), None if none; a lower bound when more than 1,000
            prioritised or past-dated messages are ahead of the first ordinary one (queue_stats).
    """

    queue: str
    ready: int
    scheduled: int
    leased: int
    dead: int
    oldest_ready_age_ms: int | None

    @property
    def total(self) -> int:
        """Live messages: ready + scheduled + leased (dead letters not counted)."""
        return self.ready + self.scheduled + self.leased


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One message group of a queue with groups (``queue_group_stats``).

    Attributes:
        group: the group key.
        waiting: messages of the group not handed out (ready or scheduled).
        in_flight: messages of the group under a lease.
    """

    group: str
    waiting: int
    in_flight: int


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's settings, as ``pgqueue.queue_list()`` reports them.

    Attributes:
        queue: the queue's name.
        lock_ms: the default lease length (ms).
        max_attempts: deliveries before a message is dead-lettered, None for unlimited.
        retry_base_ms: the first retry's back-off (ms); it doubles each failure.
        retry_cap_ms: the longest back-off (ms).
        max_size: the most live messages the queue accepts, None for unbounded.
        notify: whether enqueues send NOTIFY on channel ``pgqueue.<queue>``.
        created_at: when the queue was created (aware UTC datetime).
        group_concurrency: message groups: at most this many of a group in flight (0: no
            limit); None: the queue has no groups.
        key_window_ms: how long an idempotency key stays taken after its message left (ms).
        rate_limit: the most messages handed out a second, all consumers together; None: none.
    """

    queue: str
    lock_ms: int
    max_attempts: int | None
    retry_base_ms: int
    retry_cap_ms: int
    max_size: int | None
    notify: bool
    created_at: datetime
    group_concurrency: int | None
    key_window_ms: int
    rate_limit: int | None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that failed ``max_attempts`` times or whose lease ran out that often.

    Attributes:
        id: the message id it had.
        queue: the queue's name.
        payload: the decoded payload (the raw ``content`` if it does not decode).
        content: the stored bytes.
        content_type: how ``content`` is encoded, None for raw bytes.
        state: its last checkpoint state, or None.
        attempts: deliveries it had.
        last_error: the error reported by the last ``fail`` (or ``"lease expired"``, with ``"; last error: "`` and that error after it if the message had failed), or None.
        created_at: when it was enqueued (aware UTC datetime).
        dead_at: when it died (aware UTC datetime; clamped to ``datetime.min`` / ``max`` for a
            stored time outside their range, as :func:`to_datetime` does).
        dead_at_ms: when it died as stored, epoch milliseconds (exact; None for a letter not
            read from the server): the page cursor of ``dead_letters(after=...)``.
    """

    id: int
    queue: str
    payload: object = field(hash=False)
    content: bytes
    content_type: str | None
    state: bytes | None
    attempts: int
    last_error: str | None
    created_at: datetime
    dead_at: datetime
    dead_at_ms: int | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class ScheduleEntry:
    """A periodic message, as ``pgqueue.schedule_list()`` reports it.

    Attributes:
        name: the schedule's name.
        queue: the queue it enqueues on.
        every_ms: its interval (ms), or None for a cron schedule.
        cron: its cron expression (UTC), or None for an interval.
        payload: the decoded payload it enqueues.
        content_type: how the payload is encoded.
        missed: what a late scheduler enqueues for missed slots: ``latest`` or ``all``.
        next_run: the next slot not yet enqueued (aware UTC datetime).
        created_at: when it was created (aware UTC datetime).
    """

    name: str
    queue: str
    every_ms: int | None
    cron: str | None
    payload: object = field(hash=False)
    content_type: str | None
    missed: str
    next_run: datetime
    created_at: datetime

    @property
    def task(self) -> str | None:
        """The task its messages name (``; task=<name>`` in its content type), or None."""
        return task_of(self.content_type)


@dataclass(frozen=True, slots=True)
class ScheduledMessage:
    """A message a scheduler enqueued: which schedule, its id, and the slot it stands for."""

    schedule: str
    message_id: int
    slot: datetime
