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

A message whose task is not registered, or that names none (unless the registry has a
``default`` handler, which takes those), is dead-lettered at once (no retry can fix it) with
``last_error`` saying so: ``UnknownTask: no task 'x' in this worker's registry
(it has: send_email)``. Any handler can do the same for its own message by raising
:class:`Reject` (inside an ``asyncio.TaskGroup`` too: a group of Rejects alone rejects, see
:class:`Reject`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from pgqueue.codec import TASK_NAME
from pgqueue.errors import quoted
from pgqueue.message import Message

__all__ = ["Reject", "TaskHandler", "Tasks", "UnknownTask"]

#: What a registry holds: a function of the message (a plain or a coroutine function); what it
#: returns is ignored.
TaskHandler = Callable[[Message], object]

F = TypeVar("F", bound=TaskHandler)


class Reject(Exception):
    """Raise from a handler (or a ``receive`` block) to move its message to the dead letters
    now, without retries; ``last_error`` is ``"Reject: <its message>"``.

    Raised inside an ``asyncio.TaskGroup`` (or anything else that wraps exceptions in an
    ``ExceptionGroup`` or a ``BaseExceptionGroup``), it still rejects the message when every
    leaf exception of the group (nested groups opened) is a Reject; ``last_error`` is then the
    Rejects' texts, joined by ``"; "``. A group that holds anything else besides a Reject is
    settled as that group is: an ``ExceptionGroup`` fails the message (retry after back-off),
    and a ``BaseExceptionGroup`` that holds a KeyboardInterrupt, a SystemExit or a
    cancellation is an interruption (``receive`` gives the message back; a worker fails it).
    """


class UnknownTask(Reject):
    """The message names no task, or one the registry does not have."""


def is_coroutine_callable(fn: object) -> bool:
    """True for a coroutine function, or an object whose ``__call__`` is one: what an
    :class:`~pgqueue.AsyncWorker` awaits."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def is_generator_callable(fn: object) -> bool:
    """True for a generator or async generator function, or an object whose ``__call__`` is one:
    calling it runs none of its body (it returns a generator), so as a handler it would complete
    every message without doing anything."""
    return any(test(f) for test in (inspect.isgeneratorfunction, inspect.isasyncgenfunction)
               for f in (fn, getattr(fn, "__call__", None)))


def refuse_generator(fn: object, what: str) -> None:
    """Raise TypeError if ``fn`` is a generator function (see :func:`is_generator_callable`)."""
    if is_generator_callable(fn):
        raise TypeError(f"{what} is a generator function (it has `yield`): calling it runs none of its "
                        "body, so every message would be completed without being handled")


def returned_generator(result: object) -> None:
    """Raise TypeError (closing it) if a handler returned a generator or an async generator:
    none of its body ran, so its message must not be completed."""
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        close = getattr(result, "close" if inspect.isgenerator(result) else "aclose")
        closing = close()
        if inspect.isawaitable(closing):
            getattr(closing, "close", lambda: None)()  # an async generator never started: nothing to run
        kind = type(result).__name__
        raise TypeError(f"the handler returned {'an' if kind.startswith('async') else 'a'} {kind}: none of its "
                        "body ran (a generator function is not a handler)")


def refuse_awaitable(value: object, why: str) -> None:
    """Raise TypeError(``why``) if a handler returned an awaitable that nothing will await (what it
    was to do has not run, so its message must fail), closing it first if it is a coroutine (no
    "never awaited" warning)."""
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()
        raise TypeError(why)


def _own_name(fn: object) -> str:
    """The name a task decorator gives ``fn`` without a name of its own (TypeError if it has none)."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str):
        raise TypeError(f"a {type(fn).__name__} has no __name__ to name its task: give the name, "
                        "@tasks.task(\"name\")")
    return name


class Tasks:
    """Handlers by task name; calling the registry with a message runs the one it names.

    All of a registry's tasks are plain functions (for :class:`pgqueue.Worker`) or all
    coroutine functions (for :class:`pgqueue.AsyncWorker`).

    Parameters:
        default: the handler of messages that name no task (None: they are dead-lettered).

    Raises:
        TypeError: ``default`` is not callable.
    """

    def __init__(self, default: TaskHandler | None = None) -> None:
        if default is not None and not callable(default):
            raise TypeError(f"the default handler must be callable, got {type(default).__name__}")
        refuse_generator(default, "the default handler")
        self._handlers: dict[str, TaskHandler] = {}
        self._default = default
        self._is_async: bool | None = None if default is None else is_coroutine_callable(default)

    @property
    def is_async(self) -> bool:
        """True if the tasks are coroutine functions."""
        return bool(self._is_async)

    @property
    def names(self) -> list[str]:
        """The registered task names, sorted."""
        return sorted(self._handlers)

    def register(self, name: str, handler: TaskHandler) -> None:
        """Register ``handler`` for messages naming task ``name``.

        Raises:
            ValueError: the name is not 1 to 200 of ``A-Z a-z 0-9 _ . : -``, or is taken.
            TypeError: the handler is not callable, is a generator function, or is a
                coroutine function among plain ones, or the reverse.
        """
        if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
            raise ValueError(f"invalid task name {quoted(name)}: 1 to 200 letters, digits, '_', '.', ':' or '-'")
        if name in self._handlers:
            raise ValueError(f"task {quoted(name)} is registered already")
        if not callable(handler):
            # refused here, not when the first message of the task fails with "not callable"
            raise TypeError(f"the handler of task {quoted(name)} must be callable, got {type(handler).__name__}")
        refuse_generator(handler, f"the handler of task {quoted(name)}")
        is_async = is_coroutine_callable(handler)
        if self._is_async is not None and is_async != self._is_async:
            raise TypeError("a registry holds plain functions (for Worker) or coroutine functions "
                            "(for AsyncWorker), not both")
        self._is_async = is_async
        self._handlers[name] = handler

    @overload
    def task(self, name: F, /) -> F: ...

    @overload
    def task(self, name: str | None = None) -> Callable[[F], F]: ...

    def task(self, name: str | F | None = None) -> F | Callable[[F], F]:
        """Register a function as task ``name`` (default: the function's name), as a decorator.

        ``@tasks.task("send_email")``, ``@tasks.task()`` and ``@tasks.task`` all register the
        function they decorate and leave it as it is.

        Raises:
            ValueError, TypeError: as :meth:`register`.
        """
        if callable(name):  # bare @tasks.task: called with the function itself
            self.register(_own_name(name), name)
            return name

        def decorate(fn: F) -> F:
            self.register(_own_name(fn) if name is None else name, fn)
            return fn

        return decorate

    def handler_for(self, msg: Message) -> TaskHandler:
        """Return the handler of the task a message names.

        Raises:
            UnknownTask: it names none (and there is no default) or one not registered.
        """
        name = msg.task
        if name is None:
            if self._default is not None:
                return self._default
            raise UnknownTask(f"the message names no task (content type {quoted(msg.content_type)}); this "
                              f"worker's registry has: {', '.join(self.names) or 'nothing'}")
        handler = self._handlers.get(name)
        if handler is None and not name:  # (``; task=`` from another producer: it said "no task ''")
            raise UnknownTask(f"the message names an empty task (content type {quoted(msg.content_type)}); a task "
                              "name has 1 to 200 characters")
        if handler is None:
            raise UnknownTask(f"no task {quoted(name)} in this worker's registry (it has: "
                              f"{', '.join(self.names) or 'nothing'})")
        return handler

    def __call__(self, msg: Message) -> Any:
        """Run the handler of the task the message names (a coroutine for async tasks).

        Typed ``Any``: what it returns is a plain handler's result or an async one's coroutine,
        so that the one registry type fits both ``Worker`` and ``AsyncWorker``.
        """
        return self.handler_for(msg)(msg)
