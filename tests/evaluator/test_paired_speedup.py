"""The speedup of paired rounds (`evaluator/timing.py::paired_speedup`): its interval covers the true speedup as
often as it says, narrows when both sides drift together, and a few slowed rounds do not move it."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from evaluator.timing import median_ci, paired_speedup, t_quantile


def _rounds(rng: random.Random, n: int, cand: float, ref: float, noise: float, drift: float = 0.0):
    """n rounds: each side's time with its own noise, and a drift shared by both sides of a round."""
    c, r = [], []
    for _ in range(n):
        d = 1 + rng.gauss(0, drift)
        c.append(cand * d * (1 + rng.gauss(0, noise)))
        r.append(ref * d * (1 + rng.gauss(0, noise)))
    return c, r


def test_its_interval_covers_the_true_speedup_as_often_as_it_says():
    rng = random.Random(7)
    for n in (8, 30):
        hits = 0
        runs = 600
        for _ in range(runs):
            c, r = _rounds(rng, n, 0.14, 0.073, noise=0.05)
            est = paired_speedup(c, r)
            assert est is not None and est.rounds == n
            hits += abs(math.log(est.value / (0.073 / 0.14))) <= math.log1p(est.ci)
        assert 0.92 <= hits / runs <= 0.995, (n, hits / runs)


def test_drift_both_sides_share_falls_out_of_the_interval():
    rng = random.Random(3)
    c, r = _rounds(rng, 30, 1.0, 2.0, noise=0.01, drift=0.08)
    est = paired_speedup(c, r)
    assert est is not None and est.value == pytest.approx(2.0, rel=0.01)
    unpaired = math.hypot(median_ci(c), median_ci(r))  # each side's median on its own carries the drift
    assert est.ci < 0.01 < unpaired / 3, (est.ci, unpaired)


def test_a_few_slowed_rounds_do_not_move_it():
    rng = random.Random(11)
    c, r = _rounds(rng, 30, 1.0, 1.5, noise=0.01)
    base = paired_speedup(c, r)
    for i in (2, 9, 17):  # something else slowed three rounds' candidate requests fourfold
        c[i] *= 4
    hit = paired_speedup(c, r)
    assert base is not None and hit is not None
    assert hit.value == pytest.approx(base.value, rel=0.01) and hit.ci < 0.02
    assert statistics.fmean(r) / statistics.fmean(c) < 0.85 * 1.5  # where a plain mean would have moved


def test_too_few_usable_rounds_have_no_estimate():
    assert paired_speedup([1.0] * 4, [2.0] * 4) is None
    assert paired_speedup([1.0, 1.0, 0.0, 1.0, -0.1, 1.0], [2.0] * 6) is None  # no longer than the harness: no ratio
    est = paired_speedup([1.0] * 5, [2.0] * 5)
    assert est is not None and est.value == pytest.approx(2.0) and est.ci == 0.0


def test_t_quantiles():
    exact = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 10: 2.228, 30: 2.042, 120: 1.980}
    for df, t in exact.items():
        assert t_quantile(0.975, df) == pytest.approx(t, rel=0.003), df
