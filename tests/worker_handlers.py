"""Handlers for the worker tests, importable by a `pgqueue worker` subprocess (run with the
tests directory as its working directory, which the CLI puts on the import path).

Each handler takes its instructions from the payload (a dict):
    mark:  a file to write "<id> <attempts>" to when the handler starts;
    sleep: seconds to sleep;
    fail:  raise RuntimeError with this text.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from pgqueue import Message, Tasks


def obey(msg: Message) -> None:
    """Do what the payload says."""
    job: dict[str, Any] = msg.payload  # type: ignore[assignment]
    if "mark" in job:
        with open(job["mark"], "a") as f:
            f.write(f"{msg.id} {msg.attempts}\n")
    time.sleep(job.get("sleep", 0))
    if "fail" in job:
        raise RuntimeError(job["fail"])


def marks(path: str | Path) -> list[tuple[int, int]]:
    """Return the (id, attempts) lines a handler wrote to a mark file."""
    p = Path(path)
    if not p.exists():
        return []
    return [(int(a), int(b)) for a, b in (line.split() for line in p.read_text().splitlines() if line)]


not_callable = 42


async def async_obey(msg: Message) -> None:
    """Do what the payload says, as a coroutine (`pgqueue worker` runs it on the AsyncWorker)."""
    job: dict[str, Any] = msg.payload  # type: ignore[assignment]
    if "mark" in job:
        with open(job["mark"], "a") as f:
            f.write(f"{msg.id} {msg.attempts}\n")
    await asyncio.sleep(job.get("sleep", 0))
    if "fail" in job:
        raise RuntimeError(job["fail"])


#: Registries for `pgqueue worker ... worker_handlers:tasks_plain` / `:tasks_async`: messages that
#: name no task go to obey / async_obey; a registry of coroutines runs on the AsyncWorker.
tasks_plain = Tasks(default=obey)
tasks_async = Tasks(default=async_obey)
