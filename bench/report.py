"""Turn the results into a Markdown report (the path of --out; docs/benchmarks.md when named) and its PNG plots.

Every target gets a table row with the measured ratio, the bound, and PASS or MISS (a MISS
says by how much). A section whose correctness check failed shows FAILURE instead of
numbers. ``python -m bench --render RESULTS.json`` re-renders a report from saved results.
"""

from __future__ import annotations

import json

import statistics
from pathlib import Path
from typing import Any

from bench import churn, plots
from bench.config import SECTIONS

TARGET_SHAPES = ["future", "leased", "dead", "other_queue", "ready"]


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    """a / b; None (n/a) only when a value is missing or b is 0. A measured 0 is a ratio of 0, a
    miss: a run that delivered nothing graded "n/a" (a review)."""
    if a is None or not b:
        return None
    return a / b


def _verdict(value: float | None, bound: float, *, at_least: bool = True) -> str:
    if value is None:
        return "n/a"
    if at_least:
        if value >= bound:
            return "PASS"
        return f"MISS ({(1 - value / bound) * 100:.1f}% short)"
    if value <= bound:
        return "PASS"
    if value >= 2 * bound:
        return f"MISS ({value / bound:.0f}× the bound)"
    return f"MISS ({(value / bound - 1) * 100:.1f}% over)"


def _shown(value: float | None, bound: float, *, at_least: bool = True, digits: int = 2) -> str:
    """A graded value as _fmt prints it, with more decimals where that rounding would meet the
    bound and the verdict (on the value itself) says MISS, or the other way round: 0.897 against
    ≥ 0.9 printed "0.90" beside "MISS (0% short)"."""
    def meets(v: float) -> bool:
        return v >= bound if at_least else v <= bound

    if value is not None:
        while digits < 6 and meets(float(f"{value:.{digits}f}")) != meets(value):
            digits += 1
    return _fmt(value, digits)


def _paired(runs: list[dict[str, Any]], a: str, b: str) -> str:
    """Range of the per-round ratio a/b (each round runs both)."""
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        if r.get("msgs_per_s"):
            by_round.setdefault(r["round"], {})[r["key"]] = r["msgs_per_s"]
    ratios = [d[a] / d[b] for d in by_round.values() if a in d and b in d and d[b]]
    if len(ratios) < 2:
        return ""
    return f"{min(ratios):.2f}–{max(ratios):.2f}"


OPS_TARGETS = [
    # target, description, numerator, denominator, bound
    ("1", "message_create vs seed 001 message_create", "enqueue:pgqueue", "enqueue:seed001", 1.0),
    ("1", "message_create vs raw single-row INSERT", "enqueue:pgqueue", "enqueue:raw", 0.85),
    ("2", "message_dequeue (delete mode) vs seed 001 dequeue", "dequeue:pgqueue", "dequeue:seed001", 1.1),
    ("2", "message_dequeue (delete mode) vs seed 000 dequeue", "dequeue:pgqueue", "dequeue:seed000", 1.5),
    ("3", "lease + complete vs delete-mode dequeue", "lease_cycle:pgqueue", "dequeue:pgqueue", 0.6),
    ("i13", "lease via acknowledge-and-fetch vs delete-mode dequeue", "lease_ack_fetch:pgqueue", "dequeue:pgqueue",
     1.0),
    ("4", "dequeue x100 vs single dequeue (messages/s)", "dequeue_batch:pgqueue", "dequeue:pgqueue", 10.0),
    ("4", "message_create_batch x1000 vs single create (messages/s)", "enqueue_batch:pgqueue", "enqueue:pgqueue",
     10.0),
    ("i13", "message_create vs pgmq send", "enqueue:pgqueue", "enqueue:pgmq", 1.5),
    ("i13", "message_dequeue (delete mode) vs pgmq pop", "dequeue:pgqueue", "dequeue:pgmq", 1.3),
    ("i13", "lease via acknowledge-and-fetch vs pgmq read + delete", "lease_ack_fetch:pgqueue", "lease_cycle:pgmq",
     2.0),
]

#: Issue 13's worker targets: (what, numerator, denominator, bound or None for reported only).
WORKER_TARGETS = [
    ("worker vs the SQL lease cycle (dequeue + message_complete) at as many pgbench clients", "worker",
     "lease_cycle:pgqueue", 0.7),
    ("worker vs PgQueuer's throughput mode on the same server", "worker", "pgqueuer", 1.5),
    # issue 13's bound is against PgQueuer's documented throughput mode (above); its drain mode, the
    # worker's own shape, is reported beside it
    ("worker vs PgQueuer's drain mode on the same server (like for like: a backlog of the same size drained, "
     "no producer beside it, the rate from the rows left between 90% and 10%)", "worker", "pgqueuer_drain", None),
    ("worker vs message_complete_and_dequeue at as many pgbench clients (the statement it runs, one message a "
     "call)", "worker", "lease_ack_fetch:pgqueue", None),
    ("worker vs message_complete_and_dequeue of a batch of its concurrency at as many pgbench clients (the "
     "statement it runs, as it runs it: what the worker's own overhead costs)", "worker",
     "lease_ack_fetch_batch:pgqueue", None),
    ("worker vs PgQueuer's own tools/benchmark.py (--pgqueuer-tool)", "worker", "pgqueuer_tool", None),
    # issue 13's bound is against pgmq's read + delete one message a call (the issue's own table): the
    # worker batches its acknowledgements, which is the point of the bound; the same against pgmq
    # batched as the worker batches (read n, delete those n: pgmq's own batch API) is reported beside
    # each, so that nobody reads the bound as a lead over pgmq used in batches
    ("lease mode as the worker runs it, end to end (the worker) vs pgmq read + delete at as many pgbench clients "
     "(pgmq one message a call, the worker a batch of its concurrency)", "worker", "lease_cycle:pgmq", 2.0),
    ("lease mode as the worker runs it, end to end (the worker) vs pgmq read + delete in batches of as many at "
     "as many pgbench clients", "worker", "lease_cycle_batch:pgmq", None),
    ("lease mode as the worker runs it, at the SQL level (message_complete_and_dequeue of a batch of its "
     "concurrency, pgbench) vs pgmq read + delete (pgmq one message a call)", "lease_ack_fetch_batch:pgqueue",
     "lease_cycle:pgmq", 2.0),
    ("lease mode as the worker runs it, at the SQL level (message_complete_and_dequeue of a batch of its "
     "concurrency, pgbench) vs pgmq read + delete in batches of as many (read n, delete n)",
     "lease_ack_fetch_batch:pgqueue", "lease_cycle_batch:pgmq", None),
    ("the same end to end with an async def no-op handler (the worker's asyncio tasks, no handler threads) vs "
     "pgmq read + delete (pgmq one message a call)", "worker_async", "lease_cycle:pgmq", 2.0),
    ("the same end to end with an async def no-op handler (the worker's asyncio tasks, no handler threads) vs "
     "pgmq read + delete in batches of as many", "worker_async", "lease_cycle_batch:pgmq", None),
    ("lease mode as the worker runs it, end to end (the worker) vs pgqueue's delete-mode dequeue at as many "
     "pgbench clients", "worker", "dequeue:pgqueue", 1.0),
    ("the same end to end with an async def no-op handler vs pgqueue's delete-mode dequeue", "worker_async",
     "dequeue:pgqueue", 1.0),
    ("the same at the SQL level vs pgqueue's delete-mode dequeue", "lease_ack_fetch_batch:pgqueue",
     "dequeue:pgqueue", 1.0),
]


def summary_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(target, what, measured, bound, verdict) for every target that ran."""
    rows: list[tuple[str, str, str, str, str]] = []
    ops = results.get("ops")
    if ops:
        for pass_name, p in ops["passes"].items():
            med = p["median"]
            failed = _failed_keys(p.get("runs", []))
            tag = "durable" if pass_name == "durable" else "synchronous_commit off"
            for tgt, desc, a, b, bound in OPS_TARGETS:
                if a not in ops["labels"] or b not in ops["labels"]:
                    missing = [k.split(":")[1] for k in (a, b) if k not in ops["labels"]]
                    if any(d in (ops.get("unavailable") or {}) for d in missing):  # a peer the server lacks
                        rows.append((tgt, f"{desc} ({ops['clients']} clients, {tag})", "n/a", f"≥ {bound}×",
                                     "not available on this server"))
                    continue
                if a in failed or b in failed:  # a round that failed: failures() lists it
                    rows.append((tgt, f"{desc} ({ops['clients']} clients, {tag})", "FAILURE", f"≥ {bound}×",
                                 "FAILURE"))
                    continue
                r = _ratio(med.get(a), med.get(b))
                rows.append((tgt, f"{desc} ({ops['clients']} clients, {tag})", _shown(r, bound) + "×",
                             f"≥ {bound}×", _verdict(r, bound)))
    rows += _worker_rows(results.get("worker"))
    dep = results.get("depth")
    if dep:
        for shape in TARGET_SHAPES + dep.get("extra", []):
            per = dep["shapes"].get(shape)
            if not per:
                continue
            what = (f"dequeue cost, worst ratio of the depths up to {int(dep['levels'][-1]):,} vs "
                    f"{int(dep['levels'][0]):,}: {dep['labels'].get(shape, shape)}")
            if _depth_failed(per):  # dequeues that found no message: failures() lists them
                rows.append(("5", what, "FAILURE", "≤ 1.5×", "FAILURE"))
                continue
            lat, buf = _depth_ratios(dep, shape)
            worst = max(lat or 0, buf or 0) or None
            rows.append(("5", what, f"latency {_shown(lat, 1.5, at_least=False)}×, "
                                    f"buffers {_shown(buf, 1.5, at_least=False)}×", "≤ 1.5×",
                         _verdict(worst, 1.5, at_least=False)))
    ch = results.get("churn")
    if ch and "pgqueue" in ch:
        r = ch["pgqueue"]
        rows += _churn_rows(r, f"churn {r['seconds']} s: slowest vs fastest {r['window']} s window (pgqueue)",
                            "churn: table + index size, peak of 2nd half vs 1st half (pgqueue)",
                            "churn: slowest vs fastest window")
        for other, r2 in ch.items():
            if other == "pgqueue":
                continue
            if other == "pgqueue_naptime10":
                rows += _churn_rows(r2, f"churn: slowest vs fastest window ({r2['label']}, the recommended setting)",
                                    f"churn: size, peak of 2nd half vs 1st half ({r2['label']})",
                                    f"churn ({r2['label']})")
                continue
            rows.append(("6", f"churn: slowest vs fastest window ({r2['label']}, for comparison)",
                         _fmt(r2.get("min_max_ratio"), 2) if r2["ok"] else "FAILURE", "(reference)",
                         CHURN_DRY if r2["ok"] and churn_dry(r2) else ""))
            rows.append(("6", f"churn: size, peak of 2nd half vs 1st half ({r2['label']}, for comparison)",
                         _fmt(r2.get("size_growth"), 2) + "×" if r2["ok"] else "FAILURE", "(reference)", ""))
    hx = results.get("held_xmin")
    if hx:
        if not hx["ok"]:
            rows.append(("7", "held xmin", "FAILURE", "", "FAILURE"))
        else:
            rec = hx.get("recovery_s")
            dry = churn_dry(hx)  # the consumers waited for the producers: the rates are theirs
            rows.append(("7", "held xmin: recovery to 80% of baseline after the snapshot ends",
                         "never" if rec is None else f"{rec} s", "≤ 60 s",
                         CHURN_DRY if dry else "MISS (did not recover in the run)" if rec is None
                         else _verdict(rec, 60, at_least=False)))
            rows.append(("7", f"held xmin: slowest {_held_window(hx)} while held, vs baseline (proposed bound)",
                         _shown(hx.get("held_min_ratio"), 0.5), "≥ 0.50",
                         CHURN_DRY if dry else _verdict(hx.get("held_min_ratio"), 0.5)))
            if hx.get("after_minute_ratio") is not None:
                rows.append(("7", f"held xmin: mean rate in the {_after_span(hx)} after the snapshot ends, "
                                  "vs baseline", _fmt(hx.get("after_minute_ratio"), 2), "(reported)", ""))
    rows += _held_rows(results.get("held"))
    lat = results.get("latency")
    if lat:
        for r in lat["runs"]:
            tag = "synchronous_commit off" if r["sync_off"] else "durable"
            if not r["ok"]:
                rows.append(("8", f"wake-up latency ({tag})", "FAILURE", "", "FAILURE"))
                continue
            rows.append(("8", f"wake-up latency p50 ({tag})", _shown(r["p50_ms"], 5, at_least=False) + " ms",
                         "< 5 ms",
                         _verdict(r["p50_ms"], 5, at_least=False)))
            rows.append(("8", f"wake-up latency p99 ({tag})", _shown(r["p99_ms"], 20, at_least=False) + " ms",
                         "< 20 ms",
                         _verdict(r["p99_ms"], 20, at_least=False)))
    st = results.get("stats")
    if st:
        rows.append(("9", f"queue_stats on {st['messages']:,} messages, median",
                     _shown(st["median_ms"], 500, at_least=False, digits=0) + " ms", "< 500 ms",
                     _verdict(st["median_ms"], 500, at_least=False)))
        med = st["median"]
        for mode, desc in (("every_1s", "queue_stats every second"), ("back_to_back", "queue_stats back to back")):
            for side in ("produce_tps", "consume_tps"):
                r = _ratio(med[mode][side], med["none"][side])
                graded = mode == "every_1s"
                rows.append(("9", f"{side.split('_')[0]}rs' rate with {desc} vs without",
                             (_shown(r, 0.95) if graded else _fmt(r, 2)) + "×",
                             "≥ 0.95×" if graded else "(reported)",
                             _verdict(r, 0.95) if graded else ""))
    rows += _groups_rows(results.get("groups"))
    return rows


def _held_window(r: dict[str, Any]) -> str:
    """The window of a held run's slowest-window and recovery statistics, as it ran: 1 s when the
    churn window is under 5 s (the smoke profile), not the 5 s the report said."""
    return f"{r.get('held_smooth') or 5} s"


def _after_span(r: dict[str, Any]) -> str:
    """The seconds the mean after the hold covers: the minute after it, or what the run had left of
    it (the quick profile's 40 s after the hold give 39). Older results did not store the span."""
    span = r.get("after_span_s")
    if span is None and r.get("after_s") is not None:
        span = min(60, int(r["after_s"]))
    return "minute" if span in (None, 60) else f"{span} s"


def _groups_rows(gr: dict[str, Any] | None) -> list[tuple[str, str, str, str, str]]:
    """Issue 14's benchmark targets (bench/groups.py)."""
    if not gr:
        return []
    rows: list[tuple[str, str, str, str, str]] = []
    tp = gr["throughput"]
    for mode, desc in (("delete", "delete mode"), ("lease", "lease + complete")):
        r = tp["ratio"].get(mode)
        rows.append(("14", f"dequeue with {tp['groups']:,} groups vs without ({desc}, {tp['clients']} clients)",
                     _shown(r, 0.8) + "×", "≥ 0.8×", _verdict(r, 0.8)))
    fa = gr["fairness"]
    last = fa["last_first"]
    rows.append(("14", f"every small group's first message (one group of {fa['big']:,}, {fa['small']:,} groups of "
                 f"{fa['per_group']})", f"by delivery {last:,}" if last else f"{fa['served']} served",
                 f"≤ {fa['bound']:,}", "PASS" if last and last <= fa["bound"] else "MISS"))
    for axis in ("messages", "groups"):
        a = gr["flat"][axis]
        rows.append(("14", f"dequeue time, {a['large'][axis]:,} against {a['small'][axis]:,} {axis}",
                     _shown(a["ratio_ms"], 1.5, at_least=False) + "×", "≤ 1.5×",
                     _verdict(a["ratio_ms"], 1.5, at_least=False)))
    rl = gr["rate"]
    err = rl["error"]
    rows.append(("14", f"rate limit {rl['rate']}/s over {rl['seconds']:.0f} s: delivered against the limit",
                 "n/a" if err is None else f"{err * 100:+.1f}%", "within ±5%",
                 "n/a" if err is None else ("PASS" if abs(err) <= 0.05 else "MISS")))
    return rows


def _failed_keys(runs: list[dict[str, Any]]) -> set[str]:
    """The keys of an ops pass or the worker section with a failed round: their median is of the
    other rounds, so they print FAILURE in place of the number, as a failed check does."""
    return {r["key"] for r in runs if not r.get("ok")}


def _worker_rows(wk: dict[str, Any] | None) -> list[tuple[str, str, str, str, str]]:
    """Issue 13's end-to-end targets: the worker against the SQL lease cycle and PgQueuer."""
    rows: list[tuple[str, str, str, str, str]] = []
    if not wk:
        return rows
    med = wk["median"]
    failed = _failed_keys(wk.get("runs", []))
    for desc, a, b, bound in WORKER_TARGETS:
        if b not in wk["labels"]:
            if b == "pgqueuer_tool" or (b != "pgqueuer" and "unavailable" not in wk) or (
                    b == "pgqueuer_drain" and wk.get("pgqueuer", {}).get("available")):
                continue  # run only when asked for, or a results file older than the row
            rows.append(("i13", desc, "n/a", f"≥ {bound}×" if bound else "(reported)",
                         "not available on this server" if bound else ""))
            continue
        if a not in wk["labels"]:  # a results file older than the row
            continue
        r = _ratio(med.get(a), med.get(b))
        what = f"{desc} ({wk['processes']} processes)"
        if a in failed or b in failed:  # a round that failed: failures() lists it
            rows.append(("i13", what, "FAILURE", f"≥ {bound}×" if bound else "(reported)", "FAILURE"))
        elif bound is None:
            rows.append(("i13", what, _fmt(r, 2) + "×", "(reported)", ""))
        else:
            rows.append(("i13", what, _shown(r, bound) + "×", f"≥ {bound}×", _verdict(r, bound)))
    return rows


#: The designs whose held-snapshot runs are graded against issue 12's bounds (the rest are peers).
HELD_GRADED = ("pgqueue_delete", "pgqueue")


def _held_growth_ratio(r: dict[str, Any]) -> float | None:
    """Table + index growth during the hold over the space the messages produced during it take
    when they are live (bytes per message of the vacuumed backlog at the start of the run)."""
    per = r.get("bytes_per_message")
    produced = r.get("held_produced")
    if r.get("held_growth_bytes") is None or not per or not produced:
        return None
    return float(r["held_growth_bytes"]) / float(produced * per)


def _held_rows(held: dict[str, Any] | None) -> list[tuple[str, str, str, str, str]]:
    """Issue 12's bounds for pgqueue's two consumers, per hold case."""
    rows: list[tuple[str, str, str, str, str]] = []
    if not held:
        return rows
    for name in HELD_GRADED:
        entry = held["designs"].get(name)
        if not entry:
            continue
        for case, r in entry["runs"].items():
            what = f"held snapshot ({case}), {entry['label']}"
            if not r["ok"]:
                rows.append(("H", what, "FAILURE", "", "FAILURE"))
                continue
            ratio = r.get("held_min_ratio")
            if case == "0":  # the control: reported beside the graded cases, not graded
                rows.append(("H", f"{what}: slowest {r.get('held_smooth')} s of the same seconds, nothing held",
                             _fmt(ratio, 2) + "×", "(control)", ""))
                if r.get("twin_min_ratio") is not None:
                    rows.append(("H", f"{what}: the same against its twin", _fmt(r["twin_min_ratio"], 2) + "×",
                                 "(control)", ""))
                continue
            # the backlog ran out during the hold or in the 5 s after it: the consumers waited for the
            # producers, so the rates there are the producers', and the rate bounds are not graded; the
            # row against the twin neither when the twin's ran out (its producers' rate, over the same span)
            dry = churn.held_dry(r)
            dry_verdict = "n/a (the backlog ran out: the producers' rate)"
            twin_dry = dry or churn.twin_dry(r)
            rows.append(("H", f"{what}: slowest {r.get('held_smooth')} s while held vs before",
                         _shown(ratio, 0.9) + "×", "≥ 0.9×", dry_verdict if dry else _verdict(ratio, 0.9)))
            if r.get("twin_min_ratio") is not None:
                twin = r["twin_min_ratio"]
                rows.append(("H", f"{what}: the same against its twin (the same load beside it, not held back)",
                             _shown(twin, 0.9) + "×", "≥ 0.9×",
                             dry_verdict if twin_dry else _verdict(twin, 0.9)))
            rec = r.get("recovery_s")
            rows.append(("H", f"{what}: back to ≥ 0.9× after the hold", "not within the run" if rec is None
                         else f"{rec} s", "≤ 5 s", dry_verdict if dry else
                         "MISS (not within the run)" if rec is None else _verdict(rec, 5, at_least=False)))
            growth = _held_growth_ratio(r)
            rows.append(("H", f"{what}: table + index growth during the hold vs the messages produced",
                         _shown(growth, 1.0, at_least=False) + "×", "≤ 1.0×",
                         _verdict(growth, 1.0, at_least=False)))
    return rows


def _depth_failed(per: dict[str, Any]) -> bool:
    """Whether a depth shape's measurement failed: a level whose dequeues found no message."""
    return any(r.get("empty") for r in per.values())


def _depth_ratios(dep: dict[str, Any], shape: str) -> tuple[float | None, float | None]:
    per = dep["shapes"][shape]
    levels = [str(x) for x in dep["levels"]]
    base = per.get(levels[0], {})
    lat = [(per[lv]["latency_ms"] / base["latency_ms"]) for lv in levels if lv in per and base.get("latency_ms")]
    buf = [(per[lv]["buffers"] / base["buffers"]) for lv in levels if lv in per and base.get("buffers")]
    return (max(lat) if lat else None, max(buf) if buf else None)


#: The verdict of a churn run's rate bounds when its backlog ran out (churn_dry).
CHURN_DRY = "n/a (the backlog ran out: the producers' rate)"


def churn_dry(r: dict[str, Any]) -> bool:
    """Whether a churn run (sections churn, held_xmin) ran its backlog out: from then on the
    consumers waited for the producers, so its windows measured the producers' rate, not how
    steady the consumers stay (bench.churn.churn_dry, which its "THE BACKLOG RAN OUT" log uses)."""
    return churn.churn_dry(r)


def _churn_rows(r: dict[str, Any], rate_what: str, size_what: str,
                failure_what: str) -> list[tuple[str, str, str, str, str]]:
    """Target 6's two verdicts for one pgqueue churn run: rate steadiness and bounded size."""
    if not r["ok"]:
        return [("6", failure_what, "FAILURE", "≥ 0.80", "FAILURE")]
    rate_verdict = CHURN_DRY if churn_dry(r) else _verdict(r.get("min_max_ratio"), 0.8)
    return [("6", rate_what, _shown(r.get("min_max_ratio"), 0.8), "≥ 0.80", rate_verdict),
            ("6", size_what, _shown(r.get("size_growth"), 1.25, at_least=False) + "×", "≤ 1.25× (bounded)",
             _verdict(r.get("size_growth"), 1.25, at_least=False))]


def failures(results: dict[str, Any]) -> list[str]:
    """Every failed correctness check or failed run, as text."""
    out = [f"section {name} raised: {tb.strip().splitlines()[-1]}" for name, tb in results.get("errors", {}).items()]
    wf = results.get("workflows")
    if wf:
        for r in wf["runs"]:
            if not r["ok"]:
                out.append(f"workflows {r['strategy']} with {r['workers']} workers: {'; '.join(r['problems'])}")
    for name in ("churn",):
        for design, r in (results.get(name) or {}).items():
            if not r["ok"]:
                out.append(f"churn {design}: {'; '.join(r['problems'])}")
    hx = results.get("held_xmin")
    if hx and not hx["ok"]:
        out.append(f"held xmin: {'; '.join(hx['problems'])}")
    wk = results.get("worker")
    if wk:
        for r in wk["runs"]:
            if not r.get("ok"):
                out.append(f"worker section {r['key']} (round {r['round'] + 1}): "
                           f"{'; '.join(r.get('problems') or []) or r.get('error')}")
    held = results.get("held")
    if held:
        for design, entry in held["designs"].items():
            for case, r in entry["runs"].items():
                if not r["ok"]:
                    out.append(f"held {design} ({case}): {'; '.join(r['problems'])}")
    lat = results.get("latency")
    if lat:
        for r in lat["runs"]:
            if not r["ok"]:
                out.append(f"latency: {'; '.join(r['problems'])}")
    for key in ("ops", "curves"):
        sec = results.get(key)
        if not sec:
            continue
        runs = sec.get("runs", []) + [r for p in sec.get("passes", {}).values() for r in p["runs"]]
        for r in runs:
            if not r.get("ok"):
                out.append(f"{key} {r['key']} ({r['clients']} clients): {r.get('error')}")
    st = results.get("stats")
    if st:
        for p in st["phases"]:
            if not p["ok"]:
                out.append(f"stats phase {p['mode']}: {p['error']}")
    gr = results.get("groups")
    if gr:
        out += [f"groups throughput {r['mode']} {r['queue']} (round {r['round'] + 1}): {r['error']}"
                for r in gr["throughput"]["runs"] if not r["ok"]]
        if not gr["rate"]["ok"]:
            out.append(f"groups rate limit: {gr['rate']['problem']}")
    dep = results.get("depth")
    if dep:
        for shape, per in dep["shapes"].items():
            for lv, r in per.items():
                if r.get("empty"):
                    out.append(f"depth {shape} {lv}: {r['empty']} dequeues found no message")
    return out


def render(results: dict[str, Any], out: Path) -> str:
    """Write the Markdown report (and plots under out's folder img/) and return its text."""
    img = out.parent / "img"
    meta = results["meta"]
    lines: list[str] = []
    w = lines.append
    fails = failures(results)
    w("# pgqueue benchmarks")
    w("")
    w(f"Generated by `{meta['command']}` on {meta['date']} "
      f"(profile **{meta['profile']}**, {meta['runtime_s'] / 60:.1f} minutes).")
    w("")
    if meta.get("noisy"):
        w(f"> **Noisy run.** The machine was busy when the run started (load average {meta['load_start']:.2f} "
          f"on {meta['machine']['nproc']} cores): absolute numbers and ratios may be off. Re-run on a quiet "
          "machine for numbers to quote.")
        w("")
    if meta["profile"] != "full":
        w(f"> **{meta['profile']} profile**: shorter runs and fewer repeats than the full suite; the numbers "
          "show the shape, not the values to quote.")
        w("")
    if fails:
        w("## FAILURE")
        w("")
        w("These runs failed (a correctness check, or a run that could not complete); they report no number:")
        w("")
        for f in fails:
            w(f"- {f}")
        w("")
    w("## Summary of the targets")
    w("")
    w("Ratios are taken within one run on one machine (medians of the alternated repeats). "
      "PASS/MISS compares with the issue's bound; a MISS says by how much.")
    w("")
    w("Why each missed target is missed, and what comes next: [performance.md](performance.md).")
    w("")
    w("| # | what | measured | bound | verdict |")
    w("|---|---|---|---|---|")
    for row in summary_rows(results):
        w("| " + " | ".join(row) + " |")
    w("")
    _machine(w, results)
    _ops(w, results, img, out)
    _worker(w, results, img, out)
    _profile(w, results)
    _workflows(w, results, img, out)
    _depth(w, results, img, out)
    _churn(w, results, img, out)
    _held(w, results, img, out)
    _latency(w, results)
    _stats(w, results)
    _groups(w, results)
    _counters(w)
    _spark(w)
    text = "\n".join(lines) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


def _rel(path: Path | None, out: Path) -> str | None:
    if path is None:
        return None
    return str(path.relative_to(out.parent))


def _img(w: Any, path: Path | None, out: Path, alt: str) -> None:
    rel = _rel(path, out)
    if rel:
        w(f"![{alt}]({rel})")
    else:
        w("_(plot skipped: matplotlib is not installed; `pip install -r python/requirements-bench.txt`)_")
    w("")


def _machine(w: Any, results: dict[str, Any]) -> None:
    meta = results["meta"]
    m = meta["machine"]
    w("## Machine and server")
    w("")
    w(f"- CPU: {m['cpu']} ({m['nproc']} cores), memory {m['mem_gb']:.1f} GiB, {m['kernel']}")
    w(f"- PostgreSQL {meta['settings'].get('server_version', '?')}, pgbench {meta['pgbench_version']}, "
      f"Python {meta['python']}")
    w(f"- pgqueue extension {meta['extension_version']} from commit `{meta['git']}`; reloptions of "
      f"pgqueue.message: {meta['reloptions']}")
    w(f"- Load average when the run started: {meta['load_start']:.2f}; when it ended: {meta['load_end']:.2f}")
    w(f"- Server: {'started by the suite (a private cluster on 127.0.0.1)' if meta['embedded'] else 'given by --dsn'}"
      "; clients (pgbench, Python) run on the same machine.")
    w("")
    w("Server settings (`pg_settings`). The headline numbers of targets 1-4 use durable commits "
      "(fsync, synchronous_commit and full_page_writes on); sections that measure CPU work or bloat "
      "rather than the disk run their sessions with `synchronous_commit = off` and say so.")
    w("")
    w("| setting | value |")
    w("|---|---|")
    for k, v in sorted(meta["settings"].items()):
        w(f"| {k} | {v} |")
    w("")
    w("### Reproduce")
    w("")
    w("```sh")
    w("cd /path/to/pgqueue && make install          # the extension under test")
    w(".venv/bin/pip install -r python/requirements-bench.txt")
    w(f"{meta['command_full']}             # everything: about 50 minutes, plus about 12 per design of the "
      "held section (up to 6)")
    w(".venv/bin/python -m bench --only ops curves  # one or more sections: " + " ".join(SECTIONS))
    w(".venv/bin/python -m bench --smoke           # every benchmark for a moment (CI)")
    w("```")
    w("")
    w("Without `--dsn` the suite starts its own server with the settings above "
      "(`bench/config.py`, BENCH_SETTINGS); `--dsn` runs against an existing server (it needs a role that "
      "can create databases, and the extension installed). Raw results are saved as JSON "
      f"(`{meta['json']}`, not committed: git ignores it); `--render FILE.json` re-renders this report "
      "from them.")
    w("")


def _ops(w: Any, results: dict[str, Any], img: Path, out: Path) -> None:
    ops = results.get("ops")
    if ops:
        w("## Targets 1-4: single operations (pgbench)")
        w("")
        how = (f"-T {ops['seconds']}" if ops["seconds"] else f"-t {ops['transactions']}")
        w(f"pgbench `-M prepared -c {ops['clients']} -j 2 {how}`, scripts in `bench/pgbench/`, reference "
          "designs in `bench/sql/`. Each run starts from emptied tables; every dequeue run gets the same "
          "fresh backlog of ready messages, then `VACUUM (ANALYZE)`. Designs alternate round-robin (order "
          f"rotated each round), {ops['repeats']} rounds; the number is the median, messages counted in the "
          "table (rows added or removed) over pgbench's measured time. `CHECKPOINT` before each round.")
        w("")
        _unavailable(w, ops.get("unavailable"))
        passes = list(ops["passes"])
        w("| operation | " + " | ".join(f"{p.replace('_', ' ')}: msg/s (median)" for p in passes) + " |")
        w("|---|" + "---|" * len(passes))
        failed = {p: _failed_keys(ops["passes"][p]["runs"]) for p in passes}
        for key, label in ops["labels"].items():
            cells = ["FAILURE" if key in failed[p] else _fmt(ops["passes"][p]["median"].get(key)) for p in passes]
            w(f"| {label} | " + " | ".join(cells) + " |")
        w("")
        _retried(w, ops)
        w("Per-round ratios (min–max over rounds) for the targets:")
        w("")
        w("| target | " + " | ".join(passes) + " |")
        w("|---|" + "---|" * len(passes))
        for tgt, desc, a, b, _bound in OPS_TARGETS:
            w(f"| {tgt}: {desc} | " + " | ".join(_paired(ops["passes"][p]["runs"], a, b) or "n/a" for p in passes)
              + " |")
        w("")
    cur = results.get("curves")
    if cur:
        w("### Throughput against clients")
        w("")
        how = f"-T {cur['seconds']}" if cur["seconds"] else f"-t {cur['transactions']}"
        w(f"Durable commits, pgbench `{how}`, {cur['repeats']} round(s) per client count, designs alternated; "
          "peers through their own APIs: pgmq's send, pop and read + delete (30 s visibility timeout), PgQ's "
          "insert_event (PgQ has no per-message dequeue: consumers read batches between ticks). PgQueuer has no "
          "SQL API: its point in the lease panel is its own throughput mode (bench/peers.py) with as many "
          "consumers as clients, each fetching batches of 10, one producer enqueuing beside them, for "
          f"{cur.get('pgqueuer_seconds', '?')} s. Reproduce: `.venv/bin/python -m bench --only curves` "
          "(`--profile quick` for shorter runs).")
        w("")
        _unavailable(w, cur.get("unavailable"))
        _img(w, plots.throughput_vs_clients(cur, img / "throughput_vs_clients.png"), out,
             "messages per second against clients, per design")
        clients = cur["clients"]
        w("| design | " + " | ".join(f"{c} clients" for c in clients) + " |")
        w("|---|" + "---|" * len(clients))
        for key, label in cur["labels"].items():
            w(f"| {label} | " + " | ".join(_fmt(cur["median"][key].get(str(c))) for c in clients) + " |")
        w("")


def _retried(w: Any, ops: dict[str, Any]) -> None:
    """The runs that retry a deadlock (pgbench --max-tries): how many transactions were run again."""
    retrying = [r for p in ops["passes"].values() for r in p["runs"] if r.get("max_tries", 1) > 1]
    if not retrying:
        return
    labels = sorted({ops["labels"].get(r["key"], r["key"]) for r in retrying})
    retried = sum(int(r.get("retried", 0)) for r in retrying)
    done = sum(int(r.get("transactions", 0)) for r in retrying)
    w(f"Acknowledge-and-fetch can rarely deadlock (40P01, docs/guarantees.md) and `pgqueue worker` runs such "
      f"a round again; these runs do the same, up to {max(r['max_tries'] for r in retrying)} tries a "
      f"transaction (pgbench `--max-tries`): {retried:,} of {done:,} transactions were retried "
      f"({'; '.join(labels)}), and a transaction still failing after that fails the run.")
    w("")


def _unavailable(w: Any, unavailable: dict[str, str] | None) -> None:
    for design, reason in (unavailable or {}).items():
        w(f"- {design}: not available on this server: {reason}")
    if unavailable:
        w("")


def _worker(w: Any, results: dict[str, Any], img: Path, out: Path) -> None:
    wk = results.get("worker")
    if not wk:
        return
    w("### The worker end to end (issue 13)")
    w("")
    how = f"-T {wk['sql_seconds']}" if wk["sql_seconds"] else f"-t {wk['sql_transactions']}"
    w(f"{wk['processes']} processes of `pgqueue worker DSN bench bench.noop:handle --concurrency "
      f"{wk['concurrency']}` (a handler that does nothing; the worker acknowledges in the statement of its next "
      f"fetch, `message_complete_and_dequeue`) drain a backlog of {wk['messages']:,} messages, durable commits"
      + ("; and the same with `bench.noop:handle_async`, that handler as an `async def`, which `pgqueue worker` "
         "runs on its asyncio worker as a task on the event loop instead of on a handler thread. "
         if "worker_async" in wk["labels"] else ". ") +
      "The rate comes from the queue's row count sampled every 0.25 s: messages gone between 90% and 10% of the "
      "backlog left, over the time between (start-up and tail left out; a backlog too small for that gives the "
      "whole drain from launch). The check: queue empty, no dead letters, every process exits 0 on SIGTERM. "
      f"Alternated with it in the same run, with pgbench `-c {wk['processes']} {how}`: the SQL-level lease cycle "
      "(dequeue with a 30 s lease + `message_complete`), `message_complete_and_dequeue` alone (one message a "
      f"call, and the worker's own shape: the previous {wk['concurrency']} completed and the next "
      f"{wk['concurrency']} leased in one call), the delete-mode dequeue, pgmq's read + delete (one message, and "
      f"read {wk['concurrency']} + delete of the {wk['concurrency']}) when the server has pgmq, and "
      "PgQueuer's throughput mode on the same server: its documented benchmark setup (producers and consumers "
      "together for a fixed time, jobs handled per second; 5 consumers fetching batches of 10, one producer "
      "enqueuing batches of 10, asyncpg), driven through its public API by bench/peers.py, its schema "
      f"installed by `python -m pgqueuer install`, {wk['pgqueuer_seconds']} s a run from its first job handled"
      + (f"; and PgQueuer's drain mode, the like-for-like run: {wk['messages']:,} jobs enqueued first, then "
         f"drained by {wk['processes']} processes of its 5 consumers (batches of 10) with no producer beside "
         "them, the rate taken as the worker's is (rows left in its queue table every 0.25 s, 90% to 10%)"
         if "pgqueuer_drain" in wk["labels"] else "")
      + (f"; event loop: {', '.join(loops)} (PgQueuer's own benchmark program and CLI run on uvloop)"
         if (loops := sorted({str(r["loop"]) for r in wk["runs"] if r.get("loop")})) else "")
      + " (with `--pgqueuer-tool "
      "PATH`, also PgQueuer's own tools/benchmark.py as it is, from a checkout of its repository). Median of "
      f"{wk['repeats']} round(s), order rotated. Reproduce: `.venv/bin/python -m bench --only worker` "
      "(`--profile quick` for shorter runs).")
    w("")
    pq = wk["pgqueuer"]
    if not pq.get("available"):
        w(f"- PgQueuer: not available on this server: {pq.get('reason', '?')}")
        w("")
    _unavailable(w, wk.get("unavailable"))
    _img(w, plots.worker(wk, img / "worker_end_to_end.png"), out, "messages per second: worker, SQL, PgQueuer")
    w("| what | msg/s (median) | each round | the worker vs this |")
    w("|---|---|---|---|")
    failed = _failed_keys(wk["runs"])
    worker = wk["median"].get("worker")
    for key, label in wk["labels"].items():
        rounds = ", ".join(_fmt(r.get("msgs_per_s")) if r.get("ok") else "FAILURE"
                           for r in wk["runs"] if r["key"] == key)
        v = wk["median"].get(key)
        if key in failed or "worker" in failed:
            w(f"| {label} | {'FAILURE' if key in failed else _fmt(v)} | {rounds} | FAILURE |")
            continue
        w(f"| {label} | {_fmt(v)} | {rounds} | {_fmt(_ratio(worker, v), 2)}× |")
    w("")
    how_taken = sorted({r["how"] for r in wk["runs"] if r["key"] == "worker" and r.get("how")})
    if how_taken:
        w("Worker rate taken from: " + "; ".join(how_taken) + ".")
        w("")


def _profile(w: Any, results: dict[str, Any]) -> None:
    pr = results.get("profile")
    if not pr:
        return
    w("### Where the time of one call goes (one session, no concurrency)")
    w("")
    w(f"One session with synchronous_commit off calls each operation {pr['calls']} times per round, "
      f"{pr['rounds']} rounds with the order rotated; client wall time per call in the best round (CPU work "
      "plus one round trip; the best round is the one the rest of the machine disturbed least). A second "
      "session does the same with `plan_cache_mode = force_generic_plan`: the difference is time spent "
      "re-planning statements on every call. Then calls under auto_explain (nested statements, timing off): the statements inside "
      "each function, per call, and what is left of the call's server time (PL/pgSQL and function-call "
      "overhead: variable assignments, checks, SET search_path, plan cache look-ups).")
    w("")
    w("| operation | µs per call | µs per call, generic plans forced |")
    w("|---|---|---|")
    for key, label in pr["labels"].items():
        w(f"| {label} | {_fmt(pr['per_call_us'].get(key), 1)} | "
          f"{_fmt(pr.get('per_call_generic_us', {}).get(key), 1)} |")
    w("")
    if pr.get("breakdown"):
        w("| operation | server ms per call | in nested statements | elsewhere | top statements (ms per call, buffers) |")
        w("|---|---|---|---|---|")
        for key, b in pr["breakdown"].items():
            top = "; ".join(f"`{s['statement'][:70].replace('|', '/')}` {s['ms']:.4f} ms, {s['buffers']:.0f} buf"
                            for s in b["statements"][:3])
            w(f"| {pr['labels'].get(key, key)} | {b['total_ms']:.4f} | {b['nested_ms']:.4f} | "
              f"{b['overhead_ms']:.4f} | {top} |")
        w("")
    titles = {"create": "message_create", "dequeue": "the delete-mode dequeue"}
    for name, steps in (pr.get("ladders") or {}).items():
        seed = next((r["us"] for r in steps if r["key"] == "seed001"), None)
        w(f"#### The cost of {titles.get(name, name)}, piece by piece (inside the server)")
        w("")
        w(f"A DO block calls each step {pr['ladder_calls']} times and commits after every call "
          "(synchronous_commit off), steps rotated over "
          f"{pr['rounds']} rounds; server time per call in the best round, no round trip and no client. "
          "Each `+` row is a PL/pgSQL function (created for this measurement only, `bench/profile.py`) "
          "that adds one piece of pgqueue's work to the row above it."
          + (" Each dequeue step starts from its own fresh, vacuumed backlog." if name == "dequeue" else ""))
        w("")
        w("| step | µs per call (incl. commit) | rate vs seed 001 (its µs / these µs) |")
        w("|---|---|---|")
        for r in steps:
            w(f"| {r['label']} | {r['us']:.1f} | {_fmt(_ratio(seed, r['us']), 2)}× |")
        w("")


def _workflows(w: Any, results: dict[str, Any], img: Path, out: Path) -> None:
    wf = results.get("workflows")
    if not wf:
        return
    w("## Workflows (Python driver, seed 002's exactly-once check)")
    w("")
    w(f"A fixture of {wf['items']:,} items drained by N worker threads (one connection each, "
      "synchronous_commit off as in seed 002); each worker records what it claimed and what it "
      "finished; merged, every item must appear exactly once and the table must be left with nothing "
      f"unfinished. Best of {wf['repeats']} run(s); FAILURE where the check failed.")
    w("")
    _img(w, plots.workflows(wf, img / "workflows.png"), out, "items per second against workers")
    workers = wf["workers"]
    w("| strategy | " + " | ".join(f"{x} workers" for x in workers) + " |")
    w("|---|" + "---|" * len(workers))
    for name, label in wf["labels"].items():
        cells = []
        for x in workers:
            v = wf["best"][name].get(str(x))
            cells.append("FAILURE" if v is None else _fmt(v))
        w(f"| {label} | " + " | ".join(cells) + " |")
    w("")
    races = {r["strategy"]: r["races"] for r in wf["runs"] if r["races"] and r["workers"] == max(workers)}
    if races:
        w("Advisory-lock races hit (at the largest worker count): "
          + ", ".join(f"{k}: {v}" for k, v in races.items()) + ".")
        w("")


def _depth(w: Any, results: dict[str, Any], img: Path, out: Path) -> None:
    dep = results.get("depth")
    if not dep:
        return
    w("## Target 5: dequeue cost against queue depth")
    w("")
    w("One database per depth, the backlog built with INSERT ... SELECT generate_series and vacuumed; "
      "the depths are sampled in turn (round and round) on sessions with synchronous_commit off. "
      "Latency is the client's wall time of `SELECT * FROM pgqueue.message_dequeue('depth', 1, 0)` "
      f"(median of up to {dep.get('samples', '?')} calls); buffers are shared hit + read of the same call under "
      "EXPLAIN (ANALYZE, BUFFERS), nested statements included. Shapes marked extra go beyond the issue's list.")
    w("")
    _img(w, plots.depth(dep, img / "dequeue_cost_vs_depth.png"), out, "dequeue cost against depth")
    levels = [str(x) for x in dep["levels"]]
    w("| shape | " + " | ".join(f"{int(lv):,}: ms / buffers" for lv in levels) + " | worst ratio vs first |")
    w("|---|" + "---|" * (len(levels) + 1))
    for shape, per in dep["shapes"].items():
        cells = ["n/a" if lv not in per else "FAILURE" if per[lv].get("empty")
                 else f"{per[lv]['latency_ms']:.3f} / {per[lv]['buffers']:.0f}" for lv in levels]
        lat, buf = _depth_ratios(dep, shape)
        w(f"| {dep['labels'].get(shape, shape)} | " + " | ".join(cells)
          + (" | FAILURE |" if _depth_failed(per) else f" | latency {_fmt(lat, 2)}×, buffers {_fmt(buf, 2)}× |"))
    w("")
    w("Where the buffers go at the deepest level (one call under auto_explain, nested statements):")
    w("")
    w("| shape | statement | buffers | ms |")
    w("|---|---|---|---|")
    for shape, per in dep["shapes"].items():
        rows = [b for b in per.get(levels[-1], {}).get("breakdown", [])
                if not b["statement"].startswith("SELECT * FROM pgqueue.message_dequeue(")]
        for b in sorted(rows, key=lambda b: -b["buffers"])[:4]:
            stmt = b["statement"].replace("|", "\\|")[:110]
            w(f"| {shape} | `{stmt}` | {b['buffers']} | {b['ms']:.3f} |")
    w("")


def _churn(w: Any, results: dict[str, Any], img: Path, out: Path) -> None:
    ch = results.get("churn")
    if ch:
        any_run = next(iter(ch.values()))
        w("## Target 6: churn")
        w("")
        w(f"{any_run['producers']} producer and {any_run['consumers']} consumer processes for {any_run['seconds']} s "
          f"(synchronous_commit off), starting from a backlog of {any_run['backlog']:,} messages; producers nap "
          f"while the backlog exceeds {any_run['cap']:,}, so the live set is bounded and table growth is bloat. "
          "Every message is checked finished exactly once (or still queued) at the end. Autovacuum runs with "
          "the server's settings (table above; the extension sets no reloptions), except in the run labelled "
          "autovacuum_naptime 10 s, which lowers that one server setting for its duration "
          "([performance.md](performance.md) explains why).")
        w("")
        _img(w, plots.churn(ch, img / "churn_throughput.png"), out, "throughput over time under churn")
        w("| design | autovacuum_naptime | mean msg/s | slowest / fastest window | windows (msg/s) "
          "| size start → peak → end (MiB) | autovacuums | check |")
        w("|---|---|---|---|---|---|---|---|")
        for _name, r in ch.items():
            s = r["samples"]
            sizes = (f"{r.get('size_start', 0) / 2**20:.1f} → "
                     f"{max([x['total_bytes'] for x in s] or [0]) / 2**20:.1f} → {r.get('size_end', 0) / 2**20:.1f}")
            av = s[-1]["autovacuums"] if s else "?"
            wins = ", ".join(f"{x:,.0f}" for x in r["windows"])
            w(f"| {r['label']} | {r.get('autovacuum_naptime', '?')} | {_fmt(r['mean_rate'])} "
              f"| {_fmt(r.get('min_max_ratio'), 2)} | {wins} | {sizes} "
              f"| {av} | {r['check']['summary'] if r['ok'] else 'FAILURE: ' + '; '.join(r['problems'])}"
              + ("; the backlog ran out: from then on the rate is the producers'" if churn_dry(r) else "") + " |")
        w("")
    hx = results.get("held_xmin")
    if hx:
        hold = hx.get("hold", {})
        w("## Target 7: churn with a held snapshot (xmin)")
        w("")
        w(f"The same churn on pgqueue for {hx['seconds']} s; a REPEATABLE READ transaction in the same database "
          f"takes its snapshot at {hold.get('start', 0):.0f} s and holds it until {hold.get('end', 0):.0f} s. "
          f"Baseline: median per-second rate before the snapshot. Recovery: the first {_held_window(hx)} window "
          "after the snapshot ends whose mean is back at 80% of the baseline, counted from the end of the hold.")
        w("")
        _img(w, plots.held_xmin(hx, img / "held_xmin.png"), out, "throughput with a held snapshot")
        w(f"| baseline msg/s | slowest {_held_window(hx)} while held | mean while held | recovery after release "
          f"| mean in the {_after_span(hx)} after | peak size (MiB) | check |")
        w("|---|---|---|---|---|---|---|")
        s = hx["samples"]
        w(f"| {_fmt(hx.get('held_baseline'))} | {_fmt(hx.get('held_min'))} ({_fmt(hx.get('held_min_ratio'), 2)}×) "
          f"| {_fmt(hx.get('held_mean_ratio'), 2)}× | "
          f"{'not within the run' if hx.get('recovery_s') is None else str(hx['recovery_s']) + ' s'} "
          f"| {_fmt(hx.get('after_minute_ratio'), 2)}× "
          f"| {max([x['total_bytes'] for x in s] or [0]) / 2**20:.1f} "
          f"| {hx['check']['summary'] if hx['ok'] else 'FAILURE: ' + '; '.join(hx['problems'])}"
          + ("; the backlog ran out: from then on the rate is the producers'" if churn_dry(hx) else "") + " |")
        w("")


def _held(w: Any, results: dict[str, Any], img: Path, out: Path) -> None:
    held = results.get("held")
    if not held:
        return
    w("## Held snapshots")
    w("")
    w(f"Every design runs the churn above with {held['clients']} client sessions (producers and consumers, "
      "each a process of its own, synchronous_commit off; PgQ gives every registered consumer every event, so it runs one consumer reading "
      f"batches and the rest as producers), from a backlog of {held['backlog']:,} messages (producers hold back "
      f"while it is above {held['backlog'] + held['slack']:,}; consumers faster than the producers draw it down, "
      "and a run where it ran out during the hold or just after says so), "
      f"for {held['before']} s, then {held['hold']} s with the xmin horizon held back, then {held['after']} s "
      "after; each design and case in a fresh database, one after the other. "
      "Free-running: the median per-second rate of messages finished before the hold (its first 5 s left out). "
      "Slowest window: the lowest mean over consecutive seconds inside the hold, against the free-running rate. "
      "Back to ≥ 0.9×: seconds from the end of the hold to the first such window whose mean is at least 0.9× "
      "the free-running rate; mean after: the mean rate over the seconds after the hold (up to 60). Growth: pg_total_relation_size of every table of the design's schema (indexes and "
      "TOAST included) at the end of the hold minus at its start, against the messages produced meanwhile "
      "times the bytes one message takes in the vacuumed backlog (≤ 1.0× means no more than the messages "
      "themselves). Autovacuum runs with the server's settings.")
    w("")
    for entry in held["designs"].values():
        if not entry["available"]:
            w(f"- {entry['label']}: not available on this server: {entry.get('reason', '?')}")
        elif entry.get("setup_failed"):  # a peer whose run raised: its cases below say FAILURE
            w(f"- {entry['label']}: setup failed: {entry['setup_failed']}")
    if any(not e["available"] or e.get("setup_failed") for e in held["designs"].values()):
        w("")
    _img(w, plots.held_snapshots(held, img / "held_snapshots.png"), out,
         "rate over time against the free-running rate, per design, with the hold marked")
    for case, desc in held["cases"].items():
        w(f"### ({case}) {desc}")
        w("")
        w("| design | producers / consumers | free-running msg/s | slowest window while held | mean while held "
          "| back to ≥ 0.9× after | mean after | growth during the hold (MiB) | messages produced during it "
          "| growth vs their size | buffer accesses/s: median before, highest second of the hold (and the one after it) | check |")
        w("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for entry in held["designs"].values():
            r = entry["runs"].get(case)
            if r is None:
                continue
            label = entry["label"] + (f" {entry['version']}" if entry.get("version") else "")
            if not r["ok"]:
                w(f"| {label} | {entry['producers']} / {entry['consumers']} | FAILURE | | | | | | | | "
                  f"| FAILURE: {'; '.join(r['problems'])} |")
                continue
            rec = r.get("recovery_s")
            growth = r.get("held_growth_bytes")
            w(f"| {label} | {entry['producers']} / {entry['consumers']} | {_fmt(r.get('held_baseline'))} "
              f"| {_fmt(r.get('held_min'))} ({_fmt(r.get('held_min_ratio'), 2)}×, {r.get('held_smooth')} s) "
              f"| {_fmt(r.get('held_mean_ratio'), 2)}× "
              f"| {'not within the run' if rec is None else str(rec) + ' s'} "
              f"| {_fmt(r.get('after_minute_ratio'), 2)}× "
              f"| {'n/a' if growth is None else f'{growth / 2**20:.1f}'} | {_fmt(r.get('held_produced'))} "
              f"| {_fmt(_held_growth_ratio(r), 2)}× "
              f"| {_fmt(r.get('held_blocks_before'))}, {_fmt(r.get('held_blocks_peak'))} "
              f"| {r['check']['summary']}"
              + ("; the backlog ran out (under 2% of its start) during the hold or in the 5 s after it: the "
                 "rate is the producers'" if churn.held_dry(r) else "") + " |")
        w("")
        if held.get("twin"):
            w("Against the twin (the same design and load at the same time in a second database of the "
              "server, which the hold does not hold back): the ratio of the two rates over consecutive "
              "seconds, against that ratio before the hold; so a second in which the machine itself is slow "
              "counts for both.")
            w("")
            w("| design | twin free-running msg/s | slowest window while held vs the twin | mean while held "
              "vs the twin | back to ≥ 0.9× of the twin after | twin check |")
            w("|---|---|---|---|---|---|")
            for entry in held["designs"].values():
                r = entry["runs"].get(case)
                if r is None or "twin_deq_per_s" not in r:
                    continue
                trec = r.get("twin_recovery_s")
                w(f"| {entry['label']} | {_fmt(r.get('twin_baseline'))} "
                  f"| {_fmt(r.get('twin_min_ratio'), 2)}× ({r.get('held_smooth')} s) "
                  f"| {_fmt(r.get('twin_mean_ratio'), 2)}× "
                  f"| {'not within the run' if trec is None else str(trec) + ' s'} "
                  f"| {r.get('twin_check', {}).get('summary', '?')}"
                  + ("; the twin's backlog ran out (under 2% of its start) during the hold or in the 5 s after "
                     "it: its rate is its producers'" if churn.twin_dry(r) else "") + " |")
            w("")


def _latency(w: Any, results: dict[str, Any]) -> None:
    lat = results.get("latency")
    if not lat:
        return
    w("## Target 8: wake-up latency with LISTEN/NOTIFY")
    w("")
    n = lat["runs"][0]["messages"]
    w(f"A queue with notify on; an idle worker LISTENs on one connection and dequeues (with a lease, then "
      f"completes) on another. {n} messages enqueued one at a time with random gaps; latency is from just "
      "before the producer's `message_create` to the worker having the message (the enqueue's commit, "
      "the notification, the wake-up and the dequeue's own commit).")
    w("")
    w("| commits | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | of which: to the notification, p50 / p99 "
      "| of which: the dequeue, p50 / p99 | received |")
    w("|---|---|---|---|---|---|---|---|")
    for r in lat["runs"]:
        tag = "synchronous_commit off" if r["sync_off"] else "durable"
        w(f"| {tag} | {_fmt(r['p50_ms'], 2)} | {_fmt(r['p90_ms'], 2)} | {_fmt(r['p99_ms'], 2)} | "
          f"{_fmt(r['max_ms'], 2)} | {_fmt(r.get('notify_p50_ms'), 2)} / {_fmt(r.get('notify_p99_ms'), 2)} | "
          f"{_fmt(r.get('dequeue_p50_ms'), 2)} / {_fmt(r.get('dequeue_p99_ms'), 2)} | "
          f"{r['received']}/{r['messages']} |")
    w("")


def _stats(w: Any, results: dict[str, Any]) -> None:
    st = results.get("stats")
    if not st:
        return
    w("## Target 9: queue_stats on a deep queue")
    w("")
    parts = ", ".join(f"{v:,} {k}" for k, v in st["parts"].items())
    w(f"Queue of {st['messages']:,} messages ({parts}; plus {st['messages'] // 20:,} dead letters), vacuumed. "
      f"`queue_stats('stats')`: median {st['median_ms']:.1f} ms, max {st['max_ms']:.1f} ms over "
      f"{len(st['call_ms'])} calls; EXPLAIN ANALYZE {st['explain_ms']:.1f} ms, {st['buffers']:,} shared buffers; "
      f"`queue_stats()` over all queues {st['all_queues_ms']:.1f} ms.")
    w("")
    w("Producers and consumers (pgbench, `message_create` and delete-mode `message_dequeue` on the same "
      "queue, synchronous_commit off) with nothing beside them, with a monitor calling queue_stats every "
      "second, and with a loop calling it back to back; the order of the three phases rotates every round, "
      "and each phase runs on the queue above built afresh in a database of its own (the consumers take its "
      "expired leases and ready messages, so a phase on what the one before left would measure other work). "
      "Consume: messages removed from the table a second.")
    w("")
    w("| beside the load | produce tx/s | consume msg/s | vs none (produce / consume) |")
    w("|---|---|---|---|")
    med = st["median"]
    for mode in ("none", "every_1s", "back_to_back"):
        m = med[mode]
        w(f"| {mode} | {_fmt(m['produce_tps'])} | {_fmt(m['consume_tps'])} | "
          f"{_fmt(_ratio(m['produce_tps'], med['none']['produce_tps']), 2)} / "
          f"{_fmt(_ratio(m['consume_tps'], med['none']['consume_tps']), 2)} |")
    w("")
    calls = [p["stats_median_ms"] for p in st["phases"] if p.get("stats_median_ms")]
    if calls:
        w(f"queue_stats itself under that load: median {statistics.median(calls):.0f} ms per call.")
        w("")


def _groups(w: Any, results: dict[str, Any]) -> None:
    gr = results.get("groups")
    if not gr:
        return
    w("## Message groups and the rate limit (issue 14)")
    w("")
    tp = gr["throughput"]
    w(f"Throughput: a queue without groups and one of `group_concurrency` 1 whose messages are spread over "
      f"{tp['groups']:,} groups, {tp['messages']:,} messages each (topped up before each run), {tp['clients']} "
      "pgbench clients taking one message a call (synchronous_commit off), the queues alternating, a VACUUM "
      "before each run; the rate is messages removed from the table over pgbench's measured time.")
    w("")
    w("| mode | round | without groups /s | grouped /s | ratio |")
    w("|---|---|---|---|---|")
    for mode in ("delete", "lease"):
        rounds = sorted({r["round"] for r in tp["runs"] if r["mode"] == mode})
        for rnd in rounds:
            by = {r["queue"]: r["tps"] for r in tp["runs"] if r["mode"] == mode and r["round"] == rnd}
            w(f"| {mode} | {rnd + 1} | {_fmt(by.get('plain'))} | {_fmt(by.get('grouped'))} | "
              f"{_fmt(_ratio(by.get('grouped'), by.get('plain')), 2)} |")
    w("")
    fa = gr["fairness"]
    w(f"Fairness: one group of {fa['big']:,} messages enqueued first ({fa['load_s']:.0f} s through "
      f"`message_create_batch`), then {fa['small']:,} groups of {fa['per_group']}; one consumer, lease + "
      f"complete a message at a time. Every small group had its first message by delivery "
      f"{_fmt(fa['last_first'])}; the big group got {fa['big_in_first']} of the first {fa['bound']:,} deliveries.")
    w("")
    w("Cost against size (one session, delete mode, median client time of one `message_dequeue` and its "
      "shared buffers):")
    w("")
    w("| axis | messages | groups | ms per call | buffers |")
    w("|---|---|---|---|---|")
    for axis, per in gr["flat"].items():
        for size in ("small", "large"):
            c = per[size]
            w(f"| {axis} | {c['messages']:,} | {c['groups']:,} | {c['median_ms']:.3f} | {c['buffers']} |")
    w("")
    rl = gr["rate"]
    w(f"Rate limit: `p_rate_limit => {rl['rate']}`, 4 pgbench clients asking for 10 messages a call "
      f"({_fmt(rl['calls_per_s'])} calls/s) for {rl['seconds']:.1f} s: {rl['delivered']:,} delivered against "
      f"{_fmt(rl['expected'])} at the limit.")
    w("")


def _counters(w: Any) -> None:
    """The counters' cost and the metrics endpoint's (issue 15), measured by
    bench/experiments/counters/run.sh and scrape.sh, written up by hand in bench/results/counters.md."""
    path = Path(__file__).resolve().parent / "results" / "counters.md"
    if path.exists():
        w(path.read_text().rstrip("\n"))
        w("")


def _spark(w: Any) -> None:
    """Enqueue throughput from Spark (issue 5), measured by bench/spark.py on its own."""
    path = Path(__file__).resolve().parent / "results" / "spark.json"
    w("## Spark: enqueue throughput from a DataFrame")
    w("")
    if not path.exists():
        w("Not measured yet: run `.venv/bin/python -m bench.spark --rows 1000000 "
          "--json bench/results/spark.json`, then `pgqueue bench --out docs/benchmarks.md` (or `--render` of "
          "a run's JSON under bench/results/, which stays on the machine that ran it).")
        w("")
        return
    data = json.loads(path.read_text())
    w(f"`{data['command']}` on {data['date']} (load average {data['load_end']:.2f} when it finished): "
      "`df.write.format(\"pgqueue\")` in task mode (one transaction per partition, "
      "`message_create_batch` in chunks), Spark local mode on this machine, a throwaway server.")
    w("")
    w("| rows | partitions | mode | seconds | messages/s |")
    w("|---|---|---|---|---|")
    for r in data["results"]:
        w(f"| {r['rows']:,} | {r['partitions']} | {r['mode']} | {r['seconds']:.2f} | {r['per_second']:,.0f} |")
    w("")
    if data.get("stream"):
        _spark_stream(w, data["stream"])


def _spark_stream(w: Any, data: dict[str, Any]) -> None:
    """Structured Streaming's write and read throughput (issue 17): ``bench.spark --stream``,
    saved under the key ``stream`` of bench/results/spark.json."""
    cpus = f" on {data['cpus']} cores" if data.get("cpus") else ""
    w("### Spark: streaming write and read throughput")
    w("")
    w(f"`{data['command']}` (key `stream`) on {data['date']}, load average {data['load_end']:.2f}"
      f"{cpus} when it finished (it counts the run's own Spark and PostgreSQL processes; far above "
      "the core count, other work shared the machine and the numbers are lower bounds). *stream-write*: `readStream.parquet` (availableNow, "
      "about 100,000 rows per micro-batch) into `writeStream.format(\"pgqueue\")`: every task stages "
      "its rows, the driver publishes each micro-batch once (`spark_publish`), so each message is "
      "written twice. *stream-read*: `readStream.format(\"pgqueue\")` (claims of 100,000 messages, "
      "read by id range, acknowledged when the micro-batch commits) into a `foreachBatch` that only "
      "counts. Each time runs from `start()` to the end of the query, start-up included.")
    w("")
    w("| rows | partitions | direction | seconds | messages/s |")
    w("|---|---|---|---|---|")
    for r in data["results"]:
        w(f"| {r['rows']:,} | {r['partitions']} | {r['mode']} | {r['seconds']:.2f} | {r['per_second']:,.0f} |")
    w("")
    rate = {(r["mode"], r["partitions"]): r["per_second"] for r in data["results"]}
    ratios = [f"{mode.split('-')[1]} {rate[(mode, 2)] / rate[(mode, 1)]:.2f}x"
              for mode in ("stream-write", "stream-read") if (mode, 1) in rate and (mode, 2) in rate]
    if ratios:
        slower = any(rate[(m, 2)] < rate[(m, 1)] for m in ("stream-write", "stream-read")
                     if (m, 1) in rate and (m, 2) in rate)
        why = (f" Below 1x: {data['cpus']} cores run Spark's tasks, their Python workers and PostgreSQL "
               "together, so a second partition adds no core to work with.") if slower and data.get("cpus") else ""
        w(f"2 partitions against 1: {', '.join(ratios)}.{why}")
        w("")
