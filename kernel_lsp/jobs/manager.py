"""The job manager: background work on modules, off the server's event loop and off pygls's thread pool.

One job per module (task key) at a time; further jobs on the same module wait in its queue. Jobs run in the
manager's own ThreadPoolExecutor; the heavy work they start (evaluator workers, model) lives in other processes
or threads and gets the job's cancel Event. The manager knows nothing of LSP: every change of a job is handed to
`on_change` as a plain :class:`JobSnapshot`, from whatever thread made it. The server translates.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

log = logging.getLogger(__name__)

QUEUED, RUNNING, CANCELLING, DONE, FAILED, CANCELLED = "queued", "running", "cancelling", "done", "failed", "cancelled"
FINAL_STATES = (DONE, FAILED, CANCELLED)
KINDS = ("verify", "profile", "generate", "bestOfN", "refine")


class JobCancelled(Exception):
    """Raised inside a job's work when its cancel Event is set."""


@dataclass(frozen=True)
class JobSnapshot:
    """What the outside world sees of a job (the `kernelLsp/jobs` shape)."""

    id: int
    uri: str
    module: str
    kind: str
    state: str
    message: str
    percentage: int | None
    key: str = ""
    stage: str = ""
    result: dict[str, Any] | None = None
    results: int = 0  # how many results (verdicts) the job has published so far

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("key", "stage", "result", "results"):
            d.pop(k)
        return d


@dataclass
class JobOutcome:
    """What a job's work returns: a one-line message, and any plain data for the caller."""

    message: str
    ok: bool = True
    result: dict[str, Any] = field(default_factory=dict)


class JobContext:
    """Handed to a job's work: its cancel Event and a way to report stages."""

    def __init__(self, job: Job, manager: JobManager):
        self._job = job
        self._manager = manager
        self.cancel = job.cancel
        self.job_id = job.id

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def check(self) -> None:
        if self.cancel.is_set():
            raise JobCancelled()

    def report(self, stage: str, message: str, percentage: float | None = None) -> None:
        """The job's progress. Percentages only move forward: a lower one than already reported is ignored."""
        self._manager._update(self._job, stage=stage, message=message, percentage=percentage)

    def publish(self) -> None:
        """A result of the job (a candidate's verdict) is stored: listeners show it now, before the job ends."""
        self._manager._published(self._job)


Work = Callable[[JobContext], JobOutcome]


@dataclass
class Job:
    id: int
    key: str
    uri: str
    module: str
    kind: str
    work: Work
    cancel: threading.Event = field(default_factory=threading.Event)
    state: str = QUEUED
    message: str = "queued"
    stage: str = ""
    percentage: int | None = None
    result: dict[str, Any] | None = None
    results: int = 0
    created: float = field(default_factory=time.monotonic)
    started: float | None = None
    finished: float | None = None
    future: Future | None = None

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot(self.id, self.uri, self.module, self.kind, self.state, self.message, self.percentage,
                           self.key, self.stage, self.result, self.results)


class JobManager:
    def __init__(self, on_change: Callable[[JobSnapshot], None] | None = None, max_workers: int = 2,
                 keep_finished: int = 50, cancel_grace: float = 1.5):
        self._on_change = on_change or (lambda s: None)
        self._pool = ThreadPoolExecutor(max_workers=max(1, max_workers), thread_name_prefix="kernel-lsp-job")
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._jobs: dict[int, Job] = {}
        self._queues: dict[str, deque[Job]] = {}  # per task key: the running job first, then the waiting ones
        self._keep_finished = keep_finished
        self._cancel_grace = cancel_grace  # a cancelled job whose work has not returned by then is let go
        self._closed = False

    # --- queries ---------------------------------------------------------------------------------------------
    def get(self, job_id: int) -> JobSnapshot | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return job.snapshot() if job else None

    def snapshots(self, include_finished: bool = True) -> list[JobSnapshot]:
        with self._lock:
            return [j.snapshot() for j in self._jobs.values() if include_finished or j.state not in FINAL_STATES]

    def active(self, key: str | None = None) -> list[JobSnapshot]:
        with self._lock:
            return [j.snapshot() for j in self._jobs.values()
                    if j.state not in FINAL_STATES and (key is None or j.key == key)]

    # --- control ---------------------------------------------------------------------------------------------
    def submit(self, key: str, kind: str, work: Work, *, uri: str = "", module: str = "") -> JobSnapshot:
        with self._lock:
            if self._closed:
                raise RuntimeError("the job manager is shut down")
            job = Job(next(self._ids), key, uri, module, kind, work)
            self._jobs[job.id] = job
            queue = self._queues.setdefault(key, deque())
            queue.append(job)
            waiting = len(queue) > 1
            if waiting:
                job.message = f"queued behind {queue[0].kind} job {queue[0].id}"
            self._trim()
        self._emit(job)
        if not waiting:
            self._start(job)
        return job.snapshot()

    def cancel(self, job_id: int) -> bool:
        """Ask a job to stop. A queued job is cancelled at once; a running one stops within ~2 s."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state in FINAL_STATES:
                return False
            job.cancel.set()
            if job.state == QUEUED and job.started is None:
                queue = self._queues.get(job.key)
                if queue and job in queue and queue[0] is not job:
                    queue.remove(job)
                    self._finish(job, CANCELLED, "cancelled before it started")
                    return True
            job.state = CANCELLING
            job.message = "cancelling…"
        self._emit(job)
        timer = threading.Timer(self._cancel_grace, self._let_go, args=(job,))
        timer.daemon = True
        timer.start()
        return True

    def _let_go(self, job: Job) -> None:
        """The work did not return in time after a cancel (e.g. stuck in an uninterruptible start-up): report the
        job cancelled now and free its module; the work still sees its cancel Event and its result is dropped."""
        with self._lock:
            if job.state in FINAL_STATES:
                return
        log.warning("job %d (%s %s) did not stop within %.1f s of its cancel: let go, it stops in the background",
                    job.id, job.kind, job.module, self._cancel_grace)
        self._finish(job, CANCELLED, "cancelled (its last step finishes in the background)")

    def cancel_key(self, key: str) -> list[int]:
        ids = [s.id for s in self.active(key)]
        # Waiting ones first, so none of them starts when the running one ends.
        for job_id in reversed(ids):
            self.cancel(job_id)
        return ids

    def cancel_all(self) -> None:
        for s in self.active():
            self.cancel(s.id)

    def shutdown(self, wait: float = 3.0) -> None:
        """Cancel everything and wait (bounded) for running work to return."""
        with self._lock:
            self._closed = True
            running = [j.future for j in self._jobs.values() if j.future is not None and not j.future.done()]
        self.cancel_all()
        deadline = time.monotonic() + wait
        for fut in running:
            try:
                fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as e:  # noqa: BLE001 - finished one way or another
                log.debug("job ended while shutting down: %s", e)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # --- internals -------------------------------------------------------------------------------------------
    def _start(self, job: Job) -> None:
        try:
            job.future = self._pool.submit(self._run, job)
        except RuntimeError:  # pool shut down
            self._finish(job, CANCELLED, "the server is shutting down")

    def _run(self, job: Job) -> None:
        with self._lock:
            if job.cancel.is_set():
                job.started = time.monotonic()
                self._finish(job, CANCELLED, "cancelled before it started")
                return
            job.state, job.message, job.started = RUNNING, "starting", time.monotonic()
        self._emit(job)
        result: dict[str, Any] | None = None
        try:
            outcome = job.work(JobContext(job, self))
            if job.cancel.is_set():
                state, message = CANCELLED, "cancelled"
            else:
                state, message, result = (DONE if outcome.ok else FAILED), outcome.message, outcome.result
        except JobCancelled:
            state, message = CANCELLED, "cancelled"
        except Exception as e:
            if job.cancel.is_set():
                state, message = CANCELLED, "cancelled"
            else:
                log.exception("job %d (%s %s) failed", job.id, job.kind, job.module)
                state, message = FAILED, f"{type(e).__name__}: {e}"
        self._finish(job, state, message, result)

    def _finish(self, job: Job, state: str, message: str, result: dict[str, Any] | None = None) -> None:
        nxt: Job | None = None
        with self._lock:
            if job.state in FINAL_STATES:  # already let go after a cancel
                return
            job.state, job.message, job.result = state, message, result
            job.finished = time.monotonic()
            if state == DONE:
                job.percentage = 100
            queue = self._queues.get(job.key)
            if queue and queue[0] is job:
                queue.popleft()
                while queue and queue[0].state in FINAL_STATES:
                    queue.popleft()
                if queue:
                    nxt = queue[0]
                    nxt.message = "starting"
                else:
                    self._queues.pop(job.key, None)
        self._emit(job)
        if nxt is not None:
            self._start(nxt)

    def _update(self, job: Job, *, stage: str, message: str, percentage: float | None) -> None:
        with self._lock:
            if job.state in FINAL_STATES:
                return
            job.stage = stage
            job.message = message if job.state != CANCELLING else "cancelling…"
            if percentage is not None:
                job.percentage = max(job.percentage or 0, min(100, int(percentage)))
        self._emit(job)

    def _published(self, job: Job) -> None:
        with self._lock:
            if job.state in FINAL_STATES:
                return
            job.results += 1
        self._emit(job)

    def _emit(self, job: Job) -> None:
        """Hand the listener the job's state now. Under the lock, so listeners get a job's changes in the order
        they happened: a stage reported by another thread as the job ends never arrives after its end."""
        with self._lock:
            try:
                self._on_change(job.snapshot())
            except Exception:
                log.exception("job listener failed")

    def _trim(self) -> None:
        done = [j for j in self._jobs.values() if j.state in FINAL_STATES]
        for j in done[: max(0, len(done) - self._keep_finished)]:
            self._jobs.pop(j.id, None)
