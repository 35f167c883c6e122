"""Trusted (the referee): the reference profiled. Its top operators over a few calls, for profile-guided prompts
(`profile_call`; the roofline comes from roofline.py), and the events of its forward, for the kernel finding
(`summary_calls`: the evaluator classifies them)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from ..shared.profile_capture import capture, profiler
from ..shared.tree import leaves

SUMMARY_CALLS = 5  # profiled reference calls for the kernel finding (the least time of each operator is kept)


def tensor_bytes(x: Any) -> int:
    return sum(v.numel() * v.element_size() for _, v in leaves(x) if isinstance(v, torch.Tensor))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def profile_call(fn: Callable[..., Any], inputs: list, device: torch.device, iters: int = 3, top: int = 10) -> dict:
    """Top operators of `fn` over a few calls (plus the summary of the last profile)."""
    with torch.no_grad():
        out = fn(*inputs)  # warm-up outside the profile
        sync(device)
        with profiler(device.type == "cuda", record_shapes=True, with_flops=True) as prof:
            for _ in range(iters):
                fn(*inputs)
            sync(device)
    on_device = device.type == "cuda"
    groups: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    flops = 0.0
    kernel_total = 0.0
    for evt in prof.function_events:
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
    for evt in prof.function_events:
        flops += float(getattr(evt, "flops", 0) or 0)
    total = sum(v[0] for v in groups.values()) or 1e-9
    if on_device and kernel_total > total:
        total = kernel_total
    ops = [{"name": name, "device_ms": tt / 1e3 / iters, "share": tt / total, "calls": max(1, n // iters),
            "shapes": shapes[:200]}
           for (name, shapes), (tt, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]]
    return {"total_ms": total / 1e3 / iters, "ops": ops, "flops": flops / iters or None,
            "bytes_moved": float(sum(tensor_bytes(x) for x in inputs) + tensor_bytes(out))}


def summary_calls(model: Any, gen: list, device: torch.device) -> list[dict[str, Any]]:
    """What the reference's forward runs on the inputs `gen`: the events of SUMMARY_CALLS profiled calls."""
    calls = []
    with torch.no_grad():
        model(*gen)  # first-call costs outside the profile
        sync(device)
        for _ in range(SUMMARY_CALLS):  # the evaluator keeps each operator's least time: one call on a busy
            with profiler(device.type == "cuda") as prof:  # machine can be 100x slower than the next
                model(*gen)
                sync(device)
            calls.append(capture(prof, device.type == "cuda"))
    return calls
