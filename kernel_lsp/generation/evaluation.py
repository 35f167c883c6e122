"""A run's candidates at the oracle: each evaluated (its stages as progress events), its verdict stored in the
history and sent out as soon as it exists, and scored against one eager baseline for the whole run (rewards.py)."""

from __future__ import annotations

import logging
import statistics
import threading
from collections.abc import Callable
from typing import Any

from evaluator.verdict import INFRA_ERROR, Verdict
from kernel_lsp import verdicts
from kernel_lsp.history import History
from kernel_lsp.oracle import Oracle
from kernel_lsp.tasks import Task

from . import rewards
from .context import Attempt

log = logging.getLogger(__name__)


# how far through its evaluation a candidate is at each stage of the oracle (a fraction of its unit of progress)
_EVAL_PART = {"compiling": 0.2, "verifying": 0.55, "timing": 0.75, "profiling": 0.9}


def _map_stage(stage: str) -> str:
    s = stage.lower()
    if "compil" in s or "build" in s or "parse" in s or "screen" in s:
        return "compiling"
    if "tim" in s:
        return "timing"
    if "profil" in s:
        return "profiling"
    return "verifying"


class Evaluations:
    """The oracle's side of one run: what its candidates are judged and scored by."""

    def __init__(self, evaluator: Oracle, history: History, task: Task, cancel: threading.Event,
                 emit: Callable[..., Any]) -> None:
        self.evaluator = evaluator
        self.history = history
        self.task = task
        self.cancel = cancel  # the run's: set by the caller's cancel or by a failure of the run
        self.emit = emit  # the run's events
        self.scored: list[rewards.StepScore] = []  # every step's score, in order (rewards.compute_rewards)
        self._eager_ms: list[float] = []  # every eager timing of this job (see speedup)

    def evaluate(self, attempt: Attempt) -> Verdict:
        def on_stage(stage: str, msg: str) -> None:
            mapped = _map_stage(stage)
            text = f"{attempt.label()}: {msg or stage}"
            self.emit(mapped, text, round=attempt.round, sample=attempt.sample,
                      work=(attempt.round, attempt.sample, 1), doing=text, part=_EVAL_PART.get(mapped))

        try:
            return self.evaluator.evaluate(self.task.reference_src, attempt.source, cancel=self.cancel,
                                             on_stage=on_stage)
        except Exception as e:
            log.exception("evaluation of candidate %s failed", attempt.number)
            return Verdict(status=INFRA_ERROR, message=f"evaluator failed: {type(e).__name__}: {e}")

    def evaluate_and_store(self, attempt: Attempt) -> Verdict:
        """In an evaluation thread: the verdict goes into the history and out as an event as soon as it exists,
        while other samples are still being generated or evaluated."""
        verdict = self.evaluate(attempt)
        attempt.verdict = verdict
        assert attempt.candidate_id is not None
        self.history.set_verdict(attempt.candidate_id, verdict)
        cand = self.history.candidate_by_id(attempt.candidate_id)
        detail = verdicts.describe(verdict) if verdict.status != "cancelled" else ""
        self.emit("verdict", f"candidate {attempt.number}: {verdicts.label(verdict.status)}"
                  f"{' — ' + detail if detail else ''}", round=attempt.round, sample=attempt.sample,
                  candidate=cand, units=1, verdict=True, work=(attempt.round, attempt.sample, 1), finished=True)
        return verdict

    def record_score(self, attempt: Attempt) -> None:
        sc = rewards.score(attempt.verdict, self.speedup(attempt.verdict))
        attempt.score = sc
        if attempt.verdict is None and not attempt.error:
            sc = None
        self.scored.append(rewards.StepScore(attempt.step_id, attempt.round, sc, attempt.parent_step))
        if sc is not None:
            self.history.update_step(attempt.step_id, score=sc)

    def speedup(self, v: Verdict | None) -> float | None:
        """Speedup against the median of all eager timings of this job: one baseline for every candidate of
        the run, so a noisy eager measurement (a loaded machine) cannot reorder the candidates."""
        t = v.timing if v is not None else None
        if t is None or t.candidate is None or not t.candidate.median_ms:
            return None
        if t.eager is not None and t.eager.median_ms:
            self._eager_ms.append(t.eager.median_ms)
        if not self._eager_ms:
            return t.speedup_eager
        return statistics.median(self._eager_ms) / t.candidate.median_ms

    def profile_candidate(self, focus: Attempt) -> None:
        try:
            v = self.evaluator.evaluate(self.task.reference_src, focus.source, cancel=self.cancel, profile=True,
                                          time=False)
            if v.profile is not None and focus.verdict is not None:
                focus.verdict.profile = v.profile
        except Exception as e:  # noqa: BLE001 - the speed prompt goes without the candidate's profile
            log.info("profiling candidate %s failed: %s", focus.number, e)
