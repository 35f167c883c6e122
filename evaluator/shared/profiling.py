"""Worker side: what ran during a call, from torch.profiler, and the roofline.

`summarise` splits a call's time into the candidate's own code (time inside its extension's functions, less the
ATen operators those call, plus device kernels launched outside any ATen operator) and library operators (ATen,
hence cuBLAS/cuDNN), grouped by class (gemm, conv, reduction, elementwise, ...; data movement and allocation apart).
The evaluator decides "is it a kernel?" from it (see kernelcheck.py). `profile_call` gives the top operators for
profile-guided prompts (the roofline comes from the referee: referee.Referee.roofline).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from ..opclass import _CLASS_OF, _CLASSES, COMPUTE_CLASSES, op_class  # noqa: F401 (moved there: torch-free)
from .tree import leaves

LIBRARY_NAMESPACES = ("aten", "prim", "prims", "profiler", "cuda", "c10d", "_c10d_functional", "quantized",
                      "inductor", "torch", "mkldnn", "cudnn", "_ops")


def is_library(name: str) -> bool:
    return "::" in name and name.split("::", 1)[0] in LIBRARY_NAMESPACES and not name.startswith("klsp_ext::")


def is_candidate(name: str) -> bool:
    """The candidate's own code: its wrapped extension functions, or operators it registered itself."""
    if name.startswith("klsp_ext::"):
        return True
    return "::" in name and name.split("::", 1)[0] not in LIBRARY_NAMESPACES and "." not in name.split("::", 1)[0] \
        and " " not in name and not name.startswith(("ProfilerStep", "Optimizer", "DataLoader"))


_GLOBAL_NAME = __import__("re").compile(r"__global__\s+(?:[^;{()]*?\s)?(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                                        r"([A-Za-z_]\w*)\s*\(")
_KERNEL_IDENT = __import__("re").compile(r"(?:void\s+)?(?:[\w:]+::)?([A-Za-z_]\w*)\s*[<(]")
_LIB_KERNEL_CLASS = (("gemm", ("gemm", "xmma", "cutlass", "cublas", "sgemm", "hgemm", "matmul", "wgmma")),
                     ("conv", ("conv", "cudnn", "implicit_gemm", "winograd", "fft")),
                     ("reduction", ("reduce", "softmax", "norm", "scan")))


def kernel_names(cuda_sources: list[str]) -> set[str]:
    """Names of the __global__ functions a candidate defines (its own kernels, as the profiler will name them)."""
    names: set[str] = set()
    for src in cuda_sources:
        names |= {m.group(1) for m in _GLOBAL_NAME.finditer(src) if m.group(1) != "__launch_bounds__"}
    return names


def _kernel_ident(name: str) -> str:
    m = _KERNEL_IDENT.match(name.strip())
    return m.group(1) if m else name.strip()


def _library_kernel_class(name: str) -> str:
    low = name.lower()
    for cls, words in _LIB_KERNEL_CLASS:
        if any(w in low for w in words):
            return cls
    return "elementwise"


def summarise(prof: Any, on_device: bool, custom_kernels: set[str] | None = None) -> dict:
    """Time of one profiled call split into the candidate's own code and library operators by class (ms).

    On a GPU the split is made on the device's kernels by name: the `__global__` functions of the candidate's own
    sources are its kernels, every other kernel is a library's (ATen, cuBLAS, cuDNN; also a library called
    straight from the candidate's C++). Operators' classes come from the ATen operators that launched them."""
    if on_device:
        return _summarise_device(prof, custom_kernels or set())
    evts = [e for e in prof.events() if not getattr(e, "is_async", False)
            and (getattr(e, "device_type", None) is None or "CPU" in str(e.device_type))]

    def t(e: Any) -> float:
        return float(e.device_time_total if on_device else e.cpu_time_total)

    library: dict[str, float] = defaultdict(float)
    lib_ops: dict[str, float] = defaultdict(float)
    custom = 0.0
    calib = [t(e) for e in evts if e.name == "klsp_calibrate::empty"]
    overhead = min(calib) if calib and not on_device else 0.0  # the cost of marking a region (CPU time)
    kernels: dict[tuple[str, bool], float] = defaultdict(float)

    def own_kernels(e: Any, is_custom: bool) -> None:
        for k in getattr(e, "kernels", []) or []:
            kernels[(k.name, is_custom)] += float(k.duration)

    def inner_library(e: Any) -> float:
        """Library time of the first library operators below e (recorded as such), and kernels of others."""
        total = 0.0
        for c in e.cpu_children:
            if is_library(c.name):
                cls = op_class(c.name)
                library[cls] += t(c) / 1e3
                lib_ops[c.name] += t(c) / 1e3
                _collect_kernels(c, False, kernels)
                total += t(c)
            else:
                own_kernels(c, True)
                total += inner_library(c)
        return total

    def visit(e: Any) -> None:
        nonlocal custom
        if is_library(e.name):
            cls = op_class(e.name)
            library[cls] += t(e) / 1e3
            lib_ops[e.name] += t(e) / 1e3
            _collect_kernels(e, False, kernels)
        elif e.name.startswith("klsp_calibrate::"):
            return
        elif is_candidate(e.name):
            own_kernels(e, True)
            inner = inner_library(e)
            custom += max(0.0, t(e) - inner - overhead) / 1e3
        else:
            if on_device:  # kernels launched outside any operator (raw launches, Triton): the candidate's own
                k = sum(float(x.duration) for x in (getattr(e, "kernels", []) or []))
                if k:
                    own_kernels(e, True)
                    custom += k / 1e3
            for c in e.cpu_children:
                visit(c)

    for e in evts:
        if e.cpu_parent is None:
            visit(e)
    compute = {k: v for k, v in library.items() if k != "data"}
    ks = sorted(({"name": n[:160], "ms": d / 1e3, "custom": c} for (n, c), d in kernels.items()),
                key=lambda k: -k["ms"])[:20]
    ops = sorted(({"name": n, "ms": v, "class": op_class(n)} for n, v in lib_ops.items()), key=lambda o: -o["ms"])
    return {"custom_ms": custom, "library_ms": dict(compute), "data_ms": library.get("data", 0.0),
            "kernels": ks, "ops": ops[:15], "on_device": on_device}


def _collect_kernels(e: Any, is_custom: bool, out: dict) -> None:
    for k in getattr(e, "kernels", []) or []:
        out[(k.name, is_custom)] += float(k.duration)
    for c in e.cpu_children:
        _collect_kernels(c, is_custom, out)


def _summarise_device(prof: Any, custom_names: set[str]) -> dict:
    events = list(prof.events())
    # device-side events, less the GPU copies of user annotations (our klsp_ext:: ranges) kineto also emits
    dev = [e for e in events if "CUDA" in str(getattr(e, "device_type", "")) and not getattr(e, "is_user_annotation",
                                                                                               False)
           and not e.name.startswith(("klsp_ext::", "klsp_calibrate::", "ProfilerStep"))]
    kernels: dict[tuple[str, bool], float] = defaultdict(float)
    custom = lib_kernels = 0.0
    for e in dev:
        us = float(e.time_range.elapsed_us())
        mine = _kernel_ident(e.name) in custom_names
        kernels[(e.name, mine)] += us
        if mine:
            custom += us
        else:
            lib_kernels += us
    library: dict[str, float] = defaultdict(float)
    lib_ops: dict[str, float] = defaultdict(float)
    attributed = 0.0

    def visit(e: Any) -> None:
        nonlocal attributed
        if is_library(e.name):
            us = float(e.device_time_total)
            if us:
                cls = op_class(e.name)
                library[cls] += us / 1e3
                lib_ops[e.name] += us / 1e3
                attributed += us
            return
        for c in e.cpu_children:
            visit(c)

    for e in events:
        if e.cpu_parent is None and "CPU" in str(getattr(e, "device_type", "CPU")) and not getattr(e, "is_async",
                                                                                                    False):
            visit(e)
    rest = lib_kernels - attributed  # library kernels no ATen operator claimed (cuBLAS called from C++, ...)
    if rest > 1e-3:
        by_class: dict[str, float] = defaultdict(float)
        for (n, mine), us in kernels.items():
            if not mine:
                by_class[_library_kernel_class(n)] += us
        total = sum(by_class.values()) or 1.0
        for cls, us in by_class.items():
            library[cls] += rest * us / total / 1e3
    compute = {k: v for k, v in library.items() if k != "data"}
    ks = sorted(({"name": n[:160], "ms": d / 1e3, "custom": c} for (n, c), d in kernels.items()),
                key=lambda k: -k["ms"])[:20]
    ops = sorted(({"name": n, "ms": v, "class": op_class(n)} for n, v in lib_ops.items()), key=lambda o: -o["ms"])
    return {"custom_ms": custom / 1e3, "library_ms": dict(compute), "data_ms": library.get("data", 0.0),
            "kernels": ks, "ops": ops[:15], "on_device": True}


def call_events(prof: Any, on_device: bool, custom_kernels: set[str] | None = None) -> dict:
    return summarise(prof, on_device, custom_kernels)


def tensor_bytes(x: Any) -> int:
    return sum(v.numel() * v.element_size() for _, v in leaves(x) if isinstance(v, torch.Tensor))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_call(fn: Callable[..., Any], inputs: list, device: torch.device, iters: int = 3, top: int = 10) -> dict:
    """Top operators of `fn` over a few calls (plus the summary of the last profile)."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.no_grad():
        out = fn(*inputs)  # warm-up outside the profile
        sync(device)
        with profile(activities=acts, record_shapes=True, with_flops=True) as prof:
            for _ in range(iters):
                fn(*inputs)
            sync(device)
    on_device = device.type == "cuda"
    groups: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    flops = 0.0
    kernel_total = 0.0
    for evt in prof.events():
        if on_device and getattr(evt, "device_type", None) is not None and "CUDA" in str(evt.device_type):
            kernel_total += float(getattr(evt, "device_time", 0.0) or 0.0)
        if not evt.name.startswith("aten::"):
            continue
        parent = evt.cpu_parent
        if parent is not None and parent.name.startswith("aten::"):
            continue
        tt = float(getattr(evt, "device_time_total", 0.0) if on_device else evt.cpu_time_total)
        g = groups[(evt.name, str(getattr(evt, "input_shapes", "") or ""))]
        g[0] += tt
        g[1] += 1
    for evt in prof.events():
        flops += float(getattr(evt, "flops", 0) or 0)
    total = sum(v[0] for v in groups.values()) or 1e-9
    if on_device and kernel_total > total:
        total = kernel_total
    ops = [{"name": name, "device_ms": tt / 1e3 / iters, "share": tt / total, "calls": max(1, n // iters),
            "shapes": shapes[:200]}
           for (name, shapes), (tt, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]]
    return {"total_ms": total / 1e3 / iters, "ops": ops, "flops": flops / iters or None,
            "bytes_moved": float(sum(tensor_bytes(x) for x in inputs) + tensor_bytes(out)),
            "summary": summarise(prof, on_device)}
