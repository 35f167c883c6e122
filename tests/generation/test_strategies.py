from __future__ import annotations

import pytest

from evaluator.verdict import Timing, Verdict
from kernel_lsp.generation.context import Attempt
from kernel_lsp.generation.engine import heuristic_focus, target_of
from kernel_lsp.generation.errors import GenerationError
from kernel_lsp.generation.rewards import score
from kernel_lsp.generation.strategies import make_plan


def plan(name, **kw):
    return make_plan(name, settings_samples=4, settings_rounds=3, **kw)


@pytest.mark.parametrize("name, first, n, k, profile, agent", [
    ("zero-shot", "zero_shot", 1, 1, False, False),
    ("one-shot", "one_shot", 1, 1, False, False),
    ("profile-guided", "profile_guided", 4, 3, True, False),
    ("refine", "zero_shot", 1, 3, False, False),
    ("best-of-n", "zero_shot", 4, 1, False, False),
    ("agent", "agent_generate", 4, 3, True, True),
    ("one-shot+best-of-n+refine", "one_shot", 4, 3, False, False),
    ("profile-guided+refine", "profile_guided", 4, 3, True, False),
])
def test_plans(name, first, n, k, profile, agent):
    p = plan(name)
    assert (p.first_prompt, p.samples, p.rounds, p.profile, p.agent) == (first, n, k, profile, agent)


def test_explicit_counts_override_and_bad_names():
    assert plan("zero-shot", samples=3, rounds=2).samples == 3
    assert plan("profile-guided", rounds=1).rounds == 1
    with pytest.raises(GenerationError, match="unknown strategy 'beam'"):
        plan("beam")
    with pytest.raises(GenerationError, match="at least 1"):
        plan("refine", rounds=0)


def test_target_from_device_info():
    assert target_of({"name": "cpu"}).kind == "cpu"
    t = target_of({"name": "NVIDIA H200", "capability": "9.0", "bandwidth_gbs": 4000})
    assert t.kind == "cuda" and "H200" in t.device and "9.0" in t.device


def test_heuristic_focus_prefers_progress_then_recency():
    def a(i, status=None, sp=None, error=""):
        v = Verdict(status, timing=Timing(speedup_eager=sp)) if status else None
        return Attempt(i, 1, i, source="x" if v else "", verdict=v, error=error, score=score(v))

    assert heuristic_focus([a(1, "compile_error"), a(2, error="no code")]).step_id == 1
    assert heuristic_focus([a(1, "incorrect"), a(2, "compile_error")]).step_id == 1
    assert heuristic_focus([a(1, "correct", 2.0), a(2, "correct", 1.0), a(3, "incorrect")]).step_id == 1
    assert heuristic_focus([a(1, "compile_error"), a(2, "compile_error")]).step_id == 2
