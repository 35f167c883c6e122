"""What each kind of job does: verify / profile with the evaluator alone, generate / bestOfN / refine with the
generation engine. Each runner is a plain function of a :class:`JobContext` and the workspace's services; none
knows LSP types.

Every job leaves a trace in the history: a job record opened first and finished with its outcome, whatever
happens (a failure before the engine or the evaluator started included), so what the editor shows after a job
ends can be read back from the history.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from evaluator.verdict import CANCELLED, CORRECT, Verdict

from .. import verdicts
from ..config import Settings
from ..documents.sources import source_hash
from ..generation import Engine, EngineEvent
from ..history import History, verify
from ..history.store import GENERATION_KIND
from ..models import is_embedded
from ..services import Unavailable, WorkspaceServices
from ..tasks import Task
from .manager import JobCancelled, JobContext, JobOutcome

log = logging.getLogger(__name__)


_STAGE_PCT = {"parse": 5, "screen": 10, "compile": 20, "verify": 55, "time": 75, "profile": 90}
_STAGE_WORDS = {"parse": "parsing", "screen": "screening", "compile": "compiling", "verify": "verifying",
                "time": "timing", "profile": "profiling"}
STRATEGY_OF_KIND = {"generate": None, "bestOfN": "best-of-n", "refine": "refine"}


@dataclass(frozen=True)
class JobRequest:
    kind: str
    task: Task
    uri: str
    document_hash: str = ""  # hash of the whole file the task came from (verify results are tied to it)
    time: bool = True  # verify: also time the candidate against the reference
    strategy: str | None = None  # generate: the strategy picked for this job (else the kind's, else the setting)


def run(ctx: JobContext, services: WorkspaceServices, req: JobRequest) -> JobOutcome:
    """The job of `req.kind`: the one entry point the server submits."""
    if req.kind == "verify":
        return run_verify(ctx, services, req)
    if req.kind == "profile":
        return run_profile(ctx, services, req)
    return run_generation(ctx, services, req)


@contextmanager
def _recorded(ctx: JobContext, history: History, hjob: int) -> Iterator[None]:
    """Finish the history's job record `hjob` as failed or cancelled when the body raises."""
    try:
        yield
    except Unavailable as e:
        history.finish_job(hjob, "failed", str(e))
        raise
    except JobCancelled:
        history.finish_job(hjob, "cancelled")
        raise
    except Exception as e:
        history.finish_job(hjob, "cancelled" if ctx.cancelled else "failed", f"{type(e).__name__}: {e}")
        raise


def _stage_cb(ctx: JobContext):
    def on_stage(stage: str, message: str = "") -> None:
        word = _STAGE_WORDS.get(stage, stage)
        # the oracle's message often starts with the stage's own word ("parsing", "timing reference ..."): say
        # it once
        said = message.lower().startswith((word, stage)) if message else False
        ctx.report(stage, message if said else word + (f": {message}" if message else ""), _STAGE_PCT.get(stage))
    return on_stage


def _is_cancelled(v: Verdict | None) -> bool:
    return v is not None and v.status == CANCELLED


# --- evaluator-only jobs ---------------------------------------------------------------------------------------
def run_verify(ctx: JobContext, services: WorkspaceServices, req: JobRequest) -> JobOutcome:
    task = req.task
    if not task.candidate_src:
        return JobOutcome(f"{task.module}: the file has no ModelNew to verify", ok=False)
    history = services.history()
    hjob = history.start_job(task.key, task.fingerprint, "verify")
    with _recorded(ctx, history, hjob):
        ctx.report("start", "starting the evaluator", 2)
        v = services.evaluator().evaluate(task.reference_src, task.candidate_src, cancel=ctx.cancel,
                                          on_stage=_stage_cb(ctx), profile=False, time=req.time)
        if ctx.cancelled or _is_cancelled(v):
            raise JobCancelled()
    summary = verdicts.describe(v)
    history.finish_job(hjob, "done", summary)
    verify.save(history, task.key, verify.VerifyRecord(task.fingerprint, req.document_hash,
                                                       source_hash(task.candidate_src), v, job=hjob))
    return JobOutcome(f"ModelNew {summary}", ok=v.status == CORRECT, result={"status": v.status})


def run_profile(ctx: JobContext, services: WorkspaceServices, req: JobRequest) -> JobOutcome:
    task = req.task
    history = services.history()
    hjob = history.start_job(task.key, task.fingerprint, "profile")
    with _recorded(ctx, history, hjob):
        ctx.report("profile", f"profiling {task.module}", 5)
        prof = services.evaluator().profile(task.reference_src, cancel=ctx.cancel)
        if ctx.cancelled:
            raise JobCancelled()
    history.save_profile(task.key, task.fingerprint, prof)
    top = prof.ops[0] if prof.ops else None
    msg = f"profiled on {prof.device or 'device'}: {prof.total_ms:.3g} ms"
    if top:
        msg += f", top op {top.name} ({top.share * 100:.0f}%)"
    history.finish_job(hjob, "done", msg)
    return JobOutcome(msg)


# --- generation jobs -------------------------------------------------------------------------------------------
def quick_generate(settings: Settings, kind: str) -> bool:
    """*Generate kernel* with the embedded demo model is one sample of one round (about a minute or two on a CPU,
    not the twenty of the full plan for an answer that is rarely a kernel); *Best of n* and *Refine* keep the
    settings. Any other model: the settings' plan."""
    return kind == "generate" and is_embedded(settings.model, settings.endpoint)


def run_generation(ctx: JobContext, services: WorkspaceServices, req: JobRequest) -> JobOutcome:
    task = req.task
    settings = services.settings
    strategy = STRATEGY_OF_KIND.get(req.kind) or req.strategy or settings.strategy
    samples = settings.samples if req.kind == "bestOfN" else None
    rounds = None
    if quick_generate(settings, req.kind):
        samples, rounds = 1, 1
    history = services.history()
    hjob = history.start_job(task.key, task.fingerprint, GENERATION_KIND, strategy=strategy,
                             settings=settings.to_dict())
    if req.kind == "refine" and not task.candidate_src:
        message = f"{task.module}: refine needs a ModelNew in the file to start from"
        history.finish_job(hjob, "failed", message)
        return JobOutcome(message, ok=False)
    with _recorded(ctx, history, hjob):
        ctx.report("start", f"starting {strategy}", 1)
        engine = services.engine()
    try:
        return _generate(ctx, engine, req, strategy, samples, rounds, hjob)
    finally:
        engine.close()


def _generate(ctx: JobContext, engine: Engine, req: JobRequest, strategy: str, samples: int | None,
              rounds: int | None, hjob: int) -> JobOutcome:
    def on_event(e: EngineEvent) -> None:
        # the status: everything in flight, the same words whichever thread sent the event (the lens, $/progress
        # and the status bar all show it)
        ctx.report(e.stage, e.status or e.message or e.stage, e.percentage)
        if e.verdict:
            ctx.publish()  # a candidate's verdict is in the history: the editor shows it now, not at the end

    res = engine.run(req.task, strategy=strategy, samples=samples, rounds=rounds, job_id=hjob, cancel=ctx.cancel,
                     on_event=on_event)
    if ctx.cancelled or res.state == "cancelled":
        raise JobCancelled()
    best, offered = res.best, res.offered
    n = len(res.candidates)
    if offered is not None:
        # the job's one line (status bar, progress end): the reason for an uncertain speed is in the hover
        sp = verdicts.timing_speed(offered.verdict.timing if offered.verdict else None, why=False)
        return JobOutcome(f"best: candidate {offered.number} ({sp.replace(' (uncertain)', ', uncertain')}) of {n}",
                          result={"best": offered.number})
    if best is not None:  # correct, but not shown faster than eager: a finding, not a result
        return JobOutcome(f"{verdicts.no_win(best.number, best.verdict.timing if best.verdict else None)}; {n} "
                          "candidates", result={"best": None, "fastestCorrect": best.number})
    return JobOutcome(res.message or f"no correct candidate among {n}", ok=False)
