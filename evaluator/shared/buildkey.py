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
