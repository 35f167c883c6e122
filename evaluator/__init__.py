"""The execution oracle: compile, verify, time and profile candidate kernels in isolated worker processes.

Usable without the language server::

    from evaluator import Evaluator, EvalSettings
    with Evaluator(EvalSettings(device="cpu")) as ev:
        verdict = ev.evaluate(reference_source, candidate_source)
        print(verdict.status, verdict.timing)

It knows torch, CUDA, compilers and processes; it knows nothing of LSP or models.
"""

from .settings import EvalSettings
from .verdict import Correctness, Finding, Profile, ProfileOp, Stage, Timing, TimingStats, Verdict

__all__ = [
    "Correctness",
    "EvalSettings",
    "Finding",
    "Profile",
    "ProfileOp",
    "Stage",
    "Timing",
    "TimingStats",
    "Verdict",
]

try:  # the pool lands with the oracle's issue; the data types above never need torch
    from .api import Evaluator, EvaluatorError  # noqa: F401

    __all__ += ["Evaluator", "EvaluatorError"]
except ImportError:  # pragma: no cover
    pass
