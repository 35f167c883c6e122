"""The oracle as the product sees it: the interface jobs, the engine and the bench call (the evaluator's
`Evaluator`, or the bench's `RayEvaluator`, or a test's stand-in) and the one mapping from the product's settings
to the evaluator's own (the evaluator does not know kernel_lsp)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

from evaluator.settings import EvalSettings
from evaluator.verdict import Profile, Verdict

from .config import Settings

OnStage = Callable[[str, str], None]  # (stage, message)


class Oracle(Protocol):
    def evaluate(self, reference_src: str, candidate_src: str, *, cancel: threading.Event | None = None,
                 on_stage: OnStage | None = None, profile: bool = False, time: bool = True) -> Verdict: ...

    def profile(self, reference_src: str, *, cancel: threading.Event | None = None,
                on_stage: OnStage | None = None) -> Profile: ...

    def device_info(self) -> dict[str, Any]: ...

    # optional (the engine looks for it): build a candidate ahead of its evaluation, while the model still writes
    # def prebuild(self, reference_src: str, candidate_src: str, *, cancel: threading.Event | None = None) -> str
    # optional (the editor's `prepare` looks for it): load a reference ahead of its first candidate
    # def prepare_reference(self, reference_src: str, *, cancel: threading.Event | None = None) -> None
    # optional (a job holds it through its first round): a context in which `n` candidates of this reference are
    # coming, so their runners start at once and the reference's torch.compile ahead waits for them (where the
    # oracle does not wait for it: compiled_wait)
    # def candidates_coming(self, reference_src: str, n: int = 0) -> AbstractContextManager[None]
    # optional (the editor's `prepare` calls it for an older version of a document, whose references are now `by`):
    # no candidate of this reference is expected any more, so work begun ahead for it (its torch.compile) may stop
    # def superseded(self, reference_src: str, by: Sequence[str] = ()) -> None

    def start_background(self) -> None: ...

    def close(self) -> None: ...


def eval_settings(settings: Settings) -> EvalSettings:
    """The evaluator's settings for the product's. Whatever this mapping reads is what a running evaluator depends
    on: two settings that map to the same EvalSettings can share one evaluator, and any other change needs a new
    one (see `WorkspaceServices.configure`)."""
    device = "auto" if settings.device == "auto" else settings.device if settings.device != "cuda" \
        else f"cuda:{settings.gpu}"
    return EvalSettings(
        device=device,
        gpu=settings.gpu,
        atol=settings.atol,
        rtol=settings.rtol,
        trials=settings.trials,
        compile_timeout=settings.compile_timeout,
        run_timeout=settings.run_timeout,
        compile_workers=settings.compile_workers,
        timing_calls=settings.timing_calls,
        time_compiled=settings.time_compiled,
        seed=settings.seed,
    )
