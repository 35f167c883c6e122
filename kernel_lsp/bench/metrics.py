"""fast_p and the other figures of a sweep, from plain per-task results (pure Python, no torch).

fast_p (KernelBench): the fraction of ALL tasks in a selection whose kernel is correct AND faster than the
baseline by more than a factor p. A task without a result (missing candidate, failed generation, not run yet)
counts as a failure, so fast_0 is the fraction of the whole selection with a correct kernel.

fast_p counts the candidate's own code: a correct result whose kernel finding is `library_only` (PyTorch's
operators do every class of the reference's work; an older record's `not_a_kernel` alike) is counted apart, in
fast_p_library_only, never in fast_p. A correct result whose own code could not be checked (`not_checked`, or no
finding recorded) cannot be told apart from an own-code one and is counted in fast_p.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

P_VALUES: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


@dataclass(frozen=True)
class TaskResult:
    """What one run found for one task: its best candidate's status and speedups."""

    task: str  # e.g. "level1/23_Softmax"
    level: int | None
    strategy: str  # the run's label, e.g. "candidates" or "best-of-n"
    model: str = ""
    status: str = "missing"  # a verdict status, or "missing" / "error" (no verdict at all)
    speedup_eager: float | None = None
    speedup_compiled: float | None = None
    candidate_ms: float | None = None
    eager_ms: float | None = None
    compiled_ms: float | None = None
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # the eager speedup's 95 % interval (half-width, % of it); uncertain: wider than the target, and why (noise)
    speedup_ci_pct: float | None = None
    uncertain: bool = False
    noise: str = ""
    # the kernel finding of a correct result: "own_code" | "library_only" | "not_checked"; "" when none was recorded
    kernel: str = ""

    def speed(self, against: str = "eager", *, short: bool = False) -> str:
        """The speedup in the words used everywhere (kernel_lsp.verdicts.speed): uncertain ones with ± and why."""
        from .. import verdicts

        value = self.speedup_eager if against == "eager" else self.speedup_compiled
        return verdicts.speed(value, against, ci_pct=self.speedup_ci_pct if against == "eager" else None,
                              uncertain=self.uncertain, noise=self.noise, short=short)

    @property
    def correct(self) -> bool:
        """Right results, library-only ones included (an older record's not_a_kernel is not: it is its own status)."""
        return self.status == "correct"

    @property
    def library_only(self) -> bool:
        """Right results with PyTorch's operators doing the work: correct with a library_only finding, or an older
        record's not_a_kernel."""
        return (self.correct and self.kernel == "library_only") or self.status == "not_a_kernel"

    @property
    def own(self) -> bool:
        """Correct, and not library-only: its own code did the work (or could not be checked, which cannot be told
        apart): what fast_p counts."""
        return self.correct and not self.library_only

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskResult:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _speedup(r: TaskResult, against: str) -> float | None:
    return r.speedup_eager if against == "eager" else r.speedup_compiled


def fast_p(results: Iterable[TaskResult], total: int, p: float, against: str = "eager", *,
           library_only: bool = False) -> float:
    """Fraction of `total` tasks that are correct with speedup > p (p == 0: correct, whatever the speed), counting
    own-code results (TaskResult.own); `library_only`: counting the library-only ones instead.

    `results` holds at most one result per task; tasks without one are failures. A correct result whose
    speedup is unknown counts for p == 0 only.
    """
    if total <= 0:
        return 0.0
    hits = 0
    for r in results:
        if not (r.library_only if library_only else r.own):
            continue
        if p <= 0:
            hits += 1
            continue
        s = _speedup(r, against)
        if s is not None and s > p:
            hits += 1
    if hits > total:
        raise ValueError(f"{hits} correct results for only {total} tasks")
    return hits / total


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive, finite values; None when there are none."""
    logs = [math.log(v) for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


@dataclass(frozen=True)
class Summary:
    """One row of the table: a level (None: tasks without a level) and a strategy/model."""

    level: int | None
    strategy: str
    model: str
    tasks: int  # tasks in the selection (the denominator)
    attempted: int  # tasks with a result
    correct: int  # right results, library-only ones included
    fast_p_eager: dict[float, float]  # own code (TaskResult.own)
    fast_p_compiled: dict[float, float]
    geomean_eager: float | None  # over own-code correct tasks with a speedup
    geomean_compiled: float | None
    library_only: int = 0  # correct with PyTorch's operators doing the work (counted apart from fast_p)
    fast_p_library_only: dict[float, float] = field(default_factory=dict)  # vs eager, library-only results

    @property
    def correct_pct(self) -> float:
        return 100.0 * self.correct / self.tasks if self.tasks else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "level": self.level, "strategy": self.strategy, "model": self.model, "tasks": self.tasks,
            "attempted": self.attempted, "correct": self.correct, "correct_pct": self.correct_pct,
            "fast_p_eager": {str(p): v for p, v in self.fast_p_eager.items()},
            "fast_p_compiled": {str(p): v for p, v in self.fast_p_compiled.items()},
            "geomean_speedup_eager": self.geomean_eager, "geomean_speedup_compiled": self.geomean_compiled,
            "library_only": self.library_only,
            "fast_p_library_only": {str(p): v for p, v in self.fast_p_library_only.items()},
        }


def summarise(level: int | None, strategy: str, model: str, task_names: Sequence[str],
              results: Iterable[TaskResult], ps: Sequence[float] = P_VALUES) -> Summary:
    """Figures for one level and strategy over `task_names` (the selection); results for other tasks are ignored."""
    wanted = set(task_names)
    by_task: dict[str, TaskResult] = {}
    for r in results:
        if r.task in wanted:
            by_task[r.task] = r  # the last result for a task wins
    rs = list(by_task.values())
    own = [r for r in rs if r.own]
    n = len(wanted)
    return Summary(
        level=level, strategy=strategy, model=model, tasks=n, attempted=sum(r.status != "missing" for r in rs),
        correct=sum(r.correct for r in rs),
        fast_p_eager={p: fast_p(rs, n, p, "eager") for p in ps},
        fast_p_compiled={p: fast_p(rs, n, p, "compiled") for p in ps},
        geomean_eager=geomean(r.speedup_eager for r in own),
        geomean_compiled=geomean(r.speedup_compiled for r in own),
        library_only=sum(r.library_only for r in rs),
        fast_p_library_only={p: fast_p(rs, n, p, "eager", library_only=True) for p in ps},
    )


def summarise_all(tasks_by_level: Mapping[int | None, Sequence[str]],
                  results: Iterable[TaskResult]) -> list[Summary]:
    """One Summary per (level, strategy, model) present in `results`, in level then strategy order."""
    rs = list(results)
    runs = sorted({(r.strategy, r.model) for r in rs})
    out = []
    for level in sorted(tasks_by_level, key=lambda lv: (lv is None, lv or 0)):
        for strategy, model in runs:
            mine = [r for r in rs if r.strategy == strategy and r.model == model]
            out.append(summarise(level, strategy, model, tasks_by_level[level], mine))
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c passed: 1 - C(n-c, k) / C(n, k), the chance that
    k of the n samples, drawn without replacement, hold at least one that passed."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_share(results: Iterable[TaskResult], task_names: Sequence[str], k: int,
                    what: str = "correct") -> float | None:
    """Mean pass@k over the selection (tasks without sample counts, or with fewer than k samples drawn, count 0,
    as fast_p counts a missing task): `what` is "correct" or "fast_1" (correct, own code, and more than 1x faster
    than eager). None for an empty selection."""
    wanted = set(task_names)
    by_task = {r.task: r for r in results if r.task in wanted}
    if not wanted:
        return None
    total = 0.0
    for name in wanted:
        s = (by_task[name].extra.get("samples") if name in by_task else None) or {}
        n, c = int(s.get("drawn") or 0), int(s.get(what) or 0)
        if n >= k and c:
            total += pass_at_k(n, c, k)
    return total / len(wanted)
