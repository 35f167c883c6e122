"""The per-step reward formula (kernel_lsp/generation/rewards.py, docs/REWARDS.md)."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from evaluator.verdict import KernelCheck, Timing, Verdict
from kernel_lsp.generation.rewards import (
    DELTA,
    StepScore,
    compute_rewards,
    correct_score,
    score,
)


def chain(scores: list[float]) -> list[StepScore]:
    """A sequential refine trajectory: step i refines step i-1."""
    return [StepScore(i + 1, i + 1, s, i if i > 0 else None) for i, s in enumerate(scores)]


def test_scores_order_failures_by_progress():
    order = ["parse_error", "compile_error", "runtime_error", "incorrect", "correct"]
    values = [score(Verdict(status=s)) for s in order]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert score(None) == 0.0  # no usable kernel
    assert score(Verdict(status="cancelled")) is None and score(Verdict(status="infra_error")) is None
    slow = score(Verdict(status="correct", timing=Timing(speedup_eager=0.01)))
    assert slow > score(Verdict(status="incorrect"))
    assert score(Verdict(status="correct", timing=Timing(speedup_eager=2.0))) == pytest.approx(1 + math.log2(3))


def test_speed_is_paid_only_for_the_candidates_own_code():
    fast = Timing(speedup_eager=8.0)

    def correct(finding: str | None) -> Verdict:
        return Verdict(status="correct", timing=fast, kernel=KernelCheck(finding=finding) if finding else None)

    assert score(correct("own_code")) == pytest.approx(1 + math.log2(9))
    assert score(correct("own_code"), speedup=3.0) == pytest.approx(1 + math.log2(4))  # the engine's baseline
    # right results, library operators do the work: what a library call earns, however fast
    assert score(correct("library_only")) == pytest.approx(0.2)
    assert score(correct("library_only"), speedup=3.0) == pytest.approx(0.2)
    assert score(Verdict(status="not_a_kernel", timing=fast)) == pytest.approx(0.2)  # older records
    # correct, own code not checked (no profile): correct, no speed term
    assert score(correct("not_checked")) == pytest.approx(1.0)
    assert score(correct("not_checked"), speedup=3.0) == pytest.approx(1.0)
    # no kernel check recorded (older records): paid as before
    assert score(correct(None)) == pytest.approx(1 + math.log2(9))
    # an old record's is_kernel still decides
    old = Verdict.from_dict({"status": "correct", "timing": {"speedup_eager": 8.0},
                             "kernel": {"is_kernel": False}})
    assert score(old) == pytest.approx(0.2)


def test_hand_made_trajectory():
    # compile error -> wrong -> correct 1x -> failed faster attempt -> correct 3x
    s = [0.05, 0.2, correct_score(1.0), 0.05, correct_score(3.0)]
    r = compute_rewards(chain(s), gamma=0.5)
    own = [0.05, 0.15, 2.0 - 0.2, -DELTA, 3.0 - 2.0]
    assert r[5] == pytest.approx(own[4])
    assert r[4] == pytest.approx(own[3] + 0.5 * own[4])  # the failed step led to the win: credited
    assert r[3] == pytest.approx(own[2] + 0.25 * own[4])
    assert r[1] == pytest.approx(own[0] + 0.5 * own[1] + 0.25 * own[2] + 0.0625 * own[4])


def test_best_of_n_siblings_do_not_compete_and_only_ancestors_get_credit():
    steps = [StepScore(1, 1, 0.05), StepScore(2, 1, 0.2), StepScore(3, 1, 0.0),
             StepScore(4, 2, correct_score(1.0), parent=2), StepScore(5, 2, 0.05, parent=2)]
    r = compute_rewards(steps, gamma=0.5)
    assert r[1] == pytest.approx(0.05) and r[2] == pytest.approx(0.2 + 0.5 * (2.0 - 0.2))
    assert r[3] == pytest.approx(-DELTA)
    assert r[4] == pytest.approx(2.0 - 0.2) and r[5] == pytest.approx(-DELTA)


def test_unscored_steps_are_left_out_and_analysis_gets_credit():
    steps = [StepScore(1, 0, None, None, scored=False), StepScore(2, 1, None, parent=1),
             StepScore(3, 1, 1.5, parent=1)]
    r = compute_rewards(steps, gamma=0.5)
    assert r[2] is None and r[1] == pytest.approx(0.75) and r[3] == pytest.approx(1.5)


scores = st.lists(st.sampled_from([0.0, 0.05, 0.1, 0.2]) | st.floats(1.0, 4.0), min_size=1, max_size=10)


@settings(max_examples=200, deadline=None)
@given(scores)
def test_positive_own_terms_telescope_to_the_final_best(s):
    r0 = compute_rewards(chain(s), gamma=0.0)
    gains = sum(v for v in r0.values() if v is not None and v > 0)
    assert gains == pytest.approx(max(s)) if max(s) > 0 else gains == 0


@settings(max_examples=200, deadline=None)
@given(scores, st.integers(0, 9), st.floats(0.0, 4.0))
def test_own_reward_is_monotone_in_own_score(s, i, bump):
    assume(i < len(s))
    higher = list(s)
    higher[i] = s[i] + bump
    a = compute_rewards(chain(s), gamma=0.0)[i + 1]
    b = compute_rewards(chain(higher), gamma=0.0)[i + 1]
    assert b >= a - 1e-12


@settings(max_examples=200, deadline=None)
@given(scores, st.floats(0.01, 3.0), st.floats(0.0, 1.0))
def test_a_bigger_later_improvement_never_lowers_earlier_rewards(s, extra, gamma):
    better = [*s[:-1], s[-1] + extra]
    a, b = compute_rewards(chain(s), gamma=gamma), compute_rewards(chain(better), gamma=gamma)
    for k in range(1, len(s)):
        assert b[k] >= a[k] - 1e-12


@settings(max_examples=100, deadline=None)
@given(scores, st.floats(0.0, 1.0))
def test_ancestors_of_an_improvement_beat_non_ancestors(s, gamma):
    assume(len(s) >= 2 and max(s) > 0)
    # two round-1 siblings with the same score; only sibling 1 is refined into the last step
    steps = [StepScore(1, 1, s[0]), StepScore(2, 1, s[0]),
             *[StepScore(10 + k, 2 + k, v, parent=(1 if k == 0 else 9 + k)) for k, v in enumerate(s[1:])]]
    r = compute_rewards(steps, gamma=gamma)
    assert r[1] >= r[2] - 1e-12
