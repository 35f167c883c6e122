"""Stage "screen": data-driven static rules (screen_rules.toml) over the candidate's AST and text.

No code is executed. The screen is a first filter against obvious misbehaviour and cheating, not the
security boundary: the worker's isolation is (a determined candidate can hide a call from any static check).
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..shared import pysource
from ..verdict import Finding
from .reach import forward_reach

_OPEN_WRITE = re.compile(r"[wax+]")


@dataclass
class Rule:
    id: str
    severity: str
    message: str
    imports: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    attr_writes: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    open_write: bool = False
    try_in: str = ""
    regex: list[str] = field(default_factory=list)
    special: str = ""
    except_built_library: bool = False  # an import of ctypes only to call a library load_inline built is no hit
    bad: str = ""
    good: str = ""


@lru_cache(maxsize=1)
def load_rules() -> tuple[Rule, ...]:
    text = resources.files("evaluator.stages").joinpath("screen_rules.toml").read_text()
    data = tomllib.loads(text)
    rules = tuple(Rule(**r) for r in data["rule"])
    for r in rules:
        if r.severity not in ("reject", "warn"):
            raise ValueError(f"screen rule {r.id}: severity must be 'reject' or 'warn'")
    return rules


class _Scan(ast.NodeVisitor):
    """Collects imports, resolved call targets, references, attribute writes, method calls, try blocks."""

    def __init__(self) -> None:
        self.alias: dict[str, str] = {}
        self.imports: list[tuple[str, int]] = []
        self.calls: list[tuple[str, int, ast.Call]] = []
        self.refs: list[tuple[str, int]] = []
        self.writes: list[tuple[str, int]] = []
        self.methods: list[tuple[str, int]] = []
        self.tries: list[tuple[str, int]] = []
        self._class: list[str] = []

    def dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.alias.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.imports.append((a.name, node.lineno))
            if a.asname:
                self.alias[a.asname] = a.name
            else:
                top = a.name.split(".")[0]
                self.alias.setdefault(top, top)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        self.imports.append((mod, node.lineno))
        for a in node.names:
            self.imports.append((f"{mod}.{a.name}", node.lineno))
            self.alias[a.asname or a.name] = f"{mod}.{a.name}"

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._class.append(node.name)
        self.generic_visit(node)
        self._class.pop()

    def visit_Try(self, node: ast.AST) -> None:
        self.tries.append(("ModelNew" if "ModelNew" in self._class else "module", node.lineno))
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_Call(self, node: ast.Call) -> None:
        name = self.dotted(node.func)
        if name:
            self.calls.append((name, node.lineno, node))
        if isinstance(node.func, ast.Attribute):
            self.methods.append((node.func.attr, node.lineno))
        if name in ("setattr", "delattr") and node.args:
            target = self.dotted(node.args[0])
            attr = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else "*"
            if target:
                self.writes.append((f"{target}.{attr}", node.lineno))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.dotted(node)
        if name:
            self.refs.append((name, node.lineno))
        if isinstance(node.ctx, (ast.Store, ast.Del)) and name:
            self.writes.append((name, node.lineno))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self.refs.append((self.alias.get(node.id, node.id), node.lineno))


def _match(name: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _import_match(mod: str, patterns: list[str]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in patterns)


_LOADER = "torch.utils.cpp_extension.load_inline"


def ctypes_loads_only_built(tree: ast.Module, dotted: Callable[[ast.AST], str | None]) -> bool:
    """The module uses ctypes only to open a library `load_inline` built and to name the C types of its functions'
    arguments: `import ctypes` (any alias), and every use of it `ctypes.CDLL(x)`, x a `load_inline(...)` call or a
    name assigned only from one, or `ctypes.c_<type>`. Anything else of ctypes (`cast`, `memmove`, `string_at`,
    `pythonapi`, `CDLL(None)`, a `from ctypes import`) is not. `dotted`: the scan's names, imports' aliases
    resolved."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ctypes":
            return False
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "ctypes":
                    aliases.add(a.asname or "ctypes")
                elif a.name.startswith("ctypes."):
                    return False
    if not aliases:
        return False

    def is_load(n: ast.AST) -> bool:
        return isinstance(n, ast.Call) and dotted(n.func) == _LOADER

    built: dict[str, bool] = {}  # name -> assigned only from load_inline(...) calls
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    built[t.id] = built.get(t.id, True) and node.value is not None and is_load(node.value)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "CDLL" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in aliases:
            arg = node.args[0] if len(node.args) == 1 and not node.keywords else None
            if arg is not None and (is_load(arg) or (isinstance(arg, ast.Name) and built.get(arg.id, False))):
                allowed.add(id(node.func))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            if id(node) not in allowed and not node.attr.startswith("c_"):
                return False
    bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    # the module itself passed around, called or rebound
    return not any(isinstance(n, ast.Name) and n.id in aliases and id(n) not in bases for n in ast.walk(tree))


def _open_mode(call: ast.Call) -> str:
    mode: Any = None
    if len(call.args) > 1 and isinstance(call.args[1], ast.Constant):
        mode = call.args[1].value
    for kw in call.keywords:
        if kw.arg == "mode" and isinstance(kw.value, ast.Constant):
            mode = kw.value.value
    return mode if isinstance(mode, str) else ""


def screen(src: str, rules: tuple[Rule, ...] | None = None) -> list[Finding]:
    """All findings for `src` (which must parse), one per rule and line."""
    rules = rules if rules is not None else load_rules()
    tree = pysource.parse(src)
    scan = _Scan()
    scan.visit(tree)
    found: dict[tuple[str, int], Finding] = {}

    def hit(rule: Rule, line: int, what: str) -> None:
        key = (rule.id, line)
        if key not in found:
            found[key] = Finding(rule=rule.id, severity=rule.severity, message=f"{rule.message}: {what}", line=line)

    built_only = None
    for rule in rules:
        for mod, line in scan.imports:
            if rule.imports and _import_match(mod, rule.imports):
                if rule.except_built_library and mod == "ctypes":
                    built_only = ctypes_loads_only_built(tree, scan.dotted) if built_only is None else built_only
                    if built_only:
                        continue
                hit(rule, line, f"import {mod}")
        for name, line, call in scan.calls:
            if rule.calls and _match(name, rule.calls):
                hit(rule, line, f"{name}(...)")
            if rule.open_write and name in ("open", "io.open", "builtins.open", "os.open") and (
                    _OPEN_WRITE.search(_open_mode(call)) or name == "os.open"):
                hit(rule, line, f"open(..., {_open_mode(call)!r})")
        for name, line in scan.refs:
            if rule.refs and _match(name, rule.refs):
                hit(rule, line, name)
        for name, line in scan.writes:
            if rule.attr_writes and _match(name, rule.attr_writes):
                hit(rule, line, f"assigns {name}")
        for name, line in scan.methods:
            if rule.methods and name in rule.methods:
                hit(rule, line, f".{name}(...)")
        for where, line in scan.tries:
            if rule.try_in and rule.try_in == where:
                hit(rule, line, "try/except")
        for pattern in rule.regex:
            for m in re.finditer(pattern, src):
                hit(rule, src.count("\n", 0, m.start()) + 1, m.group(0).strip()[:60])
        if rule.special == "torch_only_forward":
            r = forward_reach(tree, scan.dotted)
            if r is not None and r.pure:
                hit(rule, r.line, "nothing forward reaches comes from an extension")
            elif r is not None and r.aten_only:
                hit(rule, r.line, f"the extension function(s) it reaches ({', '.join(r.aten_only)}) only call ATen "
                                  "operators (no loop, launch or data access of their own)")
    return sorted(found.values(), key=lambda f: (f.severity != "reject", f.line, f.rule))
