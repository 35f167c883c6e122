"""The execution oracle: compile, verify, time and profile candidate kernels in isolated worker processes.

Usable without the language server::

    from evaluator import Evaluator, EvalSettings
    with Evaluator(EvalSettings(device="cpu")) as ev:
        verdict = ev.evaluate(reference_source, candidate_source)
        print(verdict.status, verdict.timing)

It knows torch, CUDA, compilers and processes; it knows nothing of LSP or models.
"""

from .api import Evaluator, EvaluatorError, ReferenceFailed
from .settings import EvalSettings
from .verdict import (
    Correctness,
    Finding,
    Profile,
    ProfileOp,
    Stage,
    Timing,
    TimingStats,
    Verdict,
)

__all__ = [
    "Correctness",
    "EvalSettings",
    "Evaluator",
    "EvaluatorError",
    "ReferenceFailed",
    "Finding",
    "Profile",
    "ProfileOp",
    "Stage",
    "Timing",
    "TimingStats",
    "Verdict",
]

