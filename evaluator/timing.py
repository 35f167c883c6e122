"""Evaluator side: summary statistics of timed requests (medians, their distribution-free 95 % intervals).

How requests are timed is stages/device/time.py's: the evaluator's clock around each request of N calls (on a GPU to the
referee's probe that the device is idle, on the CPU the worker's CPU time); the referee flushes the caches after
writing the inputs (trusted/flush.py).
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

