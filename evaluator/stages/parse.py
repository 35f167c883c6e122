"""Stage "parse" (in the caller's process, no code executed): syntax, ModelNew present, same constructor."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..shared import pysource


class ParseFailure(Exception):
    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass
class Signature:
    params: list[str]
    n_defaults: int
    varargs: bool

    def describe(self) -> str:
        return "(" + ", ".join(self.params + (["*args"] if self.varargs else [])) + ")"


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _init_signature(cls: ast.ClassDef) -> Signature:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__init__":
            a = node.args
            params = [p.arg for p in a.posonlyargs + a.args][1:]
            return Signature(params, len(a.defaults), a.vararg is not None)
    return Signature([], 0, False)


def _parse(src: str, what: str) -> ast.Module:
    try:
        return pysource.parse(src)
    except SyntaxError as e:
        raise ParseFailure(f"{what}: syntax error at line {e.lineno}: {e.msg}", e.lineno or 0) from None


def check_reference(src: str) -> ast.Module:
    tree = _parse(src, "reference")
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        raise ParseFailure(f"reference: missing {', '.join(missing)}")
    return tree


def check_candidate(src: str, reference_tree: ast.Module) -> ast.Module:
    tree = _parse(src, "candidate")
    cls = _class(tree, "ModelNew")
    if cls is None:
        raise ParseFailure("candidate: no class ModelNew at module level")
    ref_cls = _class(reference_tree, "Model")
    if ref_cls is not None:
        want, got = _init_signature(ref_cls), _init_signature(cls)
        if not got.varargs and (len(got.params) < len(want.params) or
                                len(got.params) - got.n_defaults > len(want.params)):
            raise ParseFailure(f"candidate: ModelNew.__init__{got.describe()} does not take the reference's "
                               f"arguments Model.__init__{want.describe()}", cls.lineno)
    inherits = any(ast.unparse(b) not in ("nn.Module", "torch.nn.Module", "Module") for b in cls.bases)
    if not inherits and not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "forward"
                                for n in cls.body):
        raise ParseFailure("candidate: ModelNew has no forward()", cls.lineno)
    return tree
