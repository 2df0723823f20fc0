"""The client's own connection, with and without connection()'s lock and context manager.

Runs one cheap call (``queue_next_due`` of the queue 'bench') CALLS times over the async and
the sync connector of a DSN, each two ways, three rounds alternated, and prints the client
process's CPU time a call: "old" goes through ``connection()`` (an (async) context manager and
the connector's lock at every call), "new" is ``run()`` as it is, which uses its own open
connection directly. The worker's loop makes every call this way.

Usage (repository root): .venv/bin/python bench/experiments/worker_cpu/connector_run.py DSN [CALLS]
"""
from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path[:0] = [os.path.join(REPO, "python")]

from pgqueue import _core  # noqa: E402
from pgqueue.async_client import _AsyncConnector  # noqa: E402
from pgqueue.async_client import _execute as _execute_async  # noqa: E402
from pgqueue.client import _Connector, _execute  # noqa: E402


async def through_connection_async(connector: _AsyncConnector, call: _core.Call[Any]) -> Any:
    async with connector.connection() as conn:
        return await _execute_async(conn, call)


def through_connection(connector: _Connector, call: _core.Call[Any]) -> Any:
    with connector.connection() as conn:
        return _execute(conn, call)


async def main(dsn: str, calls: int) -> None:
    call = _core.next_due("bench")
    aconn, sconn = _AsyncConnector(dsn), _Connector(dsn)
    for _ in range(3):
        ways: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("async old", lambda: through_connection_async(aconn, call)), ("async new", lambda: aconn.run(call))]
        for name, acall in ways:
            c0 = time.process_time()
            for _ in range(calls):
                await acall()
            print(f"{name}: {(time.process_time() - c0) / calls * 1e6:.1f} us a call", flush=True)
        sways: list[tuple[str, Callable[[], Any]]] = [
            ("sync old", lambda: through_connection(sconn, call)), ("sync new", lambda: sconn.run(call))]
        for name, scall in sways:
            c0 = time.process_time()
            for _ in range(calls):
                scall()
            print(f"{name}: {(time.process_time() - c0) / calls * 1e6:.1f} us a call", flush=True)
    await aconn.close()
    sconn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 4000))
