"""The sweep: every selected task once per run, skipping finished work, results into the History as they come.

Each task is one unit of work: evaluate its candidate file (``--candidates``) or run the generation engine on it.
Units run on a thread pool; the evaluator (a local process pool, or Ray actors) does the heavy lifting, so the
threads only wait. A unit's result is written to the ledger when it is finished, and only then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evaluator.verdict import CANCELLED, INFRA_ERROR, Verdict

from ..history import History
from ..history.ranking import rank_key
from ..oracle import Oracle
from ..tasks import Task, source_hash
from .baselines import LiveBaselines, identity_candidate
from .ledger import Ledger, RunSpec, result_key
from .metrics import TaskResult

if TYPE_CHECKING:
    from ..generation import Engine

UNFINISHED = (CANCELLED, INFRA_ERROR)  # statuses that say nothing about the candidate: run again next time


class Aborted(RuntimeError):
    """The sweep cannot go on (e.g. no model); the message is for users."""


@dataclass(frozen=True)
class WorkItem:
    task: Task
    source: str | None = None  # the candidate's source (candidates mode); None: generate
    source_path: str = ""
    generate: bool = False

    @property
    def source_hash(self) -> str:
        return source_hash(self.source) if self.source is not None else ""


@dataclass
class SweepStats:
    ran: int = 0
    skipped: int = 0  # finished in an earlier sweep
    missing: int = 0  # no candidate file
    errors: int = 0  # not finished (infra error, exception); run again next time
    evaluations: int = 0  # calls to the evaluator made here (candidates and baselines)
    results: list[TaskResult] = field(default_factory=list)


def result_from_verdict(task: Task, spec: RunSpec, v: Verdict, baseline: dict | None) -> TaskResult:
    t = v.timing
    eager = t.eager.median_ms if t and t.eager else (baseline or {}).get("eager", {}).get("median_ms")
    comp = t.compiled.median_ms if t and t.compiled else ((baseline or {}).get("compiled") or {}).get("median_ms")
    return TaskResult(
        task=task.name, level=task.level, strategy=spec.label, model=spec.model, status=v.status,
        speedup_eager=t.speedup_eager if t else None, speedup_compiled=t.speedup_compiled if t else None,
        candidate_ms=t.candidate.median_ms if t and t.candidate else None, eager_ms=eager, compiled_ms=comp,
        message=(v.message or "").splitlines()[0][:200] if v.message else "",
        extra={"stage_s": {st.name: round(st.seconds, 3) for st in v.stages}, "verdict_s": round(v.seconds, 3)},
        speedup_ci_pct=t.speedup_ci_pct if t else None, uncertain=bool(t and t.uncertain), noise=t.noise if t else "",
        kernel=v.kernel_finding or "",
    )


def sample_counts(candidates: list, drawn: int) -> dict[str, int]:
    """What the samples of one generation run found, for pass@k: `drawn` samples per round; a sample counts as
    correct (fast: correct, not library-only, and more than 1x faster than eager) when any of its candidates, in
    any round, is.
    Samples whose answer held no kernel have no candidate and count as failures. The file's own ModelNew (round
    0 of refine) was not drawn from the model and is left out."""
    correct: set[int] = set()
    fast: set[int] = set()
    for c in candidates:
        v = c.verdict
        if v is None or c.round < 1 or not 1 <= c.sample <= drawn or v.status != "correct":
            continue
        correct.add(c.sample)
        s = v.timing.speedup_eager if v.timing else None
        if s is not None and s > 1.0 and not v.library_only:
            fast.add(c.sample)
    return {"drawn": drawn, "correct": len(correct), "fast_1": len(fast)}


OnDone = Callable[[WorkItem, TaskResult, str], None]  # (item, result, how: "ran" | "skipped" | "missing" | "error")


class Sweep:
    def __init__(self, history: History, evaluator: Oracle, spec: RunSpec, baselines: LiveBaselines, *,
                 workers: int = 2, engine_factory: Callable[[], Engine] | None = None,
                 cancel: threading.Event | None = None, on_done: OnDone | None = None,
                 generate_workers: int = 1) -> None:
        self.history = history
        self.ev = evaluator
        self.spec = spec
        self.baselines = baselines
        self.ledger = Ledger(history)
        self.workers = max(1, workers)
        # tasks whose candidates the model writes, at once: while one task's model writes, others' candidates are
        # compiled and judged and their references profiled (the model's own lock orders its generations)
        self.generate_workers = max(1, generate_workers)
        self.engine_factory = engine_factory
        self.cancel = cancel or threading.Event()
        self.on_done = on_done
        self.stats = SweepStats()
        self._lock = threading.Lock()
        self._engine: Engine | None = None

    # -- one unit ------------------------------------------------------------------------------------------------
    def _evaluate(self, ref: str, cand: str) -> Verdict:
        with self._lock:
            self.stats.evaluations += 1
        return self.ev.evaluate(ref, cand, cancel=self.cancel, time=True)

    def _ensure_baseline(self, task: Task, verdict: Verdict | None) -> dict | None:
        have = self.baselines.get(task)
        if have is not None:
            return have
        if verdict is not None and self.baselines.record(task, verdict, "candidate run"):
            return self.baselines.get(task)
        if self.cancel.is_set():
            return None
        try:  # the reference alone; a failure here costs the table a column, not the candidate its verdict
            v = self._evaluate(task.reference_src, identity_candidate(task.reference_src))
        except Exception:
            return None
        self.baselines.record(task, v, "reference run")
        return self.baselines.get(task)

    def _record_candidate(self, item: WorkItem, job_id: int, v: Verdict) -> None:
        """Right before the unit's result: a sweep killed in between (its baseline run, say) leaves no candidate
        that the next sweep, running the unit again, would record a second time."""
        if not item.generate and item.source is not None and v.status not in UNFINISHED:
            self.history.add_candidate(item.task.key, item.task.fingerprint, item.source, job_id=job_id,
                                       strategy=self.spec.label, verdict=v)

    def _generated_verdict(self, item: WorkItem) -> tuple[Verdict | None, str, dict]:
        with self._lock:
            if self._engine is None:
                assert self.engine_factory is not None
                self._engine = self.engine_factory()
            engine = self._engine
        cfg = self.spec.config
        res = engine.run(item.task, strategy=self.spec.strategy, samples=cfg.get("samples"),
                         rounds=cfg.get("rounds"), cancel=self.cancel)
        state = getattr(res, "state", "")
        if state == "cancelled" or self.cancel.is_set():
            return Verdict(status=CANCELLED, message="cancelled"), "", {}
        if getattr(res, "oracle_failed", False):  # the evaluator's failure, not the model's: the unit runs again
            return Verdict(status=INFRA_ERROR, message=getattr(res, "message", "") or "the oracle failed"), "", {}
        cands = [c for c in (getattr(res, "candidates", None) or []) if c.verdict is not None]
        best = getattr(res, "best", None) or (min(cands, key=rank_key) if cands else None)  # else the least bad
        n = len(getattr(res, "candidates", None) or [])
        extra = {"samples": sample_counts(cands, int(cfg.get("samples") or 1))}
        if best is None or best.verdict is None:
            return None, getattr(res, "message", "") or f"no candidate with a verdict among {n}", extra
        return best.verdict, f"job {getattr(res, 'job_id', '?')}: candidate {best.number} of {n}", extra

    def run_one(self, item: WorkItem) -> tuple[TaskResult, str]:
        task, spec = item.task, self.spec
        if not item.generate and item.source is None:
            return TaskResult(task=task.name, level=task.level, strategy=spec.label, model=spec.model,
                              status="missing", message="no candidate file"), "missing"
        key = result_key(spec, task, item.source_hash)
        done = self.ledger.done(key)
        if done is not None:
            return done, "skipped"
        job = self.ledger.start(spec, task, key)
        try:
            extra: dict = {}
            if item.generate:
                verdict, note, extra = self._generated_verdict(item)
            else:
                assert item.source is not None
                verdict, note = self._evaluate(task.reference_src, item.source), ""
            if verdict is not None and verdict.status in UNFINISHED:
                self.ledger.fail(job, "cancelled" if verdict.status == CANCELLED else "failed", verdict.message)
                return TaskResult(task=task.name, level=task.level, strategy=spec.label, model=spec.model,
                                  status="error", message=verdict.message[:200]), "error"
            baseline = self._ensure_baseline(task, verdict)
            if verdict is None:
                result = TaskResult(task=task.name, level=task.level, strategy=spec.label, model=spec.model,
                                    status="no_candidate", message=note[:200],
                                    eager_ms=(baseline or {}).get("eager", {}).get("median_ms"), extra=extra)
            else:
                result = result_from_verdict(task, spec, verdict, baseline)
                if note or extra:
                    result = TaskResult.from_dict({**result.to_dict(),
                                                   "extra": {**result.extra, **extra, **({"note": note} if note else {})}})
        except Aborted:
            self.ledger.fail(job, "failed", "aborted")
            raise
        except Exception as e:  # the evaluator or the engine broke: not the candidate's fault, retry next time
            if _is_fatal(e):
                self.ledger.fail(job, "failed", str(e))
                raise Aborted(str(e)) from e
            self.ledger.fail(job, "failed", f"{type(e).__name__}: {e}")
            return TaskResult(task=task.name, level=task.level, strategy=spec.label, model=spec.model,
                              status="error", message=f"{type(e).__name__}: {e}"[:200]), "error"
        if verdict is not None:
            self._record_candidate(item, job, verdict)
        self.ledger.finish(job, key, spec, result)
        return result, "ran"

    # -- all units -----------------------------------------------------------------------------------------------
    def _account(self, item: WorkItem, result: TaskResult, how: str) -> None:
        counter = {"ran": "ran", "skipped": "skipped", "missing": "missing", "error": "errors"}[how]
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
            self.stats.results.append(result)
        if self.on_done is not None:
            self.on_done(item, result, how)

    def run(self, items: list[WorkItem]) -> SweepStats:
        # finished and missing units are accounted for first, so the progress bar starts where the last sweep ended
        todo = []
        for it in items:
            if not it.generate and it.source is None:
                self._account(it, *self.run_one(it))
                continue
            done = self.ledger.done(result_key(self.spec, it.task, it.source_hash))
            if done is not None:
                self._account(it, done, "skipped")
            else:
                todo.append(it)
        workers = self.generate_workers if any(it.generate for it in todo) else self.workers
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="klsp-bench")
        futures: dict[Future, WorkItem] = {}
        pending = list(reversed(todo))
        try:
            while pending or futures:
                while pending and len(futures) < workers and not self.cancel.is_set():
                    it = pending.pop()
                    futures[pool.submit(self.run_one, it)] = it
                if not futures:
                    break
                finished, _ = wait(futures, timeout=0.5, return_when=FIRST_COMPLETED)
                for f in finished:
                    it = futures.pop(f)
                    self._account(it, *f.result())
        except BaseException:
            self.cancel.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return self.stats


def _is_fatal(e: Exception) -> bool:
    """Errors that would repeat on every task: no model, no evaluator."""
    try:
        from ..generation.errors import GenerationError
    except ImportError:  # pragma: no cover
        return False
    from ..models import ModelNotFound

    return isinstance(e, (GenerationError, ModelNotFound))
