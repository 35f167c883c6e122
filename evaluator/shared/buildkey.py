"""Shared, torch-free: what identifies one extension build. The evaluator keys its build cache by it (compiler.py)
and the runner finds its libraries by it (sandboxed/runner.py): both compute the key from `load_inline`'s own
arguments, so a library is only ever used for the arguments it was built from."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

LOAD_INLINE_ARGS = ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
                    "extra_ldflags", "extra_include_paths", "with_cuda", "is_python_module",
                    "with_pytorch_error_handling", "use_pch", "no_implicit_headers")


def _as_list(x: Any) -> list[str]:
    if x is None:
        return []
    return [x] if isinstance(x, str) else [str(s) for s in x]


def normalise(name: str, cpp_sources: Any = None, cuda_sources: Any = None, sycl_sources: Any = None,
              functions: Any = None, extra_cflags: Any = None, extra_cuda_cflags: Any = None,
              extra_sycl_cflags: Any = None, extra_ldflags: Any = None, extra_include_paths: Any = None,
              build_directory: Any = None, verbose: Any = False, with_cuda: Any = None, with_sycl: Any = None,
              is_python_module: Any = True, with_pytorch_error_handling: Any = True, keep_intermediates: Any = True,
              use_pch: Any = False, no_implicit_headers: Any = False) -> dict[str, Any]:
    """`load_inline`'s arguments as plain JSON data (what decides the binary; build_directory/verbose do not)."""
    if sycl_sources:
        raise ValueError("SYCL sources are not supported")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,100}", name):
        raise ValueError(f"load_inline: extension name {name!r} is not a valid identifier")
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, dict):
        functions = {str(k): str(v) for k, v in functions.items()}
    elif functions is not None:
        functions = [str(f) for f in functions]
    return {"name": name, "cpp_sources": _as_list(cpp_sources), "cuda_sources": _as_list(cuda_sources),
            "functions": functions, "extra_cflags": _as_list(extra_cflags),
            "extra_cuda_cflags": _as_list(extra_cuda_cflags), "extra_ldflags": _as_list(extra_ldflags),
            "extra_include_paths": _as_list(extra_include_paths),
            "with_cuda": None if with_cuda is None else bool(with_cuda), "is_python_module": bool(is_python_module),
            "with_pytorch_error_handling": bool(with_pytorch_error_handling), "use_pch": bool(use_pch),
            "no_implicit_headers": bool(no_implicit_headers)}


def build_key(args: dict[str, Any], salt: str) -> str:
    """The cache folder of one extension: a hash of its arguments and of what else changes the binary."""
    text = json.dumps({k: args.get(k) for k in LOAD_INLINE_ARGS}, sort_keys=True)
    return hashlib.sha256(f"{salt}\n{text}".encode()).hexdigest()[:24]


def library_path(build_dir: str | Path, name: str) -> Path:
    return Path(build_dir) / f"{name}.so"


# -- the host unit's object, shared by extensions whose host code is the same -------------------------------------

HOST_OBJECTS = ".host-objects"  # in the build cache: `<key>.o`, written by the evaluator alone
HOST_KEY = re.compile(r"h[0-9a-f]{24}")
# the candidate's extra_cflags that change nothing but the host unit's own compile (no file, plugin or pass-through
# that could read what the key does not cover); any other flag keeps its host unit from being shared
_PLAIN_CFLAG = re.compile(r"-(O[0-3sgz]?|Ofast|D[A-Za-z_]\w*(=[\w.+-]*)?|U[A-Za-z_]\w*|std=[\w+]+|w"
                          r"|W(no-)?[a-z][\w-]*(=\d+)?|g[0-3]?|m(arch|tune)=[\w-]+|f(no-)?(fast-math|openmp|exceptions"
                          r"|rtti|strict-aliasing|omit-frame-pointer|unroll-loops|vectorize|tree-vectorize))")
_NOT_HOST = ("cuda_sources", "extra_cuda_cflags", "extra_ldflags")


def host_key(call: dict[str, Any], salt: str) -> str | None:
    """The key of one `load_inline` call's host unit (`main.cpp`: its `cpp_sources`, the generated bindings, torch's
    headers): every argument that reaches that compile, and nothing of its kernels or its link. Two calls with the
    same key compile the same host unit, so a new kernel behind a wrapper already built needs no new host compile.
    None where the call's flags could make the compile read something the key does not cover."""
    if call.get("extra_include_paths") or not all(_PLAIN_CFLAG.fullmatch(f) for f in call.get("extra_cflags") or []):
        return None
    host = {k: call.get(k) for k in LOAD_INLINE_ARGS if k not in _NOT_HOST}
    host["has_cuda"] = bool(call.get("cuda_sources"))  # CUDA's headers and flags in the host compile
    text = json.dumps(host, sort_keys=True)
    return "h" + hashlib.sha256(f"{salt}\nhost unit\n{text}".encode()).hexdigest()[:24]
