"""What the history holds, as the readers get it: a candidate with its verdict, a job, a trajectory step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evaluator.verdict import CORRECT, Verdict


@dataclass(frozen=True)
class CandidateRecord:
    id: int
    task_key: str
    number: int  # 1, 2, 3 ... per task: what the user sees ("candidate 3")
    fingerprint: str  # of the task when the candidate was made; differs from the current one when stale
    job_id: int | None
    round: int
    sample: int
    strategy: str
    source: str
    source_path: str
    status: str
    verdict: Verdict | None
    created: float

    @property
    def speedup_eager(self) -> float | None:
        return self.verdict.timing.speedup_eager if self.verdict and self.verdict.timing else None

    @property
    def speedup_compiled(self) -> float | None:
        return self.verdict.timing.speedup_compiled if self.verdict and self.verdict.timing else None

    @property
    def ms(self) -> float | None:
        t = self.verdict.timing if self.verdict else None
        return t.candidate.median_ms if t and t.candidate else None

    @property
    def correct(self) -> bool:
        return self.status == CORRECT


@dataclass(frozen=True)
class JobRecord:
    id: int
    task_key: str
    fingerprint: str
    kind: str
    strategy: str
    model: str
    settings: dict[str, Any]
    state: str
    message: str
    created: float
    finished: float | None


@dataclass(frozen=True)
class StepRecord:
    id: int
    job_id: int
    candidate_id: int | None
    round: int
    sample: int
    role: str
    prompt: str
    completion: str
    summary: str
    prompt_tokens: int | None
    completion_tokens: int | None
    score: float | None
    reward: float | None
    extra: dict[str, Any]
    created: float
