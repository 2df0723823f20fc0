"""Command line of the benchmark suite: ``python -m bench`` from the repository root.

    .venv/bin/python -m bench [--smoke | --profile full|quick|smoke] [--only SECTION ...]
                              [--dsn DSN] [--out REPORT.md] [--render RESULTS.json]

The report goes to bench/results/benchmarks-<UTC time>.md (its JSON beside it) unless --out
names another file: docs/benchmarks.md, which keeps sections written by hand, is written only
when --out names it.

Without --dsn a private server is started with the settings of bench/config.py. The exit
status is 0 when every benchmark ran and every correctness check passed (missed performance
targets are reported, not failed), 1 otherwise, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import config, db, report

REPO = Path(__file__).resolve().parents[1]


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _parse(argv: list[str] | None, prog: str = "python -m bench") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--smoke", action="store_true",
                   help="every benchmark for a moment on tiny fixtures (a few minutes: 4-6, most of it the held "
                        "section); report to a temp dir")
    p.add_argument("--profile", choices=sorted(config.PROFILES), help="full (default), quick or smoke")
    p.add_argument("--only", nargs="+", choices=config.SECTIONS, metavar="SECTION",
                   help="run only these sections: " + ", ".join(config.SECTIONS))
    p.add_argument("--dsn", help="run against this server (a role that can create databases) instead of a private one")
    p.add_argument("--out", help="the Markdown report (default bench/results/benchmarks-<UTC time>.md; smoke: "
                                 "a temp dir; --render: beside RESULTS.json); plots go to img/ beside it. "
                                 "docs/benchmarks.md is written only when named here")
    p.add_argument("--json", help="where to save the raw results (default beside the report, or "
                                  "bench/results/<report name>.json for a report in docs/)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a server setting for the private server (repeatable)")
    p.add_argument("--churn-seconds", type=int, help="override the churn duration")
    p.add_argument("--churn-designs", nargs="+",
                   choices=["pgqueue", "pgqueue_naptime10", "seed001", "pgqueue_delete"],
                   help="designs of the churn section (default: pgqueue pgqueue_naptime10 seed001; with --dsn "
                        "or --set autovacuum_naptime=..., pgqueue seed001, since pgqueue_naptime10 changes that "
                        "server setting for its run, and a --set of it outranks that: asked for beside one, a "
                        "usage error)")
    p.add_argument("--held-designs", nargs="+", metavar="DESIGN",
                   choices=["pgqueue_delete", "pgqueue", "seed001", "pgmq_pop", "pgmq_read_delete", "pgq"],
                   help="designs of the held section (default: all of them; a peer the server lacks is "
                        "reported as not available)")
    p.add_argument("--held-cases", nargs="+", metavar="CASE", choices=["a", "b", "c", "0", "r"],
                   help="cases of the held section (default: a b c 0; 0 is the control, a run that holds "
                        "nothing; r, only when asked for, is b ended by a ROLLBACK instead of a COMMIT)")
    p.add_argument("--held-twin", action="store_true",
                   help="run each held case beside a twin: the same design and load at the same time in a "
                        "second database, which the hold does not hold back; the report adds each case's "
                        "rate against the twin's (the machine's own speed changes cancel out)")
    p.add_argument("--held-twin-sql", metavar="FILE",
                   help="SQL run in each twin's database before its set-up (implies --held-twin): the twin then "
                        "runs another build, e.g. a function replaced, so that case 0 compares two builds under "
                        "the same machine noise")
    p.add_argument("--pgqueuer-python", metavar="PYTHON",
                   help="the Python that runs PgQueuer (default: this one; PgQueuer is reported as not "
                        "available when it cannot import pgqueuer and asyncpg)")
    p.add_argument("--pgqueuer-tool", metavar="PATH",
                   help="also run PgQueuer's own benchmark program (tools/benchmark.py of a checkout of its "
                        "repository at the installed version's tag; it needs tqdm) in the worker section")
    p.add_argument("--render", metavar="RESULTS.json", help="only re-render the report from saved results")
    p.add_argument("--inject-fault", choices=["duplicate"],
                   help="testing: make every consumer record its first message twice (the checks must fail)")
    return p.parse_args(argv)


def _machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) / 2**20
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem_gb": mem, "kernel": f"{platform.system()} {platform.release()}"}


def _git() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "extension"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout.strip()
        return head + (" + uncommitted changes in extension/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _pgbench_version() -> str:
    try:
        out = subprocess.run([db.find_pgbench(), "--version"], capture_output=True, text=True, check=True).stdout
        return out.strip().split()[-3] if "(" in out else out.strip()
    except (OSError, RuntimeError, subprocess.CalledProcessError):
        return "?"


def main(argv: list[str] | None = None, *, prog: str = "python -m bench") -> int:
    """Run the suite; ``prog`` is the command its usage and errors name (``pgqueue bench``'s
    said ``python -m bench``)."""
    args = _parse(argv, prog)
    profile_name = "smoke" if args.smoke else (args.profile or "full")
    profile = config.PROFILES[profile_name].with_overrides(churn_seconds=args.churn_seconds)
    if args.out:
        out = Path(args.out)
    elif args.render:  # the report of saved results beside them
        out = Path(args.render).with_suffix(".md")
    elif profile_name == "smoke":
        out = Path(tempfile.mkdtemp(prefix="pgqueue-bench-smoke-")) / "benchmarks.md"
    else:
        # not docs/benchmarks.md: that page keeps sessions' sections written by hand, which a run
        # without --out overwrote; it is written only when --out names it
        out = default_out()
    out = out.resolve()
    if args.json:
        json_out = Path(args.json).resolve()
    elif out.parent == (REPO / "docs").resolve():
        json_out = REPO / "bench" / "results" / (out.stem + ".json")
    else:
        json_out = out.with_suffix(".json")

    if args.render:
        try:
            saved: dict[str, Any] = json.loads(Path(args.render).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            print(f"bench: --render {args.render}: cannot read saved results: {exc}", file=sys.stderr)
            return 2
        if not isinstance(saved, dict) or not isinstance(saved.get("meta"), dict):  # e.g. bench.spark's JSON
            print(f"bench: --render {args.render}: not the saved results of python -m bench (no \"meta\")",
                  file=sys.stderr)
            return 2
        report.render(saved, out)
        _log(f"report written to {out}")
        return 1 if report.failures(saved) else 0

    twin_sql = None
    if args.held_twin_sql:  # read once, before a server starts: a typo failed every section after it had
        try:
            twin_sql = Path(args.held_twin_sql).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            print(f"bench: --held-twin-sql {args.held_twin_sql}: cannot read it: {exc}", file=sys.stderr)
            return 2
    if args.pgqueuer_python or args.pgqueuer_tool:
        from bench import peers
        peers.PYTHON = args.pgqueuer_python or peers.PYTHON
        peers.TOOL = Path(args.pgqueuer_tool).resolve() if args.pgqueuer_tool else None
    settings = dict(config.BENCH_SETTINGS)
    for item in args.set:
        if "=" not in item:
            print(f"--set wants NAME=VALUE, got {item!r}", file=sys.stderr)
            return 2
        k, v = item.split("=", 1)
        settings[k] = v
    # the server takes a setting's name in any case, with - for _ (-c AUTOVACUUM-NAPTIME=30s)
    naptime_set = not args.dsn and any(k.strip().lower().replace("-", "_") == "autovacuum_naptime" for k in settings)
    if naptime_set and "pgqueue_naptime10" in (args.churn_designs or []) and "churn" in (args.only or config.SECTIONS):
        print("--churn-designs pgqueue_naptime10 sets autovacuum_naptime with ALTER SYSTEM, which --set "
              "autovacuum_naptime (the server's command line) outranks: leave one of them out", file=sys.stderr)
        return 2
    sections = args.only or list(config.SECTIONS)
    started = time.time()
    load_start = db.loadavg()
    _log(f"profile {profile_name}, sections {' '.join(sections)}, load average {load_start:.2f}")
    results: dict[str, Any] = {"errors": {}}
    restore_signals = _stop_on_signals()
    try:
        return _run(args, argv, sections, profile, profile_name, settings, results, started, load_start, out,
                    json_out, naptime_set, twin_sql)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP: the server has been stopped on the way out
        _log("interrupted: no report written")
        if profile_name == "smoke" and not args.out:
            shutil.rmtree(out.parent, ignore_errors=True)
        return 130
    finally:
        restore_signals()


def _stop_on_signals() -> Callable[[], None]:
    """SIGTERM and SIGHUP stop the suite as Ctrl-C does (KeyboardInterrupt on the main thread),
    so that the suite's own server is stopped on the way out: by default they ended the process
    and left the server running. The client processes the suite forks keep the default action.
    Returns what puts the previous handlers back."""
    main_pid = os.getpid()

    def handle(signum: int, frame: object) -> None:
        if os.getpid() != main_pid:  # a forked client: die as before
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt

    # a signal that is ignored (nohup: SIGHUP) stays so
    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGHUP)
                if signal.getsignal(sig) is not signal.SIG_IGN}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)
    return restore


def _run(args: argparse.Namespace, argv: list[str] | None, sections: list[str], profile: config.Profile,
         profile_name: str, settings: dict[str, str], results: dict[str, Any], started: float,
         load_start: float, out: Path, json_out: Path, naptime_set: bool = False,
         twin_sql: str | None = None) -> int:
    with db.server(args.dsn, settings) as srv:
        srv.build_template()
        meta_settings = srv.settings(config.REPORTED_SETTINGS)
        reloptions = srv.message_reloptions()
        extversion = srv.extension_version()
        for section in sections:
            _log(f"section {section}")
            try:
                # pgqueue_naptime10 sets autovacuum_naptime with ALTER SYSTEM: not by default on a server
                # of the user's, nor on the suite's own when --set gave it one (its command line wins)
                churn_designs = args.churn_designs or (
                    ["pgqueue", "seed001"] if args.dsn or naptime_set
                    else ["pgqueue", "pgqueue_naptime10", "seed001"])
                results[section] = _run_section(section, srv, profile, args.inject_fault, churn_designs,
                                                args.held_designs, args.held_cases,
                                                args.held_twin or bool(args.held_twin_sql), twin_sql)
            except Exception:
                results["errors"][section] = traceback.format_exc()
                _log(f"section {section} failed:\n{results['errors'][section]}")
    cmd = "python -m bench " + " ".join(masked_argv(argv if argv is not None else sys.argv[1:]))
    results["meta"] = {
        "command": cmd.strip(), "command_full": ".venv/bin/python -m bench", "date": dt.datetime.now().isoformat(
            timespec="seconds"), "profile": profile_name, "runtime_s": time.time() - started,
        "load_start": load_start, "load_end": db.loadavg(), "noisy": load_start > 1.0, "machine": _machine(),
        "settings": meta_settings, "pgbench_version": _pgbench_version(), "python": platform.python_version(),
        "extension_version": extversion, "git": _git(), "reloptions": reloptions, "embedded": not args.dsn,
        "json": str(json_out.relative_to(REPO)) if json_out.is_relative_to(REPO) else str(json_out),
        "sections": sections, "inject_fault": args.inject_fault,
    }
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(results, indent=1, default=str))
    report.render(results, out)
    fails = report.failures(results)
    _log(f"report written to {out} ({(time.time() - started) / 60:.1f} min)")
    if fails:
        _log("FAILURE:\n  " + "\n  ".join(fails))
        return 1
    return 0


def default_out(now: dt.datetime | None = None) -> Path:
    """The report of a run without --out: bench/results/benchmarks-<UTC time>.md (a new file each
    run, its JSON beside it)."""
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return REPO / "bench" / "results" / f"benchmarks-{stamp}.md"


_PASSWORD_KV = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")
_PASSWORD_URI = re.compile(r"^([a-z][a-z0-9+.-]*://[^:/?#@]*:)[^/?#]*@", re.IGNORECASE)
_PASSWORD_QUERY = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def mask_dsn(dsn: str) -> str:
    """The DSN with its password replaced by ***: password=... of a key/value string, and a URI's
    :password@ and ?password=... (the report and its JSON recorded the command line as typed)."""
    if "://" in dsn.split("?", 1)[0]:
        return _PASSWORD_QUERY.sub(r"\1***", _PASSWORD_URI.sub(r"\1***@", dsn))
    return _PASSWORD_KV.sub(r"\1***", dsn)


def masked_argv(argv: list[str]) -> list[str]:
    """The command line with the value of --dsn (or an abbreviation argparse takes for it, --ds)
    masked by mask_dsn; the rest as given."""
    out: list[str] = []
    mask_next = False
    for arg in argv:
        name, eq, value = arg.partition("=")
        is_dsn = len(name) > 2 and "--dsn".startswith(name)
        if mask_next:
            out.append(mask_dsn(arg))
        elif is_dsn and eq:
            out.append(f"{name}={mask_dsn(value)}")
        else:
            out.append(arg)
        mask_next = not mask_next and is_dsn and not eq
    return out


def _run_section(section: str, srv: db.Server, profile: config.Profile, fault: str | None,
                 churn_designs: list[str], held_designs: list[str] | None = None,
                 held_cases: list[str] | None = None, held_twin: bool = False,
                 held_twin_sql: str | None = None) -> Any:
    if section == "ops":
        from bench import ops
        return ops.run_ops(srv, profile, _log)
    if section == "profile":
        from bench import profile as prof
        return prof.run_profile(srv, profile, _log)
    if section == "curves":
        from bench import ops
        return ops.run_curves(srv, profile, _log)
    if section == "worker":
        from bench import worker_e2e
        return worker_e2e.run_worker_section(srv, profile, _log)
    if section == "workflows":
        from bench import workflows
        return workflows.run_workflows(srv, profile, _log, fault=fault)
    if section == "depth":
        from bench import depth
        return depth.run_depth(srv, profile, _log)
    if section == "churn":
        from bench import churn
        out = {}
        for design in churn_designs:
            out[design] = churn.run_churn(
                srv, design, seconds=profile.churn_seconds, window=profile.churn_window,
                producers=profile.churn_producers, consumers=profile.churn_consumers,
                backlog=profile.churn_backlog, slack=profile.churn_slack, fault=fault, log=_log)
        return out
    if section == "held_xmin":
        from bench import churn
        total = profile.held_before + profile.held_hold + profile.held_after
        return churn.run_churn(
            srv, "pgqueue", seconds=total, window=profile.churn_window, producers=profile.churn_producers,
            consumers=profile.churn_consumers, backlog=profile.churn_backlog, slack=profile.churn_slack,
            hold=(profile.held_before, profile.held_before + profile.held_hold), fault=fault, log=_log)
    if section == "held":
        from bench import churn
        return churn.run_held(
            srv, before=profile.snap_before, hold=profile.snap_hold, after=profile.snap_after,
            producers=profile.snap_producers, consumers=profile.snap_consumers, backlog=profile.snap_backlog,
            slack=profile.snap_slack, designs=held_designs, cases=held_cases, fault=fault, log=_log,
            twin=held_twin, twin_sql=held_twin_sql)
    if section == "latency":
        from bench import latency
        return latency.run_latency(srv, profile, _log)
    if section == "stats":
        from bench import latency
        return latency.run_stats(srv, profile, _log)
    if section == "groups":
        from bench import groups
        return groups.run_groups(srv, profile, _log)
    raise ValueError(section)
