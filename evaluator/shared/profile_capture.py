"""Shared: one call's torch.profiler events as plain data, for the evaluator to read (profiles.py).

The referee captures the reference's forward with it (a fact); the runner the candidate's (a claim: its process
can rewrite this code or the profiler, so the evaluator checks the events against the outside clock and against
what it knows itself: the kernels and operators the candidate's own sources define).

    {"on_device": bool, "ops": [{"name", "parent", "cpu_us", "dev_us", "ann", "kernels": [[name, us], ...]}],
     "device": [[name, us], ...], "truncated": bool}

`parent` is the index of the enclosing CPU event (-1 at the top); `ann` marks user annotations
(`record_function` ranges) as opposed to dispatched operators; `device` lists the device-side activity
(kernels, copies, memsets), without the GPU copies of annotations.
"""

from __future__ import annotations

from typing import Any

MAX_EVENTS = 20000


def profiler(on_device: bool, record_shapes: bool = False, with_flops: bool = False) -> Any:
    """The profiler both sides use: kineto through `torch.autograd.profiler.profile`, the engine `torch.profiler`
    wraps. The wrapper's first start asks whether inductor is loaded (`hasattr(torch, "_inductor")`), which imports
    inductor, dynamo and sympy: 1.3 s of every runner's start on the H200, for a setting (inductor's CUDA graphs)
    that changes nothing here."""
    import torch

    return torch.autograd.profiler.profile(use_cpu=True, use_device="cuda" if on_device else None, use_kineto=True,
                                           record_shapes=record_shapes, with_flops=with_flops)


def capture(prof: Any, on_device: bool) -> dict[str, Any]:
    events = list(prof.function_events)
    cpu = [e for e in events if not getattr(e, "is_async", False)
           and (getattr(e, "device_type", None) is None or "CPU" in str(e.device_type))]
    truncated = len(cpu) > MAX_EVENTS
    cpu = cpu[:MAX_EVENTS]
    index = {id(e): i for i, e in enumerate(cpu)}
    ops = []
    for e in cpu:
        parent = index.get(id(e.cpu_parent), -1) if e.cpu_parent is not None else -1
        kernels = [[str(k.name)[:300], float(k.duration)] for k in (getattr(e, "kernels", None) or [])][:64]
        ops.append({"name": str(e.name)[:300], "parent": parent, "cpu_us": float(e.cpu_time_total),
                    "dev_us": float(getattr(e, "device_time_total", 0.0) or 0.0) if on_device else 0.0,
                    "ann": bool(getattr(e, "is_user_annotation", False)), "kernels": kernels})
    device: list[list[Any]] = []
    if on_device:
        for e in events:
            if "CUDA" not in str(getattr(e, "device_type", "")) or getattr(e, "is_user_annotation", False):
                continue
            device.append([str(e.name)[:300], float(e.time_range.elapsed_us())])
            if len(device) >= MAX_EVENTS:
                truncated = True
                break
    return {"on_device": on_device, "ops": ops, "device": device, "truncated": truncated}
