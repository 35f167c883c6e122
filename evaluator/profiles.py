"""Evaluator side (torch-free): what ran during one profiled call, read from the events a worker captured
(shared/profile_capture.py) with what only the evaluator knows.

A call's time splits into the candidate's own code and library operators by class (opclass.py; data movement
apart). What counts as the candidate's own code is decided here, not by the process that ran it:

- on a GPU, device kernels whose names are `__global__` functions of the sources the evaluator itself built for
  this candidate (and, where its binaries' device code is readable, their exact names), never a kernel a library
  operator launched, nor one whose name the reference's own library kernels carry (a `__global__` named like a
  cuBLAS kernel, never launched, does not make cuBLAS's time the candidate's);
- on the CPU, time inside the candidate's extension functions (the runner's profiler ranges around them, labelled
  with a per-run nonce) and inside operators its own binaries register (`ns::op` named in its `.so`), less the
  library operators those call. A profiler annotation of the candidate's own, or a Python-level
  `torch.library` operator, is nobody's code: the library operators under it count as library. Where its binaries
  call library work past the dispatcher (`at::cpu::add_`, `cblas_sgemm`: no profiler event), or look code up at
  run time (`dlsym`), the time of its own functions holds that work too: the summary lists those calls (`direct_calls`) and none of it is its own.

The events themselves are still the candidate process's report (the runner runs the profiler): the evaluator
checks them against its own clock (`check_against_clock`) and the verdict says the profile is a claim.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .opclass import is_library, is_registered_op, kernel_ident, library_kernel_class, op_class

CALIBRATE = "calibrate"  # the runner's empty ranges: the profiler's own cost of a range, taken off each one


@dataclass
class Own:
    """What the candidate's own code is, as the evaluator knows it."""

    label_prefix: str = ""  # "klsp_ext_<nonce>::": the runner's ranges around its extension functions
    extensions: set[str] = field(default_factory=set)  # names of the extensions the evaluator built for it
    kernels: set[str] = field(default_factory=set)  # identifiers of the __global__ functions of its sources
    exact: set[str] = field(default_factory=set)  # demangled device entry names read from its binaries
    ops: set[str] = field(default_factory=set)  # "ns::op" operators its binaries register
    not_own: set[str] = field(default_factory=set)  # kernel identifiers library operators launch for the reference
    direct: list[str] = field(default_factory=list)  # library work its binaries call past the dispatcher


def _children(ops: list[dict]) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for i, o in enumerate(ops):
        if o.get("parent", -1) >= 0:
            kids[int(o["parent"])].append(i)
    return kids


def summarise(raw: dict[str, Any] | None, own: Own | None = None) -> dict[str, Any]:
    """{"custom_ms", "library_ms" {class: ms}, "data_ms", "kernels", "ops", "library_ops", "on_device"}"""
    own = own or Own()
    raw = raw or {}
    ops = [o for o in raw.get("ops") or [] if isinstance(o, dict)]
    if raw.get("on_device"):
        return _device(raw, ops, own)
    return _cpu(ops, own)


def _result(custom: float, library: dict[str, float], lib_ops: dict[str, float], kernels: dict, on_device: bool,
            extra: dict | None = None) -> dict[str, Any]:
    compute = {k: v for k, v in library.items() if k != "data"}
    ks = sorted(({"name": n[:160], "ms": d / 1e3, "custom": c} for (n, c), d in kernels.items()),
                key=lambda k: -k["ms"])[:20]
    all_ops = sorted(({"name": n, "ms": v, "class": op_class(n)} for n, v in lib_ops.items()), key=lambda o: -o["ms"])
    return {"custom_ms": custom, "library_ms": compute, "data_ms": library.get("data", 0.0), "kernels": ks,
            "ops": all_ops[:15], "library_ops": all_ops[:60], "on_device": on_device, **(extra or {})}


def _cpu(ops: list[dict], own: Own) -> dict[str, Any]:
    kids = _children(ops)
    library: dict[str, float] = defaultdict(float)
    lib_ops: dict[str, float] = defaultdict(float)
    custom = 0.0
    calib = [float(o["cpu_us"]) for o in ops if o.get("ann") and own.label_prefix
             and o["name"] == own.label_prefix + CALIBRATE]
    overhead = min(calib) if calib else 0.0
    mine: dict[tuple[str, bool], float] = defaultdict(float)

    def add_library(i: int) -> float:
        o = ops[i]
        library[op_class(o["name"])] += float(o["cpu_us"]) / 1e3
        lib_ops[o["name"]] += float(o["cpu_us"]) / 1e3
        return float(o["cpu_us"])

    def inner_library(i: int) -> float:
        total = 0.0
        for c in kids.get(i, []):
            total += add_library(c) if is_library(ops[c]["name"]) else inner_library(c)
        return total

    def is_own(o: dict) -> bool:
        if o.get("ann"):
            n = o["name"]
            return bool(own.label_prefix) and n.startswith(own.label_prefix) and n != own.label_prefix + CALIBRATE \
                and n[len(own.label_prefix):].split(".", 1)[0] in own.extensions
        return is_registered_op(o["name"]) and o["name"] in own.ops

    def visit(i: int) -> None:
        nonlocal custom
        o = ops[i]
        if is_library(o["name"]) and not o.get("ann"):
            add_library(i)
        elif o.get("ann") and own.label_prefix and o["name"] == own.label_prefix + CALIBRATE:
            return
        elif is_own(o):
            t = max(0.0, float(o["cpu_us"]) - inner_library(i) - overhead)
            custom += t / 1e3
            mine[(o["name"].removeprefix(own.label_prefix), True)] += t
        else:  # the candidate's own annotations, Python operators, ...: nobody's code; look inside
            for c in kids.get(i, []):
                visit(c)

    for i, o in enumerate(ops):
        if o.get("parent", -1) < 0:
            visit(i)
    return _result(custom, library, lib_ops, mine, False, {"direct_calls": list(own.direct)} if own.direct else None)


def _device(raw: dict[str, Any], ops: list[dict], own: Own) -> dict[str, Any]:
    kids = _children(ops)
    annotations = {o["name"] for o in ops if o.get("ann")}
    launched_by_library: set[str] = set()

    def under(i: int) -> None:
        for k in ops[i].get("kernels") or []:
            launched_by_library.add(str(k[0]))
        for c in kids.get(i, []):
            under(c)

    for i, o in enumerate(ops):
        if is_library(o["name"]) and not o.get("ann"):
            under(i)

    def mine(name: str) -> bool:
        if name in launched_by_library or _normal(name).startswith(_ATEN_NAMESPACES):
            return False
        ident = kernel_ident(name)
        if ident in own.not_own:
            return False
        return ident in own.kernels or _normal(name) in own.exact

    kernels: dict[tuple[str, bool], float] = defaultdict(float)
    custom = lib_kernels = 0.0
    for item in raw.get("device") or []:
        name, us = str(item[0]), float(item[1])
        if name in annotations or name.startswith(("klsp_", "ProfilerStep")):
            continue
        m = mine(name)
        kernels[(name, m)] += us
        if m:
            custom += us
        else:
            lib_kernels += us
    library: dict[str, float] = defaultdict(float)
    lib_ops: dict[str, float] = defaultdict(float)
    attributed = 0.0

    def visit(i: int) -> None:
        nonlocal attributed
        o = ops[i]
        if is_library(o["name"]) and not o.get("ann"):
            us = float(o.get("dev_us", 0.0))
            if us:
                library[op_class(o["name"])] += us / 1e3
                lib_ops[o["name"]] += us / 1e3
                attributed += us
            return
        for c in kids.get(i, []):
            visit(c)

    for i, o in enumerate(ops):
        if o.get("parent", -1) < 0:
            visit(i)
    rest = lib_kernels - attributed  # library kernels no ATen operator claimed (cuBLAS called from C++, ...)
    if rest > 1e-3:
        by_class: dict[str, float] = defaultdict(float)
        for (n, m), us in kernels.items():
            if not m:
                by_class[library_kernel_class(n)] += us
        total = sum(by_class.values()) or 1.0
        for cls, us in by_class.items():
            library[cls] += rest * us / total / 1e3
    return _result(custom / 1e3, library, lib_ops, kernels, True,
                   {"device_ms": (custom + lib_kernels) / 1e3})


_ATEN_NAMESPACES = ("at::", "c10::", "(anonymous namespace)::at::")


def _normal(name: str) -> str:
    n = " ".join(name.split())
    return n[5:] if n.startswith("void ") else n


def library_kernels(raw: dict[str, Any] | None) -> set[str]:
    """Identifiers of the device kernels in a (reference's) profile: library kernels by construction."""
    calls = (raw or {}).get("calls") or [raw or {}]
    return {kernel_ident(str(k[0])) for c in calls for k in (c or {}).get("device") or []}


def summarise_least(raw: dict[str, Any] | None, own: Own | None = None) -> dict[str, Any]:
    """A profile over several calls ({"calls": [...]}): each class's, operator's and the candidate's own code's
    least time (a call on a busy machine can take many times the next one's)."""
    calls = [summarise(c, own) for c in ((raw or {}).get("calls") or [raw or {}])]
    if not calls:
        return summarise(None)
    out = dict(calls[0])
    out["custom_ms"] = min(c["custom_ms"] for c in calls)
    classes = set().union(*(c["library_ms"] for c in calls))
    out["library_ms"] = {k: min(c["library_ms"].get(k, 0.0) for c in calls) for k in classes}
    out["data_ms"] = min(c["data_ms"] for c in calls)
    best: dict[str, dict] = {}
    for c in calls:
        for o in c.get("library_ops") or []:
            if o["name"] not in best or o["ms"] < best[o["name"]]["ms"]:
                best[o["name"]] = dict(o)
    ops = sorted(best.values(), key=lambda o: -o["ms"])
    out["ops"], out["library_ops"] = ops[:15], ops[:60]
    return out


def check_against_clock(summary: dict[str, Any], outside_ms: float) -> str:
    """"" when the profile fits the evaluator's own clock for the same call; else what does not."""
    custom = float(summary.get("custom_ms", 0.0))
    total = custom + sum(float(v) for v in (summary.get("library_ms") or {}).values()) + \
        float(summary.get("data_ms", 0.0))
    # kernels on several streams overlap on a GPU: their sum may exceed the call's wall time, a few times over
    over = 4.0 if summary.get("on_device") else 1.0
    if custom > over * outside_ms + 0.05 + 0.05 * outside_ms:
        return (f"the profile puts {custom:.4g} ms in the candidate's own code, but the whole call took "
                f"{outside_ms:.4g} ms by the evaluator's clock")
    if total > over * 1.25 * outside_ms + 0.2:
        return (f"the profile's parts add up to {total:.4g} ms, but the whole call took {outside_ms:.4g} ms by the "
                "evaluator's clock")
    return ""
