"""What ModelNew.forward reaches: static, over the candidate's AST and the C++/CUDA strings it builds.

The screen's `torch_only_forward` warning asks one question: does the forward reach anything that came from the
candidate's own extension? A flow-insensitive pass over the module answers it. Every name, `self` attribute and
class attribute gets a set of tags (an extension module, one of its functions, a `torch.ops` namespace of the
candidate's, a Python function or lambda, a class or an instance of one defined in the module, or "unknown");
assignments, returns, `functools.partial`, containers (`nn.Sequential(Block())`, lists, dicts) and properties move
tags, until nothing changes. A function reaches what its body references, what the functions it references
reach, and what the `forward` / `__call__` of the instances it calls reach.

Precision over recall: whatever cannot be resolved (a name defined nowhere in the module, `getattr` with a
computed name, a bare extension module passed along) counts as reaching an extension, so the warning fires only
when the forward demonstrably reaches none, or when every extension function it reaches is C++ that only calls
ATen operators (no loop, no launch, no raw data access, no call the sources do not define): `extsources.py` finds
the extension builds and reads their C++.

Nothing here imports torch or runs the candidate.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from .extsources import Sources, aten_only

# torch.ops namespaces that belong to PyTorch (or to libraries that are not the candidate's): ops there are
# library operators, not the candidate's extension
BUILTIN_OPS = frozenset({
    "aten", "prim", "prims", "_prims", "quantized", "_quantized", "quantized_decomposed", "mkldnn", "mkl", "onednn",
    "profiler", "rngprims", "inductor", "higher_order", "_c10d_functional", "_c10d_functional_autograd", "c10d",
    "c10d_functional", "_dtensor", "debugprims", "torchvision", "torchaudio", "fbgemm", "xla", "_test",
})
_PASS_THROUGH = frozenset({
    "functools.partial", "partial", "staticmethod", "classmethod", "torch.jit.script", "torch.jit.ignore",
    "torch.jit.unused", "torch.compile", "torch.compiler.disable", "torch._dynamo.disable", "functools.wraps",
    "functools.lru_cache", "functools.cache", "torch.no_grad", "torch.inference_mode",
})
_DYNAMIC = frozenset({"importlib.import_module", "__import__", "eval", "exec", "sys.modules.get"})
_PROPERTY = frozenset({"property", "functools.cached_property", "cached_property"})
_BUILTIN_NAMES = frozenset(dir(builtins)) | {
    "__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__", "__annotations__",
    "__path__", "__cached__", "__class__", "__qualname__", "__module__", "__dict__"}

Tag = tuple  # ("ext", src) | ("fn", src, name | None) | ("ops", ns) | ("py", key) | ("cls", C) | ("inst", C) | ("unk",)
_UNK: Tag = ("unk",)


@dataclass
class ForwardReach:
    """What ModelNew's forward (and __call__, if it has one) reaches."""

    line: int
    atoms: frozenset = frozenset()  # ("fn", src, name) | ("ext", src) | ("ops", ns) | ("unk",)
    aten_only: tuple[str, ...] = ()  # when every extension function reached is ATen-only C++: their names

    @property
    def pure(self) -> bool:
        return not self.atoms


@dataclass
class _Scope:
    key: str
    kind: str  # module | class | function | lambda
    node: ast.AST
    parent: _Scope | None
    cls: str | None = None  # the class (class scope; the class a method belongs to)
    bound: set[str] = field(default_factory=set)
    globals: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)

    def body(self) -> list[ast.AST]:
        n = self.node
        if isinstance(n, ast.Lambda):
            return [n.body]
        return list(getattr(n, "body", []))


@dataclass
class _Class:
    name: str
    bases: list[str]
    methods: dict[str, str] = field(default_factory=dict)  # name -> scope key
    props: set[str] = field(default_factory=set)


def _own(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """The nodes of one scope, pre-order: nested functions, lambdas and classes are yielded, not entered."""
    stack = list(reversed(list(nodes)))
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(n))))


def _decorator_names(node: ast.AST, dotted: Callable[[ast.AST], str | None]) -> set[str]:
    out = set()
    for d in getattr(node, "decorator_list", []):
        target = d.func if isinstance(d, ast.Call) else d
        name = dotted(target)
        if name:
            out.add(name)
    return out


class _Module:
    def __init__(self, tree: ast.Module, dotted: Callable[[ast.AST], str | None]) -> None:
        self.tree = tree
        self.dotted = dotted
        self.scopes: dict[str, _Scope] = {}
        self.classes: dict[str, _Class] = {}
        self.sym: dict[str, set[Tag]] = {}
        self.returns: dict[str, set[Tag]] = {}
        self.reach: dict[str, set[Tag]] = {}
        self.sites: list[tuple[_Scope, str, ast.AST, ast.AST | None, str]] = []
        self.node_key: dict[int, str] = {}  # id(function / lambda node) -> scope key
        self.module = _Scope("<module>", "module", tree, None)
        self.scopes[self.module.key] = self.module
        self.sources = Sources(tree, dotted)  # the extension builds, indexed by src, and their source text
        self.maker_index = self.sources.maker_index
        self.builds = self.sources.builds
        self._build(self.module)
        self.module_globals = set(self.module.bound)
        for s in self.scopes.values():
            self.module_globals |= s.globals
        self._solve()

    # -- structure -------------------------------------------------------------------------------------------
    def _new_scope(self, node: ast.AST, kind: str, parent: _Scope, cls: str | None) -> _Scope:
        if isinstance(node, ast.Lambda):
            key = f"{parent.key}.<lambda@{node.lineno}:{node.col_offset}>"
        else:
            key = f"{parent.key}.{node.name}" if parent.kind != "module" else node.name  # type: ignore[attr-defined]
        while key in self.scopes:
            key += "'"
        s = _Scope(key, kind, node, parent, cls)
        self.scopes[key] = s
        self.node_key[id(node)] = key
        return s

    def _init(self, key: str, tag: Tag) -> None:
        self.sym.setdefault(key, set()).add(tag)

    def _build(self, scope: _Scope) -> None:
        fn_node = scope.node
        if isinstance(fn_node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = fn_node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            params += [p for p in (a.vararg, a.kwarg) if p is not None]
            scope.bound |= {p.arg for p in params}
            if scope.kind == "function" and scope.cls and isinstance(scope.parent, _Scope) \
                    and scope.parent.kind == "class":
                decos = _decorator_names(fn_node, self.dotted)
                first = (a.posonlyargs + a.args)[:1]
                if first and "staticmethod" not in decos:
                    tag = ("cls", scope.cls) if "classmethod" in decos else ("inst", scope.cls)
                    self._init(f"l:{scope.key}:{first[0].arg}", tag)
        for n in _own(scope.body()):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scope.bound.add(n.name)
                child = self._new_scope(n, "function", scope, scope.cls if scope.kind == "class" else None)
                self._init(self._store_key(scope, n.name), ("py", child.key))
                if scope.kind == "class" and scope.cls:
                    c = self.classes[scope.cls]
                    c.methods[n.name] = child.key
                    if _decorator_names(n, self.dotted) & _PROPERTY:
                        c.props.add(n.name)
                self._build(child)
            elif isinstance(n, ast.Lambda):
                child = self._new_scope(n, "lambda", scope, None)
                self._build(child)
            elif isinstance(n, ast.ClassDef):
                scope.bound.add(n.name)
                bases = [b.id if isinstance(b, ast.Name) else "" for b in n.bases]
                self.classes.setdefault(n.name, _Class(n.name, bases))
                self._init(self._store_key(scope, n.name), ("cls", n.name))
                child = self._new_scope(n, "class", scope, n.name)
                self._build(child)
            elif isinstance(n, ast.Global):
                scope.globals |= set(n.names)
            elif isinstance(n, ast.Nonlocal):
                scope.nonlocals |= set(n.names)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
                scope.bound.add(n.id)
            elif isinstance(n, ast.ExceptHandler) and n.name:
                scope.bound.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                mod = (n.module or "") if isinstance(n, ast.ImportFrom) else ""
                for al in n.names:
                    if al.name == "*":
                        continue
                    local = al.asname or (al.name if mod else al.name.split(".")[0])
                    scope.bound.add(local)
                    full = f"{mod}.{al.name}" if mod else al.name
                    if full.split(".")[0] in self.builds:
                        self._init(self._store_key(scope, local), ("ext", -1))
            # assignment sites, evaluated until nothing changes
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    self.sites.append((scope, "assign", t, n.value, ""))
            elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                self.sites.append((scope, "assign", n.target, n.value, ""))
            elif isinstance(n, ast.NamedExpr):
                self.sites.append((scope, "assign", n.target, n.value, ""))
            elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                self.sites.append((scope, "assign", n.target, n.iter, ""))
            elif isinstance(n, ast.withitem) and n.optional_vars is not None:
                self.sites.append((scope, "assign", n.optional_vars, n.context_expr, ""))
            elif isinstance(n, ast.Call) and self.dotted(n.func) == "setattr" and len(n.args) == 3 \
                    and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str):
                self.sites.append((scope, "setattr", n.args[0], n.args[2], n.args[1].value))

    # -- names -----------------------------------------------------------------------------------------------
    def _store_key(self, s: _Scope, name: str) -> str:
        if s.kind == "module" or name in s.globals:
            return f"g:{name}"
        if s.kind == "class":
            return f"a:{s.cls}:{name}"
        if name in s.nonlocals:
            cur = s.parent
            while cur is not None and cur.kind != "module":
                if cur.kind in ("function", "lambda") and name in cur.bound:
                    return f"l:{cur.key}:{name}"
                cur = cur.parent
            return f"g:{name}"
        return f"l:{s.key}:{name}"

    def _load_key(self, s: _Scope, name: str) -> str | None:
        if name in s.globals:
            return f"g:{name}"
        if s.kind == "class" and name in s.bound:
            return f"a:{s.cls}:{name}"
        cur: _Scope | None = s
        while cur is not None and cur.kind != "module":
            if cur.kind in ("function", "lambda") and name in cur.bound and name not in cur.globals:
                return f"l:{cur.key}:{name}"
            cur = cur.parent
        if name in self.module_globals:
            return f"g:{name}"
        return None

    def _mro(self, cls: str, depth: int = 0) -> list[_Class]:
        c = self.classes.get(cls)
        if c is None or depth > 8:
            return []
        out = [c]
        for b in c.bases:
            if b and b != cls:
                out += self._mro(b, depth + 1)
        return out

    def _class_attr(self, cls: str, attr: str) -> set[Tag]:
        out: set[Tag] = set()
        for c in self._mro(cls):
            if attr in c.methods:
                key = c.methods[attr]
                out.add(("py", key))
                if attr in c.props:
                    out |= self.returns.get(key, set())
                break
        for c in self._mro(cls):
            out |= self.sym.get(f"a:{c.name}:{attr}", set())
        return out

    def _callables_of_instance(self, cls: str) -> set[Tag]:
        return self._class_attr(cls, "forward") | self._class_attr(cls, "__call__")

    # -- evaluation ------------------------------------------------------------------------------------------
    def ev(self, node: ast.AST | None, s: _Scope) -> set[Tag]:
        if node is None:
            return set()
        if isinstance(node, ast.Name):
            key = self._load_key(s, node.id)
            if key is None:
                return set() if node.id in _BUILTIN_NAMES else {_UNK}
            return set(self.sym.get(key, set()))
        if isinstance(node, ast.Attribute):
            dotted = self.dotted(node) or ""
            parts = dotted.split(".")
            if dotted.startswith("torch.ops.") and len(parts) >= 3 and parts[2] not in BUILTIN_OPS \
                    and parts[2] not in ("load_library", "import_module"):
                src = ("ops", parts[2])
                return {("ops", parts[2])} if len(parts) == 3 else {("fn", src, parts[3])}
            out: set[Tag] = set()
            for t in self.ev(node.value, s):
                if t[0] == "ext":
                    out.add(("fn", t[1], node.attr))
                elif t[0] == "ops":
                    out.add(("fn", ("ops", t[1]), node.attr))
                elif t[0] == "fn":
                    out.add(t)  # an overload (.default) or attribute of the same function
                elif t[0] == "unk":
                    out.add(_UNK)
                elif t[0] in ("inst", "cls"):
                    out |= self._class_attr(t[1], node.attr)
                    if t[0] == "cls" and node.attr == "apply":  # torch.autograd.Function
                        out |= self._class_attr(t[1], "forward")
            return out
        if isinstance(node, ast.Call):
            return self._ev_call(node, s)
        if isinstance(node, ast.Lambda):
            key = self.node_key.get(id(node))
            return {("py", key)} if key else set()
        if isinstance(node, ast.IfExp):
            return self.ev(node.body, s) | self.ev(node.orelse, s)
        if isinstance(node, ast.BoolOp):
            return set().union(*(self.ev(v, s) for v in node.values))
        if isinstance(node, (ast.NamedExpr, ast.Starred, ast.Await, ast.Subscript)):
            return self.ev(node.value, s)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return set().union(*(self.ev(e, s) for e in node.elts)) if node.elts else set()
        if isinstance(node, ast.Dict):
            return set().union(*(self.ev(v, s) for v in node.values)) if node.values else set()
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.ev(node.elt, s)
        if isinstance(node, ast.DictComp):
            return self.ev(node.value, s)
        return set()

    def _ev_call(self, node: ast.Call, s: _Scope) -> set[Tag]:
        idx = self.maker_index.get(id(node))
        if idx is not None:
            return {("ext", idx)}
        name = self.dotted(node.func) or ""
        args = [*node.args, *(k.value for k in node.keywords)]
        if name in _DYNAMIC:
            return {_UNK}
        if name == "getattr" and len(node.args) >= 2:
            obj = self.ev(node.args[0], s)
            dflt = self.ev(node.args[2], s) if len(node.args) > 2 else set()
            key = node.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                fake = ast.Attribute(value=node.args[0], attr=key.value, ctx=ast.Load())
                return self.ev(fake, s) | dflt
            return ({("fn", t[1], None) if t[0] == "ext" else _UNK for t in obj} if obj else set()) | dflt
        if name == "super":  # super().forward(x): the methods of the module-defined bases
            cur: _Scope | None = s
            while cur is not None and not cur.cls:
                cur = cur.parent
            c = self.classes.get(cur.cls) if cur is not None and cur.cls else None
            return {("inst", b) for b in (c.bases if c else []) if b in self.classes}
        if name in _PASS_THROUGH:
            return set().union(*(self.ev(a, s) for a in args)) if args else set()
        out: set[Tag] = set()
        ftags = self.ev(node.func, s)
        for t in ftags:
            if t[0] == "py":
                out |= self.returns.get(t[1], set())
            elif t[0] == "cls":
                out.add(("inst", t[1]))
            elif t[0] == "inst":
                for c in self._callables_of_instance(t[1]):
                    out |= self.returns.get(c[1], set()) if c[0] == "py" else set()
            elif t[0] == "unk":
                out.add(_UNK)
        if not ftags:  # a library call (nn.Sequential(Block()), list(...), a method of nn.Module): its arguments
            for a in args:
                out |= self.ev(a, s)
        return out

    def _bind(self, s: _Scope, target: ast.AST, tags: set[Tag], value: ast.AST | None) -> bool:
        if isinstance(target, ast.Name):
            key = self._store_key(s, target.id)
            have = self.sym.setdefault(key, set())
            if tags - have:
                have |= tags
                return True
            return False
        if isinstance(target, ast.Attribute):
            changed = False
            for t in self.ev(target.value, s):
                if t[0] in ("inst", "cls"):
                    have = self.sym.setdefault(f"a:{t[1]}:{target.attr}", set())
                    if tags - have:
                        have |= tags
                        changed = True
            return changed
        if isinstance(target, ast.Subscript):
            return self._bind(s, target.value, tags, None)
        if isinstance(target, ast.Starred):
            return self._bind(s, target.value, tags, None)
        if isinstance(target, (ast.Tuple, ast.List)):
            changed = False
            pair = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) and not any(
                isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
            for i, e in enumerate(target.elts):
                sub = self.ev(value.elts[i], s) if pair else tags  # type: ignore[union-attr]
                changed |= self._bind(s, e, sub, value.elts[i] if pair else None)  # type: ignore[union-attr]
            return changed
        return False

    def _function_scopes(self) -> list[_Scope]:
        return [sc for sc in self.scopes.values() if sc.kind in ("function", "lambda")]

    def _returns_of(self, sc: _Scope) -> set[Tag]:
        if sc.kind == "lambda":
            return self.ev(sc.node.body, sc)  # type: ignore[attr-defined]
        out: set[Tag] = set()
        for n in _own(sc.body()):
            if isinstance(n, ast.Return):
                out |= self.ev(n.value, sc)
        return out

    def _reach_of(self, sc: _Scope) -> set[Tag]:
        atoms: set[Tag] = set()
        consumed: set[int] = set()

        def collect(tags: set[Tag]) -> None:
            for t in tags:
                if t[0] in ("ext", "fn", "ops", "unk"):
                    atoms.add(t)
                elif t[0] == "py" and t[1] != sc.key:
                    atoms.update(self.reach.get(t[1], set()))

        for n in _own(sc.body()):
            if id(n) in consumed:
                continue
            if isinstance(n, ast.Lambda):
                key = self.node_key.get(id(n))
                if key:
                    atoms.update(self.reach.get(key, set()))
            elif isinstance(n, ast.Call):
                for t in self.ev(n.func, sc):
                    if t[0] == "inst":
                        collect(self._callables_of_instance(t[1]))
            elif isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load):
                tags = self.ev(n, sc)
                collect(tags)
                if isinstance(n, ast.Attribute) and any(t[0] in ("fn", "ext", "ops") for t in tags):
                    v = n.value  # `kit.f`: kit is the function's module, not a bare use of it
                    while isinstance(v, (ast.Attribute, ast.Name)):
                        consumed.add(id(v))
                        v = v.value if isinstance(v, ast.Attribute) else None  # type: ignore[assignment]
        return atoms

    def _solve(self) -> None:
        fns = self._function_scopes()
        for _ in range(64):
            changed = False
            for s, kind, target, value, attr in self.sites:
                tags = self.ev(value, s)
                if kind == "setattr":
                    target = ast.Attribute(value=target, attr=attr, ctx=ast.Store())
                if tags:
                    changed |= self._bind(s, target, tags, value)
            for sc in fns:
                r = self._returns_of(sc)
                if r - self.returns.get(sc.key, set()):
                    self.returns.setdefault(sc.key, set()).update(r)
                    changed = True
                a = self._reach_of(sc)
                if a - self.reach.get(sc.key, set()):
                    self.reach.setdefault(sc.key, set()).update(a)
                    changed = True
            if not changed:
                return


def forward_reach(tree: ast.Module, dotted: Callable[[ast.AST], str | None]) -> ForwardReach | None:
    """What the module's ModelNew.forward reaches; None when there is no ModelNew with a forward to judge."""
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return None
    mod = _Module(tree, dotted)
    entry: set[Tag] = set()
    for name in ("forward", "__call__"):
        entry |= {t for t in mod._class_attr("ModelNew", name) if t[0] == "py"}
    if not entry:
        return None
    atoms: set[Tag] = set()
    line = 0
    for t in entry:
        atoms |= mod.reach.get(t[1], set())
        node = mod.scopes[t[1]].node
        if not line or getattr(node, "name", "") == "forward":
            line = getattr(node, "lineno", 0)
    fa = frozenset(atoms)
    return ForwardReach(line=line, atoms=fa, aten_only=aten_only(mod.sources, fa) if fa else ())
