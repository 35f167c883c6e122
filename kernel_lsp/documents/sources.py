"""Source surgery for jobs (pure `ast`, nothing executed).

A user's file may hold both the reference `Model` and their own `ModelNew` with its `load_inline` kernel code.
The evaluator loads the reference in a worker: it should not build the user's kernel just to run the reference,
so :func:`reference_only` drops `ModelNew` and the top-level statements that exist only to build kernels.
"""

from __future__ import annotations

import ast
import hashlib
import re

from evaluator.shared import pysource

_BUILD_CALLS = {"load_inline", "load", "compile_extension"}


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _calls_builder(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in _BUILD_CALLS:
                return True
    return False


def _targets(node: ast.stmt) -> set[str]:
    names: set[str] = set()
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def reference_only(source: str, candidate: str = "ModelNew") -> str:
    """`source` without the class `candidate` and without statements that only build its kernels.

    Falls back to `source` unchanged when it does not parse.
    """
    try:
        tree = pysource.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return source
    return _without(source, tree.body, _candidate_statements(tree.body, candidate))


def reference_assignments(source: str, candidate: str = "ModelNew") -> str:
    """The top-level assignments of `reference_only(source)` (module constants feeding get_inputs), one parse."""
    try:
        tree = pysource.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return ""
    drop = _candidate_statements(tree.body, candidate)
    return "\n".join(ast.unparse(n) for i, n in enumerate(tree.body)
                     if i not in drop and isinstance(n, (ast.Assign, ast.AnnAssign)))


def candidate_line_spans(source: str, candidate: str = "ModelNew") -> list[tuple[int, int]]:
    """0-based [first, end) line spans of the top-level statements that belong to the candidate: its class
    (decorators included), the statements that build its kernels and the assignments only they use, in file
    order. Empty when `source` does not parse."""
    try:
        tree = pysource.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    return [statement_lines(tree.body[i]) for i in sorted(_candidate_statements(tree.body, candidate))]


def statement_lines(node: ast.stmt) -> tuple[int, int]:
    """0-based [first, end) lines of a top-level statement, its decorators included."""
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first - 1, node.end_lineno or node.lineno


def _candidate_statements(body: list[ast.stmt], candidate: str) -> set[int]:
    drop: set[int] = set()
    for i, node in enumerate(body):
        if isinstance(node, ast.ClassDef) and node.name == candidate or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _calls_builder(node):
            drop.add(i)
    # Assignments (kernel source strings, flags) used only by dropped statements go too.
    changed = True
    while changed:
        changed = False
        used_by_kept: set[str] = set()
        for i, node in enumerate(body):
            if i not in drop:
                used_by_kept |= _names_used(node)
        for i, node in enumerate(body):
            if i in drop or not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            tg = _targets(node)
            used_by_dropped = any(tg & _names_used(body[j]) for j in drop)
            if tg and used_by_dropped and not (tg & used_by_kept):
                drop.add(i)
                changed = True
    return drop


def candidate_only(source: str, candidate: str = "ModelNew",
                   harness: tuple[str, ...] = ("get_inputs", "get_init_inputs")) -> str:
    """`source` without what belongs to the reference: the harness functions, `Model = X` aliases, and module
    classes that `candidate` does not use. What is left is the candidate as the evaluator sees it, so two files
    that differ only in their reference share one build of the candidate."""
    try:
        tree = pysource.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return source
    body = tree.body
    if not any(isinstance(n, ast.ClassDef) and n.name == candidate for n in body):
        return source
    drop: set[int] = set()
    for i, node in enumerate(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in harness or isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "Model" for t in node.targets):
            drop.add(i)
    used: set[str] = set()
    for i, node in enumerate(body):
        if i in drop or (isinstance(node, ast.ClassDef) and node.name != candidate):
            continue
        used |= _names_used(node)
    for i, node in enumerate(body):
        if isinstance(node, ast.ClassDef) and node.name != candidate and node.name not in used \
                and any(ast.unparse(b).endswith("Module") for b in node.bases):
            drop.add(i)
    return _without(source, body, drop)


def _without(source: str, body: list[ast.stmt], drop: set[int]) -> str:
    """`source` without the top-level statements `body[i]` for i in `drop` (decorators included)."""
    if not drop:
        return source
    lines = source.splitlines(keepends=True)
    remove: set[int] = set()
    for i in drop:
        remove.update(range(*statement_lines(body[i])))
    return _tidy("".join(line for n, line in enumerate(lines) if n not in remove))


def _tidy(text: str) -> str:
    """At most two blank lines in a row, one newline at the end."""
    return re.sub(r"\n{4,}", "\n\n\n", text).strip("\n") + "\n"
