"""Runner side: what a candidate could change in its own process that would bend its results or its clock.

`snapshot()` is taken when the runner starts, before any candidate code; `diff()` after each phase. The
candidate runs in a process of its own, so a change cannot reach the reference, the comparison or the verdict;
it is reported because it is how a candidate games a weaker referee, and because a precision flag changes what
the candidate computes. Three kinds:

- ``precision``: TF32 / reduced-precision reductions / matmul precision / deterministic algorithms / default dtype;
- ``function``: a function or class of torch, torch.nn.functional, torch.Tensor, torch.cuda (events,
  synchronisation, streams), the profiler, the clocks in `time`, or the oracle's own modules and classes replaced,
  or changed in place: its `__code__`, `__defaults__`, `__kwdefaults__`, closure cells or attribute dict (a
  swapped `__code__` keeps the function's identity; the snapshot keeps the objects themselves, not their ids);
- ``performance``: cudnn.benchmark, thread counts: a warning only (it changes speed, not results).

torch patches two of these itself when dynamo is first imported or first compiles (`torch.compile`, or
`torch.compiler.disable`, around the candidate's own code): `torch.manual_seed` wrapped by `torch._disable_dynamo`
and `torch.nn.Module.__init__` by dynamo's generation tagging. A replacement is torch's own (`_TORCH_OWN`) when it is
a function whose code comes from that file of the torch installed here, under that name, and whose closure holds
the very object it replaced: it behaves as the original does.
"""

from __future__ import annotations

import os
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


_EMPTY = object()
_PLAIN = (int, float, str, bool, bytes, type(None))


def _cells(f: types.FunctionType) -> tuple:
    out = []
    for c in f.__closure__ or ():
        try:
            out.append(c.cell_contents)
        except ValueError:  # an empty cell
            out.append(_EMPTY)
    return tuple(out)


def _fingerprint(v: Any) -> tuple:
    """What of `v` a candidate could change to bend the oracle's code in its process: the object, and for a
    function its code, defaults, keyword defaults, closure cells and attribute dict; for wrappers, what they wrap."""
    if isinstance(v, (staticmethod, classmethod)):
        return ("wrapped", v, _fingerprint(v.__func__))
    if isinstance(v, property):
        return ("property", v, *(_fingerprint(f) if f is not None else None for f in (v.fget, v.fset, v.fdel)))
    if isinstance(v, types.FunctionType):
        kw = v.__kwdefaults__
        return ("function", v, v.__code__, v.__defaults__, tuple(v.__defaults__ or ()), kw,
                tuple(sorted((kw or {}).items(), key=lambda kv: kv[0])), _cells(v), tuple(sorted(vars(v))))
    if isinstance(v, types.MethodType):
        return ("method", v.__self__, _fingerprint(v.__func__))
    return ("object", v)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, _PLAIN) and isinstance(b, _PLAIN):
        return type(a) is type(b) and a == b
    return a is b


def _members(prefix: str, obj: Any, out: dict[str, tuple], plain: bool = False, classes: bool = False) -> None:
    """Every callable (and, with `plain`, every plain value) of `obj`'s own namespace; with `classes`, the
    members of the classes defined there too (class attributes of the oracle's own classes)."""
    try:
        items = list(vars(obj).items())
    except TypeError:
        return
    for name, v in items:
        if name.startswith("__") and name not in ("__call__", "__init__", "__torch_function__", "__getattr__",
                                                    "__getattribute__", "__setattr__", "__enter__", "__exit__",
                                                    "__iter__", "__next__", "__array__"):
            continue
        if callable(v) or isinstance(v, (staticmethod, classmethod, property)):
            out[f"{prefix}.{name}"] = _fingerprint(v)
            if classes and isinstance(v, type) and getattr(v, "__module__", "") == getattr(obj, "__name__", None):
                _members(f"{prefix}.{name}", v, out)
        elif plain and name.isupper() and isinstance(v, _PLAIN + (tuple,)):  # the oracle's constants
            out[f"{prefix}.{name}"] = ("value", v)


def _functions() -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    _members("torch", torch, out)
    _members("torch.nn.functional", torch.nn.functional, out)
    _members("torch.Tensor", torch.Tensor, out)
    _members("torch._C.TensorBase", torch._C.TensorBase, out)
    _members("torch.nn.Module", torch.nn.Module, out)
    _members("torch.cuda", torch.cuda, out)
    _members("torch.cuda.Event", torch.cuda.Event, out)
    _members("torch.cuda.Stream", torch.cuda.Stream, out)
    _members("torch.autograd.profiler", torch.autograd.profiler, out)
    _members("torch.autograd.profiler.record_function", torch.autograd.profiler.record_function, out)
    _members("torch.profiler", torch.profiler, out)
    _members("torch.profiler.profile", torch.profiler.profile, out)
    _members("torch.autograd.profiler.profile", torch.autograd.profiler.profile, out)
    _members("torch.utils.cpp_extension", torch.utils.cpp_extension, out)
    for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "sleep",
                 "process_time", "thread_time"):
        out[f"time.{name}"] = _fingerprint(getattr(time, name))
    for modname, mod in list(sys.modules.items()):
        if modname.startswith("evaluator") and isinstance(mod, types.ModuleType):
            _members(modname, mod, out, plain=True, classes=True)
    return out


def snapshot() -> dict[str, Any]:
    return {"flags": _flags(), "functions": _functions(),
            "modules": sorted(n for n in sys.modules if n.startswith("evaluator"))}


# Ours: the loader replaces these on purpose before any candidate code runs, and snapshots are taken after.
_OURS = ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load")
# torch's own replacements (member: file under torch's folder, function name), made when dynamo loads or compiles
_TORCH_OWN = {"torch.manual_seed": ("_compile.py", "inner"),
              "torch.nn.Module.__init__": (os.path.join("_dynamo", "mutation_guard.py"), "patched_init")}
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _torch_own(name: str, before: tuple, after: tuple) -> bool:
    """`after` is torch's own wrapper of `before`'s object (see `_TORCH_OWN`)."""
    where = _TORCH_OWN.get(name)
    if where is None or len(after) < 2 or after[0] != "function" or len(before) < 2:
        return False
    fn, old = after[1], before[1]
    code = fn.__code__
    return (code.co_filename == os.path.join(_TORCH_DIR, where[0]) and code.co_name == where[1]
            and any(c is old for c in _cells(fn)))


def diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(tampering, warnings) between two snapshots, in words."""
    bad: list[str] = []
    warn: list[str] = []
    for k, v in before["flags"].items():
        now = after["flags"].get(k, v)
        if now != v:
            (warn if k in PERFORMANCE else bad).append(f"{k} changed from {v!r} to {now!r}")
    changed = [k for k, v in before["functions"].items()
               if k not in _OURS and k in after["functions"] and not _same(after["functions"][k], v)
               and not _torch_own(k, v, after["functions"][k])]
    removed = [k for k in before["functions"] if k not in after["functions"] and k not in _OURS]
    if changed:
        bad.append(f"replaced {', '.join(sorted(changed)[:6])}" + (f" and {len(changed) - 6} more" if len(changed) > 6
                                                                 else ""))
    if removed:
        bad.append(f"removed {', '.join(sorted(removed)[:6])}")
    return bad, warn
