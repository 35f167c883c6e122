"""What each kind of job does: verify / profile with the evaluator alone, generate / bestOfN / refine with the
generation engine. Each runner is a plain function of a :class:`JobContext`; none knows LSP types.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from evaluator.verdict import CORRECT, Verdict

from .. import verdicts
from ..config import Settings
from ..documents.sources import source_hash
from ..history import History
from ..tasks import Task
from .manager import JobCancelled, JobContext, JobOutcome

log = logging.getLogger(__name__)

VERIFY_NS = "verify"  # History kv namespace: task key -> the last check of the file's own ModelNew
TEST_BACKEND_ENV = "KERNEL_LSP_TEST_BACKEND"  # test-only: "module:attr" of a scripted model backend

_STAGE_PCT = {"parse": 5, "screen": 10, "compile": 20, "verify": 55, "time": 75, "profile": 90}
_STAGE_WORDS = {"parse": "parsing", "screen": "screening", "compile": "compiling", "verify": "verifying",
                "time": "timing", "profile": "profiling"}


class Services(Protocol):
    """What runners need from their host (the server, or a test)."""

    settings: Settings

    def evaluator(self) -> Any: ...

    def history(self) -> History: ...


@dataclass(frozen=True)
class JobRequest:
    kind: str
    task: Task
    uri: str
    document_hash: str = ""  # hash of the whole file the task came from (verify results are tied to it)
    time: bool = True  # verify: also time the candidate (the check on save skips it, for fast feedback)
    strategy: str | None = None  # generate: the strategy picked for this job (else the kind's, else the setting)


class Unavailable(RuntimeError):
    """A part of the system is not installed or cannot start. The message is for users."""


def _stage_cb(ctx: JobContext, what: str = ""):
    def on_stage(stage: str, message: str = "") -> None:
        word = _STAGE_WORDS.get(stage, stage)
        text = f"{what}{word}" + (f": {message}" if message else "")
        ctx.report(stage, text, _STAGE_PCT.get(stage))
    return on_stage


def _is_cancelled(v: Verdict | None) -> bool:
    return v is not None and v.status == "cancelled"


# --- evaluator-only jobs ---------------------------------------------------------------------------------------
def run_verify(ctx: JobContext, services: Services, req: JobRequest, reference_src: str) -> JobOutcome:
    task = req.task
    if not task.candidate_src:
        return JobOutcome(f"{task.module}: the file has no ModelNew to verify", ok=False)
    ctx.report("start", "starting the evaluator", 2)
    ev = services.evaluator()
    history = services.history()
    hjob = history.start_job(task.key, task.fingerprint, "verify")
    try:
        v: Verdict = ev.evaluate(reference_src, task.candidate_src, cancel=ctx.cancel,
                                 on_stage=_stage_cb(ctx), profile=False, time=req.time)
    except Exception as e:
        history.finish_job(hjob, "cancelled" if ctx.cancelled else "failed", str(e))
        raise
    if ctx.cancelled or _is_cancelled(v):
        history.finish_job(hjob, "cancelled")
        raise JobCancelled()
    summary = verdicts.describe(v)
    history.finish_job(hjob, "done", summary)
    history.put(VERIFY_NS, task.key, {"fingerprint": task.fingerprint, "document": req.document_hash,
                                      "candidate": source_hash(task.candidate_src), "verdict": v.to_dict(),
                                      "job": hjob})
    return JobOutcome(f"ModelNew {summary}", ok=v.status == CORRECT, result={"status": v.status})


def run_profile(ctx: JobContext, services: Services, req: JobRequest, reference_src: str) -> JobOutcome:
    task = req.task
    ctx.report("profile", f"profiling {task.module}", 5)
    ev = services.evaluator()
    history = services.history()
    hjob = history.start_job(task.key, task.fingerprint, "profile")
    try:
        prof = ev.profile(reference_src, cancel=ctx.cancel)
    except Exception as e:
        history.finish_job(hjob, "cancelled" if ctx.cancelled else "failed", str(e))
        raise
    if ctx.cancelled:
        history.finish_job(hjob, "cancelled")
        raise JobCancelled()
    history.save_profile(task.key, task.fingerprint, prof)
    top = prof.ops[0] if prof.ops else None
    msg = f"profiled on {prof.device or 'device'}: {prof.total_ms:.3g} ms"
    if top:
        msg += f", top op {top.name} ({top.share * 100:.0f}%)"
    history.finish_job(hjob, "done", msg)
    return JobOutcome(msg)


# --- generation jobs -------------------------------------------------------------------------------------------
_backend_lock = threading.Lock()


def test_backend() -> Any | None:
    """TEST ONLY: a scripted model backend named by $KERNEL_LSP_TEST_BACKEND ("module:attr").

    The attribute is used as is, or called without arguments when it is a class or a function.
    """
    spec = os.environ.get(TEST_BACKEND_ENV, "").strip()
    if not spec:
        return None
    mod_name, _, attr = spec.partition(":")
    with _backend_lock:
        obj = getattr(importlib.import_module(mod_name), attr or "backend")
    return obj() if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "chat")) else obj


STRATEGY_OF_KIND = {"generate": None, "bestOfN": "best-of-n", "refine": "refine"}


def run_generation(ctx: JobContext, services: Services, req: JobRequest) -> JobOutcome:
    try:
        from ..generation import Engine  # lands with the generation engine's issue
    except ImportError as e:
        log.info("generation engine unavailable: %s", e)
        return JobOutcome("generation engine unavailable: this build has no kernel_lsp.generation yet; "
                          "verify and profile work without it", ok=False)
    task = req.task
    if req.kind == "refine" and not task.candidate_src:
        return JobOutcome(f"{task.module}: refine needs a ModelNew in the file to start from", ok=False)
    settings = services.settings
    strategy = STRATEGY_OF_KIND.get(req.kind) or req.strategy or settings.strategy
    samples = settings.samples if req.kind == "bestOfN" else None
    ctx.report("start", f"starting {strategy}", 1)
    prompts = getattr(services, "prompts", lambda: None)()
    engine = Engine(settings, services.evaluator(), services.history(), backend=test_backend(),
                    **({"prompts": prompts} if prompts is not None else {}))
    try:
        return _generate(ctx, engine, req, strategy, samples)
    finally:
        engine.close()


def _generate(ctx: JobContext, engine: Any, req: JobRequest, strategy: str, samples: int | None) -> JobOutcome:
    task = req.task

    def on_event(e: Any) -> None:
        parts = [getattr(e, "message", "") or getattr(e, "stage", "")]
        ctx.report(getattr(e, "stage", ""), " ".join(p for p in parts if p), getattr(e, "percentage", None))

    res = engine.run(task, strategy=strategy, samples=samples, cancel=ctx.cancel, on_event=on_event)
    if ctx.cancelled or getattr(res, "state", "") == "cancelled":
        raise JobCancelled()
    best = getattr(res, "best", None)
    n = len(getattr(res, "candidates", []) or [])
    if best is not None and getattr(best, "correct", False):
        sp = best.speedup_eager
        msg = f"best: candidate {best.number}" + (f" ({sp:.2f}× vs eager)" if sp else "") + f" of {n}"
        return JobOutcome(msg, result={"best": best.number})
    message = getattr(res, "message", "") or f"no correct candidate among {n}"
    return JobOutcome(message, ok=False)
