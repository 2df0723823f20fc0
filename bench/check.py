"""Seed 002's correctness check (the method of Marko Tiikkaja's "Queues, queues, they all fall
down", see docs/design.md): every consumer records what it got; merged, every message appears
exactly once.

A consumer records into a :class:`Recorder`; :func:`exactly_once` merges the recorders and
compares the result with what was expected. A benchmark whose check fails reports FAILURE
instead of a number. ``fault="duplicate"`` makes a recorder record its first message twice:
a deliberately broken consumer, which the check must catch (tests/test_bench_smoke.py).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


class Recorder:
    """What one consumer got, in order (message ids or tokens, as 64-bit integers)."""

    def __init__(self, fault: str | None = None) -> None:
        self.items = array("q")
        self._fault = fault

    def record(self, item: int) -> None:
        self.items.append(item)
        if self._fault == "duplicate":
            self._fault = None
            self.items.append(item)

    def extend(self, items: Iterable[int]) -> None:
        for item in items:
            self.record(item)

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class CheckResult:
    """The outcome of a merge: ok, and what was wrong (a few examples of each problem)."""

    ok: bool
    what: str
    expected: int
    recorded: int
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    examples: dict[str, list[int]] = field(default_factory=dict)

    def summary(self) -> str:
        if self.ok:
            return f"OK: {self.recorded} {self.what} exactly once"
        parts = [f"{n} {name}" for name, n in (("duplicated", self.duplicates), ("missing", self.missing),
                                               ("unexpected", self.unexpected)) if n]
        return f"FAILURE: {', '.join(parts)} (of {self.expected} expected; {self.recorded} recorded)"

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "summary": self.summary(), "expected": self.expected, "recorded": self.recorded,
                "duplicates": self.duplicates, "missing": self.missing, "unexpected": self.unexpected,
                "examples": self.examples}


def exactly_once(expected: Iterable[int], recorders: Sequence[Recorder], *, what: str = "messages delivered",
                 remaining: Iterable[int] = ()) -> CheckResult:
    """Check that every expected item was recorded by exactly one consumer, exactly once.

    Parameters:
        expected: every item that was put in the queue.
        recorders: one per consumer.
        what: how to name the items in the summary.
        remaining: items still in the queue at the end (a run that stops while producers are
            ahead): each of those must have been recorded by nobody, and together with the
            recorded ones they must make up exactly the expected set.
    """
    counts: Counter[int] = Counter()
    for rec in recorders:
        counts.update(rec.items)
    expected_set = set(expected)
    left = set(remaining)
    dups = [k for k, c in counts.items() if c > 1]
    seen = set(counts)
    both = seen & left  # delivered and still there: delivered without being taken away
    missing = expected_set - seen - left
    unexpected = (seen | left) - expected_set
    dup_total = sum(counts[k] - 1 for k in dups) + len(both)
    ok = not dups and not both and not missing and not unexpected
    examples: dict[str, list[int]] = {}
    if dups or both:
        examples["duplicated"] = sorted(dups + list(both))[:5]
    if missing:
        examples["missing"] = sorted(missing)[:5]
    if unexpected:
        examples["unexpected"] = sorted(unexpected)[:5]
    return CheckResult(ok, what, len(expected_set), sum(counts.values()), dup_total, len(missing),
                       len(unexpected), examples)
