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


def _ms(x: float) -> str:
    return f"{x:.2f}" if x >= 0.1 else f"{x:.3g}"


def speed_and_trials(v: Verdict) -> str:
    """'1.84× faster than eager (0.41 ms vs 0.76 ms), 1.2× vs torch.compile, correct on 5 trials'"""
    t = v.timing
    parts: list[str] = []
    if t and t.speedup_eager:
        word = "faster" if t.speedup_eager >= 1 else "slower"
        factor = t.speedup_eager if t.speedup_eager >= 1 else 1 / t.speedup_eager
        head = f"{factor:.2f}× {word} than eager"
        if t.candidate and t.eager:
            head += f" ({_ms(t.candidate.median_ms)} ms vs {_ms(t.eager.median_ms)} ms)"
        parts.append(head)
    if t and t.speedup_compiled is not None:
        parts.append(f"{t.speedup_compiled:.2g}× vs torch.compile")
    passed = v.correctness.passed if v.correctness else None
    parts.append(f"correct on {passed} trials" if passed else "correct")
    return ", ".join(parts)


def describe_verdict(v: Verdict) -> str:
    """One line for a job message or a diagnostic about the file's own ModelNew."""
    if v.status == CORRECT:
        return speed_and_trials(v)
    if v.status == "incorrect" and v.correctness:
        c = v.correctness
        trial = f", trial {c.failed_trial + 1} of {c.trials}" if c.failed_trial is not None else ""
        err = f"max abs error {c.max_abs_err:.3g}" if c.max_abs_err is not None else "outputs differ"
        rel = f" (rel {c.max_rel_err:.3g})" if c.max_rel_err is not None else ""
        where = f" at {c.where}" if c.where else ""
        return f"disagrees with Model: {err}{rel}{where}{trial}" + (f" — {c.message}" if c.message else "")
    first = first_error(v)
    return f"{v.status.replace('_', ' ')}: {first}" if first else v.status.replace("_", " ")


def first_error(v: Verdict) -> str:
    """The first compiler error, else the mismatch, else the verdict's message (one line)."""
    if v.compiler_log:
        for line in v.compiler_log.splitlines():
            if "error" in line.lower():
                return line.strip()[:300]
    if v.correctness and v.correctness.message:
        return v.correctness.message.splitlines()[0][:300]
    msg = v.message or next((s.message for s in v.stages if not s.ok and s.message), "")
    return msg.splitlines()[0][:300] if msg else ""


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
    summary = describe_verdict(v)
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
