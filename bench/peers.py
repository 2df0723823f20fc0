"""PgQueuer (PyPI ``pgqueuer``) as a peer: is it there, install its schema, run its throughput setup.

PgQueuer is a Python library, not an extension: it has no SQL-level API to drive with pgbench,
so it is measured the way its own documentation measures it (throughput mode: producers and
consumers together for a fixed time, jobs handled per second), through its public API in a
process of its own (bench/pgqueuer_run.py), against a database of the server under test with
its schema installed by its own command (``python -m pgqueuer install``). Nothing of its code
is in this repository.

When the package cannot be imported by the Python that runs it (``--pgqueuer-python``, by
default the suite's own), PgQueuer is reported as not available with the reason.

PgQueuer's own benchmark program (``tools/benchmark.py`` in its repository; not in the PyPI
package) can be run as it is, beside that, from a checkout the user makes at the tag of the
installed version (``--pgqueuer-tool PATH``): ``own_tool`` runs it with its defaults, the
timer of the profile and ``--output-json``, against the same database, and reads its rate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from bench import db

REPO = Path(__file__).resolve().parents[1]

#: The Python that runs PgQueuer (``--pgqueuer-python``); the suite's own by default.
PYTHON = sys.executable

#: PgQueuer's own tools/benchmark.py, from a checkout (``--pgqueuer-tool``); None: not run.
TOOL: Path | None = None

#: PgQueuer's documented throughput mode: 5 consumers fetching batches of 10, 1 producer
#: enqueuing batches of 10, the asyncpg driver (its default).
DEFAULTS: dict[str, Any] = {"dequeue": 5, "dequeue_batch": 10, "enqueue": 1, "enqueue_batch": 10, "driver": "apg"}


class Unavailable(Exception):
    """PgQueuer cannot run here; the text says why."""


@dataclass(frozen=True)
class Installed:
    version: str
    python: str


def available(python: str | None = None) -> Installed:
    """Return PgQueuer's version as the given Python imports it, or raise Unavailable."""
    python = python or PYTHON
    code = ("import importlib.metadata as m, pgqueuer, asyncpg; "
            "print(m.version('pgqueuer'))")
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"cannot run {python}: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise Unavailable(f"the package pgqueuer (with asyncpg) cannot be imported by {python}: {last} "
                          "(pip install -r python/requirements-bench.txt)")
    return Installed(proc.stdout.strip(), python)


def _env(dsn: str) -> dict[str, str]:
    """libpq variables for a connection string (PgQueuer's CLI reads them)."""
    info = conninfo_to_dict(dsn)
    env = dict(os.environ)
    for key, var in (("host", "PGHOST"), ("port", "PGPORT"), ("user", "PGUSER"), ("dbname", "PGDATABASE"),
                     ("password", "PGPASSWORD")):
        if info.get(key):
            env[var] = str(info[key])
    env.pop("PGOPTIONS", None)
    return env


def install(server: db.Server, dbname: str, python: str | None = None) -> None:
    """Install PgQueuer's schema into the database with its own command (durable tables, its default)."""
    python = python or PYTHON
    proc = subprocess.run([python, "-m", "pgqueuer", "install"], capture_output=True, text=True, timeout=300,
                          env=_env(server.dsn(dbname)), cwd=REPO, check=False)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-3:])
        raise Unavailable(f"python -m pgqueuer install failed: {tail}")


def throughput(server: db.Server, dbname: str, *, seconds: float, python: str | None = None,
               **settings: Any) -> dict[str, Any]:
    """Run PgQueuer's throughput setup once; return its result (rate: jobs handled per second).

    ``settings`` override DEFAULTS (dequeue, dequeue_batch, enqueue, enqueue_batch, driver).
    A run that fails returns ok False and the error, and no rate.
    """
    opts = {**DEFAULTS, **settings}
    argv = [python or PYTHON, "-m", "bench.pgqueuer_run", "--seconds", str(seconds),
            "--dequeue", str(opts["dequeue"]), "--dequeue-batch", str(opts["dequeue_batch"]),
            "--enqueue", str(opts["enqueue"]), "--enqueue-batch", str(opts["enqueue_batch"]),
            "--driver", str(opts["driver"])]
    return _run_json(argv, server.dsn(dbname), seconds * 3 + 120, opts, "jobs", "no job was handled")


def _run_json(argv: list[str], dsn: str, timeout: float, opts: dict[str, Any], needs: str,
              nothing: str) -> dict[str, Any]:
    """Run bench/pgqueuer_run.py (argv) and return its last JSON line, ok when it reported no
    error and a true ``needs``; a run that failed, timed out or did nothing returns ok False,
    the error (``nothing`` when it did nothing) and no rate."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=_env(dsn),
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "timed out", "rate": None, **opts}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stderr.strip() or "no output").splitlines()[-3:])
        return {"ok": False, "error": tail, "rate": None, **opts}
    out: dict[str, Any] = json.loads(lines[-1])
    out["ok"] = not out.get("errors") and bool(out.get(needs))
    if not out["ok"]:
        out["error"] = "; ".join(out.get("errors") or [nothing])
        out["rate"] = None
    return out


def drain(server: db.Server, dbname: str, *, messages: int, processes: int = 1, python: str | None = None,
          **settings: Any) -> dict[str, Any]:
    """Run PgQueuer's drain strategy once (bench/pgqueuer_run.py --drain): ``messages`` jobs enqueued,
    then drained by its consumers with no producer beside them, the shape of the worker section's
    `pgqueue worker` run; the rate is taken as that run's is (jobs gone between 90% and 10% of the
    backlog left, from the rows left), its consumers in ``processes`` processes of DEFAULTS' 5 each.
    ``settings`` override DEFAULTS' dequeue, dequeue_batch, driver.
    A run that fails returns ok False and the error, and no rate."""
    opts = {k: v for k, v in {**DEFAULTS, **settings}.items() if k in ("dequeue", "dequeue_batch", "driver")}
    argv = [python or PYTHON, "-m", "bench.pgqueuer_run", "--drain", str(messages), "--processes", str(processes),
            "--dequeue", str(opts["dequeue"]), "--dequeue-batch", str(opts["dequeue_batch"]),
            "--driver", str(opts["driver"])]
    return _run_json(argv, server.dsn(dbname), max(60.0, messages / 200) * 2 + 120, opts, "rate", "not drained")


def own_tool(server: db.Server, dbname: str, *, seconds: float, tool: Path,
             python: str | None = None) -> dict[str, Any]:
    """Run PgQueuer's own tools/benchmark.py (throughput mode, its defaults, asyncpg) for seconds.

    It connects through the libpq environment; its script directory comes first on the import
    path, so it imports the installed pgqueuer. Returns its JSON result (rate: jobs per second).
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pgqueue-bench-pgqueuer-") as tmp:
        result = Path(tmp) / "result.json"
        argv = [python or PYTHON, str(tool), "-d", "apg", "-t", str(seconds), "--output-json", str(result)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp, env=_env(server.dsn(dbname)),
                                  timeout=seconds * 3 + 120, check=False)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": "timed out", "rate": None, "tool": str(tool)}
        if proc.returncode != 0 or not result.exists():
            tail = " | ".join((proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-3:])
            return {"ok": False, "error": tail, "rate": None, "tool": str(tool)}
        out: dict[str, Any] = json.loads(result.read_text())
    out.update(ok=bool(out.get("rate")), tool=str(tool))
    if not out["ok"]:
        out.update(error="no job was handled", rate=None)
    return out
