"""Which tasks a sweep covers: KernelBench rows (level{N}.jsonl) or a folder of task files, by level and id."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ..documents.sources import reference_only
from ..tasks import Task, TaskError, kernelbench_tasks, task_from_file


class BenchError(ValueError):
    """A bad bench invocation or input the user can fix. Printed as one line, exit status 2."""


_ID_PREFIX = re.compile(r"^(\d+)_")
_LEVEL_DIR = re.compile(r"^level_?(\d+)$")


def parse_ranges(text: str | None) -> set[int] | None:
    """ "1-10,23" -> {1..10, 23}; None or "" -> None (all tasks)."""
    if text is None or not text.strip():
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)\s*(?:-\s*(\d+))?", part)
        if not m:
            raise BenchError(f"--tasks {text!r}: expected problem ids like 1-10,23")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise BenchError(f"--tasks {text!r}: range {part} goes backwards")
        out.update(range(lo, hi + 1))
    return out


def short_name(task: Task) -> str:
    """The name candidate files are named after: "23_Softmax" for "level1/23_Softmax", the file stem otherwise."""
    if task.path:
        return Path(task.path).stem
    return task.name.rsplit("/", 1)[-1]


def _folder_tasks(root: Path) -> list[Task]:
    """Every .py file under `root` (flat, or in level{N}/ subfolders) that defines a task; others are skipped."""
    out: list[Task] = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root)
        if any(part.startswith((".", "__")) for part in rel.parts):
            continue
        level = None
        if len(rel.parts) > 1:
            m = _LEVEL_DIR.match(rel.parts[0])
            level = int(m.group(1)) if m else None
        try:
            t = task_from_file(f)
        except TaskError:
            continue  # helpers, candidates and other files that are not tasks
        if t.candidate_src:  # the file also holds its own ModelNew: the reference must not build its kernels
            t = replace(t, reference_src=reference_only(t.reference_src))
        m = _ID_PREFIX.match(f.stem)
        name = f"level{level}/{f.stem}" if level is not None else rel.with_suffix("").as_posix()
        out.append(replace(t, name=name, level=level, problem_id=int(m.group(1)) if m else None))
    return out


def select_tasks(source: str | Path, levels: list[int] | None, ids: set[int] | None) -> list[Task]:
    """Tasks from a KernelBench data folder (level{N}.jsonl; levels default to [1]) or a folder of task files.

    `ids` keeps tasks whose problem id is listed (tasks without an id are dropped when it is given).
    """
    root = Path(source).expanduser()
    if not root.is_dir():
        raise BenchError(f"{source}: no such folder")
    if any(root.glob("level*.jsonl")):
        want = tuple(levels or [1])
        missing = [lv for lv in want if not (root / f"level{lv}.jsonl").is_file()]
        if missing:
            raise BenchError(f"{source}: no level{missing[0]}.jsonl")
        tasks = kernelbench_tasks(root, want)
    else:
        tasks = _folder_tasks(root)
        if levels:
            tasks = [t for t in tasks if t.level in levels]
    if ids is not None:
        tasks = [t for t in tasks if t.problem_id in ids]
    tasks.sort(key=lambda t: (t.level is None, t.level or 0, t.problem_id is None, t.problem_id or 0, t.name))
    if not tasks:
        raise BenchError(f"{source}: no tasks match the selection")
    return tasks


def find_candidate(folder: Path, task: Task) -> Path | None:
    """A task's ModelNew file in a candidates folder: <dir>/level{L}/<name>.py, else <dir>/<name>.py."""
    name = short_name(task) + ".py"
    options = []
    if task.level is not None:
        options += [folder / f"level{task.level}" / name, folder / f"level_{task.level}" / name]
    options.append(folder / name)
    return next((p for p in options if p.is_file()), None)
