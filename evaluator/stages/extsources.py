"""The candidate's extension builds, read statically: where each is made (`load_inline`, `load`, `ctypes.CDLL`),
the C++/CUDA text a `load_inline` compiles when its source arguments can be evaluated without running anything, and
whether an entry point of that text only calls ATen operators (no loop, no launch, no raw data access, no call the
sources do not define).

`reach.py` tags what the forward reaches with the index of the build it came from; `aten_only` reads the builds
back to tell the screen whether the extension functions reached are only ATen. Nothing here imports torch.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

MAKERS = frozenset({
    "torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load", "load_inline",
    "ctypes.CDLL", "ctypes.cdll.LoadLibrary", "ctypes.PyDLL",
})


class Sources:
    """The module's extension builds (indexed by src, the index reach.py tags with) and their source text."""

    def __init__(self, tree: ast.Module, dotted: Callable[[ast.AST], str | None]) -> None:
        self.tree = tree
        self.dotted = dotted
        self.makers: list[ast.Call] = []  # extension builds, indexed by src
        self.maker_index: dict[int, int] = {}
        self.strings: dict[str, ast.AST] = {}  # module-level name -> value expression (for source strings)
        self._collect_makers()
        self.builds = self.build_names()

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


def aten_only(sources: Sources, atoms: frozenset) -> tuple[str, ...]:
    """When every extension function in `atoms` is C++ that only calls ATen operators: their names; else ()."""
    names = []
    for a in atoms:
        if a[0] != "fn" or a[2] is None:
            return ()
        src, pyname = a[1], a[2]
        if isinstance(src, tuple):  # torch.ops.<ns>.<op>
            text = sources.all_source_text()
            if text is None or not re.search(rf"TORCH_LIBRARY\w*\(\s*{re.escape(src[1])}\b", text):
                return ()
            cpp = _Cpp(text)
            impls = cpp.bound_to(pyname)
            label = f"torch.ops.{src[1]}.{pyname}"
        else:
            got = sources.maker_sources(src)
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
