"""Lease renewal, written once for every caller: ``receive()`` of :class:`pgqueue.Queue` and
:class:`pgqueue.AsyncQueue` (one message held) and both workers (every message in hand).

The rule is here and nowhere else: a beat every third of the lease (:func:`interval`); each
round renews every held message once, with ONE call for all of them (``beat(messages)``: the
workers' is ``message_heartbeat_batch``, a call a chunk of at most
:data:`~pgqueue._core.MAX_BATCH`; ``receive()``, holding one message, calls
``message_heartbeat``), so that a worker holding hundreds of messages pays one round trip a
round, not one a message. The messages sent are those held when the round starts that are not
known lost and still held (none once stopping), checked again before each chunk; of two
deliveries of one message (a stale one whose handler still runs after its lease ran out, and
the delivery after it) only the newest token is sent, and the older counts as not renewed. A
message the call did not renew (its token was stale: the lease ran out and the message went to
another delivery) and that is still held after the call has lost its lease: it is logged once
and never beaten again (it is known by its token, id and attempts, so a later delivery of the
same id is beaten as usual); one settled while the call ran is neither reported nor remembered.
A call that fails with a lost connection is made once more at once (the beat's connector opens
a new connection: waiting for the next round would spend a third of the lease), and one that
conflicted with another transaction (40001 at REPEATABLE READ, where the beat met the loop's
acknowledgement of a message that had just finished; 40P01) up to
:data:`BEAT_CONFLICTS_AGAIN` times, logged at DEBUG (it rolled back whole; its statement takes
a new snapshot); a call that raises otherwise, or again, ends the round, is logged (a run of
failures once: :class:`Outage`), and the next round tries again. A round with nothing to send
makes no call (and tells the :class:`Outage` nothing).

A round is a generator that does no I/O: it yields each chunk of messages to renew and is sent
the messages of it that the call did not renew, psycopg's way of writing a protocol once for
blocking and asyncio callers. :class:`Heartbeats` drives it from a thread with a blocking beat,
:class:`AsyncHeartbeats` from a task with an awaited one; the two are kept line for line alike.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterable

import psycopg

from pgqueue._core import MAX_BATCH, _newest, heartbeat_interval
from pgqueue.errors import ConnectionFailed, PgQueueError, translate
from pgqueue.message import Message

__all__ = ["AsyncHeartbeats", "Heartbeats", "Outage", "interval"]

log = logging.getLogger("pgqueue")

#: What a beat may raise and the loop survives (logged; the next round tries again).
BEAT_ERRORS = (PgQueueError, psycopg.Error)

#: A message's token: a later delivery of the same message has another attempts count.
Token = tuple[int, int]


def interval(lease_ms: int) -> float:
    """Return the seconds between rounds of heartbeats for a lease: a third of it (at least 5 ms)."""
    return heartbeat_interval(lease_ms)


def _connection_lost(exc: BaseException) -> bool:
    """Tell whether a beat's error is a lost connection (not a refusal of the call: a lock timeout)."""
    if isinstance(exc, psycopg.Error):
        return isinstance(translate(exc), ConnectionFailed)
    return isinstance(exc, ConnectionFailed)


#: The SQLSTATEs of a call that conflicted with another transaction and rolled back whole: a
#: serialization failure (40001: a database or role that defaults to REPEATABLE READ, whose
#: statement's snapshot saw a row another session changed since) and a deadlock (40P01).
CONFLICTS = frozenset({"40001", "40P01"})

#: How many conflicts in a row a heartbeat call is made again at once before the round ends
#: with the error (a statement of its own takes a new snapshot each time).
BEAT_CONFLICTS_AGAIN = 3


def is_conflict(exc: BaseException) -> bool:
    """Tell whether a database error is a conflict with another transaction (:data:`CONFLICTS`):
    the call rolled back whole and can run again, on the same connection. psycopg's errors for
    them are OperationalErrors, which the worker counted as a lost connection: a worker on a
    REPEATABLE READ database logged "database call failed ...; reconnecting" and waited, 7 times
    in 3 s for three workers on one queue (a review); its heartbeats, whose call meets the
    loop's acknowledgement of a message that has just finished, warned "heartbeat failed" and
    left every lease of the round unrenewed until the next round."""
    return any(e is not None and getattr(e, "sqlstate", None) in CONFLICTS for e in (exc, exc.__cause__))


def _token(msg: Message) -> Token:
    return msg.id, msg.attempts


def _round(held: Iterable[Message], lost: set[Token],
           still_held: Callable[[Message], bool]) -> Generator[list[Message], list[Message], list[Message]]:
    """Renew the held messages with one call a chunk: yield the chunk (distinct ids, the newest
    token of each, at most ``MAX_BATCH``), receive the messages of it that the call did not renew.

    Returns the messages found lost in this round (added to ``lost``): those not renewed, and
    the older deliveries of a message whose newest was sent. A message that is no longer held
    after the call (settled meanwhile) is no loss. The deliveries in ``lost`` that are no longer
    held are forgotten (a delivery is never held again once settled): the set grew by one for
    every lease lost in the life of a worker or a long receive loop.
    """
    held = list(held)
    lost.intersection_update([_token(m) for m in held])
    todo = [m for m in held if _token(m) not in lost and still_held(m)]
    send, older = _newest(todo)
    newly: list[Message] = []
    for start in range(0, len(send), MAX_BATCH):
        chunk = [m for m in send[start:start + MAX_BATCH] if still_held(m)]
        if not chunk:
            continue
        refused = {_token(m) for m in (yield chunk)}
        sent = {m.id for m in chunk}
        for msg in todo:
            if (msg.id in sent and (older(msg) or _token(msg) in refused) and _token(msg) not in lost
                    and still_held(msg)):
                lost.add(_token(msg))
                newly.append(msg)
                log.warning("message %d on queue %s: lease lost before it was settled (it will be "
                            "delivered again; raise lock_ms?)", msg.id, msg.queue)
    return newly


def _always(msg: Message) -> bool:
    return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Outage:
    """The log of one connection's failures: a warning at the first failure of a run, the retries
    at DEBUG, and one INFO line when a call works again, so that a database away for an hour
    logs two lines per connection rather than one per retry (or per heartbeat round).

    Each user (the worker's loop, a heartbeat thread or task, a LISTEN loop) has its own, used
    from one thread.
    """

    def __init__(self, logger: logging.Logger, name: str) -> None:
        self._log = logger
        self._name = name
        self._since: float | None = None  # monotonic time of the run's first failure
        self._tries = 0

    def failed(self, what: str, then: str) -> None:
        """Log a failure: ``what`` went wrong (with the error's first line), ``then`` what follows."""
        self._tries += 1
        if self._since is None:
            self._since = time.monotonic()
            self._log.warning("%s; %s (until it works again, retries are logged at DEBUG)", what, then)
        else:
            self._log.debug("%s (failure %d in a row); %s", what, self._tries, then)

    def worked(self) -> None:
        """A call worked: end the run of failures, if there was one, with one line."""
        if self._since is not None:
            self._log.info("%s works again after %.1f s (%d failure(s) in a row)", self._name,
                           time.monotonic() - self._since, self._tries)
            self._since, self._tries = None, 0


class _Again:
    """Whether a heartbeat call that failed is made again at once, within one call of a round:
    after a conflict (:func:`is_conflict`: logged at DEBUG, up to :data:`BEAT_CONFLICTS_AGAIN`
    in a row) and once after a lost connection (logged to the outage log); otherwise the error
    ends the round."""

    def __init__(self, outage: Outage) -> None:
        self._outage = outage
        self._conflicts = 0
        self._reconnected = False

    def after(self, exc: BaseException) -> bool:
        """Return True if the call that raised ``exc`` is to be made again now."""
        if is_conflict(exc) and self._conflicts < BEAT_CONFLICTS_AGAIN:
            self._conflicts += 1
            log.debug("heartbeat conflicted with another transaction (%s, %d in a row): %s; trying again at once",
                      getattr(exc, "sqlstate", None), self._conflicts, _first_line(exc))
            return True
        if _connection_lost(exc) and not self._reconnected:
            self._reconnected = True
            self._outage.failed(f"heartbeat failed: {_first_line(exc)}", "trying again at once")
            return True
        return False


class Heartbeats:
    """A thread that renews the leases of the messages ``held()`` returns, every ``period``
    seconds, by calling ``beat(messages)`` once a round (once a chunk of ``MAX_BATCH``), which
    returns those of them whose lease it did not renew (it was lost).

    Parameters:
        held: the messages to renew now (called at each round).
        beat: renews the leases of the messages given (distinct ids) in one call and returns
            those not renewed (``_core.heartbeat_batch``); it may raise :data:`BEAT_ERRORS`
            (logged, retried next round; a lost connection is retried once at once and a conflict
            up to :data:`BEAT_CONFLICTS_AGAIN` times, so ``beat``
            should take its connection anew at each call, opening another after a loss).
        period: seconds between rounds (see :func:`interval`).
        still_held: tells whether a message is still held (default: always), so that one
            settled while its round runs is neither beaten nor reported lost.
        name: the thread's name.
    """

    def __init__(self, held: Callable[[], Iterable[Message]], beat: Callable[[list[Message]], list[Message]],
                 period: float, *, still_held: Callable[[Message], bool] = _always,
                 name: str = "pgqueue-heartbeat") -> None:
        self._held = held
        self._beat = beat
        self._period = period
        self._still_held = still_held
        self._stop = threading.Event()
        self.lost: set[Token] = set()
        self._beaten = False  # whether the last round made a call to the database
        self._outage = Outage(log, "heartbeats")
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def renew(self) -> list[Message]:
        """Run one round now; return the messages found lost in it.

        A call that fails with a lost connection is made again at once, and one that conflicted
        with another transaction (40001, 40P01) up to :data:`BEAT_CONFLICTS_AGAIN` times; if that
        fails too, or a call fails otherwise, the error ends the round.
        """
        beats = _round(self._held(), self.lost, lambda m: not self._stop.is_set() and self._still_held(m))
        self._beaten = False
        try:
            chunk = next(beats)
            while True:
                again = _Again(self._outage)
                while True:
                    try:
                        refused = self._beat(chunk)
                        break
                    except BEAT_ERRORS as exc:
                        if not again.after(exc):
                            raise
                self._beaten = True
                chunk = beats.send(refused)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _loop(self) -> None:
        outage = self._outage
        while not self._stop.wait(self._period):
            try:
                self.renew()
                if self._beaten:  # a round with nothing held tells nothing of the database
                    outage.worked()
            except BEAT_ERRORS as exc:
                outage.failed(f"heartbeat failed: {_first_line(exc)}", f"trying again every {self._period:g}s")

    def stop(self, timeout: float | None = None) -> None:
        """Stop beating and wait for a call in flight to finish (at most ``timeout`` seconds:
        the thread is a daemon, and a beat stuck on a dead connection is left behind)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


class AsyncHeartbeats:
    """A task that renews the leases of the messages ``held()`` returns, every ``period``
    seconds, by awaiting ``beat(messages)``: :class:`Heartbeats` on asyncio.

    It is stopped by an event, never cancelled, so a beat in flight always finishes and leaves
    its connection usable.
    """

    def __init__(self, held: Callable[[], Iterable[Message]], beat: Callable[[list[Message]], Awaitable[list[Message]]],
                 period: float, *, still_held: Callable[[Message], bool] = _always,
                 name: str = "pgqueue-heartbeat") -> None:
        self._held = held
        self._beat = beat
        self._period = period
        self._still_held = still_held
        self._stop = asyncio.Event()
        self.lost: set[Token] = set()
        self._beaten = False  # whether the last round made a call to the database
        self._outage = Outage(log, "heartbeats")
        self._task = asyncio.create_task(self._loop(), name=name)

    async def renew(self) -> list[Message]:
        """Run one round now; return the messages found lost in it."""
        beats = _round(self._held(), self.lost, lambda m: not self._stop.is_set() and self._still_held(m))
        self._beaten = False
        try:
            chunk = next(beats)
            while True:
                again = _Again(self._outage)
                while True:
                    try:
                        refused = await self._beat(chunk)
                        break
                    except BEAT_ERRORS as exc:
                        if not again.after(exc):
                            raise
                self._beaten = True
                chunk = beats.send(refused)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _loop(self) -> None:
        outage = self._outage
        while not await _wait(self._stop, self._period):
            try:
                await self.renew()
                if self._beaten:  # a round with nothing held tells nothing of the database
                    outage.worked()
            except BEAT_ERRORS as exc:
                outage.failed(f"heartbeat failed: {_first_line(exc)}", f"trying again every {self._period:g}s")

    async def stop(self, timeout: float | None = None) -> None:
        """Stop beating and wait for a beat in flight to finish (at most ``timeout`` seconds:
        then the task is cancelled)."""
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except TimeoutError:
            self._task.cancel()


async def _wait(event: asyncio.Event, timeout: float) -> bool:
    """``threading.Event.wait`` for an asyncio event: True if it was set within ``timeout``."""
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except TimeoutError:
        return False
    return True
