"""The evaluator's own settings (it does not know kernel_lsp's configuration)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "kernel-lsp" / "builds")


@dataclass(frozen=True)
class EvalSettings:
    device: str = "auto"  # "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:N"
    gpu: int = 0
    atol: float = 1e-4  # fp32 defaults; other dtypes get their own (see verify.py)
    rtol: float = 1e-4
    trials: int = 5  # correctness trials, each with fresh seeded inputs
    seed: int = 0
    compile_timeout: float = 300.0
    run_timeout: float = 120.0  # per stage (verify / time / profile) of one candidate
    compile_workers: int = 0  # 0: one per CPU core, at most 8
    timing_calls: int = 100  # at most this many timed calls of the candidate (and as many of the reference)
    timing_min_calls: int = 30  # at least this many, then stop once the speedup is known to `speedup_ci`
    timing_ci: float = 0.01  # each median's 95 % interval aimed at; a speedup known to worse than 3x it is uncertain
    speedup_ci: float = 0.02  # stop timing once the speedup's 95 % interval is this narrow (±2 %)
    timing_budget_s: float = 3.0  # stop timing when this much wall time is spent on its rounds (after >= 5)
    warmup_calls: int = 5
    time_compiled: bool = True  # also time torch.compile of the reference
    # compile the reference with torch.compile in the background before its first candidate is timed (once its
    # profile is taken, or a candidate of it is built or evaluated); None: where the reference runs on a GPU or the
    # machine has 8 cores or more (on fewer, that compile takes the cores a candidate's own compile needs)
    compile_reference_ahead: bool | None = None
    # False (the editor's first verdict first): where the reference is compiled ahead, a candidate timed before its
    # reference's torch.compile has ended gets its verdict without that figure (`Timing.compiled_pending`) instead of
    # waiting for the compile, and the compile waits until no candidate of the reference is on its way (it would
    # hold the referee and the device for seconds); a later candidate is timed against it. True: every timed verdict
    # has the figure
    compiled_wait: bool = True
    cache_dir: str = field(default_factory=default_cache_dir)  # build cache shared across runs
    warm_workers: int = 2  # idle workers kept started (torch imported, CUDA context made, warmed up) per pool
    screen_rejects: bool = True  # rules of severity "reject" refuse a candidate (the bundled rules only warn)
    kernel_check: bool = True  # the kernel finding (own code or library only) from a profile of its forward
    warm_pch: bool = True  # build torch's precompiled header in the background when the evaluator starts
    # intra-op threads of the referee and the runner alike (the same for the reference and the candidate); 0: one
    # on a machine of two cores or fewer (an OpenMP region of two threads on a busy 2-core machine waits for a
    # descheduled thread: 30 ms for a 0.1 ms operator), else half the cores, at most 8
    cpu_threads: int = 0

    def threads(self) -> int:
        if self.cpu_threads > 0:
            return self.cpu_threads
        n = os.cpu_count() or 1
        return 1 if n <= 2 else max(1, min(8, n // 2))

    def to_dict(self) -> dict:
        return asdict(self)
