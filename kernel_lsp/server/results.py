"""Reading results for a module out of the history store, and the words used to show them.

Stale results (made for another fingerprint of the module) are never reported as current: `current()` only
returns candidates of the module's present fingerprint; `all_rows()` marks the others stale.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from evaluator.verdict import CORRECT, Verdict

from .. import verdicts
from ..history import CandidateRecord, History
from ..history.store import rank_key
from ..jobs.runners import VERIFY_NS


@dataclass(frozen=True)
class ModuleResults:
    key: str
    fingerprint: str
    candidates: list[CandidateRecord]  # every candidate of the module, stale ones included, by number

    @property
    def current(self) -> list[CandidateRecord]:
        return [c for c in self.candidates if c.fingerprint == self.fingerprint]

    @property
    def best(self) -> CandidateRecord | None:
        ok = [c for c in self.current if c.correct]
        return min(ok, key=rank_key) if ok else None

    @property
    def latest(self) -> CandidateRecord | None:
        done = [c for c in self.current if c.verdict is not None]
        return done[-1] if done else None

    def stale(self, c: CandidateRecord) -> bool:
        return c.fingerprint != self.fingerprint


class CandidateCache:
    """Candidates per task key, kept between requests so hovers and lenses under load do not re-read and re-parse
    every verdict. Dropped for a key on each change of a job on it, and after `ttl` seconds (other writers,
    e.g. the CLI on the same workspace)."""

    def __init__(self, ttl: float = 2.0):
        self.ttl = ttl
        self._entries: dict[str, tuple[float, list[CandidateRecord]]] = {}

    def get(self, history: History, key: str) -> list[CandidateRecord]:
        now = time.monotonic()
        hit = self._entries.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]
        cands = history.candidates(key)
        self._entries[key] = (now, cands)
        return cands

    def invalidate(self, key: str | None = None) -> None:
        if key is None:
            self._entries.clear()
        else:
            self._entries.pop(key, None)


def load(history: History | None, key: str, fingerprint: str, cache: CandidateCache | None = None) -> ModuleResults:
    if history is None:
        return ModuleResults(key, fingerprint, [])
    return ModuleResults(key, fingerprint, cache.get(history, key) if cache is not None else history.candidates(key))


def verify_record(history: History | None, key: str) -> tuple[dict[str, Any], Verdict] | None:
    if history is None:
        return None
    rec = history.get(VERIFY_NS, key)
    if not rec:
        return None
    try:
        return rec, Verdict.from_dict(rec["verdict"])
    except (KeyError, TypeError, ValueError):
        return None


def fmt_ms(ms: float | None) -> str:
    return "—" if ms is None else f"{ms:.3g} ms" if ms >= 0.01 else f"{ms * 1000:.3g} µs"


def fmt_x(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×" if x < 10 else f"{x:.1f}×"


def success_line(c: CandidateRecord) -> str:
    """'candidate 3: 1.84× faster than eager (0.41 ms vs 0.76 ms), 1.2× vs torch.compile, correct on 5 trials'"""
    return f"candidate {c.number}: " + (verdicts.speed_and_trials(c.verdict) if c.verdict else "correct")


def failure_line(c: CandidateRecord) -> str:
    v = c.verdict
    detail = verdicts.failure(v) if v is not None else ""
    return f"candidate {c.number} failed ({verdicts.label(v.status if v else c.status)})" + (f": {detail}" if detail else "")


def candidate_row(c: CandidateRecord, stale: bool) -> dict[str, Any]:
    v = c.verdict
    return {
        "id": c.id, "number": c.number, "round": c.round, "strategy": c.strategy, "status": c.status,
        "maxAbsErr": v.correctness.max_abs_err if v and v.correctness else None,
        "ms": c.ms, "speedupEager": c.speedup_eager, "speedupCompiled": c.speedup_compiled, "stale": stale,
    }


def is_correct(v: Verdict | None) -> bool:
    return v is not None and v.status == CORRECT
