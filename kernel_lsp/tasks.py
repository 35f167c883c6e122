"""Tasks: a reference module with its inputs, in the KernelBench form the evaluator takes (step 2 of the flow).

A task is built from a document's analysis. A module that is not called `Model` gets an alias appended
(`Model = MyBlock`), so any `nn.Module` with `get_inputs()` / `get_init_inputs()` is a task, not only
KernelBench files.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .documents import Analysis, analyse
from .documents.sources import reference_assignments


class TaskError(ValueError):
    """The source cannot be turned into a task (syntax error, no module, no inputs). The message is for users."""


@dataclass(frozen=True)
class Task:
    name: str  # e.g. "softplus.py::Model" or "level1/23_Softmax"
    module: str  # the class name in the source
    reference_src: str  # KernelBench form: defines Model, get_inputs, get_init_inputs
    fingerprint: str  # changes when the module or its inputs change (results go stale)
    path: str = ""  # the file it came from, if any
    candidate_src: str = ""  # the file's own ModelNew, when it has one (verify on save)
    level: int | None = None
    problem_id: int | None = None

    @property
    def key(self) -> str:
        """Stable identity of a task across runs: where it lives and which module."""
        return f"{self.path or self.name}::{self.module}"


# The referee's own words for where the reference failed; the module's name says it already.
_REFEREE_PREFIXES = ("the reference failed to load: ", "the reference Model failed: ")


def reference_failure(module: str, detail: str) -> str:
    """What to say when a task's module does not run (its import, get_inputs(), get_init_inputs(), forward), in
    one line: what failed and what to do. The same words for `optimize`, `eval` and the editor."""
    first = detail.strip().splitlines()[0] if detail.strip() else "it failed"
    for prefix in _REFEREE_PREFIXES:
        first = first.removeprefix(prefix)
    return (f"{module} does not run: {first[:300]} — fix the module so the file runs (its imports, "
            f"get_inputs(), get_init_inputs()), then try again")


def source_hash(src: str) -> str:
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def task_from_source(source: str, module: str | None = None, *, path: str = "", analysis: Analysis | None = None) -> Task:
    a = analysis or analyse(source)
    where = path or "<source>"
    if not a.ok:
        raise TaskError(f"{where}: syntax error: {a.syntax_error}")
    refs = a.references
    if not refs:
        raise TaskError(f"{where}: no nn.Module subclass found (expected e.g. `class Model(nn.Module)`)")
    if module is None:
        chosen = a.module("Model") or refs[0]
    else:
        chosen = a.module(module)
        if chosen is None or chosen.is_candidate:
            raise TaskError(f"{where}: no module named {module!r} (found: {', '.join(m.name for m in refs)})")
    missing = [f for f in ("get_inputs", "get_init_inputs") if f not in a.functions]
    if missing:
        raise TaskError(f"{where}: {chosen.name} has no {' / '.join(f + '()' for f in missing)}: "
                        "add them so the module can be run (the editor offers a quick fix)")
    ref = source if chosen.name == "Model" else f"{source.rstrip()}\n\n\nModel = {chosen.name}  # added by kernel-lsp\n"
    name = f"{Path(path).name}::{chosen.name}" if path else chosen.name
    return Task(
        name=name,
        module=chosen.name,
        reference_src=ref,
        # The same fingerprint the language server computes: the file's own ModelNew and kernel code excluded.
        fingerprint=a.fingerprint(chosen.name, reference_assignments(source)),
        path=path,
        candidate_src=source if a.model_new is not None else "",
    )


def task_from_file(path: str | Path, module: str | None = None) -> Task:
    p = Path(path)
    if not p.exists():
        raise TaskError(f"{p}: no such file")
    if p.is_dir():
        raise TaskError(f"{p}: is a folder, not a Python file")
    if p.suffix != ".py":
        raise TaskError(f"{p}: not a Python file (expected a .py file holding an nn.Module)")
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{p}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    return task_from_source(source, module, path=str(p))


def kernelbench_tasks(root: str | Path, levels: tuple[int, ...] = (1, 2, 3)) -> list[Task]:
    """Tasks from a KernelBench data folder holding level{N}.jsonl (rows: level, problem_id, name, code)."""
    root = Path(root)
    out: list[Task] = []
    for level in levels:
        f = root / f"level{level}.jsonl"
        if not f.exists():
            continue
        for line in f.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            t = task_from_source(row["code"], "Model", path="")
            out.append(Task(name=f"level{row['level']}/{row['name']}", module="Model", reference_src=t.reference_src,
                            fingerprint=t.fingerprint, level=row["level"], problem_id=row["problem_id"]))
    return out
