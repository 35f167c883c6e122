"""Finished work of sweeps, in the History: one "bench" job per (run, task), its result in kv.

A result is written only once a task is finished, keyed by the run (label, strategy, model, configuration,
device), the task (name, fingerprint) and the candidate's source hash; a sweep that restarts skips every key
that already has a result, so an interruption loses at most the tasks that were in flight.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..history import History
from ..tasks import Task
from .metrics import TaskResult

RESULT_NS = "bench.result"
JOB_KIND = "bench"


@dataclass(frozen=True)
class RunSpec:
    """What makes two sweeps the same run (and their results interchangeable)."""

    label: str  # shown as the table's "strategy": "candidates" or the strategy name
    strategy: str
    model: str = ""
    device: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # n, rounds, tolerances... (anything that changes results)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "strategy": self.strategy, "model": self.model, "device": self.device,
                "config": self.config}


def result_key(spec: RunSpec, task: Task, source_hash: str = "") -> str:
    blob = json.dumps([spec.to_dict(), task.name, task.fingerprint, source_hash], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class Ledger:
    def __init__(self, history: History) -> None:
        self.history = history

    def done(self, key: str) -> TaskResult | None:
        d = self.history.get(RESULT_NS, key)
        return TaskResult.from_dict(d["result"]) if d else None

    def start(self, spec: RunSpec, task: Task, key: str) -> int:
        return self.history.start_job(task.key, task.fingerprint, JOB_KIND, strategy=spec.label, model=spec.model,
                                      settings={"bench_key": key, "task": task.name, "run": spec.to_dict()})

    def finish(self, job_id: int, key: str, spec: RunSpec, result: TaskResult) -> None:
        """The result first, then the job: a crash in between re-runs nothing (the key is what counts)."""
        self.history.put(RESULT_NS, key, {"job": job_id, "device": spec.device, "result": result.to_dict()})
        self.history.finish_job(job_id, "done", f"{result.status}" + (f": {result.message}" if result.message else ""))

    def fail(self, job_id: int, state: str, message: str) -> None:
        self.history.finish_job(job_id, state, message)

    def results(self, fingerprints: dict[str, str], device: str | None = None) -> list[TaskResult]:
        """Finished results for these tasks (name -> current fingerprint; results of older versions of a task
        are left out), of any run (on `device` when given), oldest first."""
        out: list[TaskResult] = []
        seen: set[str] = set()
        for job in self.history.jobs():
            if job.kind != JOB_KIND or job.state != "done":
                continue
            key = job.settings.get("bench_key", "")
            if key in seen or fingerprints.get(job.settings.get("task", "")) != job.fingerprint:
                continue
            seen.add(key)
            d = self.history.get(RESULT_NS, key)
            if not d or (device is not None and d.get("device") != device):
                continue
            out.append(TaskResult.from_dict(d["result"]))
        return out
