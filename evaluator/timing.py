"""Timing helpers shared by the referee and the evaluator: summary statistics and the L2 flush.

How calls are timed (see session.py): the referee writes fresh input values for every call and flushes the L2
cache (a buffer of twice its size is zeroed) before it; the runner brackets its forward with CUDA events (or
`perf_counter` on the CPU) and synchronises the device; the evaluator's own wall clock around each call is the
cross-check. The reference is timed the same way in the referee, in blocks interleaved with the candidate's.
"""

from __future__ import annotations

import math
import statistics


def median_ci(samples_ms: list[float], z: float = 1.96) -> float:
    """Half-width of the distribution-free 95 % confidence interval of the median, relative to the median
    (order statistics n/2 ± z·√n/2): 0.01 means the median is known to ±1 %."""
    s = sorted(samples_ms)
    n = len(s)
    if n < 5:
        return float("inf")
    half = z * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half))
    med = statistics.median(s)
    return (s[hi] - s[lo]) / 2 / med if med > 0 else float("inf")


def stats(samples_ms: list[float]) -> dict:
    s = sorted(samples_ms)
    n = len(s)
    if n == 0:
        return {"median_ms": 0.0, "iqr_ms": 0.0, "mean_ms": 0.0, "min_ms": 0.0, "calls": 0, "ci_pct": None}

    def q(p: float) -> float:
        if n == 1:
            return s[0]
        k = (n - 1) * p
        lo = int(k)
        hi = min(lo + 1, n - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    ci = median_ci(s)
    return {"median_ms": q(0.5), "iqr_ms": q(0.75) - q(0.25), "mean_ms": statistics.fmean(s), "min_ms": s[0],
            "calls": n, "ci_pct": round(ci * 100, 3) if math.isfinite(ci) else None}

