"""PNG plots of the results (matplotlib, from python/requirements-bench.txt).

Each function takes a section of the results and a path, draws one figure with labelled axes
and units, and returns the path; plotting is skipped (returns None) when matplotlib is not
installed, and the report says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    HAVE_MPL = True
except ImportError:  # pragma: no cover - exercised only without the bench requirements
    HAVE_MPL = False

STYLE: dict[str, dict[str, Any]] = {
    "pgqueue": dict(color="#d62728", linewidth=2.4, marker="o"),
    "seed000": dict(color="#1f77b4", marker="s"),
    "seed001": dict(color="#2ca02c", marker="^"),
    "seed003": dict(color="#9467bd", marker="D"),
    "seed004": dict(color="#8c564b", marker="v"),
    "raw": dict(color="#7f7f7f", linestyle="--", marker="x"),
    "select1": dict(color="#bcbd22", linestyle=":", marker="+"),
    "pgmq": dict(color="#17becf", marker="P"),
    "pgq": dict(color="#9467bd", linestyle="--", marker="*"),
    "pgqueuer": dict(color="#e377c2", marker="X"),
}


WF_STYLE: dict[str, dict[str, Any]] = {
    "seed002_naive_2tx": dict(color="#1f77b4", linestyle="--", marker="s"),
    "seed002_naive_1tx": dict(color="#1f77b4", marker="o"),
    "seed002_advisory_2tx": dict(color="#2ca02c", linestyle="--", marker="s"),
    "seed002_advisory_1tx": dict(color="#2ca02c", marker="o"),
    "seed002_skiplocked_2tx": dict(color="#9467bd", linestyle="--", marker="s"),
    "seed002_skiplocked_1tx": dict(color="#9467bd", marker="o"),
    "pgqueue_lease": dict(color="#d62728", linewidth=2.4, linestyle="--", marker="s"),
    "pgqueue_delete_1tx": dict(color="#d62728", linewidth=2.4, marker="o"),
    "pgqueue_fleet": dict(color="#ff7f0e", linewidth=2.4, linestyle="-.", marker="^"),
    "pgqueue_batch100_lease": dict(color="#d62728", linewidth=2.4, linestyle="--", marker="s"),
    "pgqueue_batch100_delete": dict(color="#d62728", linewidth=2.4, marker="o"),
    "seed003_batch100": dict(color="#8c564b", marker="D"),
    "seed004_batch100": dict(color="#17becf", marker="v"),
}


def _style(key: str) -> dict[str, Any]:
    design = key.split(":")[-1]
    style = STYLE.get(design) or next((v for k, v in STYLE.items() if design.startswith(k + "_")), None)
    if style is None:
        return {}
    s = dict(style)
    if key == "lease_cycle:pgqueue":
        s.update(color="#ff7f0e", linestyle="-.", marker="o")
    return s


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput_vs_clients(curves: dict[str, Any], path: Path) -> Path | None:
    if not HAVE_MPL:
        return None
    fig, axes = plt.subplots(1, 3, figsize=(17, 6.4))
    groups = [("enqueue", "Create (one message per transaction)", lambda k: k.startswith("enqueue")),
              ("dequeue", "Dequeue, delete mode (one per transaction)", lambda k: k.startswith("dequeue")),
              ("lease", "Lease cycle: fetch with a lease, then acknowledge",
               lambda k: k.startswith("lease"))]
    clients = [int(c) for c in curves["clients"]]
    for ax, (_name, title, pick) in zip(axes, groups):
        for key, label in curves["labels"].items():
            if not pick(key):  # type: ignore[no-untyped-call]
                continue
            ys = [curves["median"].get(key, {}).get(str(c)) for c in clients]
            pts = [(c, y) for c, y in zip(clients, ys) if y]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **_style(key))
        ax.set_xscale("log", base=2)
        ax.set_xticks(clients, [str(c) for c in clients])
        ax.set_xlabel("concurrent clients (pgbench -c; PgQueuer: consumers)")
        ax.set_ylabel("messages per second")
        ax.set_title(title, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13))  # below: the labels are long
    fig.suptitle("Throughput against clients (durable commits, median of runs)")
    return _save(fig, path)


def worker(wk: dict[str, Any], path: Path) -> Path | None:
    """Bars: the worker, the SQL statements at as many clients, pgmq and PgQueuer, each round as a dot."""
    if not HAVE_MPL:
        return None
    keys = list(wk["labels"])
    colors = {"worker": "#d62728", "worker_async": "#8c564b", "lease_cycle:pgqueue": "#ff7f0e", "lease_ack_fetch:pgqueue": "#ff9896",
              "lease_ack_fetch_batch:pgqueue": "#ff9896", "dequeue:pgqueue": "#ffbb78",
              "lease_cycle:pgmq": "#1f77b4", "lease_cycle_batch:pgmq": "#aec7e8", "pgqueuer": "#e377c2",
              "pgqueuer_drain": "#f7b6d2"}
    fig, ax = plt.subplots(figsize=(11, 0.9 * len(keys) + 1.6))
    ys = list(range(len(keys)))[::-1]
    for y, key in zip(ys, keys):
        med = wk["median"].get(key) or 0
        ax.barh(y, med, color=colors.get(key, "#7f7f7f"), alpha=0.85)
        pts = [r["msgs_per_s"] for r in wk["runs"] if r["key"] == key and r.get("msgs_per_s")]
        ax.plot(pts, [y] * len(pts), "k.", markersize=6)
        ax.text(med, y, f"  {med:,.0f}/s", va="center", fontsize=9)
    ax.set_yticks(ys, [wk["labels"][k] for k in keys], fontsize=8)
    ax.set_xlabel("messages per second (bar: median; dots: rounds)")
    ax.set_xlim(left=0, right=max([v or 0 for v in wk["median"].values()] + [1]) * 1.25)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"The worker end to end ({wk['processes']} processes, no-op handler)\nagainst pgqueue's SQL, "
                 "pgmq and PgQueuer on the same server, durable commits", fontsize=10)
    return _save(fig, path)


def workflows(wf: dict[str, Any], path: Path) -> Path | None:
    if not HAVE_MPL:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    workers = [int(w) for w in wf["workers"]]
    for ax, batch in zip(axes, (False, True)):
        for name, label in wf["labels"].items():
            is_batch = "batch" in name
            if is_batch != batch:
                continue
            ys = [wf["best"].get(name, {}).get(str(w)) for w in workers]
            pts = [(w, y) for w, y in zip(workers, ys) if y]
            if pts:
                style = WF_STYLE.get(name, {})
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **style)
        ax.set_xscale("log", base=2)
        ax.set_xticks(workers, [str(w) for w in workers])
        ax.set_xlabel("worker threads (one connection each)")
        ax.set_ylabel("items per second (fixture drained)")
        ax.set_title("Batches of 100" if batch else "One item at a time")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Python workflows, exactly-once checked (synchronous_commit off)")
    return _save(fig, path)


def depth(dep: dict[str, Any], path: Path) -> Path | None:
    if not HAVE_MPL:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    levels = [int(x) for x in dep["levels"]]
    for shape, per_level in dep["shapes"].items():
        label = dep["labels"].get(shape, shape)
        extra = shape in dep.get("extra", [])
        style = {"linestyle": ":" if extra else "-", "marker": "o"}
        ys_lat = [per_level.get(str(lv), {}).get("latency_ms") for lv in levels]
        ys_buf = [per_level.get(str(lv), {}).get("buffers") for lv in levels]
        axes[0].plot(levels, ys_lat, label=label, **style)
        axes[1].plot(levels, ys_buf, label=label, **style)
    axes[0].set_ylabel("dequeue latency, median (ms, client wall time)")
    axes[1].set_ylabel("shared buffers per dequeue (hit + read)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("queue depth (messages of the shape)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_title("Latency of one dequeue")
    axes[1].set_title("Buffers touched by one dequeue")
    fig.suptitle("pgqueue: cost of one dequeue against queue depth, per backlog shape")
    return _save(fig, path)


def churn(runs: dict[str, Any], path: Path) -> Path | None:
    if not HAVE_MPL:
        return None
    fig, axes = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    colors = {"pgqueue": "#d62728", "pgqueue_naptime10": "#9467bd", "seed001": "#2ca02c", "pgqueue_delete": "#ff7f0e"}
    for r in runs.values():
        color = colors.get(r["design"], None)
        w = r["window"]
        per_s = r["deq_per_s"]
        axes[0].plot(range(len(per_s)), per_s, color=color, alpha=0.25, linewidth=0.8)
        xs = [(i + 0.5) * w for i in range(len(r["windows"]))]
        axes[0].step(xs, r["windows"], where="mid", color=color, linewidth=2,
                     label=f"{r['label']}: {w} s windows")
        ts = [s["t"] for s in r["samples"]]
        axes[1].plot(ts, [s["total_bytes"] / 2**20 for s in r["samples"]], color=color,
                     label=f"{r['label']}: table + indexes")
        axes[1].plot(ts, [s["heap_bytes"] / 2**20 for s in r["samples"]], color=color, linestyle="--",
                     label=f"{r['label']}: heap only")
    axes[0].set_ylabel("messages finished per second")
    axes[0].set_ylim(bottom=0)
    axes[0].set_title("Dequeue rate under churn (thin: per second)")
    axes[1].set_ylabel("size (MiB)")
    axes[1].set_xlabel("time since start (s)")
    axes[1].set_title("Table and index size")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def held_xmin(r: dict[str, Any], path: Path) -> Path | None:
    if not HAVE_MPL:
        return None
    fig, axes = plt.subplots(2, 1, figsize=(11, 7.5), sharex=True)
    per_s = r["deq_per_s"]
    hold = r.get("hold", {})
    axes[0].plot(range(len(per_s)), per_s, color="#d62728", alpha=0.3, linewidth=0.8, label="per second")
    k = 5 if r["window"] >= 5 else 1
    roll = [sum(per_s[i:i + k]) / k for i in range(len(per_s) - k + 1)]
    axes[0].plot([i + k / 2 for i in range(len(roll))], roll, color="#d62728", linewidth=2,
                 label=f"{k} s rolling mean")
    if r.get("held_baseline"):
        axes[0].axhline(r["held_baseline"], color="grey", linestyle="--", label="baseline (before the snapshot)")
        axes[0].axhline(0.8 * r["held_baseline"], color="grey", linestyle=":", label="80% of baseline")
    ts = [s["t"] for s in r["samples"]]
    axes[1].plot(ts, [s["total_bytes"] / 2**20 for s in r["samples"]], color="#d62728", label="table + indexes (MiB)")
    ax2 = axes[1].twinx()
    ax2.plot(ts, [s["dead"] / 1000 for s in r["samples"]], color="#1f77b4", label="dead tuples (thousands)")
    ax2.set_ylabel("dead tuples (thousands)")
    for ax in axes:
        if "start" in hold and "end" in hold:
            ax.axvspan(hold["start"], hold["end"], color="orange", alpha=0.15, label="snapshot held")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("messages finished per second")
    axes[0].set_ylim(bottom=0)
    axes[0].set_title(f"{r['label']}: churn with a REPEATABLE READ snapshot held open")
    axes[0].legend(fontsize=8)
    axes[1].set_ylabel("size (MiB)")
    axes[1].set_xlabel("time since start (s)")
    lines = axes[1].get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    axes[1].legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="upper left")
    return _save(fig, path)


HELD_COLORS = {"pgqueue_delete": "#d62728", "pgqueue": "#ff7f0e", "seed001": "#2ca02c", "pgmq_pop": "#1f77b4",
               "pgmq_read_delete": "#17becf", "pgq": "#9467bd"}


def held_snapshots(held: dict[str, Any], path: Path) -> Path | None:
    """One panel per hold case: each design's rolling rate against its free-running rate, the hold shaded."""
    if not HAVE_MPL:
        return None
    cases = list(held["cases"])
    fig, axes = plt.subplots(len(cases), 1, figsize=(13, 3.4 * len(cases)), sharex=True, squeeze=False)
    for ax, case in zip(axes[:, 0], cases):
        shaded = False
        for name, entry in held["designs"].items():
            r = entry["runs"].get(case)
            if not r or not r.get("held_baseline"):
                continue
            per_s, k, base = r["deq_per_s"], int(r.get("held_smooth") or 1), r["held_baseline"]
            roll = [sum(per_s[i:i + k]) / k / base for i in range(len(per_s) - k + 1)]
            ax.plot([i + k / 2 for i in range(len(roll))], roll, color=HELD_COLORS.get(name), linewidth=1.8,
                    label=f"{entry['label']} (free-running {base:,.0f}/s)")
            twin, tbase = r.get("twin_deq_per_s"), r.get("twin_baseline_ratio")
            if twin and tbase:  # against the twin: the same load beside it, not held back
                troll = [sum(per_s[i:i + k]) / sum(twin[i:i + k]) / tbase if sum(twin[i:i + k]) else None
                         for i in range(len(per_s) - k + 1)]
                ax.plot([i + k / 2 for i in range(len(troll))], troll, color=HELD_COLORS.get(name),
                        linewidth=1.0, linestyle="--", label=f"{entry['label']} against its twin")
            hold = r.get("hold", {})
            if not shaded and "start" in hold and "end" in hold:
                ax.axvspan(hold["start"], hold["end"], color="orange", alpha=0.15,
                           label="the same seconds, nothing held" if case == "0" else "xmin held")
                shaded = True
        ax.axhline(0.9, color="grey", linestyle=":", label="0.9× the free-running rate")
        ax.set_ylim(bottom=0)
        ax.set_ylabel("rate / free-running rate")
        ax.set_title(f"({case}) {held['cases'][case]}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the curves, not on them
    axes[-1, 0].set_xlabel("time since start (s)")
    fig.suptitle(f"Messages finished per second ({held.get('clients', '?')} clients; rolling mean) "
                 "with the xmin horizon held back")
    return _save(fig, path)
