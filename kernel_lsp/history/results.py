"""Reading results for a module out of the history store, and the words used to show them.

Stale results (made for another fingerprint of the module) are never reported as current: `current()` only
returns candidates of the module's present fingerprint; `all_rows()` marks the others stale.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from evaluator.verdict import CORRECT, Verdict

from .. import verdicts
from . import ranking
from .store import GENERATION_KIND, CandidateRecord, History, JobRecord

_JOB_WORDS = {GENERATION_KIND: "kernel generation", "profile": "profiling", "verify": "the check of ModelNew"}


@dataclass(frozen=True)
class ModuleResults:
    key: str
    fingerprint: str
    candidates: list[CandidateRecord]  # every candidate of the module, stale ones included, by number
    jobs: list[JobRecord] = field(default_factory=list)  # the module's jobs in the history, oldest first

    @property
    def current(self) -> list[CandidateRecord]:
        return [c for c in self.candidates if c.fingerprint == self.fingerprint]

    @property
    def best(self) -> CandidateRecord | None:
        """The fastest correct current candidate (by its own median time: history.ranking), a win or not."""
        return ranking.best(self.current)

    @property
    def offered(self) -> CandidateRecord | None:
        """`best` when it is a win (correct and shown faster than eager): the one marked ★ and offered to accept."""
        return ranking.offered(self.current)

    @property
    def ranked(self) -> list[CandidateRecord]:
        """The correct current candidates, best first."""
        return sorted((c for c in self.current if c.correct), key=ranking.rank_key)

    @property
    def latest(self) -> CandidateRecord | None:
        done = [c for c in self.current if c.verdict is not None]
        return done[-1] if done else None

    def stale(self, c: CandidateRecord) -> bool:
        return c.fingerprint != self.fingerprint

    def failed_jobs(self) -> list[JobRecord]:
        """The latest job of each kind on the current module, when it failed: a generation that ended without a
        correct candidate, a profile or a check that could not finish. A later job of the kind clears it."""
        latest: dict[str, JobRecord] = {}
        for j in self.jobs:
            if j.fingerprint == self.fingerprint and j.kind in _JOB_WORDS:
                latest[j.kind] = j
        out = []
        for j in latest.values():
            no_kernel = j.kind == GENERATION_KIND and j.state == "done" and \
                not any(c.correct and c.job_id == j.id for c in self.candidates)
            if j.state == "failed" or no_kernel:
                out.append(j)
        return sorted(out, key=lambda j: j.id)


def failed_job(j: JobRecord) -> tuple[str, str]:
    """('kernel generation (best-of-n) failed', 'no correct candidate in 2 attempt(s): 2 no kernel. The model's …')"""
    what = _JOB_WORDS.get(j.kind, j.kind) + (f" ({j.strategy})" if j.kind == GENERATION_KIND and j.strategy else "")
    return f"{what} failed", j.message or "no reason was recorded"


def failed_job_line(j: JobRecord) -> str:
    return ": ".join(failed_job(j))


class CandidateCache:
    """Candidates and jobs per task key, kept between requests so hovers and lenses under load do not re-read and
    re-parse every verdict. Dropped for a key on each change of a job on it, and after `ttl` seconds (other
    writers, e.g. the CLI on the same workspace)."""

    def __init__(self, ttl: float = 2.0):
        self.ttl = ttl
        self._entries: dict[str, tuple[float, list[CandidateRecord], list[JobRecord]]] = {}

    def get(self, history: History, key: str) -> tuple[list[CandidateRecord], list[JobRecord]]:
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1], hit[2]
        cands, jobs = history.candidates(key), history.jobs(key)
        self._entries[key] = (now, cands, jobs)
        return cands, jobs

    def invalidate(self, key: str | None = None) -> None:
        if key is None:
            self._entries.clear()
        else:
            self._entries.pop(key, None)


def load(history: History | None, key: str, fingerprint: str, cache: CandidateCache | None = None) -> ModuleResults:
    if history is None:
        return ModuleResults(key, fingerprint, [])
    cands, jobs = cache.get(history, key) if cache is not None else (history.candidates(key), history.jobs(key))
    return ModuleResults(key, fingerprint, cands, jobs)


def fmt_ms(ms: float | None) -> str:
    return "—" if ms is None else f"{ms:.3g} ms" if ms >= 0.01 else f"{ms * 1000:.3g} µs"


def speed(c: CandidateRecord, against: str = "eager", *, short: bool = False) -> str:
    """The candidate's speed in the words used everywhere ('1.84× faster than eager', uncertain ones with their
    ± figure): see verdicts.speed."""
    return verdicts.timing_speed(c.verdict.timing if c.verdict else None, against, short=short)


def accept_title(c: CandidateRecord) -> str:
    """The lens's and the code action's title (the reason for a doubt is in the hover and the diagnostic). A win
    (history.ranking.is_win): 'Accept candidate 3 (1.84× faster than eager)', 'Accept candidate 3 (2.10× ± 25 %
    faster than eager, uncertain)'. A correct candidate that is not shown faster than eager is not recommended:
    'Insert candidate 2 anyway (1.40× slower than eager)', 'Insert candidate 2 anyway (1.02× ± 8 % faster than
    eager, not shown faster)'."""
    t = c.verdict.timing if c.verdict else None
    if not ranking.is_win(c):
        return f"Insert candidate {c.number} anyway ({verdicts.not_faster(t)})"
    return f"Accept candidate {c.number} ({verdicts.timing_speed(t, why=False).replace(' (uncertain)', ', uncertain')})"


def success_line(c: CandidateRecord) -> str:
    """'candidate 3: 1.84× faster than eager (0.41 ms vs 0.76 ms), 1.20× faster than torch.compile, correct on 5
    trials'"""
    return f"candidate {c.number}: " + (verdicts.speed_and_trials(c.verdict) if c.verdict else "correct")


def no_win_line(c: CandidateRecord) -> str:
    """The diagnostic when the fastest correct candidate is not a win: 'no kernel faster than eager yet: the fastest
    correct one, candidate 2, is 1.40× slower than eager (0.31 ms vs 0.22 ms), correct on 5 trials'."""
    v = c.verdict
    t = v.timing if v else None
    passed = v.correctness.passed if v and v.correctness else None
    why = f" — uncertain because {t.noise}" if t and t.uncertain and t.noise else ""
    return verdicts.no_win(c.number, t).replace(" eager:", " eager yet:", 1) + \
        (f", correct on {passed} trials" if passed else "") + \
        (f", {verdicts.LIBRARY_ONLY}" if verdicts.library_only(v) else "") + why


def failure_line(c: CandidateRecord) -> str:
    v = c.verdict
    detail = verdicts.failure(v) if v is not None else ""
    return f"candidate {c.number} failed ({verdicts.label(v.status if v else c.status)})" + (f": {detail}" if detail else "")


def candidate_row(c: CandidateRecord, res: ModuleResults) -> dict[str, Any]:
    """One row of kernel-lsp.listCandidates (*Show Candidates*). `rank`: 1 for the best correct current candidate,
    2 for the next, ... (history.ranking), None for the others; `offered`: the one recommended (★); `faster`:
    correct and shown faster than eager. A correct candidate that is not `faster` gets its speed in the words of
    its "Insert … anyway" action."""
    v = c.verdict
    ranked = [r.id for r in res.ranked]
    offered = res.offered
    win = ranking.is_win(c)
    speed = "" if v is None or not c.speedup_eager else \
        verdicts.not_faster(v.timing) if c.correct and not win else verdicts.timing_speed(v.timing, why=False)
    return {
        "id": c.id, "number": c.number, "round": c.round, "strategy": c.strategy, "status": c.status,
        "maxAbsErr": v.correctness.max_abs_err if v and v.correctness else None,
        "ms": c.ms, "speedupEager": c.speedup_eager, "speedupCompiled": c.speedup_compiled, "stale": res.stale(c),
        # a quick pick's line: an uncertain speed says so, its reason is in the hover and the diagnostic
        "speed": speed,
        "uncertain": bool(v and v.timing and v.timing.uncertain),
        "rank": ranked.index(c.id) + 1 if c.id in ranked else None,
        "offered": offered is not None and offered.id == c.id,
        "faster": win,
        # correct, with PyTorch operators doing the work (kernel finding library_only): offered all the same
        "libraryOnly": verdicts.library_only(v),
    }


def is_correct(v: Verdict | None) -> bool:
    return v is not None and v.status == CORRECT
