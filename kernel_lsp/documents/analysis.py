"""Find `nn.Module` subclasses, the KernelBench harness functions and any `ModelNew` in a Python source.

Pure `ast`: nothing is imported or executed. Positions are 0-based lines and columns (as in LSP), columns
counted in characters of the line.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field

from evaluator.shared import pysource

HARNESS = ("get_inputs", "get_init_inputs")
MODULE_BASES = {"nn.Module", "torch.nn.Module", "Module", "torch.nn.modules.module.Module"}


@dataclass(frozen=True)
class Span:
    line: int
    col: int
    end_line: int
    end_col: int

    def contains(self, line: int, col: int = 0) -> bool:
        return (self.line, self.col) <= (line, col) <= (self.end_line, self.end_col)


@dataclass(frozen=True)
class Param:
    name: str
    annotation: str = ""
    default: str | None = None


@dataclass(frozen=True)
class FunctionInfo:
    name: str
    span: Span
    params: tuple[Param, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class ModuleInfo:
    name: str
    span: Span  # the whole class, decorators included
    name_span: Span  # the class name after `class`
    bases: tuple[str, ...]
    init_params: tuple[Param, ...] = ()
    forward_params: tuple[Param, ...] = ()
    has_forward: bool = False
    source: str = ""

    @property
    def is_candidate(self) -> bool:
        return self.name == "ModelNew"


@dataclass
class Analysis:
    modules: list[ModuleInfo] = field(default_factory=list)
    functions: dict[str, FunctionInfo] = field(default_factory=dict)  # the harness functions found
    syntax_error: str | None = None
    syntax_error_line: int | None = None
    line_count: int = 0

    @property
    def ok(self) -> bool:
        return self.syntax_error is None

    @property
    def has_inputs(self) -> bool:
        return all(name in self.functions for name in HARNESS)

    @property
    def model_new(self) -> ModuleInfo | None:
        return next((m for m in self.modules if m.is_candidate), None)

    @property
    def references(self) -> list[ModuleInfo]:
        """Modules that can be optimised: every nn.Module except ModelNew."""
        return [m for m in self.modules if not m.is_candidate]

    def module(self, name: str) -> ModuleInfo | None:
        return next((m for m in self.modules if m.name == name), None)

    def module_at(self, line: int, col: int = 0) -> ModuleInfo | None:
        hits = [m for m in self.modules if m.span.contains(line, col)]
        return min(hits, key=lambda m: m.span.end_line - m.span.line) if hits else None

    def fingerprint(self, module: str, assignments: str) -> str:
        """A hash of what a result for `module` depends on: the module's class, the harness functions and the
        file's top-level assignments (`assignments`: see `sources.reference_assignments`; N = 2048 ... feed
        get_inputs). Editing anything else in the file (ModelNew, comments elsewhere) keeps results current.
        """
        h = hashlib.sha256()
        info = self.module(module)
        h.update((info.source if info else module).encode())
        for name in HARNESS:
            fn = self.functions.get(name)
            h.update(b"\0" + (fn.source.encode() if fn else b"-"))
        h.update(b"\0" + assignments.encode())
        return h.hexdigest()[:16]


def _span(node: ast.AST, lines: list[str]) -> Span:
    start = getattr(node, "decorator_list", None)
    first = start[0] if start else node
    line = first.lineno - 1  # type: ignore[attr-defined]
    end_line = (node.end_lineno or node.lineno) - 1  # type: ignore[attr-defined]
    col = _char_col(lines, line, first.col_offset)  # type: ignore[attr-defined]
    end_col = _char_col(lines, end_line, node.end_col_offset or 0)  # type: ignore[attr-defined]
    return Span(line, col, end_line, end_col)


def _char_col(lines: list[str], line: int, byte_col: int) -> int:
    """ast columns are UTF-8 byte offsets; LSP wants characters (UTF-16 units, equal for the BMP)."""
    if 0 <= line < len(lines):
        return len(lines[line].encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))
    return byte_col


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef, drop_self: bool) -> tuple[Param, ...]:
    args = fn.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = []
    for a, d in zip(positional, defaults):
        out.append(Param(a.arg, ast.unparse(a.annotation) if a.annotation else "", ast.unparse(d) if d else None))
    if args.vararg:
        out.append(Param("*" + args.vararg.arg))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        out.append(Param(a.arg, ast.unparse(a.annotation) if a.annotation else "", ast.unparse(d) if d else None))
    if args.kwarg:
        out.append(Param("**" + args.kwarg.arg))
    if drop_self and out and out[0].name in ("self", "cls"):
        out = out[1:]
    return tuple(out)


def _segment(lines: list[str], node: ast.AST) -> str:
    """The source of `node` (as `ast.get_source_segment`, which splits the whole source again on every call: with
    a thousand classes in a file that alone took minutes)."""
    first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1  # type: ignore[attr-defined]
    if not 0 <= first <= last < len(lines):
        return ""
    start = lines[first].encode("utf-8")[node.col_offset:].decode("utf-8", "replace")  # type: ignore[attr-defined]
    if first == last:
        end_col = (node.end_col_offset or 0) - node.col_offset  # type: ignore[attr-defined]
        return start.encode("utf-8")[:end_col].decode("utf-8", "replace")
    end = lines[last].encode("utf-8")[:node.end_col_offset or 0].decode("utf-8", "replace")  # type: ignore[attr-defined]
    return "\n".join([start, *lines[first + 1:last], end])


_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line breaks of Python's tokenizer (and of LSP), not str.splitlines's


def analyse(source: str) -> Analysis:
    """Analyse a source. A syntax error gives an Analysis with `syntax_error` set and nothing else."""
    lines = _NEWLINE.split(source)
    if lines and lines[-1] == "":
        lines.pop()
    try:
        tree = pysource.parse(source)
    except SyntaxError as e:
        return Analysis(syntax_error=f"{e.msg} (line {e.lineno})", syntax_error_line=(e.lineno or 1) - 1,
                        line_count=len(lines))
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
        return Analysis(syntax_error=str(e) or type(e).__name__, syntax_error_line=0, line_count=len(lines))

    analysis = Analysis(line_count=len(lines))
    module_names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in HARNESS:
            analysis.functions[node.name] = FunctionInfo(
                node.name, _span(node, lines), _params(node, False), _segment(lines, node)
            )
        elif isinstance(node, ast.ClassDef):
            bases = tuple(ast.unparse(b) for b in node.bases)
            if not any(b in MODULE_BASES or b in module_names for b in bases):
                continue
            module_names.add(node.name)
            init = forward = None
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if item.name == "__init__":
                        init = item
                    elif item.name == "forward":
                        forward = item
            name_line = node.lineno - 1
            text = lines[name_line] if name_line < len(lines) else ""
            idx = text.find(node.name, text.find("class"))
            name_col = idx if idx >= 0 else 0
            analysis.modules.append(
                ModuleInfo(
                    name=node.name,
                    span=_span(node, lines),
                    name_span=Span(name_line, name_col, name_line, name_col + len(node.name)),
                    bases=bases,
                    init_params=_params(init, True) if init else (),
                    forward_params=_params(forward, True) if forward else (),
                    has_forward=forward is not None,
                    source=_segment(lines, node),
                )
            )
    return analysis
