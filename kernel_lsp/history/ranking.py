"""Which candidate is the best, and whether it is a win: the one rule behind ★, the lens, the code actions, the
diagnostic, *Show Candidates*, `optimize` (its exit status and `--out`) and bench.

- The **best** candidate is the correct one with the lowest median time of its own (docs/REWARDS.md): the
  evaluator measures eager anew for every candidate, and on a loaded machine one such measurement can be far off,
  so a per-candidate eager measurement never reorders candidates.
- The best is **offered** as the result only when it is a **win**: correct and shown faster than eager, i.e. its
  speedup over eager is above 1 and so is the low end of the speedup's 95 % interval (`Timing.speedup_ci_pct`).
  A speedup of 1.02× ± 8 % is not shown faster; neither is an uncertain one without an interval, nor an untimed
  one. A correct kernel that is not a win is a finding to show, not a replacement to recommend.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from evaluator.verdict import Timing

    from .records import CandidateRecord


def rank_key(c: CandidateRecord) -> tuple:
    """Correct first, then the lowest median time of the candidate itself (one without a time after every timed
    one), then the older (lower number). The eager measurement beside each candidate plays no part."""
    ms = c.ms
    return (0 if c.correct else 1, ms if ms is not None and ms > 0 else math.inf, c.number)


def shown_faster(t: Timing | None) -> bool:
    """Whether a timing shows the candidate faster than eager: its speedup and the low end of the speedup's interval
    are both above 1. Without an interval only a timing that is not uncertain counts."""
    if t is None or t.speedup_eager is None or t.speedup_eager <= 1:
        return False
    if t.speedup_ci_pct is not None:
        return t.speedup_eager * (1 - t.speedup_ci_pct / 100) > 1
    return not t.uncertain


def is_win(c: CandidateRecord) -> bool:
    """Correct and shown faster than eager: what may be offered as the result."""
    return c.correct and shown_faster(c.verdict.timing if c.verdict is not None else None)


def best(candidates: Iterable[CandidateRecord]) -> CandidateRecord | None:
    """The correct candidate with the lowest median time; None when none is correct."""
    ok = [c for c in candidates if c.correct]
    return min(ok, key=rank_key) if ok else None


def offered(candidates: Iterable[CandidateRecord]) -> CandidateRecord | None:
    """The best candidate when it is a win, else None: the one result to recommend (★, Accept, `optimize`'s exit
    status 0 and `--out`)."""
    b = best(candidates)
    return b if b is not None and is_win(b) else None
