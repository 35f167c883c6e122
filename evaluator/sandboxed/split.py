"""Split a KernelBench-form extension (torch headers and kernels together in `cuda_sources`) into a kernel-only
CUDA translation unit and a torch-facing host one, so nvcc never parses torch's headers (tens of seconds) and the
host side compiles with torch's precompiled header. Text only: nothing here compiles or imports anything.

    kernels + device functions + types  ->  cuda_sources (nvcc; <cuda_runtime.h> and the standard headers only)
    the host functions (the wrappers)   ->  cpp_sources (g++; <torch/extension.h> first, so the PCH applies)

Each launch `k<<<g, b, smem, stream>>>(args)` in host code becomes a call of a generated `extern "C"` launcher
compiled in the kernel unit (`__klsp_launch_N(dim3(g), dim3(b), smem, stream, args)`); explicit template
arguments of a launch (`k<true><<<...>>>`) give one launcher per instantiation. Where the source does not allow
it (kernels that use torch types, `scalar_t` from AT_DISPATCH, conditional compilation around the kernels, host
code touching `__constant__`/`__device__` variables, launches of kernels defined elsewhere), `split` returns None
with the reason and the full build is used. A split that fails to build falls back to the full build too
(build.py), so a split can never turn valid code into a compile error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](torch/|ATen/|c10/|pybind11/|THC/)')
TORCH_IN_DEVICE = re.compile(r"\b(torch|at|c10)::|\bAT_[A-Z_]+\b|\bTORCH_[A-Z_]+\b|\bscalar_t\b|PackedTensorAccessor"
                             r"|\bTensor\b|\bC10_[A-Z_]+\b")
IDENT = re.compile(r"[A-Za-z_]\w*")
NOT_NAMES = {"__launch_bounds__", "__attribute__", "alignas", "__declspec", "__align__", "sizeof", "decltype"}
DEVICE_HEADERS = ["#include <cuda_runtime.h>", "#include <cstdint>", "#include <cstddef>", "#include <cmath>",
                  "#include <cfloat>", "#include <climits>", "#include <math.h>", "#include <stdint.h>",
                  "#include <cuda_fp16.h>", "#include <cuda_bf16.h>"]


class NoSplit(Exception):
    pass


@dataclass
class Item:
    text: str
    kind: str = ""  # "include" | "pp" | "kernel" | "device" | "both" | "host"


@dataclass
class Kernel:
    name: str
    template_params: list[str] = field(default_factory=list)  # names, in order
    params: list[tuple[str, str]] = field(default_factory=list)  # (type, name)


def _strip_comments(src: str) -> str:
    """Comments replaced by spaces (newlines kept), strings kept."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in src[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def items(src: str) -> list[Item]:
    """Top-level items: preprocessor lines, declarations ending in ';', definitions ending in '}' (and ';')."""
    text = _strip_comments(src)
    out: list[Item] = []
    i, n, start, depth = 0, len(text), 0, 0
    at_line_start = True
    while i < n:
        c = text[i]
        if depth == 0 and at_line_start and c == "#" and not text[start:i].strip():
            j = i
            while True:
                e = text.find("\n", j)
                e = n if e < 0 else e
                if text[e - 1:e] == "\\":
                    j = e + 1
                    continue
                break
            out.append(Item(text[i:e].strip(), "pp"))
            i = start = e
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            at_line_start = False
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth < 0:
                raise NoSplit("unbalanced braces")
            if depth == 0:
                j = i + 1
                while j < n and text[j] in " \t\r\n":
                    j += 1
                end = j + 1 if j < n and text[j] == ";" else i + 1
                if text[start:end].strip():
                    out.append(Item(text[start:end].strip()))
                i = start = end
                continue
        elif c == ";" and depth == 0:
            if text[start:i + 1].strip():
                out.append(Item(text[start:i + 1].strip()))
            i = start = i + 1
            continue
        i += 1
    if depth != 0:
        raise NoSplit("unbalanced braces")
    if text[start:].strip():
        raise NoSplit("a declaration without an end")
    return out


def _matching(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes text[i] (== open_)."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == open_:
            depth += 1
        elif text[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    raise NoSplit(f"unmatched {open_}")


def _split_top(s: str) -> list[str]:
    """Split at commas that are not inside (), <>, [] or {}."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


def parse_kernel(text: str) -> Kernel:
    head = text[: text.index("{")] if "{" in text else text
    tparams: list[str] = []
    m = re.match(r"\s*template\s*<", head)
    if m:
        end = _matching(head, m.end() - 1, "<", ">")
        for p in _split_top(head[m.end():end - 1]):
            p = p.split("=")[0].strip()
            name = IDENT.findall(p)
            if not name:
                raise NoSplit(f"template parameter {p!r}")
            tparams.append(name[-1])
        head = head[end:]
    calls = [(mm.group(0), mm.start()) for mm in re.finditer(r"[A-Za-z_]\w*(?=\s*\()", head)]
    calls = [(nm, pos) for nm, pos in calls if nm not in NOT_NAMES]
    if not calls:
        raise NoSplit("a kernel without a parameter list")
    name, pos = calls[-1]
    op = head.index("(", pos)
    cl = _matching(head, op, "(", ")")
    params: list[tuple[str, str]] = []
    for p in _split_top(head[op + 1:cl - 1]):
        if not p or p == "void":
            continue
        p = p.split("=")[0].strip()
        if "[" in p or "..." in p or "(" in p:
            raise NoSplit(f"kernel parameter {p!r}")
        names = IDENT.findall(p)
        if len(names) < 2:
            raise NoSplit(f"kernel parameter {p!r} has no name")
        pname = names[-1]
        ptype = p[: p.rindex(pname)].strip()
        params.append((ptype, pname))
    return Kernel(name, tparams, params)


_LAUNCH = re.compile(r"([A-Za-z_]\w*)\s*(<(?:[^<>;(){}]|<[^<>;(){}]*>)*>)?\s*<<<")


@dataclass
class Split:
    cpp_sources: list[str]
    cuda_sources: list[str]
    launches: int


def split(cpp_sources: list[str], cuda_sources: list[str]) -> Split:
    """The split sources, or NoSplit(reason)."""
    src = "\n".join(cuda_sources)
    if not any(TORCH_INCLUDE.match(ln) for ln in src.splitlines()):
        raise NoSplit("the CUDA sources do not include torch's headers (already the fast form)")
    its = items(src)
    kernels: dict[str, Kernel] = {}
    device_vars: set[str] = set()
    for it in its:
        t = it.text
        if it.kind == "pp":
            if re.match(r"#\s*include", t):
                it.kind = "include"
            elif re.match(r"#\s*(if|ifdef|ifndef|else|elif|endif)\b", t):
                raise NoSplit("conditional compilation at the top level")
            else:
                it.kind = "both"  # #define, #pragma
            continue
        if re.match(r"namespace\b|inline\s+namespace\b", t):
            if re.search(r"__global__|__device__|__constant__", t):
                raise NoSplit("kernels inside a namespace")
            it.kind = "host"
            continue
        if re.match(r'extern\s+"C"\s*\{', t):
            if re.search(r"__global__|__device__|__constant__", t):
                raise NoSplit('kernels inside an extern "C" block')
            it.kind = "host"
            continue
        if "__global__" in t:
            it.kind = "kernel"
            k = parse_kernel(t)
            kernels[k.name] = k
        elif re.search(r"\b(__constant__|__shared__)\b", t) or (
                "__device__" in t and "__host__" not in t):
            it.kind = "device"
            if "(" not in t.split("=")[0] or "{" not in t:  # a variable, not a function
                names = IDENT.findall(t.split("=")[0].split("[")[0])
                if names:
                    device_vars.add(names[-1])
        elif re.match(r"using\s+namespace\b", t):
            it.kind = "host" if re.search(r"\b(torch|at|c10|pybind11)\b", t) else "both"
        elif TORCH_IN_DEVICE.search(t):
            it.kind = "host"
        elif re.match(r"(template\s*<.*?>\s*)?(struct|class|union|enum|typedef|using)\b", t, re.S) or \
                "__host__" in t or re.match(r"(static\s+)?(constexpr|const)\b", t):
            it.kind = "both"
        elif "{" in t and re.search(r"\)\s*(const\s*)?(noexcept\s*)?\{", t):
            it.kind = "host"  # a host function
        else:
            it.kind = "both"
    if not kernels:
        raise NoSplit("no __global__ kernel in the CUDA sources")
    device_text = "\n".join(it.text for it in its if it.kind in ("kernel", "device", "both")
                            or (it.kind == "include" and not TORCH_INCLUDE.match(it.text)))
    m = TORCH_IN_DEVICE.search(device_text)
    if m:
        raise NoSplit(f"the kernels use torch ({m.group(0)!r})")
    if "<<<" in device_text:
        raise NoSplit("a kernel launch in device code (dynamic parallelism)")
    host_items = [it for it in its if it.kind in ("host", "both", "pp") or
                  (it.kind == "include")]
    host_text = "\n".join(it.text for it in host_items)
    for var in device_vars:
        if re.search(rf"\b{re.escape(var)}\b", host_text):
            raise NoSplit(f"host code uses the device variable {var!r}")
    launchers: dict[tuple[str, str], int] = {}
    decls: list[str] = []
    defs: list[str] = []

    def rewrite(text: str) -> str:
        out, pos = [], 0
        for mm in _LAUNCH.finditer(text):
            if mm.start() < pos:
                continue
            name, targs = mm.group(1), (mm.group(2) or "").strip()
            if name not in kernels:
                raise NoSplit(f"a launch of {name!r}, which the CUDA sources do not define")
            k = kernels[name]
            if k.template_params and not targs:
                raise NoSplit(f"a launch of the template kernel {name!r} without explicit template arguments")
            if re.search(r"\bscalar_t\b", targs):
                raise NoSplit("a launch inside AT_DISPATCH (scalar_t)")
            cfg_end = text.find(">>>", mm.end())
            if cfg_end < 0:
                raise NoSplit("a launch without '>>>'")
            cfg = _split_top(text[mm.end():cfg_end])
            if not 2 <= len(cfg) <= 4:
                raise NoSplit(f"a launch configuration of {len(cfg)} parts")
            j = cfg_end + 3
            while j < len(text) and text[j] in " \t\r\n":
                j += 1
            if j >= len(text) or text[j] != "(":
                raise NoSplit("a launch without arguments")
            close = _matching(text, j, "(", ")")
            args = text[j + 1:close - 1].strip()
            key = (name, targs)
            if key not in launchers:
                idx = len(launchers)
                launchers[key] = idx
                subst = dict(zip(k.template_params, _split_top(targs[1:-1]) if targs else []))
                types = []
                for ptype, _ in k.params:
                    for tp, val in subst.items():
                        ptype = re.sub(rf"\b{re.escape(tp)}\b", val, ptype)
                    types.append(ptype)
                sig = ", ".join(["dim3 klsp_g", "dim3 klsp_b", "size_t klsp_smem", "cudaStream_t klsp_s"]
                                + [f"{t} klsp_a{i}" for i, t in enumerate(types)])
                call = ", ".join(f"klsp_a{i}" for i in range(len(types)))
                defs.append(f'extern "C" void __klsp_launch_{idx}({sig}) {{\n'
                            f"    {name}{targs}<<<klsp_g, klsp_b, klsp_smem, klsp_s>>>({call});\n}}")
                decls.append(f'extern "C" void __klsp_launch_{idx}({sig});')
            smem = cfg[2] if len(cfg) > 2 else "0"
            stream = cfg[3] if len(cfg) > 3 else "0"
            new = (f"__klsp_launch_{launchers[key]}(dim3({cfg[0]}), dim3({cfg[1]}), (size_t)({smem}), "
                   f"(cudaStream_t)({stream})" + (f", {args}" if args else "") + ")")
            out.append(text[pos:mm.start()])
            out.append(new)
            pos = close
        out.append(text[pos:])
        return "".join(out)

    host_parts = []
    for it in host_items:
        if it.kind == "include" and not TORCH_INCLUDE.match(it.text):
            host_parts.append(it.text)
        elif it.kind == "include":
            host_parts.append(it.text)
        else:
            host_parts.append(rewrite(it.text) if "<<<" in it.text else it.text)
    if not launchers:
        raise NoSplit("no kernel launch in host code")
    host = "\n".join(host_parts)
    if "<<<" in host:
        raise NoSplit("a launch the rewriter did not recognise")
    cpp = ["#include <torch/extension.h>", "#include <cuda_runtime.h>", *cpp_sources, "\n".join(decls), host]
    cuda = ["\n".join(DEVICE_HEADERS), device_text, "\n\n".join(defs)]
    return Split(cpp_sources=cpp, cuda_sources=cuda, launches=len(launchers))
