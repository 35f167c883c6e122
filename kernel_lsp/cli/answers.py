"""`kernel-lsp answers [PATH]`: what the model wrote, read back from a workspace's history.

Without `--job`: the jobs that asked the model something, one line each. With `--job N` (or `last`): each of the
job's answers as the model wrote it (the raw completion), and what became of it: the candidate extracted from it
(its number, status and file) or why none could be. `--out DIR` writes each answer and each extracted candidate
to a file; `--json` prints the same as JSON. The history is the one `optimize`, `bench` and the editor write:
`<state_dir>/history.sqlite` in the workspace of PATH (the folder of the nearest pyproject.toml above it, else
PATH's own folder), the current folder by default.

Nothing is written to the history; an answer that held no usable ModelNew has no candidate file, which is why
this command exists.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from ..config import Settings, state_path
from ..history import CandidateRecord, History, JobRecord, StepRecord

# Roles of the history's steps that carry a model's completion (see generation/engine.py).
_ROLE_LABELS = {"generate": "answer", "analysis": "analysis of the profile", "summarise": "summary request",
                "triage": "triage"}


class AnswersError(Exception):
    """Something the user can fix (no history there, no such job): one line, exit 2."""


def history_file(settings: Settings, workspace: Path) -> Path:
    return state_path(settings, workspace) / "history.sqlite"


def open_history(settings: Settings, workspace: Path) -> History:
    """The workspace's history, never created here: a folder without one is a mistake to report."""
    db = history_file(settings, workspace)
    if not db.is_file():
        raise AnswersError(f"no history in {db.parent} (nothing was run in this workspace yet; PATH is the module "
                           "file or the workspace folder that `optimize` or the editor ran in)")
    return History(db.parent)


def run_answers(settings: Settings, workspace: Path, args: argparse.Namespace) -> int:
    if args.out and not args.job:
        raise AnswersError("--out needs --job (see `kernel-lsp answers --help`)")
    command = "kernel-lsp answers " + ("" if args.path in (None, ".") else shlex.quote(args.path) + " ")
    with open_history(settings, workspace) as h:
        if not args.job:
            return _list(h, command, as_json=args.json)
        job = _pick_job(h, args.job, command)
        answers = [_answer(h, s) for s in h.steps(job.id) if s.role in _ROLE_LABELS and (s.completion or
                                                                                          s.role == "generate")]
        doc = {"history": str(h.path), "job": _job_json(job), "answers": answers}
        if args.out:
            written = _write(Path(args.out), doc)
            print(f"kernel-lsp: wrote {len(written)} files for job {job.id} to {args.out}", file=sys.stderr)
            return 0
        if args.json:
            print(json.dumps(doc, indent=2))
        else:
            sys.stdout.write(_render_job(job, answers, h.path))
        return 0


# --- the list of jobs ------------------------------------------------------------------------------------------
def _list(h: History, command: str, *, as_json: bool) -> int:
    counts = h.answer_counts()
    jobs = h.jobs()
    asked = [j for j in jobs if j.id in counts]
    if as_json:
        print(json.dumps({"history": str(h.path), "jobs": [
            {**_job_json(j), "answers": counts[j.id][0], "candidates": counts[j.id][1]} for j in asked]}, indent=2))
        return 0
    print(f"history: {h.path}")
    if not asked:
        print("no job asked the model anything yet" + (f" ({len(jobs)} jobs that did not: verify, profile, bench)"
                                                        if jobs else ""))
        return 0
    for j in asked:
        n, c = counts[j.id]
        print(f"job {j.id:>3}  {_when(j.created)}  {j.state:<9}  {_plural(n, 'answer')}, {_plural(c, 'candidate')}"
              f"  {j.task_key}  ({_model(j)})")
    others = len(jobs) - len(asked)
    if others:
        print(f"({_plural(others, 'other job')} asked the model nothing: verify, profile, or a bench job around one "
              "of these)")
    print(f"one job's answers: {command}--job {asked[-1].id}")
    return 0


def _pick_job(h: History, which: str, command: str) -> JobRecord:
    if which == "last":
        counts = h.answer_counts()
        if not counts:
            raise AnswersError(f"no job in {h.path} asked the model anything yet")
        job = h.job(max(counts))
    else:
        if not re.fullmatch(r"\d+", which.strip()):
            raise AnswersError(f"--job {which}: expected a job number or 'last'")
        job = h.job(int(which))
        if job is None:
            raise AnswersError(f"--job {which}: no such job in {h.path} (`{command.rstrip()}` lists them)")
    assert job is not None
    return job


# --- one job ---------------------------------------------------------------------------------------------------
def _answer(h: History, s: StepRecord) -> dict[str, Any]:
    cand: CandidateRecord | None = h.candidate_by_id(s.candidate_id) if s.candidate_id else None
    return {
        "step": s.id, "role": s.role, "round": s.round, "sample": s.sample, "completion": s.completion,
        "completion_tokens": s.completion_tokens, "finish_reason": s.extra.get("finish_reason"),
        "seconds": s.extra.get("seconds"),
        "problem": (s.extra.get("extraction_problem") or s.extra.get("extraction_error") or None)
        if s.role == "generate" and cand is None else None,
        "candidate": None if cand is None else {"number": cand.number, "status": cand.status,
                                                "source_path": cand.source_path, "source": cand.source},
    }


def _job_json(j: JobRecord) -> dict[str, Any]:
    return {"id": j.id, "kind": j.kind, "task": j.task_key, "model": j.model, "strategy": j.strategy,
            "state": j.state, "message": j.message, "created": j.created, "finished": j.finished}


def _label(a: dict[str, Any], k: int) -> str:
    if a["role"] == "generate":
        head = f"answer {k} · round {a['round']}, sample {a['sample']}"
    else:
        head = _ROLE_LABELS[a["role"]] + (f" · round {a['round']}" if a["round"] else "")
    facts = []
    if a["completion_tokens"] is not None:
        facts.append(_plural(a["completion_tokens"], "token"))
    if a["finish_reason"] == "length":
        facts.append("cut off at max_tokens")
    if a["seconds"] is not None:
        facts.append(f"{a['seconds']:.1f} s")
    return " · ".join([head, *facts])


def _render_job(job: JobRecord, answers: list[dict[str, Any]], db: Path) -> str:
    lines = [f"job {job.id} ({job.kind}, {_when(job.created)}): {job.task_key}",
             f"model: {_model(job)}" + (f", strategy: {job.strategy}" if job.strategy else ""),
             f"{job.state}" + (f": {job.message}" if job.message else ""), f"history: {db}"]
    if not answers:
        lines += ["", "this job asked the model nothing"]
    k = 0
    for a in answers:
        k += a["role"] == "generate"
        lines += ["", f"── {_label(a, k)} ──", a["completion"].rstrip("\n") if a["completion"] else "(empty answer)"]
        if a["role"] != "generate":
            continue
        c = a["candidate"]
        if c is None:
            lines.append(f"── no candidate: {a['problem'] or 'no usable ModelNew'}")
        else:
            lines.append(f"── extracted as candidate {c['number']} ({c['status'].replace('_', ' ')}): "
                         f"{c['source_path']}")
    return "\n".join(lines) + "\n"


def _write(out: Path, doc: dict[str, Any]) -> list[Path]:
    """Each completion as NN-answer-rRsS.txt (NN-<role>.txt for the others), each extracted candidate as
    NN-candidate-M.py next to the answer it came from, and everything as answers.json."""
    if out.exists() and not out.is_dir():
        raise AnswersError(f"--out {out}: is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        files: list[tuple[Path, str]] = []
        for i, a in enumerate(doc["answers"], 1):
            stem = (f"{i:02d}-answer-r{a['round']}s{a['sample']}" if a["role"] == "generate"
                    else f"{i:02d}-{a['role']}")
            files.append((out / f"{stem}.txt", a["completion"]))
            if a["candidate"] is not None:
                files.append((out / f"{i:02d}-candidate-{a['candidate']['number']}.py", a["candidate"]["source"]))
        files.append((out / "answers.json", json.dumps(doc, indent=2) + "\n"))
        for path, text in files:
            path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise AnswersError(f"--out {out}: cannot write: {e.strerror or e}") from None
    return [p for p, _ in files]


# --- wording ---------------------------------------------------------------------------------------------------
def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _model(j: JobRecord) -> str:
    return j.model or "model not recorded"
