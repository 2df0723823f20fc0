"""Print a churn run's per-second samples beside its rate (issue 12's churn analysis).

Usage: .venv/bin/python bench/experiments/churn_samples/show.py RESULTS.json [DESIGN]

RESULTS.json is what ``python -m bench --only churn --json RESULTS.json`` saved. One line per
second: messages finished, dead tuples of the table, autovacuum runs so far, checkpoints so far,
whether a vacuum of the table was running, and the database's buffer accesses per message
finished in that second (all processes: producers, consumers, autovacuum). Then the 15-s windows
and the slowest against the fastest.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main() -> None:
    data = json.loads(open(sys.argv[1]).read())
    runs: dict[str, Any] = data["churn"]
    design = sys.argv[2] if len(sys.argv) > 2 else next(iter(runs))
    r = runs[design]
    deq = r["deq_per_s"]
    print("second  finished  dead  autovacuums  checkpoints  vacuuming  buffers/message")
    prev = None
    for s in r["samples"]:
        t = int(s["t"])
        if t >= len(deq):
            break
        per = ""
        if prev is not None and s.get("blocks") is not None and prev.get("blocks") is not None and deq[t]:
            per = f"{(s['blocks'] - prev['blocks']) / deq[t]:.1f}"
        prev = s
        print(f"{t:6d}  {deq[t]:8d}  {s['dead']:6d}  {s['autovacuums']:11d}  {s.get('checkpoints', ''):>11}  "
              f"{'yes' if s.get('vacuuming') else '':>9}  {per:>15}")
    print("windows:", ", ".join(f"{w:,.0f}" for w in r["windows"]))
    print(f"slowest / fastest: {r.get('min_max_ratio', 0):.3f}")


if __name__ == "__main__":
    main()
