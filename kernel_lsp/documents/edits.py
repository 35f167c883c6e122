"""Text edits the server proposes, as plain data (no LSP types): the inputs stub and the accepted candidate.

An edit is `(start_line, start_col, end_line, end_col, new_text)` in 0-based lines and character columns.
"""

from __future__ import annotations

import ast
import re

from evaluator.shared import pysource

from ..documents.sources import candidate_line_spans, statement_lines
from .analysis import Analysis, ModuleInfo, Param

Edit = tuple[int, int, int, int, str]

BEGIN = "# >>> kernel-lsp: accepted candidate {n} of {module} (kernel-lsp replaces this block on the next accept)"
END = "# <<< kernel-lsp: end of accepted candidate"
_BEGIN_RE = re.compile(r"^# >>> kernel-lsp: accepted candidate (\d+) of (\w+)")
_HARNESS = {"get_inputs", "get_init_inputs"}


# --- the get_inputs() / get_init_inputs() stub -------------------------------------------------------------------
def _placeholder(p: Param, for_forward: bool) -> str:
    ann = p.annotation.replace(" ", "")
    if p.default is not None and p.default != "None":
        return p.default
    if ann in ("int",):
        return "1  # TODO: value"
    if ann in ("float",):
        return "1.0  # TODO: value"
    if ann in ("bool",):
        return "False  # TODO: value"
    if ann in ("str",):
        return "''  # TODO: value"
    if for_forward or "Tensor" in ann:
        return "torch.randn(16, 1024)  # TODO: real shape and dtype"
    return "None  # TODO: value"


def _plain(params: tuple[Param, ...]) -> list[Param]:
    return [p for p in params if not p.name.startswith("*")]


def inputs_stub(analysis: Analysis, module: ModuleInfo, text: str) -> list[Edit]:
    """Edits adding the missing harness functions (and `import torch`) for `module`, at the end of the file."""
    missing = [f for f in ("get_inputs", "get_init_inputs") if f not in analysis.functions]
    if not missing:
        return []
    parts: list[str] = []
    if "get_inputs" in missing:
        fwd = _plain(module.forward_params)
        body = [f"    {p.name} = {_placeholder(p, True)}" for p in fwd]
        names = ", ".join(p.name for p in fwd)
        parts.append("def get_inputs():\n"
                     f"    \"\"\"Inputs of {module.name}.forward (stub added by kernel-lsp: set real shapes).\"\"\"\n"
                     + ("\n".join(body) + "\n" if body else "") + f"    return [{names}]\n")
    if "get_init_inputs" in missing:
        init = _plain(module.init_params)
        values = [_placeholder(p, False) for p in init]
        lines = [f"        {v.split('  #')[0]},  # {p.name}" + (" TODO" if "TODO" in v else "")
                 for p, v in zip(init, values)]
        ret = "    return [\n" + "\n".join(lines) + "\n    ]\n" if lines else "    return []\n"
        parts.append("def get_init_inputs():\n"
                     f"    \"\"\"Arguments of {module.name}(...) (stub added by kernel-lsp).\"\"\"\n" + ret)
    stub = "\n\n\n".join(parts).rstrip("\n")
    edits: list[Edit] = []
    if "torch." in stub and not re.search(r"^import torch(\.\w+)*\s*(#.*)?$", text, re.MULTILINE):
        edits.append((0, 0, 0, 0, "import torch\n"))
    edits.append(_append(text, stub))
    return edits


# --- accepting a candidate -----------------------------------------------------------------------------------
def _import_keys(tree: ast.Module) -> set[str]:
    return {ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}


def candidate_block(file_text: str, candidate_src: str, number: int, module: str) -> str:
    """The part of a candidate to put into the user's file: its imports not already there, kernel code and
    `ModelNew`, without its own copy of the reference module and the harness functions."""
    try:
        cand = pysource.parse(candidate_src)
    except SyntaxError as e:
        raise ValueError(f"candidate {number} does not parse: {e.msg} (line {e.lineno})") from None
    try:
        have = _import_keys(pysource.parse(file_text))
    except SyntaxError:
        have = set()
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in cand.body):
        raise ValueError(f"candidate {number} has no ModelNew class")
    skip_names = {"Model", module, *_HARNESS}
    lines = candidate_src.splitlines()
    out: list[str] = []
    for node in cand.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and ast.unparse(node) in have:
            continue
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in skip_names:
            continue
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) and t.id in skip_names for t in node.targets):
            continue
        gap = "\n\n\n" if out and isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) else "\n\n"
        out.append((gap if out else "") + "\n".join(lines[slice(*statement_lines(node))]))
    body = "".join(out).rstrip()
    return f"{BEGIN.format(n=number, module=module)}\n{body}\n{END}\n"


def accept_edits(file_text: str, analysis: Analysis, candidate_src: str, number: int, module: str) -> list[Edit]:
    """Edits putting the candidate into the file: they replace an earlier accepted block; else an existing
    `ModelNew` class, removing the kernel code that only the old `ModelNew` used (its source strings and its
    `load_inline` call), so no stale kernel is left behind to be compiled; else append at the end.

    The block brings the candidate's imports that the file lacks once the replaced lines are gone: an import that
    only the replaced block (or the old kernel code) had is carried over, so accepting twice keeps the file
    importable."""
    lines = file_text.splitlines()
    span = _block_span(lines)
    if span is not None:
        start, end = span
        block = candidate_block(_without_lines(lines, [(start, end + 1)]), candidate_src, number, module)
        if end + 1 < len(lines):
            return [(start, 0, end + 1, 0, block)]
        return [(start, 0, end, len(lines[end]), block.rstrip("\n"))]
    existing = analysis.model_new
    if existing is not None:
        s = existing.span
        removed: list[tuple[int, int]] = [(s.line, s.end_line + 1)]
        out: list[Edit] = []
        for first, stop in candidate_line_spans(file_text):
            if first <= s.line < stop:
                continue  # the class itself: replaced by the block below
            while stop < len(lines) and not lines[stop].strip():
                stop += 1  # and the blank lines after it
            removed.append((first, stop))
            out.append((first, 0, stop, 0, "") if stop < len(lines) else (first, 0, stop - 1, len(lines[stop - 1]), ""))
        block = candidate_block(_without_lines(lines, removed), candidate_src, number, module)
        out.append((s.line, 0, s.end_line, s.end_col, block.rstrip("\n")))
        return sorted(out)
    block = candidate_block(file_text, candidate_src, number, module)
    return [_append(file_text, block.rstrip("\n"))]


def _block_span(lines: list[str]) -> tuple[int, int] | None:
    """First and last line of the accepted block (its markers), if the file has one."""
    start = next((i for i, line in enumerate(lines) if _BEGIN_RE.match(line)), None)
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(END)), None) if start is not None else None
    return (start, end) if start is not None and end is not None else None


def accepted_block(file_text: str) -> tuple[int, str] | None:
    """(candidate number, module) named by the file's accepted block, if it has one."""
    lines = file_text.splitlines()
    span = _block_span(lines)
    m = _BEGIN_RE.match(lines[span[0]]) if span is not None else None
    return (int(m.group(1)), m.group(2)) if m is not None else None


def is_unchanged_block(file_text: str, candidate_src: str, number: int, module: str) -> bool:
    """Whether the file's accepted block is exactly the one accepting candidate `number` writes (same code, same
    imports carried over): an edited block is the user's code, not the candidate's any more."""
    lines = file_text.splitlines()
    span = _block_span(lines)
    if span is None:
        return False
    start, end = span
    try:
        want = candidate_block(_without_lines(lines, [(start, end + 1)]), candidate_src, number, module)
    except ValueError:
        return False
    return "\n".join(lines[start:end + 1]) + "\n" == want


def holds_candidate(file_text: str, candidate_src: str, number: int, module: str) -> bool:
    """Whether the file already holds candidate `number` of `module` as accepting it writes it (so accepting it
    again would change nothing and is not offered)."""
    named = accepted_block(file_text)
    return named == (number, module) and is_unchanged_block(file_text, candidate_src, number, module)


def _without_lines(lines: list[str], spans: list[tuple[int, int]]) -> str:
    """The text of `lines` without the [first, stop) spans (what the file holds once they are replaced)."""
    drop = {i for first, stop in spans for i in range(first, stop)}
    return "\n".join(line for i, line in enumerate(lines) if i not in drop) + "\n"


def _append(text: str, block: str) -> Edit:
    """Insert `block` after the last line, two blank lines apart."""
    lines = text.splitlines()
    if not lines:
        return (0, 0, 0, 0, block + "\n")
    last = len(lines) - 1
    return (last, len(lines[last]), last, len(lines[last]), "\n\n\n" + block)
