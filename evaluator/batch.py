"""`Evaluator.evaluate_many`'s scheduling: every candidate of one reference in its own thread, so their compiles
run in parallel; the evaluator's device gate orders their device stages (verification side by side, each timed
round alone)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .assembly import OnStage
from .verdict import Verdict

MAX_THREADS = 32  # candidates in flight at once; the evaluator's pools and gate bound the work beneath


def evaluate_many(evaluate: Callable[..., Verdict], reference_src: str, candidate_srcs: list[str], *,
                  cancel: threading.Event | None, on_stage: OnStage | None, profile: bool,
                  time: bool) -> list[Verdict]:
    """`evaluate(reference_src, src, ...)` for each candidate, side by side; the verdicts in the candidates'
    order. Each candidate's stage messages are prefixed with its index."""
    if not candidate_srcs:
        return []

    def one(i: int, src: str) -> Verdict:
        cb = None if on_stage is None else (lambda st, msg: on_stage(st, f"candidate {i}: {msg}"))
        return evaluate(reference_src, src, cancel=cancel, on_stage=cb, profile=profile, time=time)

    with ThreadPoolExecutor(max_workers=min(len(candidate_srcs), MAX_THREADS), thread_name_prefix="klsp-eval") as ex:
        futures = [ex.submit(one, i, src) for i, src in enumerate(candidate_srcs)]
        return [f.result() for f in futures]
