"""torch.compile's reference in the time stage (`stages/device/time.py::Time._compiled_call_ms`): timed until its
median is known to `timing_ci`, not for as many requests as the candidate's rounds took; the seconds of each step in
the stage's line."""

from __future__ import annotations

import random
from contextlib import nullcontext
from types import SimpleNamespace

from evaluator.settings import EvalSettings
from evaluator.stages.device.time import CI_MIN_ROUNDS, Time, _timing_note
from evaluator.timing import median_ci, stats
from evaluator.verdict import Timing, TimingStats


class _Session:
    """What the compiled step uses of a device session: the reference's requests answer from `times` (ms)."""

    def __init__(self, times: list[float]) -> None:
        self.s = EvalSettings()
        self.ref = SimpleNamespace(compiled=True, compile_error="", compiled_call_ms=None)
        self.runner = object()
        self.out = SimpleNamespace(warnings=[])
        self.compiled_ms: list[float] = []
        self.compiled_wait, self.compiled_pending = True, False
        self.asked = 0
        self._times = iter(times)

    def on_stage(self, *_: object) -> None:
        pass

    def _alone(self):
        return nullcontext()

    def _request(self, n: int) -> int:
        return n

    def _reference_request(self, _req: int, which: str) -> float:
        assert which == "compiled"
        self.asked += 1
        return next(self._times)

    def _neighbours_since(self, _since: float) -> None:
        pass

    def _time_compiled(self, n, count, known):
        return Time._time_compiled(self, n, count, known)


def test_a_steady_compiled_reference_is_timed_until_its_median_is_known_not_for_every_round():
    rng = random.Random(1)
    s = _Session([10.0 * (1 + rng.gauss(0, 0.002)) for _ in range(60)])  # requests of 10 calls, ±0.2 %
    per_call = Time._compiled_call_ms(s, 10, 60, 0.0)
    assert s.asked == CI_MIN_ROUNDS, s.asked  # known to ±1 % after the fewest rounds allowed
    assert len(per_call) == CI_MIN_ROUNDS and median_ci(per_call) <= s.s.timing_ci
    assert abs(stats(per_call)["median_ms"] - 1.0) < 0.01


def test_a_noisy_compiled_reference_is_timed_as_long_as_the_candidates_rounds():
    rng = random.Random(2)
    s = _Session([10.0 * (1 + abs(rng.gauss(0, 0.2))) for _ in range(40)])  # ±20 %: never known to ±1 %
    per_call = Time._compiled_call_ms(s, 10, 40, 0.5)
    assert s.asked == 40 and len(per_call) == 40
    assert min(per_call) >= (10.0 - 0.5) / 10  # the harness's own cost taken off every request


def test_a_figure_kept_from_an_earlier_candidate_is_reused_without_a_request():
    s = _Session([])
    s.ref.compiled_call_ms = [1.0, 1.1]
    assert Time._compiled_call_ms(s, 10, 40, 0.0) == [1.0, 1.1] and s.asked == 0


def test_the_time_stages_line_says_where_its_seconds_went():
    t = Timing(device="cuda:0", method="outside-clock", candidate=TimingStats(**stats([1.0] * 10)),
               eager=TimingStats(**stats([2.0] * 10)), batch_calls=4, checked_calls=6, speedup_eager=2.0)
    plain = _timing_note(t)
    assert "seconds" not in plain and "2.00x eager" in plain
    line = _timing_note(t, [("the request's size", 0.05), ("12 rounds", 2.5), ("torch.compile's reference", 0.61)])
    assert line.startswith(plain)
    assert line.endswith("seconds: the request's size 0.05, 12 rounds 2.50, torch.compile's reference 0.61"), line
