"""pgqueue: a message queue inside PostgreSQL. The Python client, worker and command line.

The SQL API of the extension is the product; this package is a thin client over it::

    from pgqueue import Queue

    queue = Queue("dbname=app", "jobs")
    queue.enqueue({"user": 42})
    with queue.receive() as msg:
        ...

See :class:`Queue` (sync), :class:`AsyncQueue` (asyncio), :class:`Worker` (handlers on threads),
:class:`AsyncWorker` (coroutine handlers) and :mod:`pgqueue.errors`.
"""

from __future__ import annotations

from pgqueue import errors
from pgqueue._version import __version__
from pgqueue.async_client import AsyncQueue
from pgqueue.async_worker import AsyncWorker
from pgqueue.client import Queue
from pgqueue.compat import async_check_server, check_server
from pgqueue.message import DeadLetter, GroupStats, Message, Pending, QueueCounters, QueueSettings, QueueStats
from pgqueue.tasks import Reject, Tasks, UnknownTask
from pgqueue.worker import Worker

__all__ = [
    "AsyncQueue",
    "AsyncWorker",
    "DeadLetter",
    "Message",
    "Pending",
    "Queue",
    "QueueCounters",
    "QueueSettings",
    "QueueStats",
    "GroupStats",
    "Reject",
    "Tasks",
    "UnknownTask",
    "Worker",
    "__version__",
    "async_check_server",
    "check_server",
    "errors",
]
