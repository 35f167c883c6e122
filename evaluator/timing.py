"""Worker side, stage "time": how long one forward call takes.

CUDA: per call, the L2 cache is flushed (a buffer of twice its size is zeroed), the next of several input sets
is taken (rotation defeats caching by identity and keeps inputs out of the cache), then CUDA events bracket the
call: `start`, the call, `end_stream` on the current stream, `torch.cuda.synchronize()` (every stream), and
`end_device`. The stream time is used unless the device-wide time is longer by more than the measured sync
overhead plus a margin: then work escaped to another stream, the device-wide time (less the overhead) counts
and a warning says so. CPU: `time.perf_counter` around the call with the same warm-up, flush and rotation.
Median and IQR over `calls` calls, or fewer (at least 10) when `budget_s` is spent.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def stats(samples_ms: list[float]) -> dict:
    s = sorted(samples_ms)
    n = len(s)

    def q(p: float) -> float:
        if n == 1:
            return s[0]
        k = (n - 1) * p
        lo = int(k)
        hi = min(lo + 1, n - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {"median_ms": q(0.5), "iqr_ms": q(0.75) - q(0.25), "mean_ms": statistics.fmean(s), "min_ms": s[0],
            "calls": n}


class Flusher:
    def __init__(self, device: torch.device) -> None:
        if device.type == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or (64 << 20)
            nbytes = max(2 * l2, 32 << 20)
        else:
            nbytes = 8 << 20
        self.buf = torch.empty(nbytes // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buf.zero_()


def time_cuda(fn: Callable[..., Any], input_sets: list[list], device: torch.device, calls: int, budget_s: float,
              warmup: int, flush: Flusher) -> tuple[dict, list[str]]:
    warnings: list[str] = []
    with torch.no_grad():
        for i in range(warmup):
            fn(*input_sets[i % len(input_sets)])
        torch.cuda.synchronize(device)
        # sync overhead: the same bracket around nothing
        over = []
        for _ in range(20):
            a, b, c = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            a.record()
            b.record()
            torch.cuda.synchronize(device)
            c.record()
            torch.cuda.synchronize(device)
            over.append(a.elapsed_time(c) - a.elapsed_time(b))
        overhead = statistics.median(over)
        t_stream: list[float] = []
        t_device: list[float] = []
        t0 = time.perf_counter()
        for i in range(calls):
            inputs = input_sets[i % len(input_sets)]
            flush()
            start, end_s, end_d = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            start.record()
            fn(*inputs)
            end_s.record()
            torch.cuda.synchronize(device)
            end_d.record()
            torch.cuda.synchronize(device)
            t_stream.append(start.elapsed_time(end_s))
            t_device.append(start.elapsed_time(end_d) - overhead)
            if time.perf_counter() - t0 > budget_s and len(t_stream) >= 10:
                break
    ms, md = statistics.median(t_stream), statistics.median(t_device)
    if md > ms + max(0.02, 0.1 * ms):
        warnings.append(f"work escaped the current stream: device-wide time {md:.3f} ms vs {ms:.3f} ms on the "
                        "stream; the device-wide time is reported")
        return stats([max(d, s) for d, s in zip(t_device, t_stream)]), warnings
    return stats(t_stream), warnings


def time_cpu(fn: Callable[..., Any], input_sets: list[list], calls: int, budget_s: float, warmup: int,
             flush: Flusher) -> tuple[dict, list[str]]:
    samples: list[float] = []
    with torch.no_grad():
        for i in range(warmup):
            fn(*input_sets[i % len(input_sets)])
        t0 = time.perf_counter()
        for i in range(calls):
            inputs = input_sets[i % len(input_sets)]
            flush()
            a = time.perf_counter()
            fn(*inputs)
            samples.append((time.perf_counter() - a) * 1e3)
            if time.perf_counter() - t0 > budget_s and len(samples) >= 10:
                break
    return stats(samples), []


def time_fn(fn: Callable[..., Any], input_sets: list[list], device: torch.device, calls: int, budget_s: float,
            warmup: int, flush: Flusher) -> tuple[dict, list[str]]:
    if device.type == "cuda":
        return time_cuda(fn, input_sets, device, calls, budget_s, warmup, flush)
    return time_cpu(fn, input_sets, calls, budget_s, warmup, flush)


def input_sets_for(get_inputs: Callable[[], Any], seed: int, device: torch.device, max_sets: int = 4,
                   max_bytes: int = 2 << 30) -> list[list]:
    """Several fresh input sets to rotate through, as many as fit in `max_bytes` (at least one)."""
    from .verify import make_inputs

    sets = [make_inputs(get_inputs, seed + 1000, device, False)]
    size = sum(t.numel() * t.element_size() for x in sets[0] for t in _tensors(x))
    while len(sets) < max_sets and size * (len(sets) + 1) <= max_bytes:
        sets.append(make_inputs(get_inputs, seed + 1000 + len(sets), device, False))
    return sets


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return []
