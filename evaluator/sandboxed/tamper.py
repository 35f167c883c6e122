"""Runner side: what a candidate could change in its own process that would bend its results or its clock.

`snapshot()` is taken when the runner starts, before any candidate code; `diff()` after each phase. The
candidate runs in a process of its own, so a change cannot reach the reference, the comparison or the verdict;
it is reported because it is how a candidate games a weaker referee, and because a precision flag changes what
the candidate computes. Three kinds:

- ``precision``: TF32 / reduced-precision reductions / matmul precision / deterministic algorithms / default dtype;
- ``function``: a function or class of torch, torch.nn.functional, torch.Tensor, torch.cuda (events,
  synchronisation, streams), the profiler, the clocks in `time`, or the oracle's own modules replaced;
- ``performance``: cudnn.benchmark, thread counts: a warning only (it changes speed, not results).
"""

from __future__ import annotations

import sys
import time
import types
from typing import Any

import torch
import torch.utils.cpp_extension  # noqa: F401  (snapshotted below)

PERFORMANCE = ("torch.backends.cudnn.benchmark", "torch.get_num_threads()", "torch.get_num_interop_threads()")


def _flags() -> dict[str, Any]:
    f: dict[str, Any] = {}

    def put(name: str, get: Any) -> None:
        try:
            f[name] = get()
        except Exception:  # noqa: BLE001  (a flag this torch lacks)
            pass

    put("torch.backends.cuda.matmul.allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32)
    put("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction)
    put("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction)
    put("torch.backends.cudnn.allow_tf32", lambda: torch.backends.cudnn.allow_tf32)
    put("torch.backends.cudnn.deterministic", lambda: torch.backends.cudnn.deterministic)
    put("torch.backends.cudnn.enabled", lambda: torch.backends.cudnn.enabled)
    put("torch.backends.cudnn.benchmark", lambda: torch.backends.cudnn.benchmark)
    put("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision)
    put("torch.are_deterministic_algorithms_enabled()", torch.are_deterministic_algorithms_enabled)
    put("torch.get_default_dtype()", lambda: str(torch.get_default_dtype()))
    put("torch.backends.mkldnn.enabled", lambda: torch.backends.mkldnn.enabled)
    put("torch.backends.cuda.flash_sdp_enabled()", torch.backends.cuda.flash_sdp_enabled)
    put("torch.backends.cuda.math_sdp_enabled()", torch.backends.cuda.math_sdp_enabled)
    # flush-to-zero / denormals-are-zero (torch.set_flush_denormal) has no getter: a denormal survives a multiply
    # only when it is off
    put("torch.set_flush_denormal(...)",
        lambda: "on" if float(torch.tensor([1e-39], dtype=torch.float32) * 1.0) == 0.0 else "off")
    put("torch.get_num_threads()", torch.get_num_threads)
    put("torch.get_num_interop_threads()", torch.get_num_interop_threads)
    return f


def _members(prefix: str, obj: Any, out: dict[str, int]) -> None:
    try:
        items = list(vars(obj).items())
    except TypeError:
        return
    for name, v in items:
        if name.startswith("__") and name not in ("__call__", "__init__", "__torch_function__"):
            continue
        if callable(v) or isinstance(v, (staticmethod, classmethod, property)):
            out[f"{prefix}.{name}"] = id(v)


def _functions() -> dict[str, int]:
    out: dict[str, int] = {}
    _members("torch", torch, out)
    _members("torch.nn.functional", torch.nn.functional, out)
    _members("torch.Tensor", torch.Tensor, out)
    _members("torch._C.TensorBase", torch._C.TensorBase, out)
    _members("torch.nn.Module", torch.nn.Module, out)
    _members("torch.cuda", torch.cuda, out)
    _members("torch.cuda.Event", torch.cuda.Event, out)
    _members("torch.cuda.Stream", torch.cuda.Stream, out)
    _members("torch.autograd.profiler", torch.autograd.profiler, out)
    _members("torch.profiler", torch.profiler, out)
    _members("torch.utils.cpp_extension", torch.utils.cpp_extension, out)
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "sleep"):
        out[f"time.{name}"] = id(getattr(time, name))
    for modname, mod in list(sys.modules.items()):
        if modname.startswith("evaluator") and isinstance(mod, types.ModuleType):
            _members(modname, mod, out)
    return out


def snapshot() -> dict[str, Any]:
    return {"flags": _flags(), "functions": _functions(),
            "modules": sorted(n for n in sys.modules if n.startswith("evaluator"))}


# Ours: the loader replaces these on purpose before any candidate code runs, and snapshots are taken after.
_OURS = ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load")


def diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(tampering, warnings) between two snapshots, in words."""
    bad: list[str] = []
    warn: list[str] = []
    for k, v in before["flags"].items():
        now = after["flags"].get(k, v)
        if now != v:
            (warn if k in PERFORMANCE else bad).append(f"{k} changed from {v!r} to {now!r}")
    changed = [k for k, v in before["functions"].items()
               if k not in _OURS and after["functions"].get(k, v) != v]
    removed = [k for k in before["functions"] if k not in after["functions"] and k not in _OURS]
    if changed:
        bad.append(f"replaced {', '.join(sorted(changed)[:6])}" + (f" and {len(changed) - 6} more" if len(changed) > 6
                                                                 else ""))
    if removed:
        bad.append(f"removed {', '.join(sorted(removed)[:6])}")
    return bad, warn
