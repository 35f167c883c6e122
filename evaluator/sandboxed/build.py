"""Worker side of the compile stage, in three roles that never share a process.

**recorder** (sandboxed, candidate code, no GPU): executes the candidate module with `load_inline` replaced by a
function that sends its arguments to the evaluator and waits: the evaluator builds them (below) or finds them in
the build cache, and answers with the built library, which the recorder then loads (so import-time code that calls
the extension still works).

**builder** (sandboxed, no candidate Python code): builds one `load_inline` call's arguments with torch's own
machinery into its private folder, and never loads the result. On a machine without a CUDA torch, CUDA sources are
compile-checked with `nvcc -c` instead.

**trusted PCH build** (no candidate input at all): torch's precompiled `torch/extension.h`, built once in the
background; sandboxed builders only read it (under a shared lock, so a rebuild never races a compiler), and never
wait for it: while it is being built (the first candidates on a fresh machine) their host code is compiled without
it (`shared/pch.py`), and the compile stage says so.

The builder reports where its seconds went (`phases`, from ninja's own log): torch's Python-side preparation,
the host translation unit (torch's headers), the kernel unit (nvcc) beside it, the link.

Build artefacts are keyed by the content of the `load_inline` arguments plus what changes the binary (torch, CUDA,
architectures, compiler), and only the evaluator itself writes them into the build cache. Two candidates whose
extension code is the same share one build; no candidate can place a file in the cache.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..shared.buildkey import LOAD_INLINE_ARGS, build_key, host_key, library_path, normalise  # noqa: F401
from ..shared.loader import candidate_frames
from ..shared.pch import no_pch_flags, pch_for_build
from ..stages import compilelog

_TORCH_INCLUDE = re.compile(r"#\s*include\s*[<\"](torch/|ATen/|c10/|pybind11/)")


class BuildFailed(Exception):
    def __init__(self, log: str, trimmed: str) -> None:
        super().__init__(trimmed)
        self.log = log
        self.trimmed = trimmed


def build_salt() -> str:
    """What changes a binary besides its sources: torch, CUDA, the architectures, the compilers."""
    import torch

    parts = [torch.__version__, str(torch.version.cuda), os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
             sys.platform, _tool_version("c++"), _tool_version("nvcc")]
    return "|".join(parts)


@functools.cache
def _tool_version(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        return f"{tool}:none"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=20, check=False).stdout
        return f"{tool}:{out.strip().splitlines()[-1] if out.strip() else '?'}"
    except (OSError, subprocess.TimeoutExpired):
        return f"{tool}:?"


# -- recorder ---------------------------------------------------------------------------------------------------------

class _Stub(types.ModuleType):
    """What the recorder gets for an extension it cannot load here (CUDA sources on a machine without CUDA)."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)

        def _not_here(*a: Any, **k: Any) -> Any:
            raise RuntimeError("not run: no CUDA device (compile-checked with nvcc only)")

        return _not_here


def import_library(path: str, name: str, is_python_module: bool) -> Any:
    import torch.utils.cpp_extension as ce

    return ce._import_module_from_library(name, str(Path(path).parent), is_python_module)


def install_loader(request_build: Callable[[dict[str, Any]], dict[str, Any]], load: bool = True) -> None:
    """Replace torch's `load_inline` (and `load`) in this process by ones that ask `request_build` for the library."""
    import torch.utils.cpp_extension as ce

    def klsp_load_inline(*a: Any, **kw: Any) -> Any:
        try:
            args = normalise(*a, **kw)
        except TypeError as e:
            raise TypeError(f"load_inline: {e}") from None
        answer = request_build(args)
        if not answer.get("ok"):
            raise BuildFailed(answer.get("full_log") or answer.get("log", ""), answer.get("log", "build failed"))
        if not load or answer.get("stub"):
            return _Stub(args["name"])
        return import_library(answer["path"], args["name"], args["is_python_module"])

    def klsp_load(name: str, sources: Any, *a: Any, **kw: Any) -> Any:
        raise RuntimeError("torch.utils.cpp_extension.load (sources from files) is not supported by the oracle: "
                           "pass the sources as strings to load_inline")

    ce.load_inline = klsp_load_inline
    ce.load = klsp_load


def record(args: dict, request_build: Callable[[dict[str, Any]], dict[str, Any]],
           emit: Callable[[str, str], None]) -> dict:
    """Execute the candidate with the recording loader; report what it asked to build and how the import went."""
    from ..shared.loader import exec_module

    calls: list[dict] = []

    def ask(a: dict[str, Any]) -> dict[str, Any]:
        emit("compile", f"building {a['name']}")
        t0 = time.perf_counter()
        ans = request_build(a)
        calls.append({"name": a["name"], "cuda": bool(a["cuda_sources"]), "key": ans.get("key", ""),
                      "cached": bool(ans.get("cached")), "seconds": time.perf_counter() - t0,
                      "ok": bool(ans.get("ok")), "note": ans.get("note", ""), "nvcc": ans.get("nvcc")})
        return ans

    install_loader(ask)
    t0 = time.perf_counter()
    try:
        exec_module(args["candidate_src"], "candidate.py")
    except BuildFailed as e:
        return {"status": "compile_error", "log": e.trimmed, "full_log": e.log[-20000:],
                "seconds": time.perf_counter() - t0, "calls": calls}
    except BaseException as e:  # noqa: BLE001  (the candidate's exception, reported)
        if isinstance(e, KeyboardInterrupt):
            raise
        import traceback

        return {"status": "exec_error", "error": f"{type(e).__name__}: {e}"[:2000],
                "traceback": candidate_frames(traceback.format_exc()), "seconds": time.perf_counter() - t0,
                "calls": calls}
    return {"status": "ok", "seconds": time.perf_counter() - t0, "calls": calls}


# -- builder ----------------------------------------------------------------------------------------------------------

@functools.cache
def _torch_cxx_std() -> str:
    """The C++ standard torch's own extension builds pass (newer torch needs C++20)."""
    import inspect

    import torch.utils.cpp_extension as ce

    try:
        found = re.findall(r"-std=c\+\+(\d+)", inspect.getsource(ce))
    except (OSError, TypeError):
        found = []
    return f"-std=c++{max(found, key=int)}" if found else "-std=c++17"


def nvcc_check(cuda_sources: list[str], no_implicit_headers: bool, timeout: float,
               extra_cuda_cflags: list[str] | None = None, workdir: str | None = None) -> dict:
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
        import sysconfig

        from torch.utils.cpp_extension import include_paths

        for p in include_paths():
            flags += ["-isystem", p]
        flags += ["-isystem", sysconfig.get_paths()["include"]]
    flags += [f for f in (extra_cuda_cflags or []) if f.startswith(("-D", "-O", "--use_fast_math", "-std"))]
    with tempfile.TemporaryDirectory(prefix="nvcc-check-", dir=workdir) as d:
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
    if uses_torch and re.search(r"c10/cuda/|ATen/cuda/.*(No such file|cannot open)|cannot open source file \"c10/cuda",
                                log):
        return {"ok": None, "seconds": secs, "log": compilelog.trim(log),
                "note": "not compile-checked: the CPU build of torch lacks its CUDA headers"}
    offsets = {"cuda.cu": 0 if no_implicit_headers else 3}
    return {"ok": False, "seconds": secs, "log": compilelog.trim(log, offsets), "full_log": log[-20000:]}


def _patch_for_sandbox() -> None:
    """torch writes and deletes its precompiled header in its own (here read-only) folder: never do either (GCC
    finds and checks the header by itself; the trusted `pch` worker builds it). Build, never load."""
    import torch.utils.cpp_extension as ce

    ce._check_and_build_extension_h_precompiler_headers = lambda *a, **k: None
    ce.remove_extension_h_precompiler_headers = lambda: None
    ce._import_module_from_library = lambda *a, **k: None  # build, never load (no candidate code runs here)


_PCH_NOTES = {"being built": "torch's precompiled header is being built: host code compiled without it",
              "half-written": "torch's precompiled header is incomplete (a build was cut off): host code compiled "
                              "without it",
              "stale": "torch's precompiled header was made from another torch: host code compiled without it",
              "absent": "no precompiled header of torch here: host code compiled without it"}


def build(args: dict, emit: Callable[[str, str], None], ask_host: Callable[[str], bool] | None = None) -> dict:
    """Build one extension into `<workdir>/build/`. Returns the fields of messages.BuildClaim: {"ok", "log",
    "full_log", "seconds", "library", "path"}; `path` says which way it was built, whether torch's precompiled
    header was used, and the phases (host unit | kernel unit, link)."""
    call: dict = args["call"]
    out_dir = Path(args["build_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    timeout = float(args.get("timeout", 300.0))
    t0 = time.perf_counter()
    if call["cuda_sources"] and args.get("mode") == "nvcc":
        emit("compile", f"nvcc check of {call['name']}")
        r = nvcc_check(call["cuda_sources"], call["no_implicit_headers"], timeout, call["extra_cuda_cflags"],
                       workdir=str(out_dir))
        return {"ok": r["ok"] is not False, "nvcc": r["ok"], "note": r.get("note", ""), "log": r.get("log", ""),
                "full_log": r.get("full_log", ""), "seconds": time.perf_counter() - t0, "stub": True}
    _patch_for_sandbox()
    shared = HostObjects(args.get("host_objects") or "", args.get("salt") or "", ask_host)
    with pch_for_build() as pch:
        res = _build(call, out_dir, pch, emit, shared)
    notes = [res.pop("path_note")]
    if pch != "use":
        notes.append(_PCH_NOTES[pch])
    phases = res.pop("phases", None)
    if phases:
        notes.append(_phase_note(phases))
    res["path"] = "; ".join(n for n in notes if n)
    res["seconds"] = time.perf_counter() - t0
    return res


def _build(call: dict, out_dir: Path, pch: str, emit: Callable[[str, str], None],
           shared: HostObjects | None = None) -> dict:
    path = "fast form" if call["cuda_sources"] else "C++"
    if call["cuda_sources"] and _TORCH_INCLUDE.search("\n".join(call["cuda_sources"])):
        from .split import NoSplit, split

        try:
            s = split(call["cpp_sources"], call["cuda_sources"])
        except NoSplit as e:
            path = f"full build ({e})"
        else:
            emit("compile", f"building {call['name']}: kernels alone, host code with the precompiled header")
            fast = dict(call, cpp_sources=s.cpp_sources, cuda_sources=s.cuda_sources, no_implicit_headers=True,
                        use_pch=True)
            res = _load_inline(fast, out_dir / "split", pch, shared)
            if res["ok"]:
                res["path_note"] = (f"split: kernels compiled alone, host code with torch's headers "
                                    f"({s.launches} launcher(s))")
                return res
            path = "full build (the split build failed; the original sources decide)"
    emit("compile", f"building {call['name']}")
    res = _load_inline(call, out_dir, pch, shared)
    res["path_note"] = path
    return res


def _phase_note(ph: dict) -> str:
    """'host 4.1 s | kernels 1.3 s, link 0.3 s' (the compiles run side by side); 'host reused' where the host
    unit's object came from an earlier build of the same host code."""
    reused = ""
    if ph.get("host_reused"):
        reused = f"host reused (built meanwhile for another candidate: waited {ph['host_wait']:.1f} s)" \
            if "host_wait" in ph else "host reused"
    parts = [reused] + [f"{k} {ph[k]:.1f} s" for k in ("host", "kernels") if k in ph]
    parts = [p for p in parts if p]
    out = " | ".join(parts)
    if "link" in ph:
        out += f", link {ph['link']:.1f} s"
    return out


def ninja_phases(build_dir: Path) -> dict[str, float]:
    """Seconds of each step of the last ninja run in `build_dir`, from its own log (`.ninja_log`: start and end in
    ms): host (main.o), kernels (the .cu), link (the .so)."""
    last: dict[str, float] = {}  # the log is appended to: the last line of a target is its last build
    try:
        lines = (build_dir / ".ninja_log").read_text().splitlines()
    except OSError:
        return {}
    for ln in lines:
        f = ln.split("\t")
        if len(f) < 4 or ln.startswith("#"):
            continue
        try:
            last[f[3]] = (int(f[1]) - int(f[0])) / 1000.0
        except ValueError:
            continue
    out: dict[str, float] = {}
    for target, secs in last.items():
        key = "kernels" if target.endswith(".cuda.o") else "host" if target.endswith(".o") else \
            "link" if target.endswith(".so") else ""
        if key:
            out[key] = out.get(key, 0.0) + secs
    return out


@functools.cache
def _gcc() -> bool:
    import torch.utils.cpp_extension as ce

    try:
        return bool(ce.check_compiler_is_gcc(ce.get_cxx_compiler()))
    except Exception:  # noqa: BLE001  (no compiler: the build reports it)
        return False


def _no_pch_speedups() -> list[str]:
    """GCC flags that make a compile of torch's headers without the precompiled header faster and leave its output
    unchanged (byte for byte: benchmarks/bench_compile.py checks it): fewer garbage collections (about a fifth of the
    parse of torch/extension.h, for ~0.4 GB more memory). Only for GCC (the precompiled header is GCC's too)."""
    return ["--param", "ggc-min-expand=100", "--param", "ggc-min-heapsize=1048576"] if _gcc() else []


@dataclass(frozen=True)
class HostObjects:
    """The build cache's host objects (read-only here; the evaluator stores them): the object of a host unit
    (`main.o`) already built for another extension with the same host code, so a new kernel behind the same wrapper
    (a refinement, another sample of best-of-n) compiles only its kernels and links. Shared only where the object
    does not depend on its folder: GCC, with `__FILE__` made relative to the build folder (`-fmacro-prefix-map`,
    which leaves the precompiled header usable)."""

    folder: str
    salt: str
    # asks the evaluator before compiling a host unit it lacks: True when its object is kept now (another build of
    # the same host code was under way: the evaluator waited for it)
    ask: Callable[[str], bool] | None = None

    def key(self, call: dict) -> str | None:
        return host_key(call, self.salt) if self.folder and self.salt and _gcc() else None


def _use_host_object(out_dir: Path, obj: Path) -> bool:
    """Put a shared host object in the build folder and make torch's ninja file take it as it is."""
    ninja_file = out_dir / "build.ninja"
    try:
        text = ninja_file.read_text()
        edge = re.compile(r"^build main\.o: compile \S.*$", re.M)
        if len(edge.findall(text)) != 1:
            return False
        shutil.copyfile(obj, out_dir / "main.o")
        ninja_file.write_text(edge.sub("build main.o: phony", text))
    except OSError:
        return False
    return True


def _host_reads_only_itself(out_dir: Path) -> bool:
    """Whether the host unit just built read no file of its own but `main.cpp` (and the empty forced include of a
    build without torch's precompiled header): ninja's record of the compiler's dependency list, which names every
    header outside the system's and torch's folders (those the build cache's salt covers)."""
    from ..shared.pch import NO_PCH_HEADER

    ninja = shutil.which("ninja")
    if not ninja:
        return False
    try:
        out = subprocess.run([ninja, "-t", "deps", "main.o"], cwd=out_dir, capture_output=True, text=True,
                             timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if not lines or not lines[0].startswith("main.o:") or "(VALID)" not in lines[0]:
        return False
    allowed = {os.path.realpath(out_dir / "main.cpp"), os.path.realpath(out_dir / NO_PCH_HEADER)}
    deps = [os.path.realpath(out_dir / p) for p in lines[1:]]
    return bool(deps) and all(d in allowed for d in deps)


def _load_inline(call: dict, out_dir: Path, pch: str = "use", shared: HostObjects | None = None) -> dict:
    """One `load_inline` build into `out_dir`. A build that took a shared host object and failed is built again
    whole (in a folder of its own): an object that would not link is ours to mend, never the candidate's error, and
    the whole build's object takes its place."""
    res = _load_inline_once(call, out_dir, pch, shared)
    if not res["ok"] and res.pop("host_reused", False):
        res = _load_inline_once(call, out_dir / "whole", pch, shared, reuse=False)
    return res


def _load_inline_once(call: dict, out_dir: Path, pch: str, shared: HostObjects | None, reuse: bool = True) -> dict:
    import torch.utils.cpp_extension as ce

    out_dir.mkdir(parents=True, exist_ok=True)
    # torch numbers a name's rebuilds within a process (`name_v1.so`); a builder never loads what it builds, and a
    # second build of one call (the split's fallback, a build made whole) keeps its name
    getattr(ce.JIT_EXTENSION_VERSIONER, "entries", {}).pop(call["name"], None)
    kw = {k: (list(v) if isinstance(v, list) else v) for k, v in call.items() if k != "name"}
    hkey = shared.key(call) if shared else None
    ours: list[str] = []
    if pch != "use":  # never read torch's header while it is being written (GCC only looks before the first token)
        ours += no_pch_flags(out_dir) + _no_pch_speedups()
    if hkey:  # the object the same wherever it is built
        ours.append(f"-fmacro-prefix-map={out_dir}/=")
    if ours:
        kw["extra_cflags"] = ours + list(kw.get("extra_cflags") or [])
    t0 = time.perf_counter()
    phases: dict[str, float] = {}
    real_ninja = ce._run_ninja_build

    def timed_ninja(*a: Any, **k: Any) -> None:
        t1 = time.perf_counter()
        phases["prep"] = t1 - t0
        obj = Path(shared.folder) / f"{hkey}.o" if shared and hkey and reuse else None
        if obj is not None and not obj.is_file() and shared.ask is not None:
            t2 = time.perf_counter()
            if shared.ask(hkey):
                phases["host_wait"] = time.perf_counter() - t2
        if obj is not None and obj.is_file() and _use_host_object(out_dir, obj):
            phases["host_reused"] = 1.0
        try:
            real_ninja(*a, **k)
        finally:
            phases["ninja"] = time.perf_counter() - t1

    ce._run_ninja_build = timed_ninja
    try:
        ce.load_inline(call["name"], build_directory=str(out_dir), verbose=False, **kw)
    except subprocess.CalledProcessError as e:
        text = str(e.output or e)
        return {"ok": False, "log": compilelog.trim(text), "full_log": text[-20000:],
                "host_reused": "host_reused" in phases}
    except RuntimeError as e:
        text = str(e)
        offsets = {"main.cpp": 0 if call["no_implicit_headers"] else 1,
                   "cuda.cu": 0 if call["no_implicit_headers"] else 3}
        return {"ok": False, "log": compilelog.trim(text, offsets), "full_log": text[-20000:],
                "host_reused": "host_reused" in phases}
    finally:
        ce._run_ninja_build = real_ninja
    lib = library_path(out_dir, call["name"])
    if not lib.exists():
        return {"ok": False, "log": f"the build produced no {lib.name}", "host_reused": "host_reused" in phases}
    phases.update(ninja_phases(out_dir))
    res = {"ok": True, "library": str(lib), "phases": {k: round(v, 3) for k, v in phases.items()}}
    if hkey and "host_reused" not in phases and _host_reads_only_itself(out_dir):
        res.update(host_key=hkey, host_object=str(out_dir / "main.o"))
    return res
