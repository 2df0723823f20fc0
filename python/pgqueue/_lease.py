"""Lease renewal, written once for every caller: ``receive()`` of :class:`pgqueue.Queue` and
:class:`pgqueue.AsyncQueue` (one message held) and both workers (every message in hand).

The rule is here and nowhere else: a beat every third of the lease (:func:`interval`); each
round renews every held message once, in order; a message whose beat answers False has lost
its lease (it ran out and the message went to another delivery): it is logged once and never
beaten again (it is known by its token, id and attempts, so a later delivery of the same id
is beaten as usual); a beat that raises ends the round, is logged, and the next round tries
again.

A round is a generator that does no I/O: it yields each message to renew and is sent whether
the beat renewed it, psycopg's way of writing a protocol once for blocking and asyncio
callers. :class:`Heartbeats` drives it from a thread with a blocking beat,
:class:`AsyncHeartbeats` from a task with an awaited one; the two are kept line for line alike.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Generator, Iterable

import psycopg

from pgqueue._core import heartbeat_interval
from pgqueue.errors import PgQueueError
from pgqueue.message import Message

__all__ = ["AsyncHeartbeats", "Heartbeats", "interval"]

log = logging.getLogger("pgqueue")

#: What a beat may raise and the loop survives (logged; the next round tries again).
BEAT_ERRORS = (PgQueueError, psycopg.Error)

#: A message's token: a later delivery of the same message has another attempts count.
Token = tuple[int, int]


def interval(lease_ms: int) -> float:
    """Return the seconds between rounds of heartbeats for a lease: a third of it (at least 5 ms)."""
    return heartbeat_interval(lease_ms)


def _token(msg: Message) -> Token:
    return msg.id, msg.attempts


def _round(held: Iterable[Message], lost: set[Token],
           still_held: Callable[[Message], bool]) -> Generator[Message, bool, list[Message]]:
    """Renew each held message once: yield it, receive whether its beat renewed it.

    Returns the messages found lost in this round (added to ``lost``). A message that is no
    longer held (settled meanwhile) is skipped, and its False answer is no loss.
    """
    newly: list[Message] = []
    for msg in held:
        if _token(msg) in lost or not still_held(msg):
            continue
        renewed = yield msg
        if not renewed and still_held(msg):
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


class Heartbeats:
    """A thread that renews the leases of the messages ``held()`` returns, every ``period``
    seconds, by calling ``beat(message)`` (True: renewed; False: the lease was lost).

    Parameters:
        held: the messages to renew now (called at each round).
        beat: renews one lease; it may raise :data:`BEAT_ERRORS` (logged, retried next round).
        period: seconds between rounds (see :func:`interval`).
        still_held: tells whether a message is still held (default: always), so that one
            settled while its round runs is neither beaten nor reported lost.
        name: the thread's name.
    """

    def __init__(self, held: Callable[[], Iterable[Message]], beat: Callable[[Message], bool], period: float, *,
                 still_held: Callable[[Message], bool] = _always, name: str = "pgqueue-heartbeat") -> None:
        self._held = held
        self._beat = beat
        self._period = period
        self._still_held = still_held
        self._stop = threading.Event()
        self.lost: set[Token] = set()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def renew(self) -> list[Message]:
        """Run one round now; return the messages found lost in it."""
        beats = _round(self._held(), self.lost, lambda m: not self._stop.is_set() and self._still_held(m))
        try:
            msg = next(beats)
            while True:
                msg = beats.send(self._beat(msg))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self.renew()
            except BEAT_ERRORS as exc:
                log.warning("heartbeat failed: %s (trying again in %gs)", _first_line(exc), self._period)

    def stop(self, timeout: float | None = None) -> None:
        """Stop beating and wait for a beat in flight to finish (at most ``timeout`` seconds:
        the thread is a daemon, and a beat stuck on a dead connection is left behind)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


class AsyncHeartbeats:
    """A task that renews the leases of the messages ``held()`` returns, every ``period``
    seconds, by awaiting ``beat(message)``: :class:`Heartbeats` on asyncio.

    It is stopped by an event, never cancelled, so a beat in flight always finishes and leaves
    its connection usable.
    """

    def __init__(self, held: Callable[[], Iterable[Message]], beat: Callable[[Message], Awaitable[bool]],
                 period: float, *, still_held: Callable[[Message], bool] = _always,
                 name: str = "pgqueue-heartbeat") -> None:
        self._held = held
        self._beat = beat
        self._period = period
        self._still_held = still_held
        self._stop = asyncio.Event()
        self.lost: set[Token] = set()
        self._task = asyncio.create_task(self._loop(), name=name)

    async def renew(self) -> list[Message]:
        """Run one round now; return the messages found lost in it."""
        beats = _round(self._held(), self.lost, lambda m: not self._stop.is_set() and self._still_held(m))
        try:
            msg = next(beats)
            while True:
                msg = beats.send(await self._beat(msg))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _loop(self) -> None:
        while not await _wait(self._stop, self._period):
            try:
                await self.renew()
            except BEAT_ERRORS as exc:
                log.warning("heartbeat failed: %s (trying again in %gs)", _first_line(exc), self._period)

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
