"""Worker side, stage "profile" and the roofline.

Top operators: torch.profiler over a few calls; the top-level `aten::` ops (those whose parent is not an aten
op, so nothing is counted twice) grouped by name and input shapes, ranked by device time (the kernels they
launched) on CUDA, by CPU time on the CPU; share of the total. Roofline: bytes moved >= the bytes of all
inputs and outputs; FLOPs from the profiler's `with_flops` (matmul, conv, ...) where it knows them; the lower
bound on time is max(bytes / measured bandwidth, FLOPs / peak), and "% of limit" = bound / measured time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from .verify import flatten_outputs, sync


def tensor_bytes(x: Any) -> int:
    return sum(v.numel() * v.element_size() for _, v in flatten_outputs(x) if isinstance(v, torch.Tensor))


def profile_call(fn: Callable[..., Any], inputs: list, device: torch.device, iters: int = 3,
                 top: int = 10) -> dict:
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
            kernel_total += float(getattr(evt, "device_time", 0.0) or getattr(evt, "cuda_time", 0.0) or 0.0)
        if not evt.name.startswith("aten::"):
            continue
        parent = evt.cpu_parent
        if parent is not None and parent.name.startswith("aten::"):
            continue
        t = float(getattr(evt, "device_time_total", 0.0) if on_device else evt.cpu_time_total)
        g = groups[(evt.name, str(getattr(evt, "input_shapes", "") or ""))]
        g[0] += t
        g[1] += 1
    for evt in prof.events():
        flops += float(getattr(evt, "flops", 0) or 0)
    total = sum(v[0] for v in groups.values()) or 1e-9
    if on_device and kernel_total > total:
        total = kernel_total
    ops = [{"name": name, "device_ms": t / 1e3 / iters, "share": t / total, "calls": max(1, n // iters),
            "shapes": shapes[:200]}
           for (name, shapes), (t, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]]
    return {"total_ms": total / 1e3 / iters, "ops": ops, "flops": flops / iters or None,
            "bytes_moved": float(sum(tensor_bytes(x) for x in inputs) + tensor_bytes(out))}


def roofline(flops: float | None, bytes_moved: float | None, limits: dict) -> tuple[float | None, str]:
    bw = limits.get("bandwidth_gbs")
    peak = limits.get("peak_tflops")
    t_mem = bytes_moved / (bw * 1e9) * 1e3 if bw and bytes_moved else 0.0
    t_comp = flops / (peak * 1e12) * 1e3 if peak and flops else 0.0
    if not t_mem and not t_comp:
        return None, ""
    return max(t_mem, t_comp), ("compute" if t_comp > t_mem else "memory")
