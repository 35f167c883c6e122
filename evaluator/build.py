"""Worker side, stage "compile": execute the candidate module so its load_inline calls build.

Builds go to <cache_dir>/<hash of source+torch+arch>/<name>/ (TORCH_EXTENSIONS_DIR), so the device worker that
executes the candidate again finds ninja up to date. Without a CUDA device, `cuda_sources` are not built with
torch (a CPU build of torch cannot link them); they are compile-checked with `nvcc -c` instead.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from typing import Any

from . import compilelog
from .loader import built_libraries, exec_module, extensions_dir, guard_pch

_TORCH_INCLUDE = re.compile(r"#\s*include\s*[<\"](torch/|ATen/|c10/|pybind11/)")


class BuildFailed(Exception):
    def __init__(self, log: str, trimmed: str) -> None:
        super().__init__(trimmed)
        self.log = log
        self.trimmed = trimmed


class _Stub(types.ModuleType):
    """What load_inline returns when we only compile-check: any function call says why it cannot run."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def _no_device(*a: Any, **k: Any) -> Any:
            raise RuntimeError("not run: no CUDA device (compile-checked with nvcc only)")

        return _no_device


def _as_list(x: Any) -> list[str]:
    if x is None:
        return []
    return [x] if isinstance(x, str) else list(x)


@functools.cache
def _torch_cxx_std() -> str:
    """The C++ standard torch's own extension builds pass (read from torch.utils.cpp_extension; newer torch
    needs C++20), so sources including torch's headers are checked the way load_inline would compile them."""
    import inspect

    import torch.utils.cpp_extension as ce

    try:
        found = re.findall(r"-std=c\+\+(\d+)", inspect.getsource(ce))
    except (OSError, TypeError):
        found = []
    return f"-std=c++{max(found, key=int)}" if found else "-std=c++17"


def nvcc_check(name: str, cuda_sources: list[str], no_implicit_headers: bool, timeout: float,
               extra_cuda_cflags: list[str] | None = None) -> dict:
    """`nvcc -c` the CUDA sources the way load_inline would write them. Returns {"ok", "seconds", "log", ...}."""
    nvcc = shutil.which("nvcc") or (os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
                                     if os.environ.get("CUDA_HOME") else None)
    if not nvcc or not os.path.exists(nvcc):
        return {"ok": None, "seconds": 0.0, "log": "", "note": "not compile-checked: no nvcc found"}
    head = [] if no_implicit_headers else ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
    text = "\n".join(head + cuda_sources)
    uses_torch = bool(_TORCH_INCLUDE.search(text))
    flags: list[str] = [_torch_cxx_std() if uses_torch else "-std=c++17", "-O2", "--expt-relaxed-constexpr"]
    if uses_torch:
        from torch.utils.cpp_extension import include_paths

        for p in include_paths():
            flags += ["-isystem", p]
        import sysconfig

        flags += ["-isystem", sysconfig.get_paths()["include"]]
    flags += [f for f in (extra_cuda_cflags or []) if f.startswith(("-D", "-O", "--use_fast_math", "-std"))]
    with tempfile.TemporaryDirectory(prefix="nvcc-check-") as d:
        src = os.path.join(d, "cuda.cu")
        with open(src, "w") as f:
            f.write(text)
        t0 = time.perf_counter()
        try:
            p = subprocess.run([nvcc, "-c", src, "-o", os.path.join(d, "cuda.o"), *flags],  # noqa: PLW1510
                               capture_output=True, text=True, timeout=timeout, cwd=d)
        except subprocess.TimeoutExpired:
            return {"ok": False, "timeout": True, "seconds": timeout, "log": f"nvcc timed out after {timeout:g} s"}
        secs = time.perf_counter() - t0
    log = (p.stdout + p.stderr).strip()
    if p.returncode == 0:
        return {"ok": True, "seconds": secs, "log": "", "note": f"compiled with nvcc ({secs:.1f} s)"}
    if uses_torch and re.search(r"c10/cuda/|ATen/cuda/.*(No such file|cannot open)|cannot open source file \"c10/cuda", log):
        return {"ok": None, "seconds": secs, "log": compilelog.trim(log),
                "note": "not compile-checked: the CPU build of torch lacks its CUDA headers"}
    offsets = {"cuda.cu": 0 if no_implicit_headers else 3}
    return {"ok": False, "seconds": secs, "log": compilelog.trim(log, offsets), "full_log": log[-20000:]}


def compile_candidate(args: dict, emit: Callable[[str, str], None]) -> dict:
    """Execute the candidate module in this (CPU) worker; report what was built, cached or checked."""
    import torch.utils.cpp_extension as ce

    src: str = args["candidate_src"]
    cache_dir: str = args["cache_dir"]
    device: str = args.get("device", "cpu")
    timeout: float = float(args.get("compile_timeout", 300.0))
    guard_pch(cache_dir)
    calls: list[dict] = []
    nvcc_results: list[dict] = []
    real_load_inline = ce.load_inline

    def recording_load_inline(name: str, cpp_sources: Any = None, cuda_sources: Any = None, *a: Any, **kw: Any):
        cuda = _as_list(cuda_sources if cuda_sources is not None else kw.get("cuda_sources"))
        call = {"name": name, "cuda": bool(cuda), "use_pch": bool(kw.get("use_pch")), "no_implicit_headers":
                bool(kw.get("no_implicit_headers")), "t0": time.perf_counter()}
        calls.append(call)
        if cuda and device == "cpu":
            emit("compile", f"nvcc check of {name}")
            r = nvcc_check(name, cuda, bool(kw.get("no_implicit_headers")), timeout, kw.get("extra_cuda_cflags"))
            nvcc_results.append(r)
            call["seconds"] = r["seconds"]
            if r["ok"] is False:
                raise BuildFailed(r.get("full_log", r["log"]), r["log"])
            return _Stub(name)
        emit("compile", f"building {name}")
        try:
            mod = real_load_inline(name, cpp_sources, cuda_sources, *a, **kw)
        except subprocess.CalledProcessError as e:
            raise BuildFailed(str(e.output or e), compilelog.trim(str(e.output or e))) from None
        except RuntimeError as e:
            text = str(e)
            if "Error building extension" in text or "error" in text.lower():
                offsets = {"main.cpp": 0 if call["no_implicit_headers"] else 1,
                           "cuda.cu": 0 if call["no_implicit_headers"] else 3}
                raise BuildFailed(text, compilelog.trim(text, offsets)) from None
            raise
        call["seconds"] = time.perf_counter() - call["t0"]
        return mod

    ce.load_inline = recording_load_inline
    t0 = time.perf_counter()
    try:
        with extensions_dir(cache_dir, src) as path:
            cached = bool(built_libraries(path))
            try:
                exec_module(src, "candidate.py")
            except BuildFailed as e:
                return {"status": "compile_error", "log": e.trimmed, "full_log": e.log[-20000:],
                        "seconds": time.perf_counter() - t0, "calls": calls}
            except BaseException as e:
                if isinstance(e, KeyboardInterrupt):
                    raise
                import traceback

                return {"status": "exec_error", "error": f"{type(e).__name__}: {e}",
                        "traceback": _candidate_frames(traceback.format_exc()),
                        "seconds": time.perf_counter() - t0, "calls": calls}
            libs = [str(p) for p in built_libraries(path)]
    finally:
        ce.load_inline = real_load_inline
    notes = [r["note"] for r in nvcc_results if r.get("note")]
    return {
        "status": "ok",
        "seconds": time.perf_counter() - t0,
        "cached": cached,
        "calls": [{k: v for k, v in c.items() if k != "t0"} for c in calls],
        "cuda": any(c["cuda"] for c in calls),
        "nvcc_checked": [r["ok"] for r in nvcc_results],
        "notes": notes,
        "libraries": libs,
    }


def _candidate_frames(tb: str) -> str:
    """A traceback cut down to the candidate's own frames plus the exception line."""
    lines = tb.strip().splitlines()
    keep: list[str] = []
    for i, ln in enumerate(lines):
        if 'File "candidate.py"' in ln or 'File "reference.py"' in ln:
            keep.append(ln.strip())
            if i + 1 < len(lines) and not lines[i + 1].lstrip().startswith("File "):
                keep.append("    " + lines[i + 1].strip())
    if lines:
        keep.append(lines[-1])
    return "\n".join(keep)[-3000:]


if __name__ == "__main__":  # pragma: no cover
    print(compilelog.trim(sys.stdin.read()))
