"""Trajectories as a training dataset: one row per step that asked the model something (docs/DATASET.md).

The rows are read from the history (`History.trajectory`); nothing is recomputed: the reward is the one the
engine stored for the step (kernel_lsp/generation/rewards.py), the verdict the one the oracle gave. Each row also
says whether its prompt is free of chain of thought: a prompt must never hold the text an earlier step of its job
wrote inside reasoning markers (`<think>` and the others of `extract.REASONING_TAGS`), nor a reasoning marker.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluator.verdict import Verdict

from .generation.context import NO_KERNEL
from .generation.extract import has_reasoning_marker, reasoning_sections, strip_thinking
from .history import CandidateRecord, History, JobRecord, StepRecord

# Roles of the steps whose prompt went to the model (see generation/engine.py); seed and retrieval steps hold none.
MODEL_ROLES = ("generate", "analysis", "triage", "summarise")
# A line of reasoning shorter than this is too generic to tell a leak from a coincidence ("Let me think.").
LEAK_MIN_CHARS = 40

COLUMNS = ("job", "step", "task", "strategy", "model", "role", "round", "sample", "parent_step", "template",
           "prompt", "completion", "summary", "prompt_tokens", "completion_tokens", "finish_reason", "candidate",
           "kernel", "status", "kernel_finding", "message", "speedup_eager", "speedup_eager_ci_pct", "speedup_uncertain",
           "speedup_compiled", "ms", "eager_ms", "checked", "not_checked", "score", "reward",
           "reasoning_in_prompt", "verdict")


@dataclass(frozen=True)
class Filters:
    tasks: tuple[str, ...] = ()  # a task key holding the text, or matching the glob
    strategies: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()

    def job_ok(self, job: JobRecord) -> bool:
        if self.tasks and not any(t in job.task_key or fnmatch.fnmatchcase(job.task_key, t) for t in self.tasks):
            return False
        return not self.strategies or job.strategy in self.strategies

    def row_ok(self, row: dict[str, Any]) -> bool:
        return not self.statuses or row["status"] in self.statuses


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def prompt_messages(step: StepRecord) -> list[dict[str, str]]:
    """The messages the model was sent (the history keeps them as JSON text)."""
    try:
        msgs = json.loads(step.prompt) if step.prompt else []
    except json.JSONDecodeError:
        return [{"role": "user", "content": step.prompt}]
    if not isinstance(msgs, list):
        return [{"role": "user", "content": str(msgs)}]
    return [{"role": str(m.get("role", "")), "content": str(m.get("content", ""))} for m in msgs
            if isinstance(m, dict)]


def _prompt_text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def reasoning_lines(completion: str, own_prompt: str, kernel: str | None) -> set[str]:
    """The lines of a completion's chain of thought that must not show up in a later prompt: those of at least
    LEAK_MIN_CHARS characters that are not also in its answer (a summary or kernel written in both is carried
    legitimately), its own prompt (the model quoting the task) or the kernel extracted from it."""
    known = [_norm(strip_thinking(completion)), _norm(own_prompt), _norm(kernel or "")]
    out = set()
    for section in reasoning_sections(completion):
        for line in section.splitlines():
            n = _norm(line)
            if len(n) >= LEAK_MIN_CHARS and not any(n in k for k in known):
                out.add(n)
    return out


def verdict_fields(v: Verdict | None) -> dict[str, Any]:
    """What a row says of a verdict: speedups with their uncertainty, timings, what was and was not checked, and
    the whole verdict. `kernel-lsp reward` writes the same fields."""
    t = v.timing if v else None
    return {
        "kernel_finding": v.kernel_finding if v else None,
        "speedup_eager": t.speedup_eager if t else None,
        "speedup_eager_ci_pct": t.speedup_ci_pct if t else None,
        "speedup_uncertain": t.uncertain if t else None,
        "speedup_compiled": t.speedup_compiled if t else None,
        "ms": t.candidate.median_ms if t and t.candidate else None,
        "eager_ms": t.eager.median_ms if t and t.eager else None,
        "checked": list(v.checked) if v else [],
        "not_checked": list(v.not_checked) if v else [],
        "verdict": v.to_dict() if v else None,
    }


def _status(step: StepRecord, cand: CandidateRecord | None) -> tuple[str | None, str]:
    if cand is not None:
        return cand.status, cand.verdict.message if cand.verdict else ""
    if step.role == "generate":
        return NO_KERNEL, str(step.extra.get("extraction_problem") or step.extra.get("extraction_error") or "")
    return None, ""


def rows(history: History, filters: Filters = Filters()) -> Iterator[dict[str, Any]]:
    """The dataset's rows, in the order the steps were taken, job by job."""
    seen_job: int | None = None
    earlier: set[str] = set()  # reasoning lines of the job's steps so far
    for job, step, cand in history.trajectory([j.id for j in history.jobs() if filters.job_ok(j)]):
        if job.id != seen_job:
            seen_job, earlier = job.id, set()
        messages = prompt_messages(step)
        text = _prompt_text(messages)
        leak = bool(step.prompt) and (has_reasoning_marker(text) or any(line in _norm(text) for line in earlier))
        earlier |= reasoning_lines(step.completion, text, cand.source if cand else None)
        if step.role not in MODEL_ROLES or not step.prompt:
            continue
        status, message = _status(step, cand)
        row = {
            "job": job.id, "step": step.id, "task": job.task_key, "strategy": job.strategy, "model": job.model,
            "role": step.role, "round": step.round, "sample": step.sample,
            "parent_step": step.extra.get("parent_step"), "template": step.extra.get("template"),
            "prompt": messages, "completion": step.completion, "summary": step.summary,
            "prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens,
            "finish_reason": step.extra.get("finish_reason"),
            "candidate": cand.number if cand else None, "kernel": cand.source if cand else None,
            "status": status, "message": message, "score": step.score, "reward": step.reward,
            "reasoning_in_prompt": leak, **verdict_fields(cand.verdict if cand else None),
        }
        if filters.row_ok(row):
            yield {k: row[k] for k in COLUMNS}


def write_jsonl(items: Iterable[dict[str, Any]], out: Path) -> list[dict[str, Any]]:
    """Write the rows to `out` (one JSON object a line); returns them (for the Parquet copy and the summary)."""
    kept = []
    with out.open("w", encoding="utf-8") as f:
        for row in items:
            f.write(json.dumps(row) + "\n")
            kept.append(row)
    return kept


def parquet_available() -> bool:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def write_parquet(items: list[dict[str, Any]], out: Path) -> None:
    """The same rows as a Parquet file; the full verdict (nested, with keys that vary) goes in as JSON text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    f64, i64, s, b = pa.float64(), pa.int64(), pa.string(), pa.bool_()
    types = {"job": i64, "step": i64, "task": s, "strategy": s, "model": s, "role": s, "round": i64,
             "sample": i64, "parent_step": i64, "template": s, "prompt": pa.list_(message), "completion": s,
             "summary": s, "prompt_tokens": i64, "completion_tokens": i64, "finish_reason": s, "candidate": i64,
             "kernel": s, "status": s, "kernel_finding": s, "message": s, "speedup_eager": f64, "speedup_eager_ci_pct": f64,
             "speedup_uncertain": b, "speedup_compiled": f64, "ms": f64, "eager_ms": f64,
             "checked": pa.list_(s), "not_checked": pa.list_(s), "score": f64, "reward": f64,
             "reasoning_in_prompt": b, "verdict": s}
    schema = pa.schema([(c, types[c]) for c in COLUMNS])
    flat = [{**r, "verdict": json.dumps(r["verdict"]) if r["verdict"] is not None else None} for r in items]
    pq.write_table(pa.Table.from_pylist(flat, schema=schema), out)
