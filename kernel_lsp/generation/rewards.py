"""Per-step rewards: each step is credited for its own contribution to the final result.

Score of one verdict (partial credit orders the failures by how far the candidate got)::

    score = 0      no usable kernel, parse error, rejected by the screen, tampered with the oracle
            0.05   compile error / compile timeout
            0.1    compiled, then crashed / raised / hung
            0.2    ran, wrong results; or right results from library operators alone (correct, kernel finding
                   `library_only`; an older record's `not_a_kernel`)
            1      correct, its own code not checked (kernel finding `not_checked`: no profile): no speed term
            1 + log2(1 + speedup)   correct with its own code doing the work (kernel finding `own_code`, or no
                   kernel check recorded; speedup over PyTorch eager, 1 when not timed) -> always > 1

Speed is paid only for the candidate's own code: a library call that is fast is the library's speed.

The engine passes the speedup against the median of all eager timings of the job (one baseline per run), so a
noisy eager measurement on a loaded machine cannot reorder the candidates of a run.

Reward of step t (steps are generation steps; `B(t)` is the best score of all steps of EARLIER rounds, 0 at
the start; samples of one round do not compete with each other)::

    own(t)    = score(t) - B(t)        if score(t) > B(t)     (an improvement)
              = -delta                 otherwise              (no progress: a small cost per step)
    reward(t) = own(t) + sum over descendants u of t:  gamma ** (depth(u) - depth(t)) * max(0, own(u))

A descendant of t is a step whose prompt refined t's kernel, directly or through other steps (the `parent`
links the engine records). Defaults gamma = 0.5, delta = 0.05. Steps without a score (analysis, triage) take
own = 0 and the same discounted credit, so an analysis that led to a correct kernel is credited too; cancelled
or infrastructure failures have no score and are left out (reward None).

Properties (tested in tests/generation/test_rewards.py): own(t) is non-decreasing in score(t); for a sequential
trajectory the positive own terms telescope to the final best score; a step's reward never decreases when a
descendant improves more; gamma = 0 leaves only own(t).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from evaluator.verdict import (
    CANCELLED,
    COMPILE_ERROR,
    COMPILE_TIMEOUT,
    CORRECT,
    CRASHED,
    INCORRECT,
    INFRA_ERROR,
    KERNEL_NOT_CHECKED,
    LIBRARY_ONLY,
    NOT_A_KERNEL,
    RUNTIME_ERROR,
    TAMPERED,
    TIMEOUT,
    Verdict,
)

GAMMA = 0.5
DELTA = 0.05
_PARTIAL = {COMPILE_ERROR: 0.05, COMPILE_TIMEOUT: 0.05, RUNTIME_ERROR: 0.1, CRASHED: 0.1, TIMEOUT: 0.1,
            INCORRECT: 0.2, NOT_A_KERNEL: 0.2, TAMPERED: 0.0}
LIBRARY_ONLY_SCORE = 0.2  # right results, library operators doing the work (what `not_a_kernel` scored)
NOT_CHECKED_SCORE = 1.0  # correct, its own code not checked: no speed term


def correct_score(speedup: float | None) -> float:
    s = 1.0 if speedup is None or not math.isfinite(speedup) else max(0.0, speedup)
    return 1.0 + math.log2(1.0 + s)


def score(verdict: Verdict | None, speedup: float | None = None) -> float | None:
    """The step score of a verdict; None for outcomes that say nothing about the model (cancelled, infra).
    `speedup` overrides the verdict's own (the engine passes one against the job's median eager time)."""
    if verdict is None:
        return 0.0
    if verdict.status in (CANCELLED, INFRA_ERROR):
        return None
    if verdict.status == CORRECT:
        finding = verdict.kernel_finding
        if finding == LIBRARY_ONLY:
            return LIBRARY_ONLY_SCORE
        if finding == KERNEL_NOT_CHECKED:
            return NOT_CHECKED_SCORE
        return correct_score(speedup if speedup is not None else verdict.speedup)
    return _PARTIAL.get(verdict.status, 0.0)


@dataclass(frozen=True)
class StepScore:
    id: int
    round: int
    score: float | None  # None: not a scored step (analysis, triage) or not scorable (cancelled)
    parent: int | None = None
    scored: bool = True  # False for analysis/triage steps: own = 0, credit only


def _own(steps: list[StepScore], delta: float) -> dict[int, float | None]:
    own: dict[int, float | None] = {}
    best_before: dict[int, float] = {}
    best = 0.0
    for r in sorted({s.round for s in steps}):
        best_before[r] = best
        for s in steps:
            if s.round == r and s.scored and s.score is not None:
                best = max(best, s.score)
    for s in steps:
        if not s.scored:
            own[s.id] = 0.0
        elif s.score is None:
            own[s.id] = None
        else:
            b = best_before[s.round]
            own[s.id] = s.score - b if s.score > b else -delta
    return own


def compute_rewards(steps: Iterable[StepScore], *, gamma: float = GAMMA, delta: float = DELTA
                    ) -> dict[int, float | None]:
    steps = list(steps)
    own = _own(steps, delta)
    by_id = {s.id: s for s in steps}
    rewards: dict[int, float | None] = dict(own)
    for u in steps:
        gain = own.get(u.id)
        if gain is None or gain <= 0 or not u.scored:
            continue
        k, p, seen = 1, u.parent, {u.id}
        while p is not None and p in by_id and p not in seen:
            seen.add(p)
            if rewards.get(p) is not None:
                rewards[p] = rewards[p] + gamma ** k * gain  # type: ignore[operator]
            k += 1
            p = by_id[p].parent
    return rewards
