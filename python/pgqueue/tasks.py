"""A task registry: one queue carries several kinds of work, dispatched by the task's name.

The name travels in the message's content type, ``; task=<name>`` (``application/json;
task=send_email``), so a producer in any language sets it too: with
``pgqueue.message_create_json(queue, payload, p_task => 'send_email')`` in SQL, or
``queue.enqueue(payload, task="send_email")`` in Python. Example::

    tasks = Tasks()

    @tasks.task("send_email")
    def send_email(msg):
        smtp.send(**msg.payload)

    Worker(queue, tasks).run()        # or AsyncWorker(async_queue, tasks) with `async def` tasks

A message whose task is not registered, or that names none, is dead-lettered at once (no retry
can fix it) with ``last_error`` saying so: ``UnknownTask: no task "x" in this worker's registry
(it has: send_email)``. Any handler can do the same for its own message by raising
:class:`Reject`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from pgqueue.codec import TASK_NAME
from pgqueue.message import Message

__all__ = ["Reject", "Tasks", "UnknownTask"]

F = TypeVar("F", bound=Callable[..., Any])


class Reject(Exception):
    """Raise from a handler to move its message to the dead letters now, without retries."""


class UnknownTask(Reject):
    """The message names no task, or one the registry does not have."""


class Tasks:
    """Handlers by task name; calling the registry with a message runs the one it names.

    All of a registry's tasks are plain functions (for :class:`pgqueue.Worker`) or all
    coroutine functions (for :class:`pgqueue.AsyncWorker`).

    Parameters:
        default: the handler of messages that name no task (None: they are dead-lettered).
    """

    def __init__(self, default: Callable[[Message], Any] | None = None) -> None:
        self._handlers: dict[str, Callable[[Message], Any]] = {}
        self._default = default
        self._is_async: bool | None = None if default is None else inspect.iscoroutinefunction(default)

    @property
    def is_async(self) -> bool:
        """True if the tasks are coroutine functions."""
        return bool(self._is_async)

    @property
    def names(self) -> list[str]:
        """The registered task names, sorted."""
        return sorted(self._handlers)

    def register(self, name: str, handler: Callable[[Message], Any]) -> None:
        """Register ``handler`` for messages naming task ``name``.

        Raises:
            ValueError: the name is not 1 to 200 of ``A-Z a-z 0-9 _ . : -``, or is taken.
            TypeError: the handler is a coroutine function among plain ones, or the reverse.
        """
        if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
            raise ValueError(f"invalid task name {name!r}: 1 to 200 letters, digits, '_', '.', ':' or '-'")
        if name in self._handlers:
            raise ValueError(f"task {name!r} is registered already")
        is_async = inspect.iscoroutinefunction(handler)
        if self._is_async is not None and is_async != self._is_async:
            raise TypeError("a registry holds plain functions (for Worker) or coroutine functions "
                            "(for AsyncWorker), not both")
        self._is_async = is_async
        self._handlers[name] = handler

    def task(self, name: str | None = None) -> Callable[[F], F]:
        """Return a decorator that registers a function as task ``name`` (default: its name)."""

        def decorate(fn: F) -> F:
            self.register(name or fn.__name__, fn)
            return fn

        return decorate

    def handler_for(self, msg: Message) -> Callable[[Message], Any]:
        """Return the handler of the task a message names.

        Raises:
            UnknownTask: it names none (and there is no default) or one not registered.
        """
        name = msg.task
        if name is None:
            if self._default is not None:
                return self._default
            raise UnknownTask(f"the message names no task (content type {msg.content_type!r}); this "
                              f"worker's registry has: {', '.join(self.names) or 'nothing'}")
        handler = self._handlers.get(name)
        if handler is None:
            raise UnknownTask(f"no task {name!r} in this worker's registry (it has: "
                              f"{', '.join(self.names) or 'nothing'})")
        return handler

    def __call__(self, msg: Message) -> Any:
        """Run the handler of the task the message names (a coroutine for async tasks)."""
        return self.handler_for(msg)(msg)
