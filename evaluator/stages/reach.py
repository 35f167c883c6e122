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
ATen operators (no loop, no launch, no raw data access, no call the sources do not define).

Nothing here imports torch or runs the candidate.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

MAKERS = frozenset({
    "torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load", "load_inline",
    "ctypes.CDLL", "ctypes.cdll.LoadLibrary", "ctypes.PyDLL",
})
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
        self.makers: list[ast.Call] = []  # extension builds, indexed by src
        self.maker_index: dict[int, int] = {}
        self.strings: dict[str, ast.AST] = {}  # module-level name -> value expression (for source strings)
        self.node_key: dict[int, str] = {}  # id(function / lambda node) -> scope key
        self.module = _Scope("<module>", "module", tree, None)
        self.scopes[self.module.key] = self.module
        self._collect_makers()
        self.builds = self.build_names()
        self._build(self.module)
        self.module_globals = set(self.module.bound)
        for s in self.scopes.values():
            self.module_globals |= s.globals
        self._solve()

    # -- structure -------------------------------------------------------------------------------------------
    def _collect_makers(self) -> None:
        for n in ast.walk(self.tree):
            if isinstance(n, ast.Call) and self._is_maker(n):
                self.maker_index[id(n)] = len(self.makers)
                self.makers.append(n)
        for n in self.tree.body:
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        self.strings[t.id] = n.value
            elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
                self.strings[n.target.id] = n.value

    def _is_maker(self, call: ast.Call) -> bool:
        name = self.dotted(call.func) or ""
        return name in MAKERS or name.endswith((".load_inline", ".CDLL")) or (
            name.startswith("torch.utils.cpp_extension.load"))

    def build_names(self) -> set[str]:
        out = set()
        for m in self.makers:
            arg = next((k.value for k in m.keywords if k.arg == "name"), m.args[0] if m.args else None)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                out.add(arg.value)
        return out

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

    # -- sources of an extension -----------------------------------------------------------------------------
    def string_of(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """The text a source argument evaluates to, or None when it cannot be known statically."""
        if node is None or depth > 10:
            return None
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.Name):
            v = self.strings.get(node.id)
            return self.string_of(v, depth + 1) if v is not None else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self.string_of(node.left, depth + 1), self.string_of(node.right, depth + 1)
            return a + b if a is not None and b is not None else None
        if isinstance(node, (ast.List, ast.Tuple)):
            parts = [self.string_of(e, depth + 1) for e in node.elts]
            return None if any(p is None for p in parts) else "\n".join(parts)  # type: ignore[arg-type]
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                p = self.string_of(v.value if isinstance(v, ast.FormattedValue) else v, depth + 1)
                if p is None:
                    return None
                parts.append(p)
            return "".join(parts)
        return None

    def maker_sources(self, idx: int) -> tuple[str, list[str] | None] | None:
        """(C++ and CUDA text, the `functions=` names or None) of load_inline call idx; None if unknowable."""
        if idx < 0 or idx >= len(self.makers):
            return None
        call = self.makers[idx]
        if not (self.dotted(call.func) or "").endswith("load_inline"):
            return None
        kw = {k.arg: k.value for k in call.keywords}
        pos = dict(zip(("name", "cpp_sources", "cuda_sources", "functions"), call.args))
        texts = []
        for arg in ("cpp_sources", "cuda_sources"):
            node = kw.get(arg, pos.get(arg))
            if node is None or (isinstance(node, ast.Constant) and node.value is None):
                continue
            t = self.string_of(node)
            if t is None:
                return None
            texts.append(t)
        fnode = kw.get("functions", pos.get("functions"))
        functions: list[str] | None = None
        if isinstance(fnode, (ast.List, ast.Tuple)):
            functions = [e.value for e in fnode.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        elif isinstance(fnode, ast.Dict):
            functions = [k.value for k in fnode.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        elif isinstance(fnode, ast.Constant) and isinstance(fnode.value, str):
            functions = [fnode.value]
        elif fnode is not None:
            return None
        return "\n".join(texts), functions

    def all_source_text(self) -> str | None:
        out = []
        for i in range(len(self.makers)):
            m = self.maker_sources(i)
            if m is None:
                return None
            out.append(m[0])
        return "\n".join(out)


# ---- C++: is an entry point only ATen operators? ----------------------------------------------------------------
_CPP_STRIP = re.compile(r'//[^\n]*|/\*.*?\*/|R"(\w*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_WORK = re.compile(
    r"\b(for|while|do|goto|asm|__asm__|__asm|parallel_for|parallel_reduce|cpu_kernel\w*|gpu_kernel\w*|"
    r"TensorIterator\w*|data_ptr|mutable_data_ptr|const_data_ptr|accessor|packed_accessor\w*|"
    r"generic_packed_accessor|memcpy|memset|memmove|__global__)\b|<<<|\bdata\s*<|\bcu\w*\s*\(|"
    r"\bstd::(transform|for_each|accumulate|reduce|inner_product|transform_reduce|partial_sum|inclusive_scan|"
    r"exclusive_scan|copy|copy_n|fill|fill_n|generate|iota|sort)\b|\b(cublas|cudnn|cutlass|cub|thrust)\w*|"
    r"\b_mm\d*_\w+")
_CALL = re.compile(r"(?<![\w.>:])((?:\w+::)*)(\w+)\s*(?:<[^<>;{}()]*(?:<[^<>;{}()]*>[^<>;{}()]*)*>)?\s*\(")
_NEUTRAL = frozenset({
    "if", "switch", "return", "sizeof", "alignof", "decltype", "static_cast", "reinterpret_cast", "const_cast",
    "dynamic_cast", "catch", "throw", "static_assert", "typeid", "noexcept", "defined", "int", "float", "double",
    "bool", "char", "long", "short", "unsigned", "signed", "int64_t", "int32_t", "int16_t", "int8_t", "uint64_t",
    "uint32_t", "uint8_t", "size_t", "ptrdiff_t", "auto", "void", "else", "case",
})
_NEUTRAL_PREFIX = ("TORCH_CHECK", "TORCH_INTERNAL_ASSERT", "TORCH_WARN", "AT_ASSERT", "AT_ERROR", "C10_",
                   "AT_DISPATCH", "TORCH_LIBRARY", "PYBIND11_MODULE")
_LIB_NS = ("at", "torch", "c10", "std")


def _strip_cpp(text: str) -> str:
    return _CPP_STRIP.sub(lambda m: '""' if m.group(0)[:1] in "\"'R" else " ", text)


def _match(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes text[i] (== open_), or -1."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return -1


class _Cpp:
    def __init__(self, text: str) -> None:
        self.raw = text
        self.text = _strip_cpp(text)
        self.macros = set(re.findall(r"^\s*#\s*define\s+(\w+)", self.text, re.M))
        self._memo: dict[str, bool] = {}

    def bodies(self, name: str) -> list[str]:
        out = []
        for m in re.finditer(rf"(?<![\w.>])(?:\w+::)*{re.escape(name)}\s*\(", self.text):
            if self.text[max(0, m.start() - 1)] == ".":
                continue
            end = _match(self.text, m.end() - 1, "(", ")")
            if end < 0:
                continue
            q = re.match(r"\s*(?:(?:const|noexcept|override|final)\s*)*(?:->\s*[\w:<>,\s*&]+?)?\s*\{",
                         self.text[end:])
            if not q:
                continue
            start = end + q.end() - 1
            close = _match(self.text, start, "{", "}")
            if close > 0:
                out.append(self.text[start + 1:close - 1])
        return out

    def aten_only(self, name: str, seen: frozenset = frozenset()) -> bool:
        """Every definition of `name` calls only ATen / torch / c10 (and functions of the sources that do)."""
        if name in self._memo:
            return self._memo[name]
        if name in seen:
            return True  # recursion: judged by the rest of the body
        bodies = self.bodies(name)
        ok = bool(bodies) and all(self._body_ok(b, seen | {name}) for b in bodies)
        self._memo[name] = ok
        return ok

    def _body_ok(self, body: str, seen: frozenset) -> bool:
        if _WORK.search(body):
            return False
        if any(re.search(rf"\b{re.escape(m)}\b", body) for m in self.macros):
            return False
        for m in _CALL.finditer(body):
            ns, fn = m.group(1).rstrip(":"), m.group(2)
            root = ns.split("::")[0] if ns else ""
            if root in _LIB_NS:
                continue
            if not ns and (fn in _NEUTRAL or fn.startswith(_NEUTRAL_PREFIX)):
                continue
            if not self.aten_only(fn, seen):
                return False
        return True

    def bound_to(self, pyname: str) -> list[str] | None:
        """C++ functions a PYBIND11_MODULE / TORCH_LIBRARY block binds to `pyname` (None: a lambda or none)."""
        found = []
        for m in re.finditer(rf'\.(?:def|impl)\(\s*"{re.escape(pyname)}(?:\.\w+)?(?:\([^"]*)?"\s*,\s*'
                             r'(?:TORCH_FN\(\s*)?(?:py::overload_cast<[^>]*>\(\s*)?&?\s*((?:\w+::)*\w+)\s*[,)]',
                             self.raw):
            found.append(m.group(1).split("::")[-1])
        if re.search(rf'\.(?:def|impl)\(\s*"{re.escape(pyname)}(?:\.\w+)?(?:\([^"]*)?"\s*,\s*\[', self.raw):
            return None
        return found or None


def _aten_only(mod: _Module, atoms: frozenset) -> tuple[str, ...]:
    names = []
    for a in atoms:
        if a[0] != "fn" or a[2] is None:
            return ()
        src, pyname = a[1], a[2]
        if isinstance(src, tuple):  # torch.ops.<ns>.<op>
            text = mod.all_source_text()
            if text is None or not re.search(rf"TORCH_LIBRARY\w*\(\s*{re.escape(src[1])}\b", text):
                return ()
            cpp = _Cpp(text)
            impls = cpp.bound_to(pyname)
            label = f"torch.ops.{src[1]}.{pyname}"
        else:
            got = mod.maker_sources(src)
            if got is None:
                return ()
            text, functions = got
            cpp = _Cpp(text)
            impls = [pyname] if functions and pyname in functions else cpp.bound_to(pyname)
            label = pyname
        if not impls or not all(cpp.aten_only(f) for f in impls):
            return ()
        names.append(label)
    return tuple(sorted(names))


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
    return ForwardReach(line=line, atoms=fa, aten_only=_aten_only(mod, fa) if fa else ())
