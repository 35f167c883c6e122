"""Compiler output trimmed to what a model (or a person) needs: the first errors, with line numbers.

load_inline writes the candidate's `cpp_sources` to `main.cpp` after one implicit line
(`#include <torch/extension.h>`) and its `cuda_sources` to `cuda.cu` after three (torch/types.h, cuda.h,
cuda_runtime.h). Each error location is annotated with the line in the candidate's own string.
"""

from __future__ import annotations

import re

MAX_ERRORS = 5
MAX_CHARS = 4000

# gcc/clang: "path/main.cpp:12:5: error: ..."; nvcc: "path/cuda.cu(12): error: ..."
_GCC = re.compile(r"(?P<file>[^\s:]+\.(?:cpp|cu|cuh|h|hpp|cc)):(?P<line>\d+)(?::(?P<col>\d+))?:\s*(?P<kind>fatal error|error)")
_NVCC = re.compile(r"(?P<file>[^\s(]+\.(?:cu|cuh|cpp|h))\((?P<line>\d+)\):\s*(?P<kind>error)")
_LINKER = re.compile(r"(undefined reference|undefined symbol|ld returned|multiple definition)")
_NOISE = re.compile(r"^\s*(\[\d+/\d+\]|FAILED:|ninja: build stopped|c\+\+ |/usr/\S*nvcc |In file included from)")


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _annotate(file: str, line: int, offsets: dict[str, int]) -> str:
    name = _short(file)
    if name == "main.cpp" and offsets.get("main.cpp") is not None:
        return f" [cpp_sources line {line - offsets['main.cpp']}]"
    if name == "cuda.cu" and offsets.get("cuda.cu") is not None:
        return f" [cuda_sources line {line - offsets['cuda.cu']}]"
    return ""


def trim(log: str, offsets: dict[str, int] | None = None, max_errors: int = MAX_ERRORS) -> str:
    """Keep the first `max_errors` errors (each with up to 3 lines of context after it), paths shortened."""
    offsets = offsets if offsets is not None else {"main.cpp": 1, "cuda.cu": 3}
    lines = log.splitlines()
    out: list[str] = []
    errors = 0
    i = 0
    while i < len(lines) and errors < max_errors:
        ln = lines[i]
        m = _GCC.search(ln) or _NVCC.search(ln)
        if m or _LINKER.search(ln):
            errors += 1
            text = ln.replace(m.group("file"), _short(m.group("file"))) if m else ln
            if m:
                text += _annotate(m.group("file"), int(m.group("line")), offsets)
            out.append(text.strip())
            for ctx in lines[i + 1 : i + 4]:
                if _GCC.search(ctx) or _NVCC.search(ctx) or _NOISE.search(ctx) or not ctx.strip():
                    break
                out.append(ctx.rstrip())
            i += 1
            continue
        i += 1
    if not out:  # no recognisable error line: keep the tail, which usually holds the reason
        tail = [ln for ln in lines if ln.strip() and not _NOISE.search(ln)]
        out = tail[-15:]
    text = "\n".join(out)
    total = sum(1 for ln in lines if _GCC.search(ln) or _NVCC.search(ln))
    if total > errors and errors:
        text += f"\n... ({total - errors} more errors)"
    return text[:MAX_CHARS]
