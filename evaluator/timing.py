"""Evaluator side: summary statistics of timed requests (medians, their distribution-free 95 % intervals) and the
speedup of paired rounds (`paired_speedup`).

How requests are timed is stages/device/time.py's: the evaluator's clock around each request of N calls (on a GPU to the
referee's probe that the device is idle, on the CPU the sandbox's CPU time); the referee flushes the caches after
writing the inputs (trusted/flush.py).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

TRIM = 0.2  # the share of rounds trimmed from each end of the speedup's estimate


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


@dataclass(frozen=True)
class Speedup:
    value: float  # the reference's time over the candidate's
    ci: float  # half-width of its 95 % interval, relative to it (the wider side): 0.02 means ±2 %
    rounds: int


def paired_speedup(cand_ms: list[float], ref_ms: list[float], trim: float = TRIM) -> Speedup | None:
    """The speedup of rounds that each timed the candidate and the reference back to back (`cand_ms[i]` and
    `ref_ms[i]` from round i): the 20 % trimmed mean of the rounds' log ratios, with its Tukey-McLaughlin 95 %
    interval (winsorized spread, Student's t). Pairing takes off what drifts from one round to the next and falls
    on both sides (clocks, the device's and the host's state); trimming takes off a few rounds that something
    else slowed, without the median's loss of precision on the rest. None with fewer than five usable rounds (a
    request no longer than the harness's own cost has no ratio)."""
    logs = sorted(math.log(r / c) for c, r in zip(cand_ms, ref_ms) if c > 0 and r > 0)
    n = len(logs)
    if n < 5:
        return None
    k = int(trim * n)
    kept = logs[k:n - k]
    mean = statistics.fmean(kept)
    lo, hi = logs[k], logs[n - k - 1]
    sw = statistics.stdev([min(max(x, lo), hi) for x in logs])
    half = t_quantile(0.975, len(kept) - 1) * sw / ((1 - 2 * k / n) * math.sqrt(n))
    return Speedup(value=math.exp(mean), ci=math.expm1(half), rounds=n)


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: the Cornish-Fisher expansion around the normal's, within 0.3 % of the exact value from
    4 degrees of freedom; below that, the exact 97.5 % points (the only ones used with so few)."""
    if df <= 0:
        return float("inf")
    if df < 4 and p == 0.975:
        return (12.7062, 4.3027, 3.1824)[df - 1]
    z = statistics.NormalDist().inv_cdf(p)
    v = float(df)
    return (z + (z ** 3 + z) / (4 * v) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * v ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * v ** 3))
