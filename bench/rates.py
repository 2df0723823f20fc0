"""Rates shared by the worker section and the peers' runners (no dependencies: PgQueuer's runner,
bench/pgqueuer_run.py, may run under another Python, ``--pgqueuer-python``)."""

from __future__ import annotations


def drain_rate(samples: list[tuple[float, int]], n: int) -> tuple[float | None, str]:
    """Messages per second from (seconds since launch, messages left) samples; and how it was taken."""
    hi = next((i for i, s in enumerate(samples) if s[1] <= 0.9 * n), None)
    lo = next((i for i, s in enumerate(samples) if s[1] <= 0.1 * n), None)
    if hi is not None and lo is not None and lo - hi >= 4:  # at least a second between them
        (t_hi, n_hi), (t_lo, n_lo) = samples[hi], samples[lo]
        return (n_hi - n_lo) / (t_lo - t_hi), "90% to 10% of the backlog left"
    end = next((s for s in samples if s[1] == 0), None)
    if end and end[0] > 0:
        return n / end[0], "whole drain from launch (backlog too small to leave start-up out)"
    return None, "not drained"
